"""Calibrated noise mechanisms that compose their privacy event into an accountant before sampling.

Each mechanism is a frozen description (noise scale + declared sensitivity) with

* ``calibrate(...)``: the smallest noise for a budget and a declared sensitivity,
* ``event``: its :mod:`dpopt.accounting` event,
* ``variance`` / expected error, computed without data,
* ``release(value, rng=..., accountant=...)``: composes ``event`` into ``accountant`` first (which
  refuses when over budget), then draws the noise.

``rng="secure"`` (or a :class:`~dpopt.randomness.SecureRNG`) switches the Laplace and Gaussian
mechanisms to exact discrete samplers on a power-of-two grid driven by the OS CSPRNG
(:mod:`dpopt._discrete`).  This matters: textbook floating-point Laplace sampling leaves holes in
the set of outputs that depend on the input, and Mironov (2012) showed that a single release can
then reveal the input.  In secure mode the query value is snapped to the grid, the sensitivity is
rounded up to the grid and the noise scale inflated by the same factor (at most 1 + 2⁻¹⁰), so the
stated (ε, δ) holds for the discrete mechanism exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpopt import _discrete
from dpopt._validation import check_array, check_int, check_positive
from dpopt.accounting import (
    Accountant,
    Budget,
    EpsilonDeltaEvent,
    ExponentialEvent,
    GaussianEvent,
    GaussianMethod,
    L2LaplaceEvent,
    LaplaceEvent,
    PrivacyEvent,
    ReportNoisyMinEvent,
    charge,
    gaussian_sigma,
)
from dpopt.exceptions import InvalidParameterError
from dpopt.randomness import RNGLike, SecureRNG, check_rng

__all__ = [
    "ExponentialMechanism",
    "GaussianMechanism",
    "L2LaplaceMechanism",
    "LaplaceMechanism",
    "ReportNoisyMin",
    "gaussian_noise",
    "l2_laplace_noise",
    "laplace_noise",
]


def _compose(accountant: Accountant | None, event: PrivacyEvent, label: str) -> None:
    charge(accountant, event, label)  # the single commit path (dpopt.accounting.commit)


def _shape_of(value: ArrayLike) -> tuple[int, ...]:
    return tuple(np.shape(value))


# ------------------------------------------------------------------------------------ raw samplers
def laplace_noise(scale: float, size: int | tuple[int, ...] = (), *, rng: RNGLike) -> NDArray[np.float64]:
    """I.i.d. Laplace(0, scale) noise (exact discrete on a fine grid when ``rng="secure"``)."""
    b = check_positive(scale, "scale")
    g = check_rng(rng)
    shape = (size,) if isinstance(size, int) else tuple(size)
    if isinstance(g, SecureRNG):
        return _discrete.secure_laplace(b, shape)
    return g.laplace(0.0, b, size=shape)


def gaussian_noise(sigma: float, size: int | tuple[int, ...] = (), *, rng: RNGLike) -> NDArray[np.float64]:
    """I.i.d. N(0, σ²) noise (exact discrete Gaussian on a fine grid when ``rng="secure"``)."""
    s = check_positive(sigma, "sigma")
    g = check_rng(rng)
    shape = (size,) if isinstance(size, int) else tuple(size)
    if isinstance(g, SecureRNG):
        return _discrete.secure_gaussian(s, shape)
    return g.normal(0.0, s, size=shape)


def l2_laplace_noise(alpha: float, dim: int, *, rng: RNGLike, size: int | None = None) -> NDArray[np.float64]:
    """Vector noise with density ∝ exp(-α‖v‖₂) on R^dim: norm ~ Gamma(dim, 1/α), uniform direction.

    E‖v‖₂ = dim/α and E‖v‖₂² = dim(dim+1)/α².  With ``size`` returns ``size`` independent vectors.
    In secure mode the generator is seeded from the OS CSPRNG (no exact discrete sampler exists for
    this law; the floating-point caveat of the module docstring applies).
    """
    a = check_positive(alpha, "alpha")
    d = check_int(dim, "dim")
    g = check_rng(rng)
    gen = g.generator if isinstance(g, SecureRNG) else g
    n = 1 if size is None else check_int(size, "size")
    direction = gen.standard_normal((n, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    radius = gen.gamma(shape=d, scale=1.0 / a, size=(n, 1))
    out = radius * direction
    return out[0] if size is None else out


def _secure_additive(
    value: NDArray[np.float64], scale: float, sensitivity: float, kind: str
) -> NDArray[np.float64]:
    shape = value.shape
    n = max(int(np.prod(shape)), 1)
    grid = _discrete.default_granularity(scale, shape or 1, kind=kind)
    snapped = _discrete.snap_to_grid(value, grid)
    norm = 1 if kind == "laplace" else 2
    grid_sens = _discrete.grid_sensitivity(sensitivity, grid, dim=n, norm=norm)
    inflated = math.nextafter(scale * grid_sens / sensitivity, math.inf)  # round up: conservative
    if kind == "laplace":
        noise = _discrete.secure_laplace(inflated, shape, granularity=grid)
    else:
        noise = _discrete.secure_gaussian(inflated, shape, granularity=grid)
    return snapped + noise


# ------------------------------------------------------------------------------------- mechanisms
@dataclass(frozen=True)
class LaplaceMechanism:
    """Laplace mechanism: add i.i.d. Laplace(b) noise to a query of declared l1-sensitivity Δ₁.

    Privacy
    -------
    ε-DP with ε = Δ₁/b under the neighbouring relation the sensitivity was declared for
    (the accountant's).  Calibration is exact; there is no paper/tight distinction.
    """

    scale: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        check_positive(self.scale, "scale")
        check_positive(self.sensitivity, "sensitivity")

    @classmethod
    def calibrate(cls, epsilon: float | Budget, sensitivity: float = 1.0) -> LaplaceMechanism:
        """Smallest scale for ε-DP: b = Δ₁/ε."""
        eps = epsilon.epsilon if isinstance(epsilon, Budget) else check_positive(epsilon, "epsilon")
        return cls(check_positive(sensitivity, "sensitivity") / eps, float(sensitivity))

    @property
    def epsilon(self) -> float:
        """Δ₁/b."""
        return self.sensitivity / self.scale

    @property
    def event(self) -> LaplaceEvent:
        return LaplaceEvent(self.scale, self.sensitivity)

    @property
    def variance(self) -> float:
        """Per-coordinate noise variance 2b²."""
        return 2 * self.scale**2

    def expected_squared_error(self, dim: int = 1) -> float:
        """E‖noise‖₂² over ``dim`` coordinates."""
        return check_int(dim, "dim") * self.variance

    def release(
        self, value: ArrayLike, *, rng: RNGLike, accountant: Accountant | None = None, label: str = "laplace"
    ) -> Any:
        """Compose the event into ``accountant`` (if given), then return ``value`` + Laplace noise."""
        arr = check_array(value, "value")
        g = check_rng(rng)
        _compose(accountant, self.event, label)
        if isinstance(g, SecureRNG):
            out = _secure_additive(arr, self.scale, self.sensitivity, "laplace")
        else:
            out = arr + g.laplace(0.0, self.scale, size=arr.shape)
        return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class GaussianMechanism:
    """Gaussian mechanism: add i.i.d. N(0, σ²) noise to a query of declared l2-sensitivity Δ₂.

    Privacy
    -------
    (ε, δ)-DP.  ``calibrate(budget, Δ₂, method="analytic")`` (default) gives the exact smallest σ
    (Balle-Wang 2018).  ``method="classic"`` (Dwork-Roth, σ = Δ₂ sqrt(2 ln(1.25/δ))/ε) and
    ``"coa"`` (σ = Δ₂ sqrt(2 ln(2/δ))/ε) are the seeds' formulas, valid only for ε < 1; above it
    they warn with :class:`~dpopt.exceptions.PrivacyClaimWarning` and the event's source lets tight
    accountants report the true ε.  Neighbouring relation: the accountant's.
    """

    sigma: float
    sensitivity: float = 1.0
    claim: Budget | None = None
    method: str = "analytic"

    def __post_init__(self) -> None:
        check_positive(self.sigma, "sigma")
        check_positive(self.sensitivity, "sensitivity")

    @classmethod
    def calibrate(
        cls, budget: Budget, sensitivity: float = 1.0, *, method: GaussianMethod = "analytic"
    ) -> GaussianMechanism:
        """Smallest σ for one (ε, δ)-DP release by ``method`` (see class docstring)."""
        if not isinstance(budget, Budget):
            raise InvalidParameterError("budget: expected a dpopt.accounting.Budget")
        sigma = gaussian_sigma(budget.epsilon, budget.delta, sensitivity, method=method)
        return cls(sigma, float(sensitivity), claim=budget, method=method)

    @property
    def event(self) -> PrivacyEvent:
        """``GaussianEvent``, or the calibrated claim with the Gaussian as its source."""
        source = GaussianEvent(self.sigma, self.sensitivity)
        if self.claim is None:
            return source
        return EpsilonDeltaEvent(
            self.claim.epsilon, self.claim.delta, source=source, rule=f"{self.method}-gaussian"
        )

    @property
    def variance(self) -> float:
        """Per-coordinate noise variance σ²."""
        return self.sigma**2

    def expected_squared_error(self, dim: int = 1) -> float:
        """E‖noise‖₂² over ``dim`` coordinates."""
        return check_int(dim, "dim") * self.variance

    def release(
        self, value: ArrayLike, *, rng: RNGLike, accountant: Accountant | None = None, label: str = "gaussian"
    ) -> Any:
        """Compose the event into ``accountant`` (if given), then return ``value`` + Gaussian noise."""
        arr = check_array(value, "value")
        g = check_rng(rng)
        _compose(accountant, self.event, label)
        if isinstance(g, SecureRNG):
            out = _secure_additive(arr, self.sigma, self.sensitivity, "gaussian")
        else:
            out = arr + g.normal(0.0, self.sigma, size=arr.shape)
        return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class ReportNoisyMin:
    """Report-noisy-min (or max): add Laplace(b) to each score, release only the arg-min index.

    Privacy
    -------
    ε-DP with ε = 2Δ/b for arbitrary scores of sensitivity Δ, and ε = Δ/b when the scores are
    monotone (all move in the same direction between neighbours, e.g. counts).  The noisy scores
    are never released.  Ties (possible on the secure grid) are broken uniformly at random.
    """

    scale: float
    sensitivity: float = 1.0
    monotone: bool = False
    maximize: bool = False

    def __post_init__(self) -> None:
        check_positive(self.scale, "scale")
        check_positive(self.sensitivity, "sensitivity")

    @classmethod
    def calibrate(
        cls,
        epsilon: float | Budget,
        sensitivity: float = 1.0,
        *,
        monotone: bool = False,
        maximize: bool = False,
    ) -> ReportNoisyMin:
        """b = 2Δ/ε (general scores) or Δ/ε (monotone scores)."""
        eps = epsilon.epsilon if isinstance(epsilon, Budget) else check_positive(epsilon, "epsilon")
        sens = check_positive(sensitivity, "sensitivity")
        return cls((1.0 if monotone else 2.0) * sens / eps, sens, monotone, maximize)

    @property
    def epsilon(self) -> float:
        return (1.0 if self.monotone else 2.0) * self.sensitivity / self.scale

    @property
    def event(self) -> ReportNoisyMinEvent:
        return ReportNoisyMinEvent(self.scale, self.sensitivity, self.monotone)

    def release(
        self,
        scores: ArrayLike,
        *,
        rng: RNGLike,
        accountant: Accountant | None = None,
        label: str = "report-noisy-min",
    ) -> int:
        """Compose, then return the index of the smallest (largest if ``maximize``) noisy score."""
        s = check_array(scores, "scores", ndim=1)
        if s.size == 0:
            raise InvalidParameterError("scores: must contain at least one candidate")
        g = check_rng(rng)
        _compose(accountant, self.event, label)
        noise = laplace_noise(self.scale, s.shape, rng=g)
        noisy = -(s + noise) if self.maximize else s + noise
        best = np.flatnonzero(noisy == noisy.min())
        if best.size == 1:
            return int(best[0])
        gen = g.generator if isinstance(g, SecureRNG) else g
        return int(gen.choice(best))


@dataclass(frozen=True)
class ExponentialMechanism:
    """Exponential mechanism: pick candidate i with probability ∝ exp(ε u_i / (2Δ)) (Δ/… if monotone).

    Privacy
    -------
    ε-DP for utilities of sensitivity Δ (ε u/Δ suffices for monotone utilities).  Sampling uses
    the Gumbel-max trick; with ``rng="secure"`` the Gumbel variables come from a CSPRNG-seeded
    generator.
    """

    epsilon: float
    sensitivity: float = 1.0
    monotone: bool = False

    def __post_init__(self) -> None:
        check_positive(self.epsilon, "epsilon")
        check_positive(self.sensitivity, "sensitivity")

    @classmethod
    def calibrate(
        cls, epsilon: float | Budget, sensitivity: float = 1.0, *, monotone: bool = False
    ) -> ExponentialMechanism:
        """The mechanism at privacy parameter ε for utilities of sensitivity Δ."""
        eps = epsilon.epsilon if isinstance(epsilon, Budget) else check_positive(epsilon, "epsilon")
        return cls(eps, check_positive(sensitivity, "sensitivity"), monotone)

    @property
    def event(self) -> ExponentialEvent:
        return ExponentialEvent(self.epsilon)

    def probabilities(self, utilities: ArrayLike) -> NDArray[np.float64]:
        """Selection probabilities (for analysis and tests; computed from the utilities)."""
        u = check_array(utilities, "utilities", ndim=1)
        logits = self._factor * u
        logits -= logits.max()
        p = np.exp(logits)
        return p / p.sum()

    @property
    def _factor(self) -> float:
        return self.epsilon / ((1.0 if self.monotone else 2.0) * self.sensitivity)

    def release(
        self,
        utilities: ArrayLike,
        *,
        rng: RNGLike,
        accountant: Accountant | None = None,
        label: str = "exponential",
    ) -> int:
        """Compose, then sample an index with probability ∝ exp(ε u_i / (2Δ))."""
        u = check_array(utilities, "utilities", ndim=1)
        if u.size == 0:
            raise InvalidParameterError("utilities: must contain at least one candidate")
        g = check_rng(rng)
        _compose(accountant, self.event, label)
        gen = g.generator if isinstance(g, SecureRNG) else g
        return int(np.argmax(self._factor * u + gen.gumbel(size=u.shape)))


@dataclass(frozen=True)
class L2LaplaceMechanism:
    """Vector "l2-Laplace" mechanism: add noise with density ∝ exp(-α‖v‖₂) (used by private ADMM).

    Privacy
    -------
    ε-DP with ε = α·Δ₂ for a vector query of l2-sensitivity Δ₂ (the density ratio at v and
    v + Δ is at most exp(α‖Δ‖₂)).  Neighbouring relation: the accountant's.
    """

    alpha: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        check_positive(self.alpha, "alpha")
        check_positive(self.sensitivity, "sensitivity")

    @classmethod
    def calibrate(cls, epsilon: float | Budget, sensitivity: float = 1.0) -> L2LaplaceMechanism:
        """α = ε/Δ₂."""
        eps = epsilon.epsilon if isinstance(epsilon, Budget) else check_positive(epsilon, "epsilon")
        return cls(eps / check_positive(sensitivity, "sensitivity"), float(sensitivity))

    @property
    def epsilon(self) -> float:
        return self.alpha * self.sensitivity

    @property
    def event(self) -> L2LaplaceEvent:
        return L2LaplaceEvent(self.alpha, self.sensitivity)

    def expected_norm(self, dim: int) -> float:
        """E‖v‖₂ = dim/α."""
        return check_int(dim, "dim") / self.alpha

    def expected_squared_error(self, dim: int) -> float:
        """E‖v‖₂² = dim(dim + 1)/α²."""
        d = check_int(dim, "dim")
        return d * (d + 1) / self.alpha**2

    def release(
        self,
        value: ArrayLike,
        *,
        rng: RNGLike,
        accountant: Accountant | None = None,
        label: str = "l2-laplace",
    ) -> NDArray[np.float64]:
        """Compose, then return ``value`` (a vector) + l2-Laplace noise."""
        v = check_array(value, "value", ndim=1)
        g = check_rng(rng)
        _compose(accountant, self.event, label)
        return v + l2_laplace_noise(self.alpha, v.size, rng=g)
