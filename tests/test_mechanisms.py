"""Mechanisms: calibration, compose-before-draw, and goodness of fit of every sampler."""

from __future__ import annotations

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
