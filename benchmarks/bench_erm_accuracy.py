"""Private ERM accuracy at every ε: dpopt's defaults vs every registered method, textbook DP-SGD and diffprivlib.

Three tasks (issue 13):

* ``breast_cancer``: :func:`dpopt.datasets.load_breast_cancer` (rows l2 <= 1), 70/30 splits
  (``train_test_split(random_state=seed)``), logistic regression, test accuracy;
* ``adult``: :func:`dpopt.datasets.load_adult` (the ADMM preprocessing, official train/test split,
  rows l2 <= 1), logistic regression, test accuracy (the seed varies the noise only);
* ``sparse_lasso``: X ~ U[-1,1]^{5000x500}, 5 non-zeros of ±0.2, y = Xw* + N(0, 0.1²) clipped to
  [-1, 1], 70/30 split, least squares over the l1 ball of radius 1, declared |x_ij| <= 1, |y| <= 1,
  test MSE;
* ``linear_regression``: the same data as ``sparse_lasso`` (the same splits), least squares over the
  l2 ball of radius 1 (:class:`~dpopt.estimators.DPLinearRegression`'s default ``max_norm``),
  declared |x_ij| <= 1 (``norm="linf"``), |y| <= 1, no intercept, test MSE.

Competitors (all at the same ε, δ; labels ±1; an intercept as a constant column 0.5 for the
logistic tasks, as :class:`~dpopt.estimators.DPLogisticRegression` does):

* ``default``: :class:`~dpopt.estimators.DPLogisticRegression` with its defaults (logistic),
  ``minimize(problem, X, y, budget=..., rng=...)`` with ``method="auto"`` (LASSO) or
  :class:`~dpopt.estimators.DPLinearRegression` with its defaults (``fit_intercept=False``; linear
  regression); replace-one;
* ``default_ar``: the same defaults under ``neighbouring="add_remove"`` with the training size
  declared (``minimize`` for δ > 0 on the logistic tasks; the estimators for pure ε and regression);
* ``zero`` (regression tasks): the zero predictor, the trivial baseline;
* ``<method>``: ``minimize(..., method=<method>)`` with its defaults, for every registered method
  (``--methods`` restricts; a refusal is recorded as such);
* ``dpsgd_ar`` / ``dpsgd_ro``: textbook DP-SGD written here (clip 1, Poisson sampling at rate
  √n/n, learning rate 1, 20 epochs fixed in advance, σ from dp-accounting's PLD accountant under
  add/remove resp. replace-one neighbours);
* ``diffprivlib``: ``diffprivlib.models.LogisticRegression`` (pure ε, ``data_norm=1``) /
  ``LinearRegression`` (bounds [-1, 1]), run in a separate Python environment because diffprivlib
  needs scikit-learn <= 1.7: ``--diffprivlib-python /tmp/dplvenv/bin/python`` (create it with
  ``python -m venv /tmp/dplvenv && /tmp/dplvenv/bin/pip install "scikit-learn<=1.7.2" diffprivlib``).

Records go to ``--out`` (JSON lines, one per fit; a rerun skips fits already recorded), the tables
(mean ± standard error over seeds, and per ε the ratio of the default to the best competitor) are
printed from the records, and ``--plot`` draws accuracy (or MSE) vs ε per task from the records.

Run::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/bench_erm_accuracy.py --quick
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/bench_erm_accuracy.py \\
        --seeds 20 --method-seeds 3 --diffprivlib-python /tmp/dplvenv/bin/python --plot docs/erm_accuracy.png
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dpopt.accounting import Budget
from dpopt.problems import DataBounds, ERMProblem, L1Ball, L2Ball
from dpopt.solvers.minimize import available_methods, method_spec, minimize

ROOT = Path(__file__).resolve().parents[1]
EPSILONS = (0.1, 0.5, 1.0, 2.0, 5.0)
DELTA = 1e-5
INTERCEPT = 0.5
#: radius of the l2 ball given to the methods that need a bounded set on the logistic tasks
LOGISTIC_RADIUS = 10.0


# ------------------------------------------------------------------------------------------------ tasks


def _augment(X: np.ndarray) -> np.ndarray:
    return np.hstack([X, np.full((X.shape[0], 1), INTERCEPT)])


def breast_cancer(seed: int) -> tuple[np.ndarray, ...]:
    from sklearn.model_selection import train_test_split

    from dpopt.datasets import load_breast_cancer

    d = load_breast_cancer()
    Xtr, Xte, ytr, yte = train_test_split(d.X, d.y, test_size=0.3, random_state=seed)
    return Xtr, ytr, Xte, yte


_ADULT: dict[str, Any] = {}


def adult(seed: int) -> tuple[np.ndarray, ...]:
    from dpopt.datasets import load_adult

    if not _ADULT:
        path = Path(os.environ.get("DPOPT_DATASETS", ROOT.parent / "shared" / "datasets")) / "adult"
        if not path.exists():
            path = Path("/work/shared/datasets/adult")
        tr, te = load_adult(path, split="train"), load_adult(path, split="test")
        _ADULT.update(Xtr=np.asarray(tr.X), ytr=tr.y, Xte=np.asarray(te.X), yte=te.y)
    return _ADULT["Xtr"], _ADULT["ytr"], _ADULT["Xte"], _ADULT["yte"]


def sparse_lasso(seed: int, n: int = 5000, d: int = 500, k: int = 5) -> tuple[np.ndarray, ...]:
    r = np.random.default_rng(1000 + seed)
    X = r.uniform(-1, 1, (n, d))
    w = np.zeros(d)
    w[r.choice(d, k, replace=False)] = 0.2 * r.choice([-1.0, 1.0], k)
    y = np.clip(X @ w + r.normal(0, 0.1, n), -1, 1)
    perm = r.permutation(n)
    tr, te = perm[: int(0.7 * n)], perm[int(0.7 * n) :]
    return X[tr], y[tr], X[te], y[te]


TASKS: dict[str, Callable[[int], tuple[np.ndarray, ...]]] = {
    "breast_cancer": breast_cancer,
    "adult": adult,
    "sparse_lasso": sparse_lasso,
    "linear_regression": sparse_lasso,  # the same data, least squares over the l2 ball
}


def _is_lasso(task: str) -> bool:
    """A regression task (squared loss, test MSE, no intercept column)."""
    return task in ("sparse_lasso", "linear_regression")


def _score(task: str, theta: np.ndarray, Xte: np.ndarray, yte: np.ndarray) -> float:
    if _is_lasso(task):
        return float(np.mean((Xte @ theta - yte) ** 2))
    return float(np.mean(np.where(_augment(Xte) @ theta > 0, 1.0, -1.0) == yte))


def _problem(task: str, name: str, dim: int) -> ERMProblem:
    if task == "linear_regression":
        return ERMProblem("squared", DataBounds(1.0, "linf", 1.0), L2Ball(dim, 1.0))
    if _is_lasso(task):
        return ERMProblem("squared", DataBounds(1.0, "linf", 1.0), L1Ball(dim, 1.0))
    spec = method_spec(name)
    bounds = DataBounds(math.hypot(1.0, INTERCEPT))
    return ERMProblem("logistic", bounds, None if spec.unconstrained else L2Ball(dim + 1, LOGISTIC_RADIUS))


# ------------------------------------------------------------------------------------------------ competitors


def _fit_estimator(
    task: str, eps: float, delta: float, seed: int, data: tuple[np.ndarray, ...], **relation: Any
) -> dict[str, Any]:
    """The task's estimator with its defaults (``DPLinearRegression`` on ``linear_regression``,
    ``DPLogisticRegression`` on the classification tasks), scored on the test split."""
    from dpopt.estimators import DPLinearRegression, DPLogisticRegression

    Xtr, ytr, Xte, yte = data
    est: Any
    if task == "linear_regression":
        est = DPLinearRegression(
            epsilon=eps, delta=delta, feature_norm=1.0, norm="linf", label_bound=1.0, fit_intercept=False,
            rng=seed, **relation,
        ).fit(Xtr, ytr)  # fmt: skip
        metric = float(np.mean((est.predict(Xte) - yte) ** 2))
    else:
        est = DPLogisticRegression(epsilon=eps, delta=delta, feature_norm=1.0, rng=seed, **relation).fit(
            Xtr, ytr
        )
        metric = float(est.score(Xte, yte))
    out = {"metric": metric, "solver": est.solver_, "eps_spent": est.privacy_spent_.epsilon}
    if task == "linear_regression":
        out["selected"] = est.result_.parameters.get("selected")  # the private selection's pick
    return out


def _fit_auto(
    task: str, eps: float, delta: float, seed: int, data: tuple[np.ndarray, ...], **relation: Any
) -> dict[str, Any]:
    """``minimize(problem, X, y, budget=..., rng=...)`` with ``method="auto"``, scored on the test split."""
    Xtr, ytr, Xte, yte = data
    X = Xtr if _is_lasso(task) else _augment(Xtr)
    res = minimize(
        _problem(task, "dp_sgd", Xtr.shape[1]), X, ytr, budget=Budget(eps, delta), rng=seed, **relation
    )
    return {
        "metric": _score(task, res.solution, Xte, yte),
        "solver": res.method,
        "eps_spent": res.privacy.epsilon,
    }


def fit_default(
    task: str, eps: float, delta: float, seed: int, data: tuple[np.ndarray, ...]
) -> dict[str, Any]:
    """The replace-one default: ``minimize(method="auto")`` on the LASSO, the estimators otherwise."""
    if task == "sparse_lasso":
        return _fit_auto(task, eps, delta, seed, data)
    return _fit_estimator(task, eps, delta, seed, data)


def fit_default_add_remove(
    task: str, eps: float, delta: float, seed: int, data: tuple[np.ndarray, ...]
) -> dict[str, Any]:
    """The add/remove default with the training set's size declared: ``DPLinearRegression`` on
    ``linear_regression``, ``DPLogisticRegression`` for pure ε (its class prior at tiny ε·N), else
    ``minimize(method="auto", neighbouring="add_remove")``.

    The benchmark declares the published training-set size as the public N (the textbook DP-SGD uses
    the same n for its rate); dpopt reads nothing else about the size.
    """
    relation = {"neighbouring": "add_remove", "declared_size": len(data[1])}
    if task == "linear_regression" or (delta == 0 and not _is_lasso(task)):
        return _fit_estimator(task, eps, delta, seed, data, **relation)
    return _fit_auto(task, eps, delta, seed, data, **relation)


def fit_method(
    name: str, task: str, eps: float, delta: float, seed: int, data: tuple[np.ndarray, ...]
) -> dict[str, Any]:
    Xtr, ytr, Xte, yte = data
    X = Xtr if _is_lasso(task) else _augment(Xtr)
    add_remove = name.endswith(AR_SUFFIX)  # under add/remove, the published training size declared
    name = name.removesuffix(AR_SUFFIX)
    prob = _problem(task, name, Xtr.shape[1])
    extra: dict[str, Any] = {"neighbouring": "add_remove", "declared_size": len(ytr)} if add_remove else {}
    res = minimize(prob, X, ytr, method=name, budget=Budget(eps, delta), rng=seed, **extra)
    return {"metric": _score(task, res.solution, Xte, yte), "solver": name, "eps_spent": res.privacy.epsilon}


#: ``<method>@ar``: a registered method under add/remove (``--ar-method-seeds``)
AR_SUFFIX = "@ar"


def _dpsgd_sigma(q: float, steps: int, eps: float, delta: float, relation: str) -> float:
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    rel = (
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
        if relation == "add_remove"
        else dp_accounting.NeighboringRelation.REPLACE_ONE
    )
    return float(
        dp_accounting.calibrate_dp_mechanism(
            lambda: pld_privacy_accountant.PLDAccountant(rel),
            lambda s: dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), steps
            ),
            eps,
            delta,
            dp_accounting.mechanism_calibration.LowerEndpointAndGuess(0.3, 1.0),
        )
    )


_SIGMAS: dict[tuple[Any, ...], float] = {}


def fit_dpsgd(
    relation: str, task: str, eps: float, delta: float, seed: int, data: tuple[np.ndarray, ...]
) -> dict[str, Any]:
    """Textbook DP-SGD: clip 1, Poisson rate √n/n, lr 1, 20 epochs, σ from dp-accounting's PLD."""
    Xtr, ytr, Xte, yte = data
    X = Xtr if _is_lasso(task) else _augment(Xtr)
    n, d = X.shape
    q = math.sqrt(n) / n
    steps = round(20 / q)
    key = (q, steps, eps, delta, relation)
    if key not in _SIGMAS:
        _SIGMAS[key] = _dpsgd_sigma(q, steps, eps, delta, relation)
    sigma = _SIGMAS[key]
    rng = np.random.default_rng(seed)
    theta = np.zeros(d)
    expected = q * n
    for _ in range(steps):
        idx = np.flatnonzero(rng.random(n) < q)
        Xb, yb = X[idx], ytr[idx]
        z = Xb @ theta
        if _is_lasso(task):
            w = z - yb
        else:
            w = -yb / (1.0 + np.exp(np.clip(yb * z, -500, 500)))
        G = w[:, None] * Xb
        norms = np.linalg.norm(G, axis=1)
        G *= (1.0 / np.maximum(1.0, norms))[:, None]
        g = (G.sum(axis=0) + rng.normal(0.0, sigma, d)) / expected
        theta -= 1.0 * g
        if (
            task == "sparse_lasso"
        ):  # the textbook method is unconstrained; the LASSO task declares the l1 ball
            from dpopt.problems import project_l1_ball

            theta = project_l1_ball(theta, 1.0)
        elif task == "linear_regression":  # ... and this one the l2 ball of radius 1
            theta *= min(1.0, 1.0 / max(float(np.linalg.norm(theta)), 1e-300))
    return {"metric": _score(task, theta, Xte, yte), "solver": f"dpsgd_{relation}", "sigma": sigma}


