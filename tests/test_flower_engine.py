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
from dpopt.ledger import Ledger


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
            return (
                make_site_shard,
                (SiteShardSpec(sites=(Site("x", loader="os:system", kwargs={"command": "true"}),)),),
            )

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
        fe.handle_site_message(
            "init", {"shard": 0, "factory": "os:system", "spec": fe.safe_dumps(spec)}, [], {}, local
        )


def test_site_config(tmp_path) -> None:
    p = tmp_path / "site.toml"
    p.write_text('[[site]]\nname = "a"\nloader = "pkg.mod:load"\n[site.kwargs]\nyear = 2024\n')
    assert fe.load_site_config(p)["a"].kwargs == {"year": 2024}
    (tmp_path / "bad.toml").write_text("x = 1\n")
    with pytest.raises(fe.InvalidParameterError, match="site"):
        fe.load_site_config(tmp_path / "bad.toml")


def _loopback(tmp_path, *, site_keys: bool = False, privacy: str = ""):
    """Three sites' files and configs, and a grid that answers with the site handler in-process.

    Like a SuperNode, a site's exception becomes an error reply (Flower's reason format); a node
    can be taken away (``drop``: no replies, not listed) and brought back as a restarted
    SuperNode (``rejoin``: new node id, empty node state, same site.toml and key file).
    """
    pytest.importorskip("flwr")
    from flwr.app import Error, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1  # outside a ServerApp

    class Ctx:
        def __init__(self, cfg):
            self.node_config, self.state = cfg, RecordDict()

    class LoopbackGrid:
        def __init__(self, configs):
            self.configs = configs
            self.nodes = {100 + i: Ctx({fe.NODE_CONFIG_KEY: str(p)}) for i, p in enumerate(configs)}
            self.gone: set[int] = set()
            self.next_id = 200

        def get_node_ids(self):
            return [n for n in self.nodes if n not in self.gone]

        def drop(self, node):
            self.gone.add(node)

        def rejoin(self, k):
            self.nodes[self.next_id] = Ctx({fe.NODE_CONFIG_KEY: str(self.configs[k])})
            self.next_id += 1

        def restart(self, node):  # same node id (same registered key), empty node state
            self.nodes[node] = Ctx(self.nodes[node].node_config)

        def _reply(self, m):
            try:
                return fe.client_reply(m, self.nodes[m.metadata.dst_node_id])
            except Exception as exc:  # what flwr-clientapp does with an exception
                return Message(Error(code=2, reason=str(type(exc)) + ":<'" + str(exc) + "'>"), reply_to=m)

        def send_and_receive(self, msgs, timeout=None):
            return [self._reply(m) for m in msgs if m.metadata.dst_node_id not in self.gone]

    tmp_path.mkdir(parents=True, exist_ok=True)
    ds = make_logistic(120, 3, rng=0)
    configs = []
    for k, rows in enumerate(split_rows(120, 3, rng=0)):
        np.savez(tmp_path / f"s{k}.npz", X=ds.X[rows], y=ds.y[rows])
        lines = ([f'noise_key_file = "s{k}.key"'] if site_keys else []) + ([privacy] if privacy else [])
        head = "[privacy]\n" + "\n".join(lines) + "\n" if lines else ""
        (tmp_path / f"s{k}.toml").write_text(
            f'{head}[[site]]\nname = "s{k}"\nloader = "{tmp_path / f"s{k}.npz"}"\n'
        )
        configs.append(tmp_path / f"s{k}.toml")
    return LoopbackGrid(configs)


def _admm() -> PrivateADMM:
    return PrivateADMM(ring(3), method="pp", penalty=geometric(0.5, 1.1), theta=0.5,
                       noise_rate=geometric(5.0, 1.05), max_iter=3)  # fmt: skip


REMOTE = [Site(f"s{k}", loader="held-by-the-site") for k in range(3)]


def test_loopback_flower_messages_equal_inprocess(tmp_path) -> None:
    grid = _loopback(tmp_path)
    admm = _admm()
    ref = admm.run(
        [Site(f"s{k}", loader=str(tmp_path / f"s{k}.npz")) for k in range(3)], rng=3, record_models=True
    )
    engine = fe.FlowerEngine(grid, n_sites=3)
    res = admm.run(REMOTE, rng=3, engine=engine, record_models=True)
    assert np.array_equal(ref.models, res.models)
    # one message round per start-up and per ADMM round: "describe" and "snapshot" come with the replies
    assert [w for w, _ in engine.message_rounds] == [
        "hello",
        "start-up",
        "start-up",
        "round 1",
        "round 2",
        "round 3",
    ]
    assert ref.models_history is not None and res.models_history is not None
    assert np.array_equal(ref.models_history, res.models_history)
    assert ref.privacy.epsilon == res.privacy.epsilon


