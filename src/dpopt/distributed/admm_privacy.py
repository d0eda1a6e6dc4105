"""Privacy bounds of private ADMM (pure functions of public quantities) and noise calibration.

* :func:`pp_privacy_bound`: Thm 4.1 / Z(26) of Zhang, Khalili & Liu (2018) for penalty and
  dual-variable perturbation, per node and per round;
* :func:`pp_privacy_bound_geometric`: its closed form for geometric schedules (spec §4.7);
* :func:`primal_privacy_bound`: primal-variable (output) perturbation of each local solve;
* :func:`calibrate_noise_rate`: the least noise meeting a budget;
* :func:`public_pp_schedule`: a constant per-node penalty schedule for PP chosen from public
  quantities only (the alternative to the paper's growing penalty);
* :func:`exact_solve_note`: what the bounds assume about the local solves (spec §7.2 A3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpopt._validation import check_positive
from dpopt.accounting import Budget
from dpopt.distributed.schedules import Schedule
from dpopt.exceptions import BudgetExceededError, InvalidParameterError, MissingDataBoundsError
from dpopt.problems import DataBounds, ERMProblem, LogisticLoss, SmoothHingeLoss, SquaredLoss

__all__ = [
    "EXACT_SOLVE_TOL",
    "LOGISTIC_C1",
    "LossConstants",
    "PublicSchedule",
    "calibrate_noise_rate",
    "default_problem",
    "exact_solve_note",
    "loss_constants",
    "pp_privacy_bound",
    "pp_privacy_bound_geometric",
    "primal_privacy_bound",
    "public_pp_schedule",
]

Array = NDArray[np.float64]

#: Curvature bound c₁ of the logistic loss: 0 < 𝓛'' <= 1/4;  |𝓛'| <= 1.
LOGISTIC_C1 = 0.25

#: Loosest relative local tolerance for which dpopt treats the exact-solve bounds as a fair report
#: of the run (spec §7.2 A3: "treat the bound as heuristic if the tolerance is loose").
EXACT_SOLVE_TOL = 1e-8


def default_problem(reg: float = 1e-2) -> ERMProblem:
    """The seed's problem: logistic loss, ‖x‖₂ <= 1, labels ±1, R(f) = ½‖f‖² with weight ρ = ``reg``."""
    return ERMProblem("logistic", DataBounds(feature_norm=1.0), l2_penalty=reg)


@dataclass(frozen=True)
class LossConstants:
    """What private ADMM needs from an :class:`~dpopt.problems.ERMProblem`, all from declared bounds.

    Attributes
    ----------
    loss, loss_param : str, float
        The local solver's loss (``"logistic"``, ``"squared"``, ``"smooth_hinge"``) and its smoothing.
    feature_norm : float
        Declared bound X on ‖x‖₂ (``inf`` when undeclared: only the non-private methods run then).
    c1 : float
        Curvature bound in the model: sup φ''·X² (the c₁ of Thm 4.1 after scaling; 1/4 for the seed).
    lipschitz : float
        Gradient bound in the model: sup |φ'|·X (the theorem's |𝓛'| <= 1 after scaling; 1 for the seed).
    covered : str
        Empty when the privacy bounds cover the loss, else why not (the private methods refuse).
    classification : bool
        Labels must be ±1.
    """

    loss: str
    loss_param: float
    feature_norm: float
    c1: float
    lipschitz: float
    covered: str
    classification: bool


