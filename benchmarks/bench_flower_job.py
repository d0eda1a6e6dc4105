"""Wall time of the Flower federation test's job on the local engines (inprocess, processes, Ray).

The job of ``tests/test_flower_federation.py``: 3 sites x 50 rows (``make_logistic(150, 3)``),
ring(3), PP, 3 rounds, sites loaded from ``.npz`` files.  The Flower figure comes from that test
(``pytest -m slow -s tests/test_flower_federation.py`` prints it); this script gives the Ray figure
(which needs the ``ray`` extra) next to inprocess and processes, measured in one process, and the
cost of one more round on each (the same job with 13 rounds instead of 3: difference / 10; on
Ray both on warm actors).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 nice -n 10 python benchmarks/bench_flower_job.py

With ``--flower`` it runs that federation test instead (needs the ``flower`` extra; a few minutes)
and prints its timings: the coordinator's run, each message round, and, from the sites' logs, the
median time of dpopt's handler and the age of the ClientApp process when the handler started
(Flower's start-up of the process: interpreter, flwr, app bundle, imports).  The test's run also
kills the coordinator (``dpopt admm run`` and its ServerApp process) after round 1 and resumes it,
then kills one site's SuperNode mid-round and restarts it, so the figures include a resume and a
recovery (the message rounds listed are the resumed ServerApp's; compare medians), unless
``--no-kill`` is given.

    python benchmarks/bench_flower_job.py --flower [--no-kill]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dpopt.datasets import make_logistic
from dpopt.distributed.admm import PrivateADMM, geometric
from dpopt.distributed.engines import RayEngine
from dpopt.distributed.sites import Site
from dpopt.distributed.topology import ring, split_rows


def _admm(rounds: int = 3) -> PrivateADMM:
    return PrivateADMM(ring(3), method="pp", penalty=geometric(0.5, 1.1), theta=0.5,
                       noise_rate=geometric(5.0, 1.05), max_iter=rounds)  # fmt: skip


def flower() -> None:
    """Run the federation test and print its timings."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "timings.json"
        env = {**os.environ, "DPOPT_FLOWER_TIMINGS": str(out), "PYTHONPATH": str(root / "src")}
        if "--no-kill" in sys.argv[1:]:
            env["DPOPT_FLOWER_TEST_NO_KILL"] = "1"
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-m", "slow", "-p", "no:cacheprovider",
             "tests/test_flower_federation.py::test_flower_run_equals_inprocess"],
            cwd=root, env=env, check=True, timeout=1800,
        )  # fmt: skip
        t = json.loads(out.read_text())
    rounds = t["message_round_s"]
    if t.get("killed"):
        print(f"resumed ServerApp (wall): {t['flower_run_s']:.1f} s (coordinator killed after round 1 and "
              "resumed; one site killed mid-round and restarted)")  # fmt: skip
    else:
        print(f"flower run (ServerApp, wall): {t['flower_run_s']:.1f} s for {t['rounds']} ADMM rounds")
    print(f"dpopt admm run (first submit to result, wall): {t['dpopt_admm_run_wall_s']:.1f} s")
    print(f"message rounds: {len(rounds)}, median {statistics.median(rounds):.1f} s: "
          + ", ".join(f"{r:.1f}" for r in rounds))  # fmt: skip
    print(f"site handler (median): {t['site_handler_s_median']:.2f} s; ClientApp process age at the handler "
          f"(median): {t['site_process_age_at_handler_s_median']:.2f} s")  # fmt: skip
    print(f"inprocess: {t['inprocess_run_s']:.3f} s (same job, same run)")


def main() -> None:
    if "--flower" in sys.argv[1:]:
        flower()
        return
    with tempfile.TemporaryDirectory() as d:
        ds = make_logistic(150, 3, rng=0)
        sites = []
        for k, rows in enumerate(split_rows(150, 3, rng=0)):
            np.savez(f"{d}/site{k}.npz", X=ds.X[rows], y=ds.y[rows])
            sites.append(Site(f"site{k}", loader=f"{d}/site{k}.npz"))
        out = {}
        ref = None
        extra = 10  # the same job with 10 more rounds: (run13 - run3) / 10 is the cost of one more round
        for name in ("inprocess", "processes"):
            t = time.perf_counter()
            ref = _admm().run(sites, rng=3, engine=name)
            out[f"{name} run"] = time.perf_counter() - t
            t = time.perf_counter()
            _admm(3 + extra).run(sites, rng=3, engine=name)
            out[f"{name} run +{extra}"] = time.perf_counter() - t
        t = time.perf_counter()
        eng = RayEngine(3, init_kwargs={"resources": {f"site:site{k}": 1 for k in range(3)}})
        out["ray start-up"] = time.perf_counter() - t
        with eng:
            t = time.perf_counter()
            res = _admm().run(sites, rng=3, engine=eng)
            out["ray run"] = time.perf_counter() - t  # includes the actors' first imports and loads
            t = time.perf_counter()
            _admm().run(sites, rng=3, engine=eng)
            out["ray run again"] = time.perf_counter() - t  # warm actors: the base of the difference
            t = time.perf_counter()
            _admm(3 + extra).run(sites, rng=3, engine=eng)
            out[f"ray run +{extra}"] = time.perf_counter() - t
        assert ref is not None and np.array_equal(ref.models, res.models)
        for k, v in out.items():
            print(f"{k:>20}: {v:8.3f} s (wall)")
        for name in ("inprocess", "processes", "ray"):
            per = (
                out[f"{name} run +{extra}"] - out[f"{name} run" + (" again" if name == "ray" else "")]
            ) / extra
            print(f"{name:>20}: {per:8.3f} s per additional ADMM round (wall)")


if __name__ == "__main__":
    main()
