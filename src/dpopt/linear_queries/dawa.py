"""DAWA: the data- and workload-aware algorithm of Li, Hay, Miklau and Wang (2014), pure ε-DP.

Two stages, sequentially composed:

1. **Partition** (budget ``ρε``): release a Laplace-noised histogram ``x̃ = x + Lap(Δ/ρε)`` and
   choose, by dynamic programming over intervals, the partition of the (1-d) domain into buckets
   that minimizes ``Σ_B [dev(B) + Δ/ε₂]``, where ``dev(B)`` is the L1 deviation of ``x̃`` from its
   bucket mean, corrected for the deviation the noise alone contributes, and ``Δ/ε₂`` is the
   expected absolute noise of one measured bucket total.  This is the "simpler sound variant" of
   the paper's stage 1: the original adds Laplace noise to the interval costs themselves; here
   every cost is post-processing of one noisy histogram.  As in the paper, candidate buckets are
   the intervals whose length is a power of two (any start), so costs take ``O(n²)`` time in the
   worst case rather than ``O(n³)``.
2. **Measurement** (budget ``(1 - ρ)ε``): the bucket totals ``y`` are measured through a
   ``branching``-ary hierarchy of intervals over the ``k`` buckets, one Laplace-noised weighted
   total per node, with per-node weights chosen by the paper's GreedyH (below).  The weights
   depend only on the public workload and the already released partition, so choosing them costs
   no privacy.  The bucket totals are reconstructed by least squares and spread uniformly over the
   cells of each bucket; the workload is answered on that histogram estimate.

GreedyH (stage 2)
-----------------
The workload is first mapped to the bucket domain: a query's coefficient on a bucket is the
fraction of the bucket's cells it covers (``W_r = W E``, ``E`` spreading a bucket uniformly), and
only ``V_r = W_rᵀ W_r`` (``k x k``) is needed.  The weights are then chosen bottom-up, one node at a
time.  Every subtree carries a *local* strategy in which the weights along each root-to-leaf path
sum to one; at an internal node the children's strategies are kept, scaled by ``1 - s``, and the
node's own total is measured with weight ``s``.  The share ``s`` minimizes the expected error
``tr(V_S (A_SᵀA_S)⁺)`` of the workload restricted to the node's buckets (unit noise), which after
a Sherman-Morrison update needs just one quadratic form per node (see :func:`_greedy_h`), so the
whole search is ``O(k²)`` arithmetic (a few tens of milliseconds at ``k = 2048``).  The global
weight of a node is its share times ``1 - s`` of every ancestor.  Choices where the paper leaves
room (ours):

* the search for ``s`` is a grid of 100 shares on ``[0, 0.999]`` (the paper searches a grid of
  the same granularity) refined by golden-section search around the best grid point; ``s = 0``
  (the node is not measured) is allowed, ``s = 1`` is not (the children would be unidentified);
* the local error is the exact ``tr(V_S M_S⁺)`` of the workload restricted to the node's buckets,
  without any heuristic down-weighting of cross terms between children;
* the root is an ordinary node (its total is not assumed known);
* a node whose buckets the workload cannot tell apart (identical columns of ``W_r``: no query
  boundary falls strictly inside it) is measured by its total alone with full weight and its
  subtree is dropped; least squares then spreads the total evenly (minimum-norm solution), which
  leaves every workload answer unbiased;
* the tree splits each interval into ``branching`` near-equal parts (``numpy.linspace`` rounded);
* safeguard: GreedyH's local objective ignores how ancestors' totals help queries that span a
  node, and on some workloads (e.g. 1024 random ranges over 2048 cells) it is ~10-15% worse than
  the plain uniform hierarchy; the exact expected error of both weightings (at equal sensitivity)
  is computed and the better one is used.  Both depend only on public inputs.

Because each path's weights telescope to one, every column of the weighted strategy has l1 norm
one; the Laplace scale is nevertheless calibrated to the exactly computed (correctly rounded, then
rounded up) largest column l1 norm, so it stays sound for any weights.  GreedyH forms the ``n x n``
Gram matrix of the workload, so above ``n = 4096`` cells (``_GREEDY_MAX_DOMAIN``) the stage-2
weights fall back to the uniform hierarchy (every node weight one, same exact sensitivity).  There
is no cap on the number of buckets.  Weights are cached per (workload fingerprint, partition,
branching) in a small LRU cache (16 entries).  Least squares uses the same recursion (``O(k log
k)``), never a dense ``(nodes x k)`` matrix.

Only 1-d histograms (one count per cell of an ordered domain) are supported.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import ArrayLike, NDArray

from dpopt._validation import check_array, check_int, check_positive
from dpopt.accounting import (
    Accountant,
    Budget,
    ComposedEvent,
    PrivacySpent,
    make_accountant,
)
from dpopt.exceptions import BudgetExceededError, InvalidParameterError
from dpopt.linear_queries.workloads import Workload
from dpopt.mechanisms import LaplaceMechanism
from dpopt.randomness import RNGLike, check_rng

__all__ = ["DawaResult", "dawa"]

FloatArray = NDArray[np.float64]

# GreedyH needs the n x n workload Gram matrix: above this domain size, uniform node weights
_GREEDY_MAX_DOMAIN = 4096
_SHARE_MAX = 0.999  # largest share of a path's weight a node may take (its children keep > 0)
_SHARE_GRID = 100  # grid points for a node's share in [0, _SHARE_MAX] (the paper's granularity)
_GOLDEN_STEPS = 30  # golden-section refinement around the best grid point
_SAME_COLUMN_RTOL = 1e-13  # adjacent buckets with ‖w_j - w_j+1‖² below this (relative) are merged
_WEIGHT_CACHE_SIZE = 16
_WEIGHT_CACHE: OrderedDict[tuple[str, bytes, int, bytes], FloatArray] = OrderedDict()


@dataclass(frozen=True)
class DawaResult:
    """Output of :func:`dawa`.

    Attributes
    ----------
    answers : ndarray of shape (m,)
        Private answers ``W x̂`` to the workload.
    estimate : ndarray of shape (n,)
        The private histogram estimate ``x̂`` (bucket estimates spread uniformly over their cells).
    partition : ndarray of int, shape (k + 1,)
        Bucket boundaries ``0 = c_0 < c_1 < ... < c_k = n``; bucket ``j`` is cells ``[c_j, c_{j+1})``.
    privacy : PrivacySpent
        What the accountant recorded after both stages.
    node_weights : ndarray of shape (n_nodes,)
        GreedyH weight of every node of the stage-2 hierarchy (breadth-first order, root first; zero
        for nodes not measured), scaled so that the weighted hierarchy has l1 sensitivity one per
        unit of bucket-total change (its largest column l1 norm is 1).
    node_intervals : ndarray of int, shape (n_nodes, 2)
        Node ``i`` covers buckets ``node_intervals[i, 0] <= j < node_intervals[i, 1]`` (bucket
        indices, see ``partition``).

    Privacy
    -------
    ``answers``, ``estimate``, ``partition``, ``node_weights`` and ``node_intervals`` are
    post-processing of the two Laplace releases whose guarantee is in ``privacy``.
    """

    answers: FloatArray
    estimate: FloatArray
    partition: NDArray[np.intp]
    privacy: PrivacySpent
    node_weights: FloatArray
    node_intervals: NDArray[np.intp]


# --------------------------------------------------------------------------------------- stage 1
def _interval_costs(noisy: FloatArray, noise_scale: float) -> list[tuple[int, FloatArray]]:
    """For every power-of-two length L: corrected L1 deviation of each window ``noisy[s:s+L]``."""
    n = noisy.shape[0]
    out: list[tuple[int, FloatArray]] = []
    L = 1
    while L <= n:
        if L == 1:
            cost = np.zeros(n)
        else:
            win = sliding_window_view(noisy, L)
            dev = np.abs(win - win.mean(axis=1, keepdims=True)).sum(axis=1)
            # Laplace noise alone contributes about (L - 1)·b of deviation: remove it (clip at 0)
            cost = np.maximum(dev - (L - 1) * noise_scale, 0.0)
        out.append((L, cost))
        L *= 2
    return out


def _best_partition(noisy: FloatArray, noise_scale: float, bucket_penalty: float) -> NDArray[np.intp]:
    """Dynamic program: boundaries minimizing Σ (cost(B) + bucket_penalty) over power-of-two buckets."""
    n = noisy.shape[0]
    costs = _interval_costs(noisy, noise_scale)
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    back = np.zeros(n + 1, dtype=np.intp)
    for j in range(1, n + 1):
        for L, cost in costs:
            if L > j:
                break
            cand = best[j - L] + cost[j - L] + bucket_penalty
            if cand < best[j]:
                best[j] = cand
                back[j] = j - L
    cuts = [n]
    while cuts[-1] > 0:
        cuts.append(int(back[cuts[-1]]))
    return np.asarray(cuts[::-1], dtype=np.intp)


# --------------------------------------------------------------------------------------- stage 2
@dataclass(frozen=True)
class _Hierarchy:
    """A ``branching``-ary tree of intervals over ``k`` buckets, nodes in breadth-first order.

    Node ``i`` covers buckets ``[lo[i], hi[i])``; the nodes of one depth are disjoint and sorted,
    and the children of a node are consecutive.  ``parent[0] == -1`` (the root covers everything).
    """

    k: int
    lo: NDArray[np.intp]
    hi: NDArray[np.intp]
    depth: NDArray[np.intp]
    parent: NDArray[np.intp]

    @property
    def n_nodes(self) -> int:
        """Number of nodes."""
        return int(self.lo.shape[0])

    @property
    def size(self) -> NDArray[np.intp]:
        """Number of buckets under each node."""
        return np.asarray(self.hi - self.lo, dtype=np.intp)

    def matrix(self, weights: FloatArray | None = None) -> FloatArray:
        """Dense ``(n_nodes, k)`` strategy: row i is ``weights[i]`` times the indicator of node i."""
        H = np.zeros((self.n_nodes, self.k))
        w = np.ones(self.n_nodes) if weights is None else weights
        for i, (a, c) in enumerate(zip(self.lo.tolist(), self.hi.tolist(), strict=True)):
            H[i, a:c] = w[i]
        return H


def _tree(k: int, branching: int) -> _Hierarchy:
    """The ``branching``-ary hierarchy of intervals over k buckets (near-equal splits)."""
    lo: list[int] = []
    hi: list[int] = []
    depth: list[int] = []
    parent: list[int] = []
    frontier = [(0, k, -1)]
    d = 0
    while frontier:
        nxt: list[tuple[int, int, int]] = []
        for a, c, par in frontier:
            me = len(lo)
            lo.append(a)
            hi.append(c)
            depth.append(d)
            parent.append(par)
            if c - a > 1:
                cuts = np.linspace(a, c, min(branching, c - a) + 1).round().astype(int)
                nxt.extend((int(s), int(t), me) for s, t in itertools.pairwise(cuts) if t > s)
        frontier = nxt
        d += 1
    return _Hierarchy(k, _intp(lo), _intp(hi), _intp(depth), _intp(parent))


def _intp(values: list[int]) -> NDArray[np.intp]:
    return np.asarray(values, dtype=np.intp)


def _cells(lo: NDArray[np.intp], hi: NDArray[np.intp]) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Concatenated bucket indices of disjoint sorted intervals, and each interval's offset in them."""
    sizes = hi - lo
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
    idx = np.arange(int(sizes.sum()), dtype=np.intp) + np.repeat(lo - offsets, sizes)
    return idx, offsets