# ------------------------------------------------------------------------------------------------ diffprivlib

_DPL_SCRIPT = r"""
import json, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
from diffprivlib.models import LinearRegression, LogisticRegression
job = json.load(open(sys.argv[1]))
out = []
for item in job:
    z = np.load(item["file"])
    Xtr, ytr, Xte, yte = z["Xtr"], z["ytr"], z["Xte"], z["yte"]
    if item["task"] in ("sparse_lasso", "linear_regression"):
        m = LinearRegression(epsilon=item["eps"], bounds_X=(-1.0, 1.0), bounds_y=(-1.0, 1.0),
                             random_state=item["seed"]).fit(Xtr, ytr)
        metric = float(np.mean((m.predict(Xte) - yte) ** 2))
    else:
        m = LogisticRegression(epsilon=item["eps"], data_norm=1.0, random_state=item["seed"]).fit(Xtr, ytr)
        metric = float(np.mean(m.predict(Xte) == yte))
    out.append({**item, "metric": metric})
print(json.dumps(out))
"""


def run_diffprivlib(python: str, jobs: list[tuple[str, float, int]], workdir: Path) -> list[dict[str, Any]]:
    """Fit diffprivlib in another interpreter (it needs scikit-learn <= 1.7) on the same splits."""
    items = []
    for task, eps, seed in jobs:
        f = workdir / f"{task}-{seed}.npz"
        if not f.exists():
            Xtr, ytr, Xte, yte = TASKS[task](seed)
            np.savez(f, Xtr=Xtr, ytr=ytr, Xte=Xte, yte=yte)
        items.append({"task": task, "eps": eps, "seed": seed, "file": str(f)})
    job = workdir / "job.json"
    job.write_text(json.dumps(items))
    script = workdir / "dpl.py"
    script.write_text(_DPL_SCRIPT)
    out = subprocess.run([python, str(script), str(job)], capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"diffprivlib run failed: {out.stderr.strip().splitlines()[-1:]}")
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


