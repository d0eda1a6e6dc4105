"""hamsi_distributed: the restart safeguard, recovery from failed workers, durable resume."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpopt.datasets import Ratings, make_low_rank_ratings
from dpopt.distributed.engines import EngineError, InProcessEngine, ProcessEngine, ray_available
from dpopt.distributed.partition import strata_b
from dpopt.exceptions import InvalidParameterError
from dpopt.matrix_factorization import MatrixFactorizationProblem
from dpopt.solvers.hamsi import HamsiResult, hamsi, hamsi_distributed


@pytest.fixture(scope="module")
def uncentred() -> MatrixFactorizationProblem:
    """The issue's stall case in small: ratings around 3.5, not centred, no biases, l2 = 1e-6."""
    s = make_low_rank_ratings(200, 150, 3, 0.1, rng=0, noise_std=0.5)
    r = Ratings(rows=s.rows, cols=s.cols, values=s.values + 3.5, shape=s.shape, name="shifted")
    return MatrixFactorizationProblem(r, 3, l2=1e-6)


# a configuration whose first quasi-Newton steps overshoot (one safeguard restart with 2 shards)
KW: dict[str, Any] = dict(max_iter=24, memory=5, rng=0, eta_gd=0.001)


@pytest.fixture(scope="module")
def reference(uncentred: MatrixFactorizationProblem) -> HamsiResult:
    return hamsi_distributed(uncentred, 2, **KW)


def _same(a: HamsiResult, b: HamsiResult) -> None:
    assert np.array_equal(a.U, b.U) and np.array_equal(a.V, b.V)
    assert np.array_equal(a.history_rmse, b.history_rmse)
    assert np.array_equal(a.history_epoch, b.history_epoch)
    assert (a.n_restarts, a.n_steps, a.n_pairs_accepted, a.status) == (
        b.n_restarts,
        b.n_steps,
        b.n_pairs_accepted,
        b.status,
    )


