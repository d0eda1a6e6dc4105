"""Private ADMM under faults (issue 14 §2-3): stalls, driver crashes, durable checkpoints.

Run ``nice -n 10 python benchmarks/bench_admm_faults.py [--skip-ray]`` (not part of the tests; a
few minutes, mostly the two default-limit stall detections of about 60 s each).

Prints

1. Stall detection with the engines' default time limits: a worker is SIGSTOPped after round 3 of a
   small PP run; seconds from the SIGSTOP to the end of the recovered round, and whether the run's
   released rounds equal an undisturbed in-process run's.
2. Clean-up after a driver SIGKILL: processes still alive 15 s after the driver was killed and their
   resident memory, for the processes engine (one worker SIGSTOPped) and for a local Ray cluster
   started by dpopt, with and without the reaper (without = the behaviour before issue 14).
3. Cost of a durable run directory: seconds per round of PP (N = 100 ring, d = 100, 200 rows per
   node, in-process) without ``checkpoint_dir``, with it (log of messages) and with
   ``checkpoint_log="digests"``, measured side by side in this process.
4. Driver SIGKILL and resume with ``rng="secure"`` and a persistent SQLite ledger: rounds released
   before the crash, whether the resumed run's messages equal the log, and ledger entries.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dpopt.accounting import Budget
from dpopt.datasets import make_logistic
from dpopt.distributed.admm import PrivateADMM, geometric
from dpopt.distributed.checkpoint import RunStore
from dpopt.distributed.engines import Engine, ProcessEngine, RayEngine, ray_available
from dpopt.distributed.topology import ring
from dpopt.ledger import Ledger

SRC = str(Path(__file__).resolve().parents[1] / "src")


def small_problem(max_iter: int = 8) -> tuple[PrivateADMM, list]:
    ds = make_logistic(400, 5, rng=0)
    data = [(ds.X[i::8], ds.y[i::8]) for i in range(8)]
    alg = PrivateADMM(
        ring(8), method="pp", penalty=geometric(0.5, 1.05), noise_rate=geometric(3.0, 1.01),
        max_iter=max_iter, loss_weight=10.0, reg=1.0, init="normal",
    )  # fmt: skip
    return alg, data


def stall(engine: Engine, pid_of: Any) -> tuple[float, bool]:
    alg, data = small_problem()
    ref = alg.run(data, rng=7, record_models=True)
    marks: dict[str, float] = {}

    def cb(info: Any) -> None:
        if info.round == 3 and "stop" not in marks:
            os.kill(pid_of(engine), signal.SIGSTOP)
            marks["stop"] = time.monotonic()
        elif "stop" in marks and "back" not in marks:
            marks["back"] = time.monotonic()

    res = alg.run(data, rng=7, engine=engine, checkpoint_every=2, callback=cb, record_models=True)
    same = bool(np.array_equal(res.models_history, ref.models_history))
    return marks["back"] - marks["stop"], same


def _alive(pid: int) -> tuple[bool, int]:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().split(")")[-1].split()[0] == "Z":
                return False, 0
        with open(f"/proc/{pid}/statm") as fh:
            return True, int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return False, 0


_KILL_DRIVER = """
import os, signal, sys, time
from dpopt.datasets import make_logistic
from dpopt.distributed.admm import PrivateADMM
from dpopt.distributed.topology import ring

if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "ray-no-reaper":
        import dpopt.distributed._reaper as reaper
        reaper.start_reaper = lambda pids: None
    from dpopt.distributed.engines import ProcessEngine, RayEngine
    eng = ProcessEngine(2) if kind == "processes" else RayEngine(1, num_cpus=1)
    ds = make_logistic(200, 3, rng=0)
    data = [(ds.X[i::4], ds.y[i::4]) for i in range(4)]
    alg = PrivateADMM(ring(4), method="pp", noise_rate=3.0, max_iter=1000, loss_weight=10.0, reg=1.0)

    def report(info):
        if info.round == 2:
            if kind == "processes":
                os.kill(eng.pids[0], signal.SIGSTOP)
                pids = eng.pids
            else:
                import ray, psutil  # ray puts its bundled psutil on sys.path
                pids = [p.pid for p in psutil.Process().children(recursive=True)]
            print(" ".join(map(str, pids)), flush=True)
        if info.round >= 2:
            time.sleep(0.5)

    alg.run(data, rng=1, engine=eng, callback=report)
