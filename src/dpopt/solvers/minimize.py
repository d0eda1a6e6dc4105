"""The ``minimize`` front door, the method registry and the privacy plumbing shared by solvers."""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from dpopt.accounting import (
    Accountant,
    Budget,
    PrivacyEvent,
    PrivacySpent,
    check_caller_accountant,
    commit,
    make_accountant,
)
from dpopt.exceptions import InvalidParameterError
from dpopt.problems import ERMProblem, L1Ball, Polytope, Simplex
from dpopt.randomness import RNGLike
from dpopt.solvers._result import OptimizeResult

__all__ = ["BudgetLike", "available_methods", "minimize", "register_method"]

BudgetLike = Budget | tuple[float, float] | str | None
SolverFn = Callable[..., OptimizeResult]

_METHODS: dict[str, str | SolverFn] = {
    "mirror_descent": "dpopt.solvers.mirror_descent:noisy_mirror_descent",
    "objective_perturbation": "dpopt.solvers.objective_perturbation:private_objective_perturbation",
    "frank_wolfe": "dpopt.solvers.frank_wolfe:private_frank_wolfe",
    "output_perturbation": "dpopt.solvers.output_perturbation:private_output_perturbation",
    # DP gradient methods with smoothing and multistage acceleration (thesis ch. 4)
    "dp_gd": "dpopt.solvers.gradient:dp_gd",
    "dp_sgd": "dpopt.solvers.gradient:dp_gd",
    "dp_heavy_ball": "dpopt.solvers.gradient:dp_heavy_ball",
    "dp_nesterov": "dpopt.solvers.gradient:dp_nesterov",
    "dp_gdws": "dpopt.solvers.gradient:dp_gdws",
    "dp_sgdws": "dpopt.solvers.gradient:dp_gdws",
    "dp_online_gdws": "dpopt.solvers.gradient:dp_online_gdws",
    "dp_masg": "dpopt.solvers.multistage:dp_masg",
    "dp_mag": "dpopt.solvers.multistage:dp_mag",
    "dp_smag": "dpopt.solvers.multistage:dp_mag",
}
_ALIASES = {
    "noisy_md": "mirror_descent",
    "noise_md": "mirror_descent",
    "md": "mirror_descent",
    "objpert": "objective_perturbation",
    "fw": "frank_wolfe",
    "noise_fw": "frank_wolfe",
}


def register_method(name: str, solver: str | SolverFn, *, replace: bool = False) -> None:
    """Make ``solver`` available as ``minimize(..., method=name)``.

    ``solver`` is a callable with the signature of the built-in methods (``solver(problem, X, y, *,
    budget, rng, calibration, accountant, diagnostics, **options) -> OptimizeResult``) or a
    ``"module:function"`` string imported on first use (so registering costs no import).
    """
    if not isinstance(name, str) or not name:
        raise InvalidParameterError("name: expected a non-empty string")
    if not (callable(solver) or (isinstance(solver, str) and ":" in solver)):
        raise InvalidParameterError("solver: expected a callable or a 'module:function' string")
    if name in _METHODS and not replace:
        raise InvalidParameterError(f"method {name!r} is already registered; pass replace=True")
    _METHODS[name] = solver


def available_methods() -> list[str]:
    """Names accepted by :func:`minimize`."""
    return sorted(_METHODS)


def _resolve(method: str) -> SolverFn:
    name = _ALIASES.get(method, method)
    if name not in _METHODS:
        raise InvalidParameterError(
            f"method: unknown {method!r}; choose one of {available_methods()} or 'auto'"
        )
    target = _METHODS[name]
    if isinstance(target, str):
        module, func = target.split(":")
        target = getattr(importlib.import_module(module), func)
        _METHODS[name] = target
    assert callable(target)
    return target


def _auto_method(problem: ERMProblem) -> str:
    if isinstance(problem.constraint, L1Ball | Simplex | Polytope):
        return "frank_wolfe"
    if problem.constraint is None:
        return "objective_perturbation"
    return "mirror_descent"


def parse_budget(budget: BudgetLike) -> Budget | None:
    """``Budget``, ``(ε, δ)`` (ε = inf means no noise) or ``"non-private"`` → Budget or None (no noise)."""
    if isinstance(budget, Budget):
        return budget
    if isinstance(budget, str):
        if budget in ("non-private", "nonprivate", "none"):
            return None
        raise InvalidParameterError("budget: the only accepted string is 'non-private'")
    if isinstance(budget, tuple) and len(budget) == 2:
        eps, delta = budget
        if isinstance(eps, int | float) and math.isinf(eps) and eps > 0:
            return None
        return Budget(eps, delta)
    if budget is None:
        raise InvalidParameterError(
            "budget: pass budget=Budget(epsilon, delta) (or a tuple); to run without noise pass "
            "budget='non-private' explicitly"
        )
    raise InvalidParameterError(
        "budget: expected a dpopt.accounting.Budget, an (ε, δ) tuple or 'non-private'"
    )


def check_calibration(calibration: str, allowed: tuple[str, ...]) -> str:
    if calibration not in allowed:
        raise InvalidParameterError(f"calibration: must be one of {allowed}")
    return calibration


def check_accountant(accountant: Accountant | None) -> Accountant | None:
    """The caller's accountant, checked for the ERM solvers' relation (replace-one, n public)."""
    return check_caller_accountant(accountant, "replace_one", who="this ERM solver")


