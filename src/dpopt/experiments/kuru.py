"""Reproductions of seed 003 ch. 4 (Kuru's thesis, §4.4): DP gradient methods with smoothing and
multistage acceleration, each under the thesis's accounting and under dpopt's sound default.

Every experiment runs regularised logistic regression (λ = 0.01, i.e. ``l2_penalty = 0.02`` in
dpopt's mean convention, per-sample regulariser as in (4.60)) on synthetic data (d = 10,
n = 10,000, :func:`dpopt.datasets.make_logistic`) or on scikit-learn's 8x8 digits (one vs rest, the
bundled stand-in for the thesis's MNIST), with per-example clipping C = 2 and the metric
``f(x_t) - f*`` in the thesis's sum scale (``n`` times the mean objective; f* from L-BFGS on the raw
data, a research artefact, never released).  One runner seed = one repetition (the thesis averages
10: ``dpopt reproduce NAME --seeds 0-9``).

Accountings compared (``accounting`` field of the records):

* ``"paper"``: the thesis's arithmetic (Laplace, ε/T per step, its 2(m/n)ε0 subsampling lemma, full
  first DP-SGDwS step).  The records carry ``claimed_epsilon`` and ``true_epsilon``: where the
  thesis's lemma is misapplied (m = 1 at n = 10⁴, spec P6) the true ε is far above the claim.
* ``"sound"``: dpopt's default at the same ε with δ = 0 (Laplace, l1 sensitivity, tight
  subsampling amplification; identical to ``"paper"`` for the deterministic methods, whose
  arithmetic is sound).
* ``"sound-gaussian"``: the default at (ε, δ = 1e-5): Gaussian noise with tight RDP/PLD accounting
  (Poisson batches) -- what the same ε buys when a small δ is acceptable.

L and μ come from the declared bounds (``L = 1/4 + 2λ``, ``μ = 2λ`` per example), not from the data
(spec P9).  Stage schedules: (4.38) truncated to T (spec §8).  Gradient scale: the methods' defaults
-- sums (the thesis) except DP-GD (mean: the 1/√t step diverges on sums, spec N9) and DP-MAG/DP-SMAG
(mean: the noise-aware step (4.43) is not scale invariant and does not move on sums; see
:func:`dpopt.solvers.multistage.dp_mag`).  All other steps are scale invariant.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize as sp_minimize

from dpopt.accounting import Budget
from dpopt.datasets import load_digits_one_vs_rest, make_logistic
from dpopt.exceptions import PrivacyClaimWarning
from dpopt.experiments.papers import KURU
from dpopt.experiments.registry import TOUR, Experiment, register
from dpopt.iteration import IterationInfo
from dpopt.problems import DataBounds, ERMProblem
from dpopt.solvers.gradient import dp_gd, dp_gdws, dp_heavy_ball, dp_nesterov, dp_online_gdws
from dpopt.solvers.multistage import dp_mag, dp_masg

__all__ = ["KuruConfig", "run"]

LAMBDA = 0.01
DELTA_GAUSSIAN = 1e-5


@dataclass(frozen=True)
class KuruConfig:
    """One figure of §4.4.

    ``kind``: ``"trajectory"`` (error vs iteration), ``"beta_sweep"`` (final error vs β) or
    ``"final"`` (final error per method, one bar group per data set).
    """

    kind: str = "trajectory"
    methods: tuple[str, ...] = ("DP-GDwS",)
    epsilons: tuple[float, ...] = (1.0,)
    betas: tuple[float, ...] = (0.1,)
    batch_sizes: tuple[int | None, ...] = (None,)
    iterations: int = 1000
    record_every: int = 10
    accountings: tuple[str, ...] = ("paper", "sound", "sound-gaussian")
    dataset: str = "synthetic"
    n_samples: int = 10_000
    n_features: int = 10
    data_seeds: tuple[int, ...] = (0,)
    bucket_size: int = 10


Method = Callable[..., Any]

# name -> (function, fixed options); β and batch size are passed when the method uses them
METHODS: dict[str, tuple[Method, dict[str, Any], bool]] = {
    "DP-GD": (dp_gd, {}, False),
    "DP-HB": (dp_heavy_ball, {}, False),
    "DP-NAG": (dp_nesterov, {}, False),
    "DP-GDwS": (dp_gdws, {}, True),
    "DP-MAG": (dp_mag, {}, False),
    "DP-M-ASG": (dp_masg, {}, False),
    "DP-M-ASG*": (dp_masg, {"variant": "m-asg*"}, False),
    "DP-onlineGDwS": (dp_online_gdws, {}, True),
}
STOCHASTIC_NAMES = {
    "DP-GD": "DP-SGD",
    "DP-HB": "DP-SHB",
    "DP-NAG": "DP-SNAG",
    "DP-GDwS": "DP-SGDwS",
    "DP-MAG": "DP-SMAG",
    "DP-M-ASG": "DP-stocMASG",
    "DP-M-ASG*": "DP-stocMASG*",
}


def _data(cfg: KuruConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if cfg.dataset == "digits":
        ds = load_digits_one_vs_rest(1)
    else:
        ds = make_logistic(cfg.n_samples, cfg.n_features, rng=seed)
    assert ds.y is not None
    return ds.X, ds.y


def _fstar(problem: ERMProblem, X: np.ndarray, y: np.ndarray) -> float:
    res = sp_minimize(
        lambda t: problem.objective(t, X, y),
        np.zeros(X.shape[1]),
        jac=lambda t: problem.gradient(t, X, y),
        method="L-BFGS-B",
        options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 10_000},
    )
    return float(res.fun)


def _budget(accounting: str, eps: float) -> tuple[Budget, str]:
    if accounting == "paper":
        return Budget(eps), "paper"
    if accounting == "sound":
        return Budget(eps), "tight"
    if accounting == "sound-gaussian":
        return Budget(eps, DELTA_GAUSSIAN), "tight"
    raise ValueError(f"unknown accounting {accounting!r}")


def run(cfg: KuruConfig, rng: np.random.Generator) -> Iterator[dict[str, Any]]:
    """One repetition: every (data set, method, ε, β, batch size, accounting) combination."""
    problem = ERMProblem("logistic", DataBounds(feature_norm=1.0), l2_penalty=2 * LAMBDA)
    for data_seed in cfg.data_seeds:
        X, y = _data(cfg, data_seed)
        n = X.shape[0]
        fstar = _fstar(problem, X, y)
        for name in cfg.methods:
            fn, fixed, uses_beta = METHODS[name]
            betas = cfg.betas if uses_beta else (None,)
            batches = (cfg.bucket_size,) if name == "DP-onlineGDwS" else cfg.batch_sizes
            for m in batches:
                label = name if m is None or name == "DP-onlineGDwS" else STOCHASTIC_NAMES.get(name, name)
                for eps in cfg.epsilons:
                    for beta in betas:
                        for accounting in cfg.accountings:
                            yield from _one(
                                cfg, problem, X, y, n, fstar, fn, fixed, label, m, eps, beta, accounting,
                                data_seed, rng,
                            )  # fmt: skip


def _one(
    cfg: KuruConfig,
    problem: ERMProblem,
    X: np.ndarray,
    y: np.ndarray,
    n: int,
    fstar: float,
    fn: Method,
    fixed: dict[str, Any],
    label: str,
    m: int | None,
    eps: float,
    beta: float | None,
    accounting: str,
    data_seed: int,
    rng: np.random.Generator,
) -> Iterator[dict[str, Any]]:
    budget, calibration = _budget(accounting, eps)
    kw: dict[str, Any] = dict(fixed)
    if beta is not None:
        kw["smoothing"] = beta
    if fn is dp_online_gdws:
        kw["bucket_size"] = m
    else:
        kw["max_iter"] = cfg.iterations
        kw["batch_size"] = m
    trace: list[tuple[int, float]] = []
    every = cfg.record_every if cfg.kind == "trajectory" else 0

    def callback(info: IterationInfo) -> None:
        t, x = info.nit, info.x
        assert x is not None
        if every and (t % every == 0 or t == 1):
            trace.append((t, n * (problem.objective(x, X, y) - fstar)))

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        res = fn(problem, X, y, budget=budget, rng=rng, calibration=calibration, callback=callback, **kw)
        final = n * (problem.objective(res.solution, X, y) - fstar)
    base = {
        "dataset": cfg.dataset,
        "data_seed": data_seed,
        "method": label,
        "accounting": accounting,
        "epsilon": eps,
        "delta": budget.delta,
        "claimed_epsilon": float(res.privacy.epsilon),
        "true_epsilon": float(res.privacy.true_epsilon) if math.isfinite(res.privacy.true_epsilon) else None,
        "beta": beta,
        "batch_size": m if m is not None else n,
        "iterations": int(res.iterations),
        "noise": res.parameters["noise"],
    }
    if every:
        if not trace or trace[-1][0] != res.iterations:
            trace.append((int(res.iterations), final))
        for t, err in trace:
            yield {**base, "t": t, "error": _finite(err)}
    else:
        yield {**base, "t": int(res.iterations), "error": _finite(final)}


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) and v < 1e300 else None


# ------------------------------------------------------------------------------------------------
# Plots and tables (read records only)
# ------------------------------------------------------------------------------------------------


_TITLES = {
    "paper": "thesis accounting",
    "sound": "sound (δ=0, Laplace)",
    "sound-gaussian": f"sound (δ={DELTA_GAUSSIAN:g}, Gaussian)",
}
_ACCS = ("paper", "sound", "sound-gaussian")


def _values(records: Sequence[Mapping[str, Any]], key: str) -> list[Any]:
    from dpopt.experiments.records import sort_key

    return sorted({r[key] for r in records}, key=sort_key)


def _true_eps(sel: Sequence[Mapping[str, Any]]) -> str:
    true = [r["true_epsilon"] for r in sel if r["true_epsilon"] is not None]
    return f"{max(true):.3g}" if len(true) == len(sel) and true else "∞"


def _grid(
    name: str,
    suffix: str,
    records: Sequence[Mapping[str, Any]],
    rows: tuple[str, list[Any]],
    cols: tuple[str, list[Any]],
    draw: Callable[[Any, list[Mapping[str, Any]]], None],
    title: Callable[[Any, Any, list[Mapping[str, Any]]], str],
    out_dir: Path,
    legend_title: str | None = None,
) -> Path:
    """One figure: a panel per (row value, column value), one shared legend below the panels."""
    from dpopt.experiments.plots import new_figure, save_figure

    if len(cols[1]) == 1 and len(rows[1]) > 1:  # one column: lay the rows out side by side
        rows, cols = cols, rows
        title = (lambda f: lambda a, b, sel: f(b, a, sel))(title)
    (rk, rv), (ck, cv) = rows, cols
    fig, axes = new_figure(len(rv), len(cv), figsize=(min(3.6 * len(cv), 14.5), 2.9 * len(rv) + 0.9))
    handles: dict[str, Any] = {}
    for i, a in enumerate(rv):
        for j, b in enumerate(cv):
            ax = axes[i, j]
            sel = [r for r in records if r[rk] == a and r[ck] == b]
            if not sel:
                ax.set_visible(False)
                continue
            draw(ax, sel)
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                handles.setdefault(lab, h)
            if ax.get_legend() is not None:
                ax.get_legend().remove()
            ax.set_title(title(a, b, sel), fontsize=8)
            ax.tick_params(labelsize=7)
            ax.xaxis.label.set_size(8)
            ax.yaxis.label.set_size(8)
            if j:
                ax.set_ylabel("")
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center",
                   ncol=min(len(handles), 4), fontsize=8, title=legend_title, title_fontsize=8)  # fmt: skip
    return save_figure(fig, out_dir / f"{name}{suffix}.png")


def _plot(name: str, kind: str) -> Callable[[Sequence[Mapping[str, Any]], Path], list[Path]]:
    """Readable at page width: a panel per (ε or accounting, batch size), one line per method."""

    def plot(records: Sequence[Mapping[str, Any]], out_dir: Path) -> list[Path]:
        from dpopt.experiments.plots import draw_lines

        if not records:
            return []
        ylab = "f(x) - f*  (sum scale)"
        ms = ("m", _values(records, "batch_size"))
        accs = [a for a in _ACCS if any(r["accounting"] == a for r in records)]
        paths = []
        if kind == "trajectory":
            several_b = len({r["beta"] for r in records if r["beta"] is not None}) > 1
            several_m = len(_values(records, "method")) > 1
            by = ["method", "beta"] if several_b and several_m else (["beta"] if several_b else ["method"])

            def draw_t(ax: Any, sel: list[Mapping[str, Any]]) -> None:
                draw_lines(ax, sel, x="t", y="error", by=by, logy=True, marker="", spread="std")
                ax.set_xlabel("iteration t")
                ax.set_ylabel(ylab)

            def traj_title(acc: str) -> Callable[[Any, Any, list[Mapping[str, Any]]], str]:
                return lambda e, m, s: f"{_TITLES[acc]}: ε={e:g}, m={m}; true ε={_true_eps(s)}"

            for acc in accs:
                sel = [r for r in records if r["accounting"] == acc]
                paths.append(
                    _grid(
                        name, f"-{acc}", [{**r, "m": r["batch_size"]} for r in sel],
                        ("epsilon", _values(sel, "epsilon")), ms, draw_t, traj_title(acc), out_dir,
                    )
                )  # fmt: skip
        elif kind == "beta_sweep":

            def draw_b(ax: Any, sel: list[Mapping[str, Any]]) -> None:
                draw_lines(ax, sel, x="beta", y="error", by=["epsilon"], logy=True, spread="std")
                ax.set_xlabel("smoothing weight β")
                ax.set_ylabel(ylab)

            recs = [{**r, "m": r["batch_size"]} for r in records]
            paths.append(
                _grid(name, "", recs, ("accounting", accs), ms, draw_b,
                      lambda a, m, s: f"{_TITLES[a]}, m={m}; true ε ≤ {_true_eps(s)}", out_dir, "ε")
            )  # fmt: skip
        else:

            def draw_f(ax: Any, sel: list[Mapping[str, Any]]) -> None:
                draw_lines(ax, sel, x="data_seed", y="error", by=["method"], logy=True, spread="std")
                ax.set_xlabel("synthetic data set")
                ax.set_ylabel(ylab)

            recs = [{**r, "m": r["batch_size"]} for r in records]
            paths.append(
                _grid(name, "", recs, ("accounting", accs), ms, draw_f,
                      lambda a, m, s: f"{_TITLES[a]}, m={m}; true ε ≤ {_true_eps(s)}", out_dir)
            )  # fmt: skip
        return paths

    return plot


def tables(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Final error (mean over repetitions) and claimed vs true ε per configuration."""
    from dpopt.experiments.records import summarize

    finals = [r for r in records if r["t"] == r["iterations"]]
    keys = ["method", "accounting", "epsilon", "batch_size", "beta"]
    rows = summarize(finals, "error", keys)
    eps_rows = summarize([r for r in finals if r["true_epsilon"] is not None], "true_epsilon", keys)
    true = {tuple(r[k] for k in keys): r["max"] for r in eps_rows}
    out = []
    for r in rows:
        k = tuple(r[key] for key in keys)
        out.append(
            {
                "method": r["method"],
                "accounting": r["accounting"],
                "ε claimed": r["epsilon"],
                "true ε": round(true[k], 4) if k in true else "∞",
                "m": r["batch_size"],
                "β": r["beta"],
                "final f - f*": float(f"{r['mean']:.4g}"),
                "spread (std)": float(f"{r['std']:.3g}"),
                "reps": r["count"],
            }
        )
    return [("Final objective error and privacy (claimed vs true)", out)]


