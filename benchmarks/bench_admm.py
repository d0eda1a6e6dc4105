"""Private ADMM benchmark: time per round on UCI Adult (100 nodes) and synthetic data (1,000 nodes).

Run ``python benchmarks/bench_admm.py [--rounds 4] [--skip-ray] [--skip-big]`` (not part of the tests).

Prints

1. Adult, 100 nodes (G(100, 0.05), even split, d = 105), PP: seconds per round with the in-process
   engine (1 and 2 shards) and, for comparison, the processes and Ray engines (2 workers); the
   engine overhead is reported as a ratio to the in-process engine.  Target: < 0.5 s per round.
2. Synthetic, 1,000 nodes (G(1000, 0.01), d = 100, 200 rows per node), PP, in-process engine with
   1 and 2 shards.  Target: < 3 s per round.

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--data", type=Path, default=default_data())
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()

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
