"""Mechanisms: calibration, compose-before-draw, and goodness of fit of every sampler."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from scipy import stats

from dpopt.accounting import Budget, make_accountant
from dpopt.exceptions import BudgetExceededError, InvalidParameterError, PrivacyClaimWarning
from dpopt.mechanisms import (
    ExponentialMechanism,
    GaussianMechanism,
    L2LaplaceMechanism,
    LaplaceMechanism,
    ReportNoisyMin,
    gaussian_noise,
    l2_laplace_noise,
    laplace_noise,
)
from dpopt.randomness import SecureRNG

P_MIN = 1e-3  # KS p-value threshold: with fixed seeds, a correct sampler passes deterministically


def test_laplace_calibration_and_fit() -> None:
    mech = LaplaceMechanism.calibrate(0.5, sensitivity=2.0)
    assert mech.scale == pytest.approx(4.0)
    assert mech.variance == pytest.approx(32.0)
    out = mech.release(np.full(20_000, 3.0), rng=1)
    assert stats.kstest(out - 3.0, stats.laplace(scale=4.0).cdf).pvalue > P_MIN
    # a wrong scale is detected by the same test
    assert stats.kstest(out - 3.0, stats.laplace(scale=4.4).cdf).pvalue < P_MIN


def test_gaussian_calibration_methods() -> None:
    b = Budget(1.0, 1e-5)
    assert GaussianMechanism.calibrate(b).sigma == pytest.approx(3.7306, abs=1e-4)
    assert GaussianMechanism.calibrate(b, method="classic").sigma == pytest.approx(4.8448, abs=1e-4)
    with pytest.warns(PrivacyClaimWarning):
        mech = GaussianMechanism.calibrate(Budget(20.0, 1e-5), method="classic")
    acct = make_accountant("basic")
    mech.release(0.0, rng=0, accountant=acct)
    assert not acct.spent(1e-5).sound


def test_gaussian_fit() -> None:
    mech = GaussianMechanism(sigma=2.5, sensitivity=1.0)
    out = mech.release(np.zeros(20_000), rng=2)
    assert stats.kstest(out, stats.norm(scale=2.5).cdf).pvalue > P_MIN
    assert stats.kstest(out, stats.norm(scale=2.7).cdf).pvalue < P_MIN


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_secure_and_plain_agree_in_distribution(kind: str) -> None:
    n = 4000
    if kind == "laplace":
        mech: LaplaceMechanism | GaussianMechanism = LaplaceMechanism(scale=1.5)
    else:
        mech = GaussianMechanism(sigma=1.5)
    secure = mech.release(np.zeros(n), rng="secure")
    plain = mech.release(np.zeros(n), rng=3)
    assert stats.ks_2samp(secure, plain).pvalue > P_MIN
    # the secure output lies on a power-of-two grid
    grid = 2.0 ** np.floor(np.log2(1.5 / (2**10 * (n if kind == "laplace" else np.sqrt(n)))))
    assert np.all(np.mod(secure / grid, 1.0) == 0.0)


def test_raw_samplers() -> None:
    assert stats.kstest(laplace_noise(2.0, 10_000, rng=4), stats.laplace(scale=2.0).cdf).pvalue > P_MIN
    assert stats.kstest(gaussian_noise(0.5, 10_000, rng=5), stats.norm(scale=0.5).cdf).pvalue > P_MIN


def test_l2_laplace_noise_law() -> None:
    alpha, d = 3.0, 5
    v = l2_laplace_noise(alpha, d, rng=6, size=20_000)
    norms = np.linalg.norm(v, axis=1)
    # norm ~ Gamma(d, 1/α); directions uniform (mean ≈ 0)
    assert stats.kstest(norms, stats.gamma(a=d, scale=1 / alpha).cdf).pvalue > P_MIN
    assert np.abs(v.mean(axis=0)).max() < 4 * norms.std() / np.sqrt(len(v))
    mech = L2LaplaceMechanism.calibrate(1.5, sensitivity=0.5)
    assert mech.alpha == pytest.approx(3.0)
    assert mech.expected_norm(d) == pytest.approx(d / 3.0)
    assert np.mean(norms**2) == pytest.approx(mech.expected_squared_error(d), rel=0.03)


def test_report_noisy_min_probabilities() -> None:
    # Two candidates, scores 0 and 1, general scores: P(pick 0) has a closed form for Laplace noise.
    mech = ReportNoisyMin.calibrate(1.0, sensitivity=1.0)
    assert mech.scale == pytest.approx(2.0)
    rng = np.random.default_rng(7)
    picks = np.array([mech.release([0.0, 1.0], rng=rng) for _ in range(20_000)])
    # difference of two Laplace(b): P(L1 - L2 < 1) = 1 - 0.5 e^{-t}(1 + t/2)... with t = 1/b
    t = 1.0 / mech.scale
    p0 = 1 - 0.5 * np.exp(-t) * (1 + t / 2)
    assert abs(np.mean(picks == 0) - p0) < 4 * np.sqrt(p0 * (1 - p0) / len(picks))
    assert ReportNoisyMin.calibrate(1.0, monotone=True).scale == pytest.approx(1.0)
    assert ReportNoisyMin(1.0, maximize=True).release([0.0, 100.0], rng=0) == 1


def test_exponential_mechanism_frequencies() -> None:
    mech = ExponentialMechanism.calibrate(1.0, sensitivity=1.0)
    assert ExponentialMechanism.calibrate(2.0, monotone=True).event.epsilon == 2.0
    u = np.array([0.0, 1.0, 3.0])
    p = mech.probabilities(u)
    assert p == pytest.approx(np.exp(u / 2) / np.exp(u / 2).sum())
    rng = np.random.default_rng(8)
    picks = np.array([mech.release(u, rng=rng) for _ in range(20_000)])
    counts = np.bincount(picks, minlength=3)
    assert stats.chisquare(counts, p * len(picks)).pvalue > P_MIN


def test_release_composes_before_drawing() -> None:
    acct = make_accountant("pld", budget=Budget(1.0, 1e-5))
    mech = LaplaceMechanism.calibrate(0.6)
    mech.release(1.0, rng=0, accountant=acct)
    gen = np.random.default_rng(9)
    state = gen.bit_generator.state
    with pytest.raises(BudgetExceededError):
        mech.release(1.0, rng=gen, accountant=acct)
    assert gen.bit_generator.state == state  # no noise was drawn
    assert len(acct.ledger) == 1


def test_mechanism_validation() -> None:
    with pytest.raises(InvalidParameterError, match="scale"):
        LaplaceMechanism(scale=0.0)
    with pytest.raises(InvalidParameterError, match="NaN"):
        LaplaceMechanism(1.0).release([1.0, float("nan")], rng=0)
    with pytest.raises(InvalidParameterError, match="at least one"):
        ReportNoisyMin(1.0).release([], rng=0)
    with pytest.raises(InvalidParameterError, match="budget"):
        GaussianMechanism.calibrate(1.0)  # type: ignore[arg-type]


# ------------------------------------------------------------------ rng="secure" (issue 12 §3)
class _NoFloatSampler:
    """Stands in for the secure generator's numpy Generator: any use fails the test."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"secure path used the floating-point generator ({name})")


