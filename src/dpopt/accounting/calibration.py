"""Noise calibration: the smallest noise that meets a target (ε, δ) for a stated event structure."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any, Literal

from dpopt._validation import check_int, check_positive, check_probability
from dpopt.accounting._dpa import dp_accounting  # imported on first use
from dpopt.accounting._dpa import optimize as _optimize
from dpopt.accounting.accountants import _KINDS, AccountantKind, Budget, make_accountant
from dpopt.accounting.events import (
    EpsilonDeltaEvent,
    GaussianEvent,
    LaplaceEvent,
    Neighbouring,
    PoissonSampledEvent,
    PrivacyEvent,
    RepeatedEvent,
    check_neighbouring,
)
from dpopt.exceptions import InvalidParameterError, PrivacyClaimWarning

__all__ = [
    "GaussianMethod",
    "advanced_composition_step",
    "calibrate",
    "calibrate_noise",
    "certify",
    "gaussian_epsilon",
    "gaussian_event",
    "gaussian_sigma",
    "laplace_scale",
]

#: Gaussian calibrations: ``"analytic"`` (Balle & Wang 2018), ``"classic"`` (Dwork-Roth) and
#: ``"coa"`` (see :func:`gaussian_sigma`).
GaussianMethod = Literal["analytic", "classic", "coa"]


def laplace_scale(epsilon: float, sensitivity: float = 1.0) -> float:
    """Laplace scale b = Δ₁/ε for one ε-DP release."""
    return check_positive(sensitivity, "sensitivity") / check_positive(epsilon, "epsilon")


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Exact ε at ``delta`` of one Gaussian release (analytic Gaussian mechanism, Balle-Wang 2018)."""
    s = check_positive(sigma, "sigma") / check_positive(sensitivity, "sensitivity")
    d = check_probability(delta, "delta", open_left=True)
    return _checked(lambda: dp_accounting.get_epsilon_gaussian(s, d), "ε", f"σ/Δ={s:.3g}, δ={d:.3g}")


def _checked(compute: Callable[[], Any], what: str, params: str) -> float:
    """Run a dp-accounting root finder; refuse (never return inf/NaN) where it cannot give a number."""
    try:
        value = float(compute())
    except (ValueError, ArithmeticError, RuntimeError):
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise InvalidParameterError(
            f"{what} cannot be computed for {params}: the parameters are outside the numerically "
            "supported range (ε up to ~1e4, δ above ~1e-300, noise and sensitivity within ~1e±150 of "
            "each other); use a smaller ε or a larger δ"
        )
    return value


def gaussian_sigma(
    epsilon: float, delta: float, sensitivity: float = 1.0, *, method: GaussianMethod = "analytic"
) -> float:
    """σ of one (ε, δ)-DP Gaussian release on a query of l2-sensitivity Δ.

    ``"analytic"`` (default) is the exact smallest σ (Balle-Wang 2018).  ``"classic"`` is
    Δ·sqrt(2 ln(1.25/δ))/ε (Dwork-Roth; proven only for ε < 1) and ``"coa"`` is the variant
    Δ·sqrt(2 ln(2/δ))/ε of the COA paper.  When a classic formula gives less noise than the exact
    requirement (large ε) a :class:`PrivacyClaimWarning` states the true ε.

    Examples
    --------
    >>> round(gaussian_sigma(1.0, 1e-5), 4), round(gaussian_sigma(1.0, 1e-5, method="classic"), 4)
    (3.7306, 4.8448)
    """
    eps = check_positive(epsilon, "epsilon")
    d = check_probability(delta, "delta", open_left=True)
    sens = check_positive(sensitivity, "sensitivity")
    exact = _checked(lambda: dp_accounting.get_sigma_gaussian(eps, d), "σ", f"ε={eps:.3g}, δ={d:.3g}") * sens
    if not (math.isfinite(exact) and exact > 0):
        raise InvalidParameterError(
            f"σ for ε={eps:.3g}, δ={d:.3g} and sensitivity {sens:.3g} is not a positive finite number "
            "(it under- or overflows); rescale the query so its sensitivity is nearer 1"
        )
    if method == "analytic":
        return exact
    if method not in ("classic", "coa"):
        raise InvalidParameterError("method: must be 'analytic', 'classic' or 'coa'")
    c = 1.25 if method == "classic" else 2.0
    sigma = sens * math.sqrt(2 * math.log(c / d)) / eps
    if not (math.isfinite(sigma) and sigma > 0):
        raise InvalidParameterError(
            f"the {method} σ for ε={eps:.3g}, δ={d:.3g} and sensitivity {sens:.3g} under- or overflows; "
            "rescale the query so its sensitivity is nearer 1"
        )
    if sigma < exact:
        true_eps = gaussian_epsilon(sigma, d, sens)
        warnings.warn(
            f"the {method} Gaussian calibration is not valid at ε={eps:g} (proven for ε < 1): "
            f"σ={sigma:.4g} gives only ε={true_eps:.4g} at δ={d:g}",
            PrivacyClaimWarning,
            stacklevel=2,
        )
    return sigma


