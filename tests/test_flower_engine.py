"""The flower engine's message handling: restricted decoding, sites keep their own loaders.

The safety tests need no Flower; the loopback test (skipped without ``flwr``) drives
:class:`FlowerEngine` through Flower's message types with the site handler called in-process,
one fresh program per message as on a SuperNode, and checks bit-identity with the in-process
engine.  The real federation (TLS, node authentication, separate processes) is in
``test_flower_federation.py`` (slow).
"""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from dpopt.datasets import make_logistic
from dpopt.distributed import flower_engine as fe
from dpopt.distributed.admm import PrivateADMM, geometric
from dpopt.distributed.sites import Site, SiteShardSpec
from dpopt.distributed.topology import ring, split_rows


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_safe_loads_refuses_code() -> None:
    with pytest.raises(fe.MessageRefused, match="not allowed"):
        fe.safe_loads(pickle.dumps(_Evil()))


def test_allowed_function_cannot_be_called_while_decoding() -> None:
    from dpopt.distributed.sites import make_site_shard

    class CallFactory:
        def __reduce__(self):
            return (make_site_shard, (SiteShardSpec(sites=(Site("x", loader="os:system", kwargs={"command": "true"}),)),))

    with pytest.raises(fe.MessageRefused, match="call a function"):
        fe.safe_loads(pickle.dumps(CallFactory()))


def test_site_replaces_the_coordinators_loader_and_refuses_foreign_sites() -> None:
    local = {"a": Site("a", loader="/site/a.npz")}
    spec = SiteShardSpec(sites=(Site("a", loader="os:system", kwargs={"command": "true"}),))
    mine = fe._localize_sites(fe.safe_loads(fe.safe_dumps(spec)), local)
    assert mine.sites[0].loader == "/site/a.npz" and dict(mine.sites[0].kwargs) == {}
    with pytest.raises(fe.MessageRefused, match="does not host"):
        fe._localize_sites(SiteShardSpec(sites=(Site("b", loader="/x.npz"),)), local)
    with pytest.raises(fe.MessageRefused, match="factory"):
        fe.handle_site_message("init", {"shard": 0, "factory": "os:system", "spec": fe.safe_dumps(spec)}, [], {}, local)


def test_site_config(tmp_path) -> None:
    p = tmp_path / "site.toml"
    p.write_text('[[site]]\nname = "a"\nloader = "pkg.mod:load"\n[site.kwargs]\nyear = 2024\n')
    assert fe.load_site_config(p)["a"].kwargs == {"year": 2024}
    (tmp_path / "bad.toml").write_text("x = 1\n")
    with pytest.raises(fe.InvalidParameterError, match="site"):
        fe.load_site_config(tmp_path / "bad.toml")


def _loopback(tmp_path, *, site_keys: bool = False):
    """Three sites' files and configs, and a grid that answers with the site handler in-process."""
    pytest.importorskip("flwr")
    from flwr.app import RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1  # outside a ServerApp

    class Ctx:
        def __init__(self, cfg):
            self.node_config, self.state = cfg, RecordDict()

    class LoopbackGrid:
        def __init__(self, configs):
            self.nodes = {100 + i: Ctx({fe.NODE_CONFIG_KEY: str(p)}) for i, p in enumerate(configs)}

        def get_node_ids(self):
            return list(self.nodes)

        def send_and_receive(self, msgs, timeout=None):
            return [fe.client_reply(m, self.nodes[m.metadata.dst_node_id]) for m in msgs]

    tmp_path.mkdir(parents=True, exist_ok=True)
    ds = make_logistic(120, 3, rng=0)
    configs = []
    for k, rows in enumerate(split_rows(120, 3, rng=0)):
        np.savez(tmp_path / f"s{k}.npz", X=ds.X[rows], y=ds.y[rows])
        privacy = f'[privacy]\nnoise_key_file = "s{k}.key"\n' if site_keys else ""
        (tmp_path / f"s{k}.toml").write_text(f'{privacy}[[site]]\nname = "s{k}"\nloader = "{tmp_path / f"s{k}.npz"}"\n')
        configs.append(tmp_path / f"s{k}.toml")
    return LoopbackGrid(configs)


