"""Engines (dpopt.distributed.engines): same seed, same bits on every engine; worker failures."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from dpopt.datasets import make_logistic
from dpopt.distributed.admm import ADMMResult, PrivateADMM, geometric
from dpopt.distributed.engines import (
    EngineError,
    InProcessEngine,
    ProcessEngine,
    make_engine,
    ray_available,
)
from dpopt.distributed.topology import erdos_renyi, split_rows
from dpopt.exceptions import InvalidParameterError

N_NODES = 7


@pytest.fixture(scope="module")
def problem() -> tuple[PrivateADMM, list]:
    ds = make_logistic(700, 6, rng=0)
    parts = split_rows(700, N_NODES, how="dirichlet", rng=1, min_size=20)
    data = [(ds.X[p], ds.y[p]) for p in parts]
    alg = PrivateADMM(
        erdos_renyi(N_NODES, 0.4, rng=5),
        method="pp",
        penalty=geometric(0.5, 1.05),
        noise_rate=geometric(3.0, 1.01),
        max_iter=10,
        loss_weight=10.0,
        reg=1.0,
        init="normal",
    )
    return alg, data


@pytest.fixture(scope="module")
def reference(problem) -> ADMMResult:
    alg, data = problem
    return alg.run(data, rng=7, record_models=True)


def _assert_same(a: ADMMResult, b: ADMMResult) -> None:
    assert np.array_equal(a.models, b.models)
    assert np.array_equal(a.node_privacy_history, b.node_privacy_history)
    if a.models_history is not None and b.models_history is not None:
        assert np.array_equal(a.models_history, b.models_history)


@pytest.mark.parametrize("n_shards", [2, 3, N_NODES])
def test_inprocess_shards_bit_identical(problem, reference, n_shards) -> None:
    alg, data = problem
    _assert_same(reference, alg.run(data, rng=7, engine=InProcessEngine(n_shards), record_models=True))


def test_processes_engine_bit_identical_and_recovers(problem, reference) -> None:
    alg, data = problem
    with ProcessEngine(2) as eng:
        killed: list[int] = []

        def kill_at_round_6(info) -> None:
            if info.round == 6 and not killed:
                killed.append(eng.pids[1])
                os.kill(eng.pids[1], signal.SIGKILL)

        res = alg.run(
            data, rng=7, engine=eng, checkpoint_every=4, callback=kill_at_round_6, record_models=True
        )
        assert killed and res.parameters["recoveries"] == 1
        assert res.parameters["engine"] == "processes"
        assert any("recovered from the checkpoint of round 4" in n for n in res.privacy.notes)
        _assert_same(reference, res)  # the replay released exactly the same values
        pids = eng.pids
        # an error raised by the shard program is reported (not retried): inexact local solves
        strict = PrivateADMM(
            alg.topology,
            method="pp",
            noise_rate=3.0,
            max_iter=3,
            loss_weight=10.0,
            local_tol=1e-30,
            local_max_iter=1,
        )
        with pytest.raises(EngineError, match="LocalSolveError") as info:
            strict.run(data, rng=7, engine=eng)
        assert not info.value.crashed
        assert eng.pids == pids  # idle workers are reused by the next job
        killed.clear()
        with pytest.raises(EngineError, match="shard 1 died") as info:
            alg.run(data, rng=7, engine=eng, callback=kill_at_round_6, max_recoveries=0)
        assert info.value.shard == 1 and info.value.round == 6 and info.value.crashed


def test_make_engine() -> None:
    assert isinstance(make_engine("inprocess"), InProcessEngine)
    with pytest.raises(InvalidParameterError, match="engine"):
        make_engine("threads")
    eng = InProcessEngine()
    assert make_engine(eng) is eng
    with pytest.raises(InvalidParameterError):
        make_engine(eng, n_shards=2)


@pytest.mark.skipif(not ray_available(), reason="ray is not installed (pip install 'dpopt[ray]')")
def test_ray_local_cluster_bit_identical_and_recovers(problem, reference, monkeypatch) -> None:
    import ray

    from dpopt.distributed.engines import RayEngine

    alg, data = problem
    # dpopt starts its own private cluster: an address in the environment (or a cluster that
    # `ray start` left on the machine) is joined only when address= asks for it
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    with RayEngine(2, num_cpus=2) as eng:
        killed: list[int] = []

        def kill_at_round_6(info) -> None:
            if info.round == 6 and not killed:
                killed.append(1)
                ray.kill(eng.actors[0])

        res = alg.run(
            data, rng=7, engine=eng, checkpoint_every=4, callback=kill_at_round_6, record_models=True
        )
        assert killed and res.parameters["recoveries"] == 1
        _assert_same(reference, res)
        actors = eng.actors
        _assert_same(reference, alg.run(data, rng=7, engine=eng, record_models=True))  # actors are reused
        assert eng.actors == actors
        # a stopped (SIGSTOP) actor is handled like a dead one after the time limit
        eng.timeout = 3.0
        stopped: list[int] = []

        def stop_at_round_6(info) -> None:
            if info.round == 6 and not stopped:
                stopped.append(ray.get(eng.actors[1].pid.remote(), timeout=60))
                os.kill(stopped[0], signal.SIGSTOP)

        res = alg.run(
            data, rng=7, engine=eng, checkpoint_every=4, callback=stop_at_round_6, record_models=True
        )
        assert stopped and res.parameters["recoveries"] == 1
        assert any("did not answer within 3 s" in n for n in res.privacy.notes)
        _assert_same(reference, res)
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped[0], signal.SIGCONT)
    assert not ray.is_initialized()


def test_wait_limit_is_adaptive_with_a_floor() -> None:
    eng = ProcessEngine(1, timeout_floor=5.0, startup_timeout=30.0)
    assert eng.wait_limit() == 30.0 and eng.wait_limit("start-up") == 30.0  # nothing observed yet
    eng._observe(0.1)
    assert eng.wait_limit() == 5.0  # the floor
    eng._observe(2.0)  # rounds observed to take 2 s: wait up to 10x
    assert eng.wait_limit() == 20.0
    assert ProcessEngine(1, timeout=3.0).wait_limit() == 3.0
    with pytest.raises(InvalidParameterError, match="timeout"):
        ProcessEngine(1, timeout=0.0)


def test_stalled_worker_is_handled_like_a_dead_one(problem, reference) -> None:
    alg, data = problem
    with ProcessEngine(2, timeout=2.0) as eng:
        stopped: list[int] = []

        def stop_at_round_6(info) -> None:
            if info.round == 6 and not stopped:
                stopped.append(eng.pids[1])
                os.kill(eng.pids[1], signal.SIGSTOP)

        res = alg.run(
            data, rng=7, engine=eng, checkpoint_every=4, callback=stop_at_round_6, record_models=True
        )
        assert stopped and res.parameters["recoveries"] == 1
        assert any("did not answer within 2 s" in n for n in res.privacy.notes)
        _assert_same(reference, res)  # recovered from the checkpoint with the same noise
        stopped.clear()
        with pytest.raises(EngineError, match=r"did not answer within 2 s.*nodes 4\.\.6; round 7") as info:
            alg.run(data, rng=7, engine=eng, callback=stop_at_round_6, max_recoveries=0)
        assert info.value.crashed and info.value.shard == 1
        with pytest.raises(ProcessLookupError):  # the stalled worker was killed, not left behind
            for _ in range(50):
                os.kill(stopped[0], 0)
                time.sleep(0.1)


_DRIVER = """
import os, sys, time
import numpy as np
from dpopt.datasets import make_logistic
from dpopt.distributed.admm import PrivateADMM
from dpopt.distributed.engines import ProcessEngine
from dpopt.distributed.topology import ring

