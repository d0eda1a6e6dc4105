"""The ``minimize`` front door, the method registry and the privacy plumbing shared by solvers."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import numbers
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from dpopt.accounting import (
    Accountant,
    Budget,
    Neighbouring,
    PrivacyEvent,
    PrivacySpent,
    check_caller_accountant,
    commit,
)
from dpopt.accounting.delta import warn_if_delta_exceeds_size
from dpopt.exceptions import DPOptError, InvalidParameterError
from dpopt.problems import ERMProblem, L1Ball, L2Ball, Polytope, Simplex, SquaredLoss, VertexSet
from dpopt.randomness import RNGLike
from dpopt.solvers._result import OptimizeResult
from dpopt.solvers.specs import MethodSpec, check_call

__all__ = [
    "BudgetLike",
    "available_methods",
    "describe_methods",
    "method_spec",
    "minimize",
    "register_method",
]

#: What ``budget=`` accepts: a :class:`~dpopt.accounting.Budget`, ``(ε, δ)``, or ``"non-private"``
#: (or None, ``ε = inf``: no noise).
BudgetLike = Budget | tuple[float, float] | str | None
SolverFn = Callable[..., OptimizeResult]


def _penalised(problem: ERMProblem, options: Mapping[str, Any]) -> str | None:
    if problem.l2_penalty > 0:
        return None
    return "needs l2_penalty > 0 (its sensitivity is 2L/(nλ)); set problem.l2_penalty"


_GRAD = "dpopt.solvers.gradient:"
_MULTI = "dpopt.solvers.multistage:"


def _grad(summary: str, target: str, **kw: Any) -> MethodSpec:
    return MethodSpec(
        summary=summary,
        target=target,
        unconstrained=True,
        neighbouring=("replace_one", "add_remove"),
        noise=("laplace", "gaussian"),
        calibrations=("tight", "paper"),
        **{"iteration_option": "max_iter", **kw},
    )


_METHODS: dict[str, MethodSpec] = {
    "mirror_descent": MethodSpec(
        summary="Noise-MD: noisy mirror descent in the constraint set's own geometry ([TTZ] Alg. 1)",
        target="dpopt.solvers.mirror_descent:noisy_mirror_descent",
        iteration_option="max_iterations",  # caps the theory's T (``iterations`` fixes T exactly)
        ranges={"iterations": (1, None), "max_iterations": (1, None), "step_size": (0, None, True)},
    ),
    "objective_perturbation": MethodSpec(
        summary="objective perturbation with Gaussian noise, unconstrained or projected ([TTZ] Alg. 2, KST12)",
        target="dpopt.solvers.objective_perturbation:private_objective_perturbation",
        unconstrained=True,
        neighbouring=("replace_one", "add_remove"),  # add/remove: pure ε with declared_size
        noise=("gaussian", "laplace"),
        calibrations=("tight", "kst", "paper"),
        iterative=False,
        iteration_option="max_iterations",
        ranges={
            "tol": (0, None, True),
            "max_iterations": (1, None),
            "jacobian_fraction": (0, 1, True, True),
            "inexact_fraction": (0, 1, True, True),
            "declared_size": (1, None),
        },
    ),
    "frank_wolfe": MethodSpec(
        summary="Noise-FW: private Frank-Wolfe, exponential mechanism on polytope vertices ([TTZ] Algs. 4-5)",
        target="dpopt.solvers.frank_wolfe:private_frank_wolfe",
        noise=("laplace", "gaussian"),
        calibrations=("tight", "conservative", "paper"),
        iteration_option="max_iterations",  # caps the theory's T (``iterations`` fixes T exactly)
        ranges={"iterations": (2, None), "max_iterations": (2, None)},  # T-1 >= 1 private selections
    ),
    "dp_frank_wolfe": MethodSpec(
        summary="private Frank-Wolfe with few public steps, residual clipping and vertex averaging (sparse LASSO)",
        target="dpopt.solvers.frank_wolfe_tuned:tuned_frank_wolfe",
        constraints=(VertexSet,),
        noise=("laplace",),
        calibrations=("tight", "conservative"),
        neighbouring=("replace_one", "add_remove"),
        ranges={"iterations": (2, None), "residual_clip": (0, None, True), "declared_size": (1, None)},
    ),
    "output_perturbation": MethodSpec(
        summary="output perturbation of the l2-regularised minimiser (Chaudhuri et al. 2011)",
        target="dpopt.solvers.output_perturbation:private_output_perturbation",
        unconstrained=True,
        calibrations=("tight",),
        iterative=False,
        iteration_option="max_iterations",
        requires=(_penalised,),
        ranges={"tol": (0, None, True), "max_iterations": (1, None)},
    ),
    "ssp": MethodSpec(
        summary="AdaSSP: one Gaussian release of XᵀX, Xᵀy, λ_min, then a ridge solve (least squares, Wang 2018)",
        target="dpopt.solvers.sufficient_statistics:private_sufficient_statistics",
        constraints=(L2Ball,),
        unconstrained=True,
        losses=(SquaredLoss,),
        calibrations=("tight",),
        iterative=False,
        iteration_option=None,
        ranges={"failure_probability": (0, 1, True, True), "ridge": (0, None, True)},
    ),
    # DP gradient methods with smoothing and multistage acceleration (thesis ch. 4)
    "dp_gd": _grad("DP gradient descent on clipped per-example gradients (full batch)", _GRAD + "dp_gd"),
    "dp_sgd": _grad("DP-SGD: dp_gd on sampled batches (pass batch_size)", _GRAD + "dp_gd"),
    "dp_heavy_ball": _grad("DP heavy-ball momentum (DP-HB / DP-SHB)", _GRAD + "dp_heavy_ball"),
    "dp_nesterov": _grad("DP Nesterov acceleration (DP-NAG / DP-SNAG)", _GRAD + "dp_nesterov"),
    "dp_gdws": _grad(
        "DP-GDwS: DP gradient descent with exponential smoothing (thesis Alg. 4)", _GRAD + "dp_gdws"
    ),
    "dp_sgdws": _grad("DP-SGDwS: the stochastic DP-GDwS (thesis Alg. 6)", _GRAD + "dp_gdws"),
    "dp_online_gdws": _grad(
        "DP-onlineGDwS: one pass over disjoint buckets (parallel composition)",
        _GRAD + "dp_online_gdws",
        iteration_option=None,
    ),
    "dp_masg": _grad("DP M-ASG: multistage accelerated SGD baseline", _MULTI + "dp_masg"),
    "dp_mag": _grad("DP-MAG: multistage accelerated gradient (thesis ch. 4)", _MULTI + "dp_mag"),
    "dp_smag": _grad("DP-SMAG: the stochastic DP-MAG", _MULTI + "dp_mag"),
}
_ALIASES = {
    "noisy_md": "mirror_descent",
    "noise_md": "mirror_descent",
    "md": "mirror_descent",
    "objpert": "objective_perturbation",
    "fw": "frank_wolfe",
    "noise_fw": "frank_wolfe",
}


def register_method(
    name: str, solver: str | SolverFn, *, spec: MethodSpec | None = None, replace: bool = False
) -> None:
    """Make ``solver`` available as ``minimize(..., method=name)``.

    ``solver`` is a callable with the signature of the built-in methods (``solver(problem, X, y, *,
    budget, rng, calibration, accountant, diagnostics, **options) -> OptimizeResult``) or a
    ``"module:function"`` string imported on first use (so registering costs no import).  ``spec``
    declares what it supports (default: any bounded constraint set, any loss, replace-one,
    ``calibration`` "tight"/"paper", options read from its signature); ``minimize`` enforces it and the
    contract suites in ``tests/contracts/`` test it.
    """
    if not isinstance(name, str) or not name:
        raise InvalidParameterError("name: expected a non-empty string")
    if not (callable(solver) or (isinstance(solver, str) and ":" in solver)):
        raise InvalidParameterError("solver: expected a callable or a 'module:function' string")
    if spec is not None and not isinstance(spec, MethodSpec):
        raise InvalidParameterError("spec: expected a dpopt.solvers.specs.MethodSpec or None")
    if name in _METHODS and not replace:
        raise InvalidParameterError(f"method {name!r} is already registered; pass replace=True")
    base = spec or MethodSpec(summary=f"user-registered method {name!r}", target=solver)
    _METHODS[name] = dataclasses.replace(base, target=solver)


def available_methods() -> list[str]:
    """Names accepted by :func:`minimize`."""
    return sorted(_METHODS)


def method_spec(method: str) -> MethodSpec:
    """The declared :class:`~dpopt.solvers.specs.MethodSpec` of a registered method (or alias)."""
    name = _ALIASES.get(method, method)
    if name not in _METHODS:
        close = difflib.get_close_matches(str(method), [*_METHODS, *_ALIASES], n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InvalidParameterError(
            f"unknown {method!r}; {hint}choose one of {available_methods()} or 'auto'", param="method"
        )
    return _METHODS[name]


def describe_methods() -> str:
    """One line per registered method: its name and what it is (``help(minimize)`` shows this)."""
    width = max(len(k) for k in _METHODS)
    return "\n".join(f"{k.ljust(width)}  {s.summary}" for k, s in sorted(_METHODS.items()))


def _resolve(method: str) -> SolverFn:
    return method_spec(method).solver()


def _auto_method(
    problem: ERMProblem, budget: BudgetLike = None, calibration: str = "tight", X: Any = None
) -> str:
    if isinstance(problem.constraint, L1Ball | Simplex | Polytope):
        return "dp_frank_wolfe"
    if problem.constraint is None:
        shape: tuple[int, ...] = tuple(np.shape(X)) if X is not None else ()
        if (
            _is_logistic(problem)
            and len(shape) == 2
            and logistic_sgd_by_default(budget, calibration, int(shape[0]), int(shape[1]))
        ):
            return "dp_sgd"
        return "objective_perturbation"
    return "mirror_descent"


def _auto_add_remove_method(problem: ERMProblem, budget: BudgetLike) -> str:
    """``method="auto"`` under add/remove: Frank-Wolfe on vertex polytopes; pure-ε objective
    perturbation for an unconstrained logistic problem at δ = 0 (DP-SGD's Laplace steps are far
    behind there); DP-SGD otherwise."""
    if isinstance(problem.constraint, VertexSet):
        return "dp_frank_wolfe"
    try:
        b = parse_budget(budget)
    except DPOptError:
        b = None
    if b is not None and b.delta <= 0 and problem.constraint is None and _is_logistic(problem):
        return "objective_perturbation"
    return "dp_sgd"


#: Logistic-loss DP-SGD defaults (issue 13), from public quantities only: per-example gradients
#: are clipped at ``LOGISTIC_CLIP_FRACTION`` times the declared bound ``B`` on ``‖∇ℓ‖``
#: (``|φ'(0)| = 1/2``: no record is clipped at the start point θ = 0, only records the model gets
#: badly wrong later, while the noise, proportional to the clip, halves) and the step is
#: ``dp_gd(step="noise_scaled", step_scale=LOGISTIC_STEP_MULTIPLIER / (4L))`` with ``L = B²/4`` the
#: declared smoothness (the full step under light noise, ∝ 1/σ under heavy noise).  Chosen on
#: validation splits of the *training* data of Adult and breast cancer
#: (``benchmarks/erm_logistic_validation.py``; ``docs/erm_accuracy.md``), never on a test split.
LOGISTIC_CLIP_FRACTION = 0.5
LOGISTIC_STEP_MULTIPLIER = 8.0


def _is_logistic(problem: ERMProblem) -> bool:
    return getattr(problem.loss, "name", None) == "logistic"


#: Under replace-one, the logistic default is objective perturbation from this ε·n/√d on (n public,
#: d counting the intercept column) and DP-SGD below.  Objective perturbation's excess risk scales
#: as √d/(εn); DP-SGD's 20 public epochs stop short of the optimum once the noise is small.  On
#: the Adult validation split (n = 21113, d = 106) DP-SGD was ahead at ε·n/√d = 4101 (ε = 2:
#: 0.8345 vs 0.8330) and behind at 10253 (ε = 5: 0.8368 vs 0.8404); 6500 is between the two.
LOGISTIC_OBJECTIVE_PERTURBATION_EPSILON_N_SQRT_D = 6500.0


def logistic_sgd_by_default(budget: BudgetLike, calibration: str, n: int, dim: int) -> bool:
    """Whether the replace-one default for an unconstrained logistic problem is DP-SGD.

    Public quantities only: δ > 0 (DP-SGD's Gaussian steps need it; pure ε keeps objective
    perturbation's l2-Laplace form), the tight calibration, and ε·n/√d below
    ``LOGISTIC_OBJECTIVE_PERTURBATION_EPSILON_N_SQRT_D`` (n is public under replace-one).
    """
    if calibration != "tight":
        return False
    try:
        b = parse_budget(budget)
    except DPOptError:
        return False
    if b is None or b.delta <= 0:
        return False
    return b.epsilon * n / math.sqrt(max(dim, 1)) < LOGISTIC_OBJECTIVE_PERTURBATION_EPSILON_N_SQRT_D


#: Pure-ε objective perturbation for the logistic loss (the default at δ = 0): the share of ε spent
#: on the Jacobian term, which sets the added ridge ζ = β/(n(e^{fε} − 1)), is
#: ``f = min(0.1, max(PURE_OP_JACOBIAN_D, ε)/d)`` (d counting the intercept column) instead of a
#: fixed 0.1.  Why 1/d: when the ridge dominates the curvature, the l2-Laplace noise (norm ≈ 2Ld/(nε))
#: moves the solution by about ‖b‖/ζ ≈ 2L·d·f/β whatever n and ε are, so f must fall like 1/d to keep
#: that bounded; once ε is large the data's own curvature takes over and less ridge is better (f
#: grows with ε).  Chosen on the validation splits of Adult's and breast cancer's training data
#: (docs/erm_accuracy.md): Adult (d = 107) was best at f = 0.02 for ε <= 1 (0.7548 vs 0.7158 with
#: 0.1 at ε = 0.1) and at 0.05-0.1 for ε = 5; breast cancer (d = 31) at 0.05-0.1 for every ε.
PURE_OP_JACOBIAN_D = 2.0


def pure_logistic_op_options(
    problem: ERMProblem, X: Any, budget: BudgetLike, options: dict[str, Any]
) -> dict[str, Any]:
    """Objective perturbation's unset ``jacobian_fraction`` for a pure-ε logistic fit (public: ε, d)."""
    try:
        b = parse_budget(budget)
        dim = int(np.shape(X)[1])
    except (DPOptError, IndexError, TypeError):
        return options
    if b is not None and b.delta <= 0 and _is_logistic(problem) and dim >= 1:
        options.setdefault("jacobian_fraction", min(0.1, max(PURE_OP_JACOBIAN_D, b.epsilon) / dim))
    return options


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
    max_iter: int | None = None,
    neighbouring: str | None = None,
    declared_size: int | None = None,
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
        A registered method (the list is below; ``available_methods()``, ``describe_methods()``).
        ``"auto"`` picks ``"dp_frank_wolfe"`` (few public steps) for polytopes (l1 ball, simplex, vertex polytopes), objective
        perturbation without a constraint set -- except for the logistic loss with δ > 0 and
        ``ε·n/√d < 6500``, where it is DP-SGD with public settings (batch √n, 20 epochs, clip at half
        the declared gradient bound, a noise-scaled constant step; see ``declared_size``); for the
        logistic loss at δ = 0 its Jacobian share is ``min(0.1, max(2, ε)/d)`` -- and
        mirror descent otherwise.  Each method declares
        what it supports (:func:`method_spec`): constraint sets, losses, neighbouring relations,
        calibrations and its options with types and ranges; ``minimize`` checks the call against
        the declaration before anything runs and names the methods that do support what was asked.
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
    max_iter : int, optional
        The planned number of iterations of an iterative method (for the DP gradient methods and
        Frank-Wolfe: exactly the number run, fixed before seeing the data; for the perturbation
        methods: the inner solver's cap).  The methods' own names (``iterations``,
        ``max_iterations``) still work through ``minimize`` with a ``DeprecationWarning``.
    neighbouring : {"replace_one", "add_remove"}, optional
        The neighbouring relation the guarantee is stated under (default: the ``accountant``'s,
        else ``"replace_one"``, dpopt's ERM convention).  Under ``"add_remove"`` the data's size is
        private, so only methods with a declared Poisson ``sampling_rate`` (the DP gradient
        methods) or a ``declared_size`` (``dp_frank_wolfe``; ``objective_perturbation``, pure ε
        only) qualify, and ``method="auto"`` is ``dp_frank_wolfe`` for vertex polytopes (l1 ball,
        simplex, ``Polytope``), objective perturbation's add/remove pure-ε form for an
        unconstrained logistic problem at δ = 0, and DP-SGD otherwise, with public
        hyper-parameters (see ``declared_size``).
    declared_size : int, optional
        Under ``"add_remove"``: a public, declared dataset size N (not read from the data) from
        which the DP gradient methods' unset options are derived: expected batch ``m = round(√N)``,
        ``sampling_rate = m/N``, ``max_iter = 20 epochs = round(20 N/m)``, constant step
        ``1/(4L)`` with L the declared per-example smoothness, clipping at the declared gradient
        bound; for the logistic loss clipping at half that bound and ``step="noise_scaled"``
        (``8/(4L)`` shrunk ∝ 1/σ under heavy noise, :func:`dpopt.solvers.gradient.dp_gd`).  A wrong
        N costs accuracy, never privacy.  Pass ``sampling_rate=`` and ``batch_size=`` instead to
        choose them yourself.  ``dp_frank_wolfe`` normalises its scores by N (sensitivity
        ``min(‖C‖₁L_∞, ‖C‖₂L₂)/N``, half the replace-one one) and plans its steps from N;
        ``objective_perturbation`` uses N only for its solver tolerance.
    **options
        Method-specific options (step sizes, potential, batch size, ...), documented in each
        method's function (``dpopt.solvers.<function>``, listed by ``method_spec(name).target``).
        An unknown option raises with a did-you-mean and the valid names.

    Returns
    -------
    OptimizeResult
        ``solution`` (the private release), ``privacy`` (what was spent), ``status``, ``nit``
        (iterations run).  Unlike SciPy's ``OptimizeResult`` it is a frozen dataclass that keeps
        the private release apart from ``nonprivate_diagnostics``.

    Raises
    ------
    InvalidParameterError
        The method does not support the problem, the calibration, the accountant's relation or an
        option (raised before anything runs, nothing spent).
    BudgetExceededError
        The plan does not fit ``budget`` or the caller's ``accountant`` (nothing drawn).

    Privacy
    -------
    Each method is (ε, δ)-DP for ``budget`` under **replace-one** neighbours (datasets of the same,
    public size n differing in one record) -- or, with ``neighbouring="add_remove"``, under
    add/remove neighbours with every hyper-parameter (rate, batch normaliser, steps, step size)
    from declared quantities, never from the data's size -- assuming every record satisfies ``problem.bounds``
    (which is checked, or enforced by clipping when ``DataBounds(clip=True)``).  Sensitivities
    are derived from the declared bounds and the constraint set only.  Only the returned
    ``solution`` (and, for mirror descent, the iterates it averages) is covered; diagnostics are
    not private.  Calibrations: see ``calibration`` and each method's docstring.  The whole planned
    run is composed into the accountants (:func:`dpopt.accounting.commit`) before any noise is drawn.

    Examples
    --------
    >>> import numpy as np
    >>> from dpopt import Budget, minimize
    >>> from dpopt.problems import DataBounds, ERMProblem, L1Ball, SquaredLoss
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(500, 10)); y = np.clip(X[:, 0] * 0.5, -1, 1)
    >>> lasso = ERMProblem(SquaredLoss(), DataBounds(feature_norm=1.0, norm="linf", label_bound=1.0),
    ...                    L1Ball(dim=10, radius=1.0))
    >>> fit = minimize(lasso, X, y, method="frank_wolfe", budget=Budget(1.0, 1e-6), rng=1)
    >>> fit.status, fit.privacy.neighbouring
    ('completed', 'replace_one')
    """
    if not isinstance(problem, ERMProblem):
        raise InvalidParameterError("problem: expected a dpopt.problems.ERMProblem")
    if not isinstance(method, str):
        raise InvalidParameterError("method: expected a method name (a string); see available_methods()")
    rel = accountant.neighbouring if isinstance(accountant, Accountant) else None
    relation = resolve_relation(neighbouring, rel, declared_size)
    origin = relation_origin(neighbouring, rel)
    warn_delta_size(
        budget, relation, _rows_or_none(X), declared_size or options.get("declared_size"), "minimize"
    )
    if relation == "add_remove":  # vertex polytopes: Frank-Wolfe normalised by the declared size
        name = _auto_add_remove_method(problem, budget) if method == "auto" else _ALIASES.get(method, method)
    else:
        name = (
            _auto_method(problem, budget, calibration, X)
            if method == "auto"
            else _ALIASES.get(method, method)
        )
    spec = method_spec(name)
    options, max_iter = _old_iteration_names(name, spec, dict(options), max_iter)
    if relation == "add_remove":
        options, max_iter = _add_remove_options(
            name, spec, problem, X, dict(options), max_iter, declared_size, origin
        )
        rel = relation
    elif method == "auto" and name == "dp_sgd":  # replace-one: n is public, the same public rule
        options, max_iter = default_sgd_options(name, problem, X, dict(options), max_iter, _n_rows(X))
    if method == "auto" and name == "objective_perturbation":  # pure ε, logistic: public ridge share
        options = pure_logistic_op_options(problem, X, budget, dict(options))
    opts = _iteration_limit(name, spec, dict(options), max_iter)
    if not isinstance(calibration, str):
        raise InvalidParameterError(f"calibration: expected one of {list(spec.calibrations)}")
    check_call(name, spec, problem, calibration, rel, opts, _METHODS)
    result = spec.solver()(
        problem,
        X,
        y,
        budget=budget,
        rng=rng,
        calibration=calibration,
        accountant=accountant,
        diagnostics=diagnostics,
        **opts,
    )
    _check_feasible(name, problem, result)
    spent = getattr(result, "privacy", None)
    if relation == "add_remove" and spent is not None and spent.neighbouring != relation:
        raise DPOptError(  # pragma: no cover - safety net of the add/remove contract
            f"internal error: method {name!r} reported {result.privacy.neighbouring!r} neighbours for an "
            "add/remove call; please report this bug"
        )
    return result


_RELATIONS = ("replace_one", "add_remove")
#: epochs of the add/remove DP-SGD default (the textbook setting, fixed before seeing the data)
ADD_REMOVE_EPOCHS = 20


def resolve_relation(
    neighbouring: str | None,
    accountant_rel: Neighbouring | None,
    declared_size: int | None,
    who: str = "minimize",
) -> Neighbouring:
    """The call's neighbouring relation: the argument, else the accountant's, else replace-one.

    An explicit ``neighbouring`` that differs from the accountant's is refused (a release is analysed
    under one relation and the ledger composes under one): the error names both and the two fixes.
    """
    if neighbouring is not None and neighbouring not in _RELATIONS:
        raise InvalidParameterError(f"neighbouring: expected one of {list(_RELATIONS)}")
    if neighbouring is not None and accountant_rel is not None and neighbouring != accountant_rel:
        raise InvalidParameterError(
            f"neighbouring: {who} was asked for neighbouring={neighbouring!r} but the accountant= passed "
            f"was created with neighbouring={accountant_rel!r}"
            + (" (make_accountant's default)" if accountant_rel == "add_remove" else "")
            + f"; create the accountant with make_accountant(..., neighbouring={neighbouring!r}), or drop "
            f"neighbouring= to follow the accountant's {accountant_rel!r}"
            + (" and pass declared_size= (a public dataset size)" if accountant_rel == "add_remove" else "")
        )
    relation: Neighbouring = (
        "add_remove" if (neighbouring or accountant_rel) == "add_remove" else "replace_one"
    )
    if declared_size is not None and relation != "add_remove":
        raise InvalidParameterError(
            "declared_size: only used with neighbouring='add_remove' (under replace-one n is public)"
        )
    return relation


def relation_origin(neighbouring: str | None, accountant_rel: Neighbouring | None) -> str:
    """Where an add/remove relation came from, for errors that ask for ``declared_size=``.

    Empty when ``neighbouring`` was given; otherwise it says that the relation is the accountant's
    and how to get replace-one (with a public n) instead.
    """
    if neighbouring is not None or accountant_rel != "add_remove":
        return ""
    return (
        " (the add/remove relation comes from the accountant= passed, created with "
        "neighbouring='add_remove', make_accountant's default; for replace-one neighbours with a "
        "public n, create it with make_accountant(..., neighbouring='replace_one'))"
    )


def warn_delta_size(
    budget: Any, relation: Neighbouring, n_rows: int | None, declared_size: Any, who: str, stacklevel: int = 4
) -> None:
    """Warn when δ >= 1/n for the *public* n: the rows under replace-one, ``declared_size`` under
    add/remove (the private size is never read; no declared size, no check)."""
    if isinstance(budget, Budget):
        delta = budget.delta
    elif isinstance(budget, tuple) and len(budget) == 2 and isinstance(budget[1], numbers.Real):
        delta = float(budget[1])  # (ε, δ): validated (and refused if wrong) by the solver
    else:
        return
    if relation == "add_remove":
        ok = isinstance(declared_size, numbers.Integral) and not isinstance(declared_size, bool)
        n = int(declared_size) if ok and declared_size >= 1 else None
        size = "declared_size"
    else:
        n, size = n_rows, "the number of rows, public under replace-one"
    warn_if_delta_exceeds_size(delta, n, who=who, size=size, stacklevel=stacklevel)


def _add_remove_options(
    name: str,
    spec: MethodSpec,
    problem: ERMProblem,
    X: Any,
    options: dict[str, Any],
    max_iter: int | None,
    declared_size: int | None,
    origin: str = "",
) -> tuple[dict[str, Any], int | None]:
    """DP-SGD's unset options under add/remove, from the declared size and bounds only (never the data's n)."""
    if "add_remove" in spec.neighbouring and "declared_size" in spec.options():
        # methods normalised by the declared size itself (dp_frank_wolfe)
        if declared_size is None and options.get("declared_size") is None:
            raise InvalidParameterError(
                f"neighbouring='add_remove': the data's size is private; method {name!r} needs declared_size= "
                f"(a public dataset size){origin}"
            )
        if declared_size is not None:
            options["declared_size"] = declared_size
        return options, max_iter
    if "add_remove" not in spec.neighbouring or "sampling_rate" not in spec.options():
        ok = sorted(
            k
            for k, s in _METHODS.items()
            if "add_remove" in s.neighbouring
            and ("sampling_rate" in s.options() or "declared_size" in s.options())
        )
        raise InvalidParameterError(
            f"neighbouring: method {name!r} is analysed under neighbouring='replace_one' only (it uses the data's "
            f"size, private under add/remove); methods with an add/remove analysis: {ok}{origin}"
        )
    if "sampling_rate" in options:
        if declared_size is not None:
            raise InvalidParameterError("declared_size: pass either declared_size or sampling_rate, not both")
        return options, max_iter
    if declared_size is None:
        raise InvalidParameterError(
            "neighbouring='add_remove': the data's size is private, so the sampling rate cannot come from it; "
            f"pass declared_size= (a public dataset size) or sampling_rate= and batch_size={origin}"
        )
    if (
        isinstance(declared_size, bool)
        or not isinstance(declared_size, numbers.Integral)
        or declared_size < 1
    ):
        raise InvalidParameterError("declared_size: expected a positive int (a public dataset size)")
    N = int(declared_size)
    m = int(options.get("batch_size") or max(1, round(math.sqrt(N))))
    if m > N:
        raise InvalidParameterError("batch_size: must not exceed declared_size")
    options["sampling_rate"] = m / N
    return default_sgd_options(name, problem, X, options, max_iter, N)


def _rows_or_none(X: Any) -> int | None:
    """The number of rows of ``X`` (public under replace-one), or None for input refused later."""
    try:
        return int(np.shape(X)[0])
    except (ValueError, TypeError, IndexError):  # ragged, scalar: the solver's validation says what
        return None


def _n_rows(X: Any) -> int:
    try:
        return max(1, int(np.shape(X)[0]))
    except (IndexError, TypeError):
        return 1


def default_sgd_options(
    name: str,
    problem: ERMProblem,
    X: Any,
    options: dict[str, Any],
    max_iter: int | None,
    N: int,
) -> tuple[dict[str, Any], int | None]:
    """DP-SGD's unset options from a public size N (declared under add/remove, n under replace-one).

    Expected batch ``round(√N)``, ``ADD_REMOVE_EPOCHS`` epochs, a constant step ``1/(4L)`` and the
    declared clip; for the logistic loss the clip and step of ``LOGISTIC_CLIP_FRACTION`` /
    ``LOGISTIC_STEP_MULTIPLIER``.  Nothing is read from the data but its (public) column count.
    """
    spec = method_spec(name)
    m = int(options.get("batch_size") or max(1, round(math.sqrt(N))))
    options.setdefault("batch_size", min(m, N))
    if max_iter is None and spec.iteration_option not in options:
        max_iter = max(1, round(ADD_REMOVE_EPOCHS * N / m))
    logistic = _is_logistic(problem) and name in ("dp_gd", "dp_sgd")
    if "step" not in options and name in ("dp_gd", "dp_sgd"):
        try:
            L = problem.smoothness(int(np.shape(X)[1])) + problem.l2_penalty
        except (DPOptError, IndexError, TypeError):
            L = 0.0
        base = 1.0 / (4.0 * L) if L > 0 and math.isfinite(L) else 1.0
        if logistic:  # the largest step, scaled down ∝ 1/σ under heavy noise (dp_gd's "noise_scaled")
            options["step"] = "noise_scaled"
            options.setdefault("step_scale", LOGISTIC_STEP_MULTIPLIER * base)
        else:
            options["step"] = base
    if name in ("dp_gd", "dp_sgd"):  # average the last half of the iterates when the noise dominates
        options.setdefault("average", "auto")
    if "clip" not in options:
        try:  # clip at the declared per-example gradient bound when the bounds give one
            dim = int(np.shape(X)[1])
            problem.derivative_bound(dim)
            options["clip"] = LOGISTIC_CLIP_FRACTION * problem.lipschitz("l2", dim) if logistic else None
        except (DPOptError, IndexError, TypeError):
            pass
    return options, max_iter


def _old_iteration_names(
    name: str, spec: MethodSpec, options: dict[str, Any], max_iter: int | None
) -> tuple[dict[str, Any], int | None]:
    """Methods whose own option is ``max_iter`` (the DP gradient methods): their old names, warned."""
    old = [k for k in ("iterations", "max_iterations") if k in options]
    if spec.iteration_option != "max_iter" or not old:
        return options, max_iter
    warnings.warn(
        f"minimize(..., {old[0]}=...) is deprecated for method {name!r}; pass max_iter=... (the old name "
        "will be removed in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )
    if max_iter is not None or len(old) > 1:
        raise InvalidParameterError(f"max_iter: pass either max_iter or {old[0]}, not both")
    return options, options.pop(old[0])


def _iteration_limit(
    name: str, spec: MethodSpec, options: dict[str, Any], max_iter: int | None
) -> dict[str, Any]:
    """Map ``max_iter`` to the method's own option; old names still work, with a DeprecationWarning."""
    own = spec.iteration_option
    if own is not None and own in options:
        warnings.warn(
            f"minimize(..., {own}=...) is deprecated for method {name!r}; pass max_iter=... (the old name "
            "will be removed in the next release)",
            DeprecationWarning,
            stacklevel=3,
        )
        if max_iter is not None:
            raise InvalidParameterError(f"max_iter: pass either max_iter or {own}, not both")
    if max_iter is None:
        return options
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        raise InvalidParameterError("max_iter: expected a positive int (the number of iterations)")
    if own is None:
        raise InvalidParameterError(
            f"max_iter: method {name!r} has no iteration limit (its number of steps is fixed by its design)"
        )
    opt = spec.options().get(own)
    if opt is not None:
        try:
            opt.check(max_iter, name)
        except InvalidParameterError as err:  # say it in the caller's terms
            raise InvalidParameterError(str(err).replace(own, "max_iter", 1)) from None
    options[own] = max_iter
    return options