def _column_l1(tree: _Hierarchy, weights: FloatArray) -> FloatArray:
    """l1 norm of every column (bucket) of the weighted hierarchy, each an exactly rounded sum."""
    per_depth = np.zeros((int(tree.depth.max()) + 1, tree.k))
    for d in range(per_depth.shape[0]):
        nodes = np.flatnonzero(tree.depth == d)
        idx, _ = _cells(tree.lo[nodes], tree.hi[nodes])
        per_depth[d, idx] = np.repeat(np.abs(weights[nodes]), tree.size[nodes])
    # one node per depth contains a bucket: the column norm is the sum of its path's weights
    return np.array([math.fsum(col) for col in per_depth.T.tolist()])


def _sensitivity(tree: _Hierarchy, weights: FloatArray) -> float:
    """Max column l1 norm of the weighted hierarchy, rounded up: ``A y`` changes by at most this."""
    return float(np.nextafter(_column_l1(tree, weights).max(), np.inf))


def _reduced_gram(workload: Workload, partition: NDArray[np.intp]) -> FloatArray | None:
    """``V_r = Eᵀ (WᵀW) E`` on the bucket domain (E spreads a bucket uniformly); None above the cap.

    Block sums of an integer Gram matrix (every range workload) are exact, so buckets the workload
    cannot tell apart get bitwise-identical columns.
    """
    if workload.domain_size > _GREEDY_MAX_DOMAIN:
        return None
    V = workload.gram()
    if partition.shape[0] == V.shape[0] + 1:  # every bucket a single cell
        return V
    starts = partition[:-1]
    sizes = np.diff(partition).astype(np.float64)
    block = np.add.reduceat(np.add.reduceat(V, starts, axis=0), starts, axis=1)
    return np.asarray(block / np.outer(sizes, sizes))


