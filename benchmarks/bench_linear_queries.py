"""Benchmarks: strategy optimization for linear-query workloads (issues 3 and 16).

Suites (``--suite``):

``strategy`` (default)
    Prefix, all-range, random ranges (m = 1024) and random 2-way marginals at each domain size:
    objective, certified lower bound, gap and CPU seconds of ``optimize_strategy`` (``--paper``,
    ``--newton`` add those methods)::

        python benchmarks/bench_linear_queries.py --n 256 1024 [--paper] [--tol 1e-4 1e-7]

``census``
    A census-like union of Kronecker products (10 attributes, sizes 2..100, all 2-way marginals
    with all-range -- or prefix -- queries on the first, "age", attribute; 1.3e10 cells):
    dpopt's structured strategy (:func:`dpopt.linear_queries.optimize_union`) against HDMM's
    OPT⁺ (union of Kronecker templates, one per sub-workload) and OPT⊗ (one Kronecker template),
    both with HDMM's Gaussian (``approx=True``) templates, measured in the same process when
    ``--hdmm DIR`` points at HDMM's ``src`` directory::

        python benchmarks/bench_linear_queries.py --suite census --hdmm /tmp/hdmm/src

``nonneg``
    Effect of ``answer(..., nonnegative=True)`` (post-processing into non-negative, consistent
    tables) on the empirical total squared error, 20 releases each, on sparse records (2,000
    people on a 20x2x7x10x5x20 = 280,000-cell schema), 2-way marginals with and without ranges
    or prefixes on "age"::

        python benchmarks/bench_linear_queries.py --suite nonneg

``marginals``
    All 0..3-way marginals of ``n^5`` domains (ResidualPlanner's synthetic experiment) and of
    the Adult/CPS domains: dpopt's closed form against ResidualPlanner's sum-of-variance
    selection (``--resplan DIR`` = its ``residual_planner/selection_only`` directory), CPU time
    ratio and objective ratio::

        python benchmarks/bench_linear_queries.py --suite marginals --resplan /tmp/rp/residual_planner/selection_only

Errors are "total expected squared error per unit noise variance at l2 sensitivity 1" (the
objective of every StrategyResult; multiply by σ² of a sensitivity-1 Gaussian release).  Times are
process CPU seconds, single-threaded BLAS (the script sets OPENBLAS_NUM_THREADS/OMP_NUM_THREADS/
MKL_NUM_THREADS to 1 unless ``--threads`` is given).  Not part of the default test run.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import types
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--suite", choices=("strategy", "census", "marginals", "nonneg"), default="strategy")
    parser.add_argument("--n", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument(
        "--tol", type=float, nargs="+", default=[1e-3], help="one row per tolerance (same process)"
    )
    parser.add_argument("--paper", action="store_true", help="also run method='paper' (COA listing)")
    parser.add_argument("--newton", action="store_true", help="also run method='newton'")
    parser.add_argument("--workloads", nargs="+", default=["prefix", "all_range", "ranges", "marginals"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hdmm", metavar="DIR", help="HDMM's src directory (census suite)")
    parser.add_argument("--resplan", metavar="DIR", help="ResidualPlanner's selection_only directory")
    parser.add_argument("--repeat", type=int, default=5, help="timing repetitions (marginals suite)")
    args = parser.parse_args(argv)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    if args.suite == "census":
        return _census(args)
    if args.suite == "marginals":
        return _marginals(args)
    if args.suite == "nonneg":
        return _nonneg(args)
    return _strategy(args)


def _strategy(args: argparse.Namespace) -> int:
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
    table = Table(title=f"optimize_strategy, BLAS threads={args.threads}")
    for col in (
        "workload",
        "n",
        "method",
        "tol",
        "objective",
        "lower bound",
        "gap",
        "iters",
        "status",
        "CPU s",
    ):
        table.add_column(col, justify="right" if col not in ("workload", "method", "status") else "left")
    console = Console(width=160)
    for n in args.n:
        for name in args.workloads:
            W = makers[name](n)  # optimize_strategy forms the Gram matrix only where it needs it
            for method, tol in [(m, t) for m in methods for t in args.tol]:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = optimize_strategy(W, method=method, tol=tol)  # type: ignore[arg-type]
                table.add_row(
                    name,
                    str(n),
                    method,
                    f"{tol:g}",
                    f"{r.objective:.6g}",
                    f"{r.lower_bound:.6g}",
                    f"{r.gap:.2e}",
                    str(r.n_iter),
                    r.status,
                    f"{r.cpu_seconds:.2f}",
                )
                console.print(
                    f"done {name} n={n} {method} tol={tol:g}: gap {100 * r.gap:.3f}% in {r.cpu_seconds:.2f} s",
                    style="dim",
                )
    console.print(table)
    return 0


# ---------------------------------------------------------------------------------------- census
CENSUS = (100, 2, 7, 10, 5, 20, 4, 50, 3, 16)  # "age" first: 1.34e10 cells


def _census_workload(shape: tuple[int, ...], kind: str) -> Any:
    from dpopt.linear_queries import product_marginals

    return product_marginals(shape, 2, queries={0: kind})


def _hdmm_parts(hdmm: Any, shape: tuple[int, ...], kind: str) -> list[Any]:
    """The same workload in HDMM's objects: one Kronecker product per 2-way marginal."""
    import itertools

    import numpy as np

    workload = hdmm.workload
    parts = []
    for S in itertools.combinations(range(len(shape)), 2):
        mats = []
        for i, n in enumerate(shape):
            if i not in S:
                mats.append(workload.Total(n))
            elif i == 0:
                mats.append(workload.AllRange(n) if kind == "all_range" else workload.Prefix(n))
            else:
                mats.append(hdmm.matrix.EkteloMatrix(np.eye(n)))
        parts.append(workload.Kronecker(mats))
    return parts


