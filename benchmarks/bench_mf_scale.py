"""HAMSI at scale: set-up time, epoch time and peak memory on 10M and 25M memory-mapped ratings.

Run ``python benchmarks/bench_mf_scale.py [--sizes 10 25] [--threads 2] [--epochs 3]`` (not part
of the test run).  For every size (millions of ratings) a synthetic rank-10 problem with noise 0.5
and ratings around 3.5 is written once to ``.npy`` files (``--dir``, default a temporary
directory) and each measurement runs in a fresh process that memory-maps them
(``np.load(mmap_mode="r")``), so the peak resident set size is that of the run alone:

* ``problem``: building :class:`~dpopt.matrix_factorization.MatrixFactorizationProblem` (checks,
  balanced cuts, the kernels' stratified layout);
* ``setup``: :func:`~dpopt.solvers.hamsi.hamsi` before its first step (cover, plan, initial point);
* ``epochs``: optimization seconds per epoch (2 threads by default), and evaluation seconds;
* ``peak MB``: peak resident set size of the process, and the size of the memory-mapped input
  that the process did *not* have to copy (``input MB``).

The problem uses the biased model with ``train_rmse="running"`` (what
:class:`~dpopt.recommender.MFRecommender` does).  Output recorded in ``docs/mf_peers.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve()


def make(n_millions: float, folder: Path) -> Path:
    """Write rows/cols/values of ``n_millions`` x 1e6 ratings (sorted by row, col) once."""
    d = folder / f"synthetic-{n_millions:g}m"
    if (d / "values.npy").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    n = int(n_millions * 1e6)
    n_rows, n_cols = int(10_000 * n_millions), max(10_000, int(2_000 * n_millions))
    gen = np.random.default_rng(0)
    rank = 10
    U = gen.standard_normal((n_rows, rank)) / rank**0.25
    V = gen.standard_normal((n_cols, rank)) / rank**0.25
    flat = np.unique(gen.integers(0, n_rows * n_cols, size=int(n * 1.002)))[:n]
    rows = (flat // n_cols).astype(np.int64)
    cols = (flat % n_cols).astype(np.int64)
    del flat
    vals = np.empty(rows.shape[0])
    for lo in range(0, rows.shape[0], 1_000_000):  # chunks: no 10M x rank temporaries
        hi = lo + 1_000_000
        vals[lo:hi] = np.einsum("ij,ij->i", U[rows[lo:hi]], V[cols[lo:hi]])
    vals += 3.5 + 0.5 * gen.standard_normal(vals.shape[0])
    np.save(d / "rows.npy", rows)
    np.save(d / "cols.npy", cols)
    np.save(d / "values.npy", vals)
    (d / "shape.json").write_text(json.dumps([n_rows, n_cols]))
    return d


def worker(folder: str, threads: int, epochs: int) -> dict[str, Any]:
    from dpopt.datasets import Ratings
    from dpopt.matrix_factorization import MatrixFactorizationProblem
    from dpopt.solvers import _mf_kernels
    from dpopt.solvers.hamsi import hamsi

    _mf_kernels.warmup()
    d = Path(folder)
    shape = tuple(json.loads((d / "shape.json").read_text()))
    rows = np.load(d / "rows.npy", mmap_mode="r")
    cols = np.load(d / "cols.npy", mmap_mode="r")
    vals = np.load(d / "values.npy", mmap_mode="r")
    r = Ratings(rows=rows, cols=cols, values=vals, shape=shape, name="mmap")
    t0 = time.perf_counter()
    p = MatrixFactorizationProblem(r, 10, l2=1.0 / r.n_ratings, bias=True, allow_empty=True)
    t1 = time.perf_counter()
    res = hamsi(p, max_iter=epochs, rng=0, init_scale=None, n_threads=threads, train_rmse="running")
    t2 = time.perf_counter()
    return {
        "n_ratings": r.n_ratings,
        "shape": list(shape),
        "problem_s": t1 - t0,
        "setup_s": res.setup_time,
        "epoch_s": res.elapsed / max(res.n_epochs, 1),
        "eval_s": res.eval_time,
        "hamsi_wall_s": t2 - t1,
        "rmse": res.rmse,
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "input_mb": (rows.nbytes + cols.nbytes + vals.nbytes) / 2**20,
        "input_still_mapped": isinstance(p.ratings.values, np.memmap),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", nargs="+", type=float, default=[10.0, 25.0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.threads, args.epochs)))
        return
    folder = Path(args.dir) if args.dir else Path(tempfile.gettempdir()) / "dpopt-mf-scale"
    print(f"{'ratings':>9s} {'problem s':>10s} {'setup s':>8s} {'epoch s':>8s} {'eval s':>7s} "
          f"{'peak MB':>8s} {'input MB':>9s} mapped")  # fmt: skip
    for size in args.sizes:
        d = make(size, folder)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS="1")
        proc = subprocess.run(
            [sys.executable, str(HERE), "--worker", str(d), "--threads", str(args.threads),
             "--epochs", str(args.epochs)],
            capture_output=True, text=True, env=env, timeout=3600, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            print(f"{size:g}M: failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        o = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{o['n_ratings']:9d} {o['problem_s']:10.2f} {o['setup_s']:8.2f} {o['epoch_s']:8.2f} "
              f"{o['eval_s']:7.2f} {o['peak_mb']:8.0f} {o['input_mb']:9.0f} {o['input_still_mapped']}",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
