"""Privacy accountants: one interface, paper-rule and tight implementations.

Every accountant composes events in two phases: it first computes what the ledger would spend with
the new event, refuses with :class:`~dpopt.exceptions.BudgetExceededError` (state unchanged) if that
exceeds its budget, and only then records the event.  Callers compose *before* drawing noise.

Paper-rule accountants (``"basic"``, ``"advanced"``) reproduce the arithmetic of the seed documents
(sequential composition, Dwork-Rothblum-Vadhan strong composition, amplification-by-subsampling
lemmas with their preconditions checked).  Tight accountants (``"rdp"``, ``"pld"``) analyse the same
events with Rényi DP or privacy-loss distributions through Google's ``dp-accounting``; that library
is wrapped here and not exposed to the rest of dpopt.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import warnings
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from dpopt._validation import check_budget_delta, check_int, check_positive, check_probability
from dpopt.accounting._dpa import dp_accounting, pld_common, pld_lib  # imported on first use
from dpopt.accounting._dpa import rdp as _dpa_rdp
from dpopt.accounting.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    GaussianEvent,
    LaplaceEvent,
    Neighbouring,
    NonPrivateEvent,
    PoissonSampledEvent,
    PrivacyEvent,
    RepeatedEvent,
    SampledWithoutReplacementEvent,
    check_neighbouring,
)
from dpopt.exceptions import (
    NON_PRIVATE_HINT,
    BudgetExceededError,
    InvalidParameterError,
    PrivacyClaimWarning,
    UnsupportedEventError,
)

__all__ = [
    "Accountant",
    "AdvancedCompositionAccountant",
    "BasicAccountant",
    "Budget",
    "LedgerEntry",
    "PldAccountant",
    "PrivacySpent",
    "RdpAccountant",
    "available_accountants",
    "make_accountant",
]

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
    >>> from dpopt.accounting import GaussianEvent
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


def _count_events(event: PrivacyEvent) -> int:
    if isinstance(event, ComposedEvent):
        return sum(_count_events(e) for e in event.events)
    if isinstance(event, RepeatedEvent):
        return event.count * _count_events(event.event)
    return 1


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

    >>> from dpopt.accounting import LaplaceEvent
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


# ------------------------------------------------------------------------------------------------
# Paper-rule accountants
# ------------------------------------------------------------------------------------------------

SubsamplingRule = Literal["tight", "bst14", "thesis"]


def amplified_epsilon(epsilon: float, rate: float) -> float:
    """ln(1 + q(e^ε - 1)): amplification by subsampling (Poisson/add-remove, or fixed-size/replace-one)."""
    if math.isinf(epsilon):
        return math.inf
    if epsilon > 700:  # e^ε overflows: ln(q e^ε (1 - (1-q)e^-ε)) = ε + ln q + ln(1 - (1-q)e^-ε)
        return epsilon + math.log(rate) + math.log1p(-(1 - rate) * math.exp(-epsilon))
    return math.log1p(rate * math.expm1(epsilon))


class _PaperAccountant(Accountant):
    """State: Counter of (ε_i, δ_i) -> multiplicity."""

    def __init__(
        self,
        *,
        budget: Budget | None = None,
        neighbouring: Neighbouring = "add_remove",
        subsampling_rule: SubsamplingRule = "tight",
        on_precondition_failure: Literal["raise", "true"] = "raise",
        verify: bool = True,
    ) -> None:
        if subsampling_rule not in ("tight", "bst14", "thesis"):
            raise InvalidParameterError("subsampling_rule: must be 'tight', 'bst14' or 'thesis'")
        if on_precondition_failure not in ("raise", "true"):
            raise InvalidParameterError("on_precondition_failure: must be 'raise' or 'true'")
        self.subsampling_rule: SubsamplingRule = subsampling_rule
        self.on_precondition_failure = on_precondition_failure
        self.verify = verify
        super().__init__(budget=budget, neighbouring=neighbouring)

    def _empty_state(self) -> Counter[tuple[float, float]]:
        return Counter()

    def _pairs(self, event: PrivacyEvent, notes: list[str]) -> Counter[tuple[float, float]]:
        if isinstance(event, ComposedEvent):
            total: Counter[tuple[float, float]] = Counter()
            for e in event.events:
                total.update(self._pairs(e, notes))
            return total
        if isinstance(event, RepeatedEvent):
            inner = self._pairs(event.event, notes)
            return Counter({k: v * event.count for k, v in inner.items()})
        if isinstance(event, EpsilonDeltaEvent):
            return Counter({(event.epsilon, event.delta): 1})
        if isinstance(event, GaussianEvent):
            raise UnsupportedEventError(
                "paper-rule accountants need an (ε, δ) claim for a Gaussian release: calibrate it with "
                "dpopt.accounting.gaussian_event(...) (which records the claim), or use the 'pld' or "
                "'rdp' accountant"
            )
        if isinstance(event, PoissonSampledEvent | SampledWithoutReplacementEvent):
            return self._sampled_pairs(event, notes)
        eps = event.pure_epsilon()
        if eps is None:
            raise UnsupportedEventError(
                f"{type(event).__name__} is not supported by the {self.kind} accountant"
            )
        return Counter({(eps, 0.0): 1})

    def _sampled_pairs(
        self, event: PoissonSampledEvent | SampledWithoutReplacementEvent, notes: list[str]
    ) -> Counter[tuple[float, float]]:
        inner = self._pairs(event.event, notes)
        if len(inner) != 1 or next(iter(inner.values())) != 1:
            raise UnsupportedEventError(
                "paper-rule subsampling lemmas apply to one elementary release; wrap each step separately"
            )
        (eps0, delta0) = next(iter(inner))
        q = event.rate
        if isinstance(event, PoissonSampledEvent):
            if self.neighbouring != "add_remove":
                raise UnsupportedEventError(
                    "Poisson subsampling amplification is stated for add_remove neighbours; use "
                    "SampledWithoutReplacementEvent for replace_one, or an add_remove accountant"
                )
            return Counter({(amplified_epsilon(eps0, q), q * delta0): 1})
        if self.neighbouring != "replace_one":
            raise UnsupportedEventError(
                "fixed-size sampling without replacement is analysed under replace_one neighbours (n public); "
                "create the accountant with neighbouring='replace_one'"
            )
        rule = self.subsampling_rule
        if rule == "bst14" and eps0 > 1:
            msg = (
                f"the 2(m/n)ε amplification lemma (Bassily-Smith-Thakurta 2014) requires the per-step ε0 <= 1, "
                f"but ε0 = {eps0:.4g}; the tight rule ln(1 + (m/n)(e^ε0 - 1)) was used instead"
            )
            if self.on_precondition_failure == "raise":
                raise UnsupportedEventError(msg.replace("; the tight", ". Use the tight") + " rule")
            notes.append(msg)
            rule = "tight"
        if rule == "bst14":
            eps = 2 * q * eps0
        elif rule == "thesis":
            eps = 2 * math.expm1(eps0) * q if eps0 < 700 else math.inf
        else:
            eps = amplified_epsilon(eps0, q)
        return Counter({(eps, q * delta0): 1})

    def _extend(self, state: Any, event: PrivacyEvent, count: int) -> tuple[Any, list[str]]:
        notes: list[str] = []
        pairs = self._pairs(event, notes)
        new = Counter(state)
        for k, v in pairs.items():
            new[k] += v * count
        return new, notes

    @staticmethod
    def _basic(state: Counter[tuple[float, float]], delta: float) -> float:
        if not state:
            return 0.0
        total_delta = sum(d * c for (_, d), c in state.items())
        if total_delta > delta * (1 + 1e-12):
            return math.inf
        return float(sum(e * c for (e, _), c in state.items()))

    def _verify(self, delta: float) -> float | None:
        if not self.verify:
            return None
        key = (len(self._ledger), delta)
        cached = getattr(self, "_verify_cache", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        value = self._verify_uncached(delta)
        self._verify_cache = (key, value)
        return value

    def _verify_uncached(self, delta: float) -> float | None:
        # Composition commutes: group identical entries so each distinct event is self-composed once.
        shadow = PldAccountant(neighbouring=self.neighbouring)
        try:
            for (event, count), mult in Counter((e.event, e.count) for e in self._ledger).items():
                shadow._state, _ = shadow._extend(shadow._state, event, count * mult)
        except UnsupportedEventError:
            return None
        return shadow._epsilon(shadow._state, delta)


class BasicAccountant(_PaperAccountant):
    """Sequential (basic) composition: ε = Σε_i, δ = Σδ_i.

    Subsampled events use the lemma selected by ``subsampling_rule``: ``"tight"``
    (ln(1 + q(e^ε0 - 1)), Balle-Barthe-Gaboardi 2018), ``"bst14"`` (2qε0, requires ε0 <= 1) or
    ``"thesis"`` (2(e^ε0 - 1)q).  When a precondition fails, ``on_precondition_failure="raise"``
    refuses and ``"true"`` records the valid tight figure with a :class:`PrivacyClaimWarning`.
    """

    kind = "basic"

    def _epsilon(self, state: Any, delta: float) -> float:
        return self._basic(state, delta)


class AdvancedCompositionAccountant(_PaperAccountant):
    """Strong composition (Dwork-Rothblum-Vadhan 2010, heterogeneous form).

    For a target δ >= Σδ_i, with slack δ' = δ - Σδ_i > 0,
    ε = sqrt(2 ln(1/δ') Σε_i²) + Σ ε_i (e^{ε_i} - 1); the reported ε is the smaller of this and the
    basic-composition ε (both valid).  For k identical (ε0, δ0) steps this is the familiar
    ε0 sqrt(2k ln(1/δ')) + k ε0 (e^{ε0} - 1).
    """

    kind = "advanced"

    def _epsilon(self, state: Any, delta: float) -> float:
        basic = self._basic(state, delta)
        if not state:
            return 0.0
        total_delta = sum(d * c for (_, d), c in state.items())
        slack = delta - total_delta
        if slack <= 0:
            return basic
        sq = sum(e * e * c for (e, _), c in state.items())
        if any(e > 700 for (e, _) in state):
            return basic  # e^ε overflows: the strong-composition term is infinite
        lin = sum(e * math.expm1(e) * c for (e, _), c in state.items())
        adv = math.sqrt(2 * math.log(1 / slack) * sq) + lin
        return min(basic, adv)


# ------------------------------------------------------------------------------------------------
# Tight accountants (wrapping dp-accounting)
# ------------------------------------------------------------------------------------------------


def _pure_or_claim(event: PrivacyEvent) -> tuple[float, float] | None:
    if isinstance(event, EpsilonDeltaEvent) and event.source is None:
        return (event.epsilon, event.delta)
    eps = event.pure_epsilon()
    return None if eps is None else (eps, 0.0)


class PldAccountant(Accountant):
    """Privacy-loss-distribution accountant (dp-accounting's PLD, pessimistic discretisation).

    Supports Laplace and Gaussian releases (optionally Poisson-subsampled), any pure or (ε, δ) event
    through its worst-case PLD, fixed-size subsampling of pure/(ε, δ) events through the tight
    amplification lemma, and compositions.  ``EpsilonDeltaEvent`` with a ``source`` is analysed
    through the source (the actual mechanism).

    Bounded cost: before building a PLD the accountant estimates its size (grid points to
    discretise, support of the composition).  Beyond :data:`PLD_MAX_POINTS` /
    :data:`PLD_MAX_SUPPORT`, or when the pessimistic rounding of many releases would exceed
    :data:`PLD_MAX_ROUNDING` in ε, it uses, in order: the exact closed form of composed Gaussians
    (all releases unsampled Gaussian), a discretisation coarsened in powers of two up to
    :data:`PLD_MAX_DISCRETIZATION` (still pessimistic), the RDP bound, basic composition of pure ε;
    each is a valid upper bound, and the choice is recorded in ``spent().notes`` (as
    :class:`InfoNote`, not warned).  If none applies the event is refused with
    :class:`~dpopt.exceptions.UnsupportedEventError`.  Below δ = :data:`PLD_MIN_DELTA` (beyond the
    PLD's tail truncation) the smaller of the PLD's ε and the closed form / RDP bound is reported.
    Noise-to-sensitivity ratios above 1e100 are analysed as 1e100 (less noise, so sound).
    """

    kind = "pld"

    def __init__(
        self,
        *,
        budget: Budget | None = None,
        neighbouring: Neighbouring = "add_remove",
        discretization: float = 1e-4,
    ) -> None:
        self.discretization = check_positive(discretization, "discretization")
        super().__init__(budget=budget, neighbouring=neighbouring)

    def _relation(self) -> Any:
        rel = dp_accounting.NeighboringRelation
        return rel.ADD_OR_REMOVE_ONE if self.neighbouring == "add_remove" else rel.REPLACE_ONE

    def _from_params(self, eps: float, delta: float, vdi: float) -> Any:
        if math.isinf(eps) or delta >= 1:
            return "inf"
        params = pld_common.DifferentialPrivacyParameters(eps, delta)
        return pld_lib.from_privacy_parameters(params, value_discretization_interval=vdi)

    def _pld(self, event: PrivacyEvent, vdi: float | None = None) -> Any:
        # mechanisms are passed as (noise / sensitivity, 1): the PLD depends on the ratio only, and
        # dp-accounting squares σ and Δ separately (overflow at σ ~ 1e155)
        vdi = self.discretization if vdi is None else vdi
        if isinstance(event, NonPrivateEvent):
            return "inf"
        if isinstance(event, EpsilonDeltaEvent) and event.source is not None:
            return self._pld(event.source, vdi)
        if isinstance(event, LaplaceEvent):
            return pld_lib.from_laplace_mechanism(
                _ratio(event.scale, event.sensitivity), 1.0, value_discretization_interval=vdi
            )
        if isinstance(event, GaussianEvent):
            return pld_lib.from_gaussian_mechanism(
                _ratio(event.sigma, event.sensitivity), 1.0, value_discretization_interval=vdi
            )
        if isinstance(event, ComposedEvent):
            out: Any = None
            for e in event.events:
                out = _compose_pld(out, self._pld(e, vdi))
            return out
        if isinstance(event, RepeatedEvent):
            inner = self._pld(event.event, vdi)
            return inner if isinstance(inner, str) or inner is None else _self_compose(inner, event.count)
        if isinstance(event, PoissonSampledEvent):
            inner_event = event.event
            if self.neighbouring != "add_remove" and isinstance(inner_event, GaussianEvent):
                # replace-one with n public: the replaced record contributes a or b (‖a - b‖ <= Δ) to
                # the sum; dp-accounting's REPLACE pair is q·N(∓Δ/2) + (1-q)·N(0)
                return pld_lib.from_gaussian_mechanism(
                    _ratio(inner_event.sigma, inner_event.sensitivity / 2),
                    1.0,
                    value_discretization_interval=vdi,
                    sampling_prob=event.rate,
                    neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
                )
            if self.neighbouring != "add_remove":
                raise UnsupportedEventError(
                    "Poisson subsampling of this event is analysed under add_remove neighbours; create the "
                    "accountant with neighbouring='add_remove'"
                )
            if isinstance(inner_event, GaussianEvent):
                return pld_lib.from_gaussian_mechanism(
                    _ratio(inner_event.sigma, inner_event.sensitivity),
                    1.0,
                    value_discretization_interval=vdi,
                    sampling_prob=event.rate,
                )
            if isinstance(inner_event, LaplaceEvent):
                return pld_lib.from_laplace_mechanism(
                    _ratio(inner_event.scale, inner_event.sensitivity),
                    1.0,
                    value_discretization_interval=vdi,
                    sampling_prob=event.rate,
                )
            claim = _pure_or_claim(inner_event)
            if claim is None:
                raise UnsupportedEventError(
                    f"Poisson subsampling of {type(inner_event).__name__} is not supported by the PLD accountant"
                )
            return self._from_params(amplified_epsilon(claim[0], event.rate), event.rate * claim[1], vdi)
        if isinstance(event, SampledWithoutReplacementEvent):
            if self.neighbouring != "replace_one":
                raise UnsupportedEventError(
                    "fixed-size sampling without replacement is analysed under replace_one neighbours; "
                    "create the accountant with neighbouring='replace_one'"
                )
            claim = _pure_or_claim(event.event)
            if claim is None:
                raise UnsupportedEventError(
                    f"fixed-size subsampling of {type(event.event).__name__} is not supported by the PLD "
                    "accountant; use the 'rdp' accountant (Gaussian) or Poisson sampling"
                )
            return self._from_params(amplified_epsilon(claim[0], event.rate), event.rate * claim[1], vdi)
        claim = _pure_or_claim(event)
        if claim is None:
            raise UnsupportedEventError(f"{type(event).__name__} is not supported by the PLD accountant")
        return self._from_params(*claim, vdi)

    def _empty_state(self) -> _PldState:
        return _PldState(None, 0.0, self.discretization, (), None)

    def _extend(self, state: Any, event: PrivacyEvent, count: int) -> tuple[Any, list[str]]:
        st: _PldState = state
        step = RepeatedEvent(event, count) if count > 1 else event
        eps = _pure_epsilon_of(event)
        new_pure = None if st.pure is None or eps is None else st.pure + count * eps
        events = (*st.events, step)
        kind, vdi, why = self._plan(events, st.vdi)
        if kind == "pld":
            try:
                if st.fallback is None and vdi == st.vdi:
                    pld = _compose_pld(st.pld, self._pld(step, vdi))  # incremental
                else:
                    pld = None
                    for e in events:
                        pld = _compose_pld(pld, self._pld(e, vdi))
            except (ArithmeticError, ValueError, MemoryError):  # dp-accounting overflows at extreme σ/Δ
                kind, vdi, why = self._plan(events, st.vdi, numeric_failure=True)
            else:
                notes: list[str] = []
                if vdi > st.vdi:
                    notes.append(
                        InfoNote(
                            f"PLD accountant: discretisation coarsened from {st.vdi:g} to {vdi:g} to bound "
                            f"memory and time ({why}); the bound stays valid"
                        )
                    )
                return _PldState(pld, new_pure, vdi, events, None), notes
        self._check_fallback(kind, events, new_pure, why)
        notes = []
        if kind != st.fallback:
            what = {
                "gaussian": "its releases are all unsampled Gaussian, so the exact closed form of composed "
                "Gaussians was used (tighter than the discretised PLD)",
                "rdp": "the Rényi-DP bound was used instead (looser, still valid)",
                "pure": "basic composition of the pure ε was used instead (looser, still valid)",
            }[kind]
            notes.append(InfoNote(f"PLD accountant: {why}; {what}"))
        return _PldState(None, new_pure, st.vdi, events, kind), notes

    def _plan(
        self, events: tuple[PrivacyEvent, ...], vdi: float, *, numeric_failure: bool = False
    ) -> tuple[str, float, str]:
        """How to analyse ``events``: ("pld", discretisation, why) or a fallback ("gaussian", "rdp",
        "pure") with the reason the PLD was not used."""
        costs = [_pld_cost(e) for e in events]
        # estimated points at the base discretisation relative to the caps (> 1: too large)
        load = max(
            sum(c[0] for c in costs) / self.discretization / PLD_MAX_POINTS,
            sum(c[1] for c in costs) / self.discretization / PLD_MAX_SUPPORT,
        )
        # The pessimistic rounding can add up to one discretisation step per composed release: past
        # PLD_MAX_ROUNDING (in ε) the exact Gaussian closed form or the RDP bound is preferred.
        n_releases = sum(_count_events(e) for e in events)
        rounding = n_releases * vdi > PLD_MAX_ROUNDING
        gaussian_only = all(_gaussian_multiplier_sq(e) is not None for e in events)
        if numeric_failure:
            why, load = "dp-accounting's PLD construction overflows at these parameters", math.inf
        elif load > 1:
            why = f"its PLD would need ~{load:.3g} times the supported size at discretisation {self.discretization:g}"
        else:
            why = f"{n_releases} releases, each rounded up by up to {vdi:g} in ε"
        if load <= 1 and not rounding:
            return "pld", vdi, why
        if gaussian_only:
            return "gaussian", vdi, why
        coarse = math.inf
        if math.isfinite(load):
            coarse = max(vdi, self.discretization * 2.0 ** math.ceil(math.log2(max(load, 1.0))))
        usable = coarse <= PLD_MAX_DISCRETIZATION
        if usable and n_releases * coarse <= PLD_MAX_ROUNDING:
            return "pld", coarse, why
        if self._rdp_supports(events):
            return "rdp", vdi, why
        if usable:  # valid, if loose: nothing better applies
            return "pld", coarse, why
        return "pure", vdi, why

    def _rdp_state(self, events: tuple[PrivacyEvent, ...]) -> Any:
        """The RDP ledger of ``events`` (None if RDP cannot analyse them); the last one is cached."""
        cached = self.__dict__.get("_rdp_cache")
        if cached is not None and cached[0] == events:
            return cached[1]
        rdp = RdpAccountant(neighbouring=self.neighbouring)
        try:
            state: Any = rdp._extend(rdp._empty_state(), ComposedEvent(events), 1)[0]
        except UnsupportedEventError:
            state = None
        self._rdp_cache = (events, state)
        return state

    def _rdp_supports(self, events: tuple[PrivacyEvent, ...]) -> bool:
        return self._rdp_state(events) is not None

    def _check_fallback(
        self, fallback: str, events: tuple[PrivacyEvent, ...], pure: float | None, points: str = ""
    ) -> None:
        ok = {
            "gaussian": lambda: all(_gaussian_multiplier_sq(e) is not None for e in events),
            "rdp": lambda: self._rdp_supports(events),
            "pure": lambda: pure is not None,
        }[fallback]()
        if not ok:
            raise UnsupportedEventError(
                "the PLD accountant cannot analyse this ledger in bounded memory and time"
                + (f" ({points})" if points else "")
                + ", and neither the Rényi-DP nor a pure-ε bound applies to it; use more noise (a larger "
                "σ or Laplace scale relative to the sensitivity) or fewer releases"
            )

    def _epsilon(self, state: Any, delta: float) -> float:
        st: _PldState = state
        if not st.events:
            return 0.0
        if st.fallback is not None:
            return self._fallback_epsilon(st, delta)
        pld, pure = st.pld, st.pure
        if pld is None:
            return 0.0
        if isinstance(pld, str):
            return math.inf
        if delta == 0:
            # The discretised PLD truncates tail mass, so its δ = 0 answer can be too low; pure
            # ε-DP composes exactly by summation.
            return math.inf if pure is None else pure
        eps = max(0.0, float(pld.get_epsilon_for_delta(delta)))
        if delta < PLD_MIN_DELTA:
            # the PLD truncates ~1e-15 of tail mass into its infinity mass, so it cannot resolve such
            # small δ: the exact Gaussian closed form or the RDP bound (both valid) may be far tighter
            if all(_gaussian_multiplier_sq(e) is not None for e in st.events):
                eps = min(eps, self._fallback_epsilon(dataclasses.replace(st, fallback="gaussian"), delta))
            elif self._rdp_supports(st.events):
                eps = min(eps, self._fallback_epsilon(dataclasses.replace(st, fallback="rdp"), delta))
        return min(eps, pure) if pure is not None else eps

    def _fallback_epsilon(self, st: _PldState, delta: float) -> float:
        pure = math.inf if st.pure is None else st.pure
        if delta == 0:
            return pure
        if st.fallback == "gaussian":
            total = sum(_gaussian_multiplier_sq(e) or 0.0 for e in st.events)
            if total == 0:
                return 0.0
            eps = _gaussian_epsilon_exact(1.0 / math.sqrt(total), delta)
        elif st.fallback == "rdp":
            eps = RdpAccountant(neighbouring=self.neighbouring)._epsilon(self._rdp_state(st.events), delta)
        else:
            eps = math.inf
        return min(eps, pure)


#: Largest number of privacy-loss grid points (estimated, summed over the ledger's mechanisms) the
#: PLD accountant asks dp-accounting to discretise, and largest estimated support of the composed
#: PLD (its FFT size).  Beyond them the discretisation is coarsened, then a fallback bound is used.
#: The estimates are conservative by ~3x; the caps keep any one composition to a few seconds.
PLD_MAX_POINTS = 5e4
PLD_MAX_SUPPORT = 5e6
#: Largest total pessimistic rounding (number of composed releases x discretisation) the PLD
#: accountant accepts when the exact Gaussian closed form or the RDP bound can be used instead.
PLD_MAX_ROUNDING = 10.0
#: Below this δ the PLD accountant also evaluates the exact Gaussian closed form or the RDP bound
#: (when they apply) and reports the smaller ε: the PLD's tail truncation cannot resolve such δ.
PLD_MIN_DELTA = 1e-12
#: Coarsest discretisation interval the PLD accountant coarsens to before falling back to the exact
#: Gaussian closed form, the Rényi-DP bound or basic composition (each still an upper bound).
PLD_MAX_DISCRETIZATION = 0.02


@dataclass(frozen=True)
class _PldState:
    """PLD ledger state: the composed PLD (None when empty, "inf" after a non-private release), the
    basic-composition sum of pure ε (None once an approximate-DP event is composed; it answers
    δ = 0, which the truncated PLD cannot), the discretisation in use, the composed events, and the
    fallback in use when the PLD would be too large (None, "gaussian", "rdp" or "pure")."""

    pld: Any
    pure: float | None
    vdi: float
    events: tuple[PrivacyEvent, ...]
    fallback: str | None


def _pld_cost(event: PrivacyEvent) -> tuple[float, float]:
    """Rough widths of ``event``'s PLD: (summed over the mechanisms dp-accounting must discretise,
    of the composed privacy-loss support); points = width / discretisation.

    Calibrated on dp-accounting 0.4: Gaussian μ = Δ/σ spans ~20μ + μ² (Poisson-sampled: ~10μ + μ²/2),
    Laplace 2Δ/b; k-fold self-composition grows at most ~√k with a logarithmic excess.  Conservative.
    """
    if isinstance(event, EpsilonDeltaEvent) and event.source is not None:
        return _pld_cost(event.source)
    if isinstance(event, ComposedEvent):
        parts = [_pld_cost(e) for e in event.events]
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    if isinstance(event, RepeatedEvent):
        build, support = _pld_cost(event.event)
        k = event.count
        return build, support * 1.5 * math.sqrt(k) * (1 + math.log10(k) / 6)
    width = 1e-3  # two-point PLDs of (ε, δ) claims
    inner = event.event if isinstance(event, PoissonSampledEvent) else event
    if isinstance(inner, EpsilonDeltaEvent) and inner.source is not None:
        inner = inner.source
    if isinstance(inner, GaussianEvent):
        mu = inner.sensitivity / inner.sigma
        width = 10 * mu + mu * mu / 2 if isinstance(event, PoissonSampledEvent) else 20 * mu + mu * mu
    elif isinstance(inner, LaplaceEvent):
        width = 2 * inner.sensitivity / inner.scale + 1e-3
    return width, width


def _gaussian_multiplier_sq(event: PrivacyEvent) -> float | None:
    """Σ (Δ/σ)² if ``event`` is a composition of unsampled Gaussian releases, else None.

    k Gaussian releases with Δ_i/σ_i compose exactly to one Gaussian with Δ/σ = sqrt(Σ (Δ_i/σ_i)²)
    (under either neighbouring relation, for declared sensitivities).
    """
    if isinstance(event, EpsilonDeltaEvent) and event.source is not None:
        return _gaussian_multiplier_sq(event.source)
    if isinstance(event, GaussianEvent):
        mu = event.sensitivity / event.sigma
        return mu * mu
    if isinstance(event, RepeatedEvent):
        inner = _gaussian_multiplier_sq(event.event)
        return None if inner is None else inner * event.count
    if isinstance(event, ComposedEvent):
        parts = [_gaussian_multiplier_sq(e) for e in event.events]
        return None if any(p is None for p in parts) else float(sum(p for p in parts if p is not None))
    return None


#: Noise-to-sensitivity ratios above this are analysed as this ratio (less noise: an upper bound on ε);
#: dp-accounting squares the ratio, which overflows near 1e154.
_MAX_NOISE_RATIO = 1e100


def _ratio(noise: float, sensitivity: float) -> float:
    """noise / sensitivity, capped at :data:`_MAX_NOISE_RATIO` (capping less noise is sound)."""
    return min(noise / sensitivity, _MAX_NOISE_RATIO)


def _gaussian_epsilon_exact(noise_multiplier: float, delta: float) -> float:
    """Exact ε at δ of one Gaussian release with σ/Δ = ``noise_multiplier`` (Balle-Wang 2018).

    Where dp-accounting's root finder cannot run (extreme parameters) the answer is ∞ (no claim)
    rather than a wrong number.
    """
    try:
        eps = float(dp_accounting.get_epsilon_gaussian(noise_multiplier, delta))
    except (ValueError, ArithmeticError, RuntimeError):
        return math.inf
    return eps if math.isfinite(eps) and eps >= 0 else math.inf


def _pure_epsilon_of(event: PrivacyEvent) -> float | None:
    """Pure ε of an event by basic composition / amplification, or None if it is only (ε, δ)-DP."""
    if isinstance(event, ComposedEvent):
        parts = [_pure_epsilon_of(e) for e in event.events]
        return None if any(p is None for p in parts) else float(sum(p for p in parts if p is not None))
    if isinstance(event, RepeatedEvent):
        inner = _pure_epsilon_of(event.event)
        return None if inner is None else inner * event.count
    if isinstance(event, PoissonSampledEvent | SampledWithoutReplacementEvent):
        inner = _pure_epsilon_of(event.event)
        return None if inner is None else amplified_epsilon(inner, event.rate)
    if isinstance(event, EpsilonDeltaEvent) and event.source is not None:
        return _pure_epsilon_of(event.source)
    return event.pure_epsilon()


def _self_compose(pld: Any, count: int) -> Any:
    """``count``-fold self-composition of a PLD.

    dp-accounting composes a *sparse* PMF (a few loss values, e.g. a very noisy release) by
    ``count - 1`` pairwise compositions in a Python loop, which never ends for ``count = 10**12``;
    there, compose by repeated squaring instead (log2(count) compositions, each pessimistic, so the
    result stays an upper bound).
    """
    sparse = type(getattr(pld, "_pmf_remove", None)).__name__ == "SparsePLDPmf"
    if count <= 1000 or not sparse:
        return pld.self_compose(count)
    result: Any = None
    power = pld
    while count:
        if count & 1:
            result = power if result is None else result.compose(power)
        count >>= 1
        if count:
            power = power.compose(power)
    return result


def _compose_pld(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, str) or isinstance(b, str):
        return "inf"
    return a.compose(b)


class RdpAccountant(Accountant):
    """Rényi-DP accountant (dp-accounting's ``RdpAccountant``).

    Gaussian releases (optionally Poisson-subsampled under add/remove, or fixed-size subsampled
    under replace-one) and Laplace releases are analysed exactly; other pure ε-DP events enter as
    ε²/2-zCDP (Bun-Steinke 2016).  Approximate (ε, δ) events without a source cannot be expressed
    in RDP and are refused (use ``"pld"``).
    """

    kind = "rdp"

    def _empty_state(self) -> Any:
        rel = dp_accounting.NeighboringRelation
        relation = rel.ADD_OR_REMOVE_ONE if self.neighbouring == "add_remove" else rel.REPLACE_ONE
        return (_dpa_rdp.RdpAccountant(neighboring_relation=relation), 0)  # (wrapped accountant, #composed)

    def _to_dpa(self, event: PrivacyEvent) -> Any:
        if isinstance(event, NonPrivateEvent):
            return dp_accounting.NonPrivateDpEvent()
        if isinstance(event, EpsilonDeltaEvent) and event.source is not None:
            return self._to_dpa(event.source)
        if isinstance(event, GaussianEvent):
            return dp_accounting.GaussianDpEvent(_ratio(event.sigma, event.sensitivity))
        if isinstance(event, LaplaceEvent):
            return dp_accounting.LaplaceDpEvent(_ratio(event.scale, event.sensitivity))
        if isinstance(event, ComposedEvent):
            return dp_accounting.ComposedDpEvent([self._to_dpa(e) for e in event.events])
        if isinstance(event, RepeatedEvent):
            return dp_accounting.SelfComposedDpEvent(self._to_dpa(event.event), event.count)
        if isinstance(event, PoissonSampledEvent | SampledWithoutReplacementEvent):
            inner = event.event
            if isinstance(inner, EpsilonDeltaEvent) and inner.source is not None:
                inner = inner.source
            if isinstance(inner, GaussianEvent):
                g = dp_accounting.GaussianDpEvent(_ratio(inner.sigma, inner.sensitivity))
                if isinstance(event, PoissonSampledEvent):
                    return dp_accounting.PoissonSampledDpEvent(event.rate, g)
                return dp_accounting.SampledWithoutReplacementDpEvent(
                    event.population_size, event.sample_size, g
                )
            claim = _pure_or_claim(inner)
            if claim is None or claim[1] > 0:
                raise UnsupportedEventError(
                    f"subsampled {type(inner).__name__} is not supported by the RDP accountant; use 'pld'"
                )
            eps = amplified_epsilon(claim[0], event.rate)
            return _zcdp(eps)
        claim = _pure_or_claim(event)
        if claim is None or claim[1] > 0:
            raise UnsupportedEventError(
                f"{type(event).__name__} with δ > 0 cannot be expressed in Rényi DP; use the 'pld' accountant"
            )
        return _zcdp(claim[0])

    def _extend(self, state: Any, event: PrivacyEvent, count: int) -> tuple[Any, list[str]]:
        dpa_event = self._to_dpa(event)
        wrapped, n = state
        if not wrapped.supports(dpa_event):
            raise UnsupportedEventError(
                f"the RDP accountant cannot analyse {type(event).__name__} under {self.neighbouring} neighbours"
            )
        new = copy.deepcopy(wrapped)
        try:
            new.compose(dpa_event, count)
        except (ArithmeticError, ValueError) as exc:  # dp-accounting at extreme noise multipliers
            raise UnsupportedEventError(
                f"the RDP accountant cannot analyse this {type(event).__name__} numerically (noise far below "
                f"its sensitivity: {type(exc).__name__}); use more noise or the 'pld' accountant"
            ) from None
        return (new, n + count), []

    def _epsilon(self, state: Any, delta: float) -> float:
        wrapped, n = state
        if n == 0:
            return 0.0
        if delta == 0:
            return math.inf  # RDP gives no pure-DP bound
        try:
            eps = float(wrapped.get_epsilon(delta))
        except (ArithmeticError, ValueError):
            return math.inf  # no finite bound computable: claim nothing
        return max(0.0, eps) if not math.isnan(eps) else math.inf


def _zcdp(epsilon: float) -> Any:
    """ε-DP as ε²/2-zCDP (Bun-Steinke 2016); no finite ρ (ε ≳ 1e154) is analysed as non-private."""
    rho = epsilon * epsilon / 2
    return dp_accounting.ZCDpEvent(rho) if math.isfinite(rho) else dp_accounting.NonPrivateDpEvent()


AccountantKind = Literal["basic", "advanced", "rdp", "pld"]  #: kinds of :func:`make_accountant`
_KINDS: dict[str, type[Accountant]] = {
    "basic": BasicAccountant,
    "advanced": AdvancedCompositionAccountant,
    "rdp": RdpAccountant,
    "pld": PldAccountant,
}


def make_accountant(
    kind: AccountantKind | str = "pld",
    *,
    budget: Budget | None = None,
    neighbouring: Neighbouring = "add_remove",
    **options: Any,
) -> Accountant:
    """Create an accountant by name: ``"basic"``, ``"advanced"`` (paper rules), ``"rdp"``, ``"pld"`` (tight).

    ``"paper"`` is an alias of ``"basic"`` and ``"tight"`` of ``"pld"``.

    Examples
    --------
    >>> from dpopt.accounting import GaussianEvent, PoissonSampledEvent
    >>> step = PoissonSampledEvent(GaussianEvent(sigma=1.0), rate=0.01)
    >>> for kind in ("rdp", "pld"):                  # 1000 DP-SGD steps, two tight accountants
    ...     acct = make_accountant(kind)
    ...     acct.compose(step, count=1000)
    ...     print(kind, round(acct.spent(delta=1e-5).epsilon, 1))
    rdp 2.1
    pld 1.8
    """
    name = {"paper": "basic", "tight": "pld"}.get(kind, kind)
    if name not in _KINDS:
        raise InvalidParameterError(
            f"accountant: unknown kind; choose one of {sorted(_KINDS)} (or 'paper' / 'tight')"
        )
    return _KINDS[name](budget=budget, neighbouring=neighbouring, **options)


def available_accountants() -> list[str]:
    """Kinds accepted by :func:`make_accountant` (without the aliases ``"paper"``/``"tight"``)."""
    return sorted(_KINDS)