if __name__ == "__main__":
    ds = make_logistic(200, 3, rng=0)
    data = [(ds.X[i::4], ds.y[i::4]) for i in range(4)]
    alg = PrivateADMM(ring(4), method="pp", noise_rate=3.0, max_iter=1000, loss_weight=10.0, reg=1.0)
    eng = ProcessEngine(2)

    def report(info):
        if info.round == 2:
            print(" ".join(map(str, eng.pids)), flush=True)
        if info.round >= 2:
            time.sleep(0.5)

    alg.run(data, rng=1, engine=eng, callback=report)
"""


def test_workers_do_not_outlive_a_killed_driver(tmp_path) -> None:
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = _read_line(proc, 120)
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2
        os.kill(pids[0], signal.SIGSTOP)  # a stopped worker must die too
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        alive = pids
        while alive and time.monotonic() < deadline:
            alive = [p for p in pids if _alive(p)]
            time.sleep(0.1)
        assert not alive, f"worker processes {alive} outlived the driver"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the driver did not report its workers in time"
    return proc.stdout.readline()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (dead, not yet reaped by init) is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


_RAY_DRIVER = """
import os, time
from dpopt.datasets import make_logistic
from dpopt.distributed.admm import PrivateADMM
from dpopt.distributed.engines import RayEngine
from dpopt.distributed.topology import ring

