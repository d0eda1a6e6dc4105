"""How ``public_pp_schedule``'s knobs were chosen (issue 14, item 6), on a validation split only.

Run ``OMP_NUM_THREADS=1 nice -n 10 python benchmarks/bench_admm_schedule.py N SPLIT EPSILONS SEEDS SPEC ...``,
e.g. ``... 5 dirichlet 0.5,1,2,5 3 af=5,T=5 af=2,T=1,ps=1 af=2,T=1,ps=1,p=2``.  Not part of the tests.

The rows of UCI Adult's *training* file (``adult.data``) are shuffled (seed 7); 20 % are held out as
a validation set and the rest is split over N sites (even or Dirichlet(0.5), at least 50 rows, graph
G(N, min(0.5, 5/N)), as in ``admm-utility``).  ``adult.test``, on which ``admm-utility`` scores, is
never read.  Per ε it prints the mean validation accuracy of the sites training alone
(``dpopt.minimize``, objective perturbation at ε; mean over the sites and 2 run keys; the word
``nolocal`` among the SPECs skips it) and, per SPEC ``af=FLOOR,T=ROUNDS[,p=PROGRESS][,ps=1]``, PP with
``public_pp_schedule(ε, n_rounds=ROUNDS, min_noise_rate=FLOOR, progress=PROGRESS,
per_site_noise=ps)`` (C = 10, λ = 10⁻³, ρ = C·N·λ), scored as ``admm-utility`` scores it: the
average of the released models of rounds T//2+1..T, over the sites unweighted (``unw``) and
weighted by the declared sizes (``wtd``); mean ± standard deviation over SEEDS run keys (100, 101, ...).
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np

from dpopt import minimize
from dpopt.accounting import Budget
from dpopt.distributed.admm import PrivateADMM, public_pp_schedule
from dpopt.distributed.topology import erdos_renyi, split_rows
from dpopt.experiments.admm_utility import _load
from dpopt.problems import DataBounds, ERMProblem

LAMBDA, C = 1e-3, 10.0


def main(argv: list[str]) -> None:
    warnings.simplefilter("ignore")
    x, y = _load()[:2]  # adult.data only
    perm = np.random.default_rng(7).permutation(x.shape[0])
    nv = x.shape[0] // 5
    xv, yv = x[perm[:nv]], y[perm[:nv]]
    xtr, ytr = x[perm[nv:]], y[perm[nv:]]

    def acc(w: np.ndarray) -> float:
        return float(np.mean((xv @ w) * yv > 0))

    n, split, n_seeds = int(argv[0]), argv[1], int(argv[3])
    specs = [s for s in argv[4:] if s != "nolocal"]
    topo = erdos_renyi(n, min(0.5, 5.0 / n), rng=2018)
    parts = split_rows(xtr.shape[0], n, how=split, rng=2018, min_size=50 if split != "even" else 1)  # type: ignore[arg-type]
    data = [(xtr[p], ytr[p]) for p in parts]
    sizes = np.array([p.size for p in parts])
    print(
        f"{n} sites, {split}: rows per site {sizes.min()}..{sizes.max()}, degrees {topo.degrees.min()}..{topo.degrees.max()}"
    )
    prob = ERMProblem("logistic", DataBounds(feature_norm=1.0, label_bound=1.0), l2_penalty=LAMBDA)
    for eps in (float(e) for e in argv[2].split(",")):
        if "nolocal" not in argv[4:]:
            alone = [
                np.mean([acc(minimize(prob, a, b, budget=Budget(eps, 0.0), rng=k).solution) for a, b in data])
                for k in range(2)
            ]
            print(f"eps={eps:g} alone={np.mean(alone):.4f}", flush=True)
        else:
            print(f"eps={eps:g}", flush=True)
        for spec in specs:
            kv = dict(s.split("=") for s in spec.split(","))
            sch = public_pp_schedule(
                eps, degrees=topo.degrees, sizes=sizes, loss_weight=C, l2_penalty=LAMBDA, n_rounds=int(kv["T"]),
                min_noise_rate=float(kv["af"]), progress=float(kv.get("p", 1)), per_site_noise=kv.get("ps") == "1",
            )  # fmt: skip
            t0 = time.process_time()
            unw, wtd = [], []
            for k in range(n_seeds):
                res = PrivateADMM(topo, method="pp", budget=Budget(eps, 0.0), loss_weight=C, reg=C * n * LAMBDA,
                                  **sch.kwargs()).run(data, rng=100 + k, record_models=True)  # fmt: skip
                unw.append(acc(res.round_average(sch.average_from)))
                wtd.append(acc(res.round_average(sch.average_from, sch.weights)))
            print(
                f"  {spec:22s} alpha>={sch.noise_rate:.3g} unw={np.mean(unw):.4f}±{np.std(unw):.3f} "
                f"wtd={np.mean(wtd):.4f}±{np.std(wtd):.3f} cpu={time.process_time() - t0:.1f}s",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
