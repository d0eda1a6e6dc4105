"""Compiled (numba) kernels for matrix factorization over sparse ratings.

All kernels release the GIL (``nogil=True``), are cached on disk (``cache=True``) and are written so
that their results do **not** depend on the number of threads: every parallel loop writes to
disjoint memory, and every reduction is done over a fixed chunking (independent of the thread
count) whose partial results are summed in a fixed order by the caller.  Hence serial and parallel
runs of a deterministic schedule produce bit-identical iterates.

Conventions: factors ``U`` (n_rows x rank) and ``V`` (n_cols x rank) are C-contiguous float64;
ratings are given as ``rows``/``cols`` (int64) and ``vals`` (float64), stored so that each block /
chunk is a contiguous segment sorted by (row, col).  The gradient of
``coef * sum_e (vals[e] - U[rows[e]] . V[cols[e]])**2 / 2`` is *accumulated* into ``gU``/``gV``
(callers zero them first), i.e. ``gU[a] -= coef * r_e * V[b]`` with ``r_e`` the residual.

Any set of ratings is processed race-free by laying it out on a fixed ``G x G`` grid of row and
column intervals (:func:`stratify`): the ``G`` blocks of a stratum touch disjoint rows and columns,
so they run in parallel, and the strata run one after the other.  Because ``G`` does not depend on
the thread count, neither does the summation order.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numba
import numpy as np
from numba import njit, prange

from dpopt.progress import announce_compilation

__all__ = [
    "BlockRunner",
    "chunk_ptr",
    "chunked_matvec",
    "gradient_block",
    "lbfgs_apply",
    "pair_products",
    "predict_into",
    "regularize",
    "sse_chunks",
    "sse_chunks_clipped",
    "strata_gradient",
    "strata_gradient_serial",
    "stratify",
    "thread_count",
    "warmup",
]

_OPTS: dict[str, Any] = {"nogil": True, "cache": True, "fastmath": True}


@njit(inline="always", **_OPTS)
def _residual(U: Any, V: Any, a: int, b: int, y: float, rank: int) -> float:  # pragma: no cover - compiled
    s = 0.0
    for k in range(rank):
        s += U[a, k] * V[b, k]
    return y - s


@njit(**_OPTS)
def gradient_block(U, V, rows, cols, vals, lo, hi, coef, gU, gV):  # pragma: no cover - compiled
    """Accumulate the gradient of ratings ``lo:hi`` into ``gU``/``gV``; return their squared residuals.

    Releases the GIL: Python threads may run blocks that touch disjoint rows and columns at once.
    """
    rank = U.shape[1]
    s = 0.0
    for e in range(lo, hi):
        a = rows[e]
        b = cols[e]
        res = _residual(U, V, a, b, vals[e], rank)
        s += res * res
        w = coef * res
        for k in range(rank):
            gU[a, k] -= w * V[b, k]
        for k in range(rank):
            gV[b, k] -= w * U[a, k]
    return s


@njit(parallel=True, **_OPTS)
def strata_gradient(U, V, rows, cols, vals, ptr, n_strata, coef, gU, gV, sse):  # pragma: no cover
    """Gradient over ``n_strata`` strata run one after the other, the blocks of each in parallel.

    ``ptr`` has ``n_strata * B + 1`` entries; block ``b`` of stratum ``s`` is the segment
    ``ptr[s*B + b] : ptr[s*B + b + 1]``.  The blocks of one stratum must be row- and
    column-disjoint (race-free).  ``sse[s*B + b]`` receives the block's sum of squared residuals.
    Every factor row accumulates its terms in a fixed order (stratum, then position in the block),
    whatever the number of threads; :func:`strata_gradient_serial` gives the same bits.
    """
    n_blocks = (ptr.shape[0] - 1) // n_strata
    for st in range(n_strata):
        for r in prange(n_blocks):
            blk = st * n_blocks + r
            sse[blk] = gradient_block(U, V, rows, cols, vals, ptr[blk], ptr[blk + 1], coef, gU, gV)


@njit(**_OPTS)
def gradient_blocks(U, V, rows, cols, vals, ptr, blocks, coef, gU, gV, sse):  # pragma: no cover - compiled
    """:func:`gradient_block` for each block index in ``blocks`` (one GIL-free call for several)."""
    for i in range(blocks.shape[0]):
        blk = blocks[i]
        sse[blk] = gradient_block(U, V, rows, cols, vals, ptr[blk], ptr[blk + 1], coef, gU, gV)


@njit(**_OPTS)
def strata_gradient_serial(U, V, rows, cols, vals, ptr, n_strata, coef, gU, gV, sse):  # pragma: no cover
    """Serial twin of :func:`strata_gradient` (same order of operations; no thread rendezvous)."""
    for blk in range(ptr.shape[0] - 1):
        sse[blk] = gradient_block(U, V, rows, cols, vals, ptr[blk], ptr[blk + 1], coef, gU, gV)


@njit(parallel=True, **_OPTS)
def sse_chunks(U, V, rows, cols, vals, ptr, out):  # pragma: no cover
    """Sum of squared residuals per chunk ``ptr[c]:ptr[c+1]`` into ``out[c]``."""
    rank = U.shape[1]
    for c in prange(ptr.shape[0] - 1):
        s = 0.0
        for e in range(ptr[c], ptr[c + 1]):
            res = _residual(U, V, rows[e], cols[e], vals[e], rank)
            s += res * res
        out[c] = s


@njit(parallel=True, **_OPTS)
def sse_chunks_clipped(U, V, rows, cols, vals, ptr, lo, hi, out):  # pragma: no cover
    """:func:`sse_chunks` with every prediction clipped to ``[lo, hi]`` first."""
    rank = U.shape[1]
    for c in prange(ptr.shape[0] - 1):
        s = 0.0
        for e in range(ptr[c], ptr[c + 1]):
            p = vals[e] - _residual(U, V, rows[e], cols[e], vals[e], rank)
            p = min(max(p, lo), hi)
            res = vals[e] - p
            s += res * res
        out[c] = s


@njit(**_OPTS)
def predict_into(U, V, rows, cols, out):  # pragma: no cover - compiled
    """``out[e] = U[rows[e]] . V[cols[e]]``."""
    rank = U.shape[1]
    for e in range(rows.shape[0]):
        s = 0.0
        a = rows[e]
        b = cols[e]
        for k in range(rank):
            s += U[a, k] * V[b, k]
        out[e] = s


@njit(**_OPTS)
def regularize(G, X, coef, fixed):  # pragma: no cover - compiled
    """``G[:, k] += coef[k] * X[:, k]`` for every column, then ``G[:, fixed] = 0`` (``fixed < 0``: none).

    The ridge term of the biased model: ``coef`` holds the factor weight, the bias weight and 0 for
    the constant column of ones, whose gradient is zeroed so that it never moves.
    """
    n, w = G.shape
    for a in range(n):
        for k in range(w):
            G[a, k] += coef[k] * X[a, k]
        if fixed >= 0:
            G[a, fixed] = 0.0


@njit(**_OPTS)
def _seg_dot(a, b):  # pragma: no cover - compiled
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


@njit(**_OPTS)
def chunked_matvec(A, v, chunk, partial):  # pragma: no cover
    """``partial[c, j] = sum_{i in chunk c} A[j, i] * v[i]``; the caller sums over ``c``.

    Serial on purpose: these O(n M) operations are cheap, and on a shared machine every parallel
    region costs a thread rendezvous.
    """
    m, n = A.shape
    for c in range(partial.shape[0]):
        lo = c * chunk
        hi = min(n, lo + chunk)
        vv = v[lo:hi]
        for j in range(m):
            partial[c, j] = _seg_dot(A[j, lo:hi], vv)


@njit(**_OPTS)
def pair_products(A, s, y, chunk, partial):  # pragma: no cover - compiled
    """All inner products a new curvature pair needs, chunk by chunk, in one sweep.

    ``A`` holds ``M`` s-slots then ``M`` y-slots.  ``partial[c]`` = ``[s·y, y·y, s·s, S_j·y (M),
    Y_j·s (M), Y_j·y (M)]`` over chunk ``c``; the caller sums over ``c``.
    """
    m = A.shape[0] // 2
    n = A.shape[1]
    for c in range(partial.shape[0]):
        lo = c * chunk
        hi = min(n, lo + chunk)
        sc = s[lo:hi]
        yc = y[lo:hi]
        partial[c, 0] = _seg_dot(sc, yc)
        partial[c, 1] = _seg_dot(yc, yc)
        partial[c, 2] = _seg_dot(sc, sc)
        for j in range(m):
            partial[c, 3 + j] = _seg_dot(A[j, lo:hi], yc)
            partial[c, 3 + m + j] = _seg_dot(A[m + j, lo:hi], sc)
            partial[c, 3 + 2 * m + j] = _seg_dot(A[m + j, lo:hi], yc)


@njit(**_OPTS)
def lbfgs_apply(x, g, A, coefs, gcoef, step):  # pragma: no cover
    """``x -= step * (gcoef * g + A.T @ coefs)`` elementwise (rows of ``A`` are S and Y slots)."""
    m = A.shape[0]
    for i in range(x.shape[0]):
        d = gcoef * g[i]
        for j in range(m):
            d += coefs[j] * A[j, i]
        x[i] -= step * d


_WARM = False


def warmup() -> None:
    """Load (or compile) every kernel once on tiny inputs, so that timed runs exclude compilation."""
    global _WARM
    if _WARM:
        return
    announce_compilation(
        strata_gradient, strata_gradient_serial, gradient_block, gradient_blocks, sse_chunks,
        sse_chunks_clipped, predict_into, regularize, chunked_matvec, lbfgs_apply, pair_products, seconds=20,
    )  # fmt: skip
    U = np.ones((2, 2))
    V = np.ones((2, 2))
    y = np.ones(2)
    ptr = np.array([0, 2], dtype=np.int64)
    for i in (np.array([0, 1], dtype=np.int64), np.array([0, 1], dtype=np.int32)):
        strata_gradient(U, V, i, i, y, ptr, 1, 1.0, np.zeros((2, 2)), np.zeros((2, 2)), np.zeros(1))
        strata_gradient_serial(U, V, i, i, y, ptr, 1, 1.0, np.zeros((2, 2)), np.zeros((2, 2)), np.zeros(1))
        gradient_block(U, V, i, i, y, 0, 2, 1.0, np.zeros((2, 2)), np.zeros((2, 2)))
        gradient_blocks(
            U,
            V,
            i,
            i,
            y,
            ptr,
            np.zeros(1, dtype=np.int64),
            1.0,
            np.zeros((2, 2)),
            np.zeros((2, 2)),
            np.zeros(1),
        )
        sse_chunks(U, V, i, i, y, ptr, np.zeros(1))
        sse_chunks_clipped(U, V, i, i, y, ptr, 0.0, 1.0, np.zeros(1))
        predict_into(U, V, i, i, np.zeros(2))
    regularize(np.zeros((2, 2)), U, np.ones(2), -1)
    A = np.ones((2, 3))
    chunked_matvec(A, np.ones(3), 8192, np.zeros((1, 2)))
    lbfgs_apply(np.ones(3), np.ones(3), A, np.ones(2), 1.0, 1.0)
    pair_products(np.ones((2, 3)), np.ones(3), np.ones(3), 8192, np.zeros((1, 6)))
    _WARM = True


def balanced_cuts(counts: np.ndarray, p: int) -> np.ndarray:
    """``p`` contiguous intervals of indices with about equal total ``counts`` (``p + 1`` boundaries)."""
    cum = np.cumsum(counts)
    total = float(cum[-1]) if cum.size else 0.0
    targets = total * np.arange(1, p) / p
    inner = np.searchsorted(cum, targets, side="left") + 1
    return np.concatenate(([0], np.minimum(inner, counts.shape[0]), [counts.shape[0]])).astype(np.int64)


@njit(**_OPTS)
def _block_keys(rows, cols, row_block, col_block, g, keys):  # pragma: no cover - compiled
    """``keys[e]`` = stratum-major block index of rating ``e``; returns whether the ratings are
    sorted by (row, col) (one pass over possibly memory-mapped input)."""
    ok = True
    pr = -1
    pc = -1
    for e in range(rows.shape[0]):
        a = rows[e]
        b = cols[e]
        rb = row_block[a]
        keys[e] = ((col_block[b] - rb) % g) * g + rb
        if a < pr or (a == pr and b < pc):
            ok = False
        pr = a
        pc = b
    return ok


@njit(**_OPTS)
def gather(src, order, out, shift):  # pragma: no cover - compiled
    """``out[i] = src[order[i]] - shift`` (casts to ``out``'s dtype; reads memory-mapped input once)."""
    for i in range(order.shape[0]):
        out[i] = src[order[i]] - shift


def stratify(
    rows: np.ndarray, cols: np.ndarray, row_cuts: np.ndarray, col_cuts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Order and block pointers of a ``G x G`` stratified layout (for :func:`strata_gradient`).

    Block ``r`` of stratum ``s`` holds the ratings with row in interval ``r`` and column in interval
    ``(r + s) mod G``, sorted by (row, col).  Returns ``(order, ptr)``.

    The block keys take one compiled pass; ratings already sorted by (row, col) (files, generators)
    are then ordered by a linear-time stable radix sort of the small block keys, others by one sort
    of a combined key (the same order as a lexicographic sort by (block, row, col)).
    """
    g = row_cuts.shape[0] - 1
    n = rows.shape[0]
    row_block = np.repeat(np.arange(g, dtype=np.int64), np.diff(row_cuts))
    col_block = np.repeat(np.arange(g, dtype=np.int64), np.diff(col_cuts))
    small = g * g <= np.iinfo(np.int16).max
    keys = np.empty(n, dtype=np.int16 if small else np.int64)
    if n:
        is_sorted = bool(_block_keys(rows, cols, row_block, col_block, g, keys))
    else:
        is_sorted = True
    n_rows, n_cols = int(row_cuts[-1]), int(col_cuts[-1])
    if is_sorted:
        order = np.argsort(keys, kind="stable").astype(np.int64)  # radix sort for 16-bit keys
    elif float(g) * g * max(n_rows, 1) * max(n_cols, 1) < 2.0**62:
        combined = keys.astype(np.int64) * (n_rows * n_cols)
        combined += np.asarray(rows, dtype=np.int64) * n_cols
        combined += np.asarray(cols, dtype=np.int64)
        order = np.argsort(combined, kind="stable").astype(np.int64)
        del combined
    else:  # pragma: no cover - astronomically large matrices
        order = np.lexsort((cols, rows, keys)).astype(np.int64)
    ptr = np.concatenate(([0], np.cumsum(np.bincount(keys, minlength=g * g)))).astype(np.int64)
    return order, ptr


def index_dtype(shape: tuple[int, int]) -> type[np.signedinteger[Any]]:
    """``int32`` indices when both dimensions fit (half the memory traffic), else ``int64``."""
    return np.int32 if max(shape) < 2**31 - 1 else np.int64


def layout(
    rows: np.ndarray,
    cols: np.ndarray,
    values: np.ndarray,
    order: np.ndarray,
    shape: tuple[int, int],
    shift: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``rows[order]``, ``cols[order]`` (compact index dtype) and ``values[order] - shift`` (float64)."""
    it = index_dtype(shape)
    r = np.empty(order.shape[0], dtype=it)
    c = np.empty(order.shape[0], dtype=it)
    v = np.empty(order.shape[0], dtype=np.float64)
    if order.shape[0]:
        gather(rows, order, r, 0)
        gather(cols, order, c, 0)
        gather(values, order, v, float(shift))
    return r, c, v


def chunk_ptr(keys: np.ndarray, n_chunks: int) -> np.ndarray:
    """Boundaries of about ``n_chunks`` contiguous chunks of sorted ``keys`` that never split a key."""
    n = int(keys.shape[0])
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    cuts = np.linspace(0, n, max(1, n_chunks) + 1).round().astype(np.int64)[1:-1]
    # move each cut to the start of the run of equal keys it falls into
    starts = np.searchsorted(keys, keys[np.clip(cuts, 0, n - 1)], side="left")
    ptr = np.unique(np.concatenate(([0], starts, [n]))).astype(np.int64)
    return ptr


class BlockRunner:
    """Runs :func:`strata_gradient`'s work on a pool of Python threads (the default backend).

    Strata run one after the other.  The blocks of a stratum are split into ``n_threads`` shares of
    similar work (largest first, each to the least loaded share); the calling thread runs the first
    share and pool threads the others, each in one GIL-free :func:`gradient_blocks` call, so a
    stratum costs ``n_threads - 1`` handoffs.  (One task per block made the handoffs dominate on
    small strata: 2 threads gained 1.0-1.1x on MovieLens 100K's ~6,000-rating blocks, against
    about 1.5x now and 1.9x for ``backend="numba"`` on a quiet machine.)  The pool threads are
    ordinary OS threads, which a busy machine deschedules more gracefully than numba's OpenMP
    team.  Results are bit-for-bit those of :func:`strata_gradient_serial`: the blocks of a stratum
    touch disjoint rows and columns.  ``backend="numba"`` uses :func:`strata_gradient` instead.
    """

    def __init__(self, n_threads: int, backend: str = "threads") -> None:
        self.n_threads = max(1, int(n_threads))
        self.backend = backend
        self._pool: ThreadPoolExecutor | None = None
        if self.n_threads > 1 and backend == "threads":
            # the calling thread runs one share of every stratum itself
            self._pool = ThreadPoolExecutor(self.n_threads - 1, thread_name_prefix="dpopt-mf")

    def __call__(self, U, V, rows, cols, vals, ptr, n_strata, coef, gU, gV, sse, parallel=True) -> None:
        if not parallel or self.n_threads == 1:
            strata_gradient_serial(U, V, rows, cols, vals, ptr, n_strata, coef, gU, gV, sse)
            return
        if self._pool is None:
            strata_gradient(U, V, rows, cols, vals, ptr, n_strata, coef, gU, gV, sse)
            return
        n_blocks = (ptr.shape[0] - 1) // n_strata
        sizes = np.diff(ptr)
        for st in range(n_strata):
            # one task per thread (largest blocks first, each to the least loaded thread); the
            # calling thread runs the first share itself, so a stratum costs n_threads - 1 handoffs
            groups = _share_blocks(sizes, st * n_blocks, n_blocks, self.n_threads)
            futures = [
                self._pool.submit(gradient_blocks, U, V, rows, cols, vals, ptr, g, coef, gU, gV, sse)
                for g in groups[1:]
            ]
            gradient_blocks(U, V, rows, cols, vals, ptr, groups[0], coef, gU, gV, sse)
            for fut in futures:
                fut.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> BlockRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _share_blocks(sizes: np.ndarray, base: int, n_blocks: int, n_threads: int) -> list[np.ndarray]:
    """Block indices ``base .. base + n_blocks - 1`` split into at most ``n_threads`` groups of similar work."""
    order = base + np.argsort(-sizes[base : base + n_blocks], kind="stable")
    k = max(1, min(n_threads, n_blocks))
    load = np.zeros(k)
    groups: list[list[int]] = [[] for _ in range(k)]
    for blk in order.tolist():
        j = int(np.argmin(load))
        groups[j].append(blk)
        load[j] += sizes[blk]
    return [np.asarray(g, dtype=np.int64) for g in groups if g]


class thread_count:
    """Context manager that sets numba's thread count and restores it afterwards."""

    def __init__(self, n_threads: int) -> None:
        max_threads = int(getattr(numba.config, "NUMBA_NUM_THREADS", 1))
        self.n = max(1, min(int(n_threads), max_threads))
        self.prev = 1

    def __enter__(self) -> int:
        self.prev = numba.get_num_threads()
        numba.set_num_threads(self.n)
        return self.n

    def __exit__(self, *exc: object) -> None:
        numba.set_num_threads(self.prev)
