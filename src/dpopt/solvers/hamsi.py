"""HAMSI: parallel incremental quasi-Newton for partially separable problems (matrix factorization).

Implements chapter 3 of seed 003 (Kuru's thesis, "Hessian Approximated Multiple Subsets Iteration")
as specified in ``spec/distributed-and-private-gradient-methods.md`` §2:

* :func:`hamsi` -- HAMSI with compact L-BFGS (Algorithm H3): deterministic (``schedule="det"``,
  cyclic shift) or stochastic (``"stoc"``, shuffling) subset schedules of length ``K + 1`` whose
  first and last subsets coincide, one curvature pair per outer iteration, the lazy right-to-left
  update ``x <- x - (σ g + W (N (Wᵀ g))) / β_t`` with ``β_t = (η t)^γ``, and gradient-descent
  warm-up until the memory is full.
* :func:`mbgd` -- the mini-batch gradient-descent baseline (same cover, schedule of length ``K``).
* :func:`hamsi_step` and :func:`hamsi_dense` -- the model-minimiser step of Algorithm H1 with an
  explicit Hessian (principal submatrices per block), for small dense partially separable problems.
* :class:`CompactLBFGS` -- the compact (Byrd-Nocedal-Schnabel) inverse-Hessian representation.
* :func:`hamsi_distributed` -- the same algorithm with STRATA-B on the engines of
  :mod:`dpopt.distributed.engines` (in-process, local processes, Ray: one shard per row block,
  column factors passed DSGD-style, one all-reduce of O(M) scalars per inner step).

Parallelism: the blocks of a subset run on ``n_threads`` threads in compiled kernels that release
the GIL (a thread pool with dynamic scheduling by default, or numba ``prange``).  Variable-disjoint blocks (STRATA, STRATA-B) are processed in one
parallel pass; any other subset (HOGWILD, COLOR bins, a single-subset cover) is laid out on the
problem's fixed ``grid x grid`` stratified layout whose strata run in sequence and whose blocks run
in parallel, race-free.  Layouts and reductions do not depend on the thread count, so with the same
seed and a deterministic schedule the iterates are bit-for-bit identical for every thread count.

Resolutions of the thesis's gaps (spec §2.3-2.7, §7.3): curvature pairs are formed *before* the
update of step ``K+1`` (N2); a pair is accepted when ``sᵀy > τ ||s|| ||y||`` (``curvature="relative"``,
default) or, as in the reference C++ code, ``sᵀy / ||y|| > 1e-6`` (``"reference"``); ``σ`` is the
thesis's ``sᵀy / yᵀy`` of the newest pair or the reference code's running minimum started at 500
(``sigma_mode="running_min"``); ``β_t`` counts inner steps (``beta_counter="inner"``, the reference
code's choice and dpopt's default, because the thesis's outer counter diverges on small covers) or
outer iterations (``"outer"``, thesis).  With a single subset (``K = 1``) the schedule is one step
per outer iteration and a pair is formed between consecutive steps, exactly as the reference code
does with one thread.

dpopt's defaults add two safeguards that neither source has (both can be switched off to run the
reference algorithm exactly): ``β_t >= 1`` (``beta_floor=1``, the assumption of Thm 3.1.3) for the
quasi-Newton steps, and a restart (``safeguard=True``) that returns to the last checked point and
clears the memory when a subset's loss more than doubles after quasi-Newton steps.

HAMSI is an optimizer and is **not** differentially private.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import scipy.linalg
from numpy.typing import NDArray

from dpopt._validation import check_int, check_nonneg, check_positive
from dpopt.datasets import Ratings
from dpopt.distributed.partition import Partition, make_partition
from dpopt.exceptions import InvalidParameterError
from dpopt.randomness import RNGLike, as_generator, spawn
from dpopt.solvers import _mf_kernels as _k

if TYPE_CHECKING:
    from dpopt.matrix_factorization import MatrixFactorizationProblem

__all__ = [
    "CompactLBFGS",
    "HamsiResult",
    "hamsi",
    "hamsi_dense",
    "hamsi_distributed",
    "hamsi_step",
    "mbgd",
    "subset_schedule",
]

_CHUNK = 8192  # fixed chunk length of dense reductions (thread-count independent)
_PARALLEL_WORK = 1_000_000  # ratings x rank below which a subset's gradient runs serially

Float = NDArray[np.float64]


# ============================================================================ dense reductions
def _matvec(A: Float, v: Float) -> Float:
    """``A @ v`` for a wide ``A`` (m x n) with a fixed, thread-independent summation order."""
    n = A.shape[1]
    partial = np.empty(((n + _CHUNK - 1) // _CHUNK, A.shape[0]))
    _k.chunked_matvec(A, v, _CHUNK, partial)
    out: Float = partial.sum(axis=0)
    return out


def _pair_products(A: Float, s: Float, y: Float) -> Float:
    """``[s·y, y·y, s·s, S_j·y, Y_j·s, Y_j·y]`` in one sweep (see :func:`_mf_kernels.pair_products`)."""
    m = A.shape[0] // 2
    partial = np.empty(((A.shape[1] + _CHUNK - 1) // _CHUNK, 3 + 3 * m))
    _k.pair_products(A, s, y, _CHUNK, partial)
    out: Float = partial.sum(axis=0)
    return out


def _dot(a: Float, b: Float) -> float:
    return float(_matvec(a.reshape(1, -1), b)[0])


def _mm(a: Float, b: Float) -> Float:
    """Product of small matrices without BLAS (see :func:`_triu_inverse`)."""
    out: Float = (a[:, :, None] * b[None, :, :]).sum(axis=1)
    return out


def _triu_inverse(R: Float) -> Float:
    """Inverse of a small upper-triangular matrix by back substitution (LAPACK calls on 5 x 5 matrices
    cost milliseconds here because of BLAS thread start-up)."""
    k = R.shape[0]
    inv = np.zeros((k, k))
    for j in range(k):
        inv[j, j] = 1.0 / R[j, j]
        for i in range(j - 1, -1, -1):
            acc = 0.0
            for m in range(i + 1, j + 1):
                acc += R[i, m] * inv[m, j]
            inv[i, j] = -acc / R[i, i]
    return inv


# ============================================================================ compact L-BFGS
class CompactLBFGS:
    """Compact L-BFGS inverse-Hessian approximation ``H = σ I + W N Wᵀ`` (Byrd-Nocedal-Schnabel).

    Keeps the last ``memory`` accepted pairs in a circular buffer (rows of :attr:`A`: the ``s``
    slots, then the ``y`` slots) and maintains ``SᵀY`` and ``YᵀY`` incrementally (one new row and
    column per pair).  ``N`` is rebuilt in chronological order with triangular solves.

    Parameters
    ----------
    n : int
        Dimension.
    memory : int
        ``M >= 1``.
    sigma_mode : {"thesis", "running_min"}
        ``σ = sᵀy / yᵀy`` of the newest pair, or ``min(σ_prev, sᵀy / yᵀy)`` with ``σ_prev = sigma0``.
    curvature : {"relative", "reference", "thesis"}
        Pair acceptance: ``sᵀy > tol ||s|| ||y||``; ``sᵀy / ||y|| > tol``; or ``sᵀy > 0``.
    curvature_tol : float
        ``tol`` above (defaults: 1e-8 relative, 1e-6 reference).
    """

    def __init__(
        self,
        n: int,
        memory: int,
        *,
        sigma_mode: Literal["thesis", "running_min"] = "thesis",
        sigma0: float = 500.0,
        curvature: Literal["relative", "reference", "thesis"] = "relative",
        curvature_tol: float | None = None,
    ) -> None:
        self.n = check_int(n, "n")
        self.memory = check_int(memory, "memory")
        if sigma_mode not in ("thesis", "running_min"):
            raise InvalidParameterError("sigma_mode: must be 'thesis' or 'running_min'")
        if curvature not in ("relative", "reference", "thesis"):
            raise InvalidParameterError("curvature: must be 'relative', 'reference' or 'thesis'")
        self.sigma_mode = sigma_mode
        self.curvature = curvature
        default_tol = {"relative": 1e-8, "reference": 1e-6, "thesis": 0.0}[curvature]
        self.tol = default_tol if curvature_tol is None else check_nonneg(curvature_tol, "curvature_tol")
        self.sigma = check_positive(sigma0, "sigma0") if sigma_mode == "running_min" else 1.0
        self._sigma_init = self.sigma
        m = self.memory
        self.A = np.zeros((2 * m, self.n))
        self.STY = np.zeros((m, m))
        self.YTY = np.zeros((m, m))
        self.order: list[int] = []
        self.n_accepted = 0
        self.n_rejected = 0
        self._N = np.zeros((2 * m, 2 * m))

    @property
    def full(self) -> bool:
        """Whether ``memory`` pairs are stored (HAMSI takes quasi-Newton steps only then)."""
        return len(self.order) == self.memory

    @property
    def size(self) -> int:
        """Number of stored pairs."""
        return len(self.order)

    def push(self, s: Float, y: Float) -> bool:
        """Offer a curvature pair; return whether it passed the curvature test and was stored."""
        m = self.memory
        p = _pair_products(self.A, s, y)
        return self.push_reduced(
            s, y, float(p[0]), float(p[1]), float(p[2]), p[3 : 3 + m], p[3 + m : 3 + 2 * m], p[3 + 2 * m :]
        )

    def push_reduced(
        self,
        s: Float,
        y: Float,
        sy: float,
        yy: float,
        ss: float,
        s_dot_y: Float,
        y_dot_s: Float,
        y_dot_y: Float,
    ) -> bool:
        """:meth:`push` with the inner products given (summed over the shards of a distributed run).

        ``s``/``y`` are this memory's slices of the pair; ``s_dot_y[i] = s_i · y`` over the slots
        *before* insertion (likewise ``y_dot_s[i] = y_i · s``, ``y_dot_y[i] = y_i · y``).
        """
        if self.curvature == "relative":
            ok = sy > self.tol * math.sqrt(max(ss * yy, 0.0))
        elif self.curvature == "reference":
            ok = yy > 0 and sy / math.sqrt(yy) > self.tol
        else:
            ok = sy > self.tol
        if not ok or not math.isfinite(sy) or yy <= 0:
            self.n_rejected += 1
            return False
        m = self.memory
        slot = self.order.pop(0) if len(self.order) == m else len(self.order)
        self.n_accepted += 1
        self.order.append(slot)
        self.A[slot] = s
        self.A[m + slot] = y
        s_dot_y = np.array(s_dot_y, dtype=np.float64)
        y_dot_s = np.array(y_dot_s, dtype=np.float64)
        y_dot_y = np.array(y_dot_y, dtype=np.float64)
        s_dot_y[slot] = y_dot_s[slot] = sy
        y_dot_y[slot] = yy
        self.STY[:, slot] = s_dot_y
        self.STY[slot, :] = y_dot_s
        self.YTY[:, slot] = y_dot_y
        self.YTY[slot, :] = y_dot_y
        ratio = sy / yy
        self.sigma = min(self.sigma, ratio) if self.sigma_mode == "running_min" else ratio
        self._rebuild()
        return True

    def reset(self) -> None:
        """Forget all pairs (and return σ to its initial value)."""
        self.order = []
        self.A[:] = 0.0
        self.STY[:] = 0.0
        self.YTY[:] = 0.0
        self.sigma = self._sigma_init

    def _rebuild(self) -> None:
        idx = np.asarray(self.order)
        k = idx.shape[0]
        sty = self.STY[np.ix_(idx, idx)]
        R = np.triu(sty)
        D = np.diag(np.diag(sty))
        Cy = self.YTY[np.ix_(idx, idx)]
        Rinv = _triu_inverse(R)
        N = np.zeros((2 * k, 2 * k))
        N[:k, :k] = _mm(_mm(Rinv.T, D + self.sigma * Cy), Rinv)
        N[:k, k:] = -Rinv.T
        N[k:, :k] = -Rinv
        self._N = N

    def coefficients(self, g: Float) -> Float:
        """Weights ``c`` (one per row of :attr:`A`) with ``H g = σ g + Aᵀ c``."""
        if not self.order:
            return np.zeros(2 * self.memory)
        return self.coefficients_from(_matvec(self.A, g))

    def coefficients_from(self, v: Float) -> Float:
        """:meth:`coefficients` given ``v = A g`` (summed over shards in a distributed run)."""
        m = self.memory
        idx = np.asarray(self.order, dtype=np.int64)
        k = idx.shape[0]
        coefs = np.zeros(2 * m)
        if k == 0:
            return coefs
        v1 = np.concatenate([v[idx], self.sigma * v[m + idx]])
        v2 = (self._N * v1[None, :]).sum(axis=1)
        coefs[idx] = v2[:k]
        coefs[m + idx] = self.sigma * v2[k:]
        return coefs

    def direction(self, g: Any) -> Float:
        """``H g = σ g + W (N (Wᵀ g))`` (a new array)."""
        gg = np.ascontiguousarray(g, dtype=np.float64)
        out: Float = self.sigma * gg + self.A.T @ self.coefficients(gg)
        return out


# ============================================================================ schedules
def subset_schedule(
    n_subsets: int,
    schedule: Literal["det", "stoc"] = "det",
    *,
    repeat_first: bool = True,
    rng: RNGLike = None,
) -> Iterator[list[int]]:
    """SETSCHEDULE: an endless iterator of zero-based subset orders, one per outer iteration.

    ``"det"`` rotates a base permutation left by one every outer iteration, starting from
    ``[K-1, 0, ..., K-2]`` so that the first order is ``[0, 1, ..., K-1]``; ``"stoc"`` draws a fresh
    uniform permutation from ``rng``.  With ``repeat_first`` (HAMSI) the first subset is appended, so
    orders have length ``K + 1`` and first = last; mb-GD uses ``repeat_first=False``.  For ``K = 1``
    the order is ``[0]`` (the repeated visit is the next outer iteration's).

    Example (1-based, K = 5): ``[3,4,5,1,2,3] -> [4,5,1,2,3,4] -> [5,1,2,3,4,5]`` (the thesis prints
    the last as ``[5,1,2,3,4,1]``, a typo).
    """
    K = check_int(n_subsets, "n_subsets")
    if schedule not in ("det", "stoc"):
        raise InvalidParameterError("schedule: must be 'det' (cyclic shift) or 'stoc' (shuffling)")
    gen = as_generator(rng) if schedule == "stoc" else None
    base = [K - 1, *range(K - 1)]
    while True:
        if gen is None:
            base = base[1:] + base[:1]
        else:
            base = [int(v) for v in gen.permutation(K)]
        yield [*base, base[0]] if repeat_first and K > 1 else list(base)


# ============================================================================ result
@dataclass(frozen=True, eq=False)
class HamsiResult:
    """Outcome of :func:`hamsi` or :func:`mbgd`.

    Attributes
    ----------
    U, V : ndarray
        Final factors.
    method : {"hamsi", "mbgd"}
    scheme : str
        Partitioning scheme (``"full"`` for the single-subset cover).
    schedule : {"det", "stoc"}
    status : str
        ``"max_epochs"``, ``"time_budget"`` or ``"diverged"`` (non-finite values; the factors are
        then the best evaluated iterate, whose RMSE is the last history entry).
    n_epochs, n_steps : int
        Outer iterations and inner steps (subset visits) done.
    history_time : ndarray
        Optimization wall-clock seconds at each evaluation (evaluations themselves excluded, as in
        the reference code); ``history_time[0] = 0`` is the initial point.
    history_epoch : ndarray of int
    history_rmse : ndarray
        Training RMSE at each evaluation.
    history_test_rmse : ndarray or None
        Held-out RMSE at each evaluation when a ``test`` split was given.
    timings : mapping
        Seconds spent in the ``"gradient"``, ``"update"`` and ``"hessian"`` phases (Fig. 3.7).
    n_pairs_accepted, n_pairs_rejected : int
        Curvature pairs stored / rejected by the curvature test (HAMSI only).
    n_restarts : int
        Times the safeguard returned to the start of an outer iteration and cleared the memory.
    n_threads : int
        Threads actually used.
    partition_balance : mapping
        :meth:`dpopt.distributed.partition.Partition.balance` of the cover used.
    options : mapping
        The algorithm constants used.
    """

    U: Float = field(repr=False)
    V: Float = field(repr=False)
    method: str
    scheme: str
    schedule: str
    status: str
    n_epochs: int
    n_steps: int
    history_time: Float = field(repr=False)
    history_epoch: NDArray[np.int64] = field(repr=False)
    history_rmse: Float = field(repr=False)
    history_test_rmse: Float | None = field(repr=False)
    timings: Mapping[str, float]
    n_pairs_accepted: int
    n_pairs_rejected: int
    n_restarts: int
    n_threads: int
    partition_balance: Mapping[str, Any] = field(repr=False)
    options: Mapping[str, Any] = field(repr=False)

    @property
    def rmse(self) -> float:
        """Final training RMSE."""
        return float(self.history_rmse[-1])

    @property
    def test_rmse(self) -> float | None:
        """Final held-out RMSE (``None`` without a test split)."""
        return None if self.history_test_rmse is None else float(self.history_test_rmse[-1])

    @property
    def elapsed(self) -> float:
        """Optimization wall-clock seconds (evaluations excluded)."""
        return float(self.history_time[-1])

    def rmse_at(self, seconds: float) -> float:
        """Training RMSE of the last evaluation at or before ``seconds`` of optimization time."""
        i = int(np.searchsorted(self.history_time, seconds, side="right")) - 1
        return float(self.history_rmse[max(i, 0)])


# ============================================================================ execution plan
@dataclass
class _Subset:
    rows: NDArray[np.int64]
    cols: NDArray[np.int64]
    vals: Float
    ptr: NDArray[np.int64]  # block pointers, stratum by stratum
    n_strata: int
    reg: float  # share of the l2 term
    sse: Float
    parallel: bool


def _plan(problem: MatrixFactorizationProblem, part: Partition, n_threads: int) -> list[_Subset]:
    """Kernel layout of every subset (independent of the thread count).

    Variable-disjoint blocks (STRATA, STRATA-B) form one stratum processed block-parallel; any other
    subset is laid out on the problem's ``grid x grid`` stratified layout.
    """
    rt = problem.ratings
    out = []
    n = problem.n_ratings
    for blocks in part.blocks:
        idx = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int64)
        if part.disjoint_blocks and len(blocks) >= 2:
            ptr = np.concatenate(([0], np.cumsum([b.shape[0] for b in blocks]))).astype(np.int64)
            n_strata = 1
        else:
            order, ptr = _k.stratify(rt.rows[idx], rt.cols[idx], problem.row_cuts, problem.col_cuts)
            idx = idx[order]
            n_strata = problem.grid
        out.append(
            _Subset(
                rows=np.ascontiguousarray(rt.rows[idx], dtype=np.int64),
                cols=np.ascontiguousarray(rt.cols[idx], dtype=np.int64),
                vals=np.ascontiguousarray(rt.values[idx], dtype=np.float64),
                ptr=ptr,
                n_strata=n_strata,
                reg=problem.l2 * idx.shape[0] / n,
                sse=np.zeros(max(ptr.shape[0] - 1, 1)),
                parallel=n_threads > 1 and idx.shape[0] * problem.rank >= _PARALLEL_WORK,
            )
        )
    return out


def _subset_gradient(
    run: _k.BlockRunner, sub: _Subset, U: Float, V: Float, x: Float, g: Float, gU: Float, gV: Float, w: float
) -> float:
    g.fill(0.0)
    if sub.rows.shape[0]:
        # small subsets run serially (identical bits, no thread rendezvous per stratum)
        run(
            U,
            V,
            sub.rows,
            sub.cols,
            sub.vals,
            sub.ptr,
            sub.n_strata,
            w,
            gU,
            gV,
            sub.sse,
            parallel=sub.parallel,
        )
    if sub.reg:
        g += sub.reg * x
    return float(sub.sse.sum())


# ============================================================================ drivers
_COMMON_DOC = """
    problem : MatrixFactorizationProblem
    partition : Partition, str or None, default None
        The cover: a :class:`~dpopt.distributed.partition.Partition` built on ``problem.ratings``, a
        scheme name (``"hogwild"``, ``"color"``, ``"color-b"``, ``"strata"``, ``"strata-b"``; built
        with ``n_subsets`` and ``P = n_threads``), or ``None`` for a single subset (full gradients).
    schedule : {"det", "stoc"}, default "det"
        Cyclic shift of the subset order, or a fresh random permutation every outer iteration.
    max_epochs : int, default 100
        Maximum number of outer iterations.
    time_budget : float or None
        Stop after this many seconds of optimization (evaluations excluded).
    n_threads : int, default 1
        Threads for the compiled kernels (capped at numba's maximum).
    backend : {"threads", "numba"}, default "threads"
        How blocks run in parallel: a pool of Python threads calling GIL-free kernels with dynamic
        scheduling (robust on shared machines), or numba ``prange`` (OpenMP).  Same results.
    n_subsets : int, default 20
        ``K`` when ``partition`` is a HOGWILD/COLOR/COLOR-B scheme name.
    init : (U0, V0) or None
        Initial factors; default i.i.d. ``N(0, init_scale²)`` drawn from ``rng``.
    test : Ratings or None
        Held-out ratings (same shape) whose RMSE is recorded at every evaluation.
    eval_every : int, default 1
        Evaluate the RMSE every ``eval_every`` outer iterations (and at the end).
    rng : int, Generator, "secure" or None
        Initialization, stochastic schedules and randomized partitions (child streams keyed
        ``"init"``, ``"schedule"``, ``"partition"``).
"""


def _resolve_partition(
    problem: MatrixFactorizationProblem,
    partition: Partition | str | None,
    n_subsets: int,
    n_threads: int,
    rng: RNGLike,
) -> Partition:
    n = problem.n_ratings
    if partition is None:
        return Partition("full", n, ((np.arange(n, dtype=np.int64),),), disjoint_blocks=True)
    if isinstance(partition, str):
        return make_partition(problem.ratings, partition, n_subsets=n_subsets, n_threads=n_threads, rng=rng)
    if not isinstance(partition, Partition):
        raise InvalidParameterError("partition: expected a Partition, a scheme name or None")
    if partition.n_functions != n:
        raise InvalidParameterError(
            f"partition: covers {partition.n_functions} functions but the problem has {n} ratings; build "
            "it on problem.ratings"
        )
    return partition


def _run(
    problem: MatrixFactorizationProblem,
    partition: Partition | str | None,
    *,
    method: str,
    schedule: str,
    eta: float,
    gamma: float,
    eta_gd: float,
    gamma_gd: float,
    memory: int,
    beta_counter: str,
    beta_floor: float,
    sigma_mode: Literal["thesis", "running_min"],
    sigma0: float,
    curvature: Literal["relative", "reference", "thesis"],
    curvature_tol: float | None,
    safeguard: bool,
    restart_growth: float,
    max_epochs: int,
    time_budget: float | None,
    n_threads: int,
    backend: str,
    n_subsets: int,
    init: tuple[Any, Any] | None,
    init_scale: float,
    test: Ratings | None,
    eval_every: int,
    rng: RNGLike,
) -> HamsiResult:
    from dpopt.matrix_factorization import MatrixFactorizationProblem

    if not isinstance(problem, MatrixFactorizationProblem):
        raise InvalidParameterError(
            "problem: expected a dpopt.matrix_factorization.MatrixFactorizationProblem"
        )
    if schedule not in ("det", "stoc"):
        raise InvalidParameterError("schedule: must be 'det' (cyclic shift) or 'stoc' (shuffling)")
    if beta_counter not in ("outer", "inner"):
        raise InvalidParameterError("beta_counter: must be 'outer' (thesis) or 'inner' (reference code)")
    eta = check_positive(eta, "eta")
    gamma = check_positive(gamma, "gamma")
    eta_gd = check_positive(eta_gd, "eta_gd")
    gamma_gd = check_positive(gamma_gd, "gamma_gd")
    memory = check_int(memory, "memory")
    beta_floor = check_nonneg(beta_floor, "beta_floor")
    restart_growth = check_positive(restart_growth, "restart_growth")
    gd_floor = beta_floor if method == "mbgd" else 0.0  # HAMSI's warm-up uses the raw mb-GD schedule
    max_epochs = check_int(max_epochs, "max_epochs", minimum=0)
    budget = math.inf if time_budget is None else check_positive(time_budget, "time_budget")
    n_threads = check_int(n_threads, "n_threads")
    n_subsets = check_int(n_subsets, "n_subsets")
    eval_every = check_int(eval_every, "eval_every")
    if test is not None and (not isinstance(test, Ratings) or test.shape != problem.shape):
        raise InvalidParameterError(
            f"test: expected a Ratings of shape {problem.shape} (same users and items)"
        )
    r_init, r_sched, r_part = (as_generator(c) for c in spawn(rng, ["init", "schedule", "partition"]))

    part = _resolve_partition(problem, partition, n_subsets, n_threads, r_part)
    K = part.n_subsets
    if init is None:
        U0, V0 = problem.init_factors(rng=r_init, scale=init_scale)
    else:
        if not isinstance(init, tuple | list) or len(init) != 2:
            raise InvalidParameterError("init: expected a pair (U0, V0) or None")
        U0, V0 = init
    x = problem.pack(U0, V0)
    if not np.all(np.isfinite(x)):
        raise InvalidParameterError("init: contains NaN or infinite entries")
    U, V = problem.unpack(x)
    g = np.zeros_like(x)
    gU, gV = problem.unpack(g)
    w = problem.weight
    lbfgs = (
        CompactLBFGS(
            x.shape[0],
            memory,
            sigma_mode=sigma_mode,
            sigma0=sigma0,
            curvature=curvature,
            curvature_tol=curvature_tol,
        )
        if method == "hamsi"
        else None
    )
    timings = {"gradient": 0.0, "update": 0.0, "hessian": 0.0}
    hist_t: list[float] = []
    hist_e: list[int] = []
    hist_r: list[float] = []
    hist_te: list[float] = []
    elapsed = 0.0

    if backend not in ("threads", "numba"):
        raise InvalidParameterError("backend: must be 'threads' (thread pool, default) or 'numba' (prange)")
    with _k.thread_count(n_threads) as used_threads, _k.BlockRunner(used_threads, backend) as run:
        subsets = _plan(problem, part, used_threads)
        _k.warmup()  # load/compile kernels before the clock starts

        best_rmse = [math.inf]  # best evaluated training RMSE and its iterate
        best_x = x.copy()

        def evaluate(epoch: int) -> None:
            hist_t.append(elapsed)
            hist_e.append(epoch)
            hist_r.append(problem.rmse(U, V))
            if test is not None:
                hist_te.append(problem.rmse(U, V, test))
            if hist_r[-1] < best_rmse[0]:
                best_rmse[0] = hist_r[-1]
                best_x[:] = x

        evaluate(0)
        orders = subset_schedule(
            K,
            "stoc" if schedule == "stoc" else "det",
            repeat_first=(method == "hamsi" and K > 1),
            rng=r_sched,
        )
        status = "max_epochs"
        steps = 0
        epoch = 0
        ref_x = ref_g = None
        safe_x: Float | None = None  # start of the current outer iteration (checked)
        qn_since_safe = False
        prev_sse = np.full(K, math.inf)  # loss of each subset at its previous visit
        n_restarts = 0
        stop = False
        while epoch < max_epochs and not stop:
            order = next(orders)
            t_outer = epoch + 1
            for ell, k in enumerate(order):
                t0 = time.perf_counter()
                steps += 1
                counter = steps if beta_counter == "inner" else t_outer
                sse = _subset_gradient(run, subsets[k], U, V, x, g, gU, gV, w)
                t1 = time.perf_counter()
                bad = not math.isfinite(sse) or not np.isfinite(g).all()
                guarded = safeguard and lbfgs is not None and safe_x is not None and qn_since_safe
                if bad and not guarded:
                    status = "diverged"
                    x[:] = best_x
                    stop = True
                    elapsed += t1 - t0
                    timings["gradient"] += t1 - t0
                    break
                skip = False
                if lbfgs is not None:
                    if guarded and safe_x is not None and (bad or sse > restart_growth * prev_sse[k]):
                        # quasi-Newton steps since the last safe point increased this subset's loss
                        # (or overflowed): return to that point and restart the L-BFGS memory
                        x[:] = safe_x
                        lbfgs.reset()
                        n_restarts += 1
                        prev_sse[:] = math.inf
                        qn_since_safe = False
                        ref_x = ref_g = None
                        skip = True
                    else:
                        prev_sse[k] = sse
                        if K == 1:
                            if ref_x is not None and ref_g is not None:
                                lbfgs.push(x - ref_x, g - ref_g)
                            ref_x, ref_g = x.copy(), g.copy()
                            safe_x, qn_since_safe = ref_x, False
                        elif ell == 0:
                            ref_x, ref_g = x.copy(), g.copy()
                            safe_x, qn_since_safe = ref_x, False
                        elif ell == len(order) - 1 and ref_x is not None and ref_g is not None:
                            lbfgs.push(x - ref_x, g - ref_g)
                if skip:
                    t2 = time.perf_counter()
                    timings["gradient"] += t1 - t0
                    timings["hessian"] += t2 - t1
                    elapsed += t2 - t0
                    if elapsed >= budget:
                        status = "time_budget"
                        stop = True
                    break  # start the next outer iteration from the restored point
                t2 = time.perf_counter()
                if lbfgs is not None and lbfgs.full:
                    beta = max(beta_floor, (eta * counter) ** gamma)
                    coefs = lbfgs.coefficients(g)
                    _k.lbfgs_apply(x, g, lbfgs.A, coefs, lbfgs.sigma, 1.0 / beta)
                    qn_since_safe = True
                else:
                    e_, g_ = (eta_gd, gamma_gd) if method == "hamsi" else (eta, gamma)
                    beta = max(gd_floor, (e_ * counter) ** g_)
                    x -= g * (1.0 / beta)
                t3 = time.perf_counter()
                timings["gradient"] += t1 - t0
                timings["hessian"] += t2 - t1
                timings["update"] += t3 - t2
                elapsed += t3 - t0
                if elapsed >= budget:
                    status = "time_budget"
                    stop = True
                    break
            epoch += 1
            if stop or epoch % eval_every == 0 or epoch == max_epochs:
                if not np.all(np.isfinite(x)):  # hand back the best evaluated iterate
                    status = "diverged"
                    stop = True
                    x[:] = best_x
                evaluate(epoch)
                if status == "diverged" and hist_r[-1] > best_rmse[0]:
                    x[:] = best_x  # finite but exploded: also hand back the best iterate
                    evaluate(epoch)

    options = {
        "eta": eta, "gamma": gamma, "eta_gd": eta_gd, "gamma_gd": gamma_gd, "memory": memory,
        "beta_counter": beta_counter, "beta_floor": beta_floor, "sigma_mode": sigma_mode, "sigma0": sigma0, "curvature": curvature,
        "curvature_tol": lbfgs.tol if lbfgs is not None else None, "safeguard": safeguard,
        "restart_growth": restart_growth, "l2": problem.l2,
        "scaling": problem.scaling, "rank": problem.rank, "n_subsets": K,
    }  # fmt: skip
    return HamsiResult(
        U=U.copy(),
        V=V.copy(),
        method=method,
        scheme=part.scheme,
        schedule=schedule,
        status=status,
        n_epochs=epoch,
        n_steps=steps,
        history_time=np.asarray(hist_t),
        history_epoch=np.asarray(hist_e, dtype=np.int64),
        history_rmse=np.asarray(hist_r),
        history_test_rmse=np.asarray(hist_te) if test is not None else None,
        timings=MappingProxyType(timings),
        n_pairs_accepted=lbfgs.n_accepted if lbfgs is not None else 0,
        n_pairs_rejected=lbfgs.n_rejected if lbfgs is not None else 0,
        n_restarts=n_restarts,
        n_threads=used_threads,
        partition_balance=MappingProxyType(part.balance()),
        options=MappingProxyType(options),
    )


def hamsi(
    problem: MatrixFactorizationProblem,
    partition: Partition | str | None = None,
    *,
    schedule: Literal["det", "stoc"] = "det",
    eta: float = 0.06,
    gamma: float = 0.51,
    memory: int = 5,
    eta_gd: float = 0.001,
    gamma_gd: float = 0.51,
    beta_counter: Literal["outer", "inner"] = "inner",
    beta_floor: float = 1.0,
    sigma_mode: Literal["thesis", "running_min"] = "thesis",
    sigma0: float = 500.0,
    curvature: Literal["relative", "reference", "thesis"] = "relative",
    curvature_tol: float | None = None,
    safeguard: bool = True,
    restart_growth: float = 2.0,
    max_epochs: int = 100,
    time_budget: float | None = None,
    n_threads: int = 1,
    backend: Literal["threads", "numba"] = "threads",
    n_subsets: int = 20,
    init: tuple[Any, Any] | None = None,
    init_scale: float = 1.0,
    test: Ratings | None = None,
    eval_every: int = 1,
    rng: RNGLike,
) -> HamsiResult:
    """HAMSI with compact L-BFGS updates (thesis Algorithm 3, spec H3).

    Each outer iteration ``t`` visits the subsets in the order ``𝒦`` (length ``K + 1``, first = last),
    computes the subset gradient ``g`` block-parallel and updates
    ``x <- x - (σ g + W (N (Wᵀ g))) / β_t`` with ``β_t = (η t)^γ`` once the memory holds ``memory``
    curvature pairs (``x <- x - g / (η_gd t)^γ_gd`` before).  The pair of iteration ``t`` is formed
    from the two gradients of the repeated subset.

    Parameters
    ----------
    eta, gamma : float, default 0.06, 0.51
        ``β_t = (η t)^γ``; the thesis's constants (for ``scaling="mean"``).  ``γ ∈ (0.5, 1]`` gives the
        convergence conditions of Thm 3.1.3.
    memory : int, default 5
        L-BFGS memory ``M`` (the reference code's value; the thesis does not state it).
    eta_gd, gamma_gd : float, default 0.001, 0.51
        Warm-up gradient-descent constants (used until the memory is full).
    beta_counter : {"outer", "inner"}, default "inner"
        ``t`` counts subset visits (reference code, default) or outer iterations (thesis).  With
        ``K > 1`` subsets the outer counter lets the ``K + 1`` quasi-Newton steps of an iteration,
        each scaled by an inverse Hessian estimated from a single subset, overshoot: it diverges on
        small HOGWILD/COLOR covers where the inner counter does not (spec N4).
    beta_floor : float, default 1.0
        Steps use ``max(beta_floor, β_t)``.  The convergence theorem (Thm 3.1.3) assumes
        ``β_t >= 1``, which ``(η t)^γ`` violates for ``t < 1/η`` (spec N4); the default enforces it,
        which also keeps the first incremental quasi-Newton steps from overshooting.  ``0`` gives
        the thesis's and reference code's raw schedule.  (Warm-up steps use the raw mb-GD schedule.)
    sigma_mode, sigma0, curvature, curvature_tol
        See :class:`CompactLBFGS`.  The reference code's choices are ``sigma_mode="running_min"``,
        ``sigma0=500``, ``curvature="reference"``.
    safeguard : bool, default True
        dpopt's addition (neither the thesis nor the reference code has it; spec N1/N3 note that the
        step is not bounded a priori): the loss of every subset is known for free when its gradient
        is computed; when, after quasi-Newton steps, a subset's loss exceeds ``restart_growth``
        times its value at the previous visit (or overflows), return to the start of the current
        outer iteration (the start of the previous one if the current start is the culprit), clear
        the L-BFGS memory and warm up with gradient steps again.  Without it, small ranks or more
        subsets can make the first quasi-Newton steps diverge.
    restart_growth : float, default 2.0
        Growth factor of a subset's loss that triggers a restart.
    {common}
    Returns
    -------
    HamsiResult

    Raises
    ------
    InvalidParameterError
        For ``memory <= 0``, unknown options, non-positive constants or a mismatched partition.
    """
    return _run(
        problem, partition, method="hamsi", schedule=schedule, eta=eta, gamma=gamma, eta_gd=eta_gd,
        gamma_gd=gamma_gd, memory=memory, beta_counter=beta_counter, beta_floor=beta_floor,
        sigma_mode=sigma_mode, sigma0=sigma0,
        curvature=curvature, curvature_tol=curvature_tol, safeguard=safeguard, restart_growth=restart_growth,
        max_epochs=max_epochs, time_budget=time_budget,
        n_threads=n_threads, backend=backend, n_subsets=n_subsets, init=init, init_scale=init_scale, test=test,
        eval_every=eval_every, rng=rng,
    )  # fmt: skip


hamsi.__doc__ = (hamsi.__doc__ or "").replace("    {common}\n", _COMMON_DOC.lstrip("\n") + "\n")


def mbgd(
    problem: MatrixFactorizationProblem,
    partition: Partition | str | None = None,
    *,
    schedule: Literal["det", "stoc"] = "det",
    eta: float = 0.001,
    gamma: float = 0.51,
    beta_counter: Literal["outer", "inner"] = "outer",
    beta_floor: float = 0.0,
    max_epochs: int = 100,
    time_budget: float | None = None,
    n_threads: int = 1,
    backend: Literal["threads", "numba"] = "threads",
    n_subsets: int = 20,
    init: tuple[Any, Any] | None = None,
    init_scale: float = 1.0,
    test: Ratings | None = None,
    eval_every: int = 1,
    rng: RNGLike,
) -> HamsiResult:
    """Mini-batch gradient descent over the subsets of a cover (the thesis's mb-GD baseline).

    Each outer iteration visits the ``K`` subsets once (det: rotated order; stoc: random permutation)
    and updates ``x <- x - g_k / β_t`` with ``β_t = (η t)^γ``, ``(η, γ) = (0.001, 0.51)``.

    Parameters
    ----------
    eta, gamma : float
        Step schedule constants.
    beta_counter : {"outer", "inner"}
        As in :func:`hamsi`.
    beta_floor : float, default 0.0
        Steps use ``max(beta_floor, β_t)`` (``(0.001 t)^0.51 < 1`` for the first thousand
        iterations; the thesis uses the raw schedule).
    {common}
    Returns
    -------
    HamsiResult
    """
    return _run(
        problem, partition, method="mbgd", schedule=schedule, eta=eta, gamma=gamma, eta_gd=eta,
        gamma_gd=gamma, memory=1, beta_counter=beta_counter, beta_floor=beta_floor, sigma_mode="thesis", sigma0=500.0,
        curvature="relative", curvature_tol=None, safeguard=False, restart_growth=2.0,
        max_epochs=max_epochs, time_budget=time_budget,
        n_threads=n_threads, backend=backend, n_subsets=n_subsets, init=init, init_scale=init_scale, test=test,
        eval_every=eval_every, rng=rng,
    )  # fmt: skip


mbgd.__doc__ = (mbgd.__doc__ or "").replace("    {common}\n", _COMMON_DOC.lstrip("\n") + "\n")


# ============================================================================ H1 with explicit Hessians
def hamsi_step(x: Any, g: Any, H: Any, beta: float) -> Float:
    """Minimiser of the local model ``Q(z) = (z-x)ᵀg + ½(z-x)ᵀH(z-x) + ½β||z-x||²``: ``x - (H + βI)⁻¹ g``.

    Raises
    ------
    InvalidParameterError
        If ``H + βI`` is not positive definite.
    """
    xx = np.asarray(x, dtype=np.float64)
    gg = np.asarray(g, dtype=np.float64)
    HH = np.asarray(H, dtype=np.float64)
    b = check_nonneg(beta, "beta")
    n = xx.shape[0]
    if gg.shape != (n,) or HH.shape != (n, n):
        raise InvalidParameterError("x, g, H: expected shapes (n,), (n,) and (n, n)")
    try:
        c = scipy.linalg.cho_factor(HH + b * np.eye(n))
    except np.linalg.LinAlgError:
        raise InvalidParameterError("H + beta*I: must be positive definite; increase beta") from None
    out: Float = xx - scipy.linalg.cho_solve(c, gg)
    return out


def hamsi_dense(
    grad: Any,
    hessian: Any,
    x0: Any,
    cover: Any,
    alpha: Any,
    *,
    eta: float = 0.06,
    gamma: float = 0.51,
    max_epochs: int = 10,
    schedule: Literal["det", "stoc"] = "det",
    rng: RNGLike = None,
) -> Float:
    """Algorithm H1/H2 with explicit Hessians for small dense partially separable problems.

    Parameters
    ----------
    grad : callable
        ``grad(functions, x)`` -> gradient of ``Σ_{i in functions} f_i`` at ``x`` (full length).
    hessian : callable
        ``hessian(x)`` -> approximate Hessian ``H`` (n x n), re-evaluated after every outer iteration.
    x0 : array
    cover : sequence of subsets, each a sequence of blocks (function index arrays)
    alpha : sequence
        ``alpha[i]`` = variables of function ``i`` (for the principal submatrices ``H_{α_{k,b}}``).
    eta, gamma : float
        ``β_t = (η t)^γ``.
    max_epochs : int
    schedule : {"det", "stoc"}
    rng : for ``"stoc"``.

    Returns
    -------
    ndarray
        The final iterate.  With one subset of one block, each step is the regularized Newton step
        ``x - (H + β_t I)⁻¹ ∇f(x)``.
    """
    x = np.array(x0, dtype=np.float64)
    K = len(cover)
    gen = as_generator(rng) if schedule == "stoc" else None
    H = np.asarray(hessian(x), dtype=np.float64)
    orders = subset_schedule(K, schedule, repeat_first=True, rng=gen)
    for t in range(1, check_int(max_epochs, "max_epochs", minimum=0) + 1):
        beta = (check_positive(eta, "eta") * t) ** check_positive(gamma, "gamma")
        for k in next(orders):
            steps = []
            for block in cover[k]:
                fn = np.asarray(block, dtype=np.int64)
                var = np.unique(np.concatenate([np.asarray(alpha[i], dtype=np.int64) for i in fn]))
                g = np.asarray(grad(fn, x), dtype=np.float64)
                steps.append((var, hamsi_step(x[var], g[var], H[np.ix_(var, var)], beta)))
            for var, z in steps:  # blocks are variable-disjoint: order-free
                x[var] = z
        H = np.asarray(hessian(x), dtype=np.float64)
    return x


# ============================================================================ distributed (engines)
@dataclass(frozen=True)
class _ShardSpec:
    """Everything shard ``r`` of a distributed STRATA-B run needs (picklable)."""

    r: int
    n_shards: int
    rank: int
    U0: Float
    V0: Float
    blocks: tuple[tuple[NDArray[np.int64], NDArray[np.int64], Float], ...]  # per stratum, local ids
    reg: tuple[float, ...]  # l2 share per stratum
    weight: float
    steps: tuple[tuple[int, int, int, bool, bool], ...]  # (epoch, step, stratum, first, closing)
    options: dict[str, Any]


class _HamsiShard:
    """Shard ``r`` owns rows ``R_r`` of U and ``C_r`` of V (and their L-BFGS slices).

    Every inner step takes three engine rounds: (0) compute the block ``R_r x C_c`` of the current
    stratum with the column block ``V_c`` published by its owner, publish its ``gV_c``; (1) gather
    ``gV_r`` from the shard that processed column block ``r``, publish the partial inner products
    (``Wᵀg`` and the curvature-pair products, 2M + 3M + 5 numbers); (2) sum the partials in shard
    order (every shard then holds the same small matrices), store the pair, update the own slices,
    publish the new ``V_r``.  DSGD-style, only column blocks and O(M) scalars travel.
    """

    def __init__(self, spec: _ShardSpec) -> None:
        self.spec = spec
        o = spec.options
        self.nU = spec.U0.size
        self.x = np.concatenate([spec.U0.ravel(), spec.V0.ravel()]).astype(np.float64)
        self.mem = CompactLBFGS(
            self.x.shape[0], o["memory"], sigma_mode=o["sigma_mode"], sigma0=o["sigma0"],
            curvature=o["curvature"], curvature_tol=o["curvature_tol"],
        )  # fmt: skip
        self.g = np.zeros_like(self.x)
        self.gU = np.zeros_like(spec.U0)
        self.ref_x: Float | None = None
        self.ref_g: Float | None = None
        self.pair: tuple[Float, Float] | None = None
        self.sse = 0.0

    def _V(self) -> Float:
        return self.x[self.nU :].reshape(-1, self.spec.rank)

    def initial_output(self) -> Float:
        return self._V().ravel().copy()

    def step(self, t: int, inputs: Sequence[Float]) -> tuple[Float, Any]:
        sp = self.spec
        o = sp.options
        i, phase = divmod(t, 3)
        epoch, step, k, first, closing = sp.steps[i]
        P, r, m = sp.n_shards, sp.r, self.mem.memory
        if phase == 0:
            c = (r + k) % P
            Vc = np.ascontiguousarray(inputs[c]).reshape(-1, sp.rank)
            U = self.x[: self.nU].reshape(-1, sp.rank)
            self.gU = np.zeros_like(U)
            gVc = np.zeros_like(Vc)
            rows, cols, vals = sp.blocks[k]
            self.sse = float(
                _k.gradient_block(U, Vc, rows, cols, vals, 0, rows.shape[0], sp.weight, self.gU, gVc)
            ) if rows.shape[0] else 0.0  # fmt: skip
            return gVc.ravel(), {"sse": self.sse}
        if phase == 1:
            gVr = np.asarray(inputs[(r - k) % P], dtype=np.float64)
            self.g = np.concatenate([self.gU.ravel(), gVr])
            if sp.reg[k]:
                self.g += sp.reg[k] * self.x
            out = np.zeros(3 + 3 * m + 2 * m + 2)
            self.pair = None
            if closing and self.ref_x is not None and self.ref_g is not None:
                s_ = self.x - self.ref_x
                y_ = self.g - self.ref_g
                self.pair = (s_, y_)
                out[: 3 + 3 * m] = _pair_products(self.mem.A, s_, y_)
                out[-2], out[-1] = _dot(s_, self.g), _dot(y_, self.g)
            out[3 + 3 * m : 3 + 5 * m] = _matvec(self.mem.A, self.g)
            return out, {}
        # phase 2: reduce in shard order, then update the own slices
        tot = np.zeros_like(np.asarray(inputs[0], dtype=np.float64))
        for part in inputs:
            tot = tot + np.asarray(part, dtype=np.float64)
        v = tot[3 + 3 * m : 3 + 5 * m].copy()
        if self.pair is not None:
            s_, y_ = self.pair
            accepted = self.mem.push_reduced(
                s_, y_, float(tot[0]), float(tot[1]), float(tot[2]), tot[3 : 3 + m], tot[3 + m : 3 + 2 * m],
                tot[3 + 2 * m : 3 + 3 * m],
            )  # fmt: skip
            if accepted:
                slot = self.mem.order[-1]
                v[slot], v[m + slot] = tot[-2], tot[-1]
        if first:
            self.ref_x, self.ref_g = self.x.copy(), self.g.copy()
        counter = step + 1 if o["beta_counter"] == "inner" else epoch + 1
        if self.mem.full:
            beta = max(o["beta_floor"], (o["eta"] * counter) ** o["gamma"])
            coefs = self.mem.coefficients_from(v)
            _k.lbfgs_apply(self.x, self.g, self.mem.A, coefs, self.mem.sigma, 1.0 / beta)
        else:
            beta = (o["eta_gd"] * counter) ** o["gamma_gd"]
            self.x -= self.g * (1.0 / beta)
        return self._V().ravel().copy(), {}

    def call(self, name: str, *args: Any) -> Any:
        if name == "x":
            return self.x.copy()
        if name == "pairs":
            return (self.mem.n_accepted, self.mem.n_rejected)
        raise ValueError(f"unknown shard call {name!r}")


def _make_hamsi_shard(spec: _ShardSpec) -> _HamsiShard:
    """Engine factory (module level, hence picklable)."""
    return _HamsiShard(spec)


def hamsi_distributed(
    problem: MatrixFactorizationProblem,
    n_shards: int = 2,
    *,
    engine: Any = "inprocess",
    schedule: Literal["det", "stoc"] = "det",
    eta: float = 0.06,
    gamma: float = 0.51,
    memory: int = 5,
    eta_gd: float = 0.001,
    gamma_gd: float = 0.51,
    beta_counter: Literal["outer", "inner"] = "inner",
    beta_floor: float = 1.0,
    sigma_mode: Literal["thesis", "running_min"] = "thesis",
    sigma0: float = 500.0,
    curvature: Literal["relative", "reference", "thesis"] = "relative",
    curvature_tol: float | None = None,
    max_epochs: int = 20,
    init: tuple[Any, Any] | None = None,
    init_scale: float = 1.0,
    test: Ratings | None = None,
    rng: RNGLike,
) -> HamsiResult:
    """HAMSI (L-BFGS, STRATA-B with ``P = n_shards``) on the engines of :mod:`dpopt.distributed.engines`.

    One shard program per row block (``"inprocess"``, ``"processes"`` or ``"ray"``: one actor per
    shard); shard ``r`` owns row block ``R_r`` of U and column block ``C_r`` of V; in stratum ``s`` it
    processes block ``R_r x C_{(r+s) mod P}`` with the column factors sent by their owner, and the
    L-BFGS step needs one all-reduce of ``2M`` (plus ``3M + 5`` for a curvature pair) scalars per
    inner step (spec §2.11).  The iterates equal those of :func:`hamsi` on
    :func:`~dpopt.distributed.partition.strata_b` with ``safeguard=False`` up to the summation order of
    the inner products, and are identical on every engine.  Options as in :func:`hamsi`; the
    restart safeguard is not available here.
    """
    from dpopt.distributed.engines import Engine, make_engine
    from dpopt.distributed.partition import strata_b
    from dpopt.matrix_factorization import MatrixFactorizationProblem

    if not isinstance(problem, MatrixFactorizationProblem):
        raise InvalidParameterError(
            "problem: expected a dpopt.matrix_factorization.MatrixFactorizationProblem"
        )
    P = check_int(n_shards, "n_shards")
    if beta_counter not in ("outer", "inner"):
        raise InvalidParameterError("beta_counter: must be 'outer' or 'inner'")
    max_epochs = check_int(max_epochs, "max_epochs", minimum=0)
    options = {
        "eta": check_positive(eta, "eta"), "gamma": check_positive(gamma, "gamma"),
        "eta_gd": check_positive(eta_gd, "eta_gd"), "gamma_gd": check_positive(gamma_gd, "gamma_gd"),
        "memory": check_int(memory, "memory"), "beta_counter": beta_counter,
        "beta_floor": check_nonneg(beta_floor, "beta_floor"), "sigma_mode": sigma_mode, "sigma0": sigma0,
        "curvature": curvature, "curvature_tol": curvature_tol,
    }  # fmt: skip
    if test is not None and (not isinstance(test, Ratings) or test.shape != problem.shape):
        raise InvalidParameterError(
            f"test: expected a Ratings of shape {problem.shape} (same users and items)"
        )
    r_init, r_sched, _ = (as_generator(c) for c in spawn(rng, ["init", "schedule", "partition"]))
    part = strata_b(problem.ratings, P)
    assert part.row_cuts is not None and part.col_cuts is not None
    rc, cc = part.row_cuts, part.col_cuts
    if init is None:
        U0, V0 = problem.init_factors(rng=r_init, scale=init_scale)
    else:
        U0, V0 = problem._check_factors(*init)
    rt = problem.ratings
    orders = subset_schedule(P, schedule, repeat_first=P > 1, rng=r_sched)
    steps: list[tuple[int, int, int, bool, bool]] = []
    n_steps = 0
    for epoch in range(max_epochs):
        order = next(orders)
        for ell, k in enumerate(order):
            first = P == 1 or ell == 0
            closing = P == 1 or ell == len(order) - 1
            steps.append((epoch, n_steps, k, first, closing))
            n_steps += 1
    n = problem.n_ratings
    reg = tuple(problem.l2 * float(sum(b.shape[0] for b in part.blocks[s])) / n for s in range(P))
    specs = []
    for r in range(P):
        blocks = []
        for s in range(P):
            idx = part.blocks[s][r]
            c = (r + s) % P
            blocks.append((
                np.ascontiguousarray(rt.rows[idx] - rc[r], dtype=np.int64),
                np.ascontiguousarray(rt.cols[idx] - cc[c], dtype=np.int64),
                np.ascontiguousarray(rt.values[idx], dtype=np.float64),
            ))  # fmt: skip
        specs.append(
            _ShardSpec(
                r=r,
                n_shards=P,
                rank=problem.rank,
                U0=np.ascontiguousarray(U0[rc[r] : rc[r + 1]]),
                V0=np.ascontiguousarray(V0[cc[r] : cc[r + 1]]),
                blocks=tuple(blocks),
                reg=reg,
                weight=problem.weight,
                steps=tuple(steps),
                options=dict(options),
            )
        )
    eng = make_engine(engine)
    own = not isinstance(engine, Engine)
    timings = {"gradient": 0.0, "update": 0.0, "hessian": 0.0}
    phase_name = ("gradient", "hessian", "update")
    hist_t: list[float] = []
    hist_e: list[int] = []
    hist_r: list[float] = []
    hist_te: list[float] = []
    elapsed = 0.0
    U = U0.copy()
    V = V0.copy()

    def gather() -> None:
        for r, xr in enumerate(eng.call("x")):
            nU = (rc[r + 1] - rc[r]) * problem.rank
            U[rc[r] : rc[r + 1]] = xr[:nU].reshape(-1, problem.rank)
            V[cc[r] : cc[r + 1]] = xr[nU:].reshape(-1, problem.rank)
        hist_t.append(elapsed)
        hist_r.append(problem.rmse(U, V))
        if test is not None:
            hist_te.append(problem.rmse(U, V, test))

    status = "max_epochs"
    try:
        _k.warmup()
        eng.start(_make_hamsi_shard, specs, [list(range(P))] * P)
        hist_e.append(0)
        gather()
        t = 0
        done_epochs = 0
        for epoch in range(max_epochs):
            while t < 3 * len(steps) and steps[t // 3][0] == epoch:
                t0 = time.perf_counter()
                eng.step(t)
                dt = time.perf_counter() - t0
                timings[phase_name[t % 3]] += dt
                elapsed += dt
                t += 1
            done_epochs = epoch + 1
            hist_e.append(done_epochs)
            gather()
            if not math.isfinite(hist_r[-1]):
                status = "diverged"
                break
        pairs = eng.call("pairs")[0]
    finally:
        if own:
            eng.close()
    return HamsiResult(
        U=U.copy(),
        V=V.copy(),
        method="hamsi",
        scheme=f"strata-b/{eng.name}",
        schedule=schedule,
        status=status,
        n_epochs=done_epochs,
        n_steps=sum(1 for st in steps if st[0] < done_epochs),
        history_time=np.asarray(hist_t),
        history_epoch=np.asarray(hist_e, dtype=np.int64),
        history_rmse=np.asarray(hist_r),
        history_test_rmse=np.asarray(hist_te) if test is not None else None,
        timings=MappingProxyType(timings),
        n_pairs_accepted=int(pairs[0]),
        n_pairs_rejected=int(pairs[1]),
        n_restarts=0,
        n_threads=P,
        partition_balance=MappingProxyType(part.balance()),
        options=MappingProxyType(dict(options, n_subsets=P, engine=eng.name)),
    )
