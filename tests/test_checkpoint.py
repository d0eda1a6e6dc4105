"""Durable, privacy-neutral restarts of private ADMM (issue 14 §2)."""

from __future__ import annotations

import os
import select
import signal
import stat
import subprocess
import sys

import numpy as np
import pytest

from dpopt.accounting import BasicAccountant, Budget
from dpopt.datasets import make_logistic
from dpopt.distributed.admm import PrivateADMM, geometric
from dpopt.distributed.checkpoint import CheckpointError, RunStore
from dpopt.distributed.topology import ring
from dpopt.exceptions import InvalidParameterError
from dpopt.ledger import Ledger


def _setup(max_iter: int = 12) -> tuple[PrivateADMM, list]:
    ds = make_logistic(240, 3, rng=0)
    data = [(ds.X[i::4], ds.y[i::4]) for i in range(4)]
    alg = PrivateADMM(
        ring(4), method="pp", penalty=geometric(0.5, 1.05), noise_rate=geometric(3.0, 1.01),
        max_iter=max_iter, loss_weight=10.0, reg=1.0, init="normal",
    )  # fmt: skip
    return alg, data


class Crash(Exception):
    pass


def _crash_at(r: int):
    def cb(info) -> None:
        if info.round == r:
            raise Crash

    return cb


def _read_log(path) -> dict[int, np.ndarray]:
    store = object.__new__(RunStore)
    store._log_path = path / "released.log"  # type: ignore[attr-defined]
    return {r: m for r, (_, m) in RunStore.released(store).items()}


def test_resume_replays_the_same_noise_and_never_charges_twice(tmp_path) -> None:
    alg, data = _setup()
    ref = alg.run(data, rng=3, record_models=True)
    acc = BasicAccountant(budget=Budget(1e6), neighbouring="replace_one")
    d = tmp_path / "run"
    with pytest.raises(Crash):
        alg.run(data, rng=3, checkpoint_dir=d, checkpoint_every=4, callback=_crash_at(7), accountant=acc)
    eps_once = acc.epsilon()
    assert len(acc.ledger) == 1 and "run " in acc.ledger[0].label
    assert stat.S_IMODE(os.stat(d / "key").st_mode) == 0o600
    before = _read_log(d)
    assert sorted(before) == list(range(8))  # rounds 0..7 released and logged
    # a fresh run must not overwrite the crashed run's key
    with pytest.raises(CheckpointError, match="resume=True"):
        alg.run(data, rng=3, checkpoint_dir=d)
    # another configuration is refused
    other, _ = _setup(max_iter=13)
    with pytest.raises(CheckpointError, match="n_rounds"):
        other.run(data, rng=3, checkpoint_dir=d, resume=True)
    with pytest.raises(CheckpointError, match="another key"):
        alg.run(data, rng=4, checkpoint_dir=d, resume=True)
    res = alg.run(data, rng=None, checkpoint_dir=d, resume=True, accountant=acc, record_models=True)
    assert acc.epsilon() == eps_once and len(acc.ledger) == 1  # not charged twice
    assert any("resumed from the checkpoint of round 4" in n for n in res.privacy.notes)
    assert np.array_equal(res.models_history, ref.models_history)
    after = _read_log(d)
    assert sorted(after) == list(range(13))
    for r, m in before.items():
        assert np.array_equal(after[r], m)
    assert np.array_equal(np.stack([after[r] for r in range(13)]), ref.models_history)
    # a fresh accountant (the first process's in-memory one is gone) is charged once
    acc2 = BasicAccountant(neighbouring="replace_one")
    again = alg.run(data, rng=None, checkpoint_dir=d, resume=True, accountant=acc2)
    assert np.array_equal(again.models, ref.models) and acc2.epsilon() == pytest.approx(eps_once)


def test_a_changed_release_stops_the_resumed_run(tmp_path) -> None:
    alg, data = _setup()
    d = tmp_path / "run"
    with pytest.raises(Crash):
        alg.run(data, rng=3, checkpoint_dir=d, checkpoint_every=4, callback=_crash_at(6))
    changed = [(x, y) for x, y in data]
    changed[2] = (data[2][0][::-1].copy(), data[2][1][::-1].copy())  # same rows, another order
    x = changed[1][0].copy()
    x[0] *= 0.5
    changed[1] = (x, changed[1][1])
    with pytest.raises(CheckpointError, match="replayed round 5 differs"):
        alg.run(changed, rng=None, checkpoint_dir=d, resume=True)
    # digest-only logs check replays just as well
    d2 = tmp_path / "digests"
    with pytest.raises(Crash):
        alg.run(
            data,
            rng=3,
            checkpoint_dir=d2,
            checkpoint_every=4,
            callback=_crash_at(6),
            checkpoint_log="digests",
        )
    assert (d2 / "released.log").stat().st_size < 100 * 7
    with pytest.raises(CheckpointError, match="replayed round 5 differs"):
        alg.run(changed, rng=None, checkpoint_dir=d2, resume=True, checkpoint_log="digests")
    ref = alg.run(data, rng=3)
    res = alg.run(data, rng=None, checkpoint_dir=d2, resume=True, checkpoint_log="digests")
    assert np.array_equal(res.models, ref.models)


