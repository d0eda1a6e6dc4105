"""Accounting of the DP gradient methods (seed 003 ch. 4): hand-computed cases for each mode."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from dpopt.accounting import Budget, LaplaceEvent, make_accountant
from dpopt.exceptions import BudgetExceededError, InvalidParameterError, PrivacyClaimWarning
from dpopt.problems import DataBounds, ERMProblem
from dpopt.solvers.dp_calibration import (
    Segment,
    gdws_step_size,
    mag_step_size,
    masg_schedule,
    noise_aware_schedule,
    plan_noise,
    sampling_variance_term,
)
from dpopt.solvers.gradient import dp_gd, dp_gdws, dp_online_gdws
from dpopt.solvers.multistage import dp_mag

S1 = 4.0  # 2C with C = 2 (the thesis)


def _plan(budget, segs, *, calibration="paper", family="laplace", n=10_000, m=None, sampling=None, **kw):
    m = n if m is None else m
    if sampling is None:
        sampling = "full" if m == n else "without_replacement"
    return plan_noise(
        budget,
        segs,
        calibration=calibration,
        family=family,
        sensitivity_l1=S1,
        sensitivity_l2=S1,
        n_samples=n,
        batch_size=m,
        sampling=sampling,
        **kw,
    )


def test_paper_deterministic_is_eps_over_T_laplace():
    T = 1000
    plan = _plan(Budget(1.0), [Segment(T, 1 / T)])
    assert plan.family == "laplace"
    assert np.allclose(plan.step_scales, S1 * T / 1.0)  # b = S1 T / ε (4.17 with the β moved out)
    assert plan.privacy.epsilon == pytest.approx(1.0)
    assert plan.privacy.sound
    assert plan.privacy.true_epsilon == pytest.approx(1.0, rel=1e-6)
    assert plan.privacy.neighbouring == "replace_one"


def test_paper_sampling_lemma_misapplied_reports_true_epsilon():
    """Spec §7.1 P6: n = 10⁴, m = 1, T = 10³, ε = 1 → ε0 = 5 > 1; true ε ≈ 14.6."""
    n, m, T = 10_000, 1, 1000
    with pytest.warns(PrivacyClaimWarning) as rec:
        plan = _plan(Budget(1.0), [Segment(T, 1 / T, "sampled")], m=m)
    msgs = " ".join(str(w.message) for w in rec)
    assert "ε0" in msgs and "true" in msgs
    eps0 = n * 1.0 / (2 * m * T)
    assert eps0 == 5.0
    assert np.allclose(plan.step_scales, S1 / eps0)  # = 2mT S1/(nε), eq. (4.52) without β
    true = T * math.log1p(m / n * math.expm1(eps0))
    assert true == pytest.approx(14.63, abs=0.01)
    assert plan.privacy.epsilon == pytest.approx(1.0)  # the thesis's claim
    assert not plan.privacy.sound
    assert plan.privacy.true_epsilon == pytest.approx(true, rel=1e-3)


@pytest.mark.parametrize(("m", "true"), [(10, 0.6485), (100, 0.5125)])
def test_paper_sampling_lemma_valid_cases(m, true):
    n, T = 10_000, 1000
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyClaimWarning)
        plan = _plan(Budget(1.0), [Segment(T, 1 / T, "sampled")], m=m)
    assert plan.privacy.sound
    assert plan.privacy.verified_epsilon == pytest.approx(true, abs=2e-3)
    eps0 = n / (2 * m * T)
    assert plan.privacy.verified_epsilon == pytest.approx(T * math.log1p(m / n * math.expm1(eps0)), rel=1e-3)


def test_paper_thesis_rule():
    """Thm 4.1.4: 2(e^ε0 - 1) m/n = ε/T ⇒ ε0 = ln(1 + nε/(2mT))."""
    n, m, T = 10_000, 1, 1000
    plan = _plan(Budget(1.0), [Segment(T, 1 / T, "sampled")], m=m, paper_rule="thesis")
    eps0 = math.log(1 + n / (2 * m * T))
    assert np.allclose(plan.step_scales, S1 / eps0)
    assert plan.privacy.epsilon == pytest.approx(1.0)
    # the Thm 4.1.4 bound is valid (loose): the tight figure is below the claim
    assert plan.privacy.sound


def test_paper_full_first_step_is_charged_unamplified():
    """Spec P8: the first DP-SGDwS step uses all data with noise calibrated for a batch."""
    n, m, T = 10_000, 10, 1000
    segs = [Segment(1, 1 / T, "full_as_sampled"), Segment(T - 1, 1 / T, "sampled")]
    with pytest.warns(PrivacyClaimWarning) as rec:
        plan = _plan(Budget(1.0), segs, m=m)
    assert any("first" in str(w.message) for w in rec)
    eps0 = n / (2 * m * T)  # 0.5, unamplified on the first step
    true = eps0 + (T - 1) * math.log1p(m / n * math.expm1(eps0))
    assert plan.privacy.true_epsilon == pytest.approx(true, rel=1e-3)
    assert plan.privacy.true_epsilon > 1.0


def test_tight_laplace_subsampled_meets_budget_exactly():
    n, m, T, eps = 10_000, 1, 1000, 1.0
    plan = _plan(Budget(eps), [Segment(T, 1 / T, "sampled")], calibration="tight", m=m)
    eps0 = math.log1p(math.expm1(eps / T) * n / m)
    assert np.allclose(plan.step_scales, S1 / eps0)
    assert plan.privacy.epsilon == pytest.approx(eps, rel=1e-9)
    assert plan.privacy.sound
    # far more noise than the thesis's unsound calibration (b = 0.8)
    assert plan.step_scales[0] > 2 * 0.8


def test_tight_gaussian_full_matches_exact_composition():
    from dpopt.accounting import gaussian_sigma

    T = 500
    b = Budget(1.0, 1e-5)
    plan = _plan(b, [Segment(T, 1 / T)], calibration="tight", family="gaussian")
    exact = S1 * math.sqrt(T) * gaussian_sigma(1.0, 1e-5)
    assert plan.family == "gaussian"
    assert exact <= plan.step_scales[0] <= 1.02 * exact
    assert plan.privacy.epsilon <= 1.0
    assert plan.privacy.neighbouring == "replace_one"


def test_tight_gaussian_poisson_default_is_replace_one_with_n_public():
    T, n, m = 200, 2000, 20
    plan = _plan(
        Budget(1.0, 1e-5),
        [Segment(T, 1 / T, "sampled")],
        calibration="tight",
        family="gaussian",
        n=n,
        m=m,
        sampling="poisson",
    )
    assert plan.privacy.neighbouring == "replace_one"
    assert plan.privacy.accountant == "pld"
    assert plan.sensitivity == pytest.approx(S1)  # the replaced record's contributions differ by 2C
    assert 0.95 < plan.privacy.epsilon <= 1.0  # calibrated, not wasteful
    with pytest.raises(InvalidParameterError, match="replace-one"):
        _plan(Budget(1.0, 1e-5), [Segment(T, 1 / T, "sampled")], calibration="tight", family="gaussian",
              n=n, m=m, sampling="poisson", tight_accountant="rdp")  # fmt: skip


def test_tight_gaussian_poisson_declared_rate_is_add_remove_and_ignores_n():
    """Issue 12 §1: with a declared rate nothing depends on the data's size (n = 2000 vs 1999)."""
    T, m = 200, 20
    plans = [
        _plan(
            Budget(1.0, 1e-5),
            [Segment(T, 1 / T, "sampled")],
            calibration="tight",
            family="gaussian",
            n=n,
            m=m,
            sampling="poisson",
            sampling_rate=0.01,
        )
        for n in (2000, 1999)
    ]
    for plan in plans:
        assert plan.privacy.neighbouring == "add_remove"
        assert plan.sensitivity == pytest.approx(S1 / 2)
        assert 0.95 < plan.privacy.epsilon <= 1.0
    assert np.array_equal(plans[0].step_scales, plans[1].step_scales)
    lap = [
        _plan(
            Budget(1.0),
            [Segment(T, 1 / T, "sampled")],
            calibration="tight",
            family="laplace",
            n=n,
            m=m,
            sampling="poisson",
            sampling_rate=0.01,
        )
        for n in (2000, 1999)
    ]
    assert lap[0].privacy.neighbouring == "add_remove" and lap[0].sensitivity == pytest.approx(S1 / 2)
    assert np.array_equal(lap[0].step_scales, lap[1].step_scales)
    eps0 = math.log1p(math.expm1(1.0 / T) / 0.01)  # tight Poisson amplification inverted
    assert lap[0].step_scales[0] == pytest.approx((S1 / 2) / eps0)
    with pytest.raises(InvalidParameterError, match="sampling_rate"):
        _plan(Budget(1.0), [Segment(T, 1 / T, "full")], calibration="tight", family="laplace", n=2000,
              m=2000, sampling="full", sampling_rate=0.5)  # fmt: skip


