"""Paper-rule accountants (``"basic"``, ``"advanced"``): sequential and strong composition of (ε, δ)
pairs, amplification-by-subsampling lemmas with their preconditions checked.

Each event type maps to its (ε, δ) pairs through :func:`_pairs` (dispatched on the event type).
Re-exported by :mod:`dpopt.accounting.accountants`; see there.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import singledispatch
from typing import Any, Literal

from dpopt.accounting._base import Accountant, Budget, amplified_epsilon
from dpopt.accounting._tight import PldAccountant
from dpopt.accounting.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    GaussianEvent,
    Neighbouring,
    PoissonSampledEvent,
    PrivacyEvent,
    RepeatedEvent,
    SampledWithoutReplacementEvent,
)
from dpopt.exceptions import InvalidParameterError, UnsupportedEventError

_Pairs = Counter[tuple[float, float]]


@singledispatch
def _pairs(event: PrivacyEvent, acct: _PaperAccountant, notes: list[str]) -> _Pairs:
    """The (ε, δ) pairs (with multiplicities) ``acct`` composes for ``event``; lemma notes go to ``notes``."""
    eps = event.pure_epsilon()
    if eps is None:
        raise UnsupportedEventError(f"{type(event).__name__} is not supported by the {acct.kind} accountant")
    return Counter({(eps, 0.0): 1})


@_pairs.register(ComposedEvent)
def _(event: ComposedEvent, acct: _PaperAccountant, notes: list[str]) -> _Pairs:
    total: _Pairs = Counter()
    for e in event.events:
        total.update(_pairs(e, acct, notes))
    return total


@_pairs.register(RepeatedEvent)
def _(event: RepeatedEvent, acct: _PaperAccountant, notes: list[str]) -> _Pairs:
    inner = _pairs(event.event, acct, notes)
    return Counter({k: v * event.count for k, v in inner.items()})


@_pairs.register(EpsilonDeltaEvent)
def _(event: EpsilonDeltaEvent, acct: _PaperAccountant, notes: list[str]) -> _Pairs:
    return Counter({(event.epsilon, event.delta): 1})


@_pairs.register(GaussianEvent)
def _(event: GaussianEvent, acct: _PaperAccountant, notes: list[str]) -> _Pairs:
    raise UnsupportedEventError(
        "paper-rule accountants need an (ε, δ) claim for a Gaussian release: calibrate it with "
        "dpopt.accounting.gaussian_event(...) (which records the claim), or use the 'pld' or "
        "'rdp' accountant"
    )


def _elementary_pair(
    event: PoissonSampledEvent | SampledWithoutReplacementEvent, acct: _PaperAccountant, notes: list[str]
) -> tuple[float, float]:
    """The (ε0, δ0) of the one elementary release a subsampling lemma is applied to."""
    inner = _pairs(event.event, acct, notes)
    if len(inner) != 1 or next(iter(inner.values())) != 1:
        raise UnsupportedEventError(
            "paper-rule subsampling lemmas apply to one elementary release; wrap each step separately"
        )
    return next(iter(inner))


@_pairs.register(PoissonSampledEvent)
def _(event: PoissonSampledEvent, acct: _PaperAccountant, notes: list[str]) -> _Pairs:
    eps0, delta0 = _elementary_pair(event, acct, notes)
    q = event.rate
    if acct.neighbouring != "add_remove":
        raise UnsupportedEventError(
            "Poisson subsampling amplification is stated for add_remove neighbours; use "
            "SampledWithoutReplacementEvent for replace_one, or an add_remove accountant"
        )
    return Counter({(amplified_epsilon(eps0, q), q * delta0): 1})


@_pairs.register(SampledWithoutReplacementEvent)
def _(event: SampledWithoutReplacementEvent, acct: _PaperAccountant, notes: list[str]) -> _Pairs:
    eps0, delta0 = _elementary_pair(event, acct, notes)
    q = event.rate
    if acct.neighbouring != "replace_one":
        raise UnsupportedEventError(
            "fixed-size sampling without replacement is analysed under replace_one neighbours (n public); "
            "create the accountant with neighbouring='replace_one'"
        )
    rule = acct.subsampling_rule
    if rule == "bst14" and eps0 > 1:
        msg = (
            f"the 2(m/n)ε amplification lemma (Bassily-Smith-Thakurta 2014) requires the per-step ε0 <= 1, "
            f"but ε0 = {eps0:.4g}; the tight rule ln(1 + (m/n)(e^ε0 - 1)) was used instead"
        )
        if acct.on_precondition_failure == "raise":
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


SubsamplingRule = Literal["tight", "bst14", "thesis"]  #: amplification lemmas of the paper-rule accountants


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

    def _extend(self, state: Any, event: PrivacyEvent, count: int) -> tuple[Any, list[str]]:
        notes: list[str] = []
        pairs = _pairs(event, self, notes)
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
