"""Calibrated noise mechanisms that compose their privacy event into an accountant before sampling.

Each mechanism is a frozen description (noise scale + declared sensitivity) with

* ``calibrate(...)``: the smallest noise for a budget and a declared sensitivity,
* ``event``: its :mod:`dpopt.accounting` event,
* ``variance`` / expected error, computed without data,
* ``release(value, rng=..., accountant=...)``: composes ``event`` into ``accountant`` first (which
  refuses when over budget), then draws the noise.

``rng="secure"`` (or a :class:`~dpopt.randomness.SecureRNG`) switches the Laplace, Gaussian,
report-noisy-min and exponential mechanisms to exact discrete samplers on a power-of-two grid
driven by the OS CSPRNG (:mod:`dpopt._discrete`); no floating-point sampler is called.  The
l2-Laplace (Gamma-norm) mechanism has no exact sampler and refuses ``rng="secure"`` (before
anything is composed).  This matters: textbook floating-point Laplace sampling leaves holes in
the set of outputs that depend on the input, and Mironov (2012) showed that a single release can
then reveal the input.  In secure mode the query value is snapped to the grid, the sensitivity is
rounded up to the grid and the noise scale inflated by the same factor (at most 1 + 2⁻¹⁰), so the
stated (ε, δ) holds for the discrete mechanism exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
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
from dpopt.randomness import RNGLike, SecureRNG, check_rng, is_secure

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
    """I.i.d. Laplace(0, scale) noise (exact discrete on a fine grid when ``rng="secure"``).

    A raw sampler: the hardened guarantee of ``rng="secure"`` needs the value it is added to on the
    same grid (use :meth:`LaplaceMechanism.release`, which snaps and accounts for the grid).
    """
    b = check_positive(scale, "scale")
    g = check_rng(rng)
    shape = (size,) if isinstance(size, int) else tuple(size)
    if isinstance(g, SecureRNG):
        return _discrete.secure_laplace(b, shape, sampler=_exact(g))
    return g.laplace(0.0, b, size=shape)


def gaussian_noise(sigma: float, size: int | tuple[int, ...] = (), *, rng: RNGLike) -> NDArray[np.float64]:
    """I.i.d. N(0, σ²) noise (exact discrete Gaussian on a fine grid when ``rng="secure"``).

    A raw sampler: the hardened guarantee of ``rng="secure"`` needs the value it is added to on the
    same grid (use :meth:`GaussianMechanism.release`, which snaps and accounts for the grid).
    """
    s = check_positive(sigma, "sigma")
    g = check_rng(rng)
    shape = (size,) if isinstance(size, int) else tuple(size)
    if isinstance(g, SecureRNG):
        return _discrete.secure_gaussian(s, shape, sampler=_exact(g))
    return g.normal(0.0, s, size=shape)


def l2_laplace_noise(alpha: float, dim: int, *, rng: RNGLike, size: int | None = None) -> NDArray[np.float64]:
    """Vector noise with density ∝ exp(-α‖v‖₂) on R^dim: norm ~ Gamma(dim, 1/α), uniform direction.

    E‖v‖₂ = dim/α and E‖v‖₂² = dim(dim+1)/α².  With ``size`` returns ``size`` independent vectors.
    ``rng="secure"`` is refused (:func:`_refuse_secure_l2`): there is no exact sampler for this law.
    """
    a = check_positive(alpha, "alpha")
    d = check_int(dim, "dim")
    if is_secure(rng):
        _refuse_secure_l2()
    g = check_rng(rng)
    assert isinstance(g, np.random.Generator)
    gen = g
    n = 1 if size is None else check_int(size, "size")
    direction = gen.standard_normal((n, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    radius = gen.gamma(shape=d, scale=1.0 / a, size=(n, 1))
    out = radius * direction
    return out[0] if size is None else out


def _exact(g: SecureRNG) -> _discrete.ExactSampler:
    """The exact sampler driven by the secure generator's uniform integers."""
    return _discrete.ExactSampler(g.randbelow)


