"""Shared pieces of the contract suites (imported by conftest.py, the suites and tests/audit): reference problems built from a method's declared spec,
a generator that plants a "noise understated 2x" bug, and a memo for the noise calibration.

Everything here is driven by the registries (``available_methods()``, ``ENGINES``,
``available_accountants()``), so a newly registered entry is covered without editing a list.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from dpopt.accounting import Budget
from dpopt.exceptions import PrivacyClaimWarning
from dpopt.problems import DataBounds, ERMProblem, L1Ball, L2Ball, LogisticLoss, SmoothHingeLoss
from dpopt.solvers.specs import MethodSpec

# ------------------------------------------------------------------------------------------------
# Reference problems


def constraint_for(
    spec: MethodSpec, dim: int, radius: float, prefer_polytope: bool = False
) -> L2Ball | L1Ball | None:
    """A constraint set the method supports: an l2 ball, else an l1 ball (the other way round with
    ``prefer_polytope``), else none."""
    order = (
        (L1Ball(dim, radius), L2Ball(dim, radius))
        if prefer_polytope
        else (L2Ball(dim, radius), L1Ball(dim, radius))
    )
    for c in order:
        if spec.supports_constraint(c):
            return c
    if spec.unconstrained:
        return None
    pytest.skip("the method supports none of L2Ball / L1Ball / no constraint set")  # pragma: no cover
    raise AssertionError  # unreachable


def reference_problem(spec: MethodSpec) -> tuple[ERMProblem, np.ndarray, np.ndarray]:
    """A small logistic problem (fixed seed) the method supports, with l2_penalty > 0 (every
    requirement on strong convexity / penalisation is then met); least squares with labels in
    [-1, 1] for a method that supports only the squared loss."""
    rng = np.random.default_rng(20261123)
    n, d = 60, 3
    X = rng.normal(size=(n, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X @ np.array([1.5, -1.0, 0.5]) + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    if not spec.supports_loss(LogisticLoss()):  # least-squares-only methods: a bounded real label
        y_reg = np.clip(0.5 * X @ np.array([1.5, -1.0, 0.5]) + 0.1 * y, -1.0, 1.0)
        bounds = DataBounds(1.0, label_bound=1.0)
        return ERMProblem("squared", bounds, constraint_for(spec, d, 1.0), l2_penalty=0.1), X, y_reg
    problem = ERMProblem("logistic", DataBounds(1.0), constraint_for(spec, d, 1.0), l2_penalty=0.1)
    return problem, X, y


# The audit pair: n = 20 records, all with zero features except the first one, which is
# (x = B, y = +1) in d0 and (x = B, y = -1) in d1 (replace-one neighbours).  With the smooth hinge
# of smoothing 0.1 and a constraint ball of radius 0.9/B, every margin stays in the loss's linear
# part, so the differing record's gradient is ±B -- exactly the declared bound -- wherever it is
# taken: the declared sensitivity is attained at every step and the released output carries it.
AUDIT_N = 20
AUDIT_B = 0.1
#: a budget whose noise is small enough for a threshold test to see a 2x error (μ ≈ 0.92 GDP)
AUDIT_BUDGET = Budget(4.0, 1e-5)
#: the δ at which the claimed privacy curve is audited (the claim is the accountant's ε(δ) there)
AUDIT_DELTA = 0.05


def audit_problem(spec: MethodSpec) -> tuple[ERMProblem, np.ndarray, np.ndarray, np.ndarray]:
    X = np.zeros((AUDIT_N, 1))
    X[0, 0] = AUDIT_B
    y0 = np.ones(AUDIT_N)
    y1 = y0.copy()
    y1[0] = -1.0
    # A method that can draw Laplace noise but has no unconstrained mode (Frank-Wolfe) is audited on
    # a polytope, where it runs its exponential-mechanism selection (the l2-ball variant's two-step
    # Gaussian path hides most of its noise from a threshold test on θ).
    polytope = "laplace" in spec.noise and not spec.unconstrained
    C = constraint_for(spec, 1, 0.9 / AUDIT_B, prefer_polytope=polytope)
    problem = ERMProblem(SmoothHingeLoss(0.1), DataBounds(AUDIT_B), C, l2_penalty=0.1)
    if not spec.supports_loss(problem.loss):  # least-squares-only methods: the same pair, squared loss
        problem = ERMProblem("squared", DataBounds(AUDIT_B, label_bound=1.0), C, l2_penalty=0.1)
    return problem, X, y0, y1


def method_options(spec: MethodSpec, max_iter: int) -> dict[str, Any]:
    """``max_iter`` for iterative methods that have an iteration option; nothing otherwise."""
    if spec.iterative and spec.iteration_option is not None:
        return {"max_iter": max_iter}
    return {}


# ------------------------------------------------------------------------------------------------
# The planted bug: every noise draw at half its scale (= sensitivity understated 2x)


class HalfNoiseGenerator(np.random.Generator):
    """A numpy Generator whose noise samplers draw at half the requested scale.

    Additive Laplace/Gaussian noise, the Gumbel noise of report-noisy-max and the Gamma radius of
    l2-Laplace noise all scale with sensitivity/ε, so halving them is exactly the bug "the
    declared Lipschitz constant / clipping norm is understated 2x".  Children spawned from it
    keep the bug.
    """

    factor: float = 0.5

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        return super().normal(loc, np.multiply(scale, self.factor), size)

    def laplace(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        return super().laplace(loc, np.multiply(scale, self.factor), size)

    def gumbel(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        return super().gumbel(loc, np.multiply(scale, self.factor), size)

    def gamma(self, shape: Any, scale: Any = 1.0, size: Any = None) -> Any:
        return super().gamma(shape, np.multiply(scale, self.factor), size)


class ScaledNoiseGenerator(HalfNoiseGenerator):
    """Noise at ``1/1.5`` of its scale (a factor-1.5 understatement; the slow suite resolves it)."""

    factor = 1 / 1.5


# ------------------------------------------------------------------------------------------------
# Speed: the noise calibration is deterministic in its inputs; memoise it during audits


@pytest.fixture
def memo_certify(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Memoise the noise calibration (``certify`` runs the PLD accountant, ~0.5 s per call;
    ``gaussian_sigma`` ~3 ms).

    ``certify(make_event, start, budget, ...)`` is a deterministic function of the event family,
    which ``make_event(start)`` (an immutable, hashable event) identifies for a fixed caller; the
    memo changes no released value, it only lets an audit run a solver thousands of times.
    """
    import dpopt.accounting.calibration as cal

    orig = cal.certify
    memo: dict[Any, float] = {}

    @functools.wraps(orig)
    def cached(make_event: Callable[[float], Any], start: float, budget: Budget, **kw: Any) -> float:
        key = (make_event(start), start, budget, tuple(sorted(kw.items())))
        if key not in memo:
            memo[key] = orig(make_event, start, budget, **kw)
        return memo[key]

    pure = {  # deterministic functions of hashable floats
        name: functools.lru_cache(maxsize=None)(getattr(cal, name))
        for name in ("gaussian_sigma", "laplace_scale")
    }
    originals = {orig: cached, **{getattr(cal, k): v for k, v in pure.items()}}
    for mod in list(sys.modules.values()):
        if not getattr(mod, "__name__", "").startswith("dpopt"):
            continue
        for attr in ("certify", *pure):
            fn = getattr(mod, attr, None)
            if fn is not None and fn in originals:
                monkeypatch.setattr(mod, attr, originals[fn])
    yield


@pytest.fixture
def quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        yield