def test_site_noise_keys_replace_the_coordinators_key(tmp_path) -> None:
    """A site's noise key is derived from its secret and the run key: the same run replays the
    same noise, another run draws other noise, and the coordinator's key alone does not give it."""

    def run(grid, rng):
        return _admm().run(REMOTE, rng=rng, engine=fe.FlowerEngine(grid, n_sites=3), record_models=True)

    a = run(_loopback(tmp_path, site_keys=True), 3)
    again = run(_loopback(tmp_path, site_keys=True), 3)  # new site processes, same key files
    assert np.array_equal(a.models_history, again.models_history)
    other_run = run(_loopback(tmp_path, site_keys=True), 4)
    assert not np.array_equal(a.models_history[1], other_run.models_history[1])
    other_sites = run(
        _loopback(tmp_path / "x", site_keys=True), 3
    )  # same coordinator key, other site secrets
    assert not np.array_equal(a.models_history[1], other_sites.models_history[1])
    no_keys = run(_loopback(tmp_path / "y"), 3)
    assert not np.array_equal(a.models_history[1], no_keys.models_history[1])
    assert all((tmp_path / f"s{k}.key").stat().st_mode & 0o777 == 0o600 for k in range(3))


def test_a_site_never_reuses_a_noise_draw_for_another_release(tmp_path) -> None:
    """Same run key, same job: a replay, not charged again.  Same run key, another job: the site
    refuses (the same noise on two different values would reveal their difference)."""
    grid = _loopback(tmp_path, privacy="budget = 50.0")
    _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3))
    _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3))
    ledger = Ledger("sqlite:///" + str(tmp_path / "dpopt-site-ledger.db"))
    assert [len(ledger.history(f"s{k}")) for k in range(3)] == [3, 3, 3]
    other = PrivateADMM(ring(3), method="pp", penalty=geometric(0.5, 1.1), theta=0.5,
                        noise_rate=geometric(4.0, 1.05), max_iter=3)  # fmt: skip
    with pytest.raises(fe.EngineError, match=r"site s0: refuses round 1: its noise was already used"):
        other.run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3))
    assert [len(ledger.history(f"s{k}")) for k in range(3)] == [3, 3, 3]
    other.run(REMOTE, rng=5, engine=fe.FlowerEngine(grid, n_sites=3))  # a new run key: fine
    assert [len(ledger.history(f"s{k}")) for k in range(3)] == [6, 6, 6]


def test_a_site_that_does_not_answer_is_named(tmp_path) -> None:
    grid = _loopback(tmp_path)
    inner = grid.send_and_receive

    def lossy(msgs, timeout=None):  # site s1 stops answering rounds
        replies = inner(msgs, timeout=timeout)
        return [r for r, m in zip(replies, msgs, strict=True)
                if m.metadata.dst_node_id != 101 or m.content["cfg"]["op"] != "step"]  # fmt: skip

    grid.send_and_receive = lossy
    # its SuperNode still answers, so each restart finds it; after max_recoveries the run stops
    with pytest.raises(fe.EngineError, match=r"site s1 \(shard 1\) did not answer within 5 s during round 1 "
                                             r"\[sites s1; round 1\]"):  # fmt: skip
        _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3, timeout=5.0, rejoin_timeout=0))


