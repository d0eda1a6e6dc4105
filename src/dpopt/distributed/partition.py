"""Covers of partially separable problems: HOGWILD, COLOR, COLOR-B, STRATA, STRATA-B.

A *cover* splits the functions (here: the ratings of a matrix-factorization problem) into disjoint
subsets ``S_1 .. S_K`` and each subset into blocks ``S_{k,b}``.  HAMSI visits the subsets one by one
and processes the blocks of a subset in parallel; the gradient of a subset is race-free when its
blocks touch pairwise disjoint variables (rows of ``U`` and of ``V``).

=========  =====================================================  =======================================
scheme     subsets                                                guarantee
=========  =====================================================  =======================================
HOGWILD    random permutation cut into K near-equal subsets       none (blocks may share variables)
COLOR      first-fit colouring (two ratings sharing a row or      every colour class is variable-disjoint
           column get different colours), colours packed into K
           bins in index order
COLOR-B    as COLOR, but each rating takes a uniformly random     every colour class is variable-disjoint;
           already-used admissible colour (balanced colours)      colour sizes balanced
STRATA     P equal-length row and column intervals; stratum s     blocks of a stratum are row- and
           has blocks ``R_r x C_{(r+s) mod P}``; K = P            column-disjoint
STRATA-B   as STRATA with intervals balanced by rating counts     same; blocks nearly balanced
=========  =====================================================  =======================================

Every builder returns a frozen :class:`Partition`, which reports its balance
(:meth:`Partition.balance`) and checks its promises (:meth:`Partition.validate`).  Builders that
draw random numbers take the keyword ``rng``.  For general partially separable problems,
:func:`validate_cover` checks a cover given the variable sets ``α_i`` of the functions.

Notes
-----
* Within a COLOR bin two *different* colours may share variables (spec §2.9); dpopt computes such
  subset gradients exactly with a two-pass race-free kernel rather than emulating the lock-free races
  of the original C++ HOGWILD/COLOR code (whose "incorrect calculations of some gradient entries"
  are implementation specific).
* COLOR bin packing: colours in index order go to the first bin whose load is below ``|I|/K``; when
  none qualifies, to the least-loaded bin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numba import njit
from numpy.typing import NDArray

from dpopt._validation import check_int
from dpopt.exceptions import InvalidParameterError
from dpopt.progress import announce_compilation
from dpopt.randomness import RNGLike, as_generator

__all__ = [
    "SCHEMES",
    "Partition",
    "color",
    "color_b",
    "hogwild",
    "make_partition",
    "strata",
    "strata_b",
    "validate_cover",
]

#: Names of the partitioning schemes (``scheme=``).
SCHEMES: tuple[str, ...] = ("hogwild", "color", "color-b", "strata", "strata-b")

IntArray = NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Partition:
    """A cover of the ratings ``0 .. n_functions-1`` by subsets, each split into blocks.

    Attributes
    ----------
    scheme : str
        One of :data:`SCHEMES` (or ``"custom"``).
    n_functions : int
        Number of functions (ratings) covered.
    blocks : tuple of tuple of ndarray of int64
        ``blocks[k][b]`` = indices (into the ratings, sorted) of block ``S_{k,b}``.
    disjoint_blocks : bool
        Whether the blocks of each subset are promised pairwise variable-disjoint (STRATA,
        STRATA-B); then their gradients can be accumulated in parallel without races.
    colors : ndarray of int64 or None
        Colour of every rating (COLOR, COLOR-B): ratings of one colour share no row and no column.
        For these schemes ``blocks[k]`` are the colour classes packed into bin ``k``.
    row_cuts, col_cuts : ndarray of int64 or None
        Interval boundaries (STRATA, STRATA-B): ``R_r = [row_cuts[r], row_cuts[r+1])``.
    """

    scheme: str
    n_functions: int
    blocks: tuple[tuple[IntArray, ...], ...] = field(repr=False)
    disjoint_blocks: bool
    colors: IntArray | None = field(default=None, repr=False)
    row_cuts: IntArray | None = field(default=None, repr=False)
    col_cuts: IntArray | None = field(default=None, repr=False)

    @property
    def n_subsets(self) -> int:
        """``K``, the number of subsets."""
        return len(self.blocks)

    @property
    def subsets(self) -> tuple[IntArray, ...]:
        """``S_k`` as one sorted index array per subset."""
        return tuple(np.sort(np.concatenate(bl)) if bl else np.zeros(0, dtype=np.int64) for bl in self.blocks)

    @property
    def subset_sizes(self) -> IntArray:
        """Number of functions per subset."""
        return np.array([sum(int(b.shape[0]) for b in bl) for bl in self.blocks], dtype=np.int64)

    @property
    def block_sizes(self) -> tuple[IntArray, ...]:
        """Number of functions per block, one array per subset."""
        return tuple(np.array([b.shape[0] for b in bl], dtype=np.int64) for bl in self.blocks)

    @property
    def color_sizes(self) -> IntArray | None:
        """Number of ratings per colour (COLOR variants), else ``None``."""
        return None if self.colors is None else np.bincount(self.colors).astype(np.int64)

    def balance(self) -> dict[str, Any]:
        """Load-balance report (counts only).

        ``subset_imbalance`` = max/mean subset size; ``block_imbalance`` = the worst over subsets of
        max/mean block size (the parallel slow-down of a subset with equal-speed threads);
        ``color_cv`` = coefficient of variation of colour sizes (COLOR variants).
        """
        sizes = self.subset_sizes
        rep: dict[str, Any] = {
            "scheme": self.scheme,
            "n_subsets": self.n_subsets,
            "subset_sizes": sizes.tolist(),
            "subset_imbalance": float(sizes.max() / sizes.mean()) if sizes.size and sizes.mean() else 1.0,
            "block_sizes": [b.tolist() for b in self.block_sizes],
        }
        worst = 1.0
        for b in self.block_sizes:
            if b.size and b.mean() > 0:
                worst = max(worst, float(b.max() / b.mean()))
        rep["block_imbalance"] = worst
        cs = self.color_sizes
        if cs is not None:
            rep["n_colors"] = int(cs.shape[0])
            rep["color_cv"] = float(cs.std() / cs.mean())
        return rep

    def validate(self, rows: Any, cols: Any) -> None:
        """Check the promises against the ratings' ``rows``/``cols``.

        Every function appears in exactly one block; when ``disjoint_blocks`` the blocks of each
        subset share no row and no column; when ``colors`` is set no colour class repeats a row or a
        column.

        Raises
        ------
        InvalidParameterError
            Naming the first violated property (subset and block numbers, never data values).
        """
        r = np.asarray(rows, dtype=np.int64)
        c = np.asarray(cols, dtype=np.int64)
        if r.shape != (self.n_functions,) or c.shape != (self.n_functions,):
            raise InvalidParameterError(
                f"rows, cols: expected {self.n_functions} entries (one per covered function)"
            )
        allidx = [b for bl in self.blocks for b in bl]
        flat = np.concatenate(allidx) if allidx else np.zeros(0, dtype=np.int64)
        counts = np.bincount(flat, minlength=self.n_functions) if flat.size else np.zeros(self.n_functions)
        if flat.size and (flat.min() < 0 or flat.max() >= self.n_functions):
            raise InvalidParameterError("partition: block indices outside 0..n_functions-1")
        if np.any(counts != 1):
            raise InvalidParameterError(
                f"partition: {int(np.count_nonzero(counts == 0))} functions are in no block and "
                f"{int(np.count_nonzero(counts > 1))} in more than one; a cover must use each exactly once"
            )
        if self.disjoint_blocks:
            for k, bl in enumerate(self.blocks):
                for name, var in (("row", r), ("column", c)):
                    owner = _shared_variable(var, bl)
                    if owner is not None:
                        raise InvalidParameterError(
                            f"partition: blocks {owner[0]} and {owner[1]} of subset {k} share a {name}; "
                            "blocks of one subset must be variable-disjoint"
                        )
        if self.colors is not None:
            col_ = np.asarray(self.colors, dtype=np.int64)
            for name, var in (("row", r), ("column", c)):
                pairs = col_ * (int(var.max()) + 1 if var.size else 1) + var
                if np.unique(pairs).shape[0] != pairs.shape[0]:
                    raise InvalidParameterError(
                        f"partition: two ratings of one colour share a {name}; the colouring is invalid"
                    )


def _shared_variable(var: IntArray, blocks: Sequence[IntArray]) -> tuple[int, int] | None:
    """First pair of blocks (by index) that share a value of ``var``, or None."""
    seen: dict[int, int] = {}
    for b, idx in enumerate(blocks):
        for v in np.unique(var[idx]).tolist():
            if v in seen:
                return seen[v], b
            seen[v] = b
    return None


def validate_cover(
    alpha: Sequence[Any], cover: Sequence[Sequence[Any]], *, require_disjoint: bool = True
) -> None:
    """Validate a cover of a general partially separable problem ``Σ_i f_i(x_{α_i})``.

    Parameters
    ----------
    alpha : sequence of int collections
        ``alpha[i]`` = the variables function ``i`` depends on (any labels; compared by value).
    cover : sequence of subsets, each a sequence of blocks, each a collection of function indices
    require_disjoint : bool, default True
        Also require ``α_{k,b} ∩ α_{k,b'} = ∅`` for blocks ``b != b'`` of one subset.

    Raises
    ------
    InvalidParameterError
        If a function is missing or repeated, or (when required) two blocks of one subset share a
        variable.
    """
    n = len(alpha)
    seen = np.zeros(n, dtype=np.int64)
    for k, subset in enumerate(cover):
        owner: dict[Any, int] = {}
        for b, block in enumerate(subset):
            vars_b: set[Any] = set()
            for i in block:
                ii = int(i)
                if not 0 <= ii < n:
                    raise InvalidParameterError(
                        f"cover: subset {k} block {b} names a function outside 0..{n - 1}"
                    )
                seen[ii] += 1
                vars_b.update(alpha[ii])
            if require_disjoint:
                for v in vars_b:
                    if v in owner and owner[v] != b:
                        raise InvalidParameterError(
                            f"cover: blocks {owner[v]} and {b} of subset {k} share a variable; blocks of "
                            "one subset must be variable-disjoint"
                        )
                    owner[v] = b
    if np.any(seen != 1):
        raise InvalidParameterError(
            f"cover: {int(np.count_nonzero(seen == 0))} functions are in no block and "
            f"{int(np.count_nonzero(seen > 1))} in more than one; a cover must use each exactly once"
        )


# ---------------------------------------------------------------------------------------- helpers
def _coords(ratings: Any) -> tuple[IntArray, IntArray, tuple[int, int]]:
    try:
        rows = np.asarray(ratings.rows, dtype=np.int64)
        cols = np.asarray(ratings.cols, dtype=np.int64)
        shape = (int(ratings.shape[0]), int(ratings.shape[1]))
    except AttributeError:
        raise InvalidParameterError(
            "ratings: expected a dpopt.datasets.Ratings (or an object with rows, cols and shape)"
        ) from None
    if rows.shape != cols.shape or rows.ndim != 1:
        raise InvalidParameterError("ratings: rows and cols must be 1-d arrays of the same length")
    if rows.size == 0:
        raise InvalidParameterError("ratings: contains no ratings")
    if rows.min() < 0 or cols.min() < 0 or rows.max() >= shape[0] or cols.max() >= shape[1]:
        raise InvalidParameterError("ratings: rows/cols must be zero-based indices inside shape")
    return rows, cols, shape


def _sorted_block(idx: IntArray, rows: IntArray, cols: IntArray) -> IntArray:
    """Indices sorted by (row, col) for cache-friendly, deterministic kernels."""
    idx = np.asarray(idx, dtype=np.int64)
    order = np.lexsort((cols[idx], rows[idx]))
    return idx[order]


def _check_k(value: int, name: str, n: int) -> int:
    k = check_int(value, name)
    if k > n:
        raise InvalidParameterError(f"{name}: must be at most the number of ratings ({n})")
    return k


# ---------------------------------------------------------------------------------------- HOGWILD
def hogwild(ratings: Any, n_subsets: int = 20, *, rng: RNGLike) -> Partition:
    """Random permutation of the ratings cut into ``n_subsets`` near-equal subsets (fixed for the run).

    Each subset is one block of possibly conflicting ratings (``disjoint_blocks=False``).
    """
    rows, cols, _ = _coords(ratings)
    n = rows.shape[0]
    k = _check_k(n_subsets, "n_subsets", n)
    perm = as_generator(rng).permutation(n).astype(np.int64)
    parts = np.array_split(perm, k)
    blocks = tuple((_sorted_block(p, rows, cols),) for p in parts)
    return Partition("hogwild", n, blocks, disjoint_blocks=False)


# ---------------------------------------------------------------------------------------- COLOR
@njit(cache=True, nogil=True)
def _popcount(x: np.uint64) -> int:  # pragma: no cover - compiled
    n = 0
    while x:
        x &= x - np.uint64(1)
        n += 1
    return n


@njit(cache=True, nogil=True)
def _lowest_bit(x: np.uint64) -> int:  # pragma: no cover - compiled
    i = 0
    while not (x & np.uint64(1)):
        x >>= np.uint64(1)
        i += 1
    return i


@njit(cache=True, nogil=True)
def _color_kernel(rows, cols, n_rows, n_cols, n_words, u, balanced):  # pragma: no cover - compiled
    """First-fit (``balanced=False``) or random-available (``balanced=True``) distance-2 colouring.

    Colour sets per row and column are bitmaps of ``n_words`` 64-bit words.
    """
    n = rows.shape[0]
    rbits = np.zeros((n_rows, n_words), dtype=np.uint64)
    cbits = np.zeros((n_cols, n_words), dtype=np.uint64)
    color = np.empty(n, dtype=np.int64)
    n_colors = 0
    one = np.uint64(1)
    allones = ~np.uint64(0)
    for i in range(n):
        a = rows[i]
        b = cols[i]
        chosen = -1
        if balanced and n_colors > 0:
            # admissible = already used colours not forbidden at a or b
            full_words = n_colors // 64
            rem = n_colors % 64
            count = 0
            for w in range(full_words + (1 if rem else 0)):
                mask = allones if w < full_words else (one << np.uint64(rem)) - one
                count += _popcount(~(rbits[a, w] | cbits[b, w]) & mask)
            if count > 0:
                target = int(u[i] * count)
                if target >= count:
                    target = count - 1
                for w in range(full_words + (1 if rem else 0)):
                    mask = allones if w < full_words else (one << np.uint64(rem)) - one
                    free = ~(rbits[a, w] | cbits[b, w]) & mask
                    pc = _popcount(free)
                    if target < pc:
                        for _ in range(target):
                            free &= free - one
                        chosen = w * 64 + _lowest_bit(free)
                        break
                    target -= pc
            else:
                chosen = n_colors
        else:
            for w in range(n_words):
                free = ~(rbits[a, w] | cbits[b, w])
                if free:
                    chosen = w * 64 + _lowest_bit(free)
                    break
        if chosen >= n_colors:
            n_colors = chosen + 1
        color[i] = chosen
        w = chosen // 64
        bit = one << np.uint64(chosen % 64)
        rbits[a, w] |= bit
        cbits[b, w] |= bit
    return color, n_colors


def _pack_colors(color_sizes: IntArray, n_subsets: int, n: int) -> IntArray:
    """Bin of every colour: first bin with load < n/K in colour order, else the least loaded."""
    cap = n / n_subsets
    load = np.zeros(n_subsets, dtype=np.int64)
    bins = np.empty(color_sizes.shape[0], dtype=np.int64)
    for c, size in enumerate(color_sizes.tolist()):
        open_bins = np.flatnonzero(load < cap)
        k = int(open_bins[0]) if open_bins.size else int(np.argmin(load))
        bins[c] = k
        load[k] += size
    return bins


def _coloring_partition(scheme: str, ratings: Any, n_subsets: int, balanced: bool, rng: RNGLike) -> Partition:
    rows, cols, shape = _coords(ratings)
    n = rows.shape[0]
    k = _check_k(n_subsets, "n_subsets", n)
    max_deg = int(np.bincount(rows).max()) + int(np.bincount(cols).max())
    n_words = max_deg // 64 + 1
    u = as_generator(rng).random(n) if balanced else np.zeros(n)
    announce_compilation(_color_kernel, seconds=5)
    colors, n_colors = _color_kernel(rows, cols, shape[0], shape[1], n_words, u, balanced)
    sizes = np.bincount(colors, minlength=n_colors).astype(np.int64)
    bins = _pack_colors(sizes, k, n)
    order = np.argsort(colors, kind="stable")
    starts = np.concatenate(([0], np.cumsum(sizes)))
    classes = [order[starts[c] : starts[c + 1]] for c in range(n_colors)]
    blocks = tuple(
        tuple(_sorted_block(classes[c], rows, cols) for c in np.flatnonzero(bins == b)) for b in range(k)
    )
    return Partition(scheme, n, blocks, disjoint_blocks=False, colors=colors.astype(np.int64))


def color(ratings: Any, n_subsets: int = 20) -> Partition:
    """COLOR: first-fit colouring in input order, colours packed into ``n_subsets`` bins.

    Deterministic (no ``rng``).  ``blocks[k]`` are the colour classes of bin ``k``.
    """
    return _coloring_partition("color", ratings, n_subsets, False, 0)


def color_b(ratings: Any, n_subsets: int = 20, *, rng: RNGLike) -> Partition:
    """COLOR-B: each rating takes a uniformly random admissible already-used colour (new only if none).

    Gives balanced colour classes (thesis Fig. 3.3); packing as in :func:`color`.
    """
    return _coloring_partition("color-b", ratings, n_subsets, True, rng)


# ---------------------------------------------------------------------------------------- STRATA
def _equal_cuts(n: int, p: int) -> IntArray:
    return np.linspace(0, n, p + 1).round().astype(np.int64)


def _balanced_cuts(counts: IntArray, p: int, rounding: str) -> IntArray:
    """Sweep indices in order; close an interval at about ``total/p`` ratings; last takes the rest."""
    total = int(counts.sum())
    target = total / p
    cuts = [0]
    load = 0
    for i, c in enumerate(counts.tolist()):
        if len(cuts) == p:
            break
        if rounding == "thesis":
            # close *before* i if adding it would exceed the target (interval non-empty)
            if load > 0 and load + c > target:
                cuts.append(i)
                load = c
            else:
                load += c
        else:  # "nearest" (reference code): close at the index whose cumulative load is nearest
            prev = load
            load += c
            if load >= target:
                if prev > 0 and load - target > target - prev:
                    cuts.append(i)
                    load = c
                else:
                    cuts.append(i + 1)
                    load = 0
    while len(cuts) < p:
        cuts.append(counts.shape[0])
    cuts.append(counts.shape[0])
    return np.asarray(cuts, dtype=np.int64)


def _strata_partition(
    scheme: str, rows: IntArray, cols: IntArray, row_cuts: IntArray, col_cuts: IntArray
) -> Partition:
    p = row_cuts.shape[0] - 1
    rb = np.searchsorted(row_cuts, rows, side="right") - 1
    cb = np.searchsorted(col_cuts, cols, side="right") - 1
    stratum = (cb - rb) % p  # block r of stratum s is R_r x C_{(r+s) mod p}
    key = stratum * p + rb
    order = np.lexsort((cols, rows, key))
    counts = np.bincount(key, minlength=p * p)
    starts = np.concatenate(([0], np.cumsum(counts)))
    blocks = tuple(
        tuple(order[starts[s * p + r] : starts[s * p + r + 1]].astype(np.int64) for r in range(p))
        for s in range(p)
    )
    return Partition(
        scheme, rows.shape[0], blocks, disjoint_blocks=True, row_cuts=row_cuts, col_cuts=col_cuts
    )


def strata(ratings: Any, n_threads: int) -> Partition:
    """STRATA: ``P = n_threads`` equal-length row and column intervals; ``K = P`` strata of ``P`` blocks."""
    rows, cols, shape = _coords(ratings)
    p = check_int(n_threads, "n_threads")
    return _strata_partition("strata", rows, cols, _equal_cuts(shape[0], p), _equal_cuts(shape[1], p))


def strata_b(ratings: Any, n_threads: int, *, rounding: Literal["thesis", "nearest"] = "thesis") -> Partition:
    """STRATA-B: intervals balanced by marginal rating counts (per dimension).

    ``rounding="thesis"`` closes an interval before it would exceed ``|Ω|/P`` ratings;
    ``"nearest"`` (the reference C++ code) closes it at the index whose cumulative load is nearest.
    """
    rows, cols, shape = _coords(ratings)
    p = check_int(n_threads, "n_threads")
    if rounding not in ("thesis", "nearest"):
        raise InvalidParameterError("rounding: must be 'thesis' or 'nearest'")
    rc = _balanced_cuts(np.bincount(rows, minlength=shape[0]), p, rounding)
    cc = _balanced_cuts(np.bincount(cols, minlength=shape[1]), p, rounding)
    return _strata_partition("strata-b", rows, cols, rc, cc)


def make_partition(
    ratings: Any,
    scheme: str,
    *,
    n_subsets: int = 20,
    n_threads: int = 1,
    rng: RNGLike = None,
) -> Partition:
    """Build a partition by name (one of :data:`SCHEMES`).

    ``n_subsets`` is ``K`` for HOGWILD/COLOR/COLOR-B (thesis: 20); for STRATA and STRATA-B
    ``K = P = n_threads``.  ``rng`` is used by HOGWILD and COLOR-B only.
    """
    s = str(scheme).lower().replace("_", "-")
    if s == "hogwild":
        return hogwild(ratings, n_subsets, rng=rng)
    if s == "color":
        return color(ratings, n_subsets)
    if s == "color-b":
        return color_b(ratings, n_subsets, rng=rng)
    if s == "strata":
        return strata(ratings, n_threads)
    if s == "strata-b":
        return strata_b(ratings, n_threads)
    raise InvalidParameterError(f"scheme: {scheme!r} is not one of {', '.join(SCHEMES)}")