def gaussian_event(
    epsilon: float, delta: float, sensitivity: float = 1.0, *, method: GaussianMethod = "analytic"
) -> EpsilonDeltaEvent:
    """The event of one Gaussian release calibrated to (ε, δ) by ``method``.

    Paper-rule accountants compose the claim (ε, δ); tight accountants analyse the source
    ``GaussianEvent(σ, Δ)``, so an unsound calibration shows up as a larger verified ε.
    """
    sigma = gaussian_sigma(epsilon, delta, sensitivity, method=method)
    return EpsilonDeltaEvent(
        float(epsilon),
        float(delta),
        source=GaussianEvent(sigma, float(sensitivity)),
        rule=f"{method}-gaussian",
    )


def advanced_composition_step(
    epsilon: float, delta: float, steps: int, *, slack_fraction: float = 0.5
) -> tuple[float, float]:
    """Per-step (ε0, δ0) such that ``steps``-fold strong composition gives (ε, δ).

    δ is split as δ' = slack_fraction·δ for the composition slack and δ0 = (1 - slack_fraction)δ/steps
    per step; ε0 solves ε0 sqrt(2k ln(1/δ')) + k ε0 (e^{ε0} - 1) = ε.
    """
    eps = check_positive(epsilon, "epsilon")
    d = check_probability(delta, "delta", open_left=True)
    k = check_int(steps, "steps")
    frac = check_probability(slack_fraction, "slack_fraction", open_left=True, open_right=False)
    slack = frac * d
    delta0 = (1 - frac) * d / k

    def excess(e0: float) -> float:
        return e0 * math.sqrt(2 * k * math.log(1 / slack)) + k * e0 * math.expm1(e0) - eps

    try:
        eps0 = float(_optimize.brentq(excess, 1e-300, eps, xtol=1e-15, rtol=1e-12))
    except (ValueError, ArithmeticError, RuntimeError):
        eps0 = math.nan
    if not (math.isfinite(eps0) and eps0 > 0):
        raise InvalidParameterError(
            f"advanced composition: no per-step ε0 > 0 for ε={eps:.3g}, δ={d:.3g} over {k} steps "
            "(under- or overflow); use fewer steps or a larger budget"
        )
    return eps0, delta0