def test_a_lost_site_that_rejoins_replays_the_same_noise(tmp_path) -> None:
    """Site s1's SuperNode disappears during round 3 and restarts (new node id, empty node state):
    the run waits, restarts the shards from the checkpoint of round 0 and replays rounds 1-2 with
    the sites' own keys: same released rounds as an uninterrupted run, and the sites' ledgers
    charge each round once."""
    privacy = "budget = 50.0"
    ref = _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(_loopback(tmp_path / "a", site_keys=True), n_sites=3),
                      record_models=True)  # fmt: skip
    grid = _loopback(tmp_path / "b", site_keys=True, privacy=privacy)
    for k in range(3):  # the same site keys as the reference run
        (tmp_path / "b" / f"s{k}.key").write_bytes((tmp_path / "a" / f"s{k}.key").read_bytes())
    inner = grid.send_and_receive
    seen = {"steps": 0, "polls": 0}

    def flaky(msgs, timeout=None):
        if any(m.content["cfg"]["op"] == "step" for m in msgs):
            seen["steps"] += 1
            if seen["steps"] == 3:
                grid.drop(101)  # SuperNode of s1 dies before answering round 3
        if 101 in grid.gone and any(m.content["cfg"]["op"] == "hello" for m in msgs):
            seen["polls"] += 1
            if seen["polls"] == 2 and len(grid.nodes) == 3:
                grid.rejoin(1)  # restarted by its operator
        return inner(msgs, timeout=timeout)

    grid.send_and_receive = flaky
    engine = fe.FlowerEngine(grid, n_sites=3, rejoin_timeout=60.0)
    res = _admm().run(REMOTE, rng=3, engine=engine, record_models=True)
    assert any("recovered from the checkpoint of round 0" in n for n in res.privacy.notes), res.privacy.notes
    assert seen["polls"] >= 2 and 200 in grid.get_node_ids()
    assert np.array_equal(ref.models_history, res.models_history)
    ledger = Ledger("sqlite:///" + str(tmp_path / "b" / "dpopt-site-ledger.db"))
    for k in range(3):
        assert len(ledger.history(f"s{k}")) == 3  # rounds 1-2 replayed, not charged twice
        assert ledger.spent(f"s{k}").epsilon == pytest.approx(res.node_privacy[k], rel=1e-12)


def test_a_site_restarted_between_rounds_is_restarted_from_the_checkpoint(tmp_path) -> None:
    """Site s2's SuperNode restarts with the same node id between rounds 2 and 3 (its node state is
    gone): round 3 finds no shard there, and the run restarts from the checkpoint as for a lost site."""
    ref = _admm().run(
        REMOTE, rng=3, engine=fe.FlowerEngine(_loopback(tmp_path / "a"), n_sites=3), record_models=True
    )
    grid = _loopback(tmp_path / "b")
    inner = grid.send_and_receive
    seen = {"steps": 0}

    def restarting(msgs, timeout=None):
        if any(m.content["cfg"]["op"] == "step" for m in msgs):
            seen["steps"] += 1
            if seen["steps"] == 3:
                grid.restart(102)
        return inner(msgs, timeout=timeout)

    grid.send_and_receive = restarting
    res = _admm().run(
        REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3, rejoin_timeout=10.0), record_models=True
    )
    assert any("recovered from the checkpoint of round 0" in n for n in res.privacy.notes), res.privacy.notes
    assert np.array_equal(ref.models_history, res.models_history)


def test_a_lost_site_that_does_not_rejoin_stops_the_run_in_bounded_time(tmp_path) -> None:
    import time

    grid = _loopback(tmp_path)
    inner = grid.send_and_receive

    def dying(msgs, timeout=None):
        if any(m.content["cfg"]["op"] == "step" and m.content["cfg"]["t"] == 1 for m in msgs):
            grid.drop(102)
        return inner(msgs, timeout=timeout)

    grid.send_and_receive = dying
    began = time.monotonic()
    with pytest.raises(
        fe.EngineError, match=r"site\(s\) s2 lost at round 2 did not rejoin within rejoin_timeout=1 s"
    ):
        _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3, rejoin_timeout=1.0))
    assert time.monotonic() - began < 30


# ----------------------------------------------------------------------------------------------
# Each site's own privacy ledger and budget cap
# ----------------------------------------------------------------------------------------------


def test_sites_record_each_round_in_their_own_ledger_before_its_noise(tmp_path, monkeypatch) -> None:
    from dpopt.distributed import _admm_node

    grid = _loopback(tmp_path, privacy='budget = 50.0\nledger = "site.db"')
    ledger = Ledger("sqlite:///" + str(tmp_path / "site.db"), create=True)
    draws: list[tuple[int, int, int]] = []
    real = _admm_node.l2_laplace_block

    def watched(rates, dim, key, round_, purpose, nodes):
        for node in np.asarray(nodes).tolist():  # the round is in the node's ledger before its noise
            recorded = len(ledger.history(f"s{node}"))
            draws.append((node, round_, recorded))
            assert recorded >= round_, f"node {node}: round {round_} noise drawn before it was recorded"
        return real(rates, dim, key, round_, purpose, nodes)

    monkeypatch.setattr(_admm_node, "l2_laplace_block", watched)
    engine = fe.FlowerEngine(grid, n_sites=3)
    res = _admm().run(REMOTE, rng=3, engine=engine)
    assert sorted({(n, r) for n, r, _ in draws}) == [(n, r) for n in range(3) for r in (1, 2, 3)]
    for k in range(3):
        hist = ledger.history(f"s{k}")
        assert [h.label.split(" (")[0].rsplit(" ", 1)[-1] for h in hist] == ["1", "2", "3"]
        # the site's own computation agrees with the coordinator's per-node bound
        assert ledger.spent(f"s{k}").epsilon == pytest.approx(res.node_privacy[k], rel=1e-12)
        assert engine.site_plans[f"s{k}"] == pytest.approx(res.node_privacy[k], rel=1e-12)