# ------------------------------------------------------------------------------------------------
# Registry
# ------------------------------------------------------------------------------------------------

DET = ("DP-GDwS", "DP-MAG", "DP-GD", "DP-NAG", "DP-HB", "DP-M-ASG", "DP-M-ASG*")
STOCH = ("DP-GDwS", "DP-MAG", "DP-GD", "DP-NAG", "DP-HB", "DP-M-ASG", "DP-M-ASG*")
BETAS_CURVES = (0.1, 0.3, 0.5, 0.7, 1.0)
BETAS_SWEEP = (*(round(0.01 * k, 2) for k in range(1, 100)), 1.0)
QUICK: dict[str, Any] = {"n_samples": 2000, "iterations": 200, "record_every": 20}

_SPECS: list[tuple[str, str, str, KuruConfig, KuruConfig]] = [
    (
        "kuru-fig4.2",
        "DP-GDwS: f - f* vs iteration for smoothing weights β = {betas}, ε = {epsilons}, {iterations} iterations.",
        f"{KURU}, Fig. 4.2",
        KuruConfig(methods=("DP-GDwS",), epsilons=(1.0,), betas=(0.1, 0.5, 1.0), **QUICK),
        KuruConfig(methods=("DP-GDwS",), epsilons=(0.5, 0.8, 1.0), betas=BETAS_CURVES),
    ),
    (
        "kuru-fig4.3",
        "DP-GDwS: final f - f* vs β = {betas} for ε = {epsilons}.",
        f"{KURU}, Fig. 4.3",
        KuruConfig(kind="beta_sweep", methods=("DP-GDwS",), betas=(0.05, 0.1, 0.3, 0.6, 1.0), **QUICK),
        KuruConfig(kind="beta_sweep", methods=("DP-GDwS",), epsilons=(0.5, 0.8, 1.0), betas=BETAS_SWEEP),
    ),
    (
        "kuru-fig4.4",
        "DP-MAG vs DP versions of M-ASG and M-ASG*, ε = {epsilons}, {iterations} iterations (the thesis: 10³).",
        f"{KURU}, Fig. 4.4",
        KuruConfig(methods=("DP-MAG", "DP-M-ASG", "DP-M-ASG*"), **QUICK),
        KuruConfig(methods=("DP-MAG", "DP-M-ASG", "DP-M-ASG*"), epsilons=(0.5, 0.8, 1.0)),
    ),
    (
        "kuru-fig4.5",
        "DP-MAG vs DP versions of M-ASG and M-ASG*, ε = {epsilons}, {iterations} iterations (the thesis: 10⁴).",
        f"{KURU}, Fig. 4.5",
        KuruConfig(methods=("DP-MAG", "DP-M-ASG", "DP-M-ASG*"), n_samples=2000, iterations=1000, record_every=50),
        KuruConfig(methods=("DP-MAG", "DP-M-ASG", "DP-M-ASG*"), epsilons=(0.5, 0.8, 1.0), iterations=10_000,
                   record_every=100),
    ),
    (
        "kuru-fig4.6",
        "Deterministic comparison: DP-GDwS (β = {betas}) and DP-MAG vs DP-GD, DP-NAG, DP-HB, DP-M-ASG, "
        "DP-M-ASG*; ε = {epsilons}, {iterations} iterations on {n_samples} samples.",
        f"{KURU}, Fig. 4.6",
        KuruConfig(methods=DET, accountings=("paper", "sound-gaussian"), **QUICK),
        KuruConfig(methods=DET, epsilons=(0.5, 0.8, 1.0)),
    ),
    (
        "kuru-fig4.7",
        "Final f - f* on synthetic data sets {data_seeds} (the thesis: ten), ε = {epsilons} (DP-NAG and DP-HB "
        "omitted as in the thesis).",
        f"{KURU}, Fig. 4.7",
        KuruConfig(kind="final", methods=("DP-GDwS", "DP-MAG", "DP-GD", "DP-M-ASG", "DP-M-ASG*"),
                   epsilons=(0.5,), data_seeds=(0, 1, 2), **QUICK),
        KuruConfig(kind="final", methods=("DP-GDwS", "DP-MAG", "DP-GD", "DP-M-ASG", "DP-M-ASG*"),
                   epsilons=(0.5,), data_seeds=tuple(range(10))),
    ),
    (
        "kuru-fig4.8",
        "DP-SGDwS for β = {betas} and ε = {epsilons}, mini-batch m = {batch_sizes} (Figs. 4.8-4.11).",
        f"{KURU}, Figs. 4.8-4.11",
        KuruConfig(methods=("DP-GDwS",), betas=(0.1, 1.0), batch_sizes=(1, 10), **QUICK),
        KuruConfig(methods=("DP-GDwS",), epsilons=(0.5, 0.8, 1.0), betas=BETAS_CURVES,
                   batch_sizes=(1, 10, 100, 1000)),
    ),
    (
        "kuru-fig4.12",
        "DP-SGDwS: final f - f* vs β = {betas}, ε = {epsilons}, m = {batch_sizes}.",
        f"{KURU}, Fig. 4.12",
        KuruConfig(kind="beta_sweep", methods=("DP-GDwS",), betas=(0.05, 0.1, 0.3, 1.0), batch_sizes=(10,),
                   **QUICK),
        KuruConfig(kind="beta_sweep", methods=("DP-GDwS",), betas=BETAS_SWEEP, batch_sizes=(1, 10, 100, 1000)),
    ),
    (
        "kuru-fig4.13",
        "DP-onlineGDwS with buckets of {bucket_size} records (T = n/{bucket_size}), β = {betas}.",
        f"{KURU}, Fig. 4.13",
        KuruConfig(methods=("DP-onlineGDwS",), betas=(0.1, 0.5, 1.0), n_samples=2000, record_every=10),
        KuruConfig(methods=("DP-onlineGDwS",), epsilons=(0.5, 0.8, 1.0), betas=BETAS_CURVES),
    ),
    (
        "kuru-fig4.14",
        "DP-SMAG vs stochastic M-ASG and M-ASG*, ε = {epsilons}, m = {batch_sizes}, {iterations} iterations "
        "(the thesis: 10³).",
        f"{KURU}, Fig. 4.14",
        KuruConfig(methods=("DP-MAG", "DP-M-ASG", "DP-M-ASG*"), batch_sizes=(10,), **QUICK),
        KuruConfig(methods=("DP-MAG", "DP-M-ASG", "DP-M-ASG*"), batch_sizes=(1, 10, 100, 1000)),
    ),
    (
        "kuru-fig4.15",
        "DP-SMAG vs stochastic M-ASG and M-ASG*, ε = {epsilons}, m = {batch_sizes}, {iterations} iterations "
        "(the thesis: 10⁴).",
        f"{KURU}, Fig. 4.15",
        KuruConfig(methods=("DP-MAG", "DP-M-ASG", "DP-M-ASG*"), batch_sizes=(10,), n_samples=2000,
                   iterations=1000, record_every=50),
        KuruConfig(methods=("DP-MAG", "DP-M-ASG", "DP-M-ASG*"), batch_sizes=(1, 10, 100, 1000),
                   iterations=10_000, record_every=100),
    ),
    (
        "kuru-fig4.16",
        "Stochastic comparison (DP-SGDwS β = 0.1, DP-SMAG vs SGD, SNAG, SHB, stocMASG, stocMASG*), "
        "ε = {epsilons}, m = {batch_sizes} (Figs. 4.16-4.19).",
        f"{KURU}, Figs. 4.16-4.19",
        KuruConfig(methods=STOCH, batch_sizes=(10,), accountings=("paper", "sound"), **QUICK),
        KuruConfig(methods=STOCH, epsilons=(0.5, 0.8, 1.0), batch_sizes=(1, 10, 100, 1000)),
    ),
    (
        "kuru-fig4.20",
        "Stochastic methods: final f - f* over synthetic data sets {data_seeds} (the thesis: ten), ε = {epsilons}, "
        "m = {batch_sizes}.",
        f"{KURU}, Fig. 4.20",
        KuruConfig(kind="final", methods=("DP-GDwS", "DP-MAG", "DP-GD", "DP-M-ASG"), epsilons=(0.5,),
                   batch_sizes=(10,), data_seeds=(0, 1), accountings=("paper", "sound"), **QUICK),
        KuruConfig(kind="final", methods=STOCH, epsilons=(0.5,), batch_sizes=(1, 10, 100, 1000),
                   data_seeds=tuple(range(10))),
    ),
    (
        "kuru-fig4.21",
        "Digits (bundled MNIST stand-in, digit 1 vs rest): stochastic comparison, ε = {epsilons}, m = {batch_sizes} "
        "(Figs. 4.21-4.24).",
        f"{KURU}, Figs. 4.21-4.24",
        KuruConfig(methods=("DP-GDwS", "DP-MAG", "DP-GD"), batch_sizes=(10,), dataset="digits",
                   accountings=("paper", "sound"), iterations=200, record_every=20),
        KuruConfig(methods=STOCH, epsilons=(0.5, 0.8, 1.0), batch_sizes=(1, 10, 100, 1000), dataset="digits"),
    ),
]  # fmt: skip

for _name, _desc, _doc, _quick, _paper in _SPECS:
    register(
        Experiment(
            name=_name,
            description=_desc
            + "\nEach configuration runs under the thesis's accounting and under dpopt's sound default "
            "(records carry the claimed and the true ε).",
            seed_doc=_doc,
            run=run,
            configs={"quick": _quick, "paper": _paper},
            plot=_plot(_name, _quick.kind),
            tables=tables,
        )
    )

if "kuru-fig4.6" not in TOUR:
    TOUR.append("kuru-fig4.6")
