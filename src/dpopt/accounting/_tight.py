"""Tight accountants (``"pld"``, ``"rdp"``) wrapping Google's ``dp-accounting`` (imported on first use).

How each event type is analysed (its PLD, its dp-accounting ``DpEvent``, its cost estimate, ...) is
one function per concern dispatched on the event type (:func:`functools.singledispatch`), at the end
of this module.  Re-exported by :mod:`dpopt.accounting.accountants`; see there.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import singledispatch
from typing import Any

from dpopt._validation import check_positive
from dpopt.accounting._base import Accountant, Budget, InfoNote, _count_events, amplified_epsilon
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
)
from dpopt.exceptions import UnsupportedEventError


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
        return _to_pld(event, self, self.discretization if vdi is None else vdi)

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
PLD_MAX_SUPPORT = 5e6  #: Largest estimated support of the composed PLD (see PLD_MAX_POINTS).
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

    def _extend(self, state: Any, event: PrivacyEvent, count: int) -> tuple[Any, list[str]]:
        dpa_event = _to_dpa(event)
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


# ------------------------------------------------------------------------------------------------
# Per-event-type analyses (dispatched on the event type; the base implementation is the fallback)
# ------------------------------------------------------------------------------------------------


def _fallback(fn: Any) -> Callable[..., Any]:
    """The base (``PrivacyEvent``) implementation of the single-dispatch function ``fn``."""
    impl: Callable[..., Any] = fn.dispatch(PrivacyEvent)
    return impl


@singledispatch
def _unwrap_claim(event: PrivacyEvent) -> PrivacyEvent:
    """The actual mechanism behind an (ε, δ) claim that records one, else ``event`` (one level)."""
    return event


@_unwrap_claim.register(EpsilonDeltaEvent)
def _(event: EpsilonDeltaEvent) -> PrivacyEvent:
    return event if event.source is None else event.source


@singledispatch
def _pure_or_claim(event: PrivacyEvent) -> tuple[float, float] | None:
    """(ε, δ) of a pure event or of a claim without a source, else None."""
    eps = event.pure_epsilon()
    return None if eps is None else (eps, 0.0)


@_pure_or_claim.register(EpsilonDeltaEvent)
def _(event: EpsilonDeltaEvent) -> tuple[float, float] | None:
    if event.source is None:
        return (event.epsilon, event.delta)
    return _fallback(_pure_or_claim)(event)


@singledispatch
def _mechanism_width(inner: PrivacyEvent, sampled: bool) -> float:
    """Width of one mechanism's PLD (Poisson-sampled if ``sampled``); two-point PLDs of (ε, δ) claims."""
    return 1e-3


@_mechanism_width.register(GaussianEvent)
def _(inner: GaussianEvent, sampled: bool) -> float:
    mu = inner.sensitivity / inner.sigma
    return 10 * mu + mu * mu / 2 if sampled else 20 * mu + mu * mu


@_mechanism_width.register(LaplaceEvent)
def _(inner: LaplaceEvent, sampled: bool) -> float:
    return 2 * inner.sensitivity / inner.scale + 1e-3


@singledispatch
def _pld_cost(event: PrivacyEvent) -> tuple[float, float]:
    """Rough widths of ``event``'s PLD: (summed over the mechanisms dp-accounting must discretise,
    of the composed privacy-loss support); points = width / discretisation.

    Calibrated on dp-accounting 0.4: Gaussian μ = Δ/σ spans ~20μ + μ² (Poisson-sampled: ~10μ + μ²/2),
    Laplace 2Δ/b; k-fold self-composition grows at most ~√k with a logarithmic excess.  Conservative.
    """
    width = _mechanism_width(_unwrap_claim(event), False)
    return width, width


@_pld_cost.register(EpsilonDeltaEvent)
def _(event: EpsilonDeltaEvent) -> tuple[float, float]:
    if event.source is not None:
        return _pld_cost(event.source)
    return _fallback(_pld_cost)(event)


@_pld_cost.register(ComposedEvent)
def _(event: ComposedEvent) -> tuple[float, float]:
    parts = [_pld_cost(e) for e in event.events]
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


@_pld_cost.register(RepeatedEvent)
def _(event: RepeatedEvent) -> tuple[float, float]:
    build, support = _pld_cost(event.event)
    k = event.count
    return build, support * 1.5 * math.sqrt(k) * (1 + math.log10(k) / 6)


@_pld_cost.register(PoissonSampledEvent)
def _(event: PoissonSampledEvent) -> tuple[float, float]:
    width = _mechanism_width(_unwrap_claim(event.event), True)
    return width, width


@singledispatch
def _gaussian_multiplier_sq(event: PrivacyEvent) -> float | None:
    """Σ (Δ/σ)² if ``event`` is a composition of unsampled Gaussian releases, else None.

    k Gaussian releases with Δ_i/σ_i compose exactly to one Gaussian with Δ/σ = sqrt(Σ (Δ_i/σ_i)²)
    (under either neighbouring relation, for declared sensitivities).
    """
    return None