def _poisoned_secure(seed: int) -> SecureRNG:
    g = SecureRNG(randbelow=random.Random(seed).randrange)  # reproducible, not secure: tests only
    g.generator = _NoFloatSampler()  # type: ignore[assignment]
    return g


@pytest.fixture
def no_float_samplers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Module-level float samplers (random.*, numpy.random.*) raise if called."""

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("secure path called a floating-point sampler")

    for name in ("random", "uniform", "gauss", "normalvariate", "expovariate", "gammavariate", "choice"):
        monkeypatch.setattr(random, name, boom)
    for name in ("random", "normal", "laplace", "exponential", "gamma", "gumbel", "standard_normal",
                 "standard_exponential", "standard_gamma", "uniform", "choice"):  # fmt: skip
        monkeypatch.setattr(np.random, name, boom)


def test_secure_path_never_calls_a_float_sampler(no_float_samplers: None) -> None:
    acct = make_accountant("rdp")
    g = _poisoned_secure(10)
    x = LaplaceMechanism(1.0).release(np.arange(5.0), rng=g, accountant=acct)
    y = GaussianMechanism(1.0).release(np.arange(5.0), rng=g, accountant=acct)
    assert x.shape == y.shape == (5,) and np.all(np.isfinite(x)) and np.all(np.isfinite(y))
    assert laplace_noise(1.0, 3, rng=g).shape == gaussian_noise(1.0, 3, rng=g).shape == (3,)
    scores = [3.0, 0.1, 2.0, 0.1 + 1e-9]
    for mech in (ReportNoisyMin(1.0), ReportNoisyMin(1.0, monotone=True, maximize=True)):
        assert 0 <= mech.release(scores, rng=g, accountant=acct) < 4
    for em in (ExponentialMechanism(1.0), ExponentialMechanism(2.0, sensitivity=0.3, monotone=True)):
        assert 0 <= em.release(scores, rng=g, accountant=acct) < 4
    assert len(acct.ledger) == 6  # every release composed its (unchanged) event
    # the l2-Laplace mechanism has no exact sampler: refused, and nothing is composed
    with pytest.raises(InvalidParameterError, match=r"secure.*GaussianMechanism"):
        L2LaplaceMechanism(1.0).release(np.zeros(3), rng=g, accountant=acct)
    with pytest.raises(InvalidParameterError, match="secure"):
        L2LaplaceMechanism(1.0).release(np.zeros(3), rng="secure", accountant=acct)
    with pytest.raises(InvalidParameterError, match="secure"):
        l2_laplace_noise(1.0, 3, rng="secure")
    assert len(acct.ledger) == 6


def test_secure_string_rng_uses_the_exact_samplers(
    no_float_samplers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rng="secure" builds a SecureRNG; its numpy generator must stay unused
    source = random.Random(11)

    def init(self: SecureRNG, randbelow: object = None) -> None:
        self.generator = _NoFloatSampler()  # type: ignore[assignment]
        self.randbelow = source.randrange

    monkeypatch.setattr(SecureRNG, "__init__", init)
    assert 0 <= ExponentialMechanism(1.0).release([0.0, 1.0], rng="secure") < 2
    assert 0 <= ReportNoisyMin(1.0).release([0.0, 1.0], rng="secure") < 2
    assert np.isfinite(LaplaceMechanism(1.0).release(0.5, rng="secure"))


def test_secure_exponential_mechanism_frequencies() -> None:
    # utilities on the grid (Δ = 1: grid 2^-10, Δ_g = Δ): the law is exactly the exponential mechanism
    mech = ExponentialMechanism.calibrate(1.0, sensitivity=1.0)
    u = np.array([0.0, 1.0, 3.0, 2.5])
    g = _poisoned_secure(12)
    picks = np.array([mech.release(u, rng=g) for _ in range(6_000)])
    counts = np.bincount(picks, minlength=4)
    assert stats.chisquare(counts, mech.probabilities(u) * len(picks)).pvalue > P_MIN
    # power: the law of a planted bug (sensitivity understated by half, i.e. ε doubled) is rejected
    planted = ExponentialMechanism(2.0, sensitivity=1.0).probabilities(u)
    assert stats.chisquare(counts, planted * len(picks)).pvalue < P_MIN
    # off-grid utilities and sensitivity: snapping keeps the law within the grid's slack
    mech2 = ExponentialMechanism(1.0, sensitivity=0.7)
    u2 = np.array([0.1234567, 1.0, 0.5])
    picks2 = np.array([mech2.release(u2, rng=g) for _ in range(6_000)])
    counts2 = np.bincount(picks2, minlength=3)
    assert stats.chisquare(counts2, mech2.probabilities(u2) * len(picks2)).pvalue > P_MIN


def test_secure_report_noisy_min_probabilities() -> None:
    mech = ReportNoisyMin.calibrate(1.0, sensitivity=1.0)  # b = 2
    g = _poisoned_secure(13)
    picks = np.array([mech.release([0.0, 1.0], rng=g) for _ in range(6_000)])
    t = 1.0 / mech.scale
    p0 = 1 - 0.5 * np.exp(-t) * (1 + t / 2)  # continuous law; the 2^-10 grid moves it by < 1e-3
    tol = 4 * np.sqrt(p0 * (1 - p0) / len(picks)) + 1e-3
    assert abs(np.mean(picks == 0) - p0) < tol
    # power: the pick rate of a planted bug (noise scale halved, ε doubled) is refuted by the sample
    t_bad = 2 * t
    assert abs(np.mean(picks == 0) - (1 - 0.5 * np.exp(-t_bad) * (1 + t_bad / 2))) > tol
    # maximize, and ties are broken uniformly (equal scores: each wins half the time)
    picks_max = [ReportNoisyMin(1.0, maximize=True).release([0.0, 100.0], rng=g) for _ in range(50)]
    assert set(picks_max) == {1}
    ties = np.array([ReportNoisyMin(1e-3).release([5.0, 5.0], rng=g) for _ in range(2000)])
    assert abs(ties.mean() - 0.5) < 4 * np.sqrt(0.25 / len(ties))


def test_secure_selection_rejects_values_beyond_the_grid() -> None:
    g = _poisoned_secure(14)
    with pytest.raises(InvalidParameterError, match="utilities: too large"):
        ExponentialMechanism(1.0).release([0.0, 1e16], rng=g)
    with pytest.raises(InvalidParameterError, match="scores: too large"):
        ReportNoisyMin(1.0).release([0.0, 1e16], rng=g)


def test_secure_frank_wolfe_selection_uses_the_exact_grid_rnm(
    no_float_samplers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # private Frank-Wolfe's report-noisy-min goes through the snapped grid RNM in secure mode
    import dpopt.mechanisms as mechanisms
    from dpopt.problems import DataBounds, ERMProblem, L1Ball
    from dpopt.solvers import minimize

    calls = []
    grid_rnm = mechanisms._secure_report_noisy_min

    def counting(*args: Any) -> int:
        calls.append(args[2])  # the declared sensitivity reaches the grid analysis
        return grid_rnm(*args)

    monkeypatch.setattr(mechanisms, "_secure_report_noisy_min", counting)

    data = np.random.default_rng(0)
    X = np.clip(data.standard_normal((200, 6)), -1, 1)
    y = np.clip(X @ np.array([0.5, -0.3, 0, 0, 0.2, 0]), -1, 1)
    prob = ERMProblem("squared", DataBounds(1.0, "linf", 1.0), L1Ball(6, 1.0))
    res = minimize(
        prob, X, y, method="frank_wolfe", budget=Budget(1.0, 1e-6), rng=_poisoned_secure(15), iterations=20
    )
    assert np.abs(res.solution).sum() <= 1.0 + 1e-12 and np.isfinite(res.privacy.epsilon)
    assert len(calls) == res.iterations - 1 and all(c > 0 for c in calls)
