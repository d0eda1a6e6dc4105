"""Contract tests of the DP gradient methods: noise off → known rates; budget; reproducibility."""

from __future__ import annotations

import itertools
import math
import warnings
from typing import Any

import numpy as np
import pytest
from scipy.optimize import minimize as sp_minimize

from dpopt.accounting import Budget
from dpopt.exceptions import InvalidParameterError, MissingDataBoundsError, PrivacyClaimWarning
from dpopt.problems import DataBounds, ERMProblem
from dpopt.solvers import OptimizeResult
from dpopt.solvers.gradient import (
    dp_gd,
    dp_gdws,
    dp_heavy_ball,
    dp_nesterov,
    dp_online_gdws,
    surrogate_condition_number,
)
from dpopt.solvers.multistage import dp_mag, dp_masg

# --------------------------------------------------------------------------- strongly convex quadratic


def _quadratic(n=200, d=4, lam=0.05, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.array([1.0, 0.6, 0.3, 0.1])[:d]
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.clip(X @ rng.normal(size=d) + 0.1 * rng.normal(size=n), -1, 1)
    prob = ERMProblem("squared", DataBounds(feature_norm=1.0, label_bound=1.0), l2_penalty=lam)
    H = X.T @ X / n + lam * np.eye(d)
    ev = np.linalg.eigvalsh(H)
    xstar = np.linalg.solve(H, X.T @ y / n)
    return prob, X, y, ev, xstar


def _path(fn, *args, **kw):
    xs = []
    res = fn(*args, callback=lambda info: xs.append(info.x.copy()), **kw)
    return res, np.array(xs)


def _rho(matrices):
    return max(max(abs(np.linalg.eigvals(M))) for M in matrices)


QKW = {"budget": "non-private", "rng": 0, "clip": 1e6, "grad_scale": "mean"}


def test_gd_rate_on_quadratic():
    prob, X, y, ev, xs = _quadratic()
    mu, L = ev[0], ev[-1]
    T = 200
    res, path = _path(dp_gd, prob, X, y, iterations=T, step="inverse_L", smoothness=L,
                      strong_convexity=mu, **QKW)  # fmt: skip
    err = np.linalg.norm(path - xs, axis=1)
    e0 = np.linalg.norm(xs)
    bound = (1 - mu / L) ** np.arange(1, T + 1) * e0
    assert np.all(err <= bound * (1 + 1e-9) + 1e-13)
    assert res.privacy.epsilon == math.inf


@pytest.mark.parametrize("method", ["hb", "nag", "gdws"])
def test_momentum_rates_on_quadratic(method):
    prob, X, y, ev, xs = _quadratic()
    mu, L = ev[0], ev[-1]
    kappa = L / mu
    T = 300
    alpha = 1 / L
    if method == "hb":
        beta = ((math.sqrt(kappa) - 1) / (math.sqrt(kappa) + 1)) ** 2
        mats = [np.array([[1 + beta - alpha * lam, -beta], [1, 0]]) for lam in ev]
        _, path = _path(dp_heavy_ball, prob, X, y, iterations=T, smoothness=L, strong_convexity=mu, **QKW)
    elif method == "nag":
        beta = (math.sqrt(kappa) - 1) / (math.sqrt(kappa) + 1)
        mats = [np.array([[(1 + beta) * (1 - alpha * lam), -beta * (1 - alpha * lam)], [1, 0]]) for lam in ev]
        _, path = _path(dp_nesterov, prob, X, y, iterations=T, smoothness=L, strong_convexity=mu, **QKW)
    else:  # DP-GDwS = heavy ball with step αβ and momentum 1 - β
        b = 0.3
        a = 1.5 / L
        mats = [np.array([[1 + (1 - b) - a * b * lam, -(1 - b)], [1, 0]]) for lam in ev]
        _, path = _path(dp_gdws, prob, X, y, iterations=T, smoothing=b, step=a, **QKW)
    rho = _rho(mats)
    assert rho < 1
    err = np.linalg.norm(path - xs, axis=1)
    t = np.arange(1, T + 1)
    assert np.all(err <= 4 * (t + 1) * rho**t * np.linalg.norm(xs) + 1e-12)


def test_accelerated_beats_gd_on_ill_conditioned_quadratic():
    prob, X, y, ev, xs = _quadratic(lam=0.002)
    mu, L = ev[0], ev[-1]
    kw = dict(iterations=150, smoothness=L, strong_convexity=mu, **QKW)
    gd = dp_gd(prob, X, y, step="inverse_L", **kw).solution
    nag = dp_nesterov(prob, X, y, **kw).solution
    assert np.linalg.norm(nag - xs) < 0.1 * np.linalg.norm(gd - xs)


@pytest.mark.parametrize("fn", [dp_masg, dp_mag])
def test_masg_stage_bound_on_quadratic(fn):
    """Noise off, M-ASG's bound (4.39): f(x^k) - f* <= 2·2^{-(p+1)(k-1)} e^{-n_1/√κ} (f(x0) - f*)."""
    prob, X, y, ev, xs = _quadratic()
    mu, L = ev[0], ev[-1]
    kw = {"step": "masg", "momentum": "stage"} if fn is dp_mag else {}
    res, path = _path(fn, prob, X, y, iterations=1000, smoothness=L, strong_convexity=mu, **kw, **QKW)
    stages = res.parameters["stages"]
    f = lambda x: prob.objective(x, X, y)  # noqa: E731
    gap0 = f(np.zeros(4)) - f(xs)
    ends = np.cumsum(stages) - 1
    for k, t in enumerate(ends, start=1):
        bound = 2 * 2.0 ** (-2 * (k - 1)) * math.exp(-stages[0] / math.sqrt(L / mu)) * gap0
        assert f(path[t]) - f(xs) <= bound * (1 + 1e-9) + 1e-15


def test_masg_star_without_noise_is_one_nesterov_stage():
    prob, X, y, ev, xs = _quadratic()
    mu, L = ev[0], ev[-1]
    f = lambda x: prob.objective(x, X, y)  # noqa: E731
    gap = f(np.zeros(4)) - f(xs)
    res = dp_masg(prob, X, y, iterations=500, variant="m-asg*", smoothness=L, strong_convexity=mu,
                  initial_gap=gap, **QKW)  # fmt: skip
    assert res.parameters["stages"] == [500]
    assert np.linalg.norm(res.solution - xs) < 1e-10


# --------------------------------------------------------------------------- logistic regression


def _logistic(n=300, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    w = 2 * rng.normal(size=d)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-X @ w)), 1.0, -1.0)
    return X, y