def test_a_site_refuses_a_run_over_its_cap_before_any_round(tmp_path) -> None:
    plan = _admm().privacy_bound([40, 40, 40])[-1]  # split_rows(120, 3): 40 rows per site
    grid = _loopback(tmp_path, privacy=f"budget = {0.5 * float(plan.max()):.6g}")
    with pytest.raises(fe.EngineError, match=r"site s0 \(shard 0\) failed during start-up: BudgetExceededError: "
                                             r"site s0: refuses the run: its planned per-node privacy"):  # fmt: skip
        _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3))
    ledger = Ledger("sqlite:///" + str(tmp_path / "dpopt-site-ledger.db"))
    assert all(len(ledger.history(f"s{k}")) == 0 for k in range(3))


def test_a_site_refuses_the_round_that_would_exceed_its_cap(tmp_path) -> None:
    """Another job spends on site s1 during the run: s1 refuses round 3 and the run stops there."""
    from dpopt.accounting import EpsilonDeltaEvent

    grid = _loopback(tmp_path, privacy="budget = 1.0")  # the run's plan, P(T) = 0.386, fits
    ledger = Ledger("sqlite:///" + str(tmp_path / "dpopt-site-ledger.db"), create=True)

    def other_job(info) -> None:
        if info.round == 2:
            spent = ledger.spent("s1").epsilon
            ledger.accountant("s1").compose(EpsilonDeltaEvent(0.99 - spent, 0.0), label="another job")

    with pytest.raises(fe.EngineError, match=r"site s1 \(shard 1\) failed during round 3: BudgetExceededError: "
                                             r"site s1: refuses round 3: its per-node privacy would reach"):  # fmt: skip
        _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3), callback=other_job)
    assert len(ledger.history("s1")) == 3  # rounds 1, 2 and the other job; round 3 was not recorded
    assert ledger.spent("s1").epsilon == pytest.approx(0.99)


def test_a_site_that_pins_its_feature_bound_refuses_smaller_constants_never_its_rows(tmp_path) -> None:
    from dpopt.problems import DataBounds, ERMProblem

    grid = _loopback(tmp_path, privacy="budget = 50.0\nfeature_norm = 2.0")
    with pytest.raises(fe.EngineError, match=r"site s0: refuses the job: its privacy constants are smaller"):
        _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3))
    # a pin below the rows' norms: the site runs (rows mapped onto the job's ball), and what the
    # coordinator receives is exactly what it receives from sites without the pin -- a refusal
    # that depended on the rows would be a bit about them outside the guarantee
    job = PrivateADMM(ring(3), method="pp", penalty=geometric(0.5, 1.1), theta=0.5, noise_rate=geometric(5.0, 1.05),
                      max_iter=3, problem=ERMProblem("logistic", DataBounds(feature_norm=1.0), l2_penalty=1e-2))  # fmt: skip
    pinned = job.run(REMOTE, rng=3, record_models=True,
                     engine=fe.FlowerEngine(_loopback(tmp_path / "x", privacy="budget = 50.0\nfeature_norm = 0.1"),
                                            n_sites=3))  # fmt: skip
    plain = job.run(
        REMOTE,
        rng=3,
        record_models=True,
        engine=fe.FlowerEngine(_loopback(tmp_path / "y", privacy="budget = 50.0"), n_sites=3),
    )
    assert pinned.models_history is not None and plain.models_history is not None
    assert np.array_equal(pinned.models_history, plain.models_history)


def test_site_policy_is_checked(tmp_path) -> None:
    p = tmp_path / "site.toml"
    for bad, what in (
        ("budget = -1", "positive"),
        ('ledger = "x.db"', "needs budget"),
        ("bugdet = 1", "unknown"),
    ):
        p.write_text(f'[privacy]\n{bad}\n[[site]]\nname = "a"\nloader = "a.npz"\n')
        with pytest.raises(fe.InvalidParameterError, match=what):
            fe.load_site_policy(p)


