"""Benchmark: strategy optimization for linear-query workloads (issue 3 goals).

Prints, for prefix, all-range, random ranges (m = 1024) and random 2-way marginals (m = 1024) at
each domain size, the objective, the certified lower bound, the relative gap and the CPU seconds of
``optimize_strategy`` (default method) and, with ``--paper``, of the faithful COA variant.

Run single-threaded as in the issue's goals::

    python benchmarks/bench_linear_queries.py --n 256 1024 [--paper] [--tol 1e-3]

(The script sets OPENBLAS_NUM_THREADS/OMP_NUM_THREADS/MKL_NUM_THREADS to 1 unless ``--threads`` is
given.)  Not part of the default test run.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--paper", action="store_true", help="also run method='paper' (COA listing)")
    parser.add_argument("--newton", action="store_true", help="also run method='newton'")
    parser.add_argument("--workloads", nargs="+", default=["prefix", "all_range", "ranges", "marginals"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    import warnings

    from rich.console import Console
    from rich.table import Table

    from dpopt.linear_queries import optimize_strategy
    from dpopt.linear_queries import workloads as wl

    makers = {
        "prefix": lambda n: wl.prefix(n),
        "all_range": lambda n: wl.all_range(n),
        "ranges": lambda n: wl.random_ranges(args.m, n, rng=args.seed),
        "marginals": lambda n: wl.random_marginals(args.m, n, rng=args.seed),
        "discrete": lambda n: wl.random_bernoulli(args.m, n, rng=args.seed),
        "related": lambda n: wl.random_related(args.m, n, rng=args.seed),
    }
    methods = ["dual"] + (["paper"] if args.paper else []) + (["newton"] if args.newton else [])
    table = Table(title=f"optimize_strategy, tol={args.tol:g}, BLAS threads={args.threads}")
    for col in ("workload", "n", "method", "objective", "lower bound", "gap", "iters", "status", "CPU s"):
        table.add_column(col, justify="right" if col not in ("workload", "method", "status") else "left")
    console = Console(width=160)
    for n in args.n:
        for name in args.workloads:
            W = makers[name](n)
            W.gram()
            for method in methods:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = optimize_strategy(W, method=method, tol=args.tol)  # type: ignore[arg-type]
                table.add_row(
                    name,
                    str(n),
                    method,
                    f"{r.objective:.6g}",
                    f"{r.lower_bound:.6g}",
                    f"{r.gap:.2e}",
                    str(r.n_iter),
                    r.status,
                    f"{r.cpu_seconds:.2f}",
                )
                console.print(
                    f"done {name} n={n} {method}: gap {100 * r.gap:.3f}% in {r.cpu_seconds:.2f} s",
                    style="dim",
                )
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
