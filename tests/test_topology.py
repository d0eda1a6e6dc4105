"""Topologies, shards and data splits (dpopt.distributed.topology)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpopt.distributed.topology import (
    Topology,
    complete,
    erdos_renyi,
    from_edges,
    grid,
    random_geometric,
    ring,
    ring_with_chords,
    shard_nodes,
    split_rows,
    star,
)
from dpopt.exceptions import InvalidParameterError


def test_basic_graphs_degrees_and_edges() -> None:
    assert ring(5).degrees.tolist() == [2] * 5 and ring(5).n_edges == 5
    assert ring(2).n_edges == 1
    assert complete(5).degrees.tolist() == [4] * 5 and complete(5).n_edges == 10
    assert star(4).degrees.tolist() == [3, 1, 1, 1]
    g = grid(2, 3)
    assert g.n_nodes == 6 and g.n_edges == 7
    assert g.degrees.tolist() == [2, 3, 2, 2, 3, 2]
    assert ring(5).neighbours(0).tolist() == [1, 4]


def test_algebraic_connectivity_of_ring_matches_closed_form() -> None:
    n = 7
    assert ring(n).algebraic_connectivity() == pytest.approx(2 - 2 * math.cos(2 * math.pi / n))
    assert complete(4).algebraic_connectivity() == pytest.approx(4.0)


def test_random_graphs_are_connected_and_seeded() -> None:
    a = erdos_renyi(30, 0.1, rng=3)
    b = erdos_renyi(30, 0.1, rng=3)
    assert np.array_equal(a.edges, b.edges)
    assert a.algebraic_connectivity() > 0
    g = random_geometric(20, 0.4, rng=1)
    assert g.algebraic_connectivity() > 0
    assert "erdos_renyi" in a.summary()["topology"]
    rc = ring_with_chords(10, 5, rng=0)
    assert rc.n_edges == 15 and rc.degrees.min() >= 2
    assert np.array_equal(rc.edges, ring_with_chords(10, 5, rng=0).edges)
    with pytest.raises(InvalidParameterError, match="chords"):
        ring_with_chords(4, 3, rng=0)


def test_from_edges_validation() -> None:
    t = from_edges(3, [(0, 1), (2, 1)])
    assert t.edges.tolist() == [[0, 1], [1, 2]]
    with pytest.raises(InvalidParameterError, match="disconnected"):
        from_edges(4, [(0, 1), (2, 3)])
    with pytest.raises(InvalidParameterError, match="no neighbour"):
        from_edges(3, [(0, 1)])
    with pytest.raises(InvalidParameterError, match="self-loops"):
        from_edges(2, [(0, 0), (0, 1)])
    with pytest.raises(InvalidParameterError, match="more than once"):
        from_edges(2, [(0, 1), (1, 0)])
    with pytest.raises(InvalidParameterError, match="node ids"):
        from_edges(2, [(0, 2)])
    with pytest.raises(InvalidParameterError):
        ring(1)
    with pytest.raises(InvalidParameterError, match="no connected graph"):
        erdos_renyi(20, 0.01, rng=0, max_tries=3)


def test_topology_is_frozen() -> None:
    t = ring(4)
    with pytest.raises(ValueError):
        t.edges[0, 0] = 3
    assert isinstance(t, Topology)


def test_shard_nodes() -> None:
    shards = shard_nodes(10, 3)
    assert [s.tolist() for s in shards] == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
    assert len(shard_nodes(2, 5)) == 2


@pytest.mark.parametrize("how", ["even", "dirichlet", "power_law"])
def test_split_rows_cover_disjoint_deterministic(how: str) -> None:
    parts = split_rows(1000, 7, how=how, rng=4, min_size=20)
    again = split_rows(1000, 7, how=how, rng=4, min_size=20)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    allidx = np.concatenate(parts)
    assert np.array_equal(np.sort(allidx), np.arange(1000))
    assert min(p.size for p in parts) >= 20
    if how == "even":
        assert {p.size for p in parts} <= {142, 143}


def test_split_rows_errors() -> None:
    with pytest.raises(InvalidParameterError, match="empty node"):
        split_rows(5, 10, rng=0)
    with pytest.raises(InvalidParameterError, match="how"):
        split_rows(100, 2, how="bogus", rng=0)  # type: ignore[arg-type]


def test_complete_graph_is_implicit_and_cheap() -> None:
    big = complete(20_000)  # 2·10^8 edges: never materialised
    assert big.is_complete and big.n_edges == 20_000 * 19_999 // 2
    assert big.degrees[:2].tolist() == [19_999, 19_999]
    assert big.neighbours(3)[:4].tolist() == [0, 1, 2, 4]
    assert big.algebraic_connectivity() == 20_000.0
    small = complete(6)
    explicit = from_edges(6, small.edges)
    assert not explicit.is_complete and np.array_equal(explicit.degrees, small.degrees)
    assert small.laplacian().toarray().tolist() == explicit.laplacian().toarray().tolist()
    with pytest.raises(InvalidParameterError, match="no stored neighbour index"):
        big.csr()


def test_sparse_lanczos_connectivity_matches_dense_and_closed_forms() -> None:
    n = 2_000
    # 4 sin²(π/N) is the cancellation-free form of 2 - 2cos(2π/N)
    assert ring(n).algebraic_connectivity() == pytest.approx(4 * math.sin(math.pi / n) ** 2, rel=1e-7)
    g = random_geometric(450, 0.1, rng=3)
    dense = float(np.linalg.eigvalsh(g.laplacian().toarray())[1])
    assert g.algebraic_connectivity() == pytest.approx(dense, rel=1e-8)
    path_grid = grid(30, 15)  # λ₂ of a grid is that of its longer path: 2 - 2cos(π/30)
    assert path_grid.algebraic_connectivity() == pytest.approx(2 - 2 * math.cos(math.pi / 30), rel=1e-8)


def test_summary_never_starts_an_eigen_solve() -> None:
    t = erdos_renyi(50, 0.2, rng=1)
    assert "algebraic_connectivity" not in t.summary()
    assert "algebraic_connectivity" in t.summary(spectral=True)
    assert t.summary()["algebraic_connectivity"] == t.algebraic_connectivity()  # cached now
    assert "algebraic_connectivity" not in t.summary(spectral=False)


def test_sparse_constructors_keep_the_seeded_graphs() -> None:
    # the row-blocked Erdős–Rényi draw and the k-d tree geometric graph give the all-pairs graphs
    g = np.random.default_rng(7)
    iu, ju = np.triu_indices(40, k=1)
    keep = g.random(iu.size) < 0.15
    expected = np.stack([iu[keep], ju[keep]], axis=1)
    assert np.array_equal(erdos_renyi(40, 0.15, rng=7).edges, expected)
    g = np.random.default_rng(2)
    pts = g.random((60, 2))
    iu, ju = np.triu_indices(60, k=1)
    close = np.linalg.norm(pts[iu] - pts[ju], axis=1) < 0.3
    assert np.array_equal(random_geometric(60, 0.3, rng=2).edges, np.stack([iu[close], ju[close]], axis=1))


def test_topology_pickles() -> None:
    import pickle

    for t in (ring(5), complete(7), erdos_renyi(20, 0.3, rng=0)):
        u = pickle.loads(pickle.dumps(t))
        assert u.name == t.name and np.array_equal(u.degrees, t.degrees) and u.is_complete == t.is_complete


def test_huge_topologies_are_refused_before_anything_is_allocated() -> None:
    """ring(10**10) and complete(10**12).degrees used to raise a raw MemoryError, random_geometric(10**8,
    1e-4) to run for minutes and PrivateADMM(ring(10**7)) to refuse only after building the ring."""
    from dpopt.distributed import topology
    from dpopt.distributed.admm import PrivateADMM

    too_many = [
        lambda: ring(10**10),
        lambda: complete(10**12).degrees,
        lambda: random_geometric(10**8, 1e-4, rng=0),
        lambda: PrivateADMM(ring(10**7)),
        lambda: grid(10**4, 10**3),
        lambda: star(10**7),
        lambda: from_edges(10**7, [(0, 1)]),
    ]
    for build in too_many:
        with pytest.raises(InvalidParameterError, match="MAX_NODES"):
            build()
    # within the node cap, the expected edges decide (estimated from n and p or the radius)
    for dense in (lambda: random_geometric(10**6, 0.5, rng=0), lambda: erdos_renyi(10**6, 0.9, rng=0)):
        with pytest.raises(InvalidParameterError, match=r"expected edges.*would need"):
            dense()
    with pytest.raises(InvalidParameterError, match="at most 0 chords"):
        ring_with_chords(3, 1, rng=0)
    # the cap is read at call time: raising it deliberately lets the memory estimate decide
    old = topology.MAX_NODES
    try:
        topology.MAX_NODES = 10**13
        with pytest.raises(InvalidParameterError, match="would need"):
            ring(10**12)
    finally:
        topology.MAX_NODES = old
