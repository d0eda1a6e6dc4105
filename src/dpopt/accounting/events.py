"""Inert, checkable descriptions of privacy-relevant releases ("events").

An event says *what* was released (which noise, which declared sensitivity, which subsampling) and
nothing about how its privacy is analysed; accountants (:mod:`dpopt.accounting.accountants`)
interpret events.  Sensitivities are declared by the caller under the accountant's neighbouring
relation; events never look at data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from dpopt._validation import check_int, check_nonneg, check_positive, check_probability
from dpopt.exceptions import InvalidParameterError

__all__ = [
    "ComposedEvent",
    "EpsilonDeltaEvent",
    "ExponentialEvent",
    "GaussianEvent",
    "L2LaplaceEvent",
    "LaplaceEvent",
    "Neighbouring",
    "NonPrivateEvent",
    "PoissonSampledEvent",
    "PrivacyEvent",
    "RepeatedEvent",
    "ReportNoisyMinEvent",
    "SampledWithoutReplacementEvent",
    "check_neighbouring",
]

#: Neighbouring relations: ``"add_remove"`` (add or remove one record) and ``"replace_one"``
#: (replace one record; same size).
Neighbouring: TypeAlias = Literal["add_remove", "replace_one"]
_NEIGHBOURING = ("add_remove", "replace_one")


def check_neighbouring(value: object) -> Neighbouring:
    """Validate a neighbouring relation name."""
    if value not in _NEIGHBOURING:
        raise InvalidParameterError(
            f"neighbouring: must be one of {_NEIGHBOURING} (add/remove one record, or replace one record)"
        )
    return value  # type: ignore[return-value]


class PrivacyEvent:
    """Base class of all events (frozen dataclasses)."""

    def pure_epsilon(self) -> float | None:
        """The ε of this event if it is pure ε-DP by a standard single-release argument, else None."""
        return None


@dataclass(frozen=True)
class LaplaceEvent(PrivacyEvent):
    """Laplace noise of scale ``scale`` added to a query of l1-sensitivity ``sensitivity``: ε = Δ₁/b."""

    scale: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        check_positive(self.scale, "scale")
        check_positive(self.sensitivity, "sensitivity")

    def pure_epsilon(self) -> float:
        return self.sensitivity / self.scale


@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    """Gaussian noise of standard deviation ``sigma`` on a query of l2-sensitivity ``sensitivity``."""

    sigma: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        check_positive(self.sigma, "sigma")
        check_positive(self.sensitivity, "sensitivity")

    @property
    def noise_multiplier(self) -> float:
        """σ/Δ₂."""
        return self.sigma / self.sensitivity


@dataclass(frozen=True)
class EpsilonDeltaEvent(PrivacyEvent):
    """A release that is (ε, δ)-DP by some argument.

    Parameters
    ----------
    epsilon, delta
        The claimed guarantee.
    source
        Optional: the actual mechanism (e.g. a :class:`GaussianEvent` calibrated with a paper's
        formula).  Tight accountants analyse ``source`` instead of the claim, which is how dpopt
        reports the true figure when a paper's calibration is unsound.
    rule
        Name of the calibration rule behind the claim (for the ledger), e.g. ``"classic-gaussian"``.
    """

    epsilon: float
    delta: float = 0.0
    source: PrivacyEvent | None = field(default=None, compare=True)
    rule: str = ""

    def __post_init__(self) -> None:
        check_nonneg(self.epsilon, "epsilon")
        check_probability(self.delta, "delta")

    def pure_epsilon(self) -> float | None:
        return self.epsilon if self.delta == 0 else None


@dataclass(frozen=True)
class ReportNoisyMinEvent(PrivacyEvent):
    """Report-noisy-min (or max) with Laplace noise of scale ``scale`` on scores of sensitivity Δ.

    Only the index is released.  ε = 2Δ/b for arbitrary scores and Δ/b for monotone (counting-type)
    scores.
    """

    scale: float
    sensitivity: float = 1.0
    monotone: bool = False

    def __post_init__(self) -> None:
        check_positive(self.scale, "scale")
        check_positive(self.sensitivity, "sensitivity")

    def pure_epsilon(self) -> float:
        return (1.0 if self.monotone else 2.0) * self.sensitivity / self.scale


@dataclass(frozen=True)
class ExponentialEvent(PrivacyEvent):
    """The exponential mechanism run at privacy parameter ``epsilon`` (ε-DP)."""

    epsilon: float

    def __post_init__(self) -> None:
        check_positive(self.epsilon, "epsilon")

    def pure_epsilon(self) -> float:
        return self.epsilon


@dataclass(frozen=True)
class L2LaplaceEvent(PrivacyEvent):
    """Vector noise with density ∝ exp(-α‖v‖₂) on a query of l2-sensitivity Δ₂: ε = α·Δ₂."""

    alpha: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        check_positive(self.alpha, "alpha")
        check_positive(self.sensitivity, "sensitivity")

    def pure_epsilon(self) -> float:
        return self.alpha * self.sensitivity


@dataclass(frozen=True)
class ComposedEvent(PrivacyEvent):
    """Adaptive sequential composition of several events."""

    events: tuple[PrivacyEvent, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.events, tuple) or not all(isinstance(e, PrivacyEvent) for e in self.events):
            raise InvalidParameterError("events: expected a tuple of PrivacyEvent")


@dataclass(frozen=True)
class RepeatedEvent(PrivacyEvent):
    """``count``-fold adaptive composition of the same event."""

    event: PrivacyEvent
    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.event, PrivacyEvent):
            raise InvalidParameterError("event: expected a PrivacyEvent")
        check_int(self.count, "count", minimum=1)


@dataclass(frozen=True)
class PoissonSampledEvent(PrivacyEvent):
    """``event`` run on a Poisson subsample (each record kept independently with prob. ``rate``).

    The sample must stay secret.  Standard amplification holds under add/remove neighbours; for a
    Gaussian the PLD accountant also analyses replace-one neighbours (n public), where ``sensitivity``
    is the replace-one bound (2C for a sum of records clipped to C).
    """

    event: PrivacyEvent
    rate: float

    def __post_init__(self) -> None:
        if not isinstance(self.event, PrivacyEvent):
            raise InvalidParameterError("event: expected a PrivacyEvent")
        check_probability(self.rate, "rate", open_left=True, open_right=False)


@dataclass(frozen=True)
class SampledWithoutReplacementEvent(PrivacyEvent):
    """``event`` run on a secret uniformly random subset of fixed size m out of n records.

    Standard amplification holds under replace-one neighbours with n public.
    """

    event: PrivacyEvent
    sample_size: int
    population_size: int

    def __post_init__(self) -> None:
        if not isinstance(self.event, PrivacyEvent):
            raise InvalidParameterError("event: expected a PrivacyEvent")
        check_int(self.sample_size, "sample_size", minimum=1)
        check_int(self.population_size, "population_size", minimum=1)
        if self.sample_size > self.population_size:
            raise InvalidParameterError("sample_size: must not exceed population_size")

    @property
    def rate(self) -> float:
        """m/n."""
        return self.sample_size / self.population_size


@dataclass(frozen=True)
class NonPrivateEvent(PrivacyEvent):
    """A release with no privacy guarantee (ε = ∞)."""

    reason: str = ""

    def pure_epsilon(self) -> float:
        return math.inf