def test_stagewise_split_sums_to_epsilon():
    """DP-MAG: ε/K per stage, ε/(K n_k) per step; b_k = S1 K n_k/ε (4.41)."""
    stages = masg_schedule(1000, 13.5)
    K = len(stages)
    segs = [Segment(nk, 1 / (K * nk)) for nk in stages]
    plan = _plan(Budget(0.5), segs)
    assert plan.privacy.epsilon == pytest.approx(0.5)
    scales = [plan.step_scales[sum(stages[:k])] for k in range(K)]
    assert np.allclose(scales, [S1 * K * nk / 0.5 for nk in stages])


def test_disjoint_buckets_parallel_composition():
    plan = _plan(Budget(0.8), [Segment(100, 1 / 100, "sampled")], m=10, n=1000, sampling="disjoint")
    assert np.allclose(plan.step_scales, S1 / 0.8)
    assert plan.privacy.epsilon == pytest.approx(0.8)


def test_plan_errors():
    with pytest.raises(InvalidParameterError, match="δ > 0"):
        _plan(Budget(1.0), [Segment(10, 0.1)], calibration="tight", family="gaussian")
    with pytest.raises(InvalidParameterError, match="Laplace"):
        _plan(Budget(1.0, 1e-5), [Segment(10, 0.1)], calibration="paper", family="gaussian")
    with pytest.raises(InvalidParameterError, match="sum to 1"):
        _plan(Budget(1.0), [Segment(10, 0.2)])


