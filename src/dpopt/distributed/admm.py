"""Private distributed ADMM over a network: M-ADMM, penalty and dual-variable perturbation (seed 004).

Zhang, Khalili & Liu, *Improving the Privacy and Accuracy of ADMM-Based Distributed Algorithms*
(ICML 2018); spec ``distributed-and-private-gradient-methods.md`` §4.

N nodes of a connected :class:`~dpopt.distributed.topology.Topology` each hold a data set
D_i = {(x_n, y_n)} (B_i rows, ‖x_n‖₂ <= 1, y_n ∈ {±1}) and jointly solve

    min_f  Σ_i (C/B_i) Σ_n log(1 + exp(-y_n fᵀx_n)) + ρ/2 ‖f‖²          (Z(1))

by exchanging only their primal vectors f_i(t) with their neighbours.  Methods (``method=``):

``"admm"``      conventional (simplified) ADMM, Z(8)-(9): penalty η = dual step θ, constant.
``"m-admm"``    M-ADMM, Z(10)-(11): each node's own penalty η_i(t) ≥ θ (non-decreasing), θ decoupled.
``"pp"``        penalty perturbation (Algorithm 1): node i minimises
                O(f) + 2λ_iᵀf + η_i(t+1) Σ_j ‖f + ε_i(t+1) − ½(f_i(t) + f_j(t))‖², ε ∝ exp(−α_i‖ε‖₂).
``"dvp"``       dual-variable perturbation (Zhang & Zhu 2017): PP with η_i(t) ≡ θ.
``"primal"``    primal-variable perturbation (Zhang & Zhu 2017), a baseline: the exact M-ADMM minimiser
                plus ε ∝ exp(−α_i‖ε‖₂) is released (and used by the node itself).

The algorithm is written as per-node steps (:mod:`dpopt.distributed._admm_node`) run by an engine
(:mod:`dpopt.distributed.engines`): same seed, same result on every engine.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import os
import secrets
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpopt._validation import check_array, check_int, check_memory, check_positive
from dpopt.accounting import (
    Accountant,
    Budget,
    EpsilonDeltaEvent,
    NonPrivateEvent,
    PrivacySpent,
    charge,
    check_caller_accountant,
    commit,
)
from dpopt.distributed import _admm_node
from dpopt.distributed._admm_node import LocalSolveError, ShardSpec, logistic_newton
from dpopt.distributed.admm_privacy import (
    PublicSchedule,
    calibrate_noise_rate,
    default_problem,
    exact_solve_note,
    loss_constants,
    pp_privacy_bound,
    pp_privacy_bound_geometric,
    primal_privacy_bound,
    public_pp_schedule,
)
from dpopt.distributed.checkpoint import CheckpointError, RunStore, check_run_options, fingerprint_arrays
from dpopt.distributed.engines import Engine, EngineError, make_engine
from dpopt.distributed.schedules import Schedule, as_schedule, geometric
from dpopt.distributed.sites import Site, SiteShardSpec, as_sites, make_site_shard, site_groups
from dpopt.distributed.topology import Topology, shard_nodes
from dpopt.exceptions import (
    BoundsViolationError,
    BudgetExceededError,
    InvalidParameterError,
    MissingDataBoundsError,
    PrivacyClaimWarning,
)
from dpopt.iteration import Callback, IterationInfo, deprecated_alias, notify
from dpopt.problems import ERMProblem
from dpopt.randomness import RNGLike, SecureRNG, check_rng

__all__ = [
    "ADMMResult",
    "CheckpointError",
    "LocalSolveError",
    "Method",
    "PrivateADMM",
    "PublicSchedule",
    "RoundInfo",
    "Schedule",
    "Site",
    "calibrate_noise_rate",
    "centralized_solution",
    "geometric",
    "pp_privacy_bound",
    "pp_privacy_bound_geometric",
    "primal_privacy_bound",
    "public_pp_schedule",
]

Array = NDArray[np.float64]
Method = Literal["admm", "m-admm", "pp", "dvp", "primal"]  #: ``method=`` of :class:`PrivateADMM`
METHODS: tuple[str, ...] = ("admm", "m-admm", "pp", "dvp", "primal")
_PRIVATE = ("pp", "dvp", "primal")

_NORM_TOL = 1e-9


# ----------------------------------------------------------------------------------------------
# Result
# ----------------------------------------------------------------------------------------------


#: What a callback sees after each round (the shared :class:`dpopt.iteration.IterationInfo`,
#: with ``round``, ``models`` and ``privacy_bound``); the old name is kept for one release.
RoundInfo = IterationInfo


def _readonly(a: Any) -> Array:
    arr = np.array(a, dtype=np.float64)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class ADMMResult:
    """What :meth:`PrivateADMM.run` returns.

    Attributes
    ----------
    models : ndarray of shape (N, d)
        Final models f_i(T), one per node (released; covered by the privacy bound).
    privacy : PrivacySpent
        Worst case over nodes: ε = P(T) = max_i P_i(T) (``inf`` for non-private methods or when an
        assumption of the bound is violated in ``mode="reproduce"``; see ``privacy.notes``).
    node_privacy : ndarray of shape (N,)
        P_i(T) for every node (the per-node ledger's total).
    privacy_history : ndarray of shape (T,)
        P(t) = max_i P_i(t) after each round t = 1..T (the formula's value).
    node_privacy_history : ndarray of shape (T, N)
        P_i(t): the per-node ledger, one row per round.
    method : str
    rounds : int
        Rounds completed (also :attr:`nit`).
    status : {"completed", "stopped"}
    parameters : mapping
        Public, data-independent settings (schedules, C, ρ, topology summary, degrees, node sizes,
        engine).
    models_history : ndarray of shape (T+1, N, d) or None
        All released primals f_i(t), t = 0..T (with ``record_models=True``).
    nonprivate_history : mapping of str to ndarray
        **Not private** (computed on raw data, not covered by the bound; never publish):
        ``"loss"`` (T, N) = L_i(t), each node's mean logistic loss of its own model on its own data;
        ``"mean_loss"`` (T,) = L(t) of the paper; ``"consensus_error"`` (T,) = max_i ‖f_i − f̄‖;
        ``"local_grad_norm"`` (T, N) and ``"local_rel_grad_norm"`` (T, N) achieved by the Newton solves;
        ``"newton_iters"`` (T, N).
    message : str
    """

    models: Array = field(repr=False)
    privacy: PrivacySpent
    node_privacy: Array = field(repr=False)
    privacy_history: Array = field(repr=False)
    node_privacy_history: Array = field(repr=False)
    method: str
    rounds: int
    status: str
    parameters: Mapping[str, Any] = field(default_factory=dict, repr=False)
    models_history: Array | None = field(default=None, repr=False)
    nonprivate_history: Mapping[str, Array] = field(default_factory=dict, repr=False)
    message: str = ""

    def __post_init__(self) -> None:
        for name in ("models", "node_privacy", "privacy_history", "node_privacy_history"):
            object.__setattr__(self, name, _readonly(getattr(self, name)))
        if self.models_history is not None:
            object.__setattr__(self, "models_history", _readonly(self.models_history))
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))
        object.__setattr__(
            self,
            "nonprivate_history",
            MappingProxyType({k: _readonly(v) for k, v in self.nonprivate_history.items()}),
        )

    @property
    def nit(self) -> int:
        """Rounds completed (the shared name; same as :attr:`rounds`)."""
        return self.rounds

    @property
    def success(self) -> bool:
        """True when all planned rounds ran."""
        return self.status == "completed"

    @property
    def average_model(self) -> Array:
        """Mean of the final models (post-processing of released values: no extra privacy cost)."""
        return np.asarray(self.models.mean(axis=0))

    def round_average(self, start: int = 1, weights: ArrayLike | None = None) -> Array:
        """Mean of the released models over rounds ``start``..T and all nodes (needs ``record_models=True``).

        Post-processing of released values: no extra privacy cost.  Each round's penalty-perturbation
        noise moves the released models by about d/α; averaging the last rounds averages it out
        (:func:`~dpopt.distributed.admm_privacy.public_pp_schedule` gives the ``start`` it was tuned with).

        ``weights`` (shape (N,), >= 0, not all 0; normalised here) weights the nodes, e.g. by their
        declared sizes (``PublicSchedule.weights``).  They must be public (not computed from the
        data), so that the weighted mean stays post-processing.  Default: equal weights.
        """
        if self.models_history is None:
            raise InvalidParameterError("round_average: run with record_models=True")
        last = self.models_history.shape[0] - 1
        if int(start) != start or not 0 <= start <= last:
            raise InvalidParameterError(f"start: expected a round in 0..{last}")
        tail = self.models_history[int(start) :]
        if weights is None:
            return np.asarray(tail.mean(axis=(0, 1)))
        w = np.asarray(weights, dtype=float)
        if w.shape != (tail.shape[1],) or not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
            raise InvalidParameterError(
                f"weights: expected {tail.shape[1]} finite non-negative node weights, not all zero"
            )
        return np.asarray(np.einsum("tnd,n->d", tail, w / w.sum()) / tail.shape[0])

    @property
    def worst_node(self) -> int:
        """Node with the largest privacy loss P_i(T)."""
        return int(np.argmax(self.node_privacy))

    def __repr__(self) -> str:
        return (
            f"ADMMResult(method={self.method!r}, rounds={self.rounds}, status={self.status!r}, "
            f"nodes={self.models.shape[0]}, privacy={self.privacy})"
        )


# ----------------------------------------------------------------------------------------------
# Data checks and the centralised reference
# ----------------------------------------------------------------------------------------------


def _check_data(
    data: Sequence[tuple[Any, Any]], n_nodes: int, classification: bool = True
) -> tuple[list[Array], list[Array], int]:
    if isinstance(data, tuple) and len(data) == 2 and not isinstance(data[0], tuple):
        raise InvalidParameterError("data: expected one (X_i, y_i) pair per node, not a single (X, y)")
    data = list(data)
    if len(data) != n_nodes:
        raise InvalidParameterError(
            f"data: expected {n_nodes} (X_i, y_i) pairs (one per node), got {len(data)}"
        )
    xs, ys = [], []
    dim = None
    for i, pair in enumerate(data):
        if len(pair) != 2:
            raise InvalidParameterError(f"data[{i}]: expected a pair (X_i, y_i)")
        x = check_array(pair[0], f"X of node {i}", ndim=2)
        y = check_array(pair[1], f"y of node {i}", ndim=1)
        if x.shape[0] == 0:
            raise InvalidParameterError(f"data: node {i} holds no rows (empty node)")
        if y.shape[0] != x.shape[0]:
            raise InvalidParameterError(f"data: node {i} has {x.shape[0]} rows but {y.shape[0]} labels")
        if dim is None:
            dim = x.shape[1]
        elif x.shape[1] != dim:
            raise InvalidParameterError(
                f"data: node {i} has {x.shape[1]} features but node 0 has {dim}; all nodes must share one feature space"
            )
        if classification and not np.all(np.abs(y) == 1.0):
            raise InvalidParameterError(f"data: labels of node {i} must be -1 or +1")
        xs.append(np.ascontiguousarray(x, dtype=np.float64))
        ys.append(y.astype(np.float64))
    assert dim is not None
    return xs, ys, dim


def _clip_rows(x: Array, bound: float) -> Array:
    """Rows projected onto the l2 ball of radius ``bound`` (a per-record map; copies only if needed)."""
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    if not np.any(norms > bound):
        return x
    return np.asarray(x * (bound / np.maximum(norms, bound))[:, None])


def centralized_solution(
    data: Sequence[tuple[Any, Any]], *, loss_weight: float = 1.0, reg: float = 1e-2, tol: float = 1e-12
) -> Array:
    """Non-private minimiser of Z(1): Σ_i (C/B_i) Σ_n log(1 + exp(−y fᵀx)) + ρ/2 ‖f‖² (Newton).

    **Not private**: a reference for tests and experiments only.
    """
    data = list(data)
    xs, ys, _ = _check_data(data, len(data))
    xy = [y[:, None] * x for x, y in zip(xs, ys, strict=True)]
    c = check_positive(loss_weight, "loss_weight")
    f, _ = logistic_newton(xy, [c / x.shape[0] for x in xs], check_positive(reg, "reg"), tol=tol)
    return f


# ----------------------------------------------------------------------------------------------
# Run-loop helpers (no data: only public values and released vectors)
# ----------------------------------------------------------------------------------------------


def _enforce_rows(x: Array, bound: float, tol: float = _NORM_TOL) -> Array:
    """Rows with l2 norm above ``bound·(1 + tol)`` scaled down to norm ``bound``; the others unchanged.

    The per-row map a site applies to enforce the declared feature bound (it depends only on the row
    and the public bound).  Rows the in-memory check accepts (norm <= bound·(1 + tol), the float
    tolerance ``_NORM_TOL``) are left bit-identical, so a site run equals the in-memory run on data
    within the bound.
    """
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    over = norms > bound * (1.0 + tol)
    if not np.any(over):
        return x
    return np.asarray(x * np.where(over, bound / np.where(over, norms, 1.0), 1.0)[:, None])


def _node_rows(x: Array, y: Array, bound: float = math.inf, clip: bool = True) -> tuple[Array, Array]:
    """A node's (X_i, y_i) as the shard program wants them, rows mapped onto the ball of radius ``bound``
    (``clip``: projected, as ``DataBounds(clip=True)``; else :func:`_enforce_rows`, which keeps rows within
    the float tolerance).  Module level: runs in site workers; no copy unless a row is outside."""
    xa = np.asarray(x, dtype=np.float64)
    if bound < math.inf:
        xa = _clip_rows(xa, bound) if clip else _enforce_rows(xa, bound)
    return xa, np.asarray(y, dtype=np.float64)


def _draw_key(g: np.random.Generator | SecureRNG | None) -> tuple[int, int]:
    """The run's noise key: from the OS CSPRNG for ``"secure"``, else from the generator."""
    if g is None or isinstance(g, SecureRNG):
        return (secrets.randbits(63), secrets.randbits(63))
    k2 = g.integers(0, 2**63 - 1, size=2)
    return (int(k2[0]), int(k2[1]))


def _already_composed(accountant: Accountant | None, label: str) -> bool:
    """True when the accountant's ledger already holds an entry with this run's label."""
    if accountant is None:
        return False
    return any(getattr(e, "label", None) == label for e in getattr(accountant, "ledger", ()))


def _join_state(
    snaps: Sequence[Mapping[str, Any]], groups: Sequence[NDArray[np.int64]], n: int, dim: int
) -> dict[str, Array]:
    """Per-shard snapshots (arrays with one row per shard node) as global per-node arrays."""
    out: dict[str, Array] = {}
    for key in snaps[0]:
        first = np.asarray(snaps[0][key])
        arr = np.zeros((n, *first.shape[1:]), dtype=first.dtype)
        for grp, snap in zip(groups, snaps, strict=True):
            arr[grp] = np.asarray(snap[key])
        out[key] = arr
    return out


def _split_state(arrays: Mapping[str, Array], groups: Sequence[NDArray[np.int64]]) -> list[dict[str, Array]]:
    """Global per-node arrays as per-shard snapshots (any shard layout)."""
    return [{k: np.ascontiguousarray(v[grp]) for k, v in arrays.items()} for grp in groups]


def _gather_models(
    snaps: Sequence[Mapping[str, Any]], groups: Sequence[NDArray[np.int64]], n: int, dim: int
) -> Array:
    models = np.zeros((n, dim))
    for grp, snap in zip(groups, snaps, strict=True):
        models[grp] = snap["F"]
    return models


def _digest(models: Array) -> bytes:
    return hashlib.sha256(np.ascontiguousarray(models, dtype="<f8").tobytes()).digest()


def _log_release(
    store: RunStore | None, logged: dict[int, bytes], round_: int, models: Array, full: bool = True
) -> None:
    """Append round ``round_``'s released vectors to the run's log, or check a replayed round against it."""
    if store is None:
        return
    if round_ in logged:
        if logged[round_] != _digest(models):
            raise CheckpointError(
                f"replayed round {round_} differs from the message released before the restart (the log "
                "in the run directory): the data, the code or the key changed; the run stops here"
            )
        return
    logged[round_] = store.append_release(round_, models, full=full)


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _name_sites(
    err: EngineError, sites: Sequence[Site] | None, groups: Sequence[NDArray[np.int64]], t: int
) -> EngineError:
    """The engine's error, naming the sites (or nodes) of the failed shard and the round."""
    where = ""
    if err.shard is not None and 0 <= err.shard < len(groups):
        grp = groups[err.shard]
        if sites is not None:
            where = "sites " + ", ".join(sites[int(i)].name for i in grp)
        else:
            where = f"nodes {int(grp[0])}..{int(grp[-1])}"
    lines = str(err).splitlines()
    head = f"{lines[0]} [{where}; round {t + 1}]" if where else f"{lines[0]} [round {t + 1}]"
    return EngineError("\n".join([head, *lines[1:]]), shard=err.shard, round=err.round, crashed=err.crashed)


# ----------------------------------------------------------------------------------------------
# The driver
# ----------------------------------------------------------------------------------------------


class PrivateADMM:
    """Distributed (private) ADMM for l2-regularised logistic regression over a network.

    Parameters
    ----------
    topology : Topology
        Connected communication graph; node i talks only to ``topology.neighbours(i)``.
    method : {"admm", "m-admm", "pp", "dvp", "primal"}, default "pp"
        See the module docstring.
    penalty : float, array of shape (N,), Schedule or callable, default 0.5
        η_i(r), r = 1..T (data independent).  ``"admm"`` needs a constant shared η and uses θ = η;
        ``"dvp"`` uses η ≡ θ (leave ``penalty`` unset).
    theta : float, array of shape (N,), Schedule or callable, default 0.5
        Dual step θ (Z(11)); per-node or time-varying θ is allowed (Fig. 1(a)) but is outside the
        convergence theorems.  Must satisfy θ_i(r) <= η_i(r').  A *node-dependent* θ breaks the
        conservation of Σ_i λ_i, so the run reaches consensus at a point that is in general not the
        minimiser of Z(1) (a warning is issued; dpopt's tests show the bias; with ``max_iter=1`` no dual
        step precedes the release, so there is no bias and no warning).
    noise_rate : float, Schedule or None
        α_i(r) of the noise density ∝ exp(−α‖ε‖₂) (private methods).  ``None`` with ``budget``:
        calibrated so that the worst-case bound equals ``budget.epsilon`` with
        α(r) = α(1)·``noise_ratio``^(r−1).
    max_iter : int, default 100
        T, the number of rounds (fixed in advance; the privacy bound covers all T).  ``n_rounds=``
        is the deprecated old name.
    loss_weight : float, default 1.0
        C; must satisfy C <= B_i for every node.
    reg : float, optional
        ρ (R(f) = ½‖f‖², split as ρ/N per node); default 1e-2.  Not with ``problem`` (use its
        ``l2_penalty``).
    budget : Budget, optional
        Privacy budget (pure ε; replace-one neighbours).  The run refuses (before drawing noise) when
        the bound P(T) would exceed it.
    noise_ratio : float, default 1.0
        q₂ for calibration from ``budget``.
    init : {"zeros", "normal"} or array of shape (N, d), default "zeros"
        f_i(0), independent of the data (``"normal"``: N(0, init_scale²·I), keyed per node).  A given
        array must not depend on the private data.
    local_tol : float, default 1e-10
        Relative gradient-norm tolerance of the local solves (see
        :func:`~dpopt.distributed._admm_node.solve_local_batch`: batched over the nodes of a shard,
        fixed-step gradient iterations where the subproblem is well conditioned, damped Newton
        elsewhere and for the nodes the gradient phase did not finish).
    local_max_iter : int, default 50
        Newton iterations (after the gradient phase) before :class:`LocalSolveError`.
    mode : {"strict", "reproduce"}, default "strict"
        ``"strict"`` raises when an assumption of the privacy bound fails; ``"reproduce"`` warns
        (:class:`~dpopt.exceptions.PrivacyClaimWarning`), runs, and reports ε = inf.
    solve_tol : float, default 1e-9
        Public absolute bound certified on ‖∇Φ_i‖ at every private local solve; the released primal
        is then within ``solve_tol/μ_i(t)`` of the exact local minimiser (μ_i(t) = ρ/N + 2η_i(t)V_i).
    inexact_fraction : float, default 0.01
        Share f of the guarantee paid for the inexact local solves: every released primal gets an
        extra l2-Laplace output noise of rate β_i(t) = f·ΔP_i(t)·μ_i(t)/(2·solve_tol), so each round
        costs (1 + f) times the exact-solve bound's increment ΔP_i(t).  ``0`` reproduces the paper's
        exact-solve bound (which then does not cover what is computed; warned).
    problem : ERMProblem, optional
        The loss and declared data bounds (:mod:`dpopt.problems`): ``"logistic"`` (default, with
        ``DataBounds(feature_norm=1.0)``: the seed's setting), ``"smooth_hinge"`` or ``"squared"``
        (non-private methods only: Thm 4.1 needs a bounded |𝓛'|), no constraint set, and
        ``l2_penalty`` λ > 0, used as ρ = C·N·λ so that for even splits Z(1) is C·N times the
        problem's objective (1/n)Σℓ + (λ/2)‖f‖².  The privacy constants come from the declared bounds:
        c₁ = sup φ''·X², G = sup |φ'|·X with X = ``bounds.feature_norm`` (see
        :func:`~dpopt.distributed.admm_privacy.loss_constants`); in-memory rows above X are refused
        (or clipped with ``DataBounds(clip=True)``); sites always map their rows onto the ball of radius X.

    Examples
    --------
    >>> from dpopt.accounting import Budget
    >>> from dpopt.datasets import make_logistic
    >>> from dpopt.distributed.admm import PrivateADMM, geometric
    >>> from dpopt.distributed.topology import ring, split_rows
    >>> ds = make_logistic(2000, 10, rng=0)
    >>> parts = split_rows(2000, 5, rng=0)
    >>> data = [(ds.X[p], ds.y[p]) for p in parts]
    >>> admm = PrivateADMM(ring(5), method="pp", penalty=geometric(0.5, 1.1), theta=0.5,
    ...                    budget=Budget(1.0), noise_ratio=1.05, max_iter=50)
    >>> result = admm.run(data, rng=0)                       # or engine="processes" / "ray"
    >>> round(result.privacy.epsilon, 6)                      # worst case over nodes, P(T)
    1.0
    >>> result.models.shape, result.node_privacy.shape
    ((5, 10), (5,))

    Notes
    -----
    **Privacy** (methods ``"pp"``, ``"dvp"``, ``"primal"``).

    *Guarantee*: pure ε-DP with ε = P(T) = max_i P_i(T) under replace-one neighbours (one record of
    one node changes; node sizes B_i public).  For PP/DVP, P_i(t) = Σ_{r<=t} C(1.4c₁ + G·α_i(r)) /
    (η_i(r) V_i B_i) (Thm 4.1, Z(26); G = 1 for the seed); for ``"primal"``, P_i(t) = Σ_{r<=t}
    α_i(r)·2CG/(B_i(ρ/N + 2η_i(r)V_i))
    (output perturbation of a strongly convex solve, basic composition).  The ledger is computed for
    every round and reported per node and as the worst case.

    *What it covers* (spec §7.2 A1): the joint release of **all broadcast primals** {f_i(t)}, i ∈ 𝒩,
    t = 0..T, to anyone (the dual variables are functions of them and θ).  Not covered: the
    ``nonprivate_history`` diagnostics (losses, gradient norms), re-runs or hyper-parameter searches
    on the same data, data-adaptive penalties, data-dependent preprocessing (e.g. column maxima).

    *Assumptions* (A5), checked at run time: ‖x‖₂ <= X (the declared ``problem.bounds.feature_norm``,
    1 by default) for every row; y ∈ {±1}; a loss with |𝓛'| <= g and 0 <= 𝓛'' <= c (logistic: g = 1,
    c = 1/4; smooth hinge: g = 1, c = 1/h), entering the bound as c₁ = cX² and G = gX (the seed's
    bound is the case X = g = 1); R = ½‖f‖² (1-strongly convex); θ_i(r) <= η_i(r) and the
    θ-condition 2c₁ < (B_i/C)(ρ/N + 2θ_min V_i) for every i; C <= B_i; f_i(0) data independent;
    penalties, θ and noise rates fixed before the run (``"primal"`` needs only the row-norm and label
    assumptions, the loss-derivative bound and exact solves).  Exactness (A3): the bound assumes exact local
    minimisers.  dpopt certifies every private local solve to the public absolute gradient norm
    ``solve_tol`` (a solve that cannot be certified stops the run and releases nothing more) and
    adds a small output noise that covers the distance to the exact minimiser (the approximate-
    minima-perturbation argument: under the proof's coupling of the neighbours' noises the exact
    minimisers coincide, so the released inexact ones are within 2·solve_tol/μ of each other); the
    reported ε is (1 + ``inexact_fraction``) times the exact-solve bound.  With
    ``inexact_fraction=0`` the reported ε is the paper's exact-solve bound, which does not account
    for the residual (``privacy.notes`` says so and a warning is issued).

    *Private η is not part of the guarantee* (A2): the bound holds even if the penalties are public;
    the paper's argument that secret penalties make inference impossible is informal and dpopt
    does not rely on it.

    *Calibration*: ``"paper"`` — the bound of Thm 4.1 as stated (dpopt has found no error in it
    under the assumptions above).  Randomness: noise draws are keyed by (run seed, node, round), so
    a replayed round (recovery after a worker failure, or a resumed run after a driver crash, see
    ``checkpoint_dir``) releases the same values and spends nothing extra.  ``rng="secure"`` and
    ``None`` draw the run key from the operating system's CSPRNG; the l2-Laplace noise is then
    drawn in floating point from numpy streams keyed by it (ADMM has no exact sampler for this
    continuous noise; ``privacy.notes`` says so).  With ``checkpoint_dir`` the key is stored there
    before any noise is drawn (a secret file, mode 0600) so that a crash never leads to fresh noise
    for a released round.
    """

    def __init__(
        self,
        topology: Topology,
        *,
        method: Method = "pp",
        penalty: Any = None,
        theta: Any = 0.5,
        noise_rate: Any = None,
        max_iter: int | None = None,
        loss_weight: float = 1.0,
        reg: float | None = None,
        budget: Budget | None = None,
        noise_ratio: float = 1.0,
        init: str | ArrayLike = "zeros",
        init_scale: float = 0.1,
        local_tol: float = 1e-10,
        local_max_iter: int = 50,
        mode: Literal["strict", "reproduce"] = "strict",
        solve_tol: float = 1e-9,
        inexact_fraction: float = 0.01,
        n_rounds: int | None = None,
        problem: ERMProblem | None = None,
    ) -> None:
        if not isinstance(topology, Topology):
            raise InvalidParameterError("topology: expected a dpopt.distributed.topology.Topology")
        if method not in METHODS:
            raise InvalidParameterError(f"method: must be one of {METHODS}")
        if mode not in ("strict", "reproduce"):
            raise InvalidParameterError("mode: must be 'strict' or 'reproduce'")
        if budget is not None and not isinstance(budget, Budget):
            raise InvalidParameterError("budget: expected a dpopt.accounting.Budget")
        if budget is not None and budget.delta != 0:
            raise InvalidParameterError("budget: the ADMM bounds are pure ε-DP; use delta=0")
        self.topology = topology
        self.method = method
        rounds = deprecated_alias(
            {"n_rounds": n_rounds} if n_rounds is not None else {},
            "n_rounds",
            "max_iter",
            max_iter,
            where="PrivateADMM",
        )
        #: T, the planned number of rounds (fixed in advance; the privacy bound covers all of them)
        self.n_rounds = check_int(100 if rounds is None else rounds, "max_iter")
        # the (T, N) schedule tables and the run's per-round history, ~8 float64 tables: refuse up front
        check_memory(
            64.0 * self.n_rounds * topology.n_nodes,
            f"max_iter={self.n_rounds}: the per-round tables ({topology.n_nodes} nodes)",
            fix="use fewer rounds",
        )
        self.loss_weight = check_positive(loss_weight, "loss_weight")
        if problem is None:
            #: the problem solved (default: the seed's logistic loss, ‖x‖₂ <= 1, ρ = ``reg``)
            self.problem = default_problem(1e-2 if reg is None else check_positive(reg, "reg"))
            self.reg = self.problem.l2_penalty
        else:
            if not isinstance(problem, ERMProblem):
                raise InvalidParameterError("problem: expected a dpopt.problems.ERMProblem")
            if reg is not None:
                raise InvalidParameterError(
                    "reg: give the regulariser as problem.l2_penalty (ρ = C·N·l2_penalty) when passing a problem"
                )
            if problem.constraint is not None:
                raise InvalidParameterError(
                    "problem.constraint: private ADMM solves unconstrained problems (its bound has no projection "
                    "step); use constraint=None"
                )
            if problem.l2_penalty <= 0:
                raise InvalidParameterError(
                    "problem.l2_penalty: must be > 0 (the privacy bound and the convergence theory need the "
                    "strongly convex l2 regulariser)"
                )
            self.problem = problem
            # Z(1) with B_i = n/N equals C·N·[(1/n)Σℓ + (λ/2)‖f‖²] when ρ = C·N·λ: the problem's objective
            self.reg = self.loss_weight * topology.n_nodes * problem.l2_penalty
        self._consts = loss_constants(self.problem, self.problem.dim or 1)
        if method in _PRIVATE and self._consts.covered:
            err = MissingDataBoundsError if "not declared" in self._consts.covered else InvalidParameterError
            raise err(f"method {method!r}: " + self._consts.covered)
        self.budget = budget
        self.noise_ratio = check_positive(noise_ratio, "noise_ratio")
        self.mode = mode
        self.local_tol = check_positive(local_tol, "local_tol")
        self.solve_tol = check_positive(solve_tol, "solve_tol")
        f = float(inexact_fraction) if isinstance(inexact_fraction, int | float) else math.nan
        if not 0.0 <= f < 1.0:
            raise InvalidParameterError(
                "inexact_fraction: must lie in [0, 1) (0: the paper's exact-solve bound)"
            )
        self.inexact_fraction = f
        self.local_max_iter = check_int(local_max_iter, "local_max_iter")
        self.init_scale = check_positive(init_scale, "init_scale")
        if isinstance(init, str):
            if init not in ("zeros", "normal"):
                raise InvalidParameterError("init: must be 'zeros', 'normal' or an (N, d) array")
            self.init: str | Array = init
        else:
            self.init = check_array(init, "init", ndim=2)
        self.theta = as_schedule(theta, "theta")
        self.penalty = as_schedule(0.5 if penalty is None else penalty, "penalty")
        if method in ("admm", "m-admm") and noise_rate is not None:
            raise InvalidParameterError(
                f"noise_rate: method {method!r} adds no noise; use 'pp', 'dvp' or 'primal'"
            )
        if method in _PRIVATE and noise_rate is None and budget is None:
            raise InvalidParameterError(f"method {method!r}: give noise_rate or a budget to calibrate it")
        self.noise_rate = None if noise_rate is None else as_schedule(noise_rate, "noise_rate")
        # tables (T, N)
        n, t_ = topology.n_nodes, self.n_rounds
        self._theta = self.theta.table(t_, n, "theta")
        if method == "dvp":
            if penalty is not None:
                raise InvalidParameterError("penalty: 'dvp' uses η ≡ θ; leave penalty unset (or use 'pp')")
            self._penalty = self._theta.copy()
        elif method == "admm":
            self._penalty = self.penalty.table(t_, n, "penalty")
            if not np.all(self._penalty == self._penalty[0, 0]):
                raise InvalidParameterError(
                    "penalty: conventional ADMM needs one constant penalty; use 'm-admm'"
                )
            self._theta = self._penalty.copy()
        else:
            self._penalty = self.penalty.table(t_, n, "penalty")

    # -- public helpers -------------------------------------------------------------------------

    def penalty_table(self) -> Array:
        """η_i(r) as a (T, N) table."""
        return self._penalty.copy()

    def theta_table(self) -> Array:
        """θ_i(r) as a (T, N) table."""
        return self._theta.copy()

    def privacy_bound(self, sizes: ArrayLike) -> Array:
        """The (T, N) per-node ledger P_i(t) for node sizes B_i (public), before any data is touched."""
        b = np.asarray(sizes, dtype=float)
        if self.method not in _PRIVATE:
            return np.full((self.n_rounds, self.topology.n_nodes), math.inf)
        return (1.0 + self.inexact_fraction) * self._exact_solve_bound(b, self._alpha_table(b))

    def _exact_solve_bound(self, sizes: Array, alpha: Array) -> Array:
        """The seed's (T, N) ledger for exact local minimisers (Thm 4.1, or basic composition)."""
        deg = self.topology.degrees
        if self.method in ("pp", "dvp"):
            return pp_privacy_bound(
                self._penalty, alpha, deg, sizes, self.loss_weight, self._consts.c1, self._consts.lipschitz
            )
        return primal_privacy_bound(
            self._penalty,
            alpha,
            deg,
            sizes,
            self.loss_weight,
            self.reg / self.topology.n_nodes,
            self._consts.lipschitz,
        )

    def _inexact_rate_table(self, sizes: Array, alpha: Array) -> Array | None:
        """β_i(r): rate of the output noise covering round r's certified inexact solve at node i."""
        if self.inexact_fraction == 0.0:
            return None
        ledger = self._exact_solve_bound(sizes, alpha)
        increments = np.diff(ledger, axis=0, prepend=0.0)
        mu = self.reg / self.topology.n_nodes + 2.0 * self._penalty * self.topology.degrees[None, :]
        rate = self.inexact_fraction * increments * mu / (2.0 * self.solve_tol)
        return np.maximum(rate, np.finfo(float).tiny)

    def _alpha_table(self, sizes: Array) -> Array:
        n, t_ = self.topology.n_nodes, self.n_rounds
        if self.noise_rate is not None:
            return self.noise_rate.table(t_, n, "noise_rate")
        assert self.budget is not None
        a1 = calibrate_noise_rate(
            Budget(self.budget.epsilon / (1.0 + self.inexact_fraction), 0.0),
            penalty=self._penalty,
            degrees=self.topology.degrees,
            sizes=sizes,
            ratio=self.noise_ratio,
            loss_weight=self.loss_weight,
            method=self.method,  # type: ignore[arg-type]
            reg_per_node=self.reg / n,
            c1=self._consts.c1,
            lipschitz=self._consts.lipschitz,
        )
        return np.full((t_, n), a1) * self.noise_ratio ** np.arange(t_)[:, None]

    def _site_ledger(self, ledger: Array, eng: Engine, sites: Sequence[Site], owned: Sequence[int]) -> Array:
        """``ledger`` with the columns of sites that keep their own schedule replaced by their reports."""
        reported = getattr(eng, "site_privacy", {})
        out = np.array(ledger, dtype=np.float64)
        for i in owned:
            got = reported.get(sites[i].name)
            arr = None if got is None else np.asarray(got, dtype=np.float64)
            if (
                arr is None
                or arr.shape != (self.n_rounds,)
                or not np.all(np.isfinite(arr) & (arr > 0))
                or np.any(np.diff(arr) < 0)
            ):
                raise InvalidParameterError(
                    f"site {sites[i].name}: keeps its own privacy schedule but did not report a valid per-node "
                    f"bound P_i(t) for the {self.n_rounds} rounds at start-up (engine {eng.name!r})"
                )
            out[:, i] = arr
        return out

    # -- checks ---------------------------------------------------------------------------------

    def _assumption_failures(self, norms_ok: bool, sizes: Array, site_owned: Sequence[int] = ()) -> list[str]:
        fails = []
        deg = self.topology.degrees.astype(float)
        c = self.loss_weight
        if not norms_ok:
            xb = self._consts.feature_norm
            fails.append(
                f"a feature row has l2 norm > {xb:g} (the bound needs ‖x‖₂ <= problem.bounds.feature_norm; "
                "normalise rows or declare DataBounds(..., clip=True))"
            )
        if self.method == "primal":
            return fails  # output perturbation needs only the norm bound (and exact solves)
        if np.any(c > sizes):
            fails.append(
                f"loss_weight C={c:g} exceeds the smallest node size {int(sizes.min())} (needs C <= B_i)"
            )
        job = np.setdiff1d(
            np.arange(self.topology.n_nodes), site_owned
        )  # sites with their own η check it there
        if np.any(
            self._theta[:, job].max(axis=0, initial=-np.inf)
            > self._penalty[:, job].min(axis=0, initial=np.inf)
        ):
            fails.append("θ_i(r) > η_i(r) for some node and round (needs θ <= η_i(t))")
        theta_min = self._theta.min(axis=0)
        lhs = (sizes / c) * (self.reg / self.topology.n_nodes + 2.0 * theta_min * deg)
        if np.any(2 * self._consts.c1 >= lhs):
            fails.append("θ-condition 2c₁ < (B_i/C)(ρ/N + 2θV_i) fails for some node")
        return fails

    # -- run ------------------------------------------------------------------------------------

    def run(
        self,
        data: Sequence[tuple[Any, Any]] | Sequence[Site],
        *,
        rng: RNGLike,
        engine: str | Engine = "inprocess",
        n_shards: int | None = None,
        record_models: bool = False,
        checkpoint_every: int | None = 10,
        max_recoveries: int = 3,
        callback: Callback | None = None,
        accountant: Accountant | None = None,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        resume: bool = False,
        checkpoint_log: Literal["messages", "digests"] = "messages",
        site_diagnostics: bool = False,
    ) -> ADMMResult:
        """Run T rounds on per-node data: in-memory pairs ``(X_i, y_i)`` or :class:`Site` loaders.

        Parameters
        ----------
        data : sequence of (X_i, y_i) or of Site
            One entry per node.  Pairs: X_i of shape (B_i, d), labels in {−1, +1}, held by the
            driver (simulations, reproductions).  :class:`~dpopt.distributed.sites.Site` objects:
            each site's rows are loaded inside the worker that hosts it (on Ray, an actor placed on
            the machine offering the resource ``site:NAME``); the driver only learns the public
            node sizes B_i, the dimension and the released primals.  Each site enforces the
            declared feature bound itself: its rows are mapped onto the ball of radius
            ``problem.bounds.feature_norm`` (rows inside it unchanged, rows outside scaled down
            to it; a per-row map, as with ``DataBounds(clip=True)``), so no yes/no about the
            bound leaves a site.  In-memory pairs are checked in the caller's process instead:
            a row above the bound raises unless ``clip=True``.  Sites sharing a ``group`` share a
            worker; shards = site groups.
        rng : int, Generator, "secure" or None
            Run key for initialisation and noise (every draw keyed by node, round and purpose).
            ``None`` and ``"secure"`` draw the key from the operating system's CSPRNG (the noise
            itself is drawn in floating point from numpy streams keyed by it; ADMM has no exact
            sampler).  With ``checkpoint_dir`` the key is stored there (secret, mode 0600) before
            any noise is drawn, and a resumed run uses the stored key whatever ``rng`` says (an
            int seed that derives another key is refused).
        engine : {"inprocess", "processes", "ray"} or Engine
            Where shards run.  An engine given by name is created and closed by this call; an Engine
            instance is left open.
        n_shards : int, optional
            Number of shards (contiguous node groups); default: the engine's worker count (with
            sites: the number of site groups).
        record_models : bool, default False
            Keep every released f_i(t) in ``models_history``.
        checkpoint_every : int or None, default 10 (None: no periodic checkpoint; 0 or less is refused)
            Rounds between per-shard checkpoints (in memory, and in ``checkpoint_dir`` when given);
            after a worker failure or a worker that stops answering (see the engines' ``timeout``)
            the run restarts the workers from the last checkpoint and replays (bit-identically), at
            most ``max_recoveries`` times, else raises
            :class:`~dpopt.distributed.engines.EngineError` naming the sites and the round.
        callback : callable, optional
            ``callback(info)`` after each round with a :class:`dpopt.iteration.IterationInfo`
            (``info.nit``/``info.round``, ``info.models``, ``info.privacy_bound``: public values
            only); returning ``True`` or raising ``StopIteration`` stops the run (status
            ``"stopped"``).
        accountant : Accountant, optional
            A caller's ledger (``neighbouring="replace_one"``): the whole planned run's guarantee
            (the worst node's bound P(T) over all T rounds, pure ε) is composed into it before any
            noise is drawn; it refuses when over its budget (nothing is drawn then).  The entry's
            label carries the run id; a resumed run is not composed again into a ledger that holds
            it (a persistent ledger), so resuming never charges twice.
        checkpoint_dir : path, optional
            Durable run directory (:mod:`dpopt.distributed.checkpoint`): the noise key (**secret**,
            mode 0600), the per-node state every ``checkpoint_every`` rounds (atomic) and an
            append-only log of every released message.
        resume : bool, default False
            Continue the run stored in ``checkpoint_dir`` after a crash (or start it when the
            directory holds none): rounds after the last checkpoint are replayed with the stored
            key, checked against the log, and never get fresh noise.
        checkpoint_log : {"messages", "digests"}, default "messages"
            What the run directory's log keeps of each released round: the vectors (N·d·8 bytes
            per round) or only their SHA-256 (enough to check a replay; for very large networks).
        site_diagnostics : bool, default False
            With sites: let the workers report the non-private diagnostics computed on their rows
            (losses, gradient norms).  Off by default, so that only released primals leave a site
            (``nonprivate_history`` is then NaN except ``consensus_error``).

        Returns
        -------
        ADMMResult

        Notes
        -----
        **Privacy**: see the class docstring (pure ε-DP, replace-one, P(T) worst case over nodes,
        ``"paper"`` bound of Thm 4.1; covers all broadcast primals).  A resumed run releases
        exactly the messages of the original (same key, same data): the guarantee is that of one
        run.  If a site's data changed between the crash and the resume, the replayed messages
        differ from the log and the run stops at the first such round (that round's messages have
        then been exchanged between the sites: do not change data under a run directory).
        """
        topo = self.topology
        n = topo.n_nodes
        # checkpoint_every: None or a positive int; checkpoint_log: "messages" or "digests"
        check_run_options(checkpoint_every, checkpoint_log)
        full_log = checkpoint_log == "messages"
        sites = as_sites(data)
        xb = self._consts.feature_norm
        clip_to = xb if self.problem.bounds.clip and math.isfinite(xb) else math.inf
        xs: list[Array] | None = None
        ys: list[Array] | None = None
        eng: Engine | None = None
        own_engine = not isinstance(engine, Engine)
        placement: list[dict[str, float]] | None = None
        if sites is None:
            xs, ys, dim = _check_data(data, n, self._consts.classification)  # type: ignore[arg-type]
            if self.problem.bounds.norm == "linf":  # the l2 bound used by the theorem depends on d
                self._consts = loss_constants(self.problem, dim)
            if clip_to < math.inf:
                xs = [_clip_rows(x, clip_to) for x in xs]
            sizes = np.array([x.shape[0] for x in xs], dtype=float)
            norms_ok = max(float(np.sqrt(np.einsum("ij,ij->i", x, x)).max()) for x in xs) <= xb * (
                1.0 + _NORM_TOL
            )
        elif len(sites) != n:
            raise InvalidParameterError(f"data: expected {n} sites (one per node), got {len(sites)}")
        elif self.problem.bounds.norm == "linf":
            raise InvalidParameterError(
                "problem.bounds: with sites declare the feature bound in l2 (norm='l2'); an l∞ bound needs d first"
            )
        status = "completed"
        recoveries = 0
        site_owned: list[int] = []
        try:
            if sites is not None:
                groups = site_groups(sites)
                if n_shards is not None and check_int(n_shards, "n_shards") != len(groups):
                    raise InvalidParameterError(
                        f"n_shards: with sites the shards are the {len(groups)} site groups (Site.group)"
                    )
                placement = [{sites[int(i)].resource: 1.0 for i in grp} for grp in groups]
                eng = make_engine(engine)
                # the probe learns only B_i and d (public); the bound is enforced at the sites (to_rows)
                probe = [SiteShardSpec(sites=tuple(sites[int(i)] for i in grp)) for grp in groups]
                eng.start(make_site_shard, probe, [()] * len(groups), placement=placement)
                described = [d for part in eng.call("describe") for d in part]
                by_name = {d["name"]: d for d in described}
                sizes = np.array([by_name[s.name]["n_rows"] for s in sites], dtype=float)
                dims = {int(d["dim"]) for d in described}
                if len(dims) != 1:
                    raise InvalidParameterError(
                        "data: the sites do not share one feature space (their dimensions differ)"
                    )
                dim = dims.pop()
                norms_ok = True  # every site maps its rows onto the declared ball (see _node_rows)
                # sites that keep their own privacy schedule (Flower, site.toml) say so, and only that
                site_owned = [i for i, s in enumerate(sites) if by_name[s.name].get("site_schedule")]
                if site_owned and self.method not in _PRIVATE:
                    raise InvalidParameterError(
                        f"method {self.method!r}: site(s) {', '.join(sites[i].name for i in site_owned)} keep their "
                        "own privacy schedule and run only private methods ('pp', 'dvp', 'primal')"
                    )
            private = self.method in _PRIVATE
            notes: list[str] = []
            if sites is not None and math.isfinite(xb):
                notes.append(
                    f"each site maps its rows onto the declared ball ‖x‖₂ <= {xb:g} (rows inside unchanged, rows "
                    "outside scaled down to it); no site reports whether any row was outside"
                )
            claim_holds = True
            if private:
                fails = self._assumption_failures(norms_ok, sizes, site_owned)
                if fails:
                    msg = "assumptions of the privacy bound fail: " + "; ".join(fails)
                    if self.mode == "strict":
                        err = (
                            BoundsViolationError if any("norm" in f for f in fails) else InvalidParameterError
                        )
                        raise err(msg + " (mode='reproduce' runs anyway and reports ε = inf)")
                    warnings.warn(msg + "; the reported ε is inf", PrivacyClaimWarning, stacklevel=2)
                    notes.append(msg)
                    claim_holds = False
                if self.inexact_fraction > 0:
                    solve_note = (
                        f"every local solve certified to ‖∇Φ‖ <= solve_tol={self.solve_tol:g}; the distance to the "
                        f"exact minimiser is covered by an output noise paid with a share {self.inexact_fraction:g} "
                        "of the guarantee (approximate minima perturbation)"
                    )
                else:
                    solve_note, _ = exact_solve_note(self.local_tol, self.method)  # spec §7.2 A3
                    warnings.warn(
                        solve_note
                        + " (inexact_fraction=0: the residual of the local solves is not accounted for)",
                        PrivacyClaimWarning,
                        stacklevel=2,
                    )
            elif np.any(self._theta > self._penalty):
                warnings.warn(
                    "θ_i(r) > η_i(r) for some node and round: outside M-ADMM's convergence theorem",
                    UserWarning,
                    stacklevel=2,
                )
            # with one round no dual step precedes a release, so a node-dependent θ only enters Thm 4.1's
            # per-node θ-condition (public_pp_schedule(n_rounds=1) uses θ_i = η_i)
            if self.n_rounds > 1 and np.any(self._theta != self._theta[:, :1]):
                warnings.warn(
                    "node-dependent θ: Σ_i λ_i(t) is no longer conserved, so M-ADMM converges to a consensual "
                    "point that is in general NOT the minimiser of Z(1) (use one θ shared by all nodes)",
                    UserWarning,
                    stacklevel=2,
                )
                notes.append("node-dependent θ: the consensual limit is biased (Σλ_i ≠ 0)")
            dominance = float(
                (2.0 * self._penalty * topo.degrees[None, :]).max()
                / (self.loss_weight * max(self._consts.c1, 1e-300))
            )
            if dominance > 1e8:
                notes.append(
                    f"penalty 2ηV exceeds the data curvature bound C·c₁ by {dominance:.1e} (> 1e8): the local "
                    "solves barely see the data and progress stalls (spec N12)"
                )
            if np.any(np.diff(self._penalty, axis=0) < 0):
                notes.append("η_i(t) decreases somewhere: outside the convergence theorem (Thm 3.1)")
            ledger = self.privacy_bound(sizes)
            alpha = self._alpha_table(sizes) if private else None
            if isinstance(self.init, np.ndarray) and self.init.shape != (n, dim):
                raise InvalidParameterError(f"init: expected shape ({n}, {dim})")
            perturbation = {"pp": "penalty", "dvp": "penalty", "primal": "primal"}.get(self.method, "none")
            inexact = self._inexact_rate_table(sizes, alpha) if alpha is not None else None
            store = None
            if checkpoint_dir is not None:
                store = RunStore(
                    checkpoint_dir,
                    self._run_config(sizes, dim, alpha, inexact, sites),
                    resume=bool(resume),
                )
            elif resume:
                raise InvalidParameterError("resume: needs checkpoint_dir")
            run_id = store.run_id if store is not None else None
            label = f"admm-{self.method}" + (f" run {run_id}" if run_id else "")

            def commit_run() -> None:
                if store is not None and store.resumed and _already_composed(accountant, label):
                    notes.append(
                        f"resumed run {run_id}: already composed into the accountant, not charged again"
                    )
                else:
                    self._commit(
                        private,
                        claim_holds,
                        float(ledger[-1].max()) if private else math.inf,
                        accountant,
                        label,
                    )

            if not site_owned:  # else: their bounds P_i come from the sites at start-up (before any noise)
                commit_run()
            # run key: stored (resume) or drawn, then stored before any noise is drawn
            stored_key = store.key() if store is not None else None
            g = check_rng(rng) if stored_key is None or isinstance(rng, int | np.integer) else None
            key = stored_key if stored_key is not None else _draw_key(g)
            if stored_key is not None and isinstance(rng, int | np.integer) and _draw_key(g) != stored_key:
                raise CheckpointError(
                    "rng: this seed derives another key than the stored run's; resume with the original "
                    "seed (or rng=None to use the stored key)"
                )
            if store is not None and stored_key is None:
                store.save_key(key)
            if isinstance(rng, str) or isinstance(g, SecureRNG):
                notes.append(
                    "rng='secure': run key from the OS CSPRNG; the l2-Laplace noise is drawn in floating point "
                    "from numpy streams keyed by it (no exact sampler for this continuous noise)"
                )
            if eng is None:
                eng = make_engine(engine)
            if sites is None:
                wanted = n_shards if n_shards is not None else getattr(eng, "default_shards", 1)
                groups = shard_nodes(n, check_int(wanted, "n_shards"))
                specs, sources = self._build_specs(groups, xs, ys, alpha, inexact, perturbation, key, dim)
                factory: Any = _admm_node.make_shard
                jobs: list[Any] = list(specs)
            else:
                specs, sources = self._build_specs(groups, None, None, alpha, inexact, perturbation, key, dim)
                factory = make_site_shard
                jobs = [
                    SiteShardSpec(
                        sites=tuple(sites[int(i)] for i in grp),
                        base=spec,
                        factory=_admm_node.make_shard,
                        data_field="data",
                        to_rows=functools.partial(_node_rows, bound=xb, clip=clip_to < math.inf),
                        diagnostics=site_diagnostics,
                    )
                    for grp, spec in zip(groups, specs, strict=True)
                ]
            t_ = self.n_rounds
            models_hist = np.zeros((t_ + 1, n, dim)) if record_models else None
            hist = {
                k: np.full((t_, n), np.nan)
                for k in ("loss", "local_grad_norm", "local_rel_grad_norm", "newton_iters")
            }
            consensus = np.full(t_, np.nan)
            earlier = store.released() if store is not None else {}  # rounds released before a crash
            logged = {r: digest for r, (digest, _) in earlier.items()}
            saved = store.load_state() if store is not None else None
            if saved is not None:
                assert store is not None
                t, arrays = saved
                notes.append(
                    f"resumed from the checkpoint of round {t} in {str(store.path)!r} (run {run_id}); rounds "
                    f"{t + 1}..{max(logged, default=t)} replayed with the stored key and checked against the log"
                )
                eng.start(factory, jobs, sources, states=_split_state(arrays, groups), placement=placement)
            else:
                t = 0
                eng.start(factory, jobs, sources, placement=placement)
            if site_owned:
                assert sites is not None
                ledger = self._site_ledger(ledger, eng, sites, site_owned)
                notes.append(
                    f"site(s) {', '.join(sites[i].name for i in site_owned)} ran their own penalty and noise "
                    "schedules (site.toml), which the coordinator does not know; their per-node bounds P_i(t) are "
                    "the sites' own figures, reported at start-up before any noise was drawn"
                )
                commit_run()
            models = _gather_models(eng.call("snapshot"), groups, n, dim)
            if saved is None:
                _log_release(store, logged, 0, models, full_log)
                if store is not None:
                    store.save_state(0, _join_state(eng.call("snapshot"), groups, n, dim))
            if models_hist is not None:
                for r in range(t):
                    old = earlier.get(r, (b"", None))[1]
                    models_hist[r] = np.nan if old is None else old
                models_hist[t] = models
            earlier.clear()
            checkpoint = (t, eng.call("snapshot"))
            while t < t_:
                try:
                    diags = eng.step(t)
                except EngineError as err:
                    if not err.crashed or recoveries >= max_recoveries:
                        raise _name_sites(err, sites, groups, t) from None
                    recoveries += 1
                    notes.append(
                        f"worker failure ({_first_line(err)}); recovered from the checkpoint of round "
                        f"{checkpoint[0]} and replayed deterministically (same noise, no extra privacy cost)"
                    )
                    eng.restart(checkpoint[1])
                    t = checkpoint[0]
                    continue
                for grp, dg in zip(groups, diags, strict=True):
                    models[grp] = dg["models"]
                    for name, col in (
                        ("loss", "loss"),
                        ("local_grad_norm", "grad_norm"),
                        ("local_rel_grad_norm", "rel_grad_norm"),
                        ("newton_iters", "newton_iters"),
                    ):
                        if col in dg:
                            hist[name][t, grp] = dg[col]
                consensus[t] = float(np.linalg.norm(models - models.mean(axis=0), axis=1).max())
                _log_release(store, logged, t + 1, models, full_log)
                if models_hist is not None:
                    models_hist[t + 1] = models
                t += 1
                if checkpoint_every and (t % checkpoint_every == 0 or t == t_):
                    snap = eng.call("snapshot")
                    checkpoint = (t, snap)
                    if store is not None:
                        store.save_state(t, _join_state(snap, groups, n, dim))
                if callback is not None:
                    m = models.copy()
                    if notify(callback, t, m, round=t, models=m, privacy_bound=float(ledger[t - 1].max())):
                        status = "stopped"
                        break
            if store is not None and status == "completed":
                store.mark(completed=True)
        except BaseException:
            if sites is not None and eng is not None and not own_engine:  # a caller's engine lives on:
                with contextlib.suppress(Exception):  # drop rows a probe job left in its workers
                    eng.call("forget")
            raise
        finally:
            if own_engine and eng is not None:
                eng.close()
        done = t
        ledger_done = ledger[:done]
        node_priv = ledger_done[-1] if done else np.zeros(n)
        if private:
            notes.append(
                "bound of Thm 4.1 (Zhang, Khalili & Liu 2018)"
                if self.method != "primal"
                else "output perturbation of each local solve, basic composition over rounds"
            )
            notes.append(
                "covers all broadcast primals f_i(t); diagnostics (losses, gradient norms) are not private"
            )
            notes.append(solve_note)
            eps = float(node_priv.max()) if claim_holds else math.inf
        else:
            notes.append("no noise was added: the output is not private")
            eps = math.inf
        spent = PrivacySpent(
            epsilon=eps,
            delta=0.0,
            neighbouring="replace_one",
            accountant="paper" if private else "none",
            n_events=done * n,
            notes=tuple(notes),
        )
        params: dict[str, Any] = {
            "method": self.method,
            "n_rounds": t_,
            "loss_weight": self.loss_weight,
            "reg": self.reg,
            "penalty": self.penalty.describe() if self.method != "dvp" else "η ≡ θ",
            "theta": self.theta.describe(),
            "noise_rate": (self.noise_rate.describe() if self.noise_rate is not None else "calibrated")
            if private
            else None,
            "noise_rate_initial": float(alpha[0].min()) if alpha is not None else None,
            "loss": self._consts.loss
            if self._consts.loss != "smooth_hinge"
            else f"smooth_hinge({self._consts.loss_param:g})",
            "c1": self._consts.c1,
            "lipschitz": self._consts.lipschitz,
            "feature_norm": self._consts.feature_norm,
            "local_tol": self.local_tol,
            "solve_tol": self.solve_tol,
            "inexact_fraction": self.inexact_fraction,
            "mode": self.mode,
            "degrees": topo.degrees.tolist(),
            "node_sizes": sizes.astype(int).tolist(),
            "engine": eng.name if eng is not None else str(engine),
            "n_shards": len(groups),
            "recoveries": recoveries,
            "sites": [s.name for s in sites] if sites is not None else None,
            "site_schedules": [sites[i].name for i in site_owned] if sites is not None else [],
            "run_id": run_id,
            **topo.summary(spectral=None),  # never an eigen-solve after the noise
        }
        mean_loss = hist["loss"][:done].mean(axis=1)
        nonpriv = {k: v[:done] for k, v in hist.items()}
        nonpriv["mean_loss"] = mean_loss
        nonpriv["consensus_error"] = consensus[:done]
        msg = f"{self.method}: {done} of {t_} rounds on {n} nodes"
        if private:
            msg += f"; privacy bound P(T) = {eps:.4g}"
        return ADMMResult(
            models=models,
            privacy=spent,
            node_privacy=node_priv,
            privacy_history=ledger_done.max(axis=1) if done else np.zeros(0),
            node_privacy_history=ledger_done,
            method=self.method,
            rounds=done,
            status=status,
            parameters=params,
            models_history=None if models_hist is None else models_hist[: done + 1],
            nonprivate_history=nonpriv,
            message=msg,
        )

    def _run_config(
        self,
        sizes: Array,
        dim: int,
        alpha: Array | None,
        inexact: Array | None,
        sites: Sequence[Site] | None,
    ) -> dict[str, Any]:
        """The public configuration a resumed run must share with the stored one."""
        topo = self.topology
        init = self.init if isinstance(self.init, str) else fingerprint_arrays(self.init)
        return {
            "method": self.method,
            "n_rounds": self.n_rounds,
            "topology": [topo.name, topo.n_nodes, topo.n_edges, fingerprint_arrays(topo.degrees)],
            "dim": int(dim),
            "node_sizes": fingerprint_arrays(sizes),
            "schedules": fingerprint_arrays(self._penalty, self._theta, alpha, inexact),
            "loss_weight": self.loss_weight,
            "reg": self.reg,
            "init": init,
            "init_scale": self.init_scale,
            "local_tol": self.local_tol,
            "local_max_iter": self.local_max_iter,
            "solve_tol": self.solve_tol,
            "inexact_fraction": self.inexact_fraction,
            "mode": self.mode,
            "sites": [s.name for s in sites] if sites is not None else None,
        }

    def _commit(
        self,
        private: bool,
        claim_holds: bool,
        worst: float,
        accountant: Accountant | None,
        label: str | None = None,
    ) -> None:
        """Pay for the whole planned run (all rounds, worst node) before the run key or any noise is drawn."""
        tag = label or f"admm-{self.method}"
        if not private:
            commit(None, budget=None, neighbouring="replace_one", accountant=accountant, label="admm")
            return
        if not claim_holds:  # mode="reproduce" with failed assumptions: no finite guarantee
            charge(
                check_caller_accountant(accountant, "replace_one", who="private ADMM"),
                NonPrivateEvent("private ADMM with failed assumptions (no finite guarantee)"),
                label=tag,
            )
            return
        event = EpsilonDeltaEvent(worst, 0.0, rule=f"admm-{self.method}-thm4.1")
        if self.budget is None:
            charge(check_caller_accountant(accountant, "replace_one", who="private ADMM"), event, tag)
            return
        try:
            commit(
                event,
                budget=Budget(self.budget.epsilon, 0.0),
                neighbouring="replace_one",
                kind="basic",
                accountant=accountant,
                label=tag,
                options={"verify": False},  # a pure-ε bound composed exactly by basic composition
            )
        except BudgetExceededError as err:
            if err.requested is not None and worst > self.budget.epsilon * (1 + 1e-9):
                raise BudgetExceededError(
                    f"the privacy bound P(T)={worst:.4g} exceeds the budget ε={self.budget.epsilon:g}; "
                    "add noise (smaller noise_rate), raise penalties, or run fewer rounds"
                ) from None
            raise

    def _build_specs(
        self,
        groups: list[NDArray[np.int64]],
        xs: list[Array] | None,
        ys: list[Array] | None,
        alpha: Array | None,
        inexact: Array | None,
        perturbation: str,
        key: tuple[int, int],
        dim: int,
    ) -> tuple[list[ShardSpec], list[tuple[int, ...]]]:
        topo = self.topology
        n = topo.n_nodes
        owner = np.empty(n, dtype=np.int64)
        for s_, grp in enumerate(groups):
            owner[grp] = s_
        deg = topo.degrees.astype(float)
        multi = len(groups) > 1
        if topo.is_complete:
            indptr = indices = np.zeros(0, dtype=np.int64)
            on_boundary = np.full(n, multi)
        else:
            indptr, indices = topo.csr()
            src_node = np.repeat(np.arange(n), np.diff(indptr))
            cross = owner[src_node] != owner[indices]
            on_boundary = np.zeros(n, dtype=bool)
            on_boundary[src_node[cross]] = True  # (the graph is symmetric: both ends are marked)
        # published rows of each shard: its boundary nodes, in increasing id order
        published = [grp[on_boundary[grp]] for grp in groups]
        specs, sources = [], []
        for s_, grp in enumerate(groups):
            if topo.is_complete:
                halo = np.setdiff1d(np.arange(n), grp) if multi else np.zeros(0, dtype=np.int64)
                nbr_indptr = nbr_indices = None
            else:
                lens = indptr[grp + 1] - indptr[grp]
                take = np.repeat(indptr[grp] - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(
                    int(lens.sum())
                )
                nbrs = indices[take]
                halo = np.unique(nbrs[owner[nbrs] != s_])
            buffer_ids = np.union1d(grp, halo)
            if not topo.is_complete:
                nbr_indices = np.searchsorted(buffer_ids, nbrs).astype(np.int64)
                nbr_indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            src = np.unique(owner[halo]).tolist()
            halo_from = []
            for p, src_shard in enumerate(src):
                here = halo[owner[halo] == src_shard]
                rows = np.searchsorted(published[src_shard], here).astype(np.int64)
                halo_from.append((p, rows, np.searchsorted(buffer_ids, here).astype(np.int64)))
            init_models = None
            init_kind = self.init if isinstance(self.init, str) else "given"
            if not isinstance(self.init, str):
                init_models = np.asarray(self.init)[grp]
            specs.append(
                ShardSpec(
                    nodes=grp,
                    data=()  # sites: filled in by the worker that hosts them
                    if xs is None or ys is None
                    else tuple(_node_rows(xs[i], ys[i]) for i in grp.tolist()),
                    degrees=deg[grp],
                    n_buffer=int(buffer_ids.size),
                    own_pos=np.searchsorted(buffer_ids, grp).astype(np.int64),
                    nbr_indptr=nbr_indptr,
                    nbr_indices=nbr_indices,
                    halo_from=tuple(halo_from),
                    boundary=np.flatnonzero(on_boundary[grp]).astype(np.int64),
                    penalty=np.ascontiguousarray(self._penalty[:, grp]),
                    theta=np.ascontiguousarray(self._theta[:, grp]),
                    noise_rate=None if alpha is None else np.ascontiguousarray(alpha[:, grp]),
                    perturbation=perturbation,
                    loss_weight=self.loss_weight,
                    reg_per_node=self.reg / n,
                    key=key,
                    init=init_kind,
                    init_scale=self.init_scale,
                    init_models=init_models,
                    tol=self.local_tol,
                    max_iter=self.local_max_iter,
                    dim=dim,
                    solve_tol=self.solve_tol,
                    inexact_rate=None if inexact is None else np.ascontiguousarray(inexact[:, grp]),
                    complete=topo.is_complete,
                    loss=self._consts.loss,
                    loss_param=self._consts.loss_param,
                    c1=self._consts.c1,
                    lipschitz=self._consts.lipschitz,
                    inexact_fraction=self.inexact_fraction,
                )
            )
            sources.append(tuple(src))
        return specs, sources

    def __repr__(self) -> str:
        return f"PrivateADMM(method={self.method!r}, topology={self.topology.name}, n_rounds={self.n_rounds})"