_DRIVER = """
import sys, time
from dpopt.datasets import make_logistic
from dpopt.exceptions import InvalidParameterError
from dpopt.ledger import Ledger
from dpopt.distributed.admm import PrivateADMM, geometric
from dpopt.distributed.topology import ring

if __name__ == "__main__":
    ds = make_logistic(240, 3, rng=0)
    data = [(ds.X[i::4], ds.y[i::4]) for i in range(4)]
    alg = PrivateADMM(ring(4), method="pp", penalty=geometric(0.5, 1.05), noise_rate=geometric(3.0, 1.01),
                      max_iter=40, loss_weight=10.0, reg=1.0, init="normal")

    def slow(info):
        if info.round == 9:
            print("9", flush=True)
            time.sleep(600)

    acct = Ledger(sys.argv[3]).accountant("consortium")
    alg.run(data, rng="secure", checkpoint_dir=sys.argv[1], checkpoint_every=4, callback=slow,
            engine=sys.argv[2], accountant=acct)
"""


@pytest.mark.parametrize("engine", ["inprocess", pytest.param("processes", marks=pytest.mark.slow)])
def test_secure_run_resumes_after_a_driver_sigkill(tmp_path, engine) -> None:
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    d = tmp_path / "run"
    url = "sqlite:///" + str(tmp_path / "ledger.db")
    Ledger(url, create=True).add_dataset("consortium", budget=Budget(100.0), neighbouring="replace_one")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(d), engine, url], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready and proc.stdout.readline().strip() == "9"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    before = _read_log(d)
    assert sorted(before) == list(range(10))  # f(0) .. f(9) were released before the crash
    assert stat.S_IMODE(os.stat(d / "key").st_mode) == 0o600
    ds = make_logistic(240, 3, rng=0)
    data = [(ds.X[i::4], ds.y[i::4]) for i in range(4)]
    alg = PrivateADMM(
        ring(4), method="pp", penalty=geometric(0.5, 1.05), noise_rate=geometric(3.0, 1.01),
        max_iter=40, loss_weight=10.0, reg=1.0, init="normal",
    )  # fmt: skip
    acct = Ledger(url).accountant("consortium")
    charged = acct.epsilon()
    assert len(acct.ledger) == 1 and charged > 0  # the crashed run paid before drawing noise
    res = alg.run(data, rng="secure", checkpoint_dir=d, resume=True, record_models=True, accountant=acct)
    assert any("resumed from the checkpoint of round 8" in n for n in res.privacy.notes)
    assert len(Ledger(url).accountant("consortium").ledger) == 1  # the resumed run did not pay again
    assert acct.epsilon() == pytest.approx(charged) and res.privacy.epsilon == pytest.approx(charged)
    after = _read_log(d)
    assert sorted(after) == list(range(41))
    for r, m in before.items():  # round 9 was replayed with the stored key: the same message
        assert np.array_equal(after[r], m)
    assert np.array_equal(np.stack([after[r] for r in range(41)]), res.models_history)


def test_bad_checkpoint_settings_are_refused_by_name(tmp_path) -> None:
    alg, data = _setup(max_iter=3)
    afile = tmp_path / "a-file"
    afile.write_text("")
    with pytest.raises(InvalidParameterError, match=r"checkpoint_dir: .* is a file, not a directory"):
        alg.run(data, rng=0, checkpoint_dir=afile)
    with pytest.raises(InvalidParameterError, match="checkpoint_dir: cannot create the directory"):
        alg.run(data, rng=0, checkpoint_dir=afile / "sub")
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InvalidParameterError, match=r"checkpoint_every: .*pass None to disable"):
            alg.run(data, rng=0, checkpoint_every=bad)  # type: ignore[arg-type]
    assert alg.run(data, rng=0, checkpoint_every=None).models.shape[0] == 4  # None: no periodic checkpoint
