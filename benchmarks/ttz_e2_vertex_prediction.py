"""Predicted chance that objective perturbation on the unit l1 ball releases a wrong vertex (ttz-e2).

Run ``python benchmarks/ttz_e2_vertex_prediction.py`` (not part of the tests; a few seconds).  On the
l1 ball the data term is nearly linear, so argmin J ≈ the vertex -sign(g_j + b_j) e_j with
j = argmax_j |g_j + b_j| (g = ∇L(0), b ~ N(0, σ² I), σ from the solver's calibration).
P(wrong) = P(j != 0), by Monte Carlo over 4000 noise draws, at each point of the ttz-e2 paper
sweeps (one fresh data set per point).  docs/reproductions.md (E2) compares it with the records.
"""

import numpy as np

from dpopt.accounting import Budget
from dpopt.experiments.ttz import sphere_logistic
from dpopt.problems import DataBounds, ERMProblem, L1Ball
from dpopt.solvers import minimize

pts = [(n, 200) for n in (1000, 2000, 4000, 8000)] + [(4000, p) for p in (10, 30, 100, 300, 1000)]
mc = np.random.default_rng(12345)
for n, p in pts:
    X, y = sphere_logistic(n, p, np.random.default_rng(100 + n + p))
    prob = ERMProblem("logistic", DataBounds(1.0), L1Ball(p))
    r = minimize(prob, X, y, method="objective_perturbation", budget=Budget(1.0, 1e-6), rng=0)
    sigma = r.parameters["sigma"]
    g = prob.gradient(np.zeros(p), X, y)
    b = sigma * mc.standard_normal((4000, p))
    wrong = np.mean(np.argmax(np.abs(g + b), axis=1) != 0)
    print(
        f"n={n:5d} p={p:4d} |g_0|={abs(g[0]):.4f} max_j>0|g_j|={np.abs(g[1:]).max():.4f} sigma={sigma:.5f} "
        f"sigma*sqrt(2ln2p)={sigma * np.sqrt(2 * np.log(2 * p)):.4f} P(wrong vertex)={wrong:.3f}",
        flush=True,
    )