LOGI = ERMProblem("logistic", DataBounds(feature_norm=1.0), l2_penalty=0.1)


@pytest.fixture(scope="module")
def logistic_reference():
    X, y = _logistic()
    r = sp_minimize(lambda t: LOGI.objective(t, X, y), np.zeros(X.shape[1]),
                    jac=lambda t: LOGI.gradient(t, X, y), method="L-BFGS-B",
                    options={"gtol": 1e-13, "ftol": 1e-16})  # fmt: skip
    return X, y, r.x


LOGISTIC_CASES: dict[str, tuple[Any, dict[str, Any]]] = {
    "gd": (dp_gd, {"step": "inverse_L"}),
    "hb": (dp_heavy_ball, {}),
    "nag": (dp_nesterov, {}),
    "gdws": (dp_gdws, {"step": "inverse_L", "smoothing": 0.5}),
    "masg_star": (dp_masg, {"variant": "m-asg*"}),
}


@pytest.mark.parametrize("case", sorted(LOGISTIC_CASES))
@pytest.mark.parametrize("grad_scale", ["sum", "mean"])
def test_noise_off_converges_to_nonprivate_optimum_logistic(case, grad_scale, logistic_reference):
    X, y, xstar = logistic_reference
    fn, kw = LOGISTIC_CASES[case]
    res = fn(LOGI, X, y, budget="non-private", rng=0, iterations=600, clip=None, grad_scale=grad_scale, **kw)
    assert isinstance(res, OptimizeResult)
    assert np.linalg.norm(res.solution - xstar) < 1e-6
    assert res.calibration == "none" and math.isinf(res.privacy.epsilon)


@pytest.mark.parametrize(("fn", "kw"), [(dp_gdws, {"safeguard": True}), (dp_masg, {}),
                                        (dp_mag, {"step": "masg", "momentum": "stage"})])  # fmt: skip