if __name__ == "__main__":
    ds = make_logistic(200, 3, rng=0)
    data = [(ds.X[i::4], ds.y[i::4]) for i in range(4)]
    alg = PrivateADMM(ring(4), method="pp", noise_rate=3.0, max_iter=1000, loss_weight=10.0, reg=1.0)
    eng = RayEngine(1, num_cpus=1)

    def report(info):
        if info.round == 2:
            import psutil  # from ray's thirdparty_files, on sys.path once ray is imported

            pids = [p.pid for p in psutil.Process().children(recursive=True)]
            print(" ".join(map(str, pids)), flush=True)
        if info.round >= 2:
            time.sleep(0.5)

    alg.run(data, rng=1, engine=eng, callback=report)
"""


@pytest.mark.slow
@pytest.mark.skipif(not ray_available(), reason="ray is not installed (pip install 'dpopt[ray]')")
def test_local_ray_cluster_does_not_outlive_a_killed_driver(tmp_path) -> None:
    script = tmp_path / "ray_driver.py"
    script.write_text(_RAY_DRIVER)
    import dpopt

    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(dpopt.__file__)))  # as a user runs it
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(p) for p in _read_line(proc, 240).split()]
        assert len(pids) >= 3  # the cluster's daemons, the actor and the reaper
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        alive = pids
        while alive and time.monotonic() < deadline:
            alive = [p for p in pids if _alive(p)]
            time.sleep(0.5)
        assert not alive, f"processes {alive} of the local Ray cluster outlived the driver"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


@pytest.mark.skipif(not ray_available(), reason="ray is not installed (pip install 'dpopt[ray]')")
def test_ray_startup_failure_is_an_engine_error_naming_the_timeout(monkeypatch) -> None:
    import ray

    from dpopt.distributed import _reaper, engines
    from dpopt.distributed.engines import RayEngine

    monkeypatch.setattr(engines, "RAY_RETRY_PAUSE", 0.05)

    calls: list[str] = []

    def failing_init(**kwargs) -> None:
        calls.append("init")
        # what Ray raises when its raylet does not register in 30 s (ray/_private/node.py)
        raise Exception(
            "The current node timed out during startup. This could happen because some of the raylet "
            "failed to startup or the GCS has become overloaded."
        )

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", failing_init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    with pytest.raises(
        EngineError, match=r"within startup_timeout=0\.2 s .*RayEngine\(startup_timeout="
    ) as info:
        RayEngine(startup_timeout=0.2)
    assert "timed out during startup" in str(info.value)
    assert calls.count("init") >= 1 and calls.count("shutdown") == calls.count("init")  # each try cleaned up
    # within the limit a failed start is tried again: here the second try starts
    tries: list[int] = []

    def flaky_init(**kwargs) -> None:
        tries.append(1)
        if len(tries) == 1:
            failing_init()

    monkeypatch.setattr(ray, "init", flaky_init)
    monkeypatch.setattr(_reaper, "start_reaper", lambda pids: None)
    eng = RayEngine(startup_timeout=600)
    eng.close()
    assert len(tries) == 2
    # other errors (e.g. a bad init_kwargs) propagate unchanged
    monkeypatch.setattr(ray, "init", lambda **kw: (_ for _ in ()).throw(TypeError("unexpected keyword")))
    with pytest.raises(TypeError, match="unexpected keyword"):
        RayEngine(init_kwargs={"bogus": 1})
