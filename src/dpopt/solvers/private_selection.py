"""Paid private selection between candidate private fits (one plan, one commit).

Where no public feature says which of two private methods will be more accurate (e.g. dense versus
sparse targets in least squares), :func:`private_selection` fits every candidate with a share of the
budget and releases only the fit whose training score is the smallest after Laplace noise
(report-noisy-min).  The whole procedure is one planned release:

1. each candidate's release is *planned* for its budget share without running it
   (:func:`dpopt.accounting.commit.plan_of`: the solver's own calibration, nothing drawn);
2. the plan -- the candidates' events and the selection's report-noisy-min event -- is composed by
   the PLD accountant; the shares are scaled up together to the largest factor whose composition
   still fits the budget (the candidates' Gaussian runs compose far below the sum of their ε);
3. that composed event is committed once (:func:`dpopt.accounting.commit`), into the run's own
   accountant and the caller's, before any noise is drawn;
4. the candidates then run inside :func:`dpopt.accounting.commit.prepaid`, which checks that each
   release is exactly the planned one and does not charge it again; finally the selection.

The score for least squares is :func:`clipped_squared_error`: the training sum of
``min((clip(x·θ, ±Y) - y)², τ²)`` with predictions clipped to the declared label bound Y and the
squared residual capped at τ² (τ <= 2Y public).  One record contributes a value in ``[0, τ²]`` to
every score, so the scores have sensitivity τ² under both relations, and under add/remove they all
move in the same direction (monotone: ε = τ²/b instead of 2τ²/b).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt.accounting import (
    Accountant,
    Budget,
    ComposedEvent,
    Neighbouring,
    PrivacySpent,
    check_neighbouring,
    commit,
    make_accountant,
)
from dpopt.accounting.commit import PlannedRelease, plan_of, prepaid
from dpopt.exceptions import BudgetExceededError, InvalidParameterError
from dpopt.mechanisms import ReportNoisyMin
from dpopt.randomness import RNGLike, spawn
from dpopt.solvers._result import OptimizeResult

__all__ = [
    "Candidate",
    "SelectionPlan",
    "clipped_squared_error",
    "plan_selection",
    "private_selection",
    "squared_error_sensitivity",
]

#: Largest factor by which the budget shares are scaled up after PLD composition.
MAX_SHARE_SCALE = 4.0
#: Bisection steps on the share scale (each plans every candidate once; planning draws nothing).
SCALE_BISECTION_STEPS = 8


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One candidate of a private selection.

    Attributes
    ----------
    name : str
        Reported in the result (``parameters["selected"]``).
    run : callable
        ``run(budget, rng) -> OptimizeResult``: a private fit spending ``budget`` (it must commit
        its release through :func:`dpopt.accounting.commit` with ``accountant=None``, as every
        dpopt solver does).  It is called once for planning (stopped at its commit, nothing drawn)
        per bisection step and once for real.
    share : float
        Fraction of ε given to this candidate before the common scale-up.
    delta_share : float
        Fraction of δ this candidate's own calibration targets.
    """

    name: str
    run: Callable[[Budget, RNGLike], OptimizeResult]
    share: float
    delta_share: float


@dataclasses.dataclass(frozen=True)
class SelectionPlan:
    """The planned releases of a selection, composed and checked before anything runs."""

    budgets: tuple[Budget, ...]
    releases: tuple[PlannedRelease, ...]
    selection: ReportNoisyMin
    event: ComposedEvent
    share_scale: float
    neighbouring: Neighbouring

    @property
    def selection_epsilon(self) -> float:
        """The selection's own (pure) ε."""
        return float(self.selection.epsilon)


def clipped_squared_error(
    predictions: NDArray[np.float64], y: NDArray[np.float64], label_bound: float, residual_clip: float
) -> float:
    """Σᵢ min((clip(predᵢ, ±Y) - yᵢ)², τ'²) with τ' = min(τ, 2Y): every term lies in [0, τ'²]
    whatever the data (:func:`squared_error_sensitivity`)."""
    p = np.clip(np.asarray(predictions, dtype=float), -label_bound, label_bound)
    tau = min(float(residual_clip), 2.0 * float(label_bound))
    r = np.minimum(np.abs(p - np.asarray(y, dtype=float)), tau)
    return float(np.sum(r * r))