def _refuse_secure_l2() -> None:
    raise InvalidParameterError(
        "rng='secure' is not supported by the l2-Laplace (Gamma-norm) mechanism: it has no exact "
        "sampler, and floating-point Gamma/normal draws do not give the hardened guarantee. Use "
        "GaussianMechanism (or LaplaceMechanism with an l1 sensitivity, e.g. sqrt(dim) times the l2 "
        "one) with rng='secure', or pass an int seed / Generator / None to use this mechanism"
    )


def _grid_units(values: NDArray[np.float64], grid: float, name: str) -> list[int]:
    """``values`` snapped to ``grid`` (ties up), as exact Python integers in grid units."""
    try:
        snapped = _discrete.snap_to_grid(values, grid)
    except InvalidParameterError:
        raise InvalidParameterError(
            f"{name}: too large for the secure grid (|{name}| / sensitivity must stay below about "
            "2**42); shift them by a public constant, or use a seeded rng instead of 'secure'"
        ) from None
    return [int(v) for v in (snapped / grid).tolist()]  # exact: |v| < 2**53, grid a power of two


def _secure_report_noisy_min(
    scores: NDArray[np.float64], scale: float, sensitivity: float, monotone: bool, g: SecureRNG
) -> int:
    """Report-noisy-min on the grid with exact discrete Laplace noise (no floating-point sampler).

    Proof sketch.  Snap the scores to ``grid`` (a power of two ``<= min(Δ, b) / 2**10``, public)
    with ties upward: ``x -> floor(x/grid + 1/2)`` is monotone and commutes with shifts by
    multiples of ``grid``, so snapped scores have sensitivity ``Δ_g = grid·ceil(Δ/grid) <= Δ (1 +
    2**-10)`` and stay monotone if the scores were.  Add discrete Laplace noise with
    ``P[grid·k] ∝ exp(-|grid k| / b')``, ``b' = b Δ_g / Δ`` (rounded up), and return the arg-min,
    ties uniformly at random.  Uniform tie-breaking is a data-independent random permutation
    followed by "first minimiser in that order", a mixture of deterministic rules, so it suffices
    to prove each rule private.  For a fixed rule and fixed other noises, candidate ``i`` wins iff
    its integer noise ``r_i <= T`` for an integer threshold ``T`` that moves by at most ``2Δ_g/grid``
    between neighbours (``Δ_g/grid`` one-sidedly for monotone scores, as in Dwork-Roth Claim 3.9),
    and the discrete Laplace cdf satisfies ``P[r <= T - j] >= q**j P[r <= T]``, ``q = exp(-grid/b')``
    (its pmf is log-concave with tail ratio ``q``).  Hence ε = 2Δ_g/b' <= 2Δ/b (Δ_g/b' <= Δ/b
    monotone): the event the mechanism composes.
    """
    grid = _discrete.power_of_two_grid(min(sensitivity, scale))
    grid_sens = _discrete.grid_sensitivity(sensitivity, grid)
    inflated = math.nextafter(scale * grid_sens / sensitivity, math.inf)  # round up: conservative
    units = _grid_units(scores, grid, "scores")
    sampler = _exact(g)
    noise = sampler.discrete_laplace_list(Fraction(inflated) / Fraction(grid), len(units))
    noisy = [u + r for u, r in zip(units, noise, strict=True)]
    low = min(noisy)
    best = [i for i, v in enumerate(noisy) if v == low]
    return best[0] if len(best) == 1 else best[g.randbelow(len(best))]