# ----------------------------------------------------------------------------- step sizes, schedules


def test_step_size_4_21_by_hand():
    T, beta, d, eps = 1000, 0.1, 10, 1.0
    S2 = 4.0
    expected = (
        0.25 * (T + 1) ** -0.5 * ((S2**2 / (4 * d) + 2 * S1**2 * T**2 / eps**2) * beta / (2 - beta)) ** -0.5
    )
    got = gdws_step_size(T, beta, d, 2 * (S1 * T / eps) ** 2, sampling_variance_term(S2, 10_000, 10_000))
    assert got == pytest.approx(expected, rel=1e-12)


def test_step_size_4_55_by_hand():
    T, beta, d, eps, n, m = 1000, 0.3, 10, 0.5, 10_000, 100
    S2 = 4.0
    samp = S2**2 * m * (1 - (m - 1) / (n - 1)) / (4 * d)
    noise = 2 * S1**2 * (2 * m * T / (n * eps)) ** 2
    expected = 0.25 * (T + 1) ** -0.5 * ((samp + noise) * beta / (2 - beta)) ** -0.5
    b = 2 * m * T * S1 / (n * eps)
    got = gdws_step_size(T, beta, d, 2 * b * b, sampling_variance_term(S2, m, n))
    assert got == pytest.approx(expected, rel=1e-12)


def test_step_size_4_43_and_4_59_by_hand():
    L, mu, d, eps, K, nk = 2700.0, 200.0, 10, 1.0, 6, 64
    beta = (1 - math.sqrt(mu / L)) / (1 + math.sqrt(mu / L))
    V = (16 / (4 * d) + 2 * S1**2 * (nk * K / eps) ** 2) / (1 - beta**2)
    expected = 1 / (2 ** (2 * 4) * 2 * L) * V**-0.5
    got = mag_step_size(3, L, beta, d, 2 * (S1 * K * nk / eps) ** 2, sampling_variance_term(4.0, 1, 1))
    assert got == pytest.approx(expected, rel=1e-12)
    # (4.59): stochastic stage, m = 10 of n = 10⁴
    n, m = 10_000, 10
    V = (16 * m * (1 - (m - 1) / (n - 1)) / (4 * d) + 2 * S1**2 * (2 * m * nk * K / (n * eps)) ** 2) / (
        1 - beta**2
    )
    b = 2 * m * K * nk * S1 / (n * eps)
    got = mag_step_size(3, L, beta, d, 2 * b * b, sampling_variance_term(4.0, m, n))
    assert got == pytest.approx(1 / (2**8 * 2 * L) * V**-0.5, rel=1e-12)