def squared_error_sensitivity(label_bound: float, residual_clip: float) -> float:
    """τ'² with τ' = min(τ, 2Y): the most one record moves :func:`clipped_squared_error`.

    Under replace-one a record's term changes from one value in [0, τ'²] to another; under add/remove
    it appears or disappears.  Either way every score moves by at most τ'².
    """
    if not (label_bound > 0 and residual_clip > 0):
        raise InvalidParameterError("label_bound and residual_clip must be positive")
    tau = min(float(residual_clip), 2.0 * float(label_bound))
    return tau * tau


def _selection(epsilon: float, sensitivity: float, neighbouring: Neighbouring) -> ReportNoisyMin:
    # add/remove: a record adds (or removes) a non-negative term to every score -> monotone scores
    return ReportNoisyMin.calibrate(epsilon, sensitivity, monotone=neighbouring == "add_remove")


def _composed(releases: Sequence[PlannedRelease], selection: ReportNoisyMin) -> ComposedEvent:
    return ComposedEvent((*(r.event for r in releases), selection.event))


def _fits(event: ComposedEvent, budget: Budget, neighbouring: Neighbouring) -> bool:
    acct = make_accountant("pld", budget=budget, neighbouring=neighbouring)
    try:
        acct.compose(event)
    except BudgetExceededError:
        return False
    return True


def _plan_candidate(candidate: Candidate, budget: Budget) -> PlannedRelease:
    return plan_of(lambda: candidate.run(budget, 0))


def plan_selection(
    candidates: Sequence[Candidate],
    budget: Budget,
    *,
    score_sensitivity: float,
    neighbouring: Neighbouring,
    selection_share: float,
) -> SelectionPlan:
    """Plan every candidate and the selection; scale the shares to the largest that fits ``budget``.

    With shares summing to at most 1 (and δ shares too) the plan fits by basic composition; the
    PLD accountant's composition is tighter, so the shares are multiplied by the largest factor
    ``s`` (bisection, at most :data:`MAX_SHARE_SCALE`) for which the composed event still fits.
    Nothing is drawn and nothing is charged.
    """
    rel = check_neighbouring(neighbouring)
    if not candidates:
        raise InvalidParameterError("candidates: at least one candidate is needed")
    shares = [c.share for c in candidates]
    dshares = [c.delta_share for c in candidates]
    if not all(s > 0 for s in shares) or not 0 < selection_share < 1:
        raise InvalidParameterError("shares: every share must be positive and the selection's in (0, 1)")
    if (
        sum(shares) + selection_share > 1 + 1e-12
        or not all(d >= 0 for d in dshares)
        or sum(dshares) > 1 + 1e-12
    ):
        raise InvalidParameterError(
            "shares: the ε shares (with the selection's) and the δ shares must sum to <= 1"
        )
    if budget.delta <= 0 and any(d > 0 for d in dshares):
        raise InvalidParameterError("delta_share: the budget has δ = 0")
    sens = float(score_sensitivity)
    if not (sens > 0 and math.isfinite(sens)):
        raise InvalidParameterError("score_sensitivity: expected a positive finite number")

    def build(scale: float) -> SelectionPlan:
        budgets = tuple(
            Budget(scale * c.share * budget.epsilon, c.delta_share * budget.delta) for c in candidates
        )
        releases = tuple(_plan_candidate(c, b) for c, b in zip(candidates, budgets, strict=True))
        sel = _selection(scale * selection_share * budget.epsilon, sens, rel)
        return SelectionPlan(budgets, releases, sel, _composed(releases, sel), scale, rel)

    best = build(1.0)
    if not _fits(best.event, budget, rel):  # pragma: no cover - basic composition guarantees it
        raise BudgetExceededError("private selection: the planned candidates do not fit the budget")
    hi = min(MAX_SHARE_SCALE, 1.0 / max(*shares, selection_share))
    lo = 1.0
    for _ in range(SCALE_BISECTION_STEPS):
        if hi - lo <= 1e-3:
            break
        mid = math.sqrt(lo * hi) if lo > 0 else hi / 2
        trial = build(mid)
        if _fits(trial.event, budget, rel):
            best, lo = trial, mid
        else:
            hi = mid
    return best