def _share_error(s: FloatArray, S: FloatArray, kappa: FloatArray, q: FloatArray) -> FloatArray:
    """Subtree error when the node takes share ``s`` and its children's strategy ``1 - s``."""
    p2 = (1.0 - s) ** 2
    return np.asarray((S - q * s**2 / (p2 + s**2 * kappa)) / p2)


def _best_share(S: FloatArray, kappa: FloatArray, q: FloatArray) -> FloatArray:
    """Per node, the share in ``[0, _SHARE_MAX]`` minimizing :func:`_share_error` (grid + golden)."""
    grid = np.linspace(0.0, _SHARE_MAX, _SHARE_GRID)
    vals = _share_error(grid[None, :], S[:, None], kappa[:, None], q[:, None])
    i = np.argmin(vals, axis=1)
    best_s, best_v = grid[i], vals[np.arange(i.shape[0]), i]
    a = grid[np.maximum(i - 1, 0)]
    b = grid[np.minimum(i + 1, _SHARE_GRID - 1)]
    g = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = _share_error(c, S, kappa, q), _share_error(d, S, kappa, q)
    for _ in range(_GOLDEN_STEPS):
        left = fc < fd  # minimum in [a, d]
        b = np.where(left, d, b)
        a = np.where(left, a, c)
        c_new, d_new = b - g * (b - a), a + g * (b - a)
        fc_new = _share_error(np.where(left, c_new, d), S, kappa, q)
        fd_new = _share_error(np.where(left, c, d_new), S, kappa, q)
        c, d = np.where(left, c_new, d), np.where(left, c, d_new)
        fc, fd = fc_new, fd_new
    refined = np.where(fc < fd, c, d)
    f_ref = np.minimum(fc, fd)
    better = f_ref < best_v
    return np.asarray(np.where(better, refined, best_s))