def test_noise_off_safeguarded_and_multistage_logistic(fn, kw, logistic_reference):
    X, y, xstar = logistic_reference
    res = fn(LOGI, X, y, budget="non-private", rng=0, iterations=1000, clip=None, **kw)
    assert np.linalg.norm(res.solution - xstar) < 1e-4
    if fn is dp_gdws:
        assert res.parameters["step_capped"]  # the noise-free (4.21) step exceeds 1/L (spec N8)


def test_stochastic_noise_off_gets_close(logistic_reference):
    X, y, xstar = logistic_reference
    res = dp_gdws(LOGI, X, y, budget="non-private", rng=0, iterations=3000, batch_size=100, clip=None,
                  step=0.01, smoothing=0.1)  # fmt: skip
    assert np.linalg.norm(res.solution - xstar) < 0.1 * np.linalg.norm(xstar)


# --------------------------------------------------------------------------- privacy ≤ budget, seeds

ALL: dict[str, tuple[Any, dict[str, Any]]] = {
    "dp_gd": (dp_gd, {}),
    "dp_heavy_ball": (dp_heavy_ball, {}),
    "dp_nesterov": (dp_nesterov, {}),
    "dp_gdws": (dp_gdws, {}),
    "dp_masg": (dp_masg, {}),
    "dp_masg_star": (dp_masg, {"variant": "m-asg*"}),
    "dp_mag": (dp_mag, {}),
}


@pytest.mark.parametrize("name", sorted(ALL))
@pytest.mark.parametrize("batch_size", [None, 10])
@pytest.mark.parametrize(("calibration", "delta"), [("tight", 0.0), ("tight", 1e-5), ("paper", 0.0)])
def test_privacy_spent_within_budget(name, batch_size, calibration, delta, logistic_reference):
    X, y, _ = logistic_reference
    fn, kw = ALL[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        res = fn(LOGI, X, y, budget=Budget(1.0, delta), rng=1, iterations=60, batch_size=batch_size,
                 calibration=calibration, **kw)  # fmt: skip
    assert res.privacy.epsilon <= 1.0 * (1 + 1e-9)
    assert np.all(np.isfinite(res.solution))
    if calibration == "tight":
        assert res.privacy.sound
        assert res.parameters["noise"] == ("laplace" if delta == 0 else "gaussian")
    # n = 300, m = 10, T = 60: ε0 = nε/(2mT) = 0.25 <= 1, so even the paper claim holds here
    assert res.privacy.true_epsilon <= 1.0 * (1 + 1e-6) or (calibration == "paper" and batch_size)


@pytest.mark.parametrize("name", sorted(ALL))
def test_same_seed_same_path(name, logistic_reference):
    X, y, _ = logistic_reference
    fn, kw = ALL[name]
    runs = [_path(fn, LOGI, X, y, budget=Budget(1.0), rng=seed, iterations=40, batch_size=10, **kw)[1]
            for seed in (7, 7, 8)]  # fmt: skip
    assert np.array_equal(runs[0], runs[1])
    assert not np.allclose(runs[0], runs[2])


def test_gdws_beta_one_is_bit_identical_to_gd(logistic_reference):
    """Spec §9 test 8."""
    X, y, _ = logistic_reference
    kw = {"budget": Budget(1.0), "rng": 3, "iterations": 50, "grad_scale": "sum"}
    a = dp_gdws(LOGI, X, y, smoothing=1.0, step=1e-4, **kw)
    b = dp_gd(LOGI, X, y, step=1e-4, **kw)
    assert np.array_equal(a.solution, b.solution)


def test_gdws_equals_heavy_ball_with_rescaled_noise(logistic_reference):
    X, y, _ = logistic_reference
    beta, alpha = 0.2, 2e-3
    kw = {"budget": Budget(1.0), "rng": 5, "iterations": 80}
    _, p1 = _path(dp_gdws, LOGI, X, y, smoothing=beta, step=alpha, **kw)
    _, p2 = _path(dp_heavy_ball, LOGI, X, y, step=alpha * beta, momentum=1 - beta, **kw)
    assert np.allclose(p1, p2, rtol=1e-9, atol=1e-12)


def test_secure_rng_runs(logistic_reference):
    X, y, _ = logistic_reference
    res = dp_gdws(LOGI, X, y, budget=Budget(1.0), rng="secure", iterations=10, batch_size=10)
    assert np.all(np.isfinite(res.solution))
    res = dp_gd(LOGI, X, y, budget=Budget(1.0, 1e-5), rng="secure", iterations=10)
    assert np.all(np.isfinite(res.solution))


# --------------------------------------------------------------------------- clipping and sensitivity


@pytest.mark.parametrize("clip_norm", ["l1", "l2"])
def test_clipping_bounds_sensitivity(clip_norm):
    from dpopt.solvers.gradient_driver import _setup
    from dpopt.solvers.gradient_options import GradientOptions

    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 6))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True)) / 3  # ‖x‖₂ <= 3
    y = np.where(rng.random(50) < 0.5, 1.0, -1.0)
    prob = ERMProblem("logistic", DataBounds(feature_norm=3.0), l2_penalty=0.0)
    opts = GradientOptions(noise="laplace", clip=0.5, clip_norm=clip_norm, grad_scale="sum")
    kw = dict(budget="non-private", rng=0, calibration="tight", options=opts)
    ctx = _setup(prob, X, y, **kw)
    x = rng.normal(size=6) * 3
    for i in range(50):
        g = ctx.clipped_sum(x, np.array([i]))
        assert np.linalg.norm(g, 1 if clip_norm == "l1" else 2) <= 0.5 * (1 + 1e-12)
    # replace record 0 by an adversarial one: the sum changes by at most 2C in the clip norm
    X2, y2 = X.copy(), y.copy()
    X2[0] = 3.0 * np.ones(6) / np.sqrt(6)
    y2[0] = -y[0]
    ctx2 = _setup(prob, X2, y2, **kw)
    diff = ctx.clipped_sum(x, None) - ctx2.clipped_sum(x, None)
    S = 2 * (ctx.bound_l1 if clip_norm == "l1" else ctx.bound_l2)
    assert np.linalg.norm(diff, 1 if clip_norm == "l1" else 2) <= S * (1 + 1e-12)
    if clip_norm == "l2":
        assert ctx.bound_l1 == pytest.approx(0.5 * math.sqrt(6))  # l2 clip ⇒ l1 bound C√d (spec P2)


