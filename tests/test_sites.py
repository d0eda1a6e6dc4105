"""Sites own their data (issue 14 §1): loaders run in the workers, the driver never holds a row."""

from __future__ import annotations

import os
import pickle
from typing import Any

import numpy as np
import pytest

from dpopt.distributed.admm import PrivateADMM, geometric
from dpopt.distributed.engines import EngineError, InProcessEngine, ProcessEngine
from dpopt.distributed.sites import Site, as_sites, load_site, site_groups
from dpopt.distributed.topology import ring
from dpopt.exceptions import InvalidParameterError
from site_loaders import DRIVER_ENV, make_rows

N_NODES = 4
DIM = 3
SIZES = (40, 55, 47, 60)


def _alg() -> PrivateADMM:
    return PrivateADMM(
        ring(N_NODES), method="pp", penalty=geometric(0.5, 1.05), noise_rate=geometric(3.0, 1.01),
        max_iter=5, loss_weight=10.0, reg=1.0, init="normal",
    )  # fmt: skip


def _sites(groups: tuple[str, ...] = ("", "", "", "")) -> list[Site]:
    return [
        Site(
            f"s{i}", loader="site_loaders:guarded", kwargs={"seed": 10 + i, "n_rows": b, "dim": DIM}, group=g
        )
        for i, (b, g) in enumerate(zip(SIZES, groups, strict=True))
    ]


def _pairs() -> list[tuple[np.ndarray, np.ndarray]]:
    return [make_rows(10 + i, b, DIM) for i, b in enumerate(SIZES)]


@pytest.fixture
def driver_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DRIVER_ENV, str(os.getpid()))


@pytest.fixture(scope="module")
def workers():
    """One pair of worker processes for the module (jobs reuse idle workers)."""
    with SpyProcessEngine(2) as eng:
        yield eng


class SpyProcessEngine(ProcessEngine):
    """Records the bytes of everything the driver receives from its workers."""

    received: list[bytes]

    def _read(self, conn: Any, deadline: float) -> Any:
        msg = super()._read(conn, deadline)
        self.received.append(pickle.dumps(msg))
        return msg