def _indistinguishable(Vr: FloatArray, tree: _Hierarchy) -> NDArray[np.bool_]:
    """Nodes whose buckets have identical workload columns (every query weighs them alike)."""
    diag = np.diag(Vr)
    if tree.k == 1:
        return np.ones(tree.n_nodes, dtype=bool)
    gap = diag[:-1] + diag[1:] - 2.0 * np.diagonal(Vr, 1)  # ‖w_j - w_{j+1}‖² of adjacent columns
    differ = gap > _SAME_COLUMN_RTOL * (diag[:-1] + diag[1:])
    count = np.concatenate([[0], np.cumsum(differ)])
    return np.asarray(count[tree.hi - 1] == count[tree.lo])


def _greedy_h(Vr: FloatArray, tree: _Hierarchy) -> tuple[FloatArray, float]:
    """GreedyH: per-node weights chosen bottom-up; returns (weights, expected error tr(V_r M⁺)).

    Every subtree keeps a *local* strategy whose root-to-leaf weights sum to one.  At a node with
    children strategies ``A_i`` (``M_i = A_iᵀA_i``, errors ``e_i = tr(V_ii M_i⁺)``), the node takes a
    share ``s`` and the children ``1 - s``: ``M = (1-s)² D + s² 11ᵀ`` with ``D = diag(M_i)``.  With
    ``u = D⁺1``, ``κ = 1ᵀu``, ``q = uᵀ V u`` (V restricted to the node), Sherman-Morrison gives

        tr(V M⁺) = (Σ e_i - q s² / ((1-s)² + s² κ)) / (1-s)²,     M⁺1 = u / ((1-s)² + s² κ),

    so each node costs one quadratic form; ``s`` minimizes it.  Global weights are the products of
    the shares down each path, hence every column has l1 norm one.
    """
    n_nodes = tree.n_nodes
    size = tree.size
    same = _indistinguishable(Vr, tree)
    parent_same = np.zeros(n_nodes, dtype=bool)
    parent_same[1:] = same[tree.parent[1:]]
    leaf = same & ~parent_same  # measured by its total alone; nothing below it is measured
    internal = ~same
    share = np.where(leaf, 1.0, 0.0)
    err = np.zeros(n_nodes)
    u = np.zeros(tree.k)
    leaves = np.flatnonzero(leaf)
    idx, _ = _cells(tree.lo[leaves], tree.hi[leaves])
    u[idx] = np.repeat(1.0 / size[leaves], size[leaves])
    err[leaves] = np.diag(Vr)[tree.lo[leaves]]  # V is constant on the block of such a node
    for d in range(int(tree.depth.max()), -1, -1):
        nodes = np.flatnonzero(internal & (tree.depth == d))
        if nodes.size == 0:
            continue
        kids = np.flatnonzero(np.isin(tree.parent, nodes))
        S = np.asarray(
            np.bincount(tree.parent[kids], weights=err[kids], minlength=n_nodes)[nodes], dtype=np.float64
        )
        lo, hi = tree.lo[nodes], tree.hi[nodes]
        idx, offsets = _cells(lo, hi)
        kappa = np.add.reduceat(u[idx], offsets)
        q = np.array(
            [float(u[a:c] @ Vr[a:c, a:c] @ u[a:c]) for a, c in zip(lo.tolist(), hi.tolist(), strict=True)]
        )
        q = np.maximum(q, 0.0)
        s = _best_share(S, kappa, q)
        denom = (1.0 - s) ** 2 + s**2 * kappa
        share[nodes] = s
        err[nodes] = (S - q * s**2 / denom) / (1.0 - s) ** 2
        u[idx] /= np.repeat(denom, size[nodes])
    carry = np.ones(n_nodes)  # product of (1 - share) over the strict ancestors
    for d in range(1, int(tree.depth.max()) + 1):
        nodes = np.flatnonzero(tree.depth == d)
        par = tree.parent[nodes]
        carry[nodes] = carry[par] * (1.0 - share[par])
    return share * carry, float(err[0])


