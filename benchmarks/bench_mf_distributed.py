"""dpopt's distributed HAMSI on a local Ray cluster against Spark MLlib ALS (local mode), issue 17.

Data and protocol are those of ``bench_mf_peers.py`` (its ``load``): the synthetic 2M problem
(20,000 x 10,000, rank 10, noise 0.5, ratings around 3.5), one 80/20 split (seed 0), the ridge
weight of each library tuned on a validation split carved from the training part (20 % of it,
seed 1), the best one refitted on the whole training part and scored once on the test part.
Predictions are clipped to the training range for every library.

Libraries (each fit in a fresh worker process, one at a time):

* ``dpopt-ray``: ``MFRecommender(rank=10, l2=λ, bias=b, solver="hamsi_distributed", n_threads=2)``
  (spectral start; the validation split picks ``λ`` and ``b``: ``True``, user and item biases, or
  ``"mean"``, the centred model without them, as ``dpopt.recommender.tune`` does) on a local Ray cluster started in the worker (``RayEngine(2)``:
  2 CPUs, one actor per shard), stopping tolerance 1e-4 over 5 epochs (``MFRecommender``'s
  defaults, passed through ``solver_options``);
* ``dpopt-ray-als``: the same with ``solver="als_distributed"`` (ALS on the Ray actors: each holds
  the ratings of its row block and of its column block, and a sweep is two rounds in which the
  actors exchange factor blocks), ``λ`` and ``b`` tuned alike;
* ``dpopt``: the same by single-process HAMSI on 2 threads (``MFRecommender`` defaults, ``λ`` and
  ``b`` tuned alike), for reference;
* ``spark``: ``pyspark.ml.recommendation.ALS(rank=10, regParam=λ, maxIter=10)`` on
  ``local[2]`` (Spark's defaults otherwise: no biases, ratings as given);
* ``spark-centred``: the same on ratings minus their training mean (added back to predictions):
  Spark ALS has no bias terms, so this is the usual way to help it.

Measured per fit, over the worker's whole process tree (the Python driver, Ray's daemons and
actors, Spark's JVM): **start-up** (``ray.init`` and actors / ``SparkSession``) and **fit** wall
seconds, **CPU** seconds of the tree during start-up + fit (user + system, from
``/proc/<pid>/stat``, sampled every 0.2 s and at the phase boundaries), and **peak memory**: the
largest sum of the tree's proportional set sizes (PSS, ``/proc/<pid>/smaps_rollup``; shared pages
such as Ray's object store counted once), from the start-up to the end of the fit, and the same
above the worker's size with the data loaded.

Run (pyspark in a side environment over the system packages; Java 17 at /usr/bin/java)::

    python3 -m venv --system-site-packages /tmp/sparkvenv && /tmp/sparkvenv/bin/pip install pyspark
    PYTHONPATH=src nice -n 10 /tmp/sparkvenv/bin/python benchmarks/bench_mf_distributed.py \\
        --out /tmp/mf_distributed.json

Options: ``--libraries dpopt-ray dpopt spark spark-centred``, ``--quick`` (one ridge value per
library, no tuning), ``--grid spark=0.01`` (a library's ridge candidates; one value and one bias
setting: no tuning), ``--bias dpopt-ray=mean`` (a dpopt library's bias candidates).  Output recorded in ``docs/mf_peers.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

GRIDS = {  # ridge candidates on each library's own scale
    "dpopt-ray": [0.3, 1.0, 3.0],
    "dpopt-ray-als": [1.0, 2.0, 3.0],
    "dpopt": [0.3, 1.0, 3.0],
    "spark": [0.003, 0.01, 0.03],  # Spark scales regParam by each user's / item's rating count
    "spark-centred": [0.003, 0.01, 0.03],
}
BIASES = {
    "dpopt-ray": [True, "mean"],
    "dpopt-ray-als": [True, "mean"],
    "dpopt": [True, "mean"],
}  # bias settings the validation chooses from
QUICK = {"dpopt-ray-als": 2.0, "dpopt-ray": 1.0, "dpopt": 1.0, "spark": 0.01, "spark-centred": 0.01}
THREADS = 2


# ============================================================================ process-tree monitor
def _tree(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def _cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _pss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return float(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class TreeMonitor:
    """Samples CPU (last value seen per pid) and the PSS sum of a process tree."""

    def __init__(self, root: int, period: float = 0.2) -> None:
        self.root = root
        self.period = period
        self.cpu: dict[int, float] = {}
        self.peak = 0.0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def sample(self) -> float:
        pids = _tree(self.root)
        total = 0.0
        for pid in pids:
            c = _cpu_s(pid)
            if c is not None:
                with self.lock:
                    self.cpu[pid] = c
            total += _pss_mb(pid)
        with self.lock:
            self.peak = max(self.peak, total)
        return total

    def _loop(self) -> None:
        while not self.stop.wait(self.period):
            self.sample()

    def cpu_total(self) -> float:
        with self.lock:
            return sum(self.cpu.values())

    def reset_peak(self) -> None:
        with self.lock:
            self.peak = 0.0

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


# ============================================================================ fits (in the worker)
def mark(name: str) -> None:
    print(f"MARK {name}", flush=True)
    sys.stdin.readline()  # wait until the parent has sampled the tree


def _clip_rmse(pred: np.ndarray, train: Any, test: Any) -> float:
    pred = np.clip(pred, float(train.values.min()), float(train.values.max()))
    return float(math.sqrt(float(np.mean((pred - test.values) ** 2))))


def fit_dpopt(
    train: Any, test: Any, lam: float, ray: bool, bias: bool | str = True, solver: str = "hamsi_distributed"
) -> dict[str, Any]:
    from dpopt.recommender import MFRecommender

    mark("start")
    opts: dict[str, Any] = {}
    eng = None
    if ray:
        from dpopt.distributed.engines import RayEngine

        eng = RayEngine(THREADS, num_cpus=THREADS)
        opts = {"engine": eng, "n_shards": THREADS}
        if solver == "hamsi_distributed":
            opts.update(tol=1e-4, patience=5)
    mark("ready")
    model = MFRecommender(
        rank=10, l2=lam, bias=bias, n_threads=THREADS, rng=0, max_iter=500,
        solver=solver if ray else "hamsi", solver_options=opts or None,
    )  # fmt: skip
    model.fit(train)
    mark("fitted")
    res = model.result_
    assert res is not None
    out = {
        "rmse": model.score(test),
        "epochs": res.n_epochs,
        "status": res.status,
        "restarts": res.n_restarts,
    }
    if eng is not None:
        eng.close()
    return out


def fit_spark(train: Any, test: Any, lam: float, centred: bool) -> dict[str, Any]:
    import pandas as pd
    from pyspark.ml.recommendation import ALS
    from pyspark.sql import SparkSession

    mark("start")
    spark = (
        SparkSession.builder.master(f"local[{THREADS}]")
        .appName("bench_mf_distributed")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(4 * THREADS))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    mark("ready")
    mu = float(np.mean(train.values)) if centred else 0.0
    df = spark.createDataFrame(
        pd.DataFrame(
            {"u": train.rows.astype(np.int32), "i": train.cols.astype(np.int32), "r": train.values - mu}
        )
    )
    als = ALS(rank=10, regParam=lam, maxIter=10, userCol="u", itemCol="i", ratingCol="r", seed=0,
              coldStartStrategy="nan")  # fmt: skip
    model = als.fit(df)
    mark("fitted")
    tdf = spark.createDataFrame(
        pd.DataFrame(
            {"k": np.arange(test.n_ratings), "u": test.rows.astype(np.int32), "i": test.cols.astype(np.int32)}
        )
    )
    got = model.transform(tdf).select("k", "prediction").toPandas().sort_values("k")
    pred = got["prediction"].to_numpy(dtype=np.float64) + mu
    pred = np.where(np.isnan(pred), float(np.mean(train.values)), pred)  # unseen user or item
    spark.stop()
    return {"rmse": _clip_rmse(pred, train, test), "epochs": 10, "status": "maxIter"}


def worker(job: dict[str, Any]) -> dict[str, Any]:
    from bench_mf_peers import load

    train, test, fit, val = load("synthetic")
    a, b = (fit, val) if job["kind"] == "tune" else (train, test)
    lib, lam = job["lib"], job["lam"]
    if lib.startswith("dpopt"):
        solver = "als_distributed" if lib == "dpopt-ray-als" else "hamsi_distributed"
        return fit_dpopt(
            a, b, lam, ray=lib.startswith("dpopt-ray"), bias=job.get("bias", True), solver=solver
        )
    return fit_spark(a, b, lam, centred=lib == "spark-centred")


# ============================================================================ driver
def run_job(job: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, str(HERE), "--worker", json.dumps(job)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    mon = TreeMonitor(proc.pid)
    marks: dict[str, tuple[float, float, float]] = {}  # name -> (wall, tree CPU, tree PSS)
    peak_fit = 0.0
    last = ""
    timer = threading.Timer(3600, proc.kill)  # no run waits forever
    timer.start()
    try:
        for line in proc.stdout:
            last = line.strip()
            if last.startswith("MARK "):
                name = last.split()[1]
                pss = mon.sample()
                if name == "start":
                    mon.reset_peak()
                if name == "fitted":
                    peak_fit = mon.peak
                marks[name] = (time.perf_counter(), mon.cpu_total(), pss)
                proc.stdin.write("\n")
                proc.stdin.flush()
        proc.wait(timeout=600)
    finally:
        timer.cancel()
        mon.close()
    err = proc.stderr.read()
    if proc.returncode != 0 or not last.startswith("{"):
        tail = err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"
        return {"error": tail}
    out: dict[str, Any] = json.loads(last)
    t0, c0, base = marks["start"]
    t1, _, _ = marks["ready"]
    t2, c2, _ = marks["fitted"]
    out.update(startup_s=t1 - t0, fit_s=t2 - t1, cpu_s=c2 - c0, peak_mb=peak_fit, base_mb=base,
               peak_over_base_mb=peak_fit - base)  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument(
        "--libraries", nargs="+", default=["dpopt-ray-als", "dpopt-ray", "dpopt", "spark", "spark-centred"]
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--grid", nargs="*", default=[], metavar="LIB=V1,V2",
        help="ridge candidates of a library (one value: no tuning, that value is used)",
    )  # fmt: skip
    ap.add_argument("--bias", nargs="*", default=[], metavar="LIB=B1,B2", help="bias candidates (True, mean)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    for item in args.bias:
        lib, values = item.split("=", 1)
        BIASES[lib] = [True if v == "True" else v for v in values.split(",")]
    for item in args.grid:
        lib, values = item.split("=", 1)
        GRIDS[lib] = [float(v) for v in values.split(",")]
    if args.worker:
        result = worker(json.loads(args.worker))
        print(json.dumps(result), flush=True)
        return
    versions = [f"python {sys.version.split()[0]}", f"numpy {np.__version__}"]
    for mod in ("ray", "pyspark"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except ImportError:
            versions.append(f"{mod} not installed")
    print(", ".join(versions), flush=True)
    print("== synthetic 2M, rank 10 ==", flush=True)
    records: list[dict[str, Any]] = []
    rows = []
    for lib in args.libraries:
        grid = [QUICK[lib]] if args.quick else GRIDS[lib]
        tuned = []
        biases: list[bool | str] = list(BIASES.get(lib, [True]))
        cands = [(lam, b) for b in biases for lam in grid]
        for lam, b in cands if len(cands) > 1 else []:
            out = run_job({"lib": lib, "lam": lam, "kind": "tune", "bias": b})
            records.append({"lib": lib, "kind": "tune", "lam": lam, "bias": b, **out})
            tuned.append((out.get("rmse", math.inf), lam, b))
            tag = f" bias={b!s:5s}" if lib in BIASES else ""
            print(f"  tune {lib:13s} ridge={lam:<6g}{tag} validation RMSE {out.get('rmse', float('nan')):.4f} "
                  f"(fit {out.get('fit_s', float('nan')):.1f} s) {out.get('error', '')}", flush=True)  # fmt: skip
        val_rmse, lam, bias = min(tuned, key=lambda t: t[0]) if tuned else (float("nan"), *cands[0])
        final = run_job({"lib": lib, "lam": lam, "kind": "final", "bias": bias})
        records.append({"lib": lib, "kind": "final", "lam": lam, "bias": bias, **final})
        if "error" in final:
            print(f"  {lib}: {final['error']}", flush=True)
            continue
        rows.append((lib, f"{lam:g}" + ("/mean" if bias == "mean" else ""), val_rmse, final))
        if args.out:
            Path(args.out).write_text(json.dumps(records, indent=1))
    print(f"\n  {'library':13s} {'ridge':>8s} {'val RMSE':>9s} {'test RMSE':>10s} {'epochs':>6s} "
          f"{'start-up s':>10s} {'fit s':>7s} {'CPU s':>7s} {'peak MB':>8s} {'above data':>10s}")  # fmt: skip
    for lib, lam, val_rmse, f in rows:
        print(f"  {lib:13s} {lam:>8s} {val_rmse:9.4f} {f['rmse']:10.4f} {f['epochs']:6d} {f['startup_s']:10.1f} "
              f"{f['fit_s']:7.1f} {f['cpu_s']:7.1f} {f['peak_mb']:8.0f} {f['peak_over_base_mb']:10.0f}",
              flush=True)  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