def test_safeguard_is_the_single_process_one(
    uncentred: MatrixFactorizationProblem, reference: HamsiResult
) -> None:
    local = hamsi(uncentred, strata_b(uncentred.ratings, 2), safeguard=True, **KW)
    assert reference.n_restarts == local.n_restarts == 1 and reference.status == "max_iter"
    assert reference.n_steps == local.n_steps  # the rest of the restarted outer iteration is skipped
    np.testing.assert_allclose(reference.U, local.U, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(reference.history_rmse, local.history_rmse, rtol=1e-9)
    assert reference.rmse < 0.3 * reference.history_rmse[0]
    # without it, the same run diverges (in both), and hands back the best evaluated factors
    local0 = hamsi(uncentred, strata_b(uncentred.ratings, 2), safeguard=False, **KW)
    off = hamsi_distributed(uncentred, 2, safeguard=False, **KW)
    assert off.status == local0.status == "failed" and off.n_restarts == 0
    assert np.isfinite(off.U).all() and off.rmse == pytest.approx(np.nanmin(off.history_rmse[:-1]))
    assert "diverged" in off.message


@pytest.mark.parametrize("n_shards", [1, 2])
def test_a_stall_is_detected_and_rescued_from_the_spectral_start(
    uncentred: MatrixFactorizationProblem, n_shards: int
) -> None:
    # the issue-17 stall in small: uncentred ratings, no biases, init_scale=1.0, and warm-up steps
    # so short (eta_gd=1e3) that the run sits at a high loss; without the rescue it stays there
    kw: dict[str, Any] = dict(max_iter=40, rng=0, init_scale=1.0, eta_gd=1e3, stall_window=5)
    off = hamsi_distributed(uncentred, n_shards, stall_rescue=False, **kw)
    assert off.rmse > 2.5 and off.options["n_rescues"] == 0
    assert abs(off.history_rmse[-1] - off.history_rmse[-11]) < 0.01 * off.history_rmse[-1]  # stalled
    on = hamsi_distributed(uncentred, n_shards, **kw)
    assert on.options["n_rescues"] == 1 and "stalled at training RMSE" in on.message
    assert on.success and on.rmse < 0.8


def test_healthy_runs_are_not_rescued(reference: HamsiResult) -> None:
    assert reference.options["n_rescues"] == 0 and "stalled" not in reference.message


def test_time_budget_stops_after_an_outer_iteration(uncentred: MatrixFactorizationProblem) -> None:
    res = hamsi_distributed(uncentred, 2, time_budget=1e-9, **KW)
    assert res.status == "max_time" and res.n_epochs == 1 and "time budget" in res.message
    with pytest.raises(InvalidParameterError, match="time_budget"):
        hamsi_distributed(uncentred, 2, time_budget=0.0, **KW)


def test_resume_with_another_shard_count_continues_from_the_saved_factors(
    uncentred: MatrixFactorizationProblem, reference: HamsiResult, tmp_path: Path
) -> None:
    def crash(info: Any) -> None:
        if info.nit == 13:
            raise _Crash  # the file holds outer iteration 10

    with pytest.raises(_Crash):
        hamsi_distributed(uncentred, 2, checkpoint_dir=tmp_path, checkpoint_every=5, callback=crash, **KW)
    # nothing left to run: the factors are exactly those saved by the 2-shard run after iteration
    # 10 (reassembled from its shards), whatever the new shard count
    at10 = hamsi_distributed(uncentred, 2, **dict(KW, max_iter=10))
    for n_shards in (1, 3):
        got = hamsi_distributed(
            uncentred, n_shards, checkpoint_dir=tmp_path, resume=True, **dict(KW, max_iter=10)
        )
        assert np.array_equal(got.U, at10.U) and np.array_equal(got.V, at10.V)
    seen: list[int] = []
    res = hamsi_distributed(
        uncentred, 3, checkpoint_dir=tmp_path, resume=True, callback=lambda info: seen.append(info.nit), **KW
    )  # fmt: skip
    assert seen[0] == 11 and res.n_epochs == KW["max_iter"]
    assert "resumed from a checkpoint of 2 shards with n_shards=3" in res.message
    np.testing.assert_array_equal(res.history_rmse[:11], reference.history_rmse[:11])
    assert res.success and res.rmse < res.history_rmse[10]


@pytest.mark.parametrize("n_shards", [1, 3])
def test_safeguard_rescues_other_shard_counts(uncentred: MatrixFactorizationProblem, n_shards: int) -> None:
    kw = dict(KW, max_iter=30)
    d = hamsi_distributed(uncentred, n_shards, **kw)
    local = hamsi(uncentred, strata_b(uncentred.ratings, n_shards), safeguard=True, **kw)
    assert d.success and d.n_restarts == local.n_restarts >= 1 and d.rmse < 0.3 * d.history_rmse[0]
    np.testing.assert_allclose(d.U, local.U, rtol=1e-9, atol=1e-11)


def test_tolerance_and_early_stopping_as_in_hamsi(uncentred: MatrixFactorizationProblem) -> None:
    from dpopt.matrix_factorization import split_ratings

    kw = dict(KW, max_iter=200, tol=1e-2, patience=2)
    d = hamsi_distributed(uncentred, 2, **kw)
    local = hamsi(uncentred, strata_b(uncentred.ratings, 2), **kw)
    assert d.status == local.status == "converged" and d.n_epochs == local.n_epochs < 200
    assert d.n_restarts == 1  # the restart and the warm-up did not count as stalls
    train, val = split_ratings(uncentred.ratings, 0.2, rng=0)
    p = MatrixFactorizationProblem(train, 3, l2=1e-6, allow_empty=True)
    kw = dict(kw, test=val, early_stopping=True, patience=2)
    d = hamsi_distributed(p, 2, **kw)
    local = hamsi(p, strata_b(p.ratings, 2), **kw)
    assert d.status == local.status == "converged" and d.n_epochs == local.n_epochs
    assert d.history_test_rmse is not None and local.history_test_rmse is not None
    assert d.test_rmse == pytest.approx(local.test_rmse, rel=1e-9)
    assert d.test_rmse == pytest.approx(float(np.min(d.history_test_rmse)))  # best-validation factors
    np.testing.assert_allclose(d.U, local.U, rtol=1e-8, atol=1e-10)


class _FlakyEngine(InProcessEngine):
    """In-process engine whose worker 'dies' at chosen rounds (once each)."""

    def __init__(self, fail_at: dict[int, bool]) -> None:
        super().__init__(2)
        self.fail_at = dict(fail_at)  # round -> crashed flag
        self.restarts = 0

    def step(self, t: int) -> list[Any]:
        if t in self.fail_at:
            crashed = self.fail_at.pop(t)
            raise EngineError(f"shard 1 died during round {t}", shard=1, round=t, crashed=crashed)
        return super().step(t)

    def restart(self, states: Any) -> None:
        self.restarts += 1
        super().restart(states)


def test_crashed_worker_is_recovered_from_the_checkpoint(
    uncentred: MatrixFactorizationProblem, reference: HamsiResult
) -> None:
    # round 3 x (inner steps of 8 outer iterations) + 4 falls in outer iteration 9, after the restart
    eng = _FlakyEngine({3 * 3 * 8 + 4: True, 3 * 3 * 17 + 1: True})
    res = hamsi_distributed(uncentred, 2, engine=eng, checkpoint_every=5, **KW)
    assert eng.restarts == 2 and res.n_recoveries == 2
    assert "recovered from the checkpoint of outer iteration 5" in res.message
    assert "recovered from the checkpoint of outer iteration 15" in res.message
    _same(reference, res)
    eng.close()
    # beyond max_recoveries, or when the program itself failed, the error is raised
    with pytest.raises(EngineError, match="shard 1 died") as info:
        hamsi_distributed(uncentred, 2, engine=_FlakyEngine({7: True}), max_recoveries=0, **KW)
    assert info.value.round == 7
    with pytest.raises(EngineError):
        hamsi_distributed(uncentred, 2, engine=_FlakyEngine({7: False}), **KW)


class _Crash(Exception):
    pass


@pytest.mark.parametrize("schedule", ["det", "stoc"])
def test_durable_resume_equals_an_uninterrupted_run(
    uncentred: MatrixFactorizationProblem, tmp_path: Path, schedule: str
) -> None:
    kw = dict(KW, schedule=schedule)
    full = hamsi_distributed(uncentred, 2, **kw)

    def crash(info: Any) -> None:
        if info.nit == 13:
            raise _Crash  # the driver dies after outer iteration 13; the file holds iteration 10

    with pytest.raises(_Crash):
        hamsi_distributed(uncentred, 2, checkpoint_dir=tmp_path, checkpoint_every=5, callback=crash, **kw)
    seen: list[int] = []
    res = hamsi_distributed(
        uncentred, 2, checkpoint_dir=tmp_path, checkpoint_every=5, resume=True,
        callback=lambda info: seen.append(info.nit), **kw,
    )  # fmt: skip
    assert seen[0] == 11  # continued after the checkpoint
    _same(full, res)
    if schedule == "det":
        assert full.n_restarts == 1  # the saved state includes the safeguard's
    # a state file of another run is refused: other options, other shard count, other data
    with pytest.raises(InvalidParameterError, match="differs from this one in 'eta'"):
        hamsi_distributed(uncentred, 2, checkpoint_dir=tmp_path, resume=True, **dict(kw, eta=0.1))
    r = uncentred.ratings
    other = MatrixFactorizationProblem(
        Ratings(rows=r.rows, cols=r.cols, values=r.values[::-1].copy(), shape=r.shape, name="other"),
        3,
        l2=1e-6,
    )
    with pytest.raises(InvalidParameterError, match="'data'"):
        hamsi_distributed(other, 2, checkpoint_dir=tmp_path, resume=True, **kw)
    with pytest.raises(InvalidParameterError, match="resume"):
        hamsi_distributed(uncentred, 2, resume=True, **kw)


_CRASHING_DRIVER = """
import os, signal, sys
from dpopt.datasets import Ratings, make_low_rank_ratings
from dpopt.matrix_factorization import MatrixFactorizationProblem
from dpopt.solvers.hamsi import hamsi_distributed

s = make_low_rank_ratings(200, 150, 3, 0.1, rng=0, noise_std=0.5)
r = Ratings(rows=s.rows, cols=s.cols, values=s.values + 3.5, shape=s.shape, name="shifted")
p = MatrixFactorizationProblem(r, 3, l2=1e-6)

def crash(info):
    if info.nit == 13:
        os.kill(os.getpid(), signal.SIGKILL)

if __name__ == "__main__":  # the processes engine's workers import this file
    hamsi_distributed(p, 2, max_iter=24, memory=5, rng=0, eta_gd=0.001, engine=sys.argv[2],
                      checkpoint_dir=sys.argv[1], checkpoint_every=5, callback=crash)
"""


@pytest.mark.slow  # a driver process that SIGKILLs itself (with its worker processes)
def test_resume_after_the_driver_was_sigkilled(
    uncentred: MatrixFactorizationProblem, reference: HamsiResult, tmp_path: Path
) -> None:
    import subprocess
    import sys

    script = tmp_path / "driver.py"
    script.write_text(_CRASHING_DRIVER)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run"), "processes"], env=env, timeout=600, check=False
    )
    assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / "run" / "hamsi_state.npz").is_file()
    res = hamsi_distributed(
        uncentred, 2, checkpoint_dir=tmp_path / "run", checkpoint_every=5, resume=True, **KW
    )
    _same(reference, res)