# --------------------------------------------------------------------------- stochastic, online, errors


@pytest.mark.parametrize("m", [1, 10, 100, 1000])
def test_minibatch_sizes(m):
    rng = np.random.default_rng(2)
    n = 2000
    X = rng.normal(size=(n, 5))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    for delta in (0.0, 1e-5) if m in (10, 100) else (0.0,):
        res = dp_gdws(LOGI, X, y, budget=Budget(1.0, delta), rng=0, iterations=30, batch_size=m)
        assert res.parameters["batch_size"] == m and res.method == "dp_sgdws"
        assert res.parameters["sampling"] == ("without_replacement" if delta == 0 else "poisson")
        assert res.privacy.epsilon <= 1.0 + 1e-9


def test_online_gdws_uses_each_record_once(logistic_reference):
    X, y, _ = logistic_reference
    res = dp_online_gdws(LOGI, X, y, budget="non-private", rng=0, bucket_size=10, step=0.05, smoothing=0.5)
    assert res.iterations == 30
    res2 = dp_online_gdws(LOGI, X, y, budget=Budget(1.0, 1e-5), rng=0, bucket_size=10)
    assert res2.parameters["noise"] == "gaussian" and res2.privacy.epsilon <= 1.0


def test_errors(logistic_reference):
    X, y, _ = logistic_reference
    with pytest.raises(MissingDataBoundsError):
        dp_gd(ERMProblem("logistic"), X, y, budget=Budget(1.0), rng=0)
    with pytest.raises(InvalidParameterError, match="δ > 0"):
        dp_gd(LOGI, X, y, budget=Budget(1.0), rng=0, noise="gaussian")
    with pytest.raises(InvalidParameterError, match="Laplace"):
        dp_gd(LOGI, X, y, budget=Budget(1.0, 1e-5), rng=0, noise="gaussian", calibration="paper")
    with pytest.raises(InvalidParameterError, match="smoothing"):
        dp_gdws(LOGI, X, y, budget=Budget(1.0), rng=0, smoothing=0.0)
    with pytest.raises(InvalidParameterError, match="budget"):
        dp_gd(LOGI, X, y, budget=None, rng=0)


# --------------------------------------------------------------------------- no ridge: the surrogate