"""


def survivors(kind: str, tmp: Path) -> tuple[int, int, int]:
    """(processes started, alive 15 s after the driver's SIGKILL, their resident MB)."""
    script = tmp / "kill_driver.py"
    script.write_text(_KILL_DRIVER)
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.Popen([sys.executable, str(script), kind], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    pids = [int(p) for p in proc.stdout.readline().split()]
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    time.sleep(15)
    alive = [(p, *_alive(p)) for p in pids]
    left = [(p, rss) for p, ok, rss in alive if ok]
    for p, _ in left:  # clean up what the run left behind (only processes this benchmark started)
        os.kill(p, signal.SIGKILL)
    return len(pids), len(left), sum(r for _, r in left) >> 20


def checkpoint_cost(rounds: int = 6) -> list[tuple[str, float, float]]:
    ds = make_logistic(100 * 200, 100, rng=0)
    data = [(ds.X[i::100], ds.y[i::100]) for i in range(100)]
    alg = PrivateADMM(
        ring(100), method="pp", penalty=geometric(0.5, 1.03), noise_rate=geometric(3.0, 1.01),
        max_iter=rounds, loss_weight=10.0, reg=1.0,
    )  # fmt: skip
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, kw in (
            ("no checkpoint_dir", {}),
            ("checkpoint_dir, log of messages", {"checkpoint_dir": f"{tmp}/a", "checkpoint_every": 1}),
            ("checkpoint_dir, digests only", {"checkpoint_dir": f"{tmp}/b", "checkpoint_every": 1,
                                              "checkpoint_log": "digests"}),
        ):  # fmt: skip
            w0, c0 = time.perf_counter(), time.process_time()
            alg.run(data, rng=1, **kw)
            out.append((label, (time.perf_counter() - w0) / rounds, (time.process_time() - c0) / rounds))
    return out


_SECURE_DRIVER = """
import sys, time
from dpopt.datasets import make_logistic
from dpopt.distributed.admm import PrivateADMM, geometric
from dpopt.distributed.topology import ring
from dpopt.ledger import Ledger

if __name__ == "__main__":
    ds = make_logistic(400, 5, rng=0)
    data = [(ds.X[i::8], ds.y[i::8]) for i in range(8)]
    alg = PrivateADMM(ring(8), method="pp", penalty=geometric(0.5, 1.05), noise_rate=geometric(3.0, 1.01),
                      max_iter=40, loss_weight=10.0, reg=1.0, init="normal")

    def slow(info):
        if info.round == 17:
            print("17", flush=True)
            time.sleep(600)

    alg.run(data, rng="secure", checkpoint_dir=sys.argv[1], checkpoint_every=5, callback=slow,
            engine="processes", accountant=Ledger(sys.argv[2]).accountant("adult"))
"""


def secure_resume(tmp: Path) -> dict[str, Any]:
    script = tmp / "secure_driver.py"
    script.write_text(_SECURE_DRIVER)
    url = "sqlite:///" + str(tmp / "ledger.db")
    Ledger(url, create=True).add_dataset("adult", budget=Budget(100.0), neighbouring="replace_one")
    d = tmp / "run"
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(d), url], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "17"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    store = object.__new__(RunStore)
    store._log_path = d / "released.log"  # type: ignore[attr-defined]
    before = {r: m for r, (_, m) in RunStore.released(store).items()}
    alg, data = small_problem(max_iter=40)
    acct = Ledger(url).accountant("adult")
    eps_before = acct.epsilon()
    res = alg.run(data, rng="secure", checkpoint_dir=d, resume=True, record_models=True, accountant=acct)
    after = {r: m for r, (_, m) in RunStore.released(store).items()}
    return {
        "rounds logged before the crash": f"0..{max(before)}",
        "resumed from": next(n for n in res.privacy.notes if n.startswith("resumed from")).split(" in ")[0],
        "charge": next(n for n in res.privacy.notes if "not charged again" in n).split(": ", 1)[1],
        "logged rounds unchanged after resume": all(np.array_equal(after[r], m) for r, m in before.items()),
        "resumed run's messages == log (rounds 0..40)": bool(
            np.array_equal(np.stack([after[r] for r in range(41)]), res.models_history)
        ),
        "ledger entries / ε before resume": f"{len(acct.ledger)} / {eps_before:.4g}",
        "ε after resume": f"{acct.epsilon():.4g}",
        "key file mode": oct(os.stat(d / "key").st_mode & 0o777),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--sections", default="1234", help="which sections to run, e.g. 234")
    args = ap.parse_args()
    use_ray = ray_available() and not args.skip_ray
    if "1" in args.sections:
        stall_section(use_ray)
    if "2" in args.sections:
        survivors_section(use_ray)
    if "3" in args.sections:
        cost_section()
    if "4" in args.sections:
        resume_section()


def stall_section(use_ray: bool) -> None:
    print("## 1. Stall detection with the default time limits (SIGSTOP after round 3)\n")
    print("| engine | seconds from SIGSTOP to the recovered round | released rounds identical |")
    print("|---|---|---|")
    with ProcessEngine(2) as eng:
        sec, same = stall(eng, lambda e: e.pids[1])
    print(f"| processes (2 workers) | {sec:.1f} | {same} |")
    if use_ray:
        import ray

        with RayEngine(2, num_cpus=2) as reng:
            sec, same = stall(reng, lambda e: ray.get(e.actors[1].pid.remote(), timeout=60))
        print(f"| ray (2 actors, local cluster) | {sec:.1f} | {same} |")


def survivors_section(use_ray: bool) -> None:
    print("\n## 2. Processes alive 15 s after a driver SIGKILL\n")
    print("| driver | processes started | alive after 15 s | resident MB |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        kinds = ["processes"] + (["ray", "ray-no-reaper"] if use_ray else [])
        for kind in kinds:
            started, left, mb = survivors(kind, Path(tmp))
            label = {"processes": "processes engine (one worker SIGSTOPped)", "ray": "local Ray cluster (reaper)",
                     "ray-no-reaper": "local Ray cluster, reaper disabled (before)"}[kind]  # fmt: skip
            print(f"| {label} | {started} | {left} | {mb} |")


def cost_section() -> None:
    print("\n## 3. Cost of a durable run directory (N = 100 ring, d = 100, 200 rows/node, PP, in-process)\n")
    print("| run | wall s/round | CPU s/round |")
    print("|---|---|---|")
    for label, wall, cpu in checkpoint_cost():
        print(f"| {label} | {wall:.3f} | {cpu:.3f} |")


def resume_section() -> None:
    print('\n## 4. Driver SIGKILL and resume, rng="secure", processes engine, persistent SQLite ledger\n')
    with tempfile.TemporaryDirectory() as tmp:
        for k, v in secure_resume(Path(tmp)).items():
            print(f"- {k}: {v}")


if __name__ == "__main__":
    main()