# ------------------------------------------------------------------------------------------------ records


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["task"], r["competitor"], float(r["eps"]), float(r["delta"]), int(r["seed"]))


def load_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _progress(total: int) -> Any:
    try:
        from rich.progress import Progress

        return Progress(transient=False)
    except ImportError:  # pragma: no cover - rich is optional
        return None


def plan(args: argparse.Namespace) -> Iterator[tuple[str, str, float, float, int]]:
    methods = args.methods.split(",") if args.methods else available_methods()
    for task in args.tasks.split(","):
        for eps in args.epsilons:
            for seed in range(args.seeds):
                if not args.methods_only:
                    yield task, "default", eps, DELTA, seed
                    yield task, "default", eps, 0.0, seed  # pure ε (against diffprivlib)
                    if _is_lasso(task):
                        yield task, "zero", eps, DELTA, seed
                        # the trivial baseline of the pure-ε comparison too
                        yield task, "zero", eps, 0.0, seed
                    yield task, "dpsgd_ar", eps, DELTA, seed
                    yield task, "default_ar", eps, DELTA, seed
                    yield task, "default_ar", eps, 0.0, seed  # pure ε under add/remove
                    yield task, "dpsgd_ro", eps, DELTA, seed
                if seed < args.method_seeds and not args.defaults_only:
                    for m in methods:
                        yield task, m, eps, DELTA, seed
                if seed < args.ar_method_seeds:
                    for m in methods:
                        if "add_remove" in method_spec(m).neighbouring:
                            yield task, m + AR_SUFFIX, eps, DELTA, seed


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {_key(r) for r in load_records(out)}
    todo = [j for j in plan(args) if (j[0], j[1], float(j[2]), float(j[3]), j[4]) not in done]
    if args.competitors:  # e.g. only the defaults and textbook DP-SGD (the δ > 0 rows)
        keep = set(args.competitors.split(","))
        todo = [
            j
            for j in todo
            if (j[1] in keep or (j[1].endswith(AR_SUFFIX) and AR_SUFFIX in keep))
            and (j[3] > 0 or "pure" in keep)
        ]
    if args.seed_major:  # every ε at seed 0, then seed 1, ...: a run cut short covers every ε
        todo.sort(key=lambda j: (j[0], j[4]))
    prog = _progress(len(todo))
    cache: dict[tuple[str, int], tuple[np.ndarray, ...]] = {}
    with open(out, "a") as fh:
        ctx = prog if prog is not None else _NullCtx()
        with ctx:
            tid = prog.add_task("fits", total=len(todo)) if prog is not None else None
            for task, comp, eps, delta, seed in todo:
                key = (task, seed)
                if key not in cache:
                    cache.clear()
                    cache[key] = TASKS[task](seed)
                data = cache[key]
                rec: dict[str, Any] = {
                    "task": task,
                    "competitor": comp,
                    "eps": eps,
                    "delta": delta,
                    "seed": seed,
                }
                t0 = time.process_time()
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        if comp == "default":
                            rec.update(fit_default(task, eps, delta, seed, data))
                        elif comp == "zero":
                            rec.update({"metric": float(np.mean(data[3] ** 2)), "solver": "zero"})
                        elif comp == "default_ar":
                            rec.update(fit_default_add_remove(task, eps, delta, seed, data))
                        elif comp.startswith("dpsgd_"):
                            rel = "add_remove" if comp == "dpsgd_ar" else "replace_one"
                            rec.update(fit_dpsgd(rel, task, eps, delta, seed, data))
                        else:
                            rec.update(fit_method(comp, task, eps, delta, seed, data))
                except Exception as exc:  # a refusal (unsupported problem) is a result too
                    rec.update({"metric": None, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                rec["cpu_seconds"] = time.process_time() - t0
                fh.write(json.dumps(rec) + "\n")
                fh.flush()
                if prog is not None:
                    prog.update(tid, advance=1, description=f"{task} {comp} ε={eps:g}")
    if args.diffprivlib_python:
        jobs = [
            (task, eps, seed)
            for task in args.tasks.split(",")
            for eps in args.epsilons
            for seed in range(args.seeds)
            if (task, "diffprivlib", float(eps), 0.0, seed) not in done
        ]
        if jobs:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.process_time()
                res = run_diffprivlib(args.diffprivlib_python, jobs, Path(tmp))
                with open(out, "a") as fh:
                    for r in res:
                        rec = {"task": r["task"], "competitor": "diffprivlib", "eps": r["eps"], "delta": 0.0,
                               "seed": r["seed"], "metric": r["metric"], "cpu_seconds": math.nan}  # fmt: skip
                        fh.write(json.dumps(rec) + "\n")
                print(f"diffprivlib: {len(res)} fits in {time.process_time() - t0:.1f}s (other interpreter)")


class _NullCtx:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: Any) -> None:
        return None


# ------------------------------------------------------------------------------------------------ tables


def summarize(records: list[dict[str, Any]], epsilons: tuple[float, ...]) -> str:
    by: dict[tuple[str, str, float], dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    errors: dict[tuple[str, str], str] = {}
    cpu: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in records:
        pure = r["delta"] == 0 and r["competitor"] in ("default", "default_ar", "zero")
        name = r["competitor"] + (" (pure ε)" if pure else "")
        if r.get("metric") is None:
            errors[(r["task"], name)] = r.get("error", "")
            continue
        by[(r["task"], name, r["delta"])][float(r["eps"])].append(float(r["metric"]))
        if r.get("cpu_seconds") is not None and not math.isnan(r["cpu_seconds"]):
            cpu[(r["task"], name)].append(float(r["cpu_seconds"]))
    lines: list[str] = []
    for task in TASKS:
        rows = sorted(k for k in by if k[0] == task)
        if not rows:
            continue
        lower = _is_lasso(task)
        lines.append(f"\n## {task}: test {'MSE (lower is better)' if lower else 'accuracy'}\n")
        lines.append("| competitor | " + " | ".join(f"ε={e:g}" for e in epsilons) + " | seeds | CPU s/fit |")
        lines.append("|---|" + "---|" * (len(epsilons) + 2))
        for key in rows:
            cells = []
            for e in epsilons:
                v = by[key].get(e, [])
                cells.append(f"{_fmt(np.mean(v))} ± {_fmt(np.std(v) / math.sqrt(len(v)))}" if v else "")
            nseeds = max((len(v) for v in by[key].values()), default=0)
            c = cpu.get((task, key[1]), [])
            lines.append(f"| {key[1]} | " + " | ".join(cells) + f" | {nseeds} | {np.mean(c):.2f} |" if c else
                         f"| {key[1]} | " + " | ".join(cells) + f" | {nseeds} | |")  # fmt: skip
        for (t, name), err in sorted(errors.items()):
            if t == task:
                lines.append(f"| {name} | refused: {err[:110]} |")
        # ratio default / best competitor, per δ family (δ > 0 vs δ = 0), replace-one competitors only
        # (the default is analysed under replace-one; dpsgd_ar is shown in the table for reference)
        # the method(s) the default resolved to are the default itself, not a competitor
        # (per ε: the default's rule switches methods with ε)
        # (and per δ family: the pure-ε default's method is not the δ > 0 default's)
        itself: dict[tuple[float, bool], set[Any]] = defaultdict(set)
        for r in records:
            if r["task"] == task and r["competitor"] == "default":
                itself[(float(r["eps"]), r["delta"] > 0)].add(r.get("solver"))
        for delta, pool in ((DELTA, "δ > 0"), (0.0, "pure ε")):
            dkey = (task, "default" if delta > 0 else "default (pure ε)", delta)
            if dkey not in by:
                continue
            ratios = []
            for e in epsilons:
                dv = by[dkey].get(e)
                comp = [
                    (np.mean(v[e]), name)
                    for (t, name, dl), v in by.items()
                    if t == task
                    and not name.startswith("default")
                    and name != "dpsgd_ar"  # add/remove: not the default's relation (like with like)
                    and name not in itself[(e, delta > 0)]
                    and not name.endswith(AR_SUFFIX)
                    and e in v
                    and (dl > 0) == (delta > 0)
                ]
                if not dv or not comp:
                    ratios.append("")
                    continue
                best, who = min(comp) if lower else max(comp)
                ratios.append(f"{np.mean(dv) / best:.3f} ({who})")
            lines.append(f"\nratio default / best competitor ({pool}): " + " | ".join(
                f"ε={e:g}: {r}" for e, r in zip(epsilons, ratios, strict=True)))  # fmt: skip
        ar, tb = (task, "default_ar", DELTA), (task, "dpsgd_ar", DELTA)
        if ar in by and tb in by:  # add/remove, like with like: default_ar vs textbook DP-SGD add/remove
            cells = [f"ε={e:g}: {np.mean(by[ar][e]) / np.mean(by[tb][e]):.3f}" for e in epsilons
                     if by[ar].get(e) and by[tb].get(e)]  # fmt: skip
            lines.append("\nratio default_ar / dpsgd_ar (add/remove): " + " | ".join(cells))
            cells = []
            for e in epsilons:  # add/remove, like with like: the best of dpsgd_ar and every <method>@ar
                comp = [(np.mean(v[e]), name) for (t, name, dl), v in by.items()
                        if t == task and (name == "dpsgd_ar" or name.endswith(AR_SUFFIX)) and e in v]  # fmt: skip
                if by[ar].get(e) and comp:
                    best, who = min(comp) if lower else max(comp)
                    cells.append(f"ε={e:g}: {np.mean(by[ar][e]) / best:.3f} ({who})")
            lines.append("\nratio default_ar / best add/remove competitor: " + " | ".join(cells))
    return "\n".join(lines)


def _fmt(x: float) -> str:
    return f"{x:.4f}" if abs(x) < 100 else f"{x:.2e}"


def plot(records: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in TASKS if any(r["task"] == t for r in records)]
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.5), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        curves: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in records:
            if r["task"] == task and r.get("metric") is not None:
                name = r["competitor"] + (
                    " (pure ε)" if r["delta"] == 0 and r["competitor"] in ("default", "default_ar") else ""
                )
                curves[name][float(r["eps"])].append(float(r["metric"]))
        for name, pts in sorted(curves.items()):
            es = sorted(pts)
            ms = [np.mean(pts[e]) for e in es]
            if _is_lasso(task) and max(ms) > 0.2:
                continue  # diverged methods would flatten the plot
            bold = name.startswith("default")
            ax.plot(es, ms, marker="o", lw=2.5 if bold else 1, alpha=1 if bold else 0.6, label=name)
        ax.set_xscale("log")
        ax.set_xlabel("ε")
        ax.set_ylabel("test MSE" if _is_lasso(task) else "test accuracy")
        ax.set_title(task)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot written to {path}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="3 seeds, ε in {0.1, 1, 5}, 1 seed per registered method"
    )
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--method-seeds", type=int, default=None, help="seeds for every registered method")
    ap.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--methods", default="", help="comma-separated registered methods (default: all)")
    ap.add_argument("--methods-only", action="store_true", help="fit only the registered methods")
    ap.add_argument("--defaults-only", action="store_true", help="fit everything but the registered methods")
    ap.add_argument(
        "--competitors",
        default="",
        help="comma-separated competitors to fit (default: all; 'pure' keeps δ = 0)",
    )
    ap.add_argument("--ar-method-seeds", type=int, default=0, help="seeds for every method under add/remove")
    ap.add_argument("--seed-major", action="store_true", help="fit seed by seed (every ε per seed)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "erm_accuracy.jsonl"))
    ap.add_argument("--diffprivlib-python", default="", help="interpreter with diffprivlib installed")
    ap.add_argument("--plot", default="", help="write accuracy-vs-ε plots (PNG) from the records")
    ap.add_argument(
        "--report-only", action="store_true", help="print the tables from the records, fit nothing"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds = min(args.seeds, 3)
        args.epsilons = [0.1, 1.0, 5.0]
        if args.method_seeds is None:
            args.method_seeds = 1
    if args.method_seeds is None:
        args.method_seeds = args.seeds
    if not args.report_only:
        run(args)
    records = [
        r
        for r in load_records(Path(args.out))
        if float(r["eps"]) in set(args.epsilons)
        and r["seed"] < args.seeds
        and r["task"] in args.tasks.split(",")
    ]
    print(summarize(records, tuple(args.epsilons)))
    if args.plot:
        plot(records, args.plot)


if __name__ == "__main__":
    sys.exit(main())