def test_masg_schedule_4_38():
    # κ = 13.5: √κ = 3.674; n1 = ⌈2√κ ln√κ⌉ = 10; n_k = 2^k ⌈√κ ln 8⌉ = 2^k·8
    assert masg_schedule(1000, 13.5) == (10, 32, 64, 128, 256, 510)
    assert sum(masg_schedule(10_000, 13.5)) == 10_000
    assert masg_schedule(5, 13.5) == (5,)


def test_noise_aware_schedule_is_well_defined():
    def V(n, K):  # large noise: the fixed point is far beyond T (spec N10)
        return 2 * (4 * K * n) ** 2

    sched = noise_aware_schedule(1000, 13.5, p=1, stage_variance=V)
    assert sum(sched) == 1000
    assert sched[0] == 10
    assert len(sched) == 2  # first stage + one long truncated stage


# ------------------------------------------------------------------------ through the solvers


def _data(n=400, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    w = rng.normal(size=d)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-X @ w)), 1.0, -1.0)
    return X, y


PROB = ERMProblem("logistic", DataBounds(feature_norm=1.0), l2_penalty=0.02)


def test_solver_paper_step_equals_4_21():
    X, y = _data()
    _, d = X.shape
    T, beta, eps = 50, 0.1, 1.0
    res = dp_gdws(PROB, X, y, budget=Budget(eps), rng=0, calibration="paper", iterations=T, smoothing=beta)
    # S2 = 2 sup‖∇ℓ_i‖₂ = 2 (declared ‖x‖₂ <= 1 is tighter than the clip C = 2); S1 = 2C = 4 (l1 clip)
    S2 = 2.0
    expected = (
        0.25 * (T + 1) ** -0.5 * ((S2**2 / (4 * d) + 2 * S1**2 * T**2 / eps**2) * beta / (2 - beta)) ** -0.5
    )
    assert res.parameters["step"] == pytest.approx(expected, rel=1e-12)
    assert res.parameters["noise_scales"] == [pytest.approx(S1 * T / eps)]
    assert res.calibration == "paper"


def test_solver_dpsgdws_paper_m1_warns_and_reports_true_epsilon():
    X, y = _data(n=1000)
    with pytest.warns(PrivacyClaimWarning):
        res = dp_gdws(
            PROB, X, y, budget=Budget(1.0), rng=0, calibration="paper", iterations=100, batch_size=1
        )
    # ε0 = nε/(2mT) = 5 > 1: true ε = 1 (full first step, unamplified) ... computed by the accountant
    eps0 = 5.0
    true = eps0 + 99 * math.log1p(1e-3 * math.expm1(eps0))
    assert res.privacy.epsilon == pytest.approx(1.0)
    assert res.privacy.true_epsilon == pytest.approx(true, rel=1e-3)
    assert res.method == "dp_sgdws"


def test_solver_tight_default_is_sound_and_within_budget():
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyClaimWarning)
        for bs in (None, 10):
            res = dp_gdws(PROB, X, y, budget=Budget(1.0), rng=0, iterations=50, batch_size=bs)
            assert res.privacy.sound and res.privacy.epsilon <= 1.0 + 1e-9
            assert res.parameters["noise"] == "laplace" and res.parameters["clip_norm"] == "l1"


def test_caller_accountant_is_charged_before_noise():
    X, y = _data()
    calls = []
    acct = make_accountant("basic", budget=Budget(1.5), neighbouring="replace_one")
    acct.compose(LaplaceEvent(1.0, 1.0))  # spends 1
    with pytest.raises(BudgetExceededError):
        dp_gd(PROB, X, y, budget=Budget(1.0), rng=0, iterations=20, accountant=acct,
              callback=lambda info: calls.append(info.nit))  # fmt: skip
    assert calls == []  # refused before any step
    assert acct.epsilon() == pytest.approx(1.0)
    acct2 = make_accountant("basic", budget=Budget(2.0), neighbouring="replace_one")
    dp_gd(PROB, X, y, budget=Budget(1.0), rng=0, iterations=20, accountant=acct2)
    assert acct2.epsilon() == pytest.approx(1.0)
    wrong = make_accountant("pld", neighbouring="add_remove")
    with pytest.raises(InvalidParameterError, match="replace_one"):
        dp_gd(PROB, X, y, budget=Budget(1.0), rng=0, iterations=20, accountant=wrong)


