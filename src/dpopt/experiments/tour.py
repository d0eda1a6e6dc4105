"""The tour: a quick demonstration of the foundation on built-in data.

``tour-mechanisms`` audits every mechanism of :mod:`dpopt.mechanisms` (and two deliberately broken
ones) on a pair of neighbouring datasets, and compares the per-release noise that different
accounting rules need for T composed Gaussian releases under one (ε, δ) budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpopt.accounting import Budget, advanced_composition_step, calibrate_noise, gaussian_sigma
from dpopt.audit import audit
from dpopt.exceptions import InvalidParameterError
from dpopt.experiments.plots import draw_lines, new_figure, save_figure
from dpopt.experiments.registry import TOUR, Experiment, register
from dpopt.mechanisms import (
    ExponentialMechanism,
    GaussianMechanism,
    L2LaplaceMechanism,
    LaplaceMechanism,
    ReportNoisyMin,
    l2_laplace_noise,
)


@dataclass(frozen=True)
class TourConfig:
    """Audit size and composition settings."""

    n_runs: int = 20_000
    n_runs_selection: int = 4_000  # mechanisms that release one index per call
    epsilon: float = 1.0
    delta: float = 1e-5
    steps: tuple[int, ...] = (1, 10, 100, 1000)


#: The opening paragraph of the tour's report (``dpopt tour``).
INTRO = (
    "This is the report of 'dpopt tour': a quick look, on small built-in or synthetic data, at what "
    "dpopt does. It opens with an empirical privacy audit: every noise mechanism is run many times "
    "on two neighbouring datasets to find a statistically valid lower bound on its ε, which must "
    "not exceed the ε it claims (two deliberately broken mechanisms show that the audit catches a "
    "wrong calibration). Next, how much noise different accounting rules need for one total budget. "
    "Then one small reproduction from each paper dpopt implements: linear-query release (COA), "
    "private ERM (TTZ), private accelerated gradient methods (Kuru), matrix factorization (HAMSI) "
    "and private ADMM. Every run uses the quick settings stated in its section (smaller than the "
    "papers'); its records, figures and settings are in the folder named there, next to this file."
)

# Neighbouring datasets under add/remove: ten records vs nine.  The counting query has sensitivity 1.
D0 = np.ones(10)
D1 = np.ones(9)

VectorMech = Callable[[np.ndarray, np.random.Generator, int], np.ndarray]


def _counting(mech: LaplaceMechanism | GaussianMechanism) -> VectorMech:
    def run(data: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.asarray(mech.release(np.full(n, data.sum()), rng=rng))

    return run


def _audited_mechanisms(cfg: TourConfig) -> list[tuple[str, float, float, VectorMech, bool]]:
    """(name, claimed ε, δ, mechanism, vectorized) for each audited mechanism."""
    eps, delta = cfg.epsilon, cfg.delta
    laplace = LaplaceMechanism.calibrate(eps)
    gaussian = GaussianMechanism.calibrate(Budget(eps, delta))
    broken_laplace = LaplaceMechanism(scale=laplace.scale / 2)  # noise halved: true ε = 2ε
    misstated = LaplaceMechanism.calibrate(eps, sensitivity=1.0)  # used on a query of sensitivity 2
    rnm = ReportNoisyMin.calibrate(eps, monotone=True, maximize=True)
    expo = ExponentialMechanism(eps, monotone=True)
    l2 = L2LaplaceMechanism.calibrate(eps)

    def misstated_run(data: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.asarray(misstated.release(np.full(n, 2 * data.sum()), rng=rng))

    def scores(data: np.ndarray) -> np.ndarray:
        # two candidates; only the first one's count depends on the data (monotone scores)
        return np.array([data.sum(), 9.5])

    def rnm_run(data: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
        children = rng.spawn(n)
        return np.array([rnm.release(scores(data), rng=c) for c in children], dtype=float)

    def expo_run(data: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
        children = rng.spawn(n)
        return np.array([expo.release(scores(data), rng=c) for c in children], dtype=float)

    def l2_run(data: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
        value = np.array([data.sum(), 0.0])  # a 2-d query of l2-sensitivity 1
        return (value + l2_laplace_noise(l2.alpha, 2, rng=rng, size=n))[:, 0]

    return [
        ("Laplace", eps, 0.0, _counting(laplace), True),
        ("Gaussian (analytic)", eps, delta, _counting(gaussian), True),
        ("report-noisy-max", eps, 0.0, rnm_run, False),
        ("exponential", eps, 0.0, expo_run, False),
        ("l2-Laplace", eps, 0.0, l2_run, True),
        ("BROKEN: Laplace, noise halved", eps, 0.0, _counting(broken_laplace), True),
        ("BROKEN: sensitivity mis-stated 2x", eps, 0.0, misstated_run, True),
    ]


def run(cfg: TourConfig, rng: np.random.Generator) -> Iterator[dict[str, Any]]:
    """Audit each mechanism, then compare composed-Gaussian calibrations."""
    for name, claimed, delta, mech, _vectorized in _audited_mechanisms(cfg):
        n_runs = cfg.n_runs if "noisy" not in name and "exponential" not in name else cfg.n_runs_selection
        result = audit(mech, D0, D1, n_runs=n_runs, delta=delta, rng=rng, vectorized=True)
        yield {
            "part": "audit",
            "mechanism": name,
            "claimed_epsilon": claimed,
            "delta": delta,
            "audited_epsilon_lower": result.epsilon_lower,
            "refuted": result.refutes(claimed),
            "n_runs": n_runs,
            "test": result.best_test,
        }
    budget = Budget(cfg.epsilon, cfg.delta)
    for steps in cfg.steps:
        per_step = {
            "classic, basic composition": gaussian_sigma(
                cfg.epsilon / steps, cfg.delta / steps, method="classic"
            ),
            "analytic, basic composition": gaussian_sigma(cfg.epsilon / steps, cfg.delta / steps),
        }
        if steps > 1:
            eps0, delta0 = advanced_composition_step(cfg.epsilon, cfg.delta, steps)
            per_step["classic, strong composition"] = gaussian_sigma(eps0, delta0, method="classic")
        per_step["tight: RDP"] = calibrate_noise(budget, steps=steps, accountant="rdp")
        per_step["tight: PLD"] = calibrate_noise(budget, steps=steps, accountant="pld")
        for method, sigma in per_step.items():
            yield {"part": "noise", "steps": steps, "method": method, "sigma": float(sigma)}


def check(cfg: TourConfig) -> None:
    """Refuse settings the run would reject midway (before a run folder exists)."""
    from dpopt._validation import check_int, check_positive, check_probability

    check_int(cfg.n_runs, "n_runs", minimum=100)  # the audit needs at least 100 runs per dataset
    check_int(cfg.n_runs_selection, "n_runs_selection", minimum=100)
    check_positive(cfg.epsilon, "epsilon")
    check_probability(cfg.delta, "delta", open_left=True)
    if not cfg.steps:
        raise InvalidParameterError("steps: give at least one number of releases, e.g. 1,10,100")
    for t in cfg.steps:
        check_int(t, "steps", minimum=1)


def plot(records: Sequence[Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """Audited lower bound vs claimed ε per mechanism, and per-release σ vs number of releases."""
    audits = sorted(
        (r for r in records if r["part"] == "audit"),
        key=lambda r: (r["mechanism"].startswith("BROKEN"), r["mechanism"]),
    )
    figs: list[Path] = []
    if audits:
        fig, axes = new_figure(1, 1, figsize=(8.5, 0.45 * len(audits) + 1.6))
        ax = axes[0, 0]
        ys = np.arange(len(audits))[::-1]
        colours = ["#c0392b" if r["refuted"] else "#2c7fb8" for r in audits]
        ax.barh(ys, [r["audited_epsilon_lower"] for r in audits], color=colours, height=0.6)
        claims = sorted({float(r["claimed_epsilon"]) for r in audits})
        for claim in claims:
            ax.axvline(claim, color="#333", linestyle="--", linewidth=1.2)
        ax.set_yticks(ys, [r["mechanism"] for r in audits])
        ax.set_xlabel("ε: audited lower bound (bars, 95% confidence) and claimed ε (dashed line)")
        claim_text = ", ".join(f"{c:g}" for c in claims)
        ax.set_title(f"Audit: does any mechanism leak more than its claimed ε = {claim_text}?")
        ax.grid(True, axis="x", alpha=0.3)
        from matplotlib.patches import Patch

        ax.legend(
            handles=[Patch(color="#2c7fb8", label="claim holds (bound below the claim)"),
                     Patch(color="#c0392b", label="claim refuted (bound above the claim)")],
            loc="upper right", fontsize="small",
        )  # fmt: skip
        figs.append(save_figure(fig, out_dir / "tour-audit.png"))
    noise = [r for r in records if r["part"] == "noise"]
    if noise:
        fig, axes = new_figure(1, 1, figsize=(8.5, 4.8))
        ax = axes[0, 0]
        draw_lines(ax, noise, x="steps", y="sigma", by="method", spread=None, logx=True, logy=True)
        ax.set_xlabel("number of composed Gaussian releases T")
        ax.set_ylabel("noise σ per release (query sensitivity 1)")
        ax.set_title("Noise each release needs so that all T together stay within the budget")
        ax.legend(title="calibration and accounting", fontsize="small", loc="upper left")
        figs.append(save_figure(fig, out_dir / "tour-noise.png"))
    return figs


def tables(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The audit table and the noise table."""
    audit_rows = [
        {
            "mechanism": r["mechanism"],
            "claimed ε": r["claimed_epsilon"],
            "δ": r["delta"],
            "audited ε ≥": round(r["audited_epsilon_lower"], 3),
            "claim refuted": r["refuted"],
        }
        for r in records
        if r["part"] == "audit"
    ]
    noise_rows = [
        {"T": r["steps"], "method": r["method"], "σ per release": round(r["sigma"], 3)}
        for r in records
        if r["part"] == "noise"
    ]
    return [("Privacy audit", audit_rows), ("Per-release noise for a total budget", noise_rows)]


register(
    Experiment(
        name="tour-mechanisms",
        description=(
            "Audited vs claimed ε for every mechanism (and two broken ones); noise needed by classic, "
            "strong-composition and tight (RDP/PLD) accounting for T Gaussian releases."
        ),
        seed_doc="dpopt itself (not from a paper)",
        run=run,
        configs={
            "quick": TourConfig(),
            "paper": TourConfig(
                n_runs=200_000, n_runs_selection=20_000, steps=(1, 3, 10, 30, 100, 300, 1000)
            ),
        },
        plot=plot,
        tables=tables,
        check=check,
    )
)
if "tour-mechanisms" not in TOUR:
    TOUR.append("tour-mechanisms")
