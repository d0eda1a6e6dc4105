"""Network topologies and data splits for distributed (ADMM) training.

A :class:`Topology` is an inert, validated description of an undirected, connected graph on nodes
``0 .. N-1`` without self-loops or repeated edges.  Every constructor returns one; disconnected
graphs are an error (a node that cannot reach the others cannot agree with them).

Constructors: :func:`complete`, :func:`ring`, :func:`ring_with_chords`, :func:`star`, :func:`grid`, :func:`erdos_renyi`
(resampled until connected), :func:`random_geometric` (resampled until connected) and
:func:`from_edges` (a user-given edge list).  Random constructors take the keyword ``rng``.

:func:`split_rows` assigns the rows of a data set to nodes (even, Dirichlet or power-law sizes),
deterministically from ``rng``; :func:`shard_nodes` groups nodes into contiguous shards for the
engines of :mod:`dpopt.distributed.engines`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph
import scipy.sparse.linalg
from numpy.typing import NDArray
from scipy.spatial import cKDTree

from dpopt._validation import check_int, check_memory, check_positive, check_probability
from dpopt.exceptions import InvalidParameterError
from dpopt.randomness import RNGLike, as_generator

__all__ = [
    "BYTES_PER_EDGE",
    "BYTES_PER_NODE",
    "MAX_NODES",
    "Topology",
    "check_topology_size",
    "complete",
    "erdos_renyi",
    "from_edges",
    "grid",
    "random_geometric",
    "ring",
    "ring_with_chords",
    "shard_nodes",
    "split_rows",
    "star",
]

IntArray = NDArray[np.int64]
Array = NDArray[np.float64]

#: Most nodes a constructor builds (read at call time: set ``dpopt.distributed.topology.MAX_NODES``
#: to build larger graphs deliberately).  Every topology in dpopt is a network simulated in one process
#: or on a few workers: :class:`~dpopt.distributed.admm.PrivateADMM` solves one local problem per node
#: and round and keeps (T, N) per-round tables of 64·T·N bytes -- 6.4 GB at N = 10^6 and its default
#: T = 100 rounds, over a quarter of a 24 GiB machine before any data -- so a larger network cannot be
#: run here, while building its graph alone costs ~:data:`BYTES_PER_EDGE` bytes per edge
#: (``ring(10**7)``: 1.9 GB and 18 s before any run could refuse).
MAX_NODES = 1_000_000
#: Peak bytes per undirected edge while a :class:`Topology` is built (the given and canonical edge
#: lists, both directions, their sort order, the CSR index, the component labelling): measured
#: ~190 bytes (1.88 GB peak resident memory for ``ring(10**7)``), rounded up.
BYTES_PER_EDGE = 200
#: Peak bytes per node (degree counts, CSR pointers, components; point coordinates and k-d tree for
#: :func:`random_geometric`).
BYTES_PER_NODE = 64


def check_topology_size(n_nodes: int, n_edges: float, name: str) -> None:
    """Refuse up front (before any allocation) a graph of more than :data:`MAX_NODES` nodes or whose
    construction would need more than half of this machine's memory (``n_edges``: expected count).

    Raises
    ------
    InvalidParameterError
        Naming the constructor, the limit and how to change it.
    """
    if n_nodes > MAX_NODES:
        raise InvalidParameterError(
            f"{name}: {n_nodes} nodes is more than MAX_NODES = {MAX_NODES} (no network of that size can be "
            "simulated here); use fewer nodes, or raise dpopt.distributed.topology.MAX_NODES deliberately"
        )
    check_memory(
        BYTES_PER_EDGE * float(n_edges) + BYTES_PER_NODE * float(n_nodes),
        f"{name}: building the graph ({float(n_edges):.3g} expected edges)",
        fix="use fewer nodes or a sparser graph",
    )


class Topology:
    """An undirected connected graph on nodes ``0 .. n_nodes-1`` (immutable).

    Build it with one of the module's constructors, or ``Topology(n_nodes, edges, name)`` from an
    edge array.  Everything is stored in O(N + |E|): the edge list and a compressed (CSR)
    neighbour index; the complete graph :func:`complete` is represented implicitly (no edge list, no
    N x N array), so K_N is cheap for any N.  Spectral quantities (:meth:`algebraic_connectivity`)
    are computed only on request, by sparse Lanczos for large graphs, and cached.

    Attributes
    ----------
    n_nodes : int
        Number of nodes ``N`` (at least 2).
    edges : ndarray of shape (n_edges, 2)
        Each undirected edge once, as ``(i, j)`` with ``i < j``, sorted lexicographically (read-only;
        materialised on access for the implicit complete graph).
    name : str
        Short description, e.g. ``"ring(5)"``.
    is_complete : bool
        True for the implicitly represented complete graph.
    """

    __slots__ = ("_cache", "_edges", "_indices", "_indptr", "is_complete", "n_nodes", "name")

    n_nodes: int
    name: str
    is_complete: bool
    _edges: IntArray | None
    _indptr: IntArray | None
    _indices: IntArray | None
    _cache: dict[str, Any]

    def __init__(
        self, n_nodes: int, edges: Any = None, name: str = "graph", *, _complete: bool = False
    ) -> None:
        n = check_int(n_nodes, "n_nodes", minimum=2)
        check_topology_size(n, 0 if _complete or edges is None else int(np.size(edges)) // 2, str(name))
        set_ = object.__setattr__
        set_(self, "n_nodes", n)
        set_(self, "name", str(name))
        set_(self, "is_complete", bool(_complete))
        set_(self, "_cache", {})
        if _complete:
            set_(self, "_edges", None)
            set_(self, "_indptr", None)
            set_(self, "_indices", None)
            return
        if edges is None:
            raise InvalidParameterError("edges: expected an array of shape (n_edges, 2)")
        e = _canonical_edges(edges, n)
        set_(self, "_edges", e)
        both = np.concatenate([e, e[:, ::-1]]) if e.shape[0] else np.zeros((0, 2), dtype=np.int64)
        order = np.lexsort((both[:, 1], both[:, 0]))
        indices = np.ascontiguousarray(both[order, 1])
        counts = np.bincount(both[:, 0], minlength=n)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        for a in (indices, indptr):
            a.setflags(write=False)
        set_(self, "_indptr", indptr)
        set_(self, "_indices", indices)
        isolated = np.flatnonzero(counts == 0)
        if isolated.size:
            raise InvalidParameterError(
                f"topology: {isolated.size} node(s) have no neighbour (first: node {int(isolated[0])}); "
                "every node must be connected to the network"
            )
        n_comp = _n_components(n, e)
        if n_comp > 1:
            raise InvalidParameterError(
                f"topology: the graph is disconnected ({n_comp} components); ADMM needs a connected "
                "network — add edges or use a connected constructor"
            )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Topology is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Topology is immutable")

    def __reduce__(self) -> Any:
        if self.is_complete:
            return (complete, (self.n_nodes,))
        return (Topology, (self.n_nodes, self._edges, self.name))

    @property
    def n_edges(self) -> int:
        """Number of undirected edges ``|E|``."""
        if self.is_complete:
            return self.n_nodes * (self.n_nodes - 1) // 2
        assert self._edges is not None
        return int(self._edges.shape[0])

    @property
    def edges(self) -> IntArray:
        """The edge list (for the implicit complete graph: built on access, refused when huge)."""
        if self._edges is not None:
            return self._edges
        e = self._cache.get("edges")
        if e is None:
            check_memory(
                16.0 * self.n_edges, f"the edge list of {self.name}", fix="use neighbours(i) or csr()"
            )
            i, j = np.triu_indices(self.n_nodes, k=1)
            e = np.stack([i, j], axis=1).astype(np.int64)
            e.setflags(write=False)
            self._cache["edges"] = e
        return e

    def csr(self) -> tuple[IntArray, IntArray]:
        """``(indptr, indices)``: node i's sorted neighbours are ``indices[indptr[i]:indptr[i+1]]``.

        Not available for the implicit complete graph (use :meth:`neighbours`).
        """
        if self.is_complete:
            raise InvalidParameterError(f"{self.name}: the complete graph has no stored neighbour index")
        assert self._indptr is not None and self._indices is not None
        return self._indptr, self._indices

    def neighbours(self, i: int) -> IntArray:
        """Sorted neighbours of node ``i`` (excluding ``i``)."""
        i = int(i)
        if not 0 <= i < self.n_nodes:
            raise InvalidParameterError(f"node: must lie in [0, {self.n_nodes - 1}]")
        if self.is_complete:
            a = np.delete(np.arange(self.n_nodes, dtype=np.int64), i)
            a.setflags(write=False)
            return a
        indptr, indices = self.csr()
        return indices[indptr[i] : indptr[i + 1]]

    @property
    def degrees(self) -> IntArray:
        """``V_i = |neighbours(i)|`` for every node."""
        if self.is_complete:
            return np.full(self.n_nodes, self.n_nodes - 1, dtype=np.int64)
        indptr, _ = self.csr()
        return np.diff(indptr)

    def adjacency(self) -> scipy.sparse.csr_array:
        """Sparse (CSR) symmetric 0/1 adjacency matrix ``A`` (O(|E|) memory)."""
        n = self.n_nodes
        if self.is_complete:
            check_memory(12.0 * n * n, f"the adjacency matrix of {self.name}", fix="use degrees / neighbours")
            a = np.ones((n, n))
            np.fill_diagonal(a, 0.0)
            return scipy.sparse.csr_array(a)
        indptr, indices = self.csr()
        return scipy.sparse.csr_array((np.ones(indices.size), indices, indptr), shape=(n, n))

    def laplacian(self) -> scipy.sparse.csr_array:
        """Sparse (CSR) graph Laplacian ``D - A``."""
        a = self.adjacency()
        return scipy.sparse.csr_array(scipy.sparse.diags_array(self.degrees.astype(float)) - a)

    def algebraic_connectivity(self) -> float:
        """Second-smallest eigenvalue of ``D - A`` (its smallest non-zero singular value): > 0 iff connected.

        Enters M-ADMM's convergence rate (spec §4.3).  Computed on request and cached: exactly for
        the complete graph (N) and for small graphs (dense, N <= 400), else by shift-invert Lanczos
        (:func:`scipy.sparse.linalg.eigsh` on the sparse Laplacian, O(|E|) memory plus the sparse
        factor).
        """
        val = self._cache.get("algebraic_connectivity")
        if val is None:
            val = _algebraic_connectivity(self)
            self._cache["algebraic_connectivity"] = val
        return float(val)

    def summary(self, spectral: bool | None = None) -> dict[str, Any]:
        """Public description: name, N, |E|, degree range and (see ``spectral``) algebraic connectivity.

        ``spectral=None`` (default) includes the algebraic connectivity only if it was already
        computed (so a summary never starts an eigen-solve); ``True`` computes it; ``False`` omits it.
        """
        deg = self.degrees
        out: dict[str, Any] = {
            "topology": self.name,
            "n_nodes": self.n_nodes,
            "n_edges": self.n_edges,
            "min_degree": int(deg.min()),
            "max_degree": int(deg.max()),
        }
        if spectral or (spectral is None and "algebraic_connectivity" in self._cache):
            out["algebraic_connectivity"] = self.algebraic_connectivity()
        return out

    def __repr__(self) -> str:
        return f"Topology({self.name}, n_nodes={self.n_nodes}, n_edges={self.n_edges})"


def _algebraic_connectivity(t: Topology) -> float:
    n = t.n_nodes
    if t.is_complete:
        return float(n)
    lap = t.laplacian()
    if n <= 400:
        return float(np.linalg.eigvalsh(lap.toarray())[1])
    # Lanczos on the pseudo-inverse L⁺ (largest eigenvalue 1/λ₂): L⁺b for b ⊥ 1 solves the grounded
    # (last node removed, positive definite) Laplacian by a sparse LU and removes the mean
    solve = scipy.sparse.linalg.factorized(lap[:-1, :-1].tocsc())

    def pinv(b: Array) -> Array:
        b = np.ravel(b)
        b = b - b.mean()
        x = np.append(solve(b[:-1]), 0.0)
        return x - x.mean()

    op = scipy.sparse.linalg.LinearOperator((n, n), matvec=pinv, dtype=np.float64)
    top = scipy.sparse.linalg.eigsh(
        op,
        k=1,
        which="LA",
        return_eigenvectors=False,
        v0=np.cos(np.arange(n) + 0.5),
        tol=1e-12,
        maxiter=10_000,
    )
    return float(1.0 / top[0])


def _canonical_edges(edges: Any, n: int) -> IntArray:
    try:
        e = np.asarray(edges, dtype=np.int64)
    except (TypeError, ValueError):
        raise InvalidParameterError("edges: expected pairs of integer node ids") from None
    if e.size == 0:
        e = e.reshape(0, 2)
    if e.ndim != 2 or e.shape[1] != 2:
        raise InvalidParameterError(f"edges: expected an array of shape (n_edges, 2), got {e.shape}")
    if np.any(e < 0) or np.any(e >= n):
        raise InvalidParameterError(f"edges: node ids must lie in [0, {n - 1}]")
    if np.any(e[:, 0] == e[:, 1]):
        raise InvalidParameterError("edges: self-loops (i, i) are not allowed")
    e = np.sort(e, axis=1)
    if e.shape[0]:
        uniq = np.unique(e, axis=0)
        if uniq.shape[0] != e.shape[0]:
            raise InvalidParameterError("edges: an undirected edge is listed more than once")
        e = uniq
    e = np.ascontiguousarray(e)
    e.setflags(write=False)
    return e


def _n_components(n: int, e: IntArray) -> int:
    g = scipy.sparse.coo_array((np.ones(e.shape[0]), (e[:, 0], e[:, 1])), shape=(n, n))
    return int(scipy.sparse.csgraph.connected_components(g, directed=False, return_labels=False))


def _is_connected(n: int, e: IntArray) -> bool:
    return e.shape[0] >= n - 1 and _n_components(n, e) == 1


# ----------------------------------------------------------------------------------------------
# Constructors
# ----------------------------------------------------------------------------------------------


def from_edges(n_nodes: int, edges: Iterable[Sequence[int]] | NDArray[Any], *, name: str = "") -> Topology:
    """A topology from a user-given list of undirected edges ``(i, j)``.

    Raises
    ------
    InvalidParameterError
        On out-of-range ids, self-loops, repeated edges, isolated nodes or a disconnected graph.
    """
    n = check_int(n_nodes, "n_nodes", minimum=2)
    return Topology(
        n, np.asarray(list(edges) if not isinstance(edges, np.ndarray) else edges), name or f"edges({n})"
    )


def complete(n_nodes: int) -> Topology:
    """The complete graph K_N (every pair connected), represented implicitly (O(1) memory)."""
    n = check_int(n_nodes, "n_nodes", minimum=2)
    check_topology_size(n, 0, f"complete({n})")  # implicit, but degrees and neighbours are O(N)
    return Topology(n, None, f"complete({n})", _complete=True)


def ring(n_nodes: int) -> Topology:
    """The cycle 0-1-…-(N-1)-0 (for N = 2: a single edge)."""
    n = check_int(n_nodes, "n_nodes", minimum=2)
    check_topology_size(n, n, f"ring({n})")
    i = np.arange(n)
    e = np.stack([i, (i + 1) % n], axis=1)
    if n == 2:
        e = e[:1]
    return Topology(n, e, f"ring({n})")


def ring_with_chords(n_nodes: int, n_chords: int, *, rng: RNGLike) -> Topology:
    """The ring plus ``n_chords`` distinct random chords (edges not already in the ring)."""
    k = check_int(n_chords, "n_chords", minimum=0)
    n = check_int(n_nodes, "n_nodes", minimum=2)
    if k > max(0, n * (n - 1) // 2 - n):  # the pairs that are not ring edges (checked again below)
        raise InvalidParameterError(
            f"n_chords: at most {max(0, n * (n - 1) // 2 - n)} chords fit in a ring of {n} nodes"
        )
    check_topology_size(n, n + k, f"ring_with_chords({n}, {k})")
    base = ring(n)
    # the free pairs (not ring edges) in upper-triangle row-major order, indexed without listing them:
    # row 0 holds j = 2..n-2, row i >= 1 holds j = i+2..n-1
    counts = (
        np.maximum(np.concatenate([[n - 3], n - 2 - np.arange(1, n)]), 0) if n > 2 else np.zeros(n, np.int64)
    )
    n_free = int(counts.sum())
    if k > n_free:
        raise InvalidParameterError(f"n_chords: at most {n_free} chords fit in a ring of {n} nodes")
    pick = as_generator(rng).choice(n_free, size=k, replace=False) if k else np.zeros(0, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    rows = np.searchsorted(starts, pick, side="right") - 1
    cols = pick - starts[rows] + rows + 2
    chords = np.stack([rows, cols], axis=1).astype(np.int64).reshape(-1, 2)
    return Topology(n, np.concatenate([base.edges, chords]), f"ring_with_chords({n}, {k})")


def star(n_nodes: int) -> Topology:
    """Node 0 connected to every other node."""
    n = check_int(n_nodes, "n_nodes", minimum=2)
    check_topology_size(n, n - 1, f"star({n})")
    j = np.arange(1, n)
    return Topology(n, np.stack([np.zeros_like(j), j], axis=1), f"star({n})")


def grid(n_rows: int, n_cols: int) -> Topology:
    """A ``n_rows x n_cols`` 4-neighbour lattice; node ``r * n_cols + c`` sits at row r, column c."""
    r_ = check_int(n_rows, "n_rows")
    c_ = check_int(n_cols, "n_cols")
    if r_ * c_ < 2:
        raise InvalidParameterError("grid: needs at least 2 nodes")
    check_topology_size(r_ * c_, 2 * r_ * c_, f"grid({r_}x{c_})")
    ids = np.arange(r_ * c_).reshape(r_, c_)
    horiz = np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()], axis=1)
    vert = np.stack([ids[:-1, :].ravel(), ids[1:, :].ravel()], axis=1)
    return Topology(r_ * c_, np.concatenate([horiz, vert]), f"grid({r_}x{c_})")


def _resample_until_connected(draw: Any, n: int, max_tries: int, what: str) -> IntArray:
    for _ in range(max_tries):
        e = draw()
        if _is_connected(n, e):
            return e
    raise InvalidParameterError(
        f"{what}: no connected graph in {max_tries} draws; increase the edge probability/radius"
    )


def erdos_renyi(n_nodes: int, p: float, *, rng: RNGLike, max_tries: int = 1000) -> Topology:
    """Erdős–Rényi G(N, p), resampled until connected (spec §4.8 defaults: G(5, 0.5), G(100, 0.05)).

    Parameters
    ----------
    n_nodes : int
        N >= 2.
    p : float
        Edge probability in (0, 1].
    rng : int, Generator or None
        Randomness of the graph (public, data independent).
    max_tries : int, default 1000
        Draws before giving up with an error.
    """
    n = check_int(n_nodes, "n_nodes", minimum=2)
    prob = check_probability(p, "p", open_left=True, open_right=False)
    g = as_generator(rng)
    check_topology_size(n, prob * n * (n - 1) / 2, f"erdos_renyi({n}, {prob:g})")

    def draw() -> IntArray:
        # the same uniforms as one draw over the upper triangle in row-major order, taken row block by
        # row block so that memory stays O(N + |E|)
        parts = []
        start = 0
        while start < n - 1:
            stop = start + 1
            while stop < n - 1 and (stop - start) * (n - start) < 4_000_000:
                stop += 1
            rows = np.arange(start, stop)
            lens = n - 1 - rows
            keep = g.random(int(lens.sum())) < prob
            iu = np.repeat(rows, lens)
            ju = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens) + iu + 1
            parts.append(np.stack([iu[keep], ju[keep]], axis=1))
            start = stop
        return np.concatenate(parts).astype(np.int64)

    e = _resample_until_connected(draw, n, check_int(max_tries, "max_tries"), "erdos_renyi")
    return Topology(n, e, f"erdos_renyi({n}, {prob:g})")


def random_geometric(n_nodes: int, radius: float, *, rng: RNGLike, max_tries: int = 1000) -> Topology:
    """Random geometric graph: N uniform points in the unit square, edges between points closer than ``radius``.

    Resampled until connected.
    """
    n = check_int(n_nodes, "n_nodes", minimum=2)
    r = check_positive(radius, "radius")
    # a pair is an edge with probability at most π r² (less near the square's border)
    check_topology_size(n, min(1.0, math.pi * r * r) * n * (n - 1) / 2, f"random_geometric({n}, {r:g})")
    g = as_generator(rng)

    def draw() -> IntArray:
        pts = g.random((n, 2))
        pairs = cKDTree(pts).query_pairs(r * (1 + 1e-9), output_type="ndarray").astype(np.int64)
        pairs = np.sort(pairs.reshape(-1, 2), axis=1)
        dist = np.linalg.norm(pts[pairs[:, 0]] - pts[pairs[:, 1]], axis=1)
        return pairs[dist < r]  # the same test as the all-pairs definition

    e = _resample_until_connected(draw, n, check_int(max_tries, "max_tries"), "random_geometric")
    return Topology(n, e, f"random_geometric({n}, {r:g})")


# ----------------------------------------------------------------------------------------------
# Shards and data splits
# ----------------------------------------------------------------------------------------------


def shard_nodes(n_nodes: int, n_shards: int) -> list[IntArray]:
    """Split nodes ``0 .. N-1`` into ``n_shards`` contiguous, near-equal groups (one per worker).

    Contiguous id ranges keep most neighbours of ring and grid topologies inside a shard, so few
    vectors cross between workers.  ``n_shards`` is capped at N.
    """
    n = check_int(n_nodes, "n_nodes", minimum=1)
    k = min(check_int(n_shards, "n_shards"), n)
    cuts = np.linspace(0, n, k + 1).round().astype(np.int64)
    return [np.arange(cuts[s], cuts[s + 1], dtype=np.int64) for s in range(k)]


SplitKind = Literal["even", "dirichlet", "power_law"]


def split_rows(
    n_samples: int,
    n_nodes: int,
    *,
    how: SplitKind = "even",
    rng: RNGLike,
    concentration: float = 0.5,
    exponent: float = 1.0,
    min_size: int = 1,
) -> list[IntArray]:
    """Assign ``n_samples`` rows to ``n_nodes`` nodes; returns one sorted index array per node.

    The rows are shuffled with ``rng`` and cut into consecutive pieces whose sizes are

    * ``"even"``: as equal as possible (sizes differ by at most one);
    * ``"dirichlet"``: proportional to a Dirichlet(``concentration`` · 1) draw (spec §8 default for
      the uneven split, concentration 0.5);
    * ``"power_law"``: proportional to ``k^(-exponent)`` for a random order of ``k = 1..N``.

    Every node receives at least ``min_size`` rows (the uneven sizes are computed on the rows left
    after the minimum is reserved).  Sizes depend only on ``rng`` and the public counts, never on
    the data.

    Raises
    ------
    InvalidParameterError
        If ``n_samples < n_nodes * min_size`` or a parameter is out of range.
    """
    n = check_int(n_samples, "n_samples")
    k = check_int(n_nodes, "n_nodes")
    m = check_int(min_size, "min_size")
    if n < k * m:
        raise InvalidParameterError(
            f"split_rows: {n} rows cannot give {k} nodes at least {m} row(s) each (empty node)"
        )
    g = as_generator(rng)
    spare = n - k * m
    if how == "even":
        sizes = np.full(k, n // k, dtype=np.int64)
        sizes[: n % k] += 1
    else:
        if how == "dirichlet":
            w = g.dirichlet(np.full(k, check_positive(concentration, "concentration")))
        elif how == "power_law":
            w = np.arange(1, k + 1, dtype=float) ** -check_positive(exponent, "exponent")
            w = g.permutation(w)
            w = w / w.sum()
        else:
            raise InvalidParameterError("how: must be 'even', 'dirichlet' or 'power_law'")
        extra = np.floor(w * spare).astype(np.int64)
        rest = spare - int(extra.sum())
        order = np.argsort(-(w * spare - extra), kind="stable")
        extra[order[:rest]] += 1
        sizes = m + extra
    perm = g.permutation(n)
    cuts = np.concatenate([[0], np.cumsum(sizes)])
    return [np.sort(perm[cuts[i] : cuts[i + 1]]) for i in range(k)]