def _check_feasible(name: str, problem: ERMProblem, result: OptimizeResult) -> None:
    """Safety net of the method contract: a method that supports a constraint set returns a point in it."""
    C = problem.constraint
    if C is None or not isinstance(result, OptimizeResult):
        return
    if not C.contains(result.solution, tol=1e-6):
        raise DPOptError(
            f"internal error: method {name!r} returned a point outside the {type(C).__name__} it declares to "
            "support; please report this bug (the release is not covered by the method's analysis)"
        )


def _methods_help() -> str:
    lines = describe_methods().splitlines()
    return "\n    Methods\n    -------\n" + "\n".join("    " + ln for ln in lines) + "\n"


if minimize.__doc__:  # help(minimize) lists every built-in method with one line each
    minimize.__doc__ += _methods_help()


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
    from dpopt.accounting import GaussianEvent, RepeatedEvent, certify, gaussian_sigma

    budget = Budget(epsilon, delta)
    if budget.delta <= 0:
        raise InvalidParameterError("Gaussian-noise solvers need δ > 0 in the budget")

    def event(sigma: float) -> PrivacyEvent:
        g = GaussianEvent(sigma, sensitivity)
        return RepeatedEvent(g, steps) if steps > 1 else g

    start = math.sqrt(steps) * gaussian_sigma(budget.epsilon, budget.delta, sensitivity)
    return certify(event, start, budget, accountant="pld", neighbouring="replace_one")