@dataclass(frozen=True)
class _Solver:
    """Least squares for a weighted hierarchy, by the recursion of :func:`_greedy_h` (O(k log k)).

    For arbitrary non-negative node weights ``w``: at a measured internal node with weight ``c``,
    ``M = D + c² 11ᵀ`` and ``M⁺ = D⁺ - γ uuᵀ`` with ``u = D⁺1``, ``γ = c² / (1 + c² κ)``.  A node
    with no measured node below it (a *leaf* of the measurement) only fixes its total: its cells get
    equal estimates (the minimum-norm solution).
    """

    tree: _Hierarchy
    weights: FloatArray
    leaf_nodes: NDArray[np.intp]
    leaf_cells: NDArray[np.intp]
    leaf_offsets: NDArray[np.intp]
    leaf_scale: FloatArray  # 1 / (w² |S|²) per leaf
    leaf_size: NDArray[np.intp]
    # deepest first: (cells, offsets, γ per node, sizes, u of the children on those cells)
    steps: tuple[tuple[NDArray[np.intp], NDArray[np.intp], FloatArray, NDArray[np.intp], FloatArray], ...]

    @classmethod
    def build(cls, tree: _Hierarchy, weights: FloatArray) -> _Solver:
        """Precompute the recursion; raise if some bucket is not identified by the measurements."""
        w = np.asarray(weights, dtype=np.float64)
        below = np.zeros(tree.n_nodes, dtype=bool)  # some measured node strictly below
        for d in range(int(tree.depth.max()), 0, -1):
            nodes = np.flatnonzero(tree.depth == d)
            hit = nodes[(w[nodes] > 0) | below[nodes]]
            below[tree.parent[hit]] = True
        covered = (w > 0) | below
        kids_ok = np.ones(tree.n_nodes, dtype=bool)
        np.logical_and.at(kids_ok, tree.parent[1:], covered[1:])
        if not covered[0] or np.any(below & ~kids_ok):
            raise InvalidParameterError("dawa: the weighted hierarchy does not identify every bucket")
        leaves = np.flatnonzero((w > 0) & ~below)
        size = tree.size
        cells, offsets = _cells(tree.lo[leaves], tree.hi[leaves])
        u = np.zeros(tree.k)
        scale = 1.0 / (w[leaves] ** 2 * size[leaves].astype(np.float64) ** 2)
        u[cells] = np.repeat(scale * size[leaves], size[leaves])  # M⁺1 = 1 / (w² |S|)
        steps = []
        for d in range(int(tree.depth.max()), -1, -1):
            nodes = np.flatnonzero((tree.depth == d) & below & (w > 0))
            if nodes.size == 0:
                continue
            idx, offs = _cells(tree.lo[nodes], tree.hi[nodes])
            kappa = np.add.reduceat(u[idx], offs)
            c2 = w[nodes] ** 2
            gamma = c2 / (1.0 + c2 * kappa)
            steps.append((idx, offs, gamma, size[nodes], u[idx].copy()))
            u[idx] /= np.repeat(1.0 + c2 * kappa, size[nodes])
        return cls(tree, w, leaves, cells, offsets, scale, size[leaves], tuple(steps))

    def solve(self, r: FloatArray) -> FloatArray:
        """``M⁺ r`` for ``M = AᵀA``: the least-squares bucket totals from ``r = Aᵀ z``."""
        x = np.zeros(self.tree.k)
        tot = np.add.reduceat(r[self.leaf_cells], self.leaf_offsets)
        x[self.leaf_cells] = np.repeat(tot * self.leaf_scale, self.leaf_size)
        for idx, offs, gamma, sizes, u_kids in self.steps:
            tot = np.add.reduceat(x[idx], offs)  # = u_kidsᵀ r on each node
            x[idx] -= np.repeat(gamma * tot, sizes) * u_kids
        return x

    def error(self, Vr: FloatArray) -> float:
        """Expected total squared error ``tr(V_r (AᵀA)⁺)`` of the workload under unit-variance noise."""
        tree, w = self.tree, self.weights
        leaves = self.leaf_nodes
        total = 0.0
        for node, a, c in zip(
            leaves.tolist(), tree.lo[leaves].tolist(), tree.hi[leaves].tolist(), strict=True
        ):
            total += float(Vr[a:c, a:c].sum()) / (w[node] ** 2 * (c - a) ** 2)
        for idx, offs, gamma, _sizes, u_kids in self.steps:
            bounds = np.append(offs, idx.shape[0]).tolist()
            for g, s, e in zip(gamma.tolist(), bounds[:-1], bounds[1:], strict=True):
                a, c = int(idx[s]), int(idx[e - 1]) + 1
                uk = u_kids[s:e]
                total -= g * float(uk @ Vr[a:c, a:c] @ uk)
        return total

    def measured(self) -> NDArray[np.intp]:
        """Indices of the nodes with positive weight (the rows actually released)."""
        return np.flatnonzero(self.weights > 0)

    def measure(self, y: FloatArray) -> FloatArray:
        """Noise-free ``A y`` (measured rows only, breadth-first order)."""
        nodes = self.measured()
        cs = np.concatenate([[0.0], np.cumsum(y)])
        return np.asarray(self.weights[nodes] * (cs[self.tree.hi[nodes]] - cs[self.tree.lo[nodes]]))

    def transpose(self, z: FloatArray) -> FloatArray:
        """``Aᵀ z`` for ``z`` indexed like :meth:`measure`."""
        nodes = self.measured()
        diff = np.zeros(self.tree.k + 1)
        np.add.at(diff, self.tree.lo[nodes], self.weights[nodes] * z)
        np.add.at(diff, self.tree.hi[nodes], -self.weights[nodes] * z)
        return np.asarray(np.cumsum(diff)[:-1])