def loss_constants(problem: ERMProblem, dim: int) -> LossConstants:
    """Derive the privacy constants of Thm 4.1 / primal perturbation from a problem's declared bounds.

    The theorem (Zhang, Khalili & Liu 2018, Thm 4.1) needs |𝓛'| and 0 <= 𝓛'' bounded, the feature
    norm bounded and an l2 regulariser; its proof scales: with sup|φ'| = g, sup φ'' = c and
    ‖x‖ <= X the per-round bound is C(1.4·c·X² + α·g·X)/(ηVB) and the θ-condition
    2cX² < (B/C)(ρ/N + 2θV).  The logistic loss (g = 1, c = 1/4) and the smooth hinge (g = 1,
    c = 1/h; C¹ with a bounded, piecewise-constant φ'': the KKT map between noise and minimiser is
    bi-Lipschitz, so the change of variables holds with its a.e. Jacobian) are covered; the squared
    loss is not (its derivative is unbounded on R^d and ADMM's local solves are unconstrained).
    """
    loss = problem.loss
    if isinstance(loss, LogisticLoss):
        name, param = "logistic", 0.0
    elif isinstance(loss, SmoothHingeLoss):
        name, param = "smooth_hinge", float(loss.smoothing)
    elif isinstance(loss, SquaredLoss):
        name, param = "squared", 0.0
    else:
        raise InvalidParameterError(
            f"problem.loss: private ADMM's local solver supports the logistic, squared and smooth-hinge losses, "
            f"not {type(loss).__name__}"
        )
    b = problem.bounds
    try:
        xb = b.feature_l2(dim)
    except MissingDataBoundsError:
        xb = math.inf
    lb = b.label(required=False) if loss.classification else (b.label_bound or math.inf)
    covered = ""
    if name == "squared":
        covered = (
            "the squared loss has an unbounded derivative on R^d (ADMM's local solves are unconstrained), so "
            "Thm 4.1 and the primal-perturbation bound (|𝓛'| bounded) do not cover it; use method='admm' or "
            "'m-admm' (not private), or the logistic or smooth-hinge loss"
        )
        g, c = math.inf, loss.curvature_bound(lb)
    else:
        g = loss.derivative_bound(math.inf, lb)
        c = loss.curvature_bound(lb)
        if math.isinf(xb):
            covered = (
                "problem.bounds.feature_norm is not declared: the privacy bound needs a public bound on ‖x‖ "
                "(e.g. DataBounds(feature_norm=1.0))"
            )
    return LossConstants(
        loss=name,
        loss_param=param,
        feature_norm=xb,
        c1=c * xb * xb,
        lipschitz=g * xb,
        covered=covered,
        classification=bool(loss.classification),
    )


def exact_solve_note(local_tol: float, method: str) -> tuple[str, bool]:
    """(privacy note, loose?) on exactness of the local solves behind the reported bound.

    Thm 4.1 (PP/DVP) uses the KKT bijection between the noise and the exact local minimiser and
    its Jacobian; the primal-perturbation bound uses the sensitivity of the exact minimiser.
    Neither accounts for a solve that stops at a gradient-norm tolerance, and dpopt does not (yet)
    add a term for it: every local solve is certified to the public relative tolerance
    ``local_tol`` (else the run stops with :class:`~dpopt.distributed._admm_node.LocalSolveError`),
    and the note says that the figure is the exact-solve bound.  ``loose`` is True when
    ``local_tol > EXACT_SOLVE_TOL``: the bound is then only heuristic.
    """
    check_positive(local_tol, "local_tol")
    what = "Thm 4.1" if method != "primal" else "the primal-perturbation bound"
    note = (
        f"{what} assumes exact local minimisers (spec §7.2 A3); every local solve was certified to relative "
        f"gradient norm <= local_tol={local_tol:g} (achieved values: nonprivate_history), and the "
        "reported ε does not account for that residual"
    )
    loose = local_tol > EXACT_SOLVE_TOL
    if loose:
        note += f"; local_tol > {EXACT_SOLVE_TOL:g} is loose, so the reported ε is heuristic"
    return note, loose


def pp_privacy_bound(
    penalty: ArrayLike,
    noise_rate: ArrayLike,
    degrees: ArrayLike,
    sizes: ArrayLike,
    loss_weight: float = 1.0,
    c1: float = LOGISTIC_C1,
    lipschitz: float = 1.0,
) -> Array:
    """Per-node running bound of Thm 4.1 (Z(26)) for penalty / dual-variable perturbation.

    P_i(t) = Σ_{r=1..t} C · (1.4 c₁ + G·α_i(r)) / (η_i(r) · V_i · B_i).

    ``c1`` bounds the curvature of the per-record loss in the model (φ''·‖x‖², 1/4 for the logistic
    loss with ‖x‖ <= 1) and ``lipschitz`` = G its gradient norm (|φ'|·‖x‖, 1 for the paper's
    setting): the proof's noise part is ‖ε̂ − ε‖ <= C·G/(ηVB) and its Jacobian part 1.4·C·c₁/(ηVB).

    Parameters
    ----------
    penalty, noise_rate : array of shape (T, N)
        η_i(r) and α_i(r).
    degrees, sizes : array of shape (N,)
        V_i and B_i.

    Returns
    -------
    ndarray of shape (T, N)
        Row t−1 holds P_i(t); the worst case P(t) is the row maximum.
    """
    eta = np.asarray(penalty, dtype=float)
    alpha = np.asarray(noise_rate, dtype=float)
    vb = np.asarray(degrees, dtype=float) * np.asarray(sizes, dtype=float)
    per_round = loss_weight * (1.4 * c1 + lipschitz * alpha) / (eta * vb[None, :])
    return np.cumsum(per_round, axis=0)