def test_a_long_lived_site_worker_answers_for_the_clientapp_processes(tmp_path, monkeypatch) -> None:
    """Each site's ``dpopt site serve`` runs a worker (here a thread per site) that keeps the rows
    and programs between messages; the ClientApp hands every request to it over its Unix socket."""
    import secrets
    import threading

    grid = _loopback(tmp_path, privacy="budget = 50.0")
    workers = {}
    for node, ctx in grid.nodes.items():
        address, key, ready = str(tmp_path / f"w{node}.sock"), secrets.token_bytes(32), threading.Event()
        threading.Thread(target=fe.serve_site_worker, args=(ctx.node_config[fe.NODE_CONFIG_KEY], address, key),
                         kwargs={"ready": ready}, daemon=True, name="dpopt-site-worker").start()  # fmt: skip
        assert ready.wait(30)
        workers[node] = (address, key.hex())
    where: list[str] = []
    real_request = fe._site_request

    def recording(config, request):
        where.append(threading.current_thread().name)
        return real_request(config, request)

    monkeypatch.setattr(fe, "_site_request", recording)
    reply = grid._reply

    def via_worker(m):  # the SuperNode of node m's site was started with its worker's address and key
        monkeypatch.setenv(fe.WORKER_ENV, workers[m.metadata.dst_node_id][0])
        monkeypatch.setenv(fe.WORKER_KEY_ENV, workers[m.metadata.dst_node_id][1])
        return reply(m)

    grid._reply = via_worker
    ref = _admm().run(
        [Site(f"s{k}", loader=str(tmp_path / f"s{k}.npz")) for k in range(3)], rng=3, record_models=True
    )
    res = _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3), record_models=True)
    assert np.array_equal(ref.models_history, res.models_history)
    assert where and set(where) == {"dpopt-site-worker"}  # every request was answered by a worker
    assert oct(os.stat(workers[100][0]).st_mode & 0o777) == "0o600"
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Client

    with pytest.raises(AuthenticationError):  # a process without the site's key is refused
        Client(workers[100][0], family="AF_UNIX", authkey=b"wrong key")


class _Crash(Exception):
    pass


def test_a_crashed_coordinator_resumes_on_the_sites(tmp_path) -> None:
    """Coordinator crash after round 2 (last checkpoint: the start; run directory on the coordinator).

    The resume runs over Flower messages with fresh site handlers: rounds 1-2 are replayed with the
    sites' own noise keys and checked against the log; same released rounds as an uninterrupted
    run, one charge."""
    from dpopt.accounting import BasicAccountant

    ref = _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(_loopback(tmp_path / "sites", site_keys=True), n_sites=3),
                      record_models=True)  # fmt: skip
    grid = _loopback(tmp_path / "sites", site_keys=True, privacy="budget = 50.0")

    def crash(info) -> None:
        if info.round == 2:
            raise _Crash

    acc = BasicAccountant(neighbouring="replace_one")
    with pytest.raises(_Crash):
        _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3), checkpoint_dir=tmp_path / "run",
                    checkpoint_every=3, callback=crash, accountant=acc)  # fmt: skip
    fresh = _loopback(
        tmp_path / "sites", site_keys=True, privacy="budget = 50.0"
    )  # new site processes, same files
    res = _admm().run(REMOTE, rng=None, engine=fe.FlowerEngine(fresh, n_sites=3), checkpoint_dir=tmp_path / "run",
                      resume=True, record_models=True, accountant=acc)  # fmt: skip
    assert any("rounds 1..2 replayed" in n for n in res.privacy.notes), res.privacy.notes
    assert np.array_equal(ref.models_history, res.models_history)
    assert len(acc.ledger) == 1
    sites_ledger = Ledger("sqlite:///" + str(tmp_path / "sites" / "dpopt-site-ledger.db"))
    for k in range(3):  # the sites charged each round once, the replayed ones included
        assert len(sites_ledger.history(f"s{k}")) == 3
        assert sites_ledger.spent(f"s{k}").epsilon == pytest.approx(res.node_privacy[k], rel=1e-12)


