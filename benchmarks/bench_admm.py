"""Private ADMM benchmark: time per round on UCI Adult (100 nodes) and synthetic data (up to 100,000 nodes).

Run ``python benchmarks/bench_admm.py [--rounds 4] [--skip-ray] [--skip-big] [--scale] [--old-src DIR]``
(not part of the tests).

Prints

1. Adult, 100 nodes (G(100, 0.05), even split, d = 105), PP: seconds per round with the in-process
   engine (1 and 2 shards) and, for comparison, the processes and Ray engines (2 workers); the
   engine overhead is reported as a ratio to the in-process engine.  Target: < 0.5 s per round.
2. Synthetic, 1,000 nodes (G(1000, 0.01), d = 100, 200 rows per node), PP, in-process engine with
   1 and 2 shards.  Target: < 3 s per round.

3. ``--scale`` (issue 14 §4): PP in-process on synthetic data (d = 100, 200 rows per node, rows of
   norm <= 1) on ring(1,000), ring(10,000), random_geometric(10,000, 0.02) and ring(100,000) (20
   rows per node there: 200 would need 16 GB for the data alone; also rgg(1,000, 0.06)), each in a
   fresh subprocess:
   CPU seconds per round, wall seconds per round, set-up, peak resident memory.  With
   ``--old-src DIR`` (a source tree of an older dpopt, e.g. ``git archive c1ed3dd src | tar -x -C DIR``)
   the same configurations are run with that code in the same invocation, side by side, and the
   ratio old/new is printed (the old code runs on ring(1,000), rgg(1,000) and ring(10,000) only: it
   needs ~35 s per round on ring(10,000); configurations above ``--old-max-nodes`` are skipped).

A round's time is the median time between the ends of consecutive rounds of one run (set-up: shard
construction and worker start-up, is printed separately, together with the first round).  On a
shared machine the load of other processes inflates every figure; compare ratios.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path
from typing import Any

from dpopt.datasets import load_adult, make_logistic
from dpopt.distributed.admm import PrivateADMM, geometric
from dpopt.distributed.engines import Engine, InProcessEngine, ProcessEngine, ray_available
from dpopt.distributed.topology import erdos_renyi, split_rows


def default_data() -> Path:
    return Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "adult"


def per_round(topo: Any, data: list, rounds: int, engine: Engine) -> tuple[float, float]:
    """(median seconds per round, seconds to the end of round 1) on an engine object."""
    stamps: list[float] = []
    alg = PrivateADMM(
        topo, method="pp", penalty=geometric(0.5, 1.03), noise_rate=geometric(3.0, 1.01), max_iter=rounds + 1
    )
    t0 = time.perf_counter()
    alg.run(data, rng=0, engine=engine, callback=lambda info: stamps.append(time.perf_counter()))
    diffs = sorted(b - a for a, b in itertools.pairwise(stamps))
    return diffs[len(diffs) // 2], stamps[0] - t0


def _synthetic(n_nodes: int, rows: int, d: int) -> list[tuple[Any, Any]]:
    """Per-node views of one synthetic logistic data set (rows of norm <= 1, labels ±1)."""
    import numpy as np

    g = np.random.default_rng(0)
    X = g.standard_normal((n_nodes * rows, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    w = 3.0 * g.standard_normal(d) / np.sqrt(d)
    y = np.where(g.random(n_nodes * rows) < 1.0 / (1.0 + np.exp(-(X @ w))), 1.0, -1.0)
    return [(X[i * rows : (i + 1) * rows], y[i * rows : (i + 1) * rows]) for i in range(n_nodes)]


SCALE_CONFIGS: list[dict[str, Any]] = [
    {"graph": "ring", "n_nodes": 1_000, "rows": 200, "old": True},
    {"graph": "rgg", "n_nodes": 1_000, "rows": 200, "radius": 0.06, "old": True},
    {"graph": "ring", "n_nodes": 10_000, "rows": 200, "old": True},
    {"graph": "rgg", "n_nodes": 10_000, "rows": 200, "radius": 0.02, "old": False},
    {"graph": "ring", "n_nodes": 100_000, "rows": 20, "old": False},
]


def scale_worker(cfg: dict[str, Any]) -> dict[str, Any]:
    """One configuration in this process (whatever dpopt is importable); returns the measurements."""
    import resource

    import dpopt
    from dpopt.distributed import topology as topo_mod

    d, rounds = 100, int(cfg["rounds"])
    if cfg["graph"] == "ring":
        topo = topo_mod.ring(cfg["n_nodes"])
    else:
        topo = topo_mod.random_geometric(cfg["n_nodes"], cfg["radius"], rng=0)
    data = _synthetic(cfg["n_nodes"], cfg["rows"], d)
    alg = PrivateADMM(
        topo, method="pp", penalty=geometric(0.5, 1.03), noise_rate=geometric(3.0, 1.01), max_iter=rounds + 1
    )
    cpu: list[float] = []
    wall: list[float] = []
    c0, w0 = time.process_time(), time.perf_counter()
    alg.run(
        data,
        rng=0,
        callback=lambda info: (cpu.append(time.process_time()), wall.append(time.perf_counter())),
    )
    c_end, w_end = time.process_time(), time.perf_counter()

    def med(v: list[float]) -> float:
        diffs = sorted(b - a for a, b in itertools.pairwise(v))
        return diffs[len(diffs) // 2]

    return {
        "dpopt": str(Path(dpopt.__file__).parents[1]),
        "edges": topo.n_edges,
        "cpu_per_round": med(cpu),
        "wall_per_round": med(wall),
        "setup_wall": wall[0] - w0,
        "setup_cpu": cpu[0] - c0,
        "after_last_round_wall": w_end - wall[-1],
        "after_last_round_cpu": c_end - cpu[-1],
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
    }


def run_scale(args: argparse.Namespace) -> None:
    import json
    import os
    import subprocess
    import sys

    new_src = Path(__file__).resolve().parents[1] / "src"
    print(
        f"3. scale: PP, in-process engine (1 shard), d = 100, {args.rounds} timed rounds, BLAS single-threaded; "
        "CPU = process time; each cell a fresh process"
    )
    print(
        f"   {'graph':26s} {'rows':>5s} {'code':4s} {'cpu s/rd':>9s} {'wall s/rd':>9s} {'set-up s':>9s} "
        f"{'after s':>8s} {'peak GB':>8s}"
    )
    wanted = {int(k) for k in args.configs.split(",") if k.strip()} if args.configs else None
    for index, cfg in enumerate(SCALE_CONFIGS):
        if args.max_nodes and cfg["n_nodes"] > args.max_nodes:
            continue
        if wanted is not None and index not in wanted:
            continue
        row: dict[str, dict[str, Any]] = {}
        codes = [("new", new_src)]
        if args.old_src and cfg["old"] and cfg["n_nodes"] <= args.old_max_nodes:
            codes.append(("old", Path(args.old_src).resolve()))
        for code, src in codes:
            env = dict(
                os.environ,
                PYTHONPATH=str(src),
                OMP_NUM_THREADS="1",
                OPENBLAS_NUM_THREADS="1",
                MKL_NUM_THREADS="1",
            )
            job = json.dumps({**cfg, "rounds": args.rounds})
            out = subprocess.run(
                [sys.executable, __file__, "--worker", job],
                env=env,
                capture_output=True,
                text=True,
                timeout=args.timeout,
            )
            if out.returncode != 0:
                print(
                    f"   {cfg['graph']} {cfg['n_nodes']} ({code}): failed: {out.stderr.strip().splitlines()[-1:]}"
                )
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            row[code] = r
            name = f"{cfg['graph']}({cfg['n_nodes']:,}) |E|={r['edges']:,}"
            print(
                f"   {name:26s} {cfg['rows']:5d} {code:4s} {r['cpu_per_round']:9.3f} {r['wall_per_round']:9.3f} "
                f"{r['setup_wall']:9.2f} {r['after_last_round_wall']:8.2f} {r['peak_rss_gb']:8.2f}",
                flush=True,
            )
        if "old" in row and "new" in row:
            ratio = row["old"]["cpu_per_round"] / row["new"]["cpu_per_round"]
            after = row["old"]["after_last_round_wall"] / max(row["new"]["after_last_round_wall"], 1e-9)
            print(
                f"   {'':26s} {'':5s} old/new: {ratio:.1f}x CPU per round; {after:.0f}x time after the last round"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--data", type=Path, default=default_data())
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--skip-adult", action="store_true")
    ap.add_argument("--scale", action="store_true", help="run the scale table (section 3)")
    ap.add_argument("--max-nodes", type=int, default=0, help="skip scale configurations above this N")
    ap.add_argument(
        "--configs", type=str, default="", help="comma-separated indices into SCALE_CONFIGS (default: all)"
    )
    ap.add_argument("--old-src", type=Path, default=None, help="source tree of the code to compare with")
    ap.add_argument("--old-max-nodes", type=int, default=10_000)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--worker", type=str, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        import json

        print(json.dumps(scale_worker(json.loads(args.worker))))
        return
    if not args.skip_adult:
        adult_and_big(args)
    if args.scale:
        run_scale(args)


def adult_and_big(args: argparse.Namespace) -> None:
    if (args.data / "adult.data").is_file():
        ds = load_adult(args.data)
        label = "UCI Adult"
    else:
        ds = make_logistic(45_222, 105, rng=0)
        label = "synthetic stand-in for Adult (files not found)"
    assert ds.y is not None
    topo = erdos_renyi(100, 0.05, rng=0)
    parts = split_rows(ds.X.shape[0], 100, rng=0)
    data = [(ds.X[p], ds.y[p]) for p in parts]
    print(f"1. {label}: 100 nodes, {topo.n_edges} edges, d = {ds.X.shape[1]}, PP, {args.rounds} timed rounds")
    results: dict[str, float] = {}
    engines: list[tuple[str, Any]] = [
        ("inprocess (1 shard)", lambda: InProcessEngine(1)),
        ("inprocess (2 shards, 2 threads)", lambda: InProcessEngine(2)),
        ("processes (2 workers)", lambda: ProcessEngine(2)),
    ]
    if not args.skip_ray and ray_available():
        from dpopt.distributed.engines import RayEngine

        engines.append(("ray (2 actors, local cluster)", lambda: RayEngine(2, num_cpus=2)))
    for name, make in engines:
        with make() as eng:
            sec, setup = per_round(topo, data, args.rounds, eng)
        results[name] = sec
        base = results["inprocess (1 shard)"]
        print(
            f"   {name:34s} {sec:7.3f} s/round   (set-up + 1 round {setup:6.2f} s)   ratio {sec / base:5.2f}"
        )

    if args.skip_big:
        return
    n_nodes, rows, d = 1000, 200, 100
    syn = make_logistic(n_nodes * rows, d, rng=0)
    assert syn.y is not None
    topo = erdos_renyi(n_nodes, 0.01, rng=0)
    parts = split_rows(n_nodes * rows, n_nodes, rng=0)
    data = [(syn.X[p], syn.y[p]) for p in parts]
    print(f"2. synthetic: {n_nodes} nodes, {topo.n_edges} edges, d = {d}, {rows} rows per node, PP")
    for shards in (1, 2):
        with InProcessEngine(shards) as eng:
            sec, setup = per_round(topo, data, args.rounds, eng)
        print(f"   inprocess ({shards} shard(s)) {sec:7.3f} s/round   (set-up + 1 round {setup:6.2f} s)")


if __name__ == "__main__":
    main()