def _import_hdmm(path: str) -> Any:
    sys.path.insert(0, path)
    import hdmm.matrix
    import hdmm.templates
    import hdmm.workload
    import numpy as np

    # compatibility with numpy >= 2: np.abs on HDMM's operators (which refuse ufuncs) -> abs()
    def sensitivity(self: Any) -> Any:
        return np.max(abs(self).sum(axis=0))

    hdmm.matrix.EkteloMatrix.sensitivity = sensitivity
    return types.SimpleNamespace(matrix=hdmm.matrix, templates=hdmm.templates, workload=hdmm.workload)


def _census(args: argparse.Namespace) -> int:
    import numpy as np

    from dpopt.linear_queries import optimize_union

    hdmm = _import_hdmm(args.hdmm) if args.hdmm else None
    rows = []
    for kind in ("all_range", "prefix"):
        for shape in ((20, 2, 7, 5), CENSUS):
            W = _census_workload(shape, kind)
            t0 = time.process_time()
            res = optimize_union(W)
            ours = time.process_time() - t0
            row = {
                "workload": f"2-way marginals, {kind} on age",
                "shape": "x".join(map(str, shape)),
                "cells": f"{math.prod(shape):.3g}",
                "queries": W.n_queries,
                "dpopt objective": res.objective,
                "dpopt lower bound": res.lower_bound,
                "dpopt gap": res.gap,
                "dpopt CPU s": ours,
            }
            if math.prod(shape) <= 4096:  # independent check against the dense certified solver
                from dpopt.linear_queries import optimize_strategy

                dense = optimize_strategy(W.__class__(W.parts), tol=1e-6)
                row["dense objective"] = dense.objective
            if hdmm is not None:
                parts = _hdmm_parts(hdmm, shape, kind)
                T = hdmm.templates
                np.random.seed(args.seed)  # noqa: NPY002 -- HDMM's templates draw their seeds from it
                t0 = time.process_time()
                plus = T.Union([T.DefaultKron(list(shape), approx=True) for _ in parts], approx=True)
                loss_plus = plus.optimize(parts)
                row["HDMM OPT+ objective"] = float(loss_plus)
                row["HDMM OPT+ CPU s"] = time.process_time() - t0
                t0 = time.process_time()
                kron = T.DefaultKron(list(shape), approx=True)
                loss_kron = kron.optimize(hdmm.workload.VStack(parts))
                row["HDMM OPT⊗ objective"] = float(loss_kron)
                row["HDMM OPT⊗ CPU s"] = time.process_time() - t0
                best = min(loss_plus, loss_kron)
                row["HDMM best / dpopt"] = float(best / res.objective)
            rows.append(row)
            print(" | ".join(f"{k}: {_fmt(v)}" for k, v in row.items()), flush=True)
    _print_markdown(rows)
    return 0