def test_site_worker_waits_are_bounded(tmp_path, monkeypatch) -> None:
    """A silent client does not block the site worker, and a ClientApp never waits forever for it."""
    import os
    import threading
    from multiprocessing.connection import Client, Listener

    monkeypatch.setattr(fe, "WORKER_READ_TIMEOUT", 0.5)
    key = os.urandom(16)
    address = str(tmp_path / "w.sock")
    ready = threading.Event()
    threading.Thread(target=fe.serve_site_worker, args=(tmp_path / "missing.toml", address, key),
                     kwargs={"ready": ready}, daemon=True).start()  # fmt: skip
    assert ready.wait(30)
    with Client(address, family="AF_UNIX", authkey=key):  # connects and says nothing
        monkeypatch.setenv(fe.WORKER_ENV, address)
        monkeypatch.setenv(fe.WORKER_KEY_ENV, key.hex())
        answers: list[str] = []

        def ask() -> None:
            try:
                fe._ask_worker(("hello",))
            except RuntimeError as exc:  # the worker's answer to a request it cannot serve
                answers.append(str(exc))

        asker = threading.Thread(target=ask, daemon=True)
        asker.start()
        asker.join(20)  # without the worker's read limit, the next client would wait forever
        assert answers and answers[0].startswith("site worker: ") and "no answer" not in answers[0]
    # a worker that accepts and never answers: the ClientApp gives up after its limit
    monkeypatch.setattr(fe, "WORKER_REPLY_TIMEOUT", 0.5)
    mute = str(tmp_path / "mute.sock")
    with Listener(mute, family="AF_UNIX", authkey=key) as listener:
        held = []
        threading.Thread(target=lambda: held.append(listener.accept()), daemon=True).start()
        monkeypatch.setenv(fe.WORKER_ENV, mute)
        with pytest.raises(RuntimeError, match=r"no answer within 0.5 s"):
            fe._ask_worker(("hello",))