def _uniform_weights(tree: _Hierarchy) -> FloatArray:
    """Every node weighted one (the classical hierarchy; used above the domain cap)."""
    return np.ones(tree.n_nodes)


def _stage2_weights(workload: Workload, partition: NDArray[np.intp], tree: _Hierarchy) -> FloatArray:
    """GreedyH weights for the partition, or uniform ones if those have lower expected error.

    Both candidates are compared by their exact expected reduced-domain error at equal sensitivity.
    Cached per (workload fingerprint, partition, tree).
    """
    if workload.domain_size > _GREEDY_MAX_DOMAIN:
        return _uniform_weights(tree)
    key = (workload.fingerprint(), partition.tobytes(), int(tree.k), tree.lo.tobytes())
    hit = _WEIGHT_CACHE.get(key)
    if hit is not None:
        _WEIGHT_CACHE.move_to_end(key)
        return hit
    Vr = _reduced_gram(workload, partition)
    assert Vr is not None
    weights, err = _greedy_h(Vr, tree)
    # GreedyH is a local heuristic: keep the uniform hierarchy if that is better on this workload
    uniform = _uniform_weights(tree)
    err_uniform = _Solver.build(tree, uniform).error(Vr) * _sensitivity(tree, uniform) ** 2
    if err_uniform < err:
        weights = uniform
    weights.setflags(write=False)
    _WEIGHT_CACHE[key] = weights
    while len(_WEIGHT_CACHE) > _WEIGHT_CACHE_SIZE:
        _WEIGHT_CACHE.popitem(last=False)
    return weights