def pp_privacy_bound_geometric(
    t: int,
    theta: float,
    q1: float,
    alpha1: float,
    q2: float,
    degrees: ArrayLike,
    sizes: ArrayLike,
    loss_weight: float = 1.0,
    c1: float = LOGISTIC_C1,
    lipschitz: float = 1.0,
) -> float:
    """Closed form of the worst-case P(t) for η(r) = θ q₁^(r−1), α(r) = α(1) q₂^(r−1) (spec §4.7).

    ``t = math.inf`` gives P(∞), finite iff q₁ > 1 and q₂ < q₁.
    """

    def geo(ratio: float) -> float:
        if math.isinf(t):
            return 1.0 / (1.0 - ratio) if ratio < 1 else math.inf
        return float(t) if ratio == 1 else (1.0 - ratio**t) / (1.0 - ratio)

    vb = np.asarray(degrees, dtype=float) * np.asarray(sizes, dtype=float)
    inner = 1.4 * c1 * geo(1.0 / q1) + lipschitz * alpha1 * geo(q2 / q1)
    return float(np.max(loss_weight / (theta * vb)) * inner)


def primal_privacy_bound(
    penalty: ArrayLike,
    noise_rate: ArrayLike,
    degrees: ArrayLike,
    sizes: ArrayLike,
    loss_weight: float,
    reg_per_node: float,
    lipschitz: float = 1.0,
) -> Array:
    """Per-node running ε of primal-variable perturbation (output perturbation of each local solve).

    Replacing one record of node i moves the gradient of its local objective by at most 2CG/B_i
    (G = sup |φ'|·‖x‖, 1 for the logistic loss with ‖x‖ <= 1); the objective is (ρ/N + 2η_i V_i)-strongly convex, so the exact minimiser
    moves by at most Δ_i(r) = 2CG / (B_i (ρ/N + 2η_i(r) V_i)) in l2.  Releasing it with noise of density
    ∝ exp(−α‖ε‖₂) is α·Δ-DP; rounds compose sequentially (each release is a function of the data
    and of earlier releases), and other nodes only post-process node i's releases.

    Returns the (T, N) table of P_i(t) = Σ_{r<=t} α_i(r) Δ_i(r).
    """
    eta = np.asarray(penalty, dtype=float)
    alpha = np.asarray(noise_rate, dtype=float)
    v = np.asarray(degrees, dtype=float)[None, :]
    b = np.asarray(sizes, dtype=float)[None, :]
    delta = 2.0 * loss_weight * lipschitz / (b * (reg_per_node + 2.0 * eta * v))
    return np.cumsum(alpha * delta, axis=0)