def calibrate(
    make_event: Callable[[float], PrivacyEvent],
    budget: Budget,
    *,
    accountant: AccountantKind | str = "pld",
    neighbouring: Neighbouring = "add_remove",
    lower: float = 1e-3,
    upper: float = 1e3,
    rtol: float = 1e-3,
    **accountant_options: Any,
) -> float:
    """Smallest noise parameter p (up to relative ``rtol``) such that ``make_event(p)`` fits ``budget``.

    ``make_event`` must describe the *whole* planned release (e.g. a ``RepeatedEvent`` of T steps)
    and spend less as p grows.  The returned p is on the feasible side of the bisection, so
    composing ``make_event(p)`` into an accountant of the same kind never exceeds the budget.
    """
    if not isinstance(budget, Budget):
        raise InvalidParameterError("budget: expected a dpopt.accounting.Budget")
    lo, hi = check_positive(lower, "lower"), check_positive(upper, "upper")
    if lo >= hi:
        raise InvalidParameterError("lower: must be smaller than upper")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise InvalidParameterError(
            "the noise search range overflows for this budget (ε too small, or too many releases, for "
            "the sensitivity); use a larger ε or fewer releases"
        )
    acct = make_accountant(accountant, neighbouring=neighbouring, **accountant_options)

    def fits(p: float) -> bool:
        if not math.isfinite(p) or p <= 0:
            raise InvalidParameterError(
                "calibration failed: the noise level needed for this budget under- or overflows; use a "
                "larger ε, fewer releases or a sensitivity nearer 1"
            )
        return acct.fresh().would_spend(make_event(p), delta=budget.delta) <= budget.epsilon

    # Bracket by walking from the geometric middle of [lower, upper] in factors of 2, so that noise
    # levels far below the answer (where a PLD has a huge support) are never evaluated.
    p = math.sqrt(lo * hi)
    if fits(p):
        hi = p
        lo = p / 2
        while fits(lo):
            hi, lo = lo, lo / 2
            if lo < 1e-300:
                return hi
    else:
        lo = p
        hi = p * 2
        for _ in range(2000):
            if fits(hi):
                break
            lo, hi = hi, hi * 2
        else:
            raise InvalidParameterError("calibration failed: no finite noise level meets the budget")
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def calibrate_noise(
    budget: Budget,
    *,
    family: Literal["gaussian", "laplace"] = "gaussian",
    sensitivity: float = 1.0,
    steps: int = 1,
    sampling_rate: float | None = None,
    accountant: AccountantKind | str = "pld",
    neighbouring: Neighbouring = "add_remove",
) -> float:
    """Noise scale (Gaussian σ or Laplace b) for ``steps`` releases, optionally Poisson-subsampled.

    One unsampled Gaussian release uses the exact analytic calibration; one Laplace release, or
    Laplace releases under basic composition, use b = stepsΔ/ε; everything else bisects on the
    chosen accountant (default the tight PLD accountant).

    Examples
    --------
    >>> from dpopt.accounting import Budget
    >>> round(calibrate_noise(Budget(1.0, 1e-5)), 4)                       # one Gaussian release
    3.7306
    >>> round(calibrate_noise(Budget(1.0, 1e-5), steps=100), 1)            # 100 composed releases
    37.3
    >>> calibrate_noise(Budget(1.0), family="laplace", steps=10, accountant="basic")
    10.0
    """
    if not isinstance(budget, Budget):
        raise InvalidParameterError("budget: expected a dpopt.accounting.Budget")
    sens = check_positive(sensitivity, "sensitivity")
    k = check_int(steps, "steps")
    check_neighbouring(neighbouring)
    if {"paper": "basic", "tight": "pld"}.get(accountant, accountant) not in _KINDS:
        raise InvalidParameterError(
            f"accountant: unknown kind; choose one of {sorted(_KINDS)} (or 'paper' / 'tight')"
        )
    q = (
        None
        if sampling_rate is None
        else check_probability(sampling_rate, "sampling_rate", open_left=True, open_right=False)
    )
    if family not in ("gaussian", "laplace"):
        raise InvalidParameterError("family: must be 'gaussian' or 'laplace'")
    if family == "gaussian" and budget.delta == 0:
        raise InvalidParameterError("Gaussian noise needs δ > 0; use family='laplace' for pure ε-DP")
    if q is None or q == 1.0:
        if family == "gaussian" and k == 1 and accountant in ("pld", "tight", "rdp"):
            return gaussian_sigma(budget.epsilon, budget.delta, sens)
        if family == "gaussian" and accountant in ("pld", "tight"):
            # k Gaussians compose exactly to one with σ/√k (Dong-Roth-Su): the closed form, nudged
            # until the PLD accountant (pessimistic rounding) certifies it
            return certify(
                lambda p: RepeatedEvent(GaussianEvent(p, sens), k),
                math.sqrt(k) * gaussian_sigma(budget.epsilon, budget.delta, sens),
                budget,
                accountant="pld",
                neighbouring=neighbouring,
                ratio=1.0005,
                max_steps=2000,
            )
        if family == "laplace" and (k == 1 or accountant in ("basic", "paper")):
            scale = k * sens / budget.epsilon
            if not (math.isfinite(scale) and scale > 0):
                raise InvalidParameterError(
                    f"the Laplace scale {k} x {sens:.3g} / {budget.epsilon:.3g} under- or overflows; use a "
                    "larger ε, fewer releases or a sensitivity nearer 1"
                )
            return scale

    def make(p: float) -> PrivacyEvent:
        step: PrivacyEvent = GaussianEvent(p, sens) if family == "gaussian" else LaplaceEvent(p, sens)
        if q is not None and q < 1.0:
            step = PoissonSampledEvent(step, q)
        return RepeatedEvent(step, k) if k > 1 else step

    if family == "gaussian" and accountant in ("basic", "paper", "advanced"):
        raise InvalidParameterError(
            "paper-rule Gaussian calibration needs a per-step (ε, δ) split: use gaussian_event(ε/T, δ/T, "
            "method='classic') or advanced_composition_step(...), or a tight accountant"
        )
    scale = sens * (k if family == "laplace" else math.sqrt(k)) / budget.epsilon
    if not (math.isfinite(scale * 10) and scale / 100 > 0):
        raise InvalidParameterError(
            f"the noise scale for ε={budget.epsilon:.3g} over {k} releases of sensitivity {sens:.3g} under- "
            "or overflows; use a larger ε, fewer releases or a sensitivity nearer 1"
        )
    return calibrate(
        make, budget, accountant=accountant, neighbouring=neighbouring, lower=scale / 100, upper=scale * 10
    )