def private_selection(
    candidates: Sequence[Candidate],
    score: Callable[[OptimizeResult], float],
    *,
    budget: Budget,
    score_sensitivity: float,
    neighbouring: Neighbouring,
    rng: RNGLike,
    accountant: Accountant | None = None,
    selection_share: float = 0.1,
    label: str = "private-selection",
) -> OptimizeResult:
    """Fit every candidate privately and release the one with the smallest noisy score.

    Parameters
    ----------
    candidates : sequence of Candidate
        The private fits and their shares of ε and δ.
    score : callable
        ``score(result) -> float`` on the private data (e.g. :func:`clipped_squared_error` of the
        candidate's training predictions).  Its sensitivity must be ``score_sensitivity``.
    budget : Budget
        Total (ε, δ) of the whole procedure.
    score_sensitivity : float
        The most one record moves a score (from declared bounds only, e.g.
        :func:`squared_error_sensitivity`).
    neighbouring : {"replace_one", "add_remove"}
        The relation of every candidate's analysis and of the selection.
    rng : int, Generator, "secure" or None
        Randomness; each candidate and the selection get their own child stream.
    accountant : Accountant, optional
        The caller's ledger; receives the single composed plan.
    selection_share : float, default 0.1
        Fraction of ε for the selection (before the common scale-up).
    label : str
        Ledger label.

    Returns
    -------
    OptimizeResult
        The selected candidate's result with ``privacy`` the whole procedure's spend, ``method``
        ``"select(<names>)"`` and ``parameters["selected"]`` the chosen candidate's name (plus its
        own parameters, the candidates' budgets and the selection's noise scale).  The other
        candidates' fits are not released.

    Privacy
    -------
    (ε, δ)-DP under ``neighbouring`` for ``budget``: the released index and model are a
    post-processing of the candidates' releases (each the solver's own mechanism at its planned
    budget) and one report-noisy-min over scores of sensitivity ``score_sensitivity`` (Laplace
    scale ``2Δ/ε_sel``, ``Δ/ε_sel`` for monotone scores under add/remove).  The composition of all
    of them (adaptive: the scores depend on the candidates) is certified by the PLD accountant and
    committed once, before any noise is drawn; each candidate's run is then checked to release
    exactly its planned event.  Shares, the scale-up and the sensitivity use public quantities only.
    """
    rel = check_neighbouring(neighbouring)
    if not isinstance(budget, Budget):
        raise InvalidParameterError("budget: expected a dpopt.accounting.Budget")
    plan = plan_selection(
        candidates,
        budget,
        score_sensitivity=score_sensitivity,
        neighbouring=rel,
        selection_share=selection_share,
    )
    spent: PrivacySpent = commit(
        plan.event, budget=budget, neighbouring=rel, kind="pld", accountant=accountant, label=label
    )
    gens = spawn(rng, [*(f"candidate:{c.name}" for c in candidates), "selection"])
    sel_release = PlannedRelease(plan.selection.event, None, None, "")
    with prepaid([*plan.releases, sel_release]):
        results = [c.run(b, g) for c, b, g in zip(candidates, plan.budgets, gens[:-1], strict=True)]
        scores = np.array([score(r) for r in results], dtype=float)
        index = plan.selection.release(scores, rng=gens[-1])
    chosen = results[index]
    names = tuple(c.name for c in candidates)
    params: dict[str, Any] = dict(chosen.parameters)
    params.update(
        selected=names[index],
        candidates=names,
        candidate_budgets=tuple((b.epsilon, b.delta) for b in plan.budgets),
        share_scale=plan.share_scale,
        selection_epsilon=plan.selection_epsilon,
        selection_noise_scale=plan.selection.scale,
        score_sensitivity=float(score_sensitivity),
    )
    return dataclasses.replace(
        chosen,
        privacy=spent,
        method=f"select({','.join(names)})",
        parameters=params,
        message=f"private selection chose {names[index]!r}: {chosen.message}",
    )