def calibrate_noise_rate(
    epsilon: float | Budget,
    *,
    penalty: ArrayLike,
    degrees: ArrayLike,
    sizes: ArrayLike,
    ratio: float = 1.0,
    loss_weight: float = 1.0,
    method: Literal["pp", "dvp", "primal"] = "pp",
    reg_per_node: float | None = None,
    c1: float = LOGISTIC_C1,
    lipschitz: float = 1.0,
) -> float:
    """The largest α(1) (least noise) with α(r) = α(1)·ratio^(r−1) such that the worst-case bound <= ε.

    ``penalty`` is the (T, N) table η_i(r).  For PP/DVP the bound is a_i + α(1)·b_i per node, so
    α(1) = min_i (ε − a_i)/b_i; the Jacobian part a_i alone must stay below ε.

    Raises
    ------
    BudgetExceededError
        If no noise level meets ε (the noise-free part of the PP bound already exceeds it).
    """
    eps = epsilon.epsilon if isinstance(epsilon, Budget) else check_positive(epsilon, "epsilon")
    eta = np.asarray(penalty, dtype=float)
    q = check_positive(ratio, "ratio") ** np.arange(eta.shape[0])[:, None]
    v = np.asarray(degrees, dtype=float)
    b_ = np.asarray(sizes, dtype=float)
    if method == "primal":
        if reg_per_node is None:
            raise InvalidParameterError("reg_per_node: required for method='primal'")
        delta = 2.0 * loss_weight * lipschitz / (b_[None, :] * (reg_per_node + 2.0 * eta * v[None, :]))
        slope = (q * delta).sum(axis=0)
        return float(np.min(eps / slope))
    base = (loss_weight * 1.4 * c1 / (eta * (v * b_)[None, :])).sum(axis=0)
    slope = (loss_weight * lipschitz * q / (eta * (v * b_)[None, :])).sum(axis=0)
    if np.any(base >= eps):
        raise BudgetExceededError(
            f"epsilon={eps:g}: the noise-independent part of the PP bound already reaches "
            f"{float(base.max()):.4g}; increase the penalties, C·T budget or ε"
        )
    return float(np.min((eps - base) / slope))


@dataclass(frozen=True)
class PublicSchedule:
    """A PP/DVP schedule chosen by :func:`public_pp_schedule` (every field a public quantity).

    Attributes
    ----------
    penalty : ndarray of shape (N,)
        Constant penalty η_i of each node (pass as ``penalty=``; for DVP pass ``theta=`` a shared value).
    theta : float
        Shared dual step θ = min_i η_i (a shared θ keeps Σλ_i = 0, so the consensus is the minimiser),
        raised when Thm 4.1's θ-condition 2c₁ < (B_i/C)(Cλ + 2θV_i) needs more (then every η_i below
        it is raised to θ, which only lowers those nodes' bounds).
    max_iter : int
        T, the number of rounds.
    noise_rate : float
        The rate α every node's noise gets once ``budget=Budget(epsilon)`` calibrates it (for the record).
    progress : ndarray of shape (N,)
        Σ_t C/(2η_iV_i): how far, in units of the mean loss's gradient, node i's prox steps can move in T rounds.
    average_from : int
        First round of the released models to average (:meth:`ADMMResult.round_average`); post-processing.
    noise_rates : ndarray of shape (N,) or None
        With ``per_site_noise=True``: each node's own noise rate α_i (passed as ``noise_rate=`` by
        :meth:`kwargs`; ``noise_rate`` is then their minimum).  None: one shared α, calibrated by the run.
    weights : ndarray of shape (N,) or None
        The declared node sizes B_i / Σ B_j: weights for :meth:`ADMMResult.round_average` (public, so
        weighting is post-processing).
    thetas : ndarray of shape (N,) or None
        One round (``max_iter == 1``): per-node θ_i = η_i (passed as ``theta=`` by :meth:`kwargs`).  No
        dual step precedes the only release, so θ enters only node i's own θ-condition of Thm 4.1,
        and a small node no longer forces a large shared θ (hence a large η) on every other node.
    """

    penalty: Array
    theta: float
    max_iter: int
    noise_rate: float
    progress: Array
    average_from: int
    noise_rates: Array | None = None
    weights: Array | None = None
    thetas: Array | None = None

    def kwargs(self, method: str = "pp") -> dict[str, object]:
        """Keyword arguments of :class:`~dpopt.distributed.admm.PrivateADMM` (``"pp"`` or ``"dvp"``).

        With per-node noise rates the dict carries ``noise_rate=`` (a per-node constant schedule);
        pass ``budget=`` as well, and the run checks that the bound stays within it before any noise.
        """
        out: dict[str, object]
        if method == "dvp":
            out = {"theta": float(self.penalty.max()), "max_iter": self.max_iter}
        else:
            theta: object = self.theta if self.thetas is None else self.thetas.copy()
            out = {"penalty": self.penalty.copy(), "theta": theta, "max_iter": self.max_iter}
        if self.noise_rates is not None and method in ("pp", "dvp"):
            out["noise_rate"] = Schedule.constant(self.noise_rates.copy())
        return out