def _secure_exponential(
    utilities: NDArray[np.float64], epsilon: float, sensitivity: float, monotone: bool, g: SecureRNG
) -> int:
    """Exponential mechanism on the grid, sampled exactly with Bernoulli(exp(-γ)) (no floats drawn).

    Proof sketch.  Snap the utilities to ``grid`` (a power of two ``<= Δ / 2**10``, public), ties
    upward; the snapped utilities ``grid·k_i`` have sensitivity ``Δ_g = grid·ceil(Δ/grid) <= Δ (1 +
    2**-10)`` and stay monotone if the utilities were (snapping is monotone and commutes with shifts
    by multiples of ``grid``).  Select ``i`` with probability ``∝ exp(ε grid k_i / (c Δ_g))``
    (``c = 2``, or 1 for monotone utilities): the exponential mechanism for sensitivity ``Δ_g``,
    ε-DP (McSherry-Talwar), exactly the event the mechanism composes; the price of the grid is a
    utility scaled by ``Δ/Δ_g >= 1 - 2**-10``.  The weights are ``exp(-γ_i)`` with rational
    ``γ_i = (k_max - k_i) grid ε / (c Δ_g)`` (floats are exact dyadic rationals), and
    :meth:`~dpopt._discrete.ExactSampler.exp_weights_index` samples them exactly by rejection
    (uniform proposal, Bernoulli(exp(-γ_i)) acceptance; expected rounds <= number of candidates).
    Subtracting ``k_max`` only normalises the weights.
    """
    grid = _discrete.power_of_two_grid(sensitivity)
    grid_sens = _discrete.grid_sensitivity(sensitivity, grid)
    units = _grid_units(utilities, grid, "utilities")
    top = max(units)
    rate = Fraction(grid) * Fraction(epsilon) / ((1 if monotone else 2) * Fraction(grid_sens))
    return _exact(g).exp_weights_index([(top - k) * rate.numerator for k in units], rate.denominator)


def _secure_additive(
    value: NDArray[np.float64], scale: float, sensitivity: float, kind: str, g: SecureRNG
) -> NDArray[np.float64]:
    shape = value.shape
    n = max(int(np.prod(shape)), 1)
    grid = _discrete.default_granularity(scale, shape or 1, kind=kind)
    snapped = _discrete.snap_to_grid(value, grid)
    norm = 1 if kind == "laplace" else 2
    grid_sens = _discrete.grid_sensitivity(sensitivity, grid, dim=n, norm=norm)
    inflated = math.nextafter(scale * grid_sens / sensitivity, math.inf)  # round up: conservative
    if kind == "laplace":
        noise = _discrete.secure_laplace(inflated, shape, granularity=grid, sampler=_exact(g))
    else:
        noise = _discrete.secure_gaussian(inflated, shape, granularity=grid, sampler=_exact(g))
    return snapped + noise