def commit_privacy(
    event: PrivacyEvent | None,
    *,
    budget: Budget | None,
    kind: str,
    accountant: Accountant | None,
    label: str,
) -> PrivacySpent:
    """:func:`dpopt.accounting.commit` under replace-one neighbours (the ERM solvers' relation)."""
    return commit(
        event, budget=budget, neighbouring="replace_one", kind=kind, accountant=accountant, label=label
    )


def minimize(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    method: str = "auto",
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str = "tight",
    accountant: Accountant | None = None,
    diagnostics: bool = False,
    **options: Any,
) -> OptimizeResult:
    """Solve a private empirical-risk-minimisation problem.

    Parameters
    ----------
    problem : ERMProblem
        Loss, declared data bounds, constraint set and l2 penalty.
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
        Private features (checked against ``problem.bounds``; clipped only if the bounds ask for it).
    y : ndarray of shape (n_samples,)
        Private labels.
    method : str, default "auto"
        ``"mirror_descent"`` (Noise-MD, [TTZ] Alg. 1), ``"objective_perturbation"`` (Alg. 2),
        ``"frank_wolfe"`` (Noise-FW, Algs. 4-5), or a registered method.  ``"auto"`` picks
        Frank-Wolfe for polytopes (l1 ball, simplex, vertex polytopes), objective perturbation
        without a constraint set, and mirror descent otherwise.
    budget : Budget, (ε, δ) or "non-private"
        The privacy budget.  ``"non-private"`` (or ε = inf) runs without noise (for references and
        tests; the result says ε = ∞).
    rng : int, Generator, "secure" or None
        Randomness for the noise (keyword only, no default seed).
    calibration : str, default "tight"
        ``"tight"``: noise calibrated with the tight (PLD) accountant for the budget.  ``"paper"``:
        the seed's own constants (reproductions; a :class:`~dpopt.exceptions.PrivacyClaimWarning`
        is issued where they are unsound and ``result.privacy`` reports the true ε).  Some
        methods accept more (see each method).
    accountant : Accountant, optional
        A caller's ledger (``neighbouring="replace_one"``) into which the run's whole privacy event
        is also composed before any noise is drawn (it refuses when over its own budget).
    diagnostics : bool, default False
        Also compute **non-private** diagnostics on the raw data (objective value, ...), returned in
        ``result.nonprivate_diagnostics``.
    **options
        Method-specific options (iterations, step sizes, potential, ...).

    Returns
    -------
    OptimizeResult

    Privacy
    -------
    Each method is (ε, δ)-DP for ``budget`` under **replace-one** neighbours (datasets of the same,
    public size n differing in one record), assuming every record satisfies ``problem.bounds``
    (which is checked, or enforced by clipping when ``DataBounds(clip=True)``).  Sensitivities
    are derived from the declared bounds and the constraint set only.  Only the returned
    ``solution`` (and, for mirror descent, the iterates it averages) is covered; diagnostics are
    not private.  Calibrations: see ``calibration`` and each method's docstring.
    """
    if not isinstance(problem, ERMProblem):
        raise InvalidParameterError("problem: expected a dpopt.problems.ERMProblem")
    name = _auto_method(problem) if method == "auto" else method
    solver = _resolve(name)
    return solver(
        problem,
        X,
        y,
        budget=budget,
        rng=rng,
        calibration=calibration,
        accountant=accountant,
        diagnostics=diagnostics,
        **options,
    )


def nonprivate_diagnostics(problem: ERMProblem, theta: np.ndarray, X: Any, y: np.ndarray) -> dict[str, Any]:
    """Objective and gradient norm at ``theta`` on the raw data (**not private**)."""
    return {
        "objective": problem.objective(theta, X, y),
        "gradient_norm": float(np.linalg.norm(problem.gradient(theta, X, y))),
    }


def gaussian_sigma_for_steps(budget: Budget, sensitivity: float, steps: int) -> float:
    """Smallest σ (to 0.2%) such that ``steps`` adaptive Gaussian releases of l2-sensitivity Δ fit ``budget``.

    T-fold composition of Gaussians with noise multiplier z is exactly one Gaussian with multiplier
    z/sqrt(T) (Dong-Roth-Su 2019), so σ = sqrt(T)·σ_analytic(ε, δ, Δ); the value is then nudged up
    until the PLD accountant (which the solver composes into, with pessimistic discretisation)
    accepts it.
    """
    return _gaussian_sigma_for_steps(budget.epsilon, budget.delta, float(sensitivity), int(steps))


@functools.lru_cache(maxsize=256)
def _gaussian_sigma_for_steps(epsilon: float, delta: float, sensitivity: float, steps: int) -> float:
    from dpopt.accounting import GaussianEvent, RepeatedEvent, gaussian_sigma

    budget = Budget(epsilon, delta)
    if budget.delta <= 0:
        raise InvalidParameterError("Gaussian-noise solvers need δ > 0 in the budget")
    sigma = math.sqrt(steps) * gaussian_sigma(budget.epsilon, budget.delta, sensitivity)
    acct = make_accountant("pld", neighbouring="replace_one")
    for _ in range(200):
        ev = (
            RepeatedEvent(GaussianEvent(sigma, sensitivity), steps)
            if steps > 1
            else GaussianEvent(sigma, sensitivity)
        )
        if acct.would_spend(ev, delta=budget.delta) <= budget.epsilon * (1 - 1e-9):
            return sigma
        sigma *= 1.002
    raise InvalidParameterError("calibration failed: could not meet the budget")  # pragma: no cover
