"""Shared base of the accountants: budgets, ledger entries, the :class:`Accountant` interface.

Re-exported by :mod:`dpopt.accounting.accountants`; see there.
"""

from __future__ import annotations

import copy
import math
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import singledispatch
from typing import Any, ClassVar

from dpopt._validation import check_budget_delta, check_int, check_positive, check_probability
from dpopt.accounting.events import (
    ComposedEvent,
    Neighbouring,
    PrivacyEvent,
    RepeatedEvent,
    check_neighbouring,
)
from dpopt.exceptions import (
    NON_PRIVATE_HINT,
    BudgetExceededError,
    InvalidParameterError,
    PrivacyClaimWarning,
)

_REL_TOL = 1e-9


class InfoNote(str):
    """A ledger note that is information (e.g. which bound an accountant fell back to), not a warning."""


#: Largest ε a :class:`Budget` accepts.  Far beyond any meaningful guarantee (e^ε overflows near
#: 710); larger values only appear by mistake, and the calibrations' arithmetic overflows on them.
MAX_EPSILON = 1e6


@dataclass(frozen=True)
class Budget:
    """A privacy budget (ε, δ).  0 < ε <= 1e6 (:data:`MAX_EPSILON`); 0 <= δ < 1 (δ >= 1/2 warns).

    Examples
    --------
    >>> print(Budget(1.0, 1e-5))
    (ε=1, δ=1e-05)
    >>> Budget(0.5).delta                  # pure ε-DP
    0.0
    """

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_positive(self.epsilon, "epsilon"))
        if self.epsilon > MAX_EPSILON:
            raise InvalidParameterError(
                f"must be at most {MAX_EPSILON:g} (larger values give no meaningful guarantee)",
                param="epsilon",
                hint=NON_PRIVATE_HINT,
            )
        object.__setattr__(self, "delta", check_budget_delta(self.delta))

    def __str__(self) -> str:
        return f"(ε={self.epsilon:g}, δ={self.delta:g})"


@dataclass(frozen=True)
class LedgerEntry:
    """One composed event: what, how many times, and a free-text label."""

    event: PrivacyEvent
    count: int
    label: str = ""


@dataclass(frozen=True)
class PrivacySpent:
    """What a ledger has spent.

    Attributes
    ----------
    epsilon, delta
        The guarantee computed by ``accountant`` (ε for the given δ).
    neighbouring
        The neighbouring relation the sensitivities were declared under.
    accountant
        Name of the accountant that produced the figure (``"basic"``, ``"advanced"``, ``"rdp"``,
        ``"pld"``).
    n_events
        Number of elementary releases composed.
    verified_epsilon
        For paper-rule accountants: ε at the same δ computed by the tight PLD accountant on the
        actual mechanisms (None when not computable).  If it exceeds ``epsilon`` the paper's claim
        is unsound and ``verified_epsilon`` is the true figure.
    notes
        Warnings recorded while composing (e.g. a lemma applied outside its preconditions).

    Examples
    --------
    >>> from dpopt.accounting import GaussianEvent, make_accountant
    >>> acct = make_accountant("pld", neighbouring="replace_one")
    >>> acct.compose(GaussianEvent(sigma=2.0, sensitivity=1.0), count=10)
    >>> spent = acct.spent(delta=1e-5)
    >>> print(spent)
    (ε=7.511, δ=1e-05)-DP [pld, replace_one]
    >>> spent.n_events, spent.sound
    (10, True)
    """

    epsilon: float
    delta: float
    neighbouring: Neighbouring
    accountant: str
    n_events: int
    verified_epsilon: float | None = None
    notes: tuple[str, ...] = ()

    @property
    def sound(self) -> bool:
        """False when the verified (tight) ε exceeds the claimed ε."""
        return self.verified_epsilon is None or self.verified_epsilon <= self.epsilon * (1 + 1e-6) + 1e-9

    @property
    def true_epsilon(self) -> float:
        """The figure that holds: the claimed ε, or the verified one when the claim is unsound."""
        if self.sound or self.verified_epsilon is None:
            return self.epsilon
        return self.verified_epsilon

    def __str__(self) -> str:
        s = f"(ε={self.epsilon:.4g}, δ={self.delta:.3g})-DP [{self.accountant}, {self.neighbouring}]"
        if not self.sound:
            s += f" — claim unsound, true ε={self.true_epsilon:.4g}"
        return s


@singledispatch
def _count_events(event: PrivacyEvent) -> int:
    """Number of elementary releases in ``event`` (dispatched on the event type)."""
    return 1


@_count_events.register(ComposedEvent)
def _(event: ComposedEvent) -> int:
    return sum(_count_events(e) for e in event.events)


@_count_events.register(RepeatedEvent)
def _(event: RepeatedEvent) -> int:
    return event.count * _count_events(event.event)