@_gaussian_multiplier_sq.register(EpsilonDeltaEvent)
def _(event: EpsilonDeltaEvent) -> float | None:
    return None if event.source is None else _gaussian_multiplier_sq(event.source)


@_gaussian_multiplier_sq.register(GaussianEvent)
def _(event: GaussianEvent) -> float | None:
    mu = event.sensitivity / event.sigma
    return mu * mu


@_gaussian_multiplier_sq.register(RepeatedEvent)
def _(event: RepeatedEvent) -> float | None:
    inner = _gaussian_multiplier_sq(event.event)
    return None if inner is None else inner * event.count


@_gaussian_multiplier_sq.register(ComposedEvent)
def _(event: ComposedEvent) -> float | None:
    parts = [_gaussian_multiplier_sq(e) for e in event.events]
    return None if any(p is None for p in parts) else float(sum(p for p in parts if p is not None))


@singledispatch
def _pure_epsilon_of(event: PrivacyEvent) -> float | None:
    """Pure ε of an event by basic composition / amplification, or None if it is only (ε, δ)-DP."""
    return event.pure_epsilon()


@_pure_epsilon_of.register(ComposedEvent)
def _(event: ComposedEvent) -> float | None:
    parts = [_pure_epsilon_of(e) for e in event.events]
    return None if any(p is None for p in parts) else float(sum(p for p in parts if p is not None))


@_pure_epsilon_of.register(RepeatedEvent)
def _(event: RepeatedEvent) -> float | None:
    inner = _pure_epsilon_of(event.event)
    return None if inner is None else inner * event.count


@_pure_epsilon_of.register(PoissonSampledEvent)
@_pure_epsilon_of.register(SampledWithoutReplacementEvent)
def _(event: PoissonSampledEvent | SampledWithoutReplacementEvent) -> float | None:
    inner = _pure_epsilon_of(event.event)
    return None if inner is None else amplified_epsilon(inner, event.rate)


@_pure_epsilon_of.register(EpsilonDeltaEvent)
def _(event: EpsilonDeltaEvent) -> float | None:
    return event.pure_epsilon() if event.source is None else _pure_epsilon_of(event.source)


# --- PLD of one event ---------------------------------------------------------------------------
# mechanisms are passed as (noise / sensitivity, 1): the PLD depends on the ratio only, and
# dp-accounting squares σ and Δ separately (overflow at σ ~ 1e155)


@singledispatch
def _to_pld(event: PrivacyEvent, acct: PldAccountant, vdi: float) -> Any:
    """The PLD ``acct`` composes for ``event`` at discretisation ``vdi`` ("inf" if non-private)."""
    claim = _pure_or_claim(event)
    if claim is None:
        raise UnsupportedEventError(f"{type(event).__name__} is not supported by the PLD accountant")
    return acct._from_params(*claim, vdi)


@_to_pld.register(NonPrivateEvent)
def _(event: NonPrivateEvent, acct: PldAccountant, vdi: float) -> Any:
    return "inf"


@_to_pld.register(EpsilonDeltaEvent)
def _(event: EpsilonDeltaEvent, acct: PldAccountant, vdi: float) -> Any:
    if event.source is not None:
        return _to_pld(event.source, acct, vdi)
    return _fallback(_to_pld)(event, acct, vdi)


@_to_pld.register(LaplaceEvent)
def _(event: LaplaceEvent, acct: PldAccountant, vdi: float) -> Any:
    return pld_lib.from_laplace_mechanism(
        _ratio(event.scale, event.sensitivity), 1.0, value_discretization_interval=vdi
    )


@_to_pld.register(GaussianEvent)
def _(event: GaussianEvent, acct: PldAccountant, vdi: float) -> Any:
    return pld_lib.from_gaussian_mechanism(
        _ratio(event.sigma, event.sensitivity), 1.0, value_discretization_interval=vdi
    )


@_to_pld.register(ComposedEvent)
def _(event: ComposedEvent, acct: PldAccountant, vdi: float) -> Any:
    out: Any = None
    for e in event.events:
        out = _compose_pld(out, _to_pld(e, acct, vdi))
    return out


@_to_pld.register(RepeatedEvent)
def _(event: RepeatedEvent, acct: PldAccountant, vdi: float) -> Any:
    inner = _to_pld(event.event, acct, vdi)
    return inner if isinstance(inner, str) or inner is None else _self_compose(inner, event.count)


@_to_pld.register(PoissonSampledEvent)
def _(event: PoissonSampledEvent, acct: PldAccountant, vdi: float) -> Any:
    return _poisson_pld(event.event, event.rate, acct, vdi)


@_to_pld.register(SampledWithoutReplacementEvent)
def _(event: SampledWithoutReplacementEvent, acct: PldAccountant, vdi: float) -> Any:
    if acct.neighbouring != "replace_one":
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
    return acct._from_params(amplified_epsilon(claim[0], event.rate), event.rate * claim[1], vdi)


def _require_add_remove(acct: PldAccountant) -> None:
    if acct.neighbouring != "add_remove":
        raise UnsupportedEventError(
            "Poisson subsampling of this event is analysed under add_remove neighbours; create the "
            "accountant with neighbouring='add_remove'"
        )


