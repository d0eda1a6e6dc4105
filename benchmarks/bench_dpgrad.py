"""DP-SGD-type methods: time of one epoch on n = 100,000, d = 100 logistic regression, batch 100.

Run ``python benchmarks/bench_dpgrad.py`` (not part of the test run).  Acceptance (issue 5): one
epoch (T = n/m = 1,000 steps) in under 2 s on 2 cores -- per-example clipping is vectorised over
the batch (generalised-linear gradients ``φ'(<x_i, θ>) x_i`` are clipped through their scalar
factor, so no (m, d) gradient matrix and no Python loop over examples).

Prints, for each method and noise family, the wall-clock time of the whole call (data checks,
calibration and accounting included) and of the optimisation loop alone (measured through the
callback), best of 3.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from dpopt.accounting import Budget
from dpopt.problems import DataBounds, ERMProblem
from dpopt.solvers.gradient import dp_gd, dp_gdws, dp_heavy_ball, dp_nesterov
from dpopt.solvers.multistage import dp_mag

N, D, M = 100_000, 100, 100


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    w = rng.normal(size=D)
    y = np.where(rng.random(N) < 1 / (1 + np.exp(-X @ w)), 1.0, -1.0)
    return X, y


def time_epoch(
    fn: Callable[..., Any], X: np.ndarray, y: np.ndarray, budget: Budget, **kw: Any
) -> tuple[float, float]:
    problem = ERMProblem("logistic", DataBounds(feature_norm=1.0), l2_penalty=0.02)
    best_total, best_loop = np.inf, np.inf
    for rep in range(3):
        marks: list[float] = []
        t0 = time.perf_counter()
        stamp = marks.append
        fn(problem, X, y, budget=budget, rng=rep, iterations=N // M, batch_size=M,
           callback=lambda t, x, stamp=stamp: stamp(time.perf_counter()) if t in (1, N // M) else None,
           **kw)  # fmt: skip
        total = time.perf_counter() - t0
        best_total = min(best_total, total)
        best_loop = min(best_loop, marks[-1] - marks[0])
    return best_total, best_loop


def main() -> None:
    X, y = data()
    print(f"one epoch, n={N}, d={D}, batch={M} (T={N // M} steps); best of 3")
    print(f"{'method':<14}{'noise':<10}{'total [s]':>10}{'loop [s]':>10}")
    cases: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
        ("dp_sgd", dp_gd, {}),
        ("dp_sheavy_ball", dp_heavy_ball, {}),
        ("dp_snesterov", dp_nesterov, {}),
        ("dp_sgdws", dp_gdws, {}),
        ("dp_smag", dp_mag, {}),
    ]
    for name, fn, kw in cases:
        for label, budget in (("laplace", Budget(1.0)), ("gaussian", Budget(1.0, 1e-5))):
            total, loop = time_epoch(fn, X, y, budget, **kw)
            flag = "" if total < 2.0 else "  (over the 2 s target)"
            print(f"{name:<14}{label:<10}{total:>10.3f}{loop:>10.3f}{flag}")


if __name__ == "__main__":
    main()