class Accountant(ABC):
    """Common interface of all accountants.

    Parameters
    ----------
    budget
        Optional budget; :meth:`compose` refuses events that would exceed it (at ``budget.delta``).
    neighbouring
        ``"add_remove"`` or ``"replace_one"``: the relation under which event sensitivities are
        declared and under which subsampling lemmas are applied.

    Examples
    --------
    An accountant with a budget refuses an event that would exceed it, before any noise is drawn:

    >>> from dpopt.accounting import LaplaceEvent, make_accountant
    >>> acct = make_accountant("basic", budget=Budget(1.0))
    >>> acct.compose(LaplaceEvent(scale=2.0), label="first count")        # ε = 0.5
    >>> acct.would_spend(LaplaceEvent(scale=1.0))                          # ask first
    1.5
    >>> acct.compose(LaplaceEvent(scale=1.0))
    Traceback (most recent call last):
    ...
    dpopt.exceptions.BudgetExceededError: composing this event would spend ε=1.5 ...
    >>> print(acct.spent())
    (ε=0.5, δ=0)-DP [basic, add_remove]
    """

    kind: ClassVar[str] = ""

    def __init__(self, *, budget: Budget | None = None, neighbouring: Neighbouring = "add_remove") -> None:
        if budget is not None and not isinstance(budget, Budget):
            raise InvalidParameterError("budget: expected a dpopt.accounting.Budget or None")
        self.budget = budget
        self.neighbouring: Neighbouring = check_neighbouring(neighbouring)
        self._ledger: list[LedgerEntry] = []
        self._notes: list[str] = []
        self._state: Any = self._empty_state()

    # --- to implement -----------------------------------------------------------------------------
    @abstractmethod
    def _empty_state(self) -> Any: ...

    @abstractmethod
    def _extend(self, state: Any, event: PrivacyEvent, count: int) -> tuple[Any, list[str]]:
        """Return the state after composing ``count`` copies of ``event`` (without mutating ``state``)
        and notes; raise UnsupportedEventError if the event cannot be analysed."""

    @abstractmethod
    def _epsilon(self, state: Any, delta: float) -> float: ...

    # --- public interface -------------------------------------------------------------------------
    @property
    def ledger(self) -> tuple[LedgerEntry, ...]:
        """The composed events, in order."""
        return tuple(self._ledger)

    @property
    def n_events(self) -> int:
        """Number of elementary releases composed so far."""
        return sum(e.count * _count_events(e.event) for e in self._ledger)

    def _check_event(self, event: PrivacyEvent, count: int) -> int:
        if not isinstance(event, PrivacyEvent):
            raise InvalidParameterError(
                f"event: expected a dpopt.accounting event (e.g. GaussianEvent), got {type(event).__name__}"
            )
        return check_int(count, "count", minimum=1)

    def would_spend(self, event: PrivacyEvent, count: int = 1, delta: float | None = None) -> float:
        """ε (at ``delta``, default the budget's δ) the ledger would spend after composing ``event``."""
        count = self._check_event(event, count)
        state, _ = self._extend(self._state, event, count)
        return self._epsilon(state, self._delta_or_budget(delta))

    def compose(self, event: PrivacyEvent, count: int = 1, *, label: str = "") -> None:
        """Check ``count`` copies of ``event`` against the budget, then record them.

        Raises
        ------
        BudgetExceededError
            If the budget would be exceeded; the accountant is left unchanged.
        UnsupportedEventError
            If this accountant cannot analyse the event (or a lemma's precondition fails).
        """
        count = self._check_event(event, count)
        state, notes = self._extend(self._state, event, count)
        if self.budget is not None:
            eps = self._epsilon(state, self.budget.delta)
            if not eps <= self.budget.epsilon * (1 + _REL_TOL) + 1e-12:
                raise BudgetExceededError.composing(eps, self.budget.epsilon, self.budget.delta, self.kind)
        for note in notes:
            if not isinstance(note, InfoNote):
                warnings.warn(note, PrivacyClaimWarning, stacklevel=2)
        self._state = state
        self._notes.extend(notes)
        self._ledger.append(LedgerEntry(event, count, label))

    def epsilon(self, delta: float | None = None) -> float:
        """ε spent so far at ``delta`` (default: the budget's δ, else 0).  0 for an empty ledger."""
        return self._epsilon(self._state, self._delta_or_budget(delta))

    def spent(self, delta: float | None = None) -> PrivacySpent:
        """A :class:`PrivacySpent` summary at ``delta`` (default: the budget's δ, else 0)."""
        d = self._delta_or_budget(delta)
        return PrivacySpent(
            epsilon=self._epsilon(self._state, d),
            delta=d,
            neighbouring=self.neighbouring,
            accountant=self.kind,
            n_events=self.n_events,
            verified_epsilon=self._verify(d),
            notes=tuple(self._notes),
        )

    def _verify(self, delta: float) -> float | None:
        return None

    def __deepcopy__(self, memo: dict[int, Any]) -> Accountant:
        # A ledger is shared, never duplicated: a deep copy (e.g. sklearn's ``clone`` of an estimator
        # holding it) would let two copies spend the same budget twice.  ``fresh()`` makes an empty one.
        return self

    def fresh(self) -> Accountant:
        """An empty accountant of the same kind and settings."""
        new = copy.copy(self)
        new._ledger, new._notes, new._state = [], [], self._empty_state()
        new.__dict__.pop("_verify_cache", None)  # cached verification belongs to the old ledger
        new.__dict__.pop("_rdp_cache", None)
        return new

    def _delta_or_budget(self, delta: float | None) -> float:
        if delta is None:
            return self.budget.delta if self.budget is not None else 0.0
        return check_probability(delta, "delta")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(budget={self.budget}, neighbouring={self.neighbouring!r}, events={self.n_events})"


def amplified_epsilon(epsilon: float, rate: float) -> float:
    """ln(1 + q(e^ε - 1)): amplification by subsampling (Poisson/add-remove, or fixed-size/replace-one)."""
    if math.isinf(epsilon):
        return math.inf
    if epsilon > 700:  # e^ε overflows: ln(q e^ε (1 - (1-q)e^-ε)) = ε + ln q + ln(1 - (1-q)e^-ε)
        return epsilon + math.log(rate) + math.log1p(-(1 - rate) * math.exp(-epsilon))
    return math.log1p(rate * math.expm1(epsilon))