# ------------------------------------------------------------------------------------- mechanisms
@dataclass(frozen=True)
class LaplaceMechanism:
    """Laplace mechanism: add i.i.d. Laplace(b) noise to a query of declared l1-sensitivity Δ₁.

    Privacy
    -------
    ε-DP with ε = Δ₁/b under the neighbouring relation the sensitivity was declared for
    (the accountant's).  Calibration is exact; there is no paper/tight distinction.

    Examples
    --------
    Release a count (sensitivity 1) with ε = 0.5; the accountant records it before noise is drawn:

    >>> from dpopt.accounting import Budget, make_accountant
    >>> acct = make_accountant("pld", budget=Budget(1.0, 1e-5))
    >>> mech = LaplaceMechanism.calibrate(0.5)
    >>> mech.scale
    2.0
    >>> noisy = mech.release(412.0, rng=0, accountant=acct)
    >>> print(acct.spent())
    (ε=0.5, δ=1e-05)-DP [pld, add_remove]
    >>> secure = mech.release(412.0, rng="secure")       # OS CSPRNG, exact discrete sampler
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
            out = _secure_additive(arr, self.scale, self.sensitivity, "laplace", g)
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

    Examples
    --------
    >>> from dpopt.accounting import Budget
    >>> mech = GaussianMechanism.calibrate(Budget(1.0, 1e-5))          # exact (analytic) σ
    >>> round(mech.sigma, 4)
    3.7306
    >>> round(GaussianMechanism.calibrate(Budget(1.0, 1e-5), method="classic").sigma, 4)
    4.8448
    >>> mech.release([10.0, 20.0, 30.0], rng=0).shape                   # one vector release
    (3,)
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
            out = _secure_additive(arr, self.sigma, self.sensitivity, "gaussian", g)
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
    With ``rng="secure"`` the scores are snapped to a power-of-two grid and the noise is exact
    discrete Laplace with the scale inflated by the grid's sensitivity rounding (at most a factor
    1 + 2⁻¹⁰), so the same ε holds exactly (proof sketch in ``_secure_report_noisy_min``).

    Examples
    --------
    Pick the most common of three categories (counts are monotone scores of sensitivity 1):

    >>> pick = ReportNoisyMin.calibrate(1.0, monotone=True, maximize=True)
    >>> pick.release([120.0, 30.0, 45.0], rng=0)
    0
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
        if isinstance(g, SecureRNG):
            return _secure_report_noisy_min(-s if self.maximize else s, self.scale, self.sensitivity,
                                            self.monotone, g)  # fmt: skip
        noise = laplace_noise(self.scale, s.shape, rng=g)
        noisy = -(s + noise) if self.maximize else s + noise
        best = np.flatnonzero(noisy == noisy.min())
        if best.size == 1:
            return int(best[0])
        return int(g.choice(best))


@dataclass(frozen=True)
class ExponentialMechanism:
    """Exponential mechanism: pick candidate i with probability ∝ exp(ε u_i / (2Δ)) (Δ/… if monotone).

    Privacy
    -------
    ε-DP for utilities of sensitivity Δ (ε u/Δ suffices for monotone utilities).  Sampling uses
    the Gumbel-max trick.  With ``rng="secure"`` no floating-point sampler is used: the utilities
    are snapped to a power-of-two grid, the sensitivity is rounded up to the grid (the factor
    ε/(2Δ) becomes ε/(2Δ_g), Δ_g <= Δ(1 + 2⁻¹⁰), so the stated ε holds exactly) and the index is
    drawn exactly with CSPRNG-driven Bernoulli(exp(-γ)) rejection sampling (proof sketch in
    ``_secure_exponential``).

    Examples
    --------
    >>> mech = ExponentialMechanism.calibrate(1.0)
    >>> mech.probabilities([0.0, 0.0, 10.0]).round(3)                   # utilities of sensitivity 1
    array([0.007, 0.007, 0.987])
    >>> mech.release([0.0, 0.0, 10.0], rng=0)
    2
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
        if isinstance(g, SecureRNG):
            return _secure_exponential(u, self.epsilon, self.sensitivity, self.monotone, g)
        return int(np.argmax(self._factor * u + g.gumbel(size=u.shape)))


@dataclass(frozen=True)
class L2LaplaceMechanism:
    """Vector "l2-Laplace" mechanism: add noise with density ∝ exp(-α‖v‖₂) (used by private ADMM).

    Privacy
    -------
    ε-DP with ε = α·Δ₂ for a vector query of l2-sensitivity Δ₂ (the density ratio at v and
    v + Δ is at most exp(α‖Δ‖₂)).  Neighbouring relation: the accountant's.  ``rng="secure"`` is
    refused with :class:`~dpopt.exceptions.InvalidParameterError` before anything is composed:
    no exact sampler exists for this law (use :class:`GaussianMechanism` in secure mode).

    Examples
    --------
    >>> mech = L2LaplaceMechanism.calibrate(1.0, sensitivity=0.1)      # a model vector, ‖Δ‖₂ <= 0.1
    >>> mech.alpha
    10.0
    >>> mech.release([0.5, -0.2, 0.1], rng=0).shape
    (3,)
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
        if is_secure(rng):
            _refuse_secure_l2()  # before composing: nothing is spent
        g = check_rng(rng)
        _compose(accountant, self.event, label)
        return v + l2_laplace_noise(self.alpha, v.size, rng=g)