@singledispatch
def _poisson_pld(inner: PrivacyEvent, rate: float, acct: PldAccountant, vdi: float) -> Any:
    """The PLD of ``inner`` Poisson-subsampled at ``rate`` (dispatched on the inner event's type)."""
    _require_add_remove(acct)
    claim = _pure_or_claim(inner)
    if claim is None:
        raise UnsupportedEventError(
            f"Poisson subsampling of {type(inner).__name__} is not supported by the PLD accountant"
        )
    return acct._from_params(amplified_epsilon(claim[0], rate), rate * claim[1], vdi)


@_poisson_pld.register(GaussianEvent)
def _(inner: GaussianEvent, rate: float, acct: PldAccountant, vdi: float) -> Any:
    if acct.neighbouring != "add_remove":
        # replace-one with n public: the replaced record contributes a or b (‖a - b‖ <= Δ) to
        # the sum; dp-accounting's REPLACE pair is q·N(∓Δ/2) + (1-q)·N(0)
        return pld_lib.from_gaussian_mechanism(
            _ratio(inner.sigma, inner.sensitivity / 2),
            1.0,
            value_discretization_interval=vdi,
            sampling_prob=rate,
            neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
        )
    return pld_lib.from_gaussian_mechanism(
        _ratio(inner.sigma, inner.sensitivity), 1.0, value_discretization_interval=vdi, sampling_prob=rate
    )


@_poisson_pld.register(LaplaceEvent)
def _(inner: LaplaceEvent, rate: float, acct: PldAccountant, vdi: float) -> Any:
    _require_add_remove(acct)
    return pld_lib.from_laplace_mechanism(
        _ratio(inner.scale, inner.sensitivity), 1.0, value_discretization_interval=vdi, sampling_prob=rate
    )


# --- dp-accounting DpEvent of one event (RDP accountant) -----------------------------------------


@singledispatch
def _to_dpa(event: PrivacyEvent) -> Any:
    """The dp-accounting ``DpEvent`` the RDP accountant composes for ``event``."""
    claim = _pure_or_claim(event)
    if claim is None or claim[1] > 0:
        raise UnsupportedEventError(
            f"{type(event).__name__} with δ > 0 cannot be expressed in Rényi DP; use the 'pld' accountant"
        )
    return _zcdp(claim[0])


@_to_dpa.register(NonPrivateEvent)
def _(event: NonPrivateEvent) -> Any:
    return dp_accounting.NonPrivateDpEvent()


@_to_dpa.register(EpsilonDeltaEvent)
def _(event: EpsilonDeltaEvent) -> Any:
    return _fallback(_to_dpa)(event) if event.source is None else _to_dpa(event.source)


@_to_dpa.register(GaussianEvent)
def _(event: GaussianEvent) -> Any:
    return dp_accounting.GaussianDpEvent(_ratio(event.sigma, event.sensitivity))


@_to_dpa.register(LaplaceEvent)
def _(event: LaplaceEvent) -> Any:
    return dp_accounting.LaplaceDpEvent(_ratio(event.scale, event.sensitivity))


@_to_dpa.register(ComposedEvent)
def _(event: ComposedEvent) -> Any:
    return dp_accounting.ComposedDpEvent([_to_dpa(e) for e in event.events])


@_to_dpa.register(RepeatedEvent)
def _(event: RepeatedEvent) -> Any:
    return dp_accounting.SelfComposedDpEvent(_to_dpa(event.event), event.count)


@singledispatch
def _sampled_gaussian_dpa(inner: PrivacyEvent) -> Any:
    """The ``GaussianDpEvent`` of a subsampled Gaussian release, else None."""
    return None


@_sampled_gaussian_dpa.register(GaussianEvent)
def _(inner: GaussianEvent) -> Any:
    return dp_accounting.GaussianDpEvent(_ratio(inner.sigma, inner.sensitivity))


def _subsampled_dpa(
    event: PoissonSampledEvent | SampledWithoutReplacementEvent, wrap: Callable[[Any], Any]
) -> Any:
    inner = _unwrap_claim(event.event)
    g = _sampled_gaussian_dpa(inner)
    if g is not None:
        return wrap(g)
    claim = _pure_or_claim(inner)
    if claim is None or claim[1] > 0:
        raise UnsupportedEventError(
            f"subsampled {type(inner).__name__} is not supported by the RDP accountant; use 'pld'"
        )
    return _zcdp(amplified_epsilon(claim[0], event.rate))


@_to_dpa.register(PoissonSampledEvent)
def _(event: PoissonSampledEvent) -> Any:
    return _subsampled_dpa(event, lambda g: dp_accounting.PoissonSampledDpEvent(event.rate, g))


@_to_dpa.register(SampledWithoutReplacementEvent)
def _(event: SampledWithoutReplacementEvent) -> Any:
    return _subsampled_dpa(
        event,
        lambda g: dp_accounting.SampledWithoutReplacementDpEvent(event.population_size, event.sample_size, g),
    )
