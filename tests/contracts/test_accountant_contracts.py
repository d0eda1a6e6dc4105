"""Contract suite for every accountant kind in ``available_accountants()`` (issue 11 §5).

For each kind and each neighbouring relation: one Laplace release is accounted soundly (never below
the exact hockey-stick ε(δ) of the Laplace mechanism) and not absurdly loosely; composition is
monotone and within basic composition; ``would_spend`` predicts ``compose``; a release over the
budget is refused and leaves the ledger unchanged; ``fresh`` gives an empty ledger of the same kind;
a deep copy shares the ledger (a budget is never duplicated).  A new kind registered in
``make_accountant`` is covered without editing this file.
"""

from __future__ import annotations

import copy
import math

import pytest

from dpopt.accounting import Budget, LaplaceEvent, make_accountant
from dpopt.accounting.accountants import available_accountants
from dpopt.exceptions import BudgetExceededError

KINDS = available_accountants()
RELATIONS = ("add_remove", "replace_one")
DELTA = 1e-5


def _laplace_exact_epsilon(eps0: float, delta: float) -> float:
    """Exact ε(δ) of one Laplace release with Δ/b = ε0: δ(ε) = 1 - exp((ε - ε0)/2) for ε <= ε0."""
    return max(0.0, eps0 + 2 * math.log1p(-delta))


@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_single_laplace_release_sound_and_tight(kind: str, relation: str) -> None:
    acct = make_accountant(kind, neighbouring=relation)
    assert acct.n_events == 0 and acct.epsilon(DELTA) == 0
    acct.compose(LaplaceEvent(scale=2.0, sensitivity=1.0))  # ε0 = 0.5
    eps = acct.epsilon(DELTA)
    assert eps >= _laplace_exact_epsilon(0.5, DELTA) - 1e-9  # sound
    assert eps <= 0.5 * 1.02  # and a single pure-DP release costs about its ε0
    spent = acct.spent(DELTA)
    assert spent.neighbouring == relation and spent.n_events == 1
    assert spent.epsilon == pytest.approx(eps)


@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_composition_monotone_within_basic_composition(kind: str, relation: str) -> None:
    acct = make_accountant(kind, neighbouring=relation)
    ev = LaplaceEvent(scale=4.0, sensitivity=1.0)  # ε0 = 0.25
    previous = 0.0
    for k in range(1, 6):
        predicted = acct.would_spend(ev, delta=DELTA)
        acct.compose(ev, label=f"release {k}")
        eps = acct.epsilon(DELTA)
        assert eps == pytest.approx(predicted, rel=1e-9, abs=1e-12)
        assert previous - 1e-9 <= eps <= 0.25 * k * 1.02
        previous = eps
    assert acct.n_events == 5 and len(acct.ledger) == 5
    assert acct.ledger[-1].label == "release 5"


@pytest.mark.parametrize("kind", KINDS)
def test_over_budget_refused_and_ledger_unchanged(kind: str) -> None:
    acct = make_accountant(kind, budget=Budget(1.0, DELTA), neighbouring="replace_one")
    acct.compose(LaplaceEvent(scale=1.5))  # ε ≈ 0.67
    before = (acct.n_events, acct.epsilon(), acct.ledger)
    with pytest.raises(BudgetExceededError):
        acct.compose(LaplaceEvent(scale=1.5))  # would spend ≈ 1.33 > 1
    assert (acct.n_events, acct.epsilon(), acct.ledger) == before
    acct.compose(LaplaceEvent(scale=10.0))  # ε 0.1 still fits
    assert acct.n_events == 2


@pytest.mark.parametrize("kind", KINDS)
def test_fresh_and_deepcopy(kind: str) -> None:
    acct = make_accountant(kind, budget=Budget(2.0, DELTA), neighbouring="replace_one")
    acct.compose(LaplaceEvent(scale=1.0))
    new = acct.fresh()
    assert type(new) is type(acct) and new.n_events == 0 and new.budget == acct.budget
    assert new.neighbouring == acct.neighbouring and acct.n_events == 1
    assert copy.deepcopy(acct) is acct  # a ledger is shared, never duplicated
