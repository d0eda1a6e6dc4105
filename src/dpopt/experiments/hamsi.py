"""Reproductions of the HAMSI experiments (seed 003, chapter 3, §3.5; spec §5.1 and §6.1).

Registered experiments
----------------------
``hamsi-fig3.3``   colour-class sizes of COLOR (first fit) vs COLOR-B (balanced) on MovieLens 100K.
``hamsi-fig3.4``   block sizes of STRATA vs STRATA-B (4 x 4) on MovieLens 100K.
``hamsi-table3.1`` final training RMSE under a fixed wall-clock budget: mb-GD and HAMSI (det/stoc) x
                   the five partitioners (+ held-out RMSE on an 80/20 split when configured).
``hamsi-fig3.5``   RMSE vs wall-clock time, mb-GD vs HAMSI with STRATA-B.
``hamsi-fig3.6``   HAMSI RMSE vs time for several thread counts with STRATA-B.
``hamsi-fig3.7``   time of one outer iteration split into gradient / update / Hessian phases.
``hamsi-heldout``  held-out RMSE (80/20 split) vs time with l2 regularization (not in the thesis).

Choices (recorded in every config):

* Data: ``dataset="movielens-100k"`` reads ``u.data`` from ``$DPOPT_DATASETS/movielens-100k`` or from
  ``shared/datasets`` next to the source tree; ``"movielens:<path>"`` reads any MovieLens file (1M,
  10M, 20M for the paper scale); when the file is absent the run falls back to synthetic low-rank
  ratings of the same shape and size and says so in every record (``dataset`` field);
  ``"synthetic"`` / ``"synthetic-1m"`` are low-rank ratings shaped like MovieLens 100K / 1M.
* Constants: rank 50, HAMSI (η, γ) = (0.06, 0.51), mb-GD (0.001, 0.51), memory 5, N(0, 1)
  initialization, 1/(2|Ω|) scaling; the reference code's β counter (inner), running-minimum σ and
  curvature test, no β floor and no restart safeguard by default, i.e. the reference algorithm
  exactly (spec §2.6, §2.7), unregularized; dpopt's own defaults are one config field away.  K = 20 subsets for HOGWILD/COLOR/COLOR-B
  and K = P = threads for STRATA/STRATA-B.  ``variants=("reference", "dpopt")`` (Table 3.1 at paper
  scale) runs HAMSI both ways.
* Paper scale on other data: ``dpopt reproduce hamsi-table3.1 --scale paper --set dataset=synthetic-1m``
  (1M synthetic ratings shaped like MovieLens 1M) or ``--set dataset=movielens:/path/to/ratings.dat``.
* Wall-clock budgets exclude RMSE evaluations (as the reference code does).  A Python/numba
  implementation on a shared 2-core machine does not match a 16-thread C++ run: the reproduction
  checks the *orderings* of spec §6.1 (HAMSI far below mb-GD; STRATA-B best or near best).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpopt.datasets import Ratings, load_movielens, make_low_rank_ratings
from dpopt.distributed.partition import SCHEMES, color, color_b, make_partition, strata, strata_b
from dpopt.experiments.data import FILES, find_file, stand_in
from dpopt.experiments.papers import KURU
from dpopt.experiments.plots import draw_bars, draw_lines, new_figure, save_figure
from dpopt.experiments.registry import TOUR, Experiment, register
from dpopt.matrix_factorization import MatrixFactorizationProblem, split_ratings
from dpopt.solvers.hamsi import HamsiResult, hamsi, mbgd

ML100K_SHAPE = (943, 1682)
ML100K_RATINGS = 100_000
ML1M_SHAPE = (6040, 3706)
ML1M_RATINGS = 1_000_209


def _check_dataset(cfg: BalanceConfig | RunConfig) -> None:
    """Refuse an unknown ``dataset`` before a run folder exists (a ``movielens:PATH`` file is checked too)."""
    from dpopt.exceptions import InvalidParameterError

    known = ("movielens-100k", "synthetic", "synthetic-1m")
    if not cfg.dataset.startswith("movielens:") and cfg.dataset not in known:
        raise InvalidParameterError(
            f"--set dataset: unknown {cfg.dataset!r}; use 'movielens-100k', 'movielens:<path>', 'synthetic' "
            "or 'synthetic-1m'"
        )


def load_dataset(name: str, rng: np.random.Generator) -> tuple[Ratings, str]:
    """The ratings named by a config (see module docstring) and a label for the records."""
    if name.startswith("movielens:"):
        path = Path(name.split(":", 1)[1])
        return load_movielens(path), f"MovieLens ({path.name})"
    if name == "movielens-100k":
        found = find_file(FILES["MovieLens 100K"])
        if found is not None:
            return load_movielens(found), "MovieLens 100K"
        label = stand_in("MovieLens 100K")
    elif name in ("synthetic", "synthetic-1m"):
        label = name
    else:
        raise ValueError(
            f"dataset: unknown {name!r}; use 'movielens-100k', 'movielens:<path>', 'synthetic' or "
            "'synthetic-1m'"
        )
    (m, n), size = (ML1M_SHAPE, ML1M_RATINGS) if name == "synthetic-1m" else (ML100K_SHAPE, ML100K_RATINGS)
    r = make_low_rank_ratings(m, n, 10, size / (m * n), rng=rng)
    return Ratings(
        rows=r.rows,
        cols=r.cols,
        values=3.5 + r.values,
        shape=r.shape,
        name="synthetic",
        description=r.description,
    ), label


def _problem(ratings: Ratings, rank: int, l2: float) -> MatrixFactorizationProblem:
    return MatrixFactorizationProblem(ratings, rank, l2=l2, allow_empty=True)


# ------------------------------------------------------------------------------------ configs
@dataclass(frozen=True)
class BalanceConfig:
    """Figs. 3.3-3.4: partition statistics."""

    dataset: str = "movielens-100k"
    n_subsets: int = 20
    n_strata: int = 4


@dataclass(frozen=True)
class RunConfig:
    """Training runs (Table 3.1, Figs. 3.5-3.7)."""

    dataset: str = "movielens-100k"
    rank: int = 50
    algorithms: tuple[str, ...] = ("mbgd", "hamsi")
    schedules: tuple[str, ...] = ("det", "stoc")
    schemes: tuple[str, ...] = SCHEMES
    threads: tuple[int, ...] = (2,)
    n_subsets: int = 20
    time_budget: float | None = 25.0
    max_epochs: int = 10**7
    l2: float = 0.0
    init_scale: float = 1.0
    test_fraction: float = 0.0
    beta_counter: str = "inner"
    sigma_mode: str = "running_min"
    curvature: str = "reference"
    beta_floor: float = 0.0
    safeguard: bool = False
    curves: bool = False  # one record per RMSE evaluation (Figs. 3.5-3.6)
    # HAMSI settings: "reference" = the fields above (the thesis / reference code), "dpopt" = the
    # library's defaults (β floor, thesis σ, relative curvature test, restart safeguard)
    variants: tuple[str, ...] = ("reference",)


# ------------------------------------------------------------------------------------ runs
def _balance(cfg: BalanceConfig, rng: np.random.Generator) -> Iterator[dict[str, Any]]:
    ratings, label = load_dataset(cfg.dataset, rng)
    for scheme, part in (
        ("color", color(ratings, cfg.n_subsets)),
        ("color-b", color_b(ratings, cfg.n_subsets, rng=rng)),
    ):
        sizes = part.color_sizes
        assert sizes is not None
        for c, size in enumerate(sizes.tolist()):
            yield {"figure": "3.3", "dataset": label, "scheme": scheme, "color": c, "n_functions": int(size)}
    for scheme, part in (
        ("strata", strata(ratings, cfg.n_strata)),
        ("strata-b", strata_b(ratings, cfg.n_strata)),
    ):
        for s, blocks in enumerate(part.block_sizes):
            for b, size in enumerate(blocks.tolist()):
                yield {
                    "figure": "3.4", "dataset": label, "scheme": scheme, "stratum": s, "block": b,
                    "n_functions": int(size), "block_imbalance": part.balance()["block_imbalance"],
                }  # fmt: skip


def _fit(
    cfg: RunConfig, problem: MatrixFactorizationProblem, test: Ratings | None, algorithm: str, schedule: str,
    scheme: str, threads: int, rng: np.random.Generator, variant: str = "reference",
) -> HamsiResult:  # fmt: skip
    seed = int(rng.integers(2**31))
    part = make_partition(problem.ratings, scheme, n_subsets=cfg.n_subsets, n_threads=threads, rng=seed)
    common: dict[str, Any] = dict(
        schedule=schedule, time_budget=cfg.time_budget, max_iter=cfg.max_epochs, n_threads=threads, test=test,
        rng=seed, init_scale=cfg.init_scale,
    )  # fmt: skip
    if algorithm == "hamsi":
        opts: dict[str, Any] = (
            dict(
                beta_counter=cfg.beta_counter, sigma_mode=cfg.sigma_mode, curvature=cfg.curvature,
                beta_floor=cfg.beta_floor, safeguard=cfg.safeguard,
            )
            if variant == "reference"
            else {}
        )  # fmt: skip
        return hamsi(problem, part, **opts, **common)
    return mbgd(problem, part, **common)


def _runs(cfg: RunConfig, rng: np.random.Generator) -> Iterator[dict[str, Any]]:
    bad = sorted(set(cfg.variants) - {"reference", "dpopt"})
    if bad or not cfg.variants:
        raise ValueError(f"variants: expected 'reference' and/or 'dpopt', got {cfg.variants!r}")
    ratings, label = load_dataset(cfg.dataset, rng)
    test = None
    if cfg.test_fraction > 0:
        ratings, test = split_ratings(ratings, cfg.test_fraction, rng=rng)
    problem = _problem(ratings, cfg.rank, cfg.l2)
    for threads in cfg.threads:
        for scheme in cfg.schemes:
            runs = [
                (a, v) for a in cfg.algorithms for v in (cfg.variants if a == "hamsi" else ("reference",))
            ]
            for algorithm, variant in runs:
                for schedule in cfg.schedules:
                    res = _fit(cfg, problem, test, algorithm, schedule, scheme, threads, rng, variant)
                    base = {
                        "dataset": label, "algorithm": algorithm, "variant": variant, "schedule": schedule,
                        "scheme": scheme, "threads": threads, "n_subsets": res.options["n_subsets"],
                    }  # fmt: skip
                    if cfg.curves:
                        for i in range(res.history_time.shape[0]):
                            yield base | {
                                "time": float(res.history_time[i]),
                                "epoch": int(res.history_epoch[i]),
                                "rmse": float(res.history_rmse[i]),
                                "test_rmse": None
                                if res.history_test_rmse is None
                                else float(res.history_test_rmse[i]),
                            }
                    n_outer = max(res.n_epochs, 1)
                    yield base | {
                        "final": True,
                        "rmse": res.rmse,
                        "test_rmse": res.test_rmse,
                        "status": res.status,
                        "epochs": res.n_epochs,
                        "steps": res.n_steps,
                        "elapsed": res.elapsed,
                        "gradient_s_per_epoch": res.timings["gradient"] / n_outer,
                        "update_s_per_epoch": res.timings["update"] / n_outer,
                        "hessian_s_per_epoch": res.timings["hessian"] / n_outer,
                        "block_imbalance": res.partition_balance["block_imbalance"],
                    }


# ------------------------------------------------------------------------------------ plots / tables
def _finals(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("final")]


def _curves(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if not r.get("final") and "time" in r]


def _plot_balance(records: Sequence[Mapping[str, Any]], out_dir: Path) -> list[Path]:
    figs = []
    fig, axes = new_figure(1, 2)
    for ax, scheme in zip(axes.flat, ("color", "color-b"), strict=True):
        rows = [
            r for r in records if r.get("figure") == "3.3" and r["scheme"] == scheme and r["repetition"] == 0
        ]
        ax.bar([r["color"] for r in rows], [r["n_functions"] for r in rows], width=1.0)
        ax.set_title(f"{scheme}: functions per colour")
        ax.set_xlabel("colour")
    figs.append(save_figure(fig, out_dir / "hamsi-fig3.3.png"))
    rows4 = [r for r in records if r.get("figure") == "3.4"]
    if rows4:
        fig, axes = new_figure(1, 1)
        draw_bars(
            axes[0, 0],
            [{**r, "cell": f"{r['stratum']}.{r['block']}"} for r in rows4],
            x="cell",
            y="n_functions",
            by="scheme",
            spread=None,
        )
        axes[0, 0].set_xlabel("stratum.block")
        figs.append(save_figure(fig, out_dir / "hamsi-fig3.4.png"))
    return figs


def _balance_table(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    rows = []
    for scheme in ("color", "color-b"):
        sizes = np.array(
            [
                r["n_functions"]
                for r in records
                if r.get("figure") == "3.3" and r["scheme"] == scheme and r["repetition"] == 0
            ]
        )
        if sizes.size:
            rows.append(
                {
                    "scheme": scheme,
                    "colours": int(sizes.size),
                    "largest": int(sizes.max()),
                    "smallest": int(sizes.min()),
                    "cv": round(float(sizes.std() / sizes.mean()), 3),
                }
            )
    strata_rows = []
    for scheme in ("strata", "strata-b"):
        rs = [
            r for r in records if r.get("figure") == "3.4" and r["scheme"] == scheme and r["repetition"] == 0
        ]
        for s in sorted({r["stratum"] for r in rs}):
            strata_rows.append(
                {
                    "scheme": scheme,
                    "stratum": s,
                    "blocks": "/".join(str(r["n_functions"]) for r in rs if r["stratum"] == s),
                }
            )
    return [
        ("Colour classes (Fig. 3.3)", rows),
        ("Blocks per stratum (Fig. 3.4; thesis: 6624/3492/2449/13585 vs 6395/6232/6204/6183)", strata_rows),
    ]


def _table31(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    finals = _finals(records)
    out = []
    for field_, title in (
        ("rmse", "Final training RMSE (mean over seeds)"),
        ("test_rmse", "Final held-out RMSE"),
    ):
        rows = []
        keys = sorted(
            {(r["threads"], r["algorithm"], r.get("variant", "reference"), r["schedule"]) for r in finals}
        )
        for threads, alg, variant, sched in keys:
            row: dict[str, Any] = {
                "threads": threads,
                "algorithm": alg,
                "variant": variant,
                "schedule": sched,
            }
            for scheme in SCHEMES:
                cell = [
                    r
                    for r in finals
                    if (
                        r["threads"],
                        r["algorithm"],
                        r.get("variant", "reference"),
                        r["schedule"],
                        r["scheme"],
                    )
                    == (threads, alg, variant, sched, scheme)
                    and r.get(field_) is not None
                ]
                if cell:
                    mean = round(float(np.mean([r[field_] for r in cell])), 4)
                    diverged = sum(r.get("status") in ("diverged", "failed") for r in cell)
                    # a diverged run reports the RMSE of its last finite iterate
                    row[scheme] = f"{mean} ({diverged}/{len(cell)} diverged)" if diverged else mean
            if len(row) > 4:
                rows.append(row)
        if rows:
            out.append((title, rows))
    return out


def _plot_curves(by: str, stem: str, title: str, y: str = "rmse") -> Any:
    def plot(records: Sequence[Mapping[str, Any]], out_dir: Path) -> list[Path]:
        rows = [r for r in _curves(records) if r["repetition"] == 0 and r.get(y) is not None]
        fig, axes = new_figure(1, 1)
        draw_lines(axes[0, 0], rows, x="time", y=y, by=by, spread=None, logy=True, marker="")
        axes[0, 0].set_xlabel("wall-clock seconds (evaluations excluded)")
        axes[0, 0].set_ylabel("training RMSE" if y == "rmse" else "held-out RMSE")
        fig.suptitle(title)
        return [save_figure(fig, out_dir / f"{stem}.png")]

    return plot


def _plot_split(records: Sequence[Mapping[str, Any]], out_dir: Path) -> list[Path]:
    finals = _finals(records)
    algs = sorted({r["algorithm"] for r in finals})
    fig, axes = new_figure(1, max(1, len(algs)))
    for ax, alg in zip(axes.flat, algs, strict=False):
        rows = [r for r in finals if r["algorithm"] == alg]
        schemes = [s for s in SCHEMES if any(r["scheme"] == s for r in rows)]
        bottom = np.zeros(len(schemes))
        for phase in ("gradient", "update", "hessian"):
            vals = np.array(
                [np.mean([r[f"{phase}_s_per_epoch"] for r in rows if r["scheme"] == s]) for s in schemes]
            )
            ax.bar(schemes, vals, bottom=bottom, label=phase)
            bottom += vals
        ax.set_title(f"{alg}: seconds per outer iteration")
        ax.legend(fontsize="small")
    return [save_figure(fig, out_dir / "hamsi-fig3.7.png")]


def _split_table(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    rows = []
    for r in _finals(records):
        if r["repetition"] == 0:
            rows.append({
                "algorithm": r["algorithm"], "scheme": r["scheme"], "schedule": r["schedule"],
                "gradient ms": round(1e3 * r["gradient_s_per_epoch"], 3), "update ms": round(1e3 * r["update_s_per_epoch"], 3),
                "hessian ms": round(1e3 * r["hessian_s_per_epoch"], 3),
            })  # fmt: skip
    return [("Time per outer iteration (Fig. 3.7)", rows)]


# ------------------------------------------------------------------------------ registration
register(
    Experiment(
        name="hamsi-fig3.3",
        description="Colour-class sizes of COLOR (first fit) vs COLOR-B (balanced random) and STRATA vs "
        "STRATA-B block sizes on {data} (Figs. 3.3-3.4 of the thesis).",
        data="MovieLens 100K",
        seed_doc=f"{KURU}, Figs. 3.3-3.4",
        run=_balance,
        check=_check_dataset,
        configs={"quick": BalanceConfig(), "paper": BalanceConfig()},
        plot=_plot_balance,
        tables=_balance_table,
    )
)
register(
    Experiment(
        name="hamsi-table3.1",
        description="Final training RMSE of mb-GD and HAMSI (det/stoc) with the five partitioners under a "
        "fixed budget (Table 3.1 of the thesis), on {data}, rank {rank}; wall-clock budget (s): "
        "{time_budget}; outer iterations at most: {max_epochs}.",
        data="MovieLens 100K",
        seed_doc=f"{KURU}, Table 3.1",
        run=_runs,
        check=_check_dataset,
        configs={
            "quick": RunConfig(time_budget=None, max_epochs=4, rank=10, threads=(2,)),
            "paper": RunConfig(
                time_budget=25.0, threads=(2,), test_fraction=0.0, variants=("reference", "dpopt")
            ),
        },
        tables=_table31,
    )
)
register(
    Experiment(
        name="hamsi-fig3.5",
        description="RMSE vs wall-clock time ({time_budget} s per run) on {data}, rank {rank}, mb-GD vs HAMSI "
        "with STRATA-B (Fig. 3.5 of the thesis), plus the RMSE on a held-out fraction {test_fraction} of "
        "the ratings.",
        data="MovieLens 100K",
        seed_doc=f"{KURU}, Fig. 3.5",
        run=_runs,
        check=_check_dataset,
        configs={
            "quick": RunConfig(
                schemes=("strata-b",), schedules=("det",), time_budget=1.5, curves=True, test_fraction=0.2
            ),
            "paper": RunConfig(
                schemes=("strata-b",), schedules=("det",), time_budget=25.0, curves=True, test_fraction=0.2
            ),
        },
        plot=_plot_curves("algorithm", "hamsi-fig3.5", "training RMSE vs time (STRATA-B)"),
        tables=_table31,
    )
)
_HELDOUT: dict[str, Any] = dict(
    schemes=("strata-b",), schedules=("det",), curves=True, test_fraction=0.2, l2=1e-4,
    sigma_mode="thesis", curvature="relative", beta_floor=1.0, safeguard=True,
)  # fmt: skip
register(
    Experiment(
        name="hamsi-heldout",
        data="MovieLens 100K",
        description="Held-out RMSE (held-out fraction {test_fraction}) on {data} vs time of l2-regularized "
        "mb-GD and HAMSI (dpopt's defaults) "
        "with STRATA-B (not in the thesis, whose training RMSE of an unregularized rank-50 model "
        "measures overfitting).",
        seed_doc=f"{KURU}, §3.5 (an extension)",
        run=_runs,
        check=_check_dataset,
        configs={
            "quick": RunConfig(**_HELDOUT, threads=(1,), time_budget=3.0),
            "paper": RunConfig(**_HELDOUT, threads=(2,), time_budget=25.0),
        },
        plot=_plot_curves(
            "algorithm", "hamsi-heldout", "held-out RMSE vs time (STRATA-B, l2 = 1e-4)", "test_rmse"
        ),
        tables=_table31,
    )
)
register(
    Experiment(
        name="hamsi-fig3.6",
        description="HAMSI RMSE vs time on {data} for {threads} threads with STRATA-B (Fig. 3.6 of the thesis).",
        data="MovieLens 100K",
        seed_doc=f"{KURU}, Fig. 3.6",
        run=_runs,
        check=_check_dataset,
        configs={
            "quick": RunConfig(
                algorithms=("hamsi",),
                schemes=("strata-b",),
                schedules=("det",),
                threads=(1, 2),
                time_budget=1.0,
                curves=True,
            ),
            "paper": RunConfig(
                algorithms=("hamsi",),
                schemes=("strata-b",),
                schedules=("det",),
                threads=(1, 2, 4, 8, 16),
                time_budget=25.0,
                curves=True,
            ),
        },
        plot=_plot_curves("threads", "hamsi-fig3.6", "HAMSI training RMSE vs time (STRATA-B)"),
        tables=_table31,
    )
)
register(
    Experiment(
        name="hamsi-fig3.7",
        description="Time of one outer iteration split into gradient, update and Hessian phases per scheme, "
        "on {data} ({max_epochs} outer iterations; Fig. 3.7 of the thesis).",
        data="MovieLens 100K",
        seed_doc=f"{KURU}, Fig. 3.7",
        run=_runs,
        check=_check_dataset,
        configs={
            "quick": RunConfig(schedules=("det",), time_budget=None, max_epochs=5),
            "paper": RunConfig(schedules=("det",), time_budget=None, max_epochs=100),
        },
        plot=_plot_split,
        tables=_split_table,
    )
)
if "hamsi-fig3.5" not in TOUR:
    TOUR.append("hamsi-fig3.5")
