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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import check_int, check_positive, check_probability
from dpopt.exceptions import InvalidParameterError
from dpopt.randomness import RNGLike, as_generator

__all__ = [
    "Topology",
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


@dataclass(frozen=True, eq=False)
class Topology:
    """An undirected connected graph on nodes ``0 .. n_nodes-1``.

    Build it with one of the module's constructors (or directly from a validated edge array).

    Attributes
    ----------
    n_nodes : int
        Number of nodes ``N`` (at least 2).
    edges : ndarray of shape (n_edges, 2)
        Each undirected edge once, as ``(i, j)`` with ``i < j``, sorted lexicographically (read-only).
    name : str
        Short description, e.g. ``"ring(5)"``.
    """

    n_nodes: int
    edges: IntArray = field(repr=False)
    name: str = "graph"
    _neighbours: tuple[IntArray, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = check_int(self.n_nodes, "n_nodes", minimum=2)
        e = _canonical_edges(self.edges, n)
        object.__setattr__(self, "n_nodes", n)
        object.__setattr__(self, "edges", e)
        nbrs: list[list[int]] = [[] for _ in range(n)]
        for i, j in e.tolist():
            nbrs[i].append(j)
            nbrs[j].append(i)
        frozen = []
        for lst in nbrs:
            a = np.array(sorted(lst), dtype=np.int64)
            a.setflags(write=False)
            frozen.append(a)
        object.__setattr__(self, "_neighbours", tuple(frozen))
        isolated = [i for i in range(n) if len(nbrs[i]) == 0]
        if isolated:
            raise InvalidParameterError(
                f"topology: {len(isolated)} node(s) have no neighbour (first: node {isolated[0]}); "
                "every node must be connected to the network"
            )
        n_comp = _n_components(n, e)
        if n_comp > 1:
            raise InvalidParameterError(
                f"topology: the graph is disconnected ({n_comp} components); ADMM needs a connected "
                "network — add edges or use a connected constructor"
            )

    @property
    def n_edges(self) -> int:
        """Number of undirected edges ``|E|``."""
        return int(self.edges.shape[0])

    def neighbours(self, i: int) -> IntArray:
        """Sorted neighbours of node ``i`` (excluding ``i``)."""
        return self._neighbours[i]

    @property
    def degrees(self) -> IntArray:
        """``V_i = |neighbours(i)|`` for every node."""
        return np.array([len(a) for a in self._neighbours], dtype=np.int64)

    def adjacency(self) -> NDArray[np.float64]:
        """Dense symmetric 0/1 adjacency matrix ``A``."""
        a = np.zeros((self.n_nodes, self.n_nodes))
        a[self.edges[:, 0], self.edges[:, 1]] = 1.0
        a[self.edges[:, 1], self.edges[:, 0]] = 1.0
        return a

    def laplacian(self) -> NDArray[np.float64]:
        """Graph Laplacian ``D - A``."""
        a = self.adjacency()
        return np.diag(a.sum(axis=1)) - a

    def algebraic_connectivity(self) -> float:
        """Second-smallest eigenvalue of ``D - A`` (its smallest non-zero singular value): > 0 iff connected.

        Enters M-ADMM's convergence rate (spec §4.3).
        """
        return float(np.linalg.eigvalsh(self.laplacian())[1])

    def summary(self) -> dict[str, Any]:
        """Public description: name, N, |E|, degree range and algebraic connectivity."""
        deg = self.degrees
        return {
            "topology": self.name,
            "n_nodes": self.n_nodes,
            "n_edges": self.n_edges,
            "min_degree": int(deg.min()),
            "max_degree": int(deg.max()),
            "algebraic_connectivity": self.algebraic_connectivity(),
        }

    def __repr__(self) -> str:
        return f"Topology({self.name}, n_nodes={self.n_nodes}, n_edges={self.n_edges})"


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
    parent = list(range(n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i, j in e.tolist():
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[ri] = rj
    return len({find(i) for i in range(n)})


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
    """The complete graph K_N (every pair connected)."""
    n = check_int(n_nodes, "n_nodes", minimum=2)
    i, j = np.triu_indices(n, k=1)
    return Topology(n, np.stack([i, j], axis=1), f"complete({n})")


def ring(n_nodes: int) -> Topology:
    """The cycle 0-1-…-(N-1)-0 (for N = 2: a single edge)."""
    n = check_int(n_nodes, "n_nodes", minimum=2)
    i = np.arange(n)
    e = np.stack([i, (i + 1) % n], axis=1)
    if n == 2:
        e = e[:1]
    return Topology(n, e, f"ring({n})")


def ring_with_chords(n_nodes: int, n_chords: int, *, rng: RNGLike) -> Topology:
    """The ring plus ``n_chords`` distinct random chords (edges not already in the ring)."""
    base = ring(n_nodes)
    n = base.n_nodes
    k = check_int(n_chords, "n_chords", minimum=0)
    existing = {tuple(e) for e in base.edges.tolist()}
    iu, ju = np.triu_indices(n, k=1)
    free = [(int(i), int(j)) for i, j in zip(iu, ju, strict=True) if (int(i), int(j)) not in existing]
    if k > len(free):
        raise InvalidParameterError(f"n_chords: at most {len(free)} chords fit in a ring of {n} nodes")
    pick = as_generator(rng).choice(len(free), size=k, replace=False) if k else np.zeros(0, dtype=np.int64)
    chords = np.array([free[int(c)] for c in pick], dtype=np.int64).reshape(-1, 2)
    return Topology(n, np.concatenate([base.edges, chords]), f"ring_with_chords({n}, {k})")


def star(n_nodes: int) -> Topology:
    """Node 0 connected to every other node."""
    n = check_int(n_nodes, "n_nodes", minimum=2)
    j = np.arange(1, n)
    return Topology(n, np.stack([np.zeros_like(j), j], axis=1), f"star({n})")


def grid(n_rows: int, n_cols: int) -> Topology:
    """A ``n_rows x n_cols`` 4-neighbour lattice; node ``r * n_cols + c`` sits at row r, column c."""
    r_ = check_int(n_rows, "n_rows")
    c_ = check_int(n_cols, "n_cols")
    if r_ * c_ < 2:
        raise InvalidParameterError("grid: needs at least 2 nodes")
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
    iu, ju = np.triu_indices(n, k=1)

    def draw() -> IntArray:
        keep = g.random(iu.size) < prob
        return np.stack([iu[keep], ju[keep]], axis=1)

    e = _resample_until_connected(draw, n, check_int(max_tries, "max_tries"), "erdos_renyi")
    return Topology(n, e, f"erdos_renyi({n}, {prob:g})")


def random_geometric(n_nodes: int, radius: float, *, rng: RNGLike, max_tries: int = 1000) -> Topology:
    """Random geometric graph: N uniform points in the unit square, edges between points closer than ``radius``.

    Resampled until connected.
    """
    n = check_int(n_nodes, "n_nodes", minimum=2)
    r = check_positive(radius, "radius")
    g = as_generator(rng)
    iu, ju = np.triu_indices(n, k=1)

    def draw() -> IntArray:
        pts = g.random((n, 2))
        dist = np.linalg.norm(pts[iu] - pts[ju], axis=1)
        keep = dist < r
        return np.stack([iu[keep], ju[keep]], axis=1)

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