# ------------------------------------------------------------------------------------------ API
def _check_histogram(histogram: ArrayLike, n: int) -> FloatArray:
    x = check_array(histogram, "histogram", ndim=1)
    if x.shape[0] != n:
        raise InvalidParameterError(
            f"histogram: expected length {n} (the workload's domain size), got length {x.shape[0]}"
        )
    if np.any(x < 0):
        raise InvalidParameterError("histogram: counts must be non-negative (one unit per record)")
    return np.asarray(x, dtype=np.float64)


def dawa(
    workload: Workload,
    histogram: ArrayLike,
    *,
    epsilon: float,
    rng: RNGLike,
    ratio: float = 0.25,
    branching: int = 2,
    accountant: Accountant | None = None,
) -> DawaResult:
    """Answer a workload on a 1-d histogram with DAWA (Li, Hay, Miklau, Wang 2014), pure ε-DP.

    Parameters
    ----------
    workload : Workload
        Public linear queries over the ``n`` cells of an ordered 1-d domain (prefix, ranges, ...).
    histogram : array of shape (n,)
        The private data: one non-negative count per cell (each record adds 1 to one cell).
    epsilon : float
        Total privacy budget ε > 0.
    rng : int, Generator, "secure" or None
        Randomness of the noise (keyword only; no default seed).
    ratio : float, default 0.25
        Fraction ρ of ε spent on choosing the partition, ``0 < ρ < 1`` (the paper's default 0.25).
    branching : int, default 2
        Branching factor of the measurement hierarchy over the buckets (>= 2).
    accountant : Accountant, optional
        Ledger to compose into; refused (unchanged, no noise drawn) if the two stages together
        would exceed its budget.  Default: a fresh ``make_accountant("basic", budget=Budget(ε))``.
        Its neighbouring relation sets the sensitivities (``"replace_one"`` doubles them).

    Returns
    -------
    DawaResult

    Raises
    ------
    InvalidParameterError
        On a bad parameter, a histogram that is not 1-d, has the wrong length, or contains negative
        or non-finite counts (messages never include data values).
    BudgetExceededError
        If the accountant's budget cannot cover both stages; nothing is recorded or drawn.

    Privacy
    -------
    Pure ε-DP under the accountant's neighbouring relation (add/remove one record by default), by
    sequential composition of two Laplace releases, each composed into the accountant before its
    noise is drawn:

    * stage 1, ``ρε``: the noisy histogram ``x + Lap(Δ/(ρε))``, l1 sensitivity Δ = 1 (add/remove)
      or 2 (replace-one); the partition is post-processing of it;
    * stage 2, ``(1 - ρ)ε``: the GreedyH-weighted hierarchy ``A y`` of the bucket totals ``y``
      with Laplace scale ``Δ·L/((1 - ρ)ε)``, where ``L`` is the largest column l1 norm of A
      (computed exactly and rounded up; one for GreedyH); A depends only on the public workload and
      the stage-1 release.

    Least squares, uniform spreading and the answers are post-processing.  The privacy spent is
    ``ρε + (1 - ρ)ε = ε``.  Floating-point Laplace sampling has the usual caveat; pass
    ``rng="secure"`` for the exact discrete samplers of :mod:`dpopt.mechanisms`.

    Notes
    -----
    Choices where the paper differs or is silent (documented, ours): partition costs are computed
    from one noisy histogram with the deviation the noise contributes, ``(|B| - 1)·b``, subtracted
    (clipped at zero); candidate buckets are power-of-two-length intervals; the GreedyH details
    (share grid and refinement, exact local error, merged indistinguishable buckets, uniform
    weights above a 4096-cell domain) are listed in the module docstring.
    """
    if not isinstance(workload, Workload):
        raise InvalidParameterError("workload: expected a dpopt.linear_queries Workload")
    eps = check_positive(epsilon, "epsilon")
    rho = float(check_positive(ratio, "ratio"))
    if not rho < 1:
        raise InvalidParameterError("ratio: must lie in (0, 1)")
    b = check_int(branching, "branching", minimum=2)
    x = _check_histogram(histogram, workload.domain_size)
    if accountant is None:
        accountant = make_accountant("basic", budget=Budget(eps))
    elif not isinstance(accountant, Accountant):
        raise InvalidParameterError("accountant: expected a dpopt.accounting.Accountant or None")
    gen = check_rng(rng)
    sens = 1.0 if accountant.neighbouring == "add_remove" else 2.0
    eps1 = rho * eps
    eps2 = eps - eps1
    stage1 = LaplaceMechanism.calibrate(eps1, sens)
    stage2 = LaplaceMechanism.calibrate(eps2, sens)
    if accountant.budget is not None:
        total = accountant.would_spend(ComposedEvent((stage1.event, stage2.event)))
        if not total <= accountant.budget.epsilon * (1 + 1e-9) + 1e-12:
            raise BudgetExceededError(
                f"dawa: the two stages would bring the ledger to ε={total:.4g}, over its budget "
                f"ε={accountant.budget.epsilon:g}; lower epsilon or raise the budget (nothing was spent)"
            )

    # stage 1: noisy histogram (composed before drawing), partition by post-processing
    noisy = np.asarray(stage1.release(x, rng=gen, accountant=accountant, label="dawa/partition"))
    partition = _best_partition(np.atleast_1d(noisy), stage1.scale, stage2.scale)
    sizes = np.diff(partition)
    k = sizes.shape[0]
    y = np.add.reduceat(x, partition[:-1])

    # stage 2: GreedyH-weighted hierarchy over the bucket totals (public given stage 1)
    tree = _tree(k, b)
    weights = _stage2_weights(workload, partition, tree)
    solver = _Solver.build(tree, weights)
    l1 = _sensitivity(tree, weights)  # max column l1 norm of the weighted strategy (1 for GreedyH)
    measure = LaplaceMechanism.calibrate(eps2, sens * l1)  # ε₂-DP for any weights: scale Δ·l1/ε₂
    z = np.atleast_1d(
        measure.release(solver.measure(y), rng=gen, accountant=accountant, label="dawa/measure")
    )
    y_hat = solver.solve(solver.transpose(z))
    estimate = np.repeat(y_hat / sizes, sizes)
    node_weights = np.asarray(weights / l1)
    return DawaResult(
        answers=workload.answer(estimate),
        estimate=estimate,
        partition=partition,
        privacy=accountant.spent(),
        node_weights=node_weights,
        node_intervals=np.column_stack([tree.lo, tree.hi]),
    )