@pytest.mark.slow  # worker start-ups and a 5 s stall: ~40 s on the shared machine; .ci/run runs it
def test_processes_engine_recovers_killed_and_stalled_workers(
    uncentred: MatrixFactorizationProblem, reference: HamsiResult
) -> None:
    with ProcessEngine(2, timeout=5.0) as eng:
        done: list[str] = []

        def fault(info: Any) -> None:
            if info.nit == 7 and "kill" not in done:
                done.append("kill")
                os.kill(eng.pids[1], signal.SIGKILL)
            elif info.nit == 16 and "stop" not in done:
                done.append("stop")
                os.kill(eng.pids[0], signal.SIGSTOP)  # stalled: handled like a dead worker

        res = hamsi_distributed(uncentred, 2, engine=eng, checkpoint_every=5, callback=fault, **KW)
        assert done == ["kill", "stop"] and res.n_recoveries == 2
        assert "shard 1 died" in res.message and "did not answer within 5 s" in res.message
        _same(reference, res)


@pytest.mark.slow  # a local Ray cluster, two actor replacements: ~40 s; .ci/run runs it
@pytest.mark.skipif(not ray_available(), reason="ray is not installed (pip install 'dpopt[ray]')")
def test_ray_actor_killed_mid_run_is_recovered(
    uncentred: MatrixFactorizationProblem, reference: HamsiResult
) -> None:
    import ray

    from dpopt.distributed.engines import RayEngine

    with RayEngine(2, num_cpus=2, timeout=20.0) as eng:
        killed: list[int] = []

        def kill(info: Any) -> None:
            if info.nit == 7 and not killed:
                killed.append(1)
                ray.kill(eng.actors[1])

        res = hamsi_distributed(uncentred, 2, engine=eng, checkpoint_every=5, callback=kill, **KW)
        assert killed and res.n_recoveries == 1 and res.scheme == "strata-b/ray"
        _same(reference, res)
        # a stopped actor is handled like a dead one after the time limit
        eng.timeout = 3.0
        stopped: list[int] = []

        def stop(info: Any) -> None:
            if info.nit == 12 and not stopped:
                stopped.append(ray.get(eng.actors[0].pid.remote(), timeout=60))
                os.kill(stopped[0], signal.SIGSTOP)

        try:
            res = hamsi_distributed(uncentred, 2, engine=eng, checkpoint_every=5, callback=stop, **KW)
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        assert stopped and res.n_recoveries == 1 and "did not answer within 3 s" in res.message
        _same(reference, res)
    assert not ray.is_initialized()


@pytest.mark.slow  # the issue's 2M-rating case: ~10 CPU s per run
@pytest.mark.parametrize("n_shards", [1, 2])
def test_the_issue_stall_on_2m_ratings_is_rescued(n_shards: int) -> None:
    s = make_low_rank_ratings(20_000, 10_000, 10, 0.01, rng=0, noise_std=0.5)
    r = Ratings(rows=s.rows, cols=s.cols, values=s.values + 3.5, shape=s.shape, name="shifted")
    p = MatrixFactorizationProblem(r, 10, l2=1e-6)
    res = hamsi_distributed(p, n_shards, max_iter=80, rng=0, init_scale=1.0)
    # docs/mf_peers.md: 2 shards stalled at 3.03 (rescued after iteration 18, then 0.544); 1 shard
    # does not stall and is not rescued (0.545)
    assert res.options["n_rescues"] == (1 if n_shards == 2 else 0)
    assert res.rmse < 0.56
