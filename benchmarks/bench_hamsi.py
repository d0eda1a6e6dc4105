"""HAMSI benchmark: training RMSE vs wall-clock on MovieLens 100K next to the authors' C++ code.

Run ``python benchmarks/bench_hamsi.py [--budget 25] [--data PATH]`` (not part of the test run).

Prints

1. training RMSE at 2, 5, 10, 25 s of optimization (evaluations excluded, as in the reference code)
   for dpopt's HAMSI (1 and 2 threads) and mb-GD, next to the reference C++/OpenMP implementation
   (``spartensor/hamsi-mf``, one thread, measured on this kind of machine; numbers from issue 7);
   rank 50, η = 0.06, γ = 0.51, memory 5, unregularized squared loss with 1/(2|Ω|) scaling,
   N(0, 1) initialization, one subset (one thread ⇒ one stratum), the reference code's inner β
   counter, running-minimum σ from 500 and curvature test sᵀy/‖y‖ > 1e-6;
2. the time of one full gradient on 1M synthetic ratings (rank 50) with 1 and 2 threads;
3. the time split per step (gradient / update / Hessian maintenance, Fig. 3.7).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from dpopt.datasets import load_movielens, make_low_rank_ratings
from dpopt.matrix_factorization import MatrixFactorizationProblem
from dpopt.solvers.hamsi import HamsiResult, hamsi, mbgd

CHECKPOINTS = (2.0, 5.0, 10.0, 25.0)
CPP_HAMSI = {2.0: 0.48, 5.0: 0.36, 10.0: 0.28, 25.0: 0.235}
CPP_MBGD = {2.0: 3.0, 5.0: 2.1, 10.0: 1.6, 25.0: 1.2}
REFERENCE: dict[str, Any] = {
    "beta_counter": "inner",
    "sigma_mode": "running_min",
    "curvature": "reference",
    "beta_floor": 0.0,
    "safeguard": False,
}


def default_data() -> Path:
    return Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "movielens-100k" / "u.data"


def best_time(fn: Any, repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def row(name: str, res: HamsiResult, ref: dict[float, float] | None, budget: float) -> str:
    cells = []
    for t in CHECKPOINTS:
        if t > budget + 1e-9:
            continue
        ours = res.rmse_at(t)
        cell = f"{ours:7.3f}"
        if ref is not None:
            cell += f" ({ref[t]:.3f})"
        cells.append(cell.ljust(16))
    return f"{name:<34}" + "".join(cells) + f" steps={res.n_steps}"


def split(res: HamsiResult) -> str:
    n = max(res.n_steps, 1)
    t = res.timings
    return (
        f"gradient {1e3 * t['gradient'] / n:6.2f} ms  update {1e3 * t['update'] / n:6.2f} ms  "
        f"hessian {1e3 * t['hessian'] / n:6.2f} ms  per step"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data())
    ap.add_argument("--budget", type=float, default=25.0)
    ap.add_argument("--seed", type=int, default=1453)
    ap.add_argument("--skip-movielens", action="store_true")
    args = ap.parse_args()

    if not args.skip_movielens:
        if not args.data.is_file():
            raise SystemExit(f"MovieLens 100K not found at {args.data}; pass --data")
        problem = MatrixFactorizationProblem(load_movielens(args.data), 50)
        budget = args.budget
        print(f"MovieLens 100K: {problem.n_ratings} ratings, {problem.shape}, rank 50, budget {budget:g} s")
        header = "".join(f"{t:>5g} s (C++)".ljust(16) for t in CHECKPOINTS if t <= budget + 1e-9)
        print(f"{'training RMSE at':<34}{header}")
        runs = {}
        runs["hamsi-1"] = hamsi(
            problem, time_budget=budget, max_iter=10**7, n_threads=1, rng=args.seed, **REFERENCE
        )
        print(row("dpopt HAMSI, 1 thread", runs["hamsi-1"], CPP_HAMSI, budget), flush=True)
        runs["hamsi-2"] = hamsi(
            problem, time_budget=budget, max_iter=10**7, n_threads=2, rng=args.seed, **REFERENCE
        )
        print(row("dpopt HAMSI, 2 threads", runs["hamsi-2"], CPP_HAMSI, budget), flush=True)
        runs["hamsi-def"] = hamsi(problem, time_budget=budget, max_iter=10**7, n_threads=1, rng=args.seed)
        print(row("dpopt HAMSI defaults, 1 thread", runs["hamsi-def"], None, budget), flush=True)
        runs["mbgd-1"] = mbgd(problem, time_budget=budget, max_iter=10**7, n_threads=1, rng=args.seed)
        print(row("dpopt mb-GD, 1 thread", runs["mbgd-1"], CPP_MBGD, budget), flush=True)
        print("\nTime split (Fig. 3.7):")
        for name, res in runs.items():
            print(f"  {name:<10} {split(res)}")

    print("\nFull gradient, 1M synthetic ratings (6040 x 3883), rank 50:")
    n_users, n_items = 6040, 3883
    ratings = make_low_rank_ratings(n_users, n_items, 10, 1_000_000 / (n_users * n_items), rng=0)
    big = MatrixFactorizationProblem(ratings, 50, allow_empty=True)
    U, V = big.init_factors(rng=0)
    big.gradient(U, V)  # compile / load
    t1 = best_time(lambda: big.gradient(U, V, n_threads=1))
    t2 = best_time(lambda: big.gradient(U, V, n_threads=2))
    print(f"  1 thread {t1 * 1e3:7.1f} ms   2 threads {t2 * 1e3:7.1f} ms   speed-up {t1 / t2:4.2f}x")
    assert np.isfinite(t1)


if __name__ == "__main__":
    main()