def test_data_derived_constants_void_the_guarantee():
    X, y = _data()
    with pytest.warns(PrivacyClaimWarning, match="P9"):
        res = dp_gdws(PROB, X, y, budget=Budget(1.0), rng=0, iterations=20, constants="data")
    assert math.isinf(res.privacy.true_epsilon)
    assert not res.privacy.sound


def test_dp_mag_total_is_epsilon_in_both_modes():
    X, y = _data()
    for cal in ("paper", "tight"):
        res = dp_mag(PROB, X, y, budget=Budget(0.5), rng=0, iterations=100, calibration=cal)
        assert res.privacy.epsilon == pytest.approx(0.5)
        assert res.privacy.sound
        K = len(res.parameters["stages"])
        assert res.parameters["stage_noise_scales"] == pytest.approx(
            [S1 * K * nk / 0.5 for nk in res.parameters["stages"]]
        )


def test_online_gdws_noise_is_per_bucket():
    X, y = _data(n=400)
    res = dp_online_gdws(PROB, X, y, budget=Budget(0.5), rng=0, bucket_size=10)
    assert res.iterations == 40
    assert res.parameters["noise_scales"] == [pytest.approx(S1 / 0.5)]
    assert res.privacy.epsilon == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("n", "m", "eps", "true_total"),
    [
        (10_000, 1, 1.0, 14.6),
        (10_000, 10, 1.0, 0.65),
        (10_000, 100, 1.0, 0.51),
        (60_000, 1, 1.0, 1.9e4),
        (60_000, 10, 1.0, 3.2),
        (10_000, 1, 0.5, 1.12),
    ],
)
def test_spec_p6_table(n, m, eps, true_total):
    """Every row of the worked table of spec §7.1 P6 (T = 10³, tight rule per step, basic composition)."""
    T = 1000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        plan = _plan(Budget(eps), [Segment(T, 1 / T, "sampled")], n=n, m=m)
    assert plan.privacy.epsilon == pytest.approx(eps)
    assert plan.privacy.true_epsilon == pytest.approx(max(true_total, eps), rel=0.03)
    assert plan.privacy.sound == (true_total <= eps)


def test_batched_gaussian_relation_is_the_callers_choice_and_says_which():
    """Default batches: replace-one (n public); a declared sampling_rate: add/remove, n not reported."""
    X, y = _data()
    G = Budget(1.0, 1e-5)
    ro = make_accountant("pld", neighbouring="replace_one")
    res = dp_gd(PROB, X, y, budget=G, rng=0, iterations=20, batch_size=10, accountant=ro)
    assert res.privacy.neighbouring == res.parameters["neighbouring"] == "replace_one"
    assert res.parameters["n_samples"] == X.shape[0] and len(ro.ledger) == 1
    assert any("replace-one" in n for n in res.privacy.notes)
    with pytest.raises(InvalidParameterError, match="replace_one"):
        dp_gd(PROB, X, y, budget=G, rng=0, iterations=20, batch_size=10,
              accountant=make_accountant("rdp", neighbouring="add_remove"))  # fmt: skip
    ar = make_accountant("pld", neighbouring="add_remove")
    res = dp_gd(PROB, X, y, budget=G, rng=0, iterations=20, batch_size=10, sampling_rate=0.05, accountant=ar)
    assert res.privacy.neighbouring == "add_remove" and res.parameters["n_samples"] is None
    assert res.parameters["sampling_rate"] == 0.05 and any("add/remove" in n for n in res.privacy.notes)
    assert ar.epsilon(1e-5) == pytest.approx(res.privacy.epsilon, rel=1e-3)  # PLD grids
    with pytest.raises(InvalidParameterError, match="batch_size"):
        dp_gd(PROB, X, y, budget=G, rng=0, iterations=20, sampling_rate=0.05)
    with pytest.raises(InvalidParameterError, match="paper"):
        dp_gd(PROB, X, y, budget=Budget(1.0), rng=0, iterations=20, batch_size=10, sampling_rate=0.05,
              calibration="paper")  # fmt: skip
    with pytest.raises(InvalidParameterError, match="sampling_rate"):
        dp_gdws(
            PROB, X, y, budget=G, rng=0, iterations=20, batch_size=10, sampling_rate=0.05, first_step="full"
        )