def certify(
    make_event: Callable[[float], PrivacyEvent],
    start: float,
    budget: Budget,
    *,
    accountant: AccountantKind | str = "pld",
    neighbouring: Neighbouring = "replace_one",
    ratio: float = 1.002,
    max_steps: int = 400,
) -> float:
    """Smallest noise parameter ``start·ratio^k`` whose whole planned event the accountant certifies.

    The companion of :func:`calibrate` for rules with a closed-form (or near-exact) answer: the
    closed form is the ``start``, and the value is nudged up until an accountant of ``accountant``
    kind -- which rounds pessimistically -- accepts ``make_event(p)`` within ``budget``.  The result
    is therefore on the certified side, within a factor ``ratio`` of the closed form when that is
    exact.  ``make_event`` must spend less as p grows.

    Examples
    --------
    Certify σ for 50 Gaussian releases, starting from the closed form σ₁·√50:

    >>> import math
    >>> from dpopt.accounting import Budget, GaussianEvent, RepeatedEvent
    >>> budget = Budget(1.0, 1e-5)
    >>> start = math.sqrt(50) * gaussian_sigma(1.0, 1e-5)
    >>> sigma = certify(lambda s: RepeatedEvent(GaussianEvent(s), 50), start, budget)
    >>> 1.0 <= sigma / start < 1.01
    True
    """
    if not isinstance(budget, Budget):
        raise InvalidParameterError("budget: expected a dpopt.accounting.Budget")
    p = check_positive(start, "start")
    acct = make_accountant(accountant, neighbouring=neighbouring)
    for _ in range(max_steps):
        if acct.would_spend(make_event(p), delta=budget.delta) <= budget.epsilon * (1 - 1e-9):
            return p
        p *= ratio
    raise InvalidParameterError(
        "calibration failed: the closed-form noise level is far from what the accountant certifies; "
        "use calibrate() (bisection) instead"
    )
