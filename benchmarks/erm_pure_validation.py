"""Validation runs behind the pure-ε logistic defaults (issue 13): never the benchmark's test splits.

Objective perturbation at δ = 0 (replace-one) with a grid of Jacobian shares ``f`` (the share of ε
that fixes the added ridge), optionally centred on a private class prior bought with a share ``c``
of ε, on the validation splits of :mod:`erm_logistic_validation` (Adult: a 70/30 split of the
training file; breast cancer: the training part of benchmark split s split again).  Each config
sees the same noise seed per (split, repetition), so the columns are paired.

Run (the tables of docs/erm_accuracy.md, "Classification, pure ε (δ = 0), both relations")::

    OMP_NUM_THREADS=1 python benchmarks/erm_pure_validation.py --task adult --epsilons 0.1 0.2 1 5 \\
        --configs 0:0.1 0:0.05 0:0.03 0:0.02 0:0.01 0.1:0.03 0.1:0.02 --repeats 16
    OMP_NUM_THREADS=1 python benchmarks/erm_pure_validation.py --task breast_cancer --epsilons 0.5 1 2 5 \\
        --configs 0:0.1 0:0.05 0:0.03 0.1:0.1 0.1:0.03 --repeats 3
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from erm_logistic_validation import INTERCEPT, data

from dpopt.problems import DataBounds, ERMProblem
from dpopt.solvers.objective_perturbation import private_objective_perturbation


def run(
    task: str, split: int, noise_seed: int, eps: float, configs: list[tuple[float, float]]
) -> dict[str, float]:
    Xtr, Xva, ytr, yva = data(task, split)
    ytr, yva = np.where(ytr > 0, 1.0, -1.0), np.where(yva > 0, 1.0, -1.0)
    n, d = Xtr.shape
    Xa = np.hstack([Xtr, np.full((n, 1), INTERCEPT)])
    Va = np.hstack([Xva, np.full((len(yva), 1), INTERCEPT)])
    prob = ERMProblem("logistic", DataBounds(math.hypot(1.0, INTERCEPT)), None)
    out = {"majority": float(max(np.mean(yva > 0), np.mean(yva < 0)))}
    for share, jf in configs:
        rng = np.random.default_rng(noise_seed)
        centre = np.zeros(d + 1)
        if share:  # a private class prior (Laplace count, n public) as the ridge's centre
            pos = np.sum(ytr > 0) + rng.laplace(0.0, 1.0 / (share * eps))
            p = min(max(pos / n, 0.5 / n), 1 - 0.5 / n)
            centre[-1] = math.log(p / (1 - p)) / INTERCEPT
        res = private_objective_perturbation(
            prob, Xa, ytr, budget=((1 - share) * eps, 0.0), rng=int(rng.integers(1 << 30)), center=centre,
            jacobian_fraction=jf,
        )  # fmt: skip
        out[f"c{share:g}_f{jf:g}"] = float(np.mean(np.where(Va @ res.solution > 0, 1.0, -1.0) == yva))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=("adult", "breast_cancer"), required=True)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 0.5, 1.0, 2.0, 5.0])
    ap.add_argument(
        "--configs", nargs="+", default=["0:0.1", "0:0.05", "0:0.02"], help="share:jacobian_fraction"
    )
    ap.add_argument("--repeats", type=int, default=4, help="noise seeds per split")
    args = ap.parse_args()
    configs = [tuple(float(v) for v in c.split(":")) for c in args.configs]
    splits = range(9) if args.task == "breast_cancer" else range(1)  # Adult: one validation split
    warnings.filterwarnings("ignore")
    for eps in args.epsilons:
        rows = [
            run(args.task, s, 5000 + 7 * s + k, eps, configs) for s in splits for k in range(args.repeats)
        ]  # type: ignore[arg-type]
        cells = [f"{k}={np.mean([r[k] for r in rows]):.4f}±{np.std([r[k] for r in rows]) / math.sqrt(len(rows)):.4f}"
                 for k in rows[0]]  # fmt: skip
        print(args.task, eps, " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
