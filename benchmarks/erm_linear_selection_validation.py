"""Validation runs behind ``DPLinearRegression``'s private selection (issue 13): never the benchmark's seeds.

Data: draws of ``bench_erm_accuracy.sparse_lasso``'s generator with seeds 1000+ (generator states
2000+; the benchmark scores seeds 0-19, states 1000-1019), ``fit_intercept=False``, rows in
[-1, 1]^d declared ``linf`` (feature_norm 1), |y| <= 1, radius 1, the design's own 30 % test part.
"dense": k = d (d = 20) or 25 coordinates of ±0.2; "sparse": k = 5.

Candidates (each a ``DPLinearRegression`` with the same bounds):

* ``fw`` -- ``solver="dp_frank_wolfe"`` (l1 ball), the whole budget;
* ``mag`` -- ``solver="dp_mag"`` (l2 ball), the whole budget;
* ``sel`` -- ``solver="auto"`` in the selection band (ε·n/√d >= 100, δ > 0), the estimator's
  constants; ``sel:<share>,<sel_share>,<clip>`` (or ``sel:<fw>,<mag>,<sel_share>,<clip>``)
  overrides ``LINEAR_SELECT_SHARES`` (FW's, dp_mag's),
  ``LINEAR_SELECT_SELECTION_SHARE`` and ``LINEAR_SELECT_RESIDUAL_CLIP``.

``--relation add_remove`` fits every candidate with ``neighbouring="add_remove"`` and the training
size declared as N.  Run::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/erm_linear_selection_validation.py \\
        --out /tmp/linsel_val.jsonl
    python benchmarks/erm_linear_selection_validation.py --report /tmp/linsel_val.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_erm_accuracy import sparse_lasso

import dpopt.estimators as est

#: (name, d, n total, k)
DESIGNS = {
    "d500_sparse": (500, 5000, 5),
    "d500_dense": (500, 5000, 25),
    "d200_sparse": (200, 5000, 5),
    "d200_dense": (200, 5000, 25),
    "d50_sparse": (50, 5000, 5),
    "d50_dense": (50, 5000, 25),
    "d20_sparse": (20, 2858, 5),
    "d20_dense": (20, 2858, 20),
}
EPSILONS = (0.5, 1.0, 2.0, 5.0)
DELTA = 1e-5


def fit(cand: str, X: np.ndarray, y: np.ndarray, eps: float, seed: int, relation: str) -> tuple[Any, str]:
    kw: dict[str, Any] = dict(
        epsilon=eps,
        delta=DELTA,
        feature_norm=1.0,
        norm="linf",
        label_bound=1.0,
        fit_intercept=False,
        rng=seed,
    )
    if relation == "add_remove":
        kw.update(neighbouring="add_remove", declared_size=len(y))
    saved = (est.LINEAR_SELECT_SHARES, est.LINEAR_SELECT_SELECTION_SHARE, est.LINEAR_SELECT_RESIDUAL_CLIP)
    try:
        if cand == "fw":
            kw["solver"] = "dp_frank_wolfe"
        elif cand == "mag":
            kw["solver"] = "dp_mag"
        elif cand.startswith("sel:"):
            vals = [float(v) for v in cand[4:].split(",")]
            if len(vals) == 3:  # equal candidate shares
                vals = [vals[0], *vals]
            fw_share, mag_share, sel, clip = vals
            est.LINEAR_SELECT_SHARES = (fw_share, mag_share)
            est.LINEAR_SELECT_SELECTION_SHARE = sel
            est.LINEAR_SELECT_RESIDUAL_CLIP = clip
        elif cand != "sel":
            raise SystemExit(f"unknown candidate {cand!r}")
        m = est.DPLinearRegression(**kw).fit(X, y)
    finally:
        est.LINEAR_SELECT_SHARES, est.LINEAR_SELECT_SELECTION_SHARE, est.LINEAR_SELECT_RESIDUAL_CLIP = saved
    chosen = str(m.result_.parameters.get("selected", m.solver_))
    return m, chosen


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["design"], r["eps"], r["seed"], r["cand"], r["relation"]))
    cands = args.candidates.split(";")
    with out.open("a") as fh:
        for design in args.designs.split(","):
            d, n, k = DESIGNS[design]
            for s in range(args.seeds):
                seed = 1000 + s
                Xtr, ytr, Xte, yte = sparse_lasso(seed, n=n, d=d, k=k)
                for eps in (float(e) for e in args.eps.split(",")):
                    for cand in cands:
                        key = (design, eps, seed, cand, args.relation)
                        if key in done:
                            continue
                        t = time.process_time()
                        m, chosen = fit(cand, Xtr, ytr, eps, seed, args.relation)
                        rec = dict(
                            design=design, eps=eps, seed=seed, cand=cand, relation=args.relation,
                            mse=float(np.mean((m.predict(Xte) - yte) ** 2)), zero=float(np.mean(yte**2)),
                            chosen=chosen, eps_spent=m.privacy_spent_.epsilon, cpu=time.process_time() - t,
                        )  # fmt: skip
                        fh.write(json.dumps(rec) + "\n")
                        fh.flush()
                        print(json.dumps(rec), flush=True)


def report(path: str) -> None:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    cell: dict[tuple[str, str, float], dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        c = cell[(r["relation"], r["design"], r["eps"])]
        c[r["cand"]].append(r["mse"])
        c["zero"].append(r["zero"])
        if r["cand"].startswith("sel"):
            c["chosen:" + r["cand"]].append(r["chosen"])
    cands = sorted({r["cand"] for r in rows}, key=lambda c: (not c.startswith(("fw", "mag")), c))
    print("| relation | design | ε | zero | " + " | ".join(cands) + " |")
    print("|---" * (4 + len(cands)) + "|")
    for (rel, design, eps), c in sorted(cell.items()):
        vals = []
        for cand in cands:
            if not c.get(cand):
                vals.append("")
                continue
            v = f"{np.mean(c[cand]):.4f}"
            picks = c.get("chosen:" + cand)
            if picks:
                v += f" ({sum(p == 'dp_mag' for p in picks)}/{len(picks)} mag)"
            vals.append(v)
        print(f"| {rel} | {design} | {eps:g} | {np.mean(c['zero']):.4f} | " + " | ".join(vals) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/linsel_val.jsonl")
    ap.add_argument("--designs", default=",".join(DESIGNS))
    ap.add_argument("--eps", default=",".join(str(e) for e in EPSILONS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--candidates", default="fw;mag;sel")
    ap.add_argument("--relation", default="replace_one", choices=("replace_one", "add_remove"))
    ap.add_argument("--report", help="print the table of a results file and exit")
    args = ap.parse_args()
    if args.report:
        report(args.report)
        return
    run(args)


if __name__ == "__main__":
    main()