def test_site_worker_handshake_is_bounded(tmp_path, monkeypatch) -> None:
    """A process that opens the worker's socket and never answers the authentication challenge is
    dropped after WORKER_HANDSHAKE_TIMEOUT; the next ClientApp is served.  And a ClientApp whose
    "worker" never sends the challenge gives up instead of waiting forever."""
    import socket
    import threading

    monkeypatch.setattr(fe, "WORKER_HANDSHAKE_TIMEOUT", 0.5)
    key = os.urandom(16)
    address = str(tmp_path / "w.sock")
    ready = threading.Event()
    threading.Thread(target=fe.serve_site_worker, args=(tmp_path / "missing.toml", address, key),
                     kwargs={"ready": ready}, daemon=True).start()  # fmt: skip
    assert ready.wait(30)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        mute.connect(address)  # opens the socket, never answers the challenge
        monkeypatch.setenv(fe.WORKER_ENV, address)
        monkeypatch.setenv(fe.WORKER_KEY_ENV, key.hex())
        answers: list[object] = []

        def ask() -> None:
            try:
                answers.append(fe._ask_worker(("hello",)))
            except RuntimeError as exc:  # the worker's answer to a request it cannot serve
                answers.append(str(exc))

        asker = threading.Thread(target=ask, daemon=True)
        asker.start()
        asker.join(20)
        assert answers and str(answers[0]).startswith("site worker: ")  # served by the worker, not timed out
    # the other direction: a socket that accepts and never sends the challenge
    silent = str(tmp_path / "silent.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(silent)
        listener.listen()
        monkeypatch.setenv(fe.WORKER_ENV, silent)
        done: list[object] = []
        t = threading.Thread(target=lambda: done.append(fe._ask_worker(("hello",))), daemon=True)
        t.start()
        t.join(20)
        assert done == [None]  # no worker reachable: the ClientApp answers by itself


# ----------------------------------------------------------------------------------------------
# A site's own privacy schedule (site.toml), never sent to the coordinator
# ----------------------------------------------------------------------------------------------

SITE_KEY = (123456789, 987654321)
OWN = {
    0: "penalty = 0.7\npenalty_ratio = 1.2\nnoise_rate = 4.0\nnoise_ratio = 1.1",
    1: "epsilon = 0.8\nnoise_ratio = 1.02",
}


def _own_schedules(tmp_path):
    """Sites s0 (own η and α) and s1 (own ε target, α derived on the site) keep their schedules;
    s2 uses the job's.  All three share one site key file (so that the in-process engine, which
    has one key, can draw the same noise)."""
    grid = _loopback(tmp_path)
    for k in range(3):
        (tmp_path / f"s{k}.key").write_text(f"{SITE_KEY[0]} {SITE_KEY[1]}\n")
        own = f"[privacy.schedule]\n{OWN[k]}\n" if k in OWN else ""
        (tmp_path / f"s{k}.toml").write_text(
            f'[privacy]\nnoise_key_file = "s{k}.key"\nbudget = 50.0\nledger = "s{k}.db"\n{own}'
            f'[[site]]\nname = "s{k}"\nloader = "{tmp_path / f"s{k}.npz"}"\n'
        )
    return grid


def _payload(message) -> bytes:
    """Everything a Flower message carries, as bytes (arrays raw, numbers in both byte orders)."""
    import struct

    if message.has_error():
        return message.error.reason.encode()
    out = []
    for record in message.content.config_records.values():
        for v in record.values():
            for item in v if isinstance(v, list) else [v]:
                if isinstance(item, bytes):
                    out.append(item)
                elif isinstance(item, str):
                    out.append(item.encode())
                elif isinstance(item, float):
                    out += [struct.pack("<d", item), struct.pack(">d", item)]
    for record in message.content.array_records.values():
        out += [a.numpy().tobytes() for a in record.values()]
    return b"|".join(out)


def _found(blob: bytes, values) -> list[float]:
    """The values (float64) whose 8 bytes occur in ``blob``, little- or big-endian (pickled floats)."""
    import struct

    return [
        float(v) for v in np.ravel(values) if struct.pack("<d", v) in blob or struct.pack(">d", v) in blob
    ]


def test_a_site_keeps_its_own_schedule_from_the_coordinator(tmp_path, monkeypatch) -> None:
    """Two sites set their own penalty and noise schedules in site.toml (one as an ε target).  The
    released rounds equal the in-process engine's run with those schedules, bit for bit; the
    per-node bounds are the sites' figures; and no message the coordinator receives or sends, no
    file of its run directory and nothing in its result holds a value of those schedules (the
    check finds them once a planted bug puts them in the sites' snapshot)."""
    from dpopt.accounting import Budget
    from dpopt.distributed import admm as admm_mod
    from dpopt.distributed.admm_privacy import calibrate_noise_rate
    from dpopt.distributed.schedules import geometric as geo

    traffic: list[bytes] = []

    def tapped(grid):  # records every message the coordinator sends and receives
        inner = grid.send_and_receive

        def tap(msgs, timeout=None):
            replies = inner(msgs, timeout=timeout)
            traffic.extend(_payload(m) for m in [*msgs, *replies])
            return replies

        grid.send_and_receive = tap
        return grid

    grid = tapped(_own_schedules(tmp_path / "sites"))
    engine = fe.FlowerEngine(grid, n_sites=3)
    res = _admm().run(REMOTE, rng=3, engine=engine, record_models=True, checkpoint_dir=tmp_path / "run")

    # the reference: the in-process engine given the sites' schedules (and the sites' noise key)
    job = _admm()
    eta = geo([0.7, 0.5, 0.5], [1.2, 1.1, 1.1]).table(3, 3)
    a1 = calibrate_noise_rate(Budget(0.8 / 1.01, 0.0), penalty=eta[:, [1]], degrees=[2.0], sizes=[40.0], ratio=1.02,
                              reg_per_node=job.reg / 3, c1=job._consts.c1, lipschitz=job._consts.lipschitz)  # fmt: skip
    alpha = geo([4.0, a1, 5.0], [1.1, 1.02, 1.05]).table(3, 3)
    ref_job = PrivateADMM(ring(3), method="pp", penalty=eta, theta=0.5, noise_rate=alpha, max_iter=3)
    real_key = admm_mod._draw_key
    monkeypatch.setattr(admm_mod, "_draw_key", lambda g: fe.derive_noise_key(SITE_KEY, real_key(g)))
    local = [Site(f"s{k}", loader=str(tmp_path / "sites" / f"s{k}.npz")) for k in range(3)]
    ref = ref_job.run(local, rng=3, record_models=True)
    monkeypatch.setattr(admm_mod, "_draw_key", real_key)
    assert np.array_equal(ref.models_history, res.models_history)
    assert res.node_privacy == pytest.approx(ref.node_privacy, rel=1e-12)
    assert res.privacy.epsilon == pytest.approx(ref.privacy.epsilon, rel=1e-12)
    assert res.parameters["site_schedules"] == ["s0", "s1"]
    assert any("ran their own penalty and noise schedules" in n for n in res.privacy.notes)
    for k in range(3):  # the per-node report is what each site's own ledger holds
        ledger = Ledger("sqlite:///" + str(tmp_path / "sites" / f"s{k}.db"))
        assert ledger.spent(f"s{k}").epsilon == pytest.approx(res.node_privacy[k], rel=1e-12)
    # the job's own bound for s0 and s1 is not what was run
    assert not np.allclose(job.privacy_bound([40, 40, 40])[-1][:2], res.node_privacy[:2])

    # what the coordinator saw and stored holds none of the sites' schedule values
    beta = ref_job._inexact_rate_table(np.full(3, 40.0), alpha)
    assert beta is not None
    secret = np.concatenate([eta[:, 0], alpha[:, :2].ravel(), beta[:, :2].ravel()])
    stored = b"|".join(p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert stored and traffic
    assert _found(b"|".join(traffic), secret) == []
    assert _found(stored, secret) == []
    assert _found(pickle.dumps((dict(res.parameters), res.privacy.notes)), secret) == []
    assert len(_found(b"|".join(traffic), job.penalty_table()[:, 2])) == 3  # the check sees what is sent

    # a crashed coordinator resumes from its run directory (which holds no schedule): same rounds
    def crash(info) -> None:
        if info.round == 2:
            raise _Crash

    with pytest.raises(_Crash):
        _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(_own_schedules(tmp_path / "sites"), n_sites=3),
                    checkpoint_dir=tmp_path / "run2", checkpoint_every=3, callback=crash)  # fmt: skip
    resumed = _admm().run(REMOTE, rng=None, engine=fe.FlowerEngine(_own_schedules(tmp_path / "sites"), n_sites=3),
                          checkpoint_dir=tmp_path / "run2", resume=True, record_models=True)  # fmt: skip
    assert np.array_equal(ref.models_history, resumed.models_history)
    assert np.array_equal(res.node_privacy, resumed.node_privacy)
    ledger = Ledger("sqlite:///" + str(tmp_path / "sites" / "s0.db"))
    assert (
        len(ledger.history("s0")) == 3
    )  # same run key (rng=3) as the first run: identical releases, charged once
    # power: a planted bug (sites put their penalty table into the snapshot they return) is found
    real_snapshot = fe._snapshot

    def leaky(program):
        snap = real_snapshot(program)
        return None if snap is None else {**snap, "eta": program.program.spec.penalty}

    monkeypatch.setattr(fe, "_snapshot", leaky)
    traffic.clear()
    _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(tapped(_own_schedules(tmp_path / "leaky")), n_sites=3))
    assert len(_found(b"|".join(traffic), eta[:, 0])) == 3


