"""``admm-utility``: does private ADMM beat each site training alone?

UCI Adult's training file (``adult.data``, 30,162 rows after dropping missing values, the ADMM
paper's preprocessing with *declared* column bounds, so rows have ‖x‖₂ <= 1) is split over N sites
(evenly or with Dirichlet(0.5) shares, at least 50 rows each) on an Erdős–Rényi graph
G(N, min(0.5, 5/N)) (the seed's G(5, 0.5) and G(100, 0.05)).  At every per-site ε we compare,
by **test accuracy on ``adult.test``** (15,060 rows, never trained on):

* ``PP``: penalty perturbation (:class:`dpopt.distributed.admm.PrivateADMM`, ``method="pp"``),
  noise calibrated from ``budget=Budget(ε)`` so that the whole-run bound P(T) = ε; the released
  average model f̄(T) (post-processing) is scored;
* ``DVP``: dual-variable perturbation (η ≡ θ), same calibration, same T;
* ``local``: each site alone, :func:`dpopt.minimize` with ``method="auto"`` (objective
  perturbation here) at the same ε, on its own rows; the mean (and min/max) over sites is scored;
* ``central``: :func:`dpopt.minimize` (``method="auto"``) on the pooled rows at ε: the
  unattainable ideal (the sites cannot pool);
* ``non-private``: :func:`dpopt.minimize` with ``budget="non-private"`` on the pooled rows;
* ``M-ADMM``: PP's penalty schedule without noise (non-private M-ADMM, same T): what the
  schedule itself reaches, separating optimisation from privacy noise.

Every private method is pure ε-DP under replace-one neighbours with ε the per-site ε (for the
local and ADMM rows: for every record of every site).

Schedules (public, fixed before the data is seen).  ``schedule="public"`` (the default):
:func:`~dpopt.distributed.admm.public_pp_schedule` with C = 10, λ = 10⁻³ (ρ = C·N·λ, the same λ as
the single-site and central problems), **one round** (T = 1), one noise rate per site
(α_i = max(2, ε'·B_i·λ/8 − 1.4c₁), ``per_site_noise``, ``progress=4``) and η_i such that every site spends exactly
ε; the score is that of the average of the released models **weighted by the declared site sizes**
(post-processing).  With f(0) = 0 the one round is each site's objective perturbation, so this is
"train privately once, then average"; under pure-ε composition more rounds split each site's
budget (noise × T) while averaging them wins back only √T.  T = 1, the floor 2 and the weighting were
chosen on a validation split of ``adult.data`` (``benchmarks/bench_admm_schedule.py``), never on
``adult.test``.  DVP uses the same rule with one shared η = θ (the most demanding site's).
The session-2 schedule (T = 5, one shared α >= 5, rounds 3..5 averaged unweighted):
``--set public_rounds=5 --set min_noise_rate=5 --set per_site_noise=false --set weighted=false``.
``schedule="paper"``: the seed's growing penalty, as measured before (C = 10, ρ = 10⁻²·C,
θ = η(1) = 0.5, η(t) = 0.5·1.1^(t−1), α(t) = α(1)·1.05^(t−1), T = 30, last round scored), picked
then by a small sweep on this same data set that no bound covers.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpopt import minimize
from dpopt.accounting import Budget
from dpopt.datasets import load_adult, make_logistic
from dpopt.distributed.admm import PrivateADMM, geometric, public_pp_schedule
from dpopt.distributed.topology import erdos_renyi, split_rows
from dpopt.exceptions import BudgetExceededError, InvalidParameterError
from dpopt.experiments.data import FILES, find_file, stand_in
from dpopt.experiments.papers import ADMM
from dpopt.experiments.plots import new_figure, save_figure
from dpopt.experiments.registry import Experiment, register
from dpopt.problems import DataBounds, ERMProblem

Record = dict[str, Any]

METHODS: tuple[str, ...] = ("PP", "DVP", "local", "central", "non-private", "M-ADMM")


def _load() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """(X_train, y_train, X_test, y_test, label); a labelled synthetic stand-in if Adult is absent."""
    path = find_file(FILES["UCI Adult"], "adult/adult.test")
    return _load_from(None if path is None else path.parent)


@functools.lru_cache(maxsize=2)
def _load_from(folder: Path | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    if folder is not None:
        tr = load_adult(folder, split="train")
        te = load_adult(folder, split="test")
        assert tr.y is not None and te.y is not None
        return tr.X, tr.y, te.X, te.y, "UCI Adult"
    ds = make_logistic(45_222, 105, rng=2018)
    assert ds.y is not None
    return ds.X[:30_162], ds.y[:30_162], ds.X[30_162:], ds.y[30_162:], stand_in("UCI Adult")


@dataclass(frozen=True)
class UtilityConfig:
    """Settings of ``admm-utility`` (all public, fixed before the data is read)."""

    n_sites: tuple[int, ...] = (5, 20, 100)
    splits: tuple[str, ...] = ("even", "dirichlet")
    epsilons: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0)
    #: rows per site (a subsample, uneven shares stay uneven); None: all training rows are split
    rows_per_site: int | None = None
    #: test rows scored (the first ones of adult.test); None: all 15,060
    test_rows: int | None = None
    min_rows: int = 50
    #: "public": :func:`~dpopt.distributed.admm.public_pp_schedule` (constant per-node η from ε, the
    #: graph, the sizes and λ; ρ = C·N·λ; the average of the released models of rounds T/2+1..T is
    #: scored); "paper": the seed's growing penalty below (η(t) = eta1·q1^(t−1), ρ = reg_per_weight·C,
    #: n_rounds, the last round's average model scored)
    schedule: str = "public"
    #: T of the public schedule, its floor on the noise rate α, the progress its α rule asks for
    #: (units of 1/λ), one α_i per site (else one shared α), and whether the scored average weights
    #: the sites by their declared sizes.  The session-2 schedule (tables of docs/admm_utility.md,
    #: "session 2"): public_rounds=5, min_noise_rate=5, per_site_noise=False, weighted=False.
    public_rounds: int = 1
    min_noise_rate: float = 2.0
    progress: float = 4.0
    per_site_noise: bool = True
    weighted: bool = True
    #: False: only the ADMM rows (PP, DVP, M-ADMM), e.g. more seeds of the noisy 5-site runs, read
    #: together with a run that has the baselines (the tables average each method over its records)
    baselines: bool = True
    n_rounds: int = 30
    theta: float = 0.5
    eta1: float = 0.5
    q1: float = 1.1
    q2: float = 1.05
    loss_weight: float = 10.0
    #: ρ = reg_per_weight · C
    reg_per_weight: float = 1e-2
    #: l2 penalty of the single-site and central problems
    l2_penalty: float = 1e-3
    topology_seed: int = 2018
    split_seed: int = 2018


def check(cfg: UtilityConfig) -> None:
    if cfg.schedule not in ("public", "paper"):
        raise InvalidParameterError(f"schedule: expected 'public' or 'paper', got {cfg.schedule!r}")
    bad = [s for s in cfg.splits if s not in ("even", "dirichlet")]
    if bad:
        raise InvalidParameterError(f"splits: expected 'even' or 'dirichlet', got {bad[0]!r}")
    if not cfg.n_sites or min(cfg.n_sites) < 2:
        raise InvalidParameterError("n_sites: need at least 2 sites per setting")
    if not cfg.epsilons or min(cfg.epsilons) <= 0:
        raise InvalidParameterError("epsilons: every ε must be > 0")


def _accuracy(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean((x @ w) * y > 0))


def _sites(
    cfg: UtilityConfig, n: int, split: str, x: np.ndarray, y: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray]]:
    min_rows = cfg.min_rows if split != "even" else 1
    parts = split_rows(x.shape[0], n, how=split, rng=cfg.split_seed, min_size=min_rows)  # type: ignore[arg-type]
    if cfg.rows_per_site is not None:
        frac = min(1.0, cfg.rows_per_site * n / x.shape[0])
        parts = [p[: max(min_rows, round(p.size * frac))] for p in parts]
    return [(x[p], y[p]) for p in parts]


def _plan(
    cfg: UtilityConfig, degrees: np.ndarray, sizes: np.ndarray, eps: float, method: str
) -> tuple[dict[str, Any], int, np.ndarray | None]:
    """PrivateADMM keywords of the configured schedule at ε, the first round averaged (0: last only),
    and the node weights of the scored average (None: equal; declared sizes are public)."""
    kw: dict[str, Any]
    if cfg.schedule == "public":
        sch = public_pp_schedule(
            eps, degrees=degrees, sizes=sizes, loss_weight=cfg.loss_weight, l2_penalty=cfg.l2_penalty,
            n_rounds=cfg.public_rounds, min_noise_rate=cfg.min_noise_rate, shared=method == "DVP",
            progress=cfg.progress, per_site_noise=cfg.per_site_noise,
        )  # fmt: skip
        kw = sch.kwargs("dvp" if method == "DVP" else "pp")
        if method == "M-ADMM":
            kw.pop("noise_rate", None)
        return kw, sch.average_from, sch.weights if cfg.weighted else None
    kw = {"theta": cfg.theta, "max_iter": cfg.n_rounds}
    if method != "DVP":
        kw["penalty"] = geometric(cfg.eta1, cfg.q1)
    if method != "M-ADMM":
        kw["noise_ratio"] = cfg.q2
    return kw, 0, None


def run(cfg: UtilityConfig, rng: np.random.Generator) -> Iterator[Record]:
    """One record per (sites, split, ε, method) with the test accuracy of what that method releases."""
    x, y, xt, yt = _load()[:4]
    label = _load()[4]
    if cfg.test_rows is not None:
        xt, yt = xt[: cfg.test_rows], yt[: cfg.test_rows]
    problem = ERMProblem("logistic", DataBounds(feature_norm=1.0, label_bound=1.0), l2_penalty=cfg.l2_penalty)
    for n in cfg.n_sites:
        topo = erdos_renyi(n, min(0.5, 5.0 / n), rng=cfg.topology_seed)
        for split in cfg.splits:
            data = _sites(cfg, n, split, x, y)
            sizes = np.array([a.shape[0] for a, _ in data])
            px = np.concatenate([a for a, _ in data])
            py = np.concatenate([b for _, b in data])
            base = {
                "dataset": label,
                "n_sites": n,
                "split": split,
                "rows": int(sizes.sum()),
                "min_site_rows": int(sizes.min()),
                "max_site_rows": int(sizes.max()),
                "test_rows": int(xt.shape[0]),
            }
            ref = (
                minimize(problem, px, py, budget="non-private", rng=int(rng.integers(2**31)))
                if cfg.baselines
                else None
            )
            reg = (
                cfg.loss_weight * n * cfg.l2_penalty
                if cfg.schedule == "public"
                else cfg.reg_per_weight * cfg.loss_weight
            )

            def score(res: Any, start: int, weights: np.ndarray | None) -> float:
                w = res.round_average(start, weights) if start else res.average_model
                return _accuracy(w, xt, yt)

            for eps in cfg.epsilons:
                # PP's penalty schedule without noise: what the schedule itself reaches in T rounds
                kw, start, weights = _plan(cfg, topo.degrees, sizes, eps, "M-ADMM")
                m_admm = PrivateADMM(topo, method="m-admm", loss_weight=cfg.loss_weight, reg=reg, **kw).run(
                    data, rng=int(rng.integers(2**31)), record_models=bool(start)
                )
                yield {
                    **base,
                    "epsilon": eps,
                    "method": "M-ADMM",
                    "test_accuracy": score(m_admm, start, weights),
                    "spent_epsilon": -1.0,
                }
                if ref is not None:
                    yield {
                        **base,
                        "epsilon": eps,
                        "method": "non-private",
                        "test_accuracy": _accuracy(ref.solution, xt, yt),
                        "spent_epsilon": -1.0,
                    }
                    central = minimize(problem, px, py, budget=Budget(eps, 0.0), rng=int(rng.integers(2**31)))
                    yield {
                        **base,
                        "epsilon": eps,
                        "method": "central",
                        "test_accuracy": _accuracy(central.solution, xt, yt),
                        "spent_epsilon": float(central.privacy.epsilon),
                    }
                    accs = []
                    for a, b in data:
                        res = minimize(problem, a, b, budget=Budget(eps, 0.0), rng=int(rng.integers(2**31)))
                        accs.append(_accuracy(res.solution, xt, yt))
                    yield {
                        **base,
                        "epsilon": eps,
                        "method": "local",
                        "test_accuracy": float(np.mean(accs)),
                        "site_accuracy_min": float(min(accs)),
                        "site_accuracy_max": float(max(accs)),
                        "spent_epsilon": float(eps),
                    }
                for method in ("PP", "DVP"):
                    kw, start, weights = _plan(cfg, topo.degrees, sizes, eps, method)
                    alg = PrivateADMM(
                        topo,
                        method="pp" if method == "PP" else "dvp",
                        budget=Budget(eps, 0.0),
                        loss_weight=cfg.loss_weight,
                        reg=reg,
                        **kw,
                    )
                    rec: Record = {**base, "epsilon": eps, "method": method, "rounds": alg.n_rounds}
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore", UserWarning)
                            out = alg.run(data, rng=int(rng.integers(2**31)), record_models=bool(start))
                    # refused before any noise is drawn, e.g. ε below the bound's noise-free floor
                    except (InvalidParameterError, BudgetExceededError) as exc:
                        yield {
                            **rec,
                            "test_accuracy": None,
                            "spent_epsilon": -1.0,
                            "note": str(exc).splitlines()[0][:200],
                        }
                        continue
                    site_accs = [_accuracy(m, xt, yt) for m in out.models]
                    yield {
                        **rec,
                        "test_accuracy": score(out, start, weights),
                        "site_accuracy_min": float(min(site_accs)),
                        "site_accuracy_max": float(max(site_accs)),
                        "spent_epsilon": float(out.privacy.epsilon),
                    }


def _mean_table(records: Sequence[Mapping[str, Any]]) -> dict[tuple[Any, ...], float]:
    groups: dict[tuple[Any, ...], list[float]] = {}
    for r in records:
        acc = r.get("test_accuracy")
        if acc is None or acc != acc:  # a run the bound refused (see the record's "note")
            continue
        groups.setdefault((r["n_sites"], r["split"], r["epsilon"], r["method"]), []).append(float(acc))
    return {k: float(np.mean(v)) for k, v in groups.items()}


def tables(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Record]]]:
    means = _mean_table(records)
    settings = sorted({k[:3] for k in means}, key=lambda k: (k[0], k[1], k[2]))
    rows: list[Record] = []
    for n, split, eps in settings:
        row: Record = {"sites": n, "split": split, "ε per site": eps}
        for m in METHODS:
            v = means.get((n, split, eps, m))
            row[m] = None if v is None or v != v else round(v, 4)
        pp, loc = row.get("PP"), row.get("local")
        row["PP − local"] = None if pp is None or loc is None else round(pp - loc, 4)
        cen = row.get("central")
        row["central − PP"] = None if pp is None or cen is None else round(cen - pp, 4)
        rows.append(row)
    return [("Test accuracy on adult.test (mean over seeds)", rows)]


def plot(records: Sequence[Mapping[str, Any]], out_dir: Path) -> list[Path]:
    means = _mean_table(records)
    panels = sorted({k[:2] for k in means})
    fig, axes = new_figure(1, len(panels), figsize=(5 * len(panels), 4.2))
    for k, (n, split) in enumerate(panels):
        ax = axes[0, k]
        for m, style in zip(METHODS, ("o-", "s-", "^-", "d--", "k:", "c-."), strict=True):
            pts = sorted(
                (e, v) for (nn, ss, e, mm), v in means.items() if (nn, ss, mm) == (n, split, m) and v == v
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=m)
        ax.set_xscale("log")
        ax.set_xlabel("per-site ε (whole run)")
        ax.set_ylabel("test accuracy")
        ax.set_title(f"{n} sites, {split} split", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    return [save_figure(fig, out_dir / "admm-utility.png")]


register(
    Experiment(
        name="admm-utility",
        description=(
            "Does private ADMM beat each site training alone? {data} over {n_sites} sites ({splits} "
            "split), per-site ε = {epsilons}: test accuracy of PP, DVP, single-site dpopt.minimize, "
            "central pooled DP and non-private."
        ),
        data="UCI Adult",
        seed_doc=f"{ADMM}: its PP and DVP against single-site and central baselines (not in the paper)",
        run=run,
        configs={
            "quick": UtilityConfig(
                n_sites=(5,),
                splits=("even",),
                epsilons=(1.0, 5.0),
                rows_per_site=200,
                test_rows=2000,
                n_rounds=10,
            ),
            "paper": UtilityConfig(),
        },
        plot=plot,
        tables=tables,
        check=check,
    )
)

__all__ = ["UtilityConfig", "run"]