def _admm() -> PrivateADMM:
    return PrivateADMM(ring(3), method="pp", penalty=geometric(0.5, 1.1), theta=0.5,
                       noise_rate=geometric(5.0, 1.05), max_iter=3)  # fmt: skip


REMOTE = [Site(f"s{k}", loader="held-by-the-site") for k in range(3)]


def test_loopback_flower_messages_equal_inprocess(tmp_path) -> None:
    grid = _loopback(tmp_path)
    admm = _admm()
    ref = admm.run([Site(f"s{k}", loader=str(tmp_path / f"s{k}.npz")) for k in range(3)], rng=3, record_models=True)
    res = admm.run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3), record_models=True)
    assert np.array_equal(ref.models, res.models)
    assert ref.models_history is not None and res.models_history is not None
    assert np.array_equal(ref.models_history, res.models_history)
    assert ref.privacy.epsilon == res.privacy.epsilon


def test_site_noise_keys_replace_the_coordinators_key(tmp_path) -> None:
    grid = _loopback(tmp_path, site_keys=True)
    a = _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3), record_models=True)
    b = _admm().run(REMOTE, rng=4, engine=fe.FlowerEngine(grid, n_sites=3), record_models=True)
    assert np.array_equal(a.models_history, b.models_history)  # the coordinator's key is not used
    c = _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(_loopback(tmp_path / "x"), n_sites=3), record_models=True)
    assert not np.array_equal(a.models, c.models)  # the sites' own keys drew the noise
    assert all((tmp_path / f"s{k}.key").stat().st_mode & 0o777 == 0o600 for k in range(3))


def test_a_site_that_does_not_answer_is_named(tmp_path) -> None:
    grid = _loopback(tmp_path)
    inner = grid.send_and_receive
    calls = {"n": 0}

    def lossy(msgs, timeout=None):
        calls["n"] += 1
        replies = inner(msgs, timeout=timeout)
        if calls["n"] < 4:  # discovery, probe start, describe, ... then site s1 goes away
            return replies
        return [r for r, m in zip(replies, msgs, strict=True) if m.metadata.dst_node_id != 101]

    grid.send_and_receive = lossy
    with pytest.raises(fe.EngineError, match=r"site s1 \(shard 1\) did not answer"):
        _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3, timeout=5.0))


class _Crash(Exception):
    pass


def test_a_crashed_coordinator_resumes_on_the_sites(tmp_path) -> None:
    """Coordinator crash after round 2 (last checkpoint: the start; run directory on the coordinator).

    The resume runs over Flower messages with fresh site handlers: rounds 1-2 are replayed with the
    sites' own noise keys and checked against the log; same released rounds as an uninterrupted
    run, one charge."""
    from dpopt.accounting import BasicAccountant

    grid = _loopback(tmp_path / "sites", site_keys=True)
    ref = _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3), record_models=True)

    def crash(info) -> None:
        if info.round == 2:
            raise _Crash

    acc = BasicAccountant(neighbouring="replace_one")
    with pytest.raises(_Crash):
        _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3), checkpoint_dir=tmp_path / "run",
                    checkpoint_every=3, callback=crash, accountant=acc)  # fmt: skip
    fresh = _loopback(tmp_path / "sites", site_keys=True)  # new site processes, same files and keys
    res = _admm().run(REMOTE, rng=None, engine=fe.FlowerEngine(fresh, n_sites=3), checkpoint_dir=tmp_path / "run",
                      resume=True, record_models=True, accountant=acc)  # fmt: skip
    assert any("rounds 1..2 replayed" in n for n in res.privacy.notes), res.privacy.notes
    assert np.array_equal(ref.models_history, res.models_history)
    assert len(acc.ledger) == 1
