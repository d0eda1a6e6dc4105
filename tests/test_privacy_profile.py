"""Exact privacy profile of one DP-SGD step vs the claim (issue 12 §1).

One step of the Poisson-sampled Gaussian sum releases ``Σ_{i∈B} ĝ_i + N(0, σ²I)``.  On datasets
whose records have zero gradient except one extreme record (‖ĝ‖ = C, the clip bound) the output
distributions of neighbouring datasets differ only along that record's direction, so the privacy
loss is that of a 1-D pair of Gaussian mixtures.  Its hockey-stick divergence
``H_{e^ε}(P‖Q) = ∫ max(0, p - e^ε q)`` is integrated numerically on a fine grid and inverted to
ε(δ), then compared with ``result.privacy.epsilon`` of the library run.

* add/remove (declared ``sampling_rate``): datasets of sizes n and n-1 get the same σ (checked),
  and P = (1-q)N(0,σ²) + qN(C,σ²) vs Q = N(0,σ²).
* replace-one (default, n public): the extreme record +C·e replaced by -C·e:
  P = (1-q)N(0,σ²) + qN(C,σ²) vs Q = (1-q)N(0,σ²) + qN(-C,σ²).

Each test also refutes a planted bug with the same exact computation: calibrating q = m/n and σ
from the data's size under add/remove (the old behaviour), and the add/remove sensitivity C used
for replace-one neighbours (understated sensitivity).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import logsumexp

from dpopt.accounting import Budget
from dpopt.problems import DataBounds, ERMProblem, L2Ball, LogisticLoss
from dpopt.solvers.dp_calibration import Segment, plan_noise
from dpopt.solvers.gradient import dp_gd

BUDGET = Budget(1.0, 1e-5)
CLIP = 0.5  # logistic loss at x = 0 with ‖x_i‖ = 1: ‖∇ℓ_i‖ = 0.5, so the extreme record meets the bound
PROBLEM = ERMProblem(LogisticLoss(), DataBounds(feature_norm=1.0), L2Ball(dim=2, radius=100.0))


def _log_mixture(x: np.ndarray, comps: list[tuple[float, float, float]]) -> np.ndarray:
    """log of Σ w·N(x; mean, sd²) for components (w, mean, sd)."""
    terms = [
        math.log(w) - 0.5 * ((x - mu) / sd) ** 2 - math.log(sd * math.sqrt(2 * math.pi))
        for w, mu, sd in comps
        if w > 0
    ]
    return logsumexp(np.stack(terms), axis=0)


def exact_epsilon(
    P: list[tuple[float, float, float]], Q: list[tuple[float, float, float]], delta: float
) -> float:
    """Smallest ε with max(H_{e^ε}(P‖Q), H_{e^ε}(Q‖P)) <= δ, by numerical integration."""
    span = max(abs(mu) + 45 * sd for _, mu, sd in P + Q)
    x = np.linspace(-span, span, 120_001)
    lp, lq = _log_mixture(x, P), _log_mixture(x, Q)

    def hockey(eps: float) -> float:
        out = 0.0
        for a, b in ((lp, lq), (lq, lp)):
            integrand = np.exp(a) * -np.expm1(np.minimum(0.0, eps + b - a))
            out = max(out, float(np.trapezoid(integrand, x)))
        return out

    if hockey(0.0) <= delta:
        return 0.0
    return float(brentq(lambda e: hockey(e) - delta, 0.0, 60.0, xtol=1e-6))


def _data(n: int, sign: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """n - 1 zero rows (zero gradient) and one extreme record whose clipped gradient is ±C·e₁."""
    X = np.zeros((n, 2))
    X[-1, 0] = 1.0
    y = np.ones(n)
    y[-1] = -sign  # ∇ℓ at 0 = -y·x/2 = sign·C·e₁
    return X, y


def _one_step(X: np.ndarray, y: np.ndarray, **kw: object):
    return dp_gd(PROBLEM, X, y, budget=BUDGET, rng=0, iterations=1, clip=CLIP, grad_scale="sum", **kw)


def test_exact_profile_add_remove_declared_rate_and_planted_n_dependence():
    n, m = 5, 3
    q = 0.6  # declared, public
    runs = [_one_step(*_data(k), batch_size=m, sampling_rate=q, tight_accountant="pld") for k in (n, n - 1)]
    sigmas = [r.parameters["noise_scales"] for r in runs]
    assert sigmas[0] == sigmas[1]  # neighbours of sizes n and n-1 get the same noise
    (sigma,) = sigmas[0]
    C = runs[0].parameters["sensitivity"]
    assert C == pytest.approx(CLIP) and runs[0].privacy.neighbouring == "add_remove"
    assert runs[0].parameters["n_samples"] is None
    claim = runs[0].privacy.epsilon
    assert claim <= BUDGET.epsilon
    exact = exact_epsilon([(1 - q, 0.0, sigma), (q, C, sigma)], [(1.0, 0.0, sigma)], BUDGET.delta)
    assert exact <= claim * (1 + 1e-3)
    assert exact > 0.9 * claim  # PLD at one step is nearly exact

    # planted bug (the old behaviour): q = m/n and σ calibrated from the data's size, so the
    # neighbour of size n-1 runs with a different rate and noise
    def old_sigma(size: int) -> float:
        plan = plan_noise(BUDGET, [Segment(1, 1.0, "sampled")], calibration="tight", family="gaussian",
                          sensitivity_l1=2 * C, sensitivity_l2=2 * C, n_samples=size, batch_size=m,
                          sampling="poisson", sampling_rate=m / size, tight_accountant="pld")  # fmt: skip
        return float(plan.step_scales[0])

    s_n, s_n1, q_n = old_sigma(n), old_sigma(n - 1), m / n
    assert s_n != s_n1
    planted = exact_epsilon([(1 - q_n, 0.0, s_n), (q_n, C, s_n)], [(1.0, 0.0, s_n1)], BUDGET.delta)
    assert planted > 2.0 * claim  # refuted: the 2.67 vs 1.0


def test_exact_profile_replace_one_default_and_planted_understated_sensitivity():
    n, m = 10, 3
    runs = [_one_step(*_data(n, sign), batch_size=m) for sign in (1.0, -1.0)]
    assert runs[0].parameters["noise_scales"] == runs[1].parameters["noise_scales"]
    (sigma,) = runs[0].parameters["noise_scales"]
    r = runs[0]
    assert r.privacy.neighbouring == "replace_one" and r.parameters["sampling_rate"] == pytest.approx(m / n)
    q, C = m / n, CLIP
    assert r.parameters["sensitivity"] == pytest.approx(2 * C)
    claim = r.privacy.epsilon
    P = [(1 - q, 0.0, sigma), (q, C, sigma)]
    Q = [(1 - q, 0.0, sigma), (q, -C, sigma)]
    exact = exact_epsilon(P, Q, BUDGET.delta)
    assert exact <= claim * (1 + 1e-3)
    assert exact > 0.9 * claim  # PLD at one step is nearly exact
    # the extreme record replaced by a zero-gradient one: a milder pair, also covered
    assert exact_epsilon(P, [(1.0, 0.0, sigma)], BUDGET.delta) <= exact

    # planted bug: the add/remove sensitivity C used for replace-one neighbours
    planted_plan = plan_noise(BUDGET, [Segment(1, 1.0, "sampled")], calibration="tight", family="gaussian",
                              sensitivity_l1=2 * C, sensitivity_l2=2 * C, n_samples=n, batch_size=m,
                              sampling="poisson", sampling_rate=q, tight_accountant="pld")  # fmt: skip
    s_bug = float(planted_plan.step_scales[0])
    planted = exact_epsilon([(1 - q, 0.0, s_bug), (q, C, s_bug)], [(1 - q, 0.0, s_bug), (q, -C, s_bug)],
                            BUDGET.delta)  # fmt: skip
    assert planted > 1.2 * planted_plan.privacy.epsilon  # 1.31 vs 1.0