def test_a_site_schedule_is_checked(tmp_path) -> None:
    """No schedule without the site's own noise key; a site with its own schedule refuses a job
    without noise, and an η below the job's θ; the coordinator names the site."""
    p = tmp_path / "site.toml"
    for bad, what in (("[privacy.schedule]\nnoise_rate = 3.0", "needs noise_key_file"),
                      ('noise_key_file = "k"\n[privacy.schedule]\npenalty = 1.0', "exactly one of"),
                      ('noise_key_file = "k"\n[privacy.schedule]\nnoise_rate = 1\nepsilon = 1', "exactly one of"),
                      ('noise_key_file = "k"\n[privacy.schedule]\nnoise_rate = -1', "positive"),
                      ('noise_key_file = "k"\n[privacy.schedule]\nnoise = 1', "unknown")):  # fmt: skip
        p.write_text(f'[privacy]\n{bad}\n[[site]]\nname = "a"\nloader = "a.npz"\n')
        with pytest.raises(fe.InvalidParameterError, match=what):
            fe.load_site_policy(p)
    grid = _own_schedules(tmp_path / "a")
    nonprivate = PrivateADMM(ring(3), method="m-admm", penalty=geometric(0.5, 1.1), theta=0.5, max_iter=3)
    with pytest.raises(fe.InvalidParameterError, match=r"site\(s\) s0, s1 keep their own privacy schedule"):
        nonprivate.run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3))
    (tmp_path / "a" / "s0.toml").write_text(
        (tmp_path / "a" / "s0.toml").read_text().replace("penalty = 0.7", "penalty = 0.3")
    )
    with pytest.raises(fe.EngineError, match=r"site s0 \(shard 0\) failed during start-up: MessageRefused: site s0: "
                                             r"refuses the job: its own penalty"):  # fmt: skip
        _admm().run(REMOTE, rng=3, engine=fe.FlowerEngine(grid, n_sites=3))


def test_the_serverapp_says_how_to_make_the_job_importable(tmp_path, monkeypatch) -> None:
    """The job module is imported in the ServerApp process (started by the SuperLink): a module not
    on its path is named with what to do, and a job module's own missing import keeps its error."""
    from dpopt.distributed.flower_job import load_job
    from dpopt.exceptions import InvalidParameterError

    with pytest.raises(
        InvalidParameterError, match=r"job module 'guide_job_absent' is not importable.*PYTHONPATH"
    ):
        load_job("guide_job_absent:job")
    (tmp_path / "guide_job_broken.py").write_text("import guide_job_dependency_absent\n")
    (tmp_path / "guide_job_ok.py").write_text("def job():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="guide_job_dependency_absent"):
        load_job("guide_job_broken:job")
    with pytest.raises(InvalidParameterError, match="no function 'nojob'"):
        load_job("guide_job_ok:nojob")
    assert load_job("guide_job_ok:job")() == 1
