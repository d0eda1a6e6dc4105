"""``admm-utility``'s "training alone" baseline before and after the pure-ε Jacobian-share rule.

Issue 13 (fourth session) changed ``minimize(method="auto")``'s pure-ε logistic default: objective
perturbation's Jacobian share is ``min(0.1, max(2, ε)/d)`` instead of 0.1.  ``admm-utility``'s
``local`` (each site alone) and ``central`` baselines call that default, so they got stronger.
This script scores the ``local`` baseline with both settings on the experiment's own sites
(default ``UtilityConfig``: Adult, even and Dirichlet splits, 5 / 20 / 100 sites), one noise seed
per site, so the PP margins in docs/admm_utility.md can be read against the new baseline.

Run::

    OMP_NUM_THREADS=1 python benchmarks/admm_local_baseline.py
"""

from __future__ import annotations

import warnings

import numpy as np

from dpopt.accounting import Budget
from dpopt.experiments import admm_utility as au
from dpopt.problems import DataBounds, ERMProblem
from dpopt.solvers import minimize


def main() -> None:
    warnings.filterwarnings("ignore")
    cfg = au.UtilityConfig()
    x, y, xt, yt = au._load()[:4]
    problem = ERMProblem("logistic", DataBounds(feature_norm=1.0, label_bound=1.0), l2_penalty=cfg.l2_penalty)
    print("| sites | split | ε | local, share 0.1 (before) | local, auto (after) |")
    print("|---|---|---|---|---|")
    for n in (5, 20, 100):
        for split in ("even", "dirichlet"):
            sites = au._sites(cfg, n, split, x, y)
            for eps in (0.5, 1.0, 2.0, 5.0):
                cells = []
                for kw in ({"method": "objective_perturbation", "jacobian_fraction": 0.1}, {}):
                    accs = [
                        au._accuracy(
                            minimize(problem, a, b, budget=Budget(eps, 0.0), rng=1000 + i, **kw).solution,
                            xt,
                            yt,
                        )
                        for i, (a, b) in enumerate(sites)
                    ]
                    cells.append(f"{np.mean(accs):.4f}")
                print(f"| {n} | {split} | {eps:g} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