def _assert_no_rows(received: list[bytes]) -> None:
    blob = b"".join(received)
    assert blob  # the spy saw the replies
    for x, y in _pairs():
        for row in x[:: max(1, len(x) // 8)]:
            assert row.tobytes() not in blob
        assert y.tobytes() not in blob and x.tobytes()[:64] not in blob


def test_site_description_and_validation(tmp_path) -> None:
    s = Site("hospital-a", loader="site_loaders:make_rows", kwargs={"seed": 1, "n_rows": 5, "dim": 2})
    assert s.resource == "site:hospital-a" and s.group == "hospital-a"
    x, y = s.load()
    assert x.shape == (5, 2) and set(np.unique(y)) <= {-1.0, 1.0}
    for bad in ("", "a b", "x/y", "site:a"):
        with pytest.raises(InvalidParameterError, match="name"):
            Site(bad, loader="site_loaders:make_rows")
    with pytest.raises(InvalidParameterError, match="loader"):
        Site("a", loader="")
    with pytest.raises(InvalidParameterError, match="one Site per node"):
        as_sites(s)
    with pytest.raises(InvalidParameterError, match="mix"):
        as_sites([s, (x, y)])
    with pytest.raises(InvalidParameterError, match="share a name"):
        as_sites([s, s])
    assert as_sites([(x, y)]) is None
    groups = site_groups([Site("a", "m:f", group="g1"), Site("b", "m:f"), Site("c", "m:f", group="g1")])
    assert [g.tolist() for g in groups] == [[0, 2], [1]]
    # file loaders, read where the worker runs; errors name the site, never a value
    np.savez(tmp_path / "a.npz", X=x, y=y)
    np.savetxt(tmp_path / "b.csv", np.column_stack([x, y]), delimiter=",")
    for name in ("a.npz", "b.csv"):
        xf, yf = load_site(Site("f", loader=str(tmp_path / name)))
        assert np.allclose(xf, x) and np.array_equal(yf, y)
    np.savez(tmp_path / "bad.npz", X=x, y=y * 7.25)
    with pytest.raises(InvalidParameterError, match="site bad: labels") as info:
        load_site(Site("bad", loader=str(tmp_path / "bad.npz")))
    assert "7.25" not in str(info.value)
    with pytest.raises(InvalidParameterError, match="does not exist"):
        load_site(Site("m", loader=str(tmp_path / "missing.npz")))
    with pytest.raises(InvalidParameterError, match="cannot import"):
        load_site(Site("m", loader="no_such_module_xyz:f"))


def test_guarded_loader_refuses_the_driver(driver_pid) -> None:
    with pytest.raises(RuntimeError, match="driver's process"):
        _alg().run(_sites(), rng=7, engine="inprocess")


def test_sites_on_processes_engine_never_send_rows_to_the_driver(driver_pid, workers) -> None:
    ref = _alg().run(_pairs(), rng=7, engine=InProcessEngine(1), record_models=True)
    workers.received = []
    res = _alg().run(_sites(("m1", "m1", "m2", "m2")), rng=7, engine=workers, record_models=True)
    assert res.parameters["n_shards"] == 2 and res.parameters["sites"] == ["s0", "s1", "s2", "s3"]
    _assert_no_rows(workers.received)
    # same seed, same released rounds as the in-memory simulation
    assert np.array_equal(ref.models_history, res.models_history)
    assert np.array_equal(ref.node_privacy_history, res.node_privacy_history)
    assert ref.privacy.epsilon == res.privacy.epsilon
    # the sites' diagnostics stay at the sites unless asked for
    assert np.all(np.isnan(res.nonprivate_history["loss"]))
    assert np.all(np.isfinite(res.nonprivate_history["consensus_error"]))
    with pytest.raises(InvalidParameterError, match="site groups"):
        _alg().run(_sites(), rng=7, engine="inprocess", n_shards=2)


def test_site_checks_happen_at_the_site(driver_pid, tmp_path, workers) -> None:
    x, y = make_rows(3, 30, DIM)
    np.savez(tmp_path / "big.npz", X=3.0 * x, y=y)  # row norms up to 3: the site scales them to the bound
    sites = [*_sites()[:3], Site("big", loader=str(tmp_path / "big.npz"))]
    res = _alg().run(sites, rng=7, engine=workers)
    assert np.isfinite(res.privacy.epsilon)
    # in memory the check runs in the caller's own process, and a violation still raises
    with pytest.raises(Exception, match="norm"):
        _alg().run([*_pairs()[:3], (3.0 * x, y)], rng=7, engine="inprocess")
    np.savez(tmp_path / "wide.npz", X=np.zeros((30, DIM + 1)), y=y)
    sites = [*_sites()[:3], Site("wide", loader=str(tmp_path / "wide.npz"))]
    with pytest.raises(InvalidParameterError, match="feature space"):
        _alg().run(sites, rng=7, engine=workers)


class SpyInProcessEngine(InProcessEngine):
    """Records (pickled) everything the sites' shard programs hand back to the driver."""

    def __init__(self) -> None:
        super().__init__(2)
        self.received: list[bytes] = []

    def step(self, t: int) -> list[Any]:
        out = super().step(t)
        self.received.append(pickle.dumps(out))
        return out

    def call(self, name: str, *args: Any) -> list[Any]:
        out = super().call(name, *args)
        self.received.append(pickle.dumps((name, out)))
        return out


def _driver_view(tmp_path, planted: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[bytes], list[bytes]]:
    """What the driver receives from a run whose site 3 holds rows inside the bound, and from the same
    run where two of those rows lie outside it (4x and 8x, which the site maps back onto the bound
    exactly).  ``planted`` adds the old leak: the probe reports whether the rows were within the bound."""
    from dpopt.distributed import sites as sites_mod

    if planted:
        honest = sites_mod.SiteShard.call

        def leaky(self: Any, name: str, *args: Any) -> Any:
            out = honest(self, name, *args)
            if name == "describe":
                for d, (x, _) in zip(out, self.rows, strict=True):
                    d["norm_ok"] = bool(np.linalg.norm(x, axis=1).max() <= 1.0 + 1e-9)
            return out

        monkeypatch.setattr(sites_mod.SiteShard, "call", leaky)
    x, y = make_rows(3, 30, DIM)
    x[0], x[1] = np.eye(DIM)[0], -np.eye(DIM)[1]  # norm exactly 1: on the boundary
    views = []
    for scale, name in ((1.0, "inside"), (None, "outside")):
        xv = x.copy()
        if scale is None:
            xv[0] *= 4.0
            xv[1] *= 8.0  # powers of two: mapping back onto the ball is exact
        np.savez(tmp_path / f"{name}.npz", X=xv, y=y)
        sites = [Site(f"s{i}", loader="site_loaders:make_rows", kwargs={"seed": 10 + i, "n_rows": b, "dim": DIM})
                 for i, b in enumerate(SIZES[:3])]  # fmt: skip
        sites.append(Site("s3", loader=str(tmp_path / f"{name}.npz")))
        eng = SpyInProcessEngine()
        res = _alg().run(sites, rng=11, engine=eng)
        assert np.isfinite(res.privacy.epsilon)
        views.append(eng.received)
    return views[0], views[1]


def test_driver_sees_nothing_about_the_norm_bound(tmp_path, monkeypatch) -> None:
    inside, outside = _driver_view(tmp_path, planted=False, monkeypatch=monkeypatch)
    assert len(inside) > 5 and inside == outside  # byte for byte: the probe and every round
    # power: a site that reports the yes/no (the leak this replaced) is caught by the same comparison
    inside, outside = _driver_view(tmp_path, planted=True, monkeypatch=monkeypatch)
    assert inside != outside


def test_site_loader_error_names_the_site(driver_pid, workers) -> None:
    sites = [*_sites()[:3], Site("broken", loader="site_loaders:no_such_function")]
    with pytest.raises(EngineError, match="site broken"):
        _alg().run(sites, rng=7, engine=workers)


def test_npz_with_object_or_unreadable_arrays_names_the_file_and_key(tmp_path) -> None:
    x = np.zeros((3, 2))
    secret = np.array([{"patient": "value-123"}, 1.5, 2.5], dtype=object)
    np.savez(tmp_path / "obj.npz", X=x, y=secret)  # an object array: loading it would unpickle
    with pytest.raises(
        InvalidParameterError, match=r"site o: obj\.npz: array 'y' is an object array"
    ) as info:
        load_site(Site("o", loader=str(tmp_path / "obj.npz")))
    assert "value-123" not in str(info.value) and "1.5" not in str(info.value)
    (tmp_path / "junk.npz").write_bytes(b"not an archive")
    with pytest.raises(InvalidParameterError, match=r"site j: junk\.npz is not a readable \.npz"):
        load_site(Site("j", loader=str(tmp_path / "junk.npz")))
    np.save(tmp_path / "single.npy", x)
    os.replace(tmp_path / "single.npy", tmp_path / "single.npz")
    with pytest.raises(InvalidParameterError, match=r"must be an \.npz with arrays"):
        load_site(Site("s", loader=str(tmp_path / "single.npz")))
