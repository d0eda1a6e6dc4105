"""Alternating least squares (ALS) for :class:`~dpopt.matrix_factorization.MatrixFactorizationProblem`.

One *sweep* solves the ridge regression of every row factor (and row bias) with the column factors
fixed, then of every column factor (and column bias) with the row factors fixed.  Each half-sweep
is the exact minimiser of the objective over one side, so the objective never increases.  The
per-row solves are independent; they run in compiled kernels (numba, GIL released) on a pool of
``n_threads`` threads, each row solved by a Cholesky factorization of its ``(rank + 1)``-square
normal matrix (``rank`` without biases).  Results do not depend on the thread count.

The data term of the objective comes for free from the normal equations of the last half-sweep
(``Σ r² - xᵀb - Σ_j λ_j x_j²`` per row), so monitoring convergence costs no extra pass over the
ratings.

Cost per sweep: ``|Ω| (k + 1) k`` multiply-adds to form the normal matrices and
``(n_rows + n_cols) k³ / 3`` for the factorizations (``k = rank + 1``), plus one copy of the ratings
sorted by row and one by column (12 bytes per rating each, built once).

ALS is an optimizer and is **not** differentially private.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numba import njit
from numpy.typing import NDArray

from dpopt._validation import check_int, check_nonneg, check_positive
from dpopt.datasets import Ratings
from dpopt.exceptions import InvalidParameterError
from dpopt.iteration import Callback, notify
from dpopt.progress import announce_compilation
from dpopt.randomness import RNGLike, as_generator, spawn
from dpopt.solvers.hamsi.result import HamsiResult

if TYPE_CHECKING:
    from dpopt.matrix_factorization import MatrixFactorizationProblem

__all__ = ["als", "als_distributed", "als_sweeps"]

Float = NDArray[np.float64]
_OPTS: dict[str, Any] = {"nogil": True, "cache": True, "fastmath": True}
_CHUNKS_PER_THREAD = 8  # dynamic scheduling: a loaded machine deschedules threads unevenly


# ============================================================================ compiled kernels
@njit(**_OPTS)
def _counting_order(keys, n_keys):  # pragma: no cover - compiled
    """Stable order of ``keys`` (integers in ``[0, n_keys)``) and the CSR pointer of each key."""
    indptr = np.zeros(n_keys + 1, dtype=np.int64)
    for e in range(keys.shape[0]):
        indptr[keys[e] + 1] += 1
    for i in range(n_keys):
        indptr[i + 1] += indptr[i]
    pos = indptr[:-1].copy()
    order = np.empty(keys.shape[0], dtype=np.int64)
    for e in range(keys.shape[0]):
        k = keys[e]
        order[pos[k]] = e
        pos[k] += 1
    return indptr, order


@njit(**_OPTS)
def _gather(other, vals, order, idx_out, val_out):  # pragma: no cover - compiled
    for t in range(order.shape[0]):
        e = order[t]
        idx_out[t] = other[e]
        val_out[t] = vals[e]


@njit(**_OPTS)
def _solve_rows(
    F, G, indptr, idx, vals, free, fixed, reg, per_count, lo, hi, sse
):  # pragma: no cover - compiled
    """Ridge solve of rows ``lo .. hi - 1`` of ``F`` against the fixed factors ``G``.

    Row ``a``'s free entries ``x = F[a, free]`` minimise ``Σ_t (r_t - G[c_t, free]·x)² + Σ_j reg_j x_j²``
    with ``r_t = vals[t] - G[c_t, fixed] F[a, fixed]`` (no fixed column when ``fixed < 0``); with
    ``per_count`` the ridge is ``n_a reg_j`` (``n_a`` the row's number of ratings, ALS-WR).  The
    row's sum of squared residuals at the solution is written to ``sse[a]``.
    """
    k = free.shape[0]
    A = np.empty((k, k))
    b = np.empty(k)
    g = np.empty(k)
    most = 0
    for a in range(lo, hi):
        most = max(most, indptr[a + 1] - indptr[a])
    X = np.empty((k, most))  # the row's features, one contiguous line per factor column
    res = np.empty(most)
    for a in range(lo, hi):
        s, e = indptr[a], indptr[a + 1]
        n = e - s
        if n == 0:
            for j in range(k):
                if reg[j] > 0.0:
                    F[a, free[j]] = 0.0
            sse[a] = 0.0
            continue
        fa = F[a, fixed] if fixed >= 0 else 0.0
        rr = 0.0
        for t in range(n):
            c = idx[s + t]
            r = vals[s + t]
            if fixed >= 0:
                r -= G[c, fixed] * fa
            res[t] = r
            rr += r * r
            for j in range(k):
                X[j, t] = G[c, free[j]]
        # normal matrix (lower triangle) and right-hand side: contiguous dot products
        for j in range(k):
            acc = 0.0
            for t in range(n):
                acc += X[j, t] * res[t]
            b[j] = acc
            for m in range(j + 1):
                acc = 0.0
                for t in range(n):
                    acc += X[j, t] * X[m, t]
                A[j, m] = acc
        # Cholesky A = L Lᵀ in the lower triangle (a tiny jitter keeps singular rows finite)
        big = 0.0
        scale = float(n) if per_count else 1.0
        for j in range(k):
            A[j, j] += reg[j] * scale
            big = max(big, A[j, j])
        tiny = 1e-12 * big + 1e-300
        for j in range(k):
            d = A[j, j]
            for m in range(j):
                d -= A[j, m] * A[j, m]
            d = math.sqrt(d if d > tiny else tiny)
            A[j, j] = d
            for i in range(j + 1, k):
                v = A[i, j]
                for m in range(j):
                    v -= A[i, m] * A[j, m]
                A[i, j] = v / d
        # x = A⁻¹ b: forward (L y = b) then backward (Lᵀ x = y), in g
        for j in range(k):
            v = b[j]
            for m in range(j):
                v -= A[j, m] * g[m]
            g[j] = v / A[j, j]
        for j in range(k - 1, -1, -1):
            v = g[j]
            for m in range(j + 1, k):
                v -= A[m, j] * g[m]
            g[j] = v / A[j, j]
        xb = 0.0
        xrx = 0.0
        for j in range(k):
            F[a, free[j]] = g[j]
            xb += g[j] * b[j]
            xrx += reg[j] * scale * g[j] * g[j]
        sse[a] = max(rr - xb - xrx, 0.0)


def warmup() -> None:
    """Load (or compile) the kernels once on tiny inputs."""
    announce_compilation(_counting_order, _gather, _solve_rows, seconds=10)
    keys = np.array([1, 0], dtype=np.int32)
    for kk in (keys, keys.astype(np.int64)):
        indptr, order = _counting_order(kk, 2)
        idx = np.empty(2, dtype=kk.dtype)
        val = np.empty(2)
        _gather(kk, np.ones(2), order, idx, val)
        _solve_rows(np.ones((2, 3)), np.ones((2, 3)), indptr, idx, val, np.array([0, 1], dtype=np.int64),
                    2, np.ones(2), False, 0, 2, np.zeros(2))  # fmt: skip


# ============================================================================ sweeps
class _Sides:
    """The ratings sorted by row and by column (CSR both ways), the column maps and ridge weights."""

    def __init__(self, problem: MatrixFactorizationProblem) -> None:
        n_rows, n_cols = problem.shape
        rows, cols, vals = problem.rows, problem.cols, problem.values
        self.by_row = self._csr(rows, cols, vals, n_rows)
        self.by_col = self._csr(cols, rows, vals, n_cols)
        lam = 1.0 / problem.weight  # ALS-scale ridge = l2 / w (the objective times 1/w)
        W, L = problem.width, problem.rank
        if problem.bias:
            self.free_U = np.array([*range(L + 1)], dtype=np.int64)  # [U | p] free, column of ones fixed
            self.free_V = np.array([*range(L), L + 1], dtype=np.int64)  # [V | q] free
            self.fixed_U, self.fixed_V = L + 1, L
        else:
            self.free_U = self.free_V = np.arange(W, dtype=np.int64)
            self.fixed_U = self.fixed_V = -1
        self.reg_U = np.ascontiguousarray(problem._reg_U[self.free_U] * lam)
        self.reg_V = np.ascontiguousarray(problem._reg_V[self.free_V] * lam)
        self.per_count = problem.l2_weighting == "count"
        # per-row multipliers of the ridge weights (ALS-WR: the row's rating count)
        self.mult_U = np.diff(self.by_row[0]).astype(np.float64) if self.per_count else np.ones(n_rows)
        self.mult_V = np.diff(self.by_col[0]).astype(np.float64) if self.per_count else np.ones(n_cols)
        self.sse_U = np.zeros(n_rows)
        self.sse_V = np.zeros(n_cols)

    @staticmethod
    def _csr(key: NDArray[Any], other: NDArray[Any], vals: Float, n: int) -> tuple[Any, ...]:
        indptr, order = _counting_order(key, n)
        idx = np.empty(order.shape[0], dtype=other.dtype)
        val = np.empty(order.shape[0])
        _gather(other, vals, order, idx, val)
        return indptr, idx, val


def _chunks(indptr: NDArray[np.int64], n_chunks: int) -> list[tuple[int, int]]:
    """Contiguous row ranges with about equal numbers of ratings (plus rows, for the solves)."""
    n = indptr.shape[0] - 1
    work = indptr + 2 * np.arange(n + 1)  # a solve costs about as much as a few ratings
    cuts = np.searchsorted(work, np.linspace(0, work[-1], n_chunks + 1)).tolist()
    cuts[0], cuts[-1] = 0, n
    return [(lo, hi) for lo, hi in itertools.pairwise(cuts) if hi > lo]


class _Sweeper:
    def __init__(self, problem: MatrixFactorizationProblem, n_threads: int) -> None:
        self.sides = _Sides(problem)
        self.n_threads = max(1, int(n_threads))
        n_chunks = 1 if self.n_threads == 1 else self.n_threads * _CHUNKS_PER_THREAD
        self.chunks_U = _chunks(self.sides.by_row[0], n_chunks)
        self.chunks_V = _chunks(self.sides.by_col[0], n_chunks)
        self._pool = ThreadPoolExecutor(self.n_threads) if self.n_threads > 1 else None

    def half(self, F: Float, G: Float, rows_side: bool) -> None:
        s = self.sides
        indptr, idx, vals = s.by_row if rows_side else s.by_col
        free, fixed, reg, sse, chunks = (
            (s.free_U, s.fixed_U, s.reg_U, s.sse_U, self.chunks_U)
            if rows_side
            else (s.free_V, s.fixed_V, s.reg_V, s.sse_V, self.chunks_V)
        )
        if self._pool is None:
            for lo, hi in chunks:
                _solve_rows(F, G, indptr, idx, vals, free, fixed, reg, s.per_count, lo, hi, sse)
            return
        futures = [
            self._pool.submit(
                _solve_rows, F, G, indptr, idx, vals, free, fixed, reg, s.per_count, lo, hi, sse
            )
            for lo, hi in chunks
        ]
        for fut in futures:
            fut.result()

    def sweep(self, U: Float, V: Float) -> float:
        """One sweep (rows, then columns); returns the data term ``Σ r²`` at the new point."""
        self.half(U, V, True)
        self.half(V, U, False)
        return float(self.sides.sse_V.sum())

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _objective_als(
    problem: MatrixFactorizationProblem, sides: _Sides, U: Float, V: Float, sse: float
) -> float:
    """``Σ r² + Σ_a m_a Σ_j λ_j U_aj² + (columns alike)`` (the objective on the ALS scale: ``f / (w/2)``;
    ``m_a`` is 1, or the row's rating count with ``l2_weighting="count"``)."""
    return sse + float(
        np.einsum("i,ij,ij,j->", sides.mult_U, U[:, sides.free_U], U[:, sides.free_U], sides.reg_U)
        + np.einsum("i,ij,ij,j->", sides.mult_V, V[:, sides.free_V], V[:, sides.free_V], sides.reg_V)
    )


def als_sweeps(
    problem: MatrixFactorizationProblem, U: Float, V: Float, n_sweeps: int, *, n_threads: int = 1
) -> tuple[Float, Float]:
    """``n_sweeps`` ALS sweeps from the working factors ``(U, V)`` (new arrays; the inputs are kept).

    For a warm start of another solver, e.g. ``hamsi(problem, init=als_sweeps(problem, U0, V0, 2))``.
    """
    n_sweeps = check_int(n_sweeps, "n_sweeps", minimum=0)
    U_, V_ = problem._check_factors(U, V)
    U_, V_ = U_.copy(), V_.copy()
    sw = _Sweeper(problem, n_threads)
    try:
        for _ in range(n_sweeps):
            sw.sweep(U_, V_)
    finally:
        sw.close()
    return U_, V_


def _start(
    problem: MatrixFactorizationProblem,
    init: tuple[Any, ...] | None,
    init_scale: float | Literal["spectral"] | None,
    spectral_power: int,
    rng: RNGLike,
) -> tuple[Float, Float]:
    """The starting working factors of :func:`als` and :func:`als_distributed` (stream ``"init"``)."""
    from dpopt.solvers.hamsi._execution import _initial_point

    spectral_power = check_int(spectral_power, "spectral_power", minimum=0)
    gen = as_generator(spawn(rng, ["init", "schedule", "partition"])[0])  # the same init stream as hamsi's
    if init is None and isinstance(init_scale, str):
        if init_scale != "spectral":
            raise InvalidParameterError("init_scale: expected a positive number, None or 'spectral'")
        U, V = problem.spectral_factors(rng=gen, n_power=spectral_power)
        if problem.bias:
            U, V = problem.augment(U, V)
    else:
        U, V = (np.array(a) for a in problem.unpack(_initial_point(problem, init, init_scale, gen)))
    return U, V


class _Monitor:
    """History, best value and stopping rule of an ALS run (shared by :func:`als` and
    :func:`als_distributed`): the monitored value is the validation RMSE with ``early_stopping``,
    else the objective."""

    def __init__(
        self,
        name: str,
        *,
        max_iter: int,
        tol: float,
        patience: int,
        time_budget: float | None,
        test: Ratings | None,
        early_stopping: bool,
        callback: Callback | None,
    ) -> None:
        self.name = name
        self.max_iter = check_int(max_iter, "max_iter", minimum=0)
        self.tol = check_nonneg(tol, "tol")
        self.patience = check_int(patience, "patience", minimum=1)
        self.budget = None if time_budget is None else check_positive(time_budget, "time_budget")
        if early_stopping and test is None:
            raise InvalidParameterError("early_stopping: needs a validation split passed as test=")
        self.early_stopping = early_stopping
        self.callback = callback
        self.hist_t: list[float] = []
        self.hist_e: list[int] = []
        self.hist_r: list[float] = []
        self.hist_te: list[float] = []
        self.best = math.inf
        self.best_x: tuple[Float, Float] | None = None
        self.stale = 0
        self.status, self.message = "max_iter", ""

    def record(
        self,
        sweep: int,
        elapsed: float,
        rmse: float,
        test_rmse: float | None,
        objective: float,
        U: Float,
        V: Float,
    ) -> None:
        """Append one point of the history (``sweep = 0``: the start) and track the best value."""
        self.hist_t.append(elapsed)
        self.hist_e.append(sweep)
        self.hist_r.append(rmse)
        if test_rmse is not None:
            self.hist_te.append(test_rmse)
        value = self.hist_te[-1] if self.early_stopping else objective
        if sweep == 0:
            self.best = value
            self.best_x = (U.copy(), V.copy()) if self.early_stopping else None
            return
        self.stale = 0 if value < (1.0 - self.tol) * self.best else self.stale + 1
        if value < self.best:
            self.best = value
            if self.best_x is not None:
                self.best_x[0][:], self.best_x[1][:] = U, V

    def fail(self, message: str) -> None:
        self.status, self.message = "failed", f"{self.name}: {message}"

    def should_stop(self, sweep: int, elapsed: float) -> bool:
        """The stopping rule after sweep ``sweep`` (sets the status and message)."""
        if self.tol > 0 and self.stale >= self.patience:
            what = "validation RMSE" if self.early_stopping else "objective"
            self.status = "converged"
            self.message = (
                f"{self.name}: converged after {sweep} sweeps ({what} improved by less than tol={self.tol:g} "
                f"(relative) in {self.patience} sweeps)"
            )
            return True
        if self.budget is not None and elapsed >= self.budget:
            self.status = "max_time"
            return True
        if notify(self.callback, sweep, rmse=self.hist_r[-1], elapsed=elapsed):
            self.status = "stopped"
            return True
        return False

    def result(
        self,
        problem: MatrixFactorizationProblem,
        U: Float,
        V: Float,
        *,
        sweep: int,
        elapsed: float,
        scheme: str,
        n_threads: int,
        options: dict[str, Any],
        setup_time: float,
        eval_time: float,
    ) -> HamsiResult:
        """The run's result; with early stopping, the best-validation factors."""
        if self.best_x is not None and self.hist_te and self.hist_te[-1] > self.best:
            U, V = self.best_x
            t = time.perf_counter()
            self.hist_t.append(elapsed)
            self.hist_e.append(sweep)
            self.hist_r.append(problem.rmse(U, V))
            self.hist_te.append(self.best)
            eval_time += time.perf_counter() - t
        U_out, V_out, row_bias, col_bias = problem.split(U, V)
        opts = {"tol": self.tol, "patience": self.patience, "l2": problem.l2, "l2_bias": problem.l2_bias,
                "scaling": problem.scaling, "rank": problem.rank, **options}  # fmt: skip
        return HamsiResult(
            U=U_out,
            V=V_out,
            method="als",
            scheme=scheme,
            schedule="det",
            status=self.status,
            n_epochs=sweep,
            n_steps=2 * sweep,
            history_time=np.asarray(self.hist_t),
            history_epoch=np.asarray(self.hist_e, dtype=np.int64),
            history_rmse=np.asarray(self.hist_r),
            history_test_rmse=np.asarray(self.hist_te) if self.hist_te else None,
            timings=MappingProxyType({"update": elapsed}),
            n_pairs_accepted=0,
            n_pairs_rejected=0,
            n_restarts=0,
            n_threads=n_threads,
            partition_balance=MappingProxyType({}),
            options=MappingProxyType(opts),
            message=self.message or f"{self.name}: {sweep} sweeps ({self.status})",
            row_bias=row_bias,
            col_bias=col_bias,
            offset=float(problem.offset or 0.0),
            setup_time=setup_time,
            eval_time=eval_time,
        )


def als(
    problem: MatrixFactorizationProblem,
    *,
    max_iter: int = 50,
    tol: float = 1e-4,
    patience: int = 1,
    time_budget: float | None = None,
    n_threads: int = 1,
    init: tuple[Any, ...] | None = None,
    init_scale: float | Literal["spectral"] | None = "spectral",
    spectral_power: int = 4,
    test: Ratings | None = None,
    early_stopping: bool = False,
    rng: RNGLike,
    callback: Callback | None = None,
) -> HamsiResult:
    """Alternating least squares on the (biased) factorization objective.

    Every sweep solves the ridge regression of each row's ``(U_a, p_a)`` with the columns fixed,
    then of each column's ``(V_b, q_b)`` with the rows fixed (exact Cholesky solves, see the
    module docstring).  The default start is the spectral one, from which a few sweeps suffice on
    the problems of ``docs/mf_peers.md``.

    Parameters
    ----------
    problem : MatrixFactorizationProblem
    max_iter : int, default 50
        Maximum number of sweeps.
    tol : float, default 1e-4
        Stop (status ``"converged"``) when the monitored value (validation RMSE with
        ``early_stopping``, otherwise the objective) fell by less than ``tol`` relative to its best
        value in ``patience`` consecutive sweeps.  ``0`` runs ``max_iter`` sweeps.
    patience : int, default 1
    time_budget : float or None
        Stop after this many seconds of sweeps (evaluations excluded).
    n_threads : int, default 1
        Threads solving rows in parallel.
    init : (U0, V0), (U0, V0, row_bias, col_bias) or None
        Initial factors (plain or working); by default from ``init_scale``.
    init_scale : float, "spectral" or None, default "spectral"
        ``"spectral"``: the ridge-thresholded top singular subspace of the ratings
        (:meth:`~dpopt.matrix_factorization.MatrixFactorizationProblem.spectral_factors`, zero
        biases); a number: i.i.d. ``N(0, init_scale²)`` factors; ``None``: that scaled to the data.
    spectral_power : int, default 4
        Power steps of the spectral start (each costs two sparse products; on the 2M synthetic
        problem 4 steps reach within 1 % of the final test RMSE one sweep earlier than 2).
    test : Ratings or None
        Held-out ratings whose RMSE is recorded after every sweep (clipped if the problem clips).
    early_stopping : bool, default False
        Monitor the RMSE on ``test`` and hand back the factors of the best one.
    rng : int, Generator, "secure" or None
        Initialization only (child stream ``"init"``).
    callback : callable, optional
        ``callback(info)`` after every sweep (:class:`dpopt.iteration.IterationInfo`); returning
        ``True`` or raising ``StopIteration`` stops the run (status ``"stopped"``).

    Returns
    -------
    HamsiResult
        ``method="als"``; ``history_rmse`` is the training RMSE after each sweep (the initial
        point's is computed exactly), ``n_epochs`` the number of sweeps.

    Examples
    --------
    >>> from dpopt.datasets import make_low_rank_ratings
    >>> from dpopt.matrix_factorization import MatrixFactorizationProblem
    >>> r = make_low_rank_ratings(200, 100, 3, 0.3, rng=0)
    >>> p = MatrixFactorizationProblem.from_als_lambda(r, 3, 1.0, bias=True)
    >>> res = als(p, rng=0)
    >>> res.status, res.rmse < 0.15  # noise 0.1
    ('converged', True)
    """
    mon = _Monitor(
        "als", max_iter=max_iter, tol=tol, patience=patience, time_budget=time_budget, test=test,
        early_stopping=early_stopping, callback=callback,
    )  # fmt: skip
    n_threads = check_int(n_threads, "n_threads")
    t_setup = time.perf_counter()
    warmup()
    U, V = _start(problem, init, init_scale, spectral_power, rng)
    sw = _Sweeper(problem, n_threads)
    n = problem.n_ratings
    setup_time = time.perf_counter() - t_setup

    test_rmse: Callable[[Float, Float], float] | None = problem.evaluator(test) if test is not None else None
    t0 = time.perf_counter()
    sse0 = problem.sse(U, V)
    mon.record(
        0, 0.0, math.sqrt(sse0 / n), test_rmse(U, V) if test_rmse is not None else None,
        math.nan if early_stopping else _objective_als(problem, sw.sides, U, V, sse0), U, V,
    )  # fmt: skip
    eval_time = time.perf_counter() - t0
    elapsed = 0.0
    sweep = 0
    try:
        while sweep < mon.max_iter:
            t1 = time.perf_counter()
            sse = sw.sweep(U, V)
            elapsed += time.perf_counter() - t1
            sweep += 1
            t2 = time.perf_counter()
            if not (math.isfinite(sse) and np.isfinite(U).all() and np.isfinite(V).all()):
                mon.fail("non-finite factors (check the ratings and the ridge weight)")
                break
            mon.record(
                sweep, elapsed, math.sqrt(sse / n), test_rmse(U, V) if test_rmse is not None else None,
                math.nan if early_stopping else _objective_als(problem, sw.sides, U, V, sse), U, V,
            )  # fmt: skip
            eval_time += time.perf_counter() - t2
            if mon.should_stop(sweep, elapsed):
                break
    finally:
        sw.close()
    return mon.result(
        problem, U, V, sweep=sweep, elapsed=elapsed, scheme="full", n_threads=n_threads, options={},
        setup_time=setup_time, eval_time=eval_time,
    )  # fmt: skip


# ============================================================================ distributed (engines)
@dataclass(frozen=True)
class _ALSShardSpec:
    """Shard ``r`` of :func:`als_distributed`: its row block's ratings (CSR by local row, global
    column ids) and its column block's (CSR by local column, global row ids), picklable."""

    r: int
    width: int
    U0: Float
    V0: Float
    by_row: tuple[NDArray[np.int64], NDArray[Any], Float]
    by_col: tuple[NDArray[np.int64], NDArray[Any], Float]
    free_U: NDArray[np.int64]
    free_V: NDArray[np.int64]
    fixed_U: int
    fixed_V: int
    reg_U: Float
    reg_V: Float
    per_count: bool


class _ALSShard:
    """Owns rows ``R_r`` of U and columns ``C_r`` of V.  Even rounds solve the own rows against the
    whole V (the blocks every shard published), odd rounds the own columns against the whole U."""

    def __init__(self, spec: _ALSShardSpec) -> None:
        self.spec = spec
        self.U = np.array(spec.U0, dtype=np.float64)
        self.V = np.array(spec.V0, dtype=np.float64)
        self.sse_U = np.zeros(self.U.shape[0])
        self.sse_V = np.zeros(self.V.shape[0])

    def initial_output(self) -> Float:
        return self.V.ravel().copy()

    def _ridge(self, F: Float, free: NDArray[np.int64], reg: Float, indptr: NDArray[np.int64]) -> float:
        mult = np.diff(indptr).astype(np.float64) if self.spec.per_count else np.ones(F.shape[0])
        return float(np.einsum("i,ij,ij,j->", mult, F[:, free], F[:, free], reg))

    def step(self, t: int, inputs: Any) -> tuple[Float, Any]:
        sp = self.spec
        G = np.concatenate([np.asarray(x, dtype=np.float64).reshape(-1, sp.width) for x in inputs])
        if t % 2 == 0:
            indptr, idx, vals = sp.by_row
            _solve_rows(self.U, G, indptr, idx, vals, sp.free_U, sp.fixed_U, sp.reg_U, sp.per_count,
                        0, self.U.shape[0], self.sse_U)  # fmt: skip
            return self.U.ravel().copy(), {}
        indptr, idx, vals = sp.by_col
        _solve_rows(self.V, G, indptr, idx, vals, sp.free_V, sp.fixed_V, sp.reg_V, sp.per_count,
                    0, self.V.shape[0], self.sse_V)  # fmt: skip
        ridge = self._ridge(self.U, sp.free_U, sp.reg_U, sp.by_row[0]) + self._ridge(
            self.V, sp.free_V, sp.reg_V, indptr
        )
        finite = bool(np.isfinite(self.U).all() and np.isfinite(self.V).all())
        return self.V.ravel().copy(), {"sse": float(self.sse_V.sum()), "ridge": ridge, "finite": finite}

    def snapshot(self) -> dict[str, Any]:
        return {"U": self.U.copy(), "V": self.V.copy()}

    def restore(self, state: dict[str, Any]) -> Float:
        self.U[:] = state["U"]
        self.V[:] = state["V"]
        return self.initial_output()

    def call(self, name: str, *args: Any) -> Any:
        if name == "factors":
            return self.U.copy(), self.V.copy()
        if name == "snapshot":
            return self.snapshot()
        if name == "restore":
            return self.restore(*args)
        raise ValueError(f"unknown shard call {name!r}")


def _make_als_shard(spec: _ALSShardSpec) -> _ALSShard:
    """Engine factory (module level, hence picklable)."""
    warmup()
    return _ALSShard(spec)


def _balanced_cuts(indptr: NDArray[np.int64], n_parts: int) -> NDArray[np.int64]:
    """``n_parts + 1`` boundaries of contiguous index ranges with about equal numbers of ratings."""
    n = indptr.shape[0] - 1
    cuts = np.searchsorted(indptr, np.linspace(0, indptr[-1], n_parts + 1)).astype(np.int64)
    cuts[0], cuts[-1] = 0, n
    return np.maximum.accumulate(np.minimum(cuts, n))


def als_distributed(
    problem: MatrixFactorizationProblem,
    n_shards: int = 2,
    *,
    engine: Any = "inprocess",
    max_iter: int = 50,
    tol: float = 1e-4,
    patience: int = 1,
    time_budget: float | None = None,
    init: tuple[Any, ...] | None = None,
    init_scale: float | Literal["spectral"] | None = "spectral",
    spectral_power: int = 4,
    test: Ratings | None = None,
    early_stopping: bool = False,
    rng: RNGLike,
    callback: Callback | None = None,
) -> HamsiResult:
    """:func:`als` on the engines of :mod:`dpopt.distributed.engines` (one worker per shard).

    Shard ``r`` owns a contiguous block of rows of U and one of columns of V (blocks balanced by
    rating counts) and holds only the ratings of those rows and of those columns (each rating is
    held twice in all, by its row's shard and by its column's, as in Spark's ALS).  A sweep is two
    engine rounds: every shard solves its rows against the whole V, assembled from the column
    blocks every shard published (``n_cols x width`` numbers per shard), then its columns against
    the whole U.  The solves are those of :func:`als`, so the iterates equal :func:`als`'s up to
    the summation order of the monitored objective (tested), on every engine.  The driver gathers
    the factors only at the end (and after every sweep when ``test`` is given).  ALS is an
    optimizer and is **not** differentially private.

    Parameters
    ----------
    problem : MatrixFactorizationProblem
    n_shards : int, default 2
    engine : {"inprocess", "processes", "ray"} or Engine, default "inprocess"
        As in :func:`~dpopt.solvers.hamsi.hamsi_distributed` (every wait on a worker has a time
        limit).  A failed worker is not recovered here: the
        :class:`~dpopt.distributed.engines.EngineError` is raised (use ``hamsi_distributed`` for
        runs that must survive their workers).
    max_iter, tol, patience, time_budget, init, init_scale, spectral_power, test, early_stopping, rng, callback
        As in :func:`als` (the spectral start is computed by the driver).

    Returns
    -------
    HamsiResult
        ``method="als"``, ``scheme="shards/<engine>"``.

    Examples
    --------
    >>> from dpopt.datasets import make_low_rank_ratings
    >>> from dpopt.matrix_factorization import MatrixFactorizationProblem
    >>> r = make_low_rank_ratings(200, 100, 3, 0.3, rng=0)
    >>> p = MatrixFactorizationProblem.from_als_lambda(r, 3, 1.0, bias=True)
    >>> res = als_distributed(p, 2, rng=0)
    >>> res.status, res.scheme, bool(abs(res.rmse - als(p, rng=0).rmse) < 1e-9)
    ('converged', 'shards/inprocess', True)
    """
    from dpopt.distributed.engines import make_shard_engine
    from dpopt.matrix_factorization import MatrixFactorizationProblem

    if not isinstance(problem, MatrixFactorizationProblem):
        raise InvalidParameterError(
            "problem: expected a dpopt.matrix_factorization.MatrixFactorizationProblem"
        )
    P = check_int(n_shards, "n_shards")
    mon = _Monitor(
        "als_distributed", max_iter=max_iter, tol=tol, patience=patience, time_budget=time_budget, test=test,
        early_stopping=early_stopping, callback=callback,
    )  # fmt: skip
    if test is not None and (not isinstance(test, Ratings) or test.shape != problem.shape):
        raise InvalidParameterError(
            f"test: expected a Ratings of shape {problem.shape} (same users and items)"
        )
    t_setup = time.perf_counter()
    warmup()
    U, V = _start(problem, init, init_scale, spectral_power, rng)
    U, V = np.ascontiguousarray(U, dtype=np.float64), np.ascontiguousarray(V, dtype=np.float64)
    sides = _Sides(problem)
    rp, ri, rv = sides.by_row
    cp, ci, cv = sides.by_col
    rc, cc = _balanced_cuts(rp, P), _balanced_cuts(cp, P)
    specs = []
    for r in range(P):
        a0, a1, b0, b1 = int(rc[r]), int(rc[r + 1]), int(cc[r]), int(cc[r + 1])
        specs.append(
            _ALSShardSpec(
                r=r, width=problem.width, U0=U[a0:a1].copy(), V0=V[b0:b1].copy(),
                by_row=(rp[a0 : a1 + 1] - rp[a0], ri[rp[a0] : rp[a1]], rv[rp[a0] : rp[a1]]),
                by_col=(cp[b0 : b1 + 1] - cp[b0], ci[cp[b0] : cp[b1]], cv[cp[b0] : cp[b1]]),
                free_U=sides.free_U, free_V=sides.free_V, fixed_U=int(sides.fixed_U),
                fixed_V=int(sides.fixed_V), reg_U=sides.reg_U, reg_V=sides.reg_V,
                per_count=bool(sides.per_count),
            )
        )  # fmt: skip
    n = problem.n_ratings
    sse0 = problem.sse(U, V)
    objective0 = _objective_als(problem, sides, U, V, sse0)
    del sides, rp, ri, rv, cp, ci, cv  # the shards hold the ratings from here on
    eng, own = make_shard_engine(engine, P)
    test_rmse: Callable[[Float, Float], float] | None = problem.evaluator(test) if test is not None else None

    def gather() -> None:
        for r, (Ur, Vr) in enumerate(eng.call("factors")):
            U[rc[r] : rc[r + 1]] = Ur
            V[cc[r] : cc[r + 1]] = Vr

    mon.record(
        0, 0.0, math.sqrt(sse0 / n), test_rmse(U, V) if test_rmse is not None else None, objective0, U, V
    )
    eval_time = 0.0
    elapsed = 0.0
    sweep = 0
    try:
        eng.start(_make_als_shard, specs, [list(range(P))] * P)
        setup_time = time.perf_counter() - t_setup
        while sweep < mon.max_iter:
            t1 = time.perf_counter()
            eng.step(2 * sweep)
            diags = eng.step(2 * sweep + 1)
            elapsed += time.perf_counter() - t1
            sweep += 1
            t2 = time.perf_counter()
            sse = math.fsum(d["sse"] for d in diags)
            if not (math.isfinite(sse) and all(d["finite"] for d in diags)):
                mon.fail("non-finite factors (check the ratings and the ridge)")
                break
            if test_rmse is not None:
                gather()
            mon.record(
                sweep, elapsed, math.sqrt(sse / n), test_rmse(U, V) if test_rmse is not None else None,
                sse + math.fsum(d["ridge"] for d in diags), U, V,
            )  # fmt: skip
            eval_time += time.perf_counter() - t2
            if mon.should_stop(sweep, elapsed):
                break
        if mon.status != "failed":
            gather()
    finally:
        if own:
            eng.close()
    return mon.result(
        problem, U, V, sweep=sweep, elapsed=elapsed, scheme=f"shards/{eng.name}", n_threads=P,
        options={"n_shards": P, "engine": eng.name}, setup_time=setup_time, eval_time=eval_time,
    )  # fmt: skip