def public_pp_schedule(
    epsilon: float | Budget,
    *,
    degrees: ArrayLike,
    sizes: ArrayLike,
    loss_weight: float,
    l2_penalty: float,
    n_rounds: int = 5,
    min_noise_rate: float = 5.0,
    shared: bool = False,
    inexact_fraction: float = 0.01,
    c1: float = LOGISTIC_C1,
    lipschitz: float = 1.0,
    progress: float = 1.0,
    per_site_noise: bool = False,
) -> PublicSchedule:
    """A constant-penalty PP schedule from public quantities: ε, the graph, the declared node sizes, λ.

    The paper's schedule η(t) = θ·q₁^(t−1) makes each round cheaper but freezes the iterates (the
    local solves stop seeing the data as η grows).  Here every node keeps a constant η_i chosen so
    that, with one noise rate α shared by all nodes, each node's bound of Thm 4.1 spends exactly the
    budget in T rounds:

        P_i(T) = T·C·(1.4c₁ + G·α) / (η_i V_i B_i) = ε/(1 + inexact_fraction).

    Then a node's prox steps move its model by C/(2η_iV_i) = ε'B_i / (2T(1.4c₁ + Gα)) per round (in
    units of its mean loss's gradient), so its total progress H_i = ε'B_i/(2(1.4c₁ + Gα)) does not
    depend on T: T only decides how often noise is added (fewer rounds, less accumulated noise) and
    α trades noise (‖ε‖ ≈ d/α per round) against progress.  The rule asks for the progress the
    problem needs, 1/λ (the inverse strong convexity of the mean objective, λ = ``l2_penalty``), on
    the smallest node, but never lets α fall below ``min_noise_rate``:

        α = max(min_noise_rate, ε'·min_i B_i·λ/2 − 1.4c₁/G).

    ``min_noise_rate = 5`` and ``n_rounds = 5`` were chosen on a validation split of the training
    file of UCI Adult (never on its test file; docs/admm_utility.md says how): fewer rounds were
    better at every size tried (5, 10 and 20 rounds; 3 only at 100 sites).  Use it with
    ``budget=Budget(epsilon)`` (the run calibrates α itself and recovers this one), and score
    :meth:`ADMMResult.round_average` from ``average_from`` (post-processing, no privacy cost).

    **One round, per-node noise** (``n_rounds=1, per_site_noise=True``; what ``admm-utility``
    uses).  Under pure-ε composition splitting a node's budget over T rounds multiplies each
    round's noise by T, and averaging the T releases wins back only √T.  With f(0) = 0 the first
    round is objective perturbation of the node's own data (extra ridge Λ_i = 2η_iV_i/C, gradient
    noise Λ_i·ε_i), so T = 1 is "each node solves its own private problem once, and the released
    models are averaged": averaging N nodes' independent noises wins √N.  Then nothing couples
    the nodes' noise rates, and each node gets its own
    α_i = max(min_noise_rate, ε'·B_i·λ/(2·progress) − 1.4c₁/G) (its extra ridge Λ_i about λ/progress
    once it is large enough; η_i from the same budget equation), and the released models are
    averaged with the public weights B_i/ΣB_j (``weights``; a small node's release carries noise
    ∝ 1/B_i in its signal's units, so an unweighted mean lets it dominate).

    Parameters
    ----------
    epsilon : float or Budget
        Whole-run per-node budget (pure ε).
    degrees, sizes : array of shape (N,)
        V_i and the declared B_i (public in the replace-one model).
    loss_weight, l2_penalty : float
        C and λ of the problem (ρ = C·N·λ).
    n_rounds : int, default 5
    min_noise_rate : float, default 5.0
    shared : bool, default False
        One η for every node (the most demanding node's): for DVP, whose η ≡ θ must be shared.
    inexact_fraction, c1, lipschitz : float
        As in :class:`~dpopt.distributed.admm.PrivateADMM` / :func:`loss_constants`.
    progress : float, default 1.0
        The progress the rule for α asks for, in units of 1/λ (larger: less noise per release is
        traded for a weaker pull to the starting point; ``1`` is the rule above).
    per_site_noise : bool, default False
        One noise rate α_i per node from its own size (else one α shared by all nodes, set by the
        smallest node).  Each node still spends exactly ε.

    Examples
    --------
    >>> import numpy as np
    >>> s = public_pp_schedule(1.0, degrees=np.array([1, 2, 1]), sizes=np.array([600, 500, 800]),
    ...                        loss_weight=10.0, l2_penalty=1e-3)
    >>> s.max_iter, round(s.noise_rate, 2), s.penalty.shape
    (5, 5.0, (3,))

    One private round with a noise rate per node, averaged by declared size (``admm-utility``):

    >>> s1 = public_pp_schedule(1.0, degrees=np.array([1, 2, 1]), sizes=np.array([600, 500, 800]),
    ...                         loss_weight=10.0, l2_penalty=1e-3, n_rounds=1, min_noise_rate=2.0,
    ...                         progress=4.0, per_site_noise=True)
    >>> s1.max_iter, s1.average_from, [round(float(w), 3) for w in s1.weights]
    (1, 1, [0.316, 0.263, 0.421])
    >>> sorted(s1.kwargs())             # result.round_average(s1.average_from, s1.weights) is scored
    ['max_iter', 'noise_rate', 'penalty', 'theta']
    """
    eps = epsilon.epsilon if isinstance(epsilon, Budget) else check_positive(epsilon, "epsilon")
    if not (inexact_fraction >= 0):
        raise InvalidParameterError("inexact_fraction: must be >= 0")
    eps_exact = eps / (1.0 + float(inexact_fraction))
    v = np.asarray(degrees, dtype=float)
    b = np.asarray(sizes, dtype=float)
    if v.shape != b.shape or v.ndim != 1 or np.any(v <= 0) or np.any(b <= 0):
        raise InvalidParameterError("degrees, sizes: one positive value per node each")
    if int(n_rounds) != n_rounds or n_rounds < 1:
        raise InvalidParameterError("n_rounds: expected a positive integer")
    lam = check_positive(l2_penalty, "l2_penalty")
    c = check_positive(loss_weight, "loss_weight")
    target = check_positive(progress, "progress")
    floor = check_positive(min_noise_rate, "min_noise_rate")
    jac = 1.4 * c1 / lipschitz
    need = b if per_site_noise else np.full_like(b, b.min())
    alphas = np.maximum(floor, eps_exact * need * lam / (2.0 * target) - jac)
    # a hair under the budget so that calibration (min over nodes) lands on this α, not above ε
    spend = eps_exact * (1.0 - 1e-9)
    eta = n_rounds * c * (1.4 * c1 + lipschitz * alphas) / (spend * v * b)
    if shared:
        eta = np.full_like(eta, eta.max())
    # Thm 4.1's θ-condition 2c₁ < (B_i/C)(ρ/N + 2θV_i), ρ/N = Cλ, with θ <= every η_i: raise θ (and any
    # η_i below it; a larger η_i only lowers that node's bound) when the smallest nodes need it
    theta_needed = c * (2.0 * c1 / b - lam) / (2.0 * v)
    thetas: Array | None = None
    if n_rounds == 1 and not shared:
        # one round: θ_i = η_i per node, raised only where the node's own θ-condition needs it
        eta = np.maximum(eta, 1.01 * theta_needed)
        thetas = eta.copy()
        theta = float(eta.min())
    else:
        theta = max(float(eta.min()), 1.01 * float(np.max(theta_needed)))
        eta = np.maximum(eta, theta)
    rates: Array | None = None
    if per_site_noise:
        # each node spends its whole budget at its (possibly raised) η_i: α_i from the budget equation
        rates = (spend * eta * v * b / (n_rounds * c) - 1.4 * c1) / lipschitz
    steps = n_rounds * c / (2.0 * eta * v)
    return PublicSchedule(
        penalty=eta,
        theta=theta,
        max_iter=int(n_rounds),
        noise_rate=float(alphas.min() if rates is None else rates.min()),
        progress=steps,
        average_from=int(n_rounds) // 2 + 1,
        noise_rates=rates,
        weights=b / b.sum(),
        thetas=thetas,
    )
