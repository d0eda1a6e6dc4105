"""Initialization of :class:`dpopt.recommender.MFRecommender`: the data-scaled random start (before)
against the spectral start (``init_scale="spectral"``, the default since) (issue 17, ``docs/mf_peers.md``).

Same data, split and ridge as ``bench_mf_peers.py`` (synthetic 2M: λ = 1, rank 10; MovieLens 100K:
λ = 12, ranks 10 and 50), 2 threads.  Both variants fit in this one process, interleaved, ``--repeats``
times (after one untimed 2-epoch fit that compiles the kernels); the test part is recorded every epoch (never steers the fit).  Prints the final test RMSE,
the fit time (evaluations excluded) and the time until the test RMSE is within 1 % of the best
either variant reached.

    PYTHONPATH=src nice -n 10 python benchmarks/bench_mf_init.py [--datasets synthetic movielens]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_mf_peers import load

VARIANTS: dict[str, Any] = {"random (before)": None, "spectral (default)": "spectral"}
CASES = {"synthetic": [(10, 1.0)], "movielens": [(10, 12.0), (50, 12.0)]}


def fit(train: Any, test: Any, rank: int, lam: float, init: Any, seed: int = 0) -> dict[str, Any]:
    from dpopt.recommender import MFRecommender

    t0 = time.perf_counter()
    model = MFRecommender(rank=rank, l2=lam, n_threads=2, rng=seed, max_iter=1000, init_scale=init)
    model.fit(train, validation=test)
    wall = time.perf_counter() - t0
    res = model.result_
    assert res is not None and res.history_test_rmse is not None
    outside = wall - res.elapsed - res.eval_time
    curve = [
        (outside + float(t), float(e)) for t, e in zip(res.history_time, res.history_test_rmse, strict=True)
    ]
    return {"rmse": model.score(test), "fit_s": wall - res.eval_time, "epochs": res.n_epochs,
            "restarts": res.n_restarts, "curve": curve, "seed": seed}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--datasets", nargs="+", default=["synthetic", "movielens"], choices=list(CASES))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="rng of the fits (each repeated)")
    args = ap.parse_args()
    for ds in args.datasets:
        train, test, _, _ = load(ds)
        from dpopt.recommender import MFRecommender

        MFRecommender(rank=2, n_threads=2, rng=0, max_iter=2).fit(train)  # compile the kernels first
        for rank, lam in CASES[ds]:
            runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
            for seed in args.seeds:
                for _ in range(args.repeats):
                    for name, opts in VARIANTS.items():
                        runs[name].append(fit(train, test, rank, lam, opts, seed))
            best = min(e for rs in runs.values() for r in rs for _, e in r["curve"])
            print(f"== {ds}, rank {rank}, ridge {lam:g} (best test RMSE of any run {best:.4f}) ==")
            print(
                f"  {'start':20s} {'seed':>4s} {'test RMSE':>9s} {'epochs':>6s} {'restarts':>8s} {'fit s':>7s} {'to 1 % s':>8s}"
            )
            for name, rs in runs.items():
                for r in rs:
                    t1 = min((t for t, e in r["curve"] if e <= best * 1.01), default=float("nan"))
                    print(f"  {name:20s} {r['seed']:4d} {r['rmse']:9.4f} {r['epochs']:6d} {r['restarts']:8d} "
                          f"{r['fit_s']:7.2f} {t1:8.2f}")  # fmt: skip
                mean = sum(r["rmse"] for r in rs) / len(rs)
                print(f"  {name:20s} mean test RMSE {mean:.4f} over {len(rs)} fits")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