MOMENTUM: dict[str, tuple[Any, dict[str, Any]]] = {
    "dp_heavy_ball": (dp_heavy_ball, {}),
    "dp_nesterov": (dp_nesterov, {}),
    "dp_masg": (dp_masg, {}),
    "dp_masg_star": (dp_masg, {"variant": "m-asg*"}),
    "dp_mag": (dp_mag, {}),
    "dp_smag": (dp_mag, {"batch_size": 20}),
}


def test_surrogate_condition_number_is_public_and_grows_with_T():
    ks = [surrogate_condition_number(T) for T in (1, 2, 5, 50, 1000, 10**5)]
    assert ks[0] == ks[1] == 4.0  # floor: the momentum formulas need κ > 1
    assert all(a <= b for a, b in itertools.pairwise(ks)) and ks[-1] > 1e6
    assert surrogate_condition_number(1000) == pytest.approx((1000 / (2 * math.log(1001))) ** 2)


@pytest.mark.parametrize("case", sorted(MOMENTUM))
def test_unpenalised_noise_off_solves_the_surrogate_ridge_problem(case):
    """μ = 0: the method minimises F + (μ_T/2)‖θ‖² with μ_T = L/κ_T from the public T (interior
    optimum of an unconstrained least-squares problem: the target is a closed form)."""
    fn, kw = MOMENTUM[case]
    prob0, X, y, _, _ = _quadratic(lam=0.05)
    prob = ERMProblem(prob0.loss, prob0.bounds)  # no ridge
    T = 3000
    # clip=1e6 (no clipping) voids the noise-aware MAG step (it sees a huge sampling term): use
    # [3]'s steps there; M-ASG* needs a public gap bound, f(0) <= label_bound²/2 for the squared loss
    extra = {"dp_masg_star": {"initial_gap": 0.5}}.get(case, {})
    if fn is dp_mag:
        extra = {"step": "masg", "momentum": "stage"}
    res = fn(prob, X, y, budget="non-private", rng=0, iterations=T, clip=1e6, **kw, **extra)
    mu = res.parameters["surrogate_ridge"]
    L0 = prob.smoothness(X.shape[1])
    assert mu == pytest.approx(L0 / surrogate_condition_number(T))
    n, d = X.shape
    target = np.linalg.solve(X.T @ X / n + mu * np.eye(d), X.T @ y / n)
    tol = 0.05 if "batch_size" in kw else 1e-3  # sampled batches: noise-free but stochastic
    assert np.linalg.norm(res.solution - target) <= tol * max(1.0, np.linalg.norm(target))
    # the bias against the unregularised optimum u is at most (μ_T/2)‖u‖² (+ the optimisation error)
    u = np.linalg.lstsq(X, y, rcond=None)[0]
    gap = prob.objective(res.solution, X, y) - prob.objective(u, X, y)
    assert -1e-12 <= gap <= mu / 2 * float(u @ u) + (1e-6 if "batch_size" not in kw else 1e-3)


@pytest.mark.parametrize("case", sorted(MOMENTUM))
def test_unpenalised_calibration_is_that_of_the_declared_bounds(case, logistic_reference):
    """The surrogate ridge is public: the noise, sensitivity and spend are those of the same run on
    a problem with its own ridge, and the ridge is not added when the problem has one."""
    X, y, _ = logistic_reference
    fn, kw = MOMENTUM[case]
    bare = ERMProblem("logistic", DataBounds(feature_norm=1.0))
    a = fn(bare, X, y, budget=Budget(1.0, 1e-5), rng=3, iterations=40, **kw)
    b = fn(LOGI, X, y, budget=Budget(1.0, 1e-5), rng=3, iterations=40, **kw)
    assert a.parameters["surrogate_ridge"] > 0 and b.parameters["surrogate_ridge"] == 0
    keys = ["sensitivity", "per_example_bound_l2", "clip", "noise", "sampling_rate", "batch_size"]
    if fn is not dp_mag:  # DP-MAG's stage-wise split follows its κ-dependent stages
        keys += ["segments", "noise_scales"]
    for key in keys:
        assert a.parameters[key] == b.parameters[key], key
    assert a.privacy.epsilon <= 1.0 * (1 + 1e-3) and a.privacy.delta <= 1e-5
    assert np.all(np.isfinite(a.solution))