# ---------------------------------------------------------------------------------------- nonneg
def _nonneg(args: argparse.Namespace) -> int:
    import numpy as np

    from dpopt.accounting import Budget, make_accountant
    from dpopt.linear_queries import Schema, answer, optimize_union, product_marginals

    shape = (20, 2, 7, 10, 5, 20)
    schema = Schema.from_dict({f"a{i}": n for i, n in enumerate(shape)})
    g = np.random.default_rng(args.seed)
    # skewed (Zipf-like) attribute values: most cells of the 2-way tables are empty or small
    table = {f"a{i}": np.minimum(g.zipf(1.6, 2000) - 1, n - 1) for i, n in enumerate(shape)}
    records = schema.records(table)
    rows = []
    for kind in ("identity", "prefix", "all_range"):
        W = product_marginals(shape, 2, queries={0: kind})
        res = optimize_union(W)
        truth = np.concatenate(
            [
                _part_truth(records, part)
                for part in W.parts  # exact answers from the records' marginals
            ]
        )
        for eps in (0.1, 1.0):
            b = Budget(eps, 1e-6)
            err = {"least squares": [], "non-negative": []}
            neg = []
            t_nn = 0.0
            for s in range(20):
                ls = answer(W, records, budget=b, rng=s, strategy=res, accountant=make_accountant("rdp"))
                t0 = time.process_time()
                nn = answer(
                    W,
                    records,
                    budget=b,
                    rng=s,
                    strategy=res,
                    accountant=make_accountant("rdp"),
                    nonnegative=True,
                )
                t_nn += time.process_time() - t0
                err["least squares"].append(float(np.sum((ls.values - truth) ** 2)))
                err["non-negative"].append(float(np.sum((nn.values - truth) ** 2)))
                neg.append(float(np.mean(ls.values < 0)))
            row = {
                "workload": f"2-way marginals, {kind} on a0",
                "ε": eps,
                "expected (LS)": ls.expected_error,
                "empirical LS": float(np.mean(err["least squares"])),
                "empirical non-negative": float(np.mean(err["non-negative"])),
                "ratio NN/LS": float(np.mean(err["non-negative"]) / np.mean(err["least squares"])),
                "LS answers < 0": float(np.mean(neg)),
                "NN CPU s per release": t_nn / 20,
            }
            rows.append(row)
            print(" | ".join(f"{k}: {_fmt(v)}" for k, v in row.items()), flush=True)
    _print_markdown(rows)
    return 0


def _part_truth(records: Any, part: Any) -> Any:
    from dpopt.linear_queries.workloads import Total, kron_apply

    S = tuple(i for i, f in enumerate(part.factors) if not isinstance(f, Total))
    table = records.marginal(S).reshape(-1)
    return kron_apply([part.factors[i].matrix() for i in S], table) if S else table


# ------------------------------------------------------------------------------------- marginals
def _import_resplan(path: str) -> Any:
    # the selection code imports gurobipy and cvxpy at module level but the sum-of-variance
    # selection uses neither (closed form): stub them so the module loads
    for name in ("gurobipy", "cvxpy"):
        if name not in sys.modules:
            stub = types.ModuleType(name)
            stub.GRB = None  # type: ignore[attr-defined]
            sys.modules[name] = stub
    sys.path.insert(0, path)
    import workload as rp_workload

    return rp_workload


def _marginals(args: argparse.Namespace) -> int:
    import itertools

    from dpopt.linear_queries import optimize_strategy
    from dpopt.linear_queries import workloads as wl

    rp = _import_resplan(args.resplan) if args.resplan else None
    cases: list[tuple[str, tuple[int, ...], int]] = [
        (f"{n}^5, <=3-way", (n,) * 5, 3) for n in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
    ]
    cases += [
        ("CPS, <=3-way", (50, 100, 7, 4, 2), 3),
        ("Adult, <=2-way", (85, 9, 100, 16, 7, 15, 6, 5, 2, 100, 100, 99, 42, 2), 2),
        ("Adult, <=3-way", (85, 9, 100, 16, 7, 15, 6, 5, 2, 100, 100, 99, 42, 2), 3),
        ("10^20, <=2-way", (10,) * 20, 2),
    ]
    rows = []
    for label, shape, k in cases:
        subsets = [S for r in range(k + 1) for S in itertools.combinations(range(len(shape)), r)]

        def ours(shape: tuple[int, ...] = shape, subsets: list[tuple[int, ...]] = subsets) -> float:
            return optimize_strategy(wl.Marginals(shape, subsets)).objective

        t_ours, obj = _best_time(ours, args.repeat)
        row: dict[str, Any] = {
            "workload": label,
            "cells": f"{math.prod(shape):.3g}",
            "dpopt CPU ms": 1e3 * t_ours,
        }
        if rp is not None:

            def theirs(shape: tuple[int, ...] = shape, k: int = k) -> float:
                system = rp.RPSumVar(list(shape))
                for r in range(k + 1):
                    for S in itertools.combinations(range(len(shape)), r):
                        system.input_mech(S)
                return float(system.get_noise_level())

            t_rp, obj_rp = _best_time(theirs, args.repeat)
            row["ResidualPlanner CPU ms"] = 1e3 * t_rp
            row["time ratio dpopt/RP"] = t_ours / t_rp
            row["objective ratio dpopt/RP"] = obj / obj_rp
        rows.append(row)
        print(" | ".join(f"{k2}: {_fmt(v)}" for k2, v in row.items()), flush=True)
    _print_markdown(rows)
    return 0


def _best_time(fn: Any, repeat: int) -> tuple[float, Any]:
    best, out = math.inf, None
    for _ in range(max(1, repeat)):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.6g}"
    return str(v)


def _print_markdown(rows: list[dict[str, Any]]) -> None:
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    print()
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |")


if __name__ == "__main__":
    sys.exit(main())
