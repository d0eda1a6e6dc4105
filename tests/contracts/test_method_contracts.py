"""Contract suite for every method in ``available_methods()`` (issue 11 §5, issue 12 §5).

Parametrized over the registry, so a newly registered method is covered without editing a list:
noise off converges to the non-private optimum of a reference problem it supports; the result is
feasible; same seed gives the same result; the spend fits the budget and the whole run is composed
into the caller's accountant before the first draw; unsupported problems are refused before anything
runs; and an empirical audit on neighbouring datasets finds no violation *and* refutes a planted bug
(every noise draw at half its scale = sensitivity understated 2x) in the same test.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import pytest
from contract_helpers import (
    HalfNoiseGenerator,
    constraint_for,
    method_options,
    reference_problem,
)
from method_audit import BUG_FACTOR, DEFAULT_RUNS, audit_method, claimed_epsilon
from scipy.optimize import minimize as scipy_minimize

from dpopt.accounting import Budget, PldAccountant
from dpopt.exceptions import BudgetExceededError, InvalidParameterError
from dpopt.problems import ERMProblem
from dpopt.solvers.minimize import available_methods, method_spec, minimize

METHODS = available_methods()
BUDGET = Budget(1.0, 1e-5)
#: iterations in the private contract runs (kept small: only the contract is tested, not accuracy)
FEW = 5

pytestmark = pytest.mark.usefixtures("quiet")


def _scipy_optimum(problem: ERMProblem, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    d = X.shape[1]
    cons = []
    if problem.constraint is not None:
        cons = [{"type": "ineq", "fun": lambda t: problem.constraint.radius - np.abs(t).sum()}]
        if type(problem.constraint).__name__ == "L2Ball":
            cons = [{"type": "ineq", "fun": lambda t: problem.constraint.radius**2 - t @ t}]
    res = scipy_minimize(
        lambda t: problem.objective(t, X, y), np.zeros(d), jac=lambda t: problem.gradient(t, X, y),
        constraints=cons, method="SLSQP", options={"ftol": 1e-14, "maxiter": 1000},
    )  # fmt: skip
    return res.x, float(res.fun)


# Honest tolerances on the objective gap F(θ) - F* with noise off: the planned-step methods
# (mirror descent's averaged iterates at ~1/sqrt(T), Frank-Wolfe at ~1/T) are slower than the
# strongly-convex gradient methods and the exact solvers.
_GAP_TOL: dict[str, float] = {"mirror_descent": 5e-3, "frank_wolfe": 5e-3, "dp_online_gdws": 5e-2}
_DEFAULT_GAP_TOL = 1e-3


@pytest.mark.parametrize("name", METHODS)
def test_noise_off_converges_to_nonprivate_optimum(name: str) -> None:
    spec = method_spec(name)
    problem, X, y = reference_problem(spec)
    theta_star, f_star = _scipy_optimum(problem, X, y)
    res = minimize(problem, X, y, method=name, budget="non-private", rng=0, **method_options(spec, 2000))
    gap = problem.objective(res.solution, X, y) - f_star
    assert gap >= -1e-8  # scipy's reference is the optimum
    assert gap <= _GAP_TOL.get(name, _DEFAULT_GAP_TOL), f"{name}: objective gap {gap:.3g}"
    # strong convexity (l2_penalty = 0.1) turns the gap into a distance: ‖θ - θ*‖² <= 2 gap / λ
    assert np.linalg.norm(res.solution - theta_star) <= np.sqrt(2 * max(gap, 0) / 0.1) + 1e-4
    assert res.privacy.epsilon == np.inf


def _private(name: str, rng: Any, accountant: Any = None, budget: Budget = BUDGET) -> Any:
    spec = method_spec(name)
    problem, X, y = reference_problem(spec)
    return minimize(
        problem, X, y, method=name, budget=budget, rng=rng, accountant=accountant,
        **method_options(spec, FEW),
    )  # fmt: skip


@pytest.mark.parametrize("name", METHODS)
def test_feasible_reproducible_and_within_budget(name: str) -> None:
    spec = method_spec(name)
    problem, _, _ = reference_problem(spec)
    a, b, c = _private(name, 11), _private(name, 11), _private(name, 12)
    if problem.constraint is not None:
        assert problem.constraint.contains(a.solution, tol=1e-9)
    assert np.array_equal(a.solution, b.solution)  # same seed -> same bits
    assert not np.array_equal(a.solution, c.solution)  # the noise reaches the output
    assert a.privacy.epsilon <= BUDGET.epsilon * (1 + 1e-3)
    assert a.privacy.delta <= BUDGET.delta * (1 + 1e-9)
    assert a.privacy.neighbouring in spec.neighbouring


class _NoiseRecordingGenerator(np.random.Generator):
    """A generator that records, at every noise draw, how many events the caller's ledger holds.

    Only the noise samplers are watched (Gaussian, Laplace, Gumbel, Gamma radius, normal
    directions); data-independent draws such as DP-onlineGDwS's bucket permutation release nothing
    and may come first.
    """

    ledger: Any = None
    draws: list[int]

    def _record(self) -> None:
        self.draws.append(-1 if self.ledger is None else self.ledger.n_events)

    def normal(self, *a: Any, **k: Any) -> Any:
        self._record()
        return super().normal(*a, **k)

    def standard_normal(self, *a: Any, **k: Any) -> Any:
        self._record()
        return super().standard_normal(*a, **k)

    def laplace(self, *a: Any, **k: Any) -> Any:
        self._record()
        return super().laplace(*a, **k)

    def gumbel(self, *a: Any, **k: Any) -> Any:
        self._record()
        return super().gumbel(*a, **k)

    def gamma(self, *a: Any, **k: Any) -> Any:
        self._record()
        return super().gamma(*a, **k)


def _watched(ledger: Any) -> _NoiseRecordingGenerator:
    gen = _NoiseRecordingGenerator(np.random.PCG64(5))
    gen.ledger, gen.draws = ledger, []
    return gen


@pytest.mark.parametrize("name", METHODS)
def test_composed_before_the_first_draw(name: str) -> None:
    rel = method_spec(name).neighbouring[0]
    acct = PldAccountant(neighbouring=rel)
    gen = _watched(acct)
    _private(name, gen, acct)
    assert acct.n_events > 0, "the run composed nothing into the caller's accountant"
    assert gen.draws, "no noise was drawn through the caller's rng"
    assert min(gen.draws) >= acct.n_events, "noise was drawn before the whole run was charged"
    # an over-budget caller refuses the run: no noise drawn, nothing recorded
    small = PldAccountant(budget=Budget(1e-3, 1e-9), neighbouring=rel)
    gen2 = _watched(small)
    with pytest.raises(BudgetExceededError):
        _private(name, gen2, small)
    assert gen2.draws == []
    assert small.n_events == 0


@pytest.mark.parametrize("name", METHODS)
def test_unsupported_problems_refused_before_anything_runs(name: str) -> None:
    spec = method_spec(name)
    problem, X, y = reference_problem(spec)
    gen = np.random.default_rng(3)
    before = gen.bit_generator.state
    bad_calls: list[tuple[ERMProblem, dict[str, Any]]] = [
        (problem, {"no_such_option_xyz": 1}),
        (problem, {"calibration": "no-such-calibration"}),
    ]
    if not spec.unconstrained:
        bad_calls.append((ERMProblem(problem.loss, problem.bounds, None, l2_penalty=0.1), {}))
    unpenalised = ERMProblem(problem.loss, problem.bounds, problem.constraint)
    if any(req(unpenalised, {}) for req in spec.requires):
        bad_calls.append((unpenalised, {}))
    for rel in ("replace_one", "add_remove"):
        if rel not in spec.neighbouring:
            bad_calls.append((problem, {"accountant": PldAccountant(neighbouring=rel)}))
    for prob, kw in bad_calls:
        acct = kw.get("accountant")
        with pytest.raises(InvalidParameterError):
            minimize(prob, X, y, method=name, budget=BUDGET, rng=gen, **kw)
        if acct is not None:
            assert acct.n_events == 0
    assert gen.bit_generator.state == before


@pytest.mark.parametrize("name", METHODS)
def test_unpenalised_problems_solved_within_budget_or_refused(name: str) -> None:
    """Without a ridge term (``l2_penalty = 0``) a method either declares a requirement that refuses
    the problem (held above) or solves it: noise off it reaches the unpenalised optimum, and a private
    run stays feasible and within the budget."""
    spec = method_spec(name)
    problem, X, y = reference_problem(spec)
    bare = ERMProblem(problem.loss, problem.bounds, problem.constraint)
    if any(req(bare, {}) for req in spec.requires):
        pytest.skip("the spec requires a ridge term; the refusal is tested above")
    _, f_star = _scipy_optimum(bare, X, y)
    res = minimize(bare, X, y, method=name, budget="non-private", rng=0, **method_options(spec, 2000))
    gap = bare.objective(res.solution, X, y) - f_star
    assert -1e-8 <= gap <= max(_GAP_TOL.get(name, _DEFAULT_GAP_TOL), 1e-2), f"{name}: objective gap {gap:.3g}"
    priv = minimize(bare, X, y, method=name, budget=BUDGET, rng=11, **method_options(spec, FEW))
    if bare.constraint is not None:
        assert bare.constraint.contains(priv.solution, tol=1e-9)
    assert np.all(np.isfinite(priv.solution))
    assert priv.privacy.epsilon <= BUDGET.epsilon * (1 + 1e-3)
    assert priv.privacy.delta <= BUDGET.delta * (1 + 1e-9)


def test_reference_constraints_come_from_the_specs() -> None:
    """The reference problems above use only constraint sets the spec declares."""
    for name in METHODS:
        spec = method_spec(name)
        assert spec.supports_constraint(constraint_for(spec, 2, 1.0))


# ------------------------------------------------------------------------------------------------
# Audits with power.  The default run audits every method with 1000 runs per dataset against the
# 2x bug; ``pytest -m audit`` (tests/audit) repeats them with 10 000 runs and a factor 1.5 bug.

AUDIT_RUNS = 1000


@pytest.mark.parametrize("name", METHODS)
def test_audit_finds_no_violation_and_refutes_planted_bug(name: str, memo_certify: None) -> None:
    t0 = time.perf_counter()
    claim = claimed_epsilon(name)
    runs = DEFAULT_RUNS.get(name, AUDIT_RUNS)
    good = audit_method(name, n_runs=runs, generator=np.random.Generator, seed=1)
    bad = audit_method(
        name, n_runs=runs, generator=HalfNoiseGenerator, seed=1, factor=1 / BUG_FACTOR.get(name, 2.0)
    )
    elapsed = time.perf_counter() - t0
    assert not good.refutes(claim), f"{name}: claim ε={claim:.3f} at δ=0.05 refuted\n{good}"
    assert bad.refutes(claim), f"{name}: the audit has no power (claim ε={claim:.3f})\n{bad}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        print(f"{name}: claim {claim:.3f}, correct {good.epsilon_lower:.3f}, bug {bad.epsilon_lower:.3f}, "
              f"{elapsed:.1f}s")  # fmt: skip
