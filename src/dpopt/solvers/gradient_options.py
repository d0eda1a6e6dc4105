"""Options of the DP gradient methods (:mod:`dpopt.solvers.gradient`, :mod:`dpopt.solvers.multistage`).

One frozen dataclass family: :class:`GradientOptions` holds the options every method of the family
takes (number of steps, batches, clipping, noise, constants, start, callback), and each method adds its own
step rule's options in a subclass (:class:`GDOptions`, :class:`HeavyBallOptions`, :class:`NesterovOptions`,
:class:`GDwSOptions`, :class:`OnlineGDwSOptions`, :class:`MASGOptions`, :class:`MAGOptions`).
Values are checked once, when the object is built (``__post_init__``); the checks that need the
data or the budget (the constraint on ``sampling_rate``, ``x0``'s length) stay in the methods.

A method takes ``options=`` and/or the options as keyword arguments (``dp_gd(..., max_iter=50)``
is ``dp_gd(..., options=GDOptions(max_iter=50))``; keywords override fields of ``options``; the old
names ``iterations=`` and ``max_iterations=`` of ``max_iter`` still work, with a
``DeprecationWarning``, for one release).  The numeric ranges are the fields' ``metadata["range"]``:
:class:`~dpopt.solvers.specs.MethodSpec` reads names, types, defaults and ranges from these classes.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from dpopt._validation import check_int, check_positive
from dpopt.exceptions import InvalidParameterError
from dpopt.iteration import Callback as IterCallback

__all__ = [
    "GDOptions",
    "GDwSOptions",
    "GradientOptions",
    "HeavyBallOptions",
    "MAGOptions",
    "MASGOptions",
    "MomentumOptions",
    "NesterovOptions",
    "OnlineGDwSOptions",
]

Callback = IterCallback
ClipNorm = Literal["auto", "l1", "l2"]
GradScale = Literal["sum", "mean"]


def _ranged(default: Any, *bounds: Any) -> Any:
    """A field with a numeric range ``(low, high[, low_open, high_open])`` read by the method specs."""
    return field(default=default, metadata={"range": tuple(bounds)})


def _choice(value: Any, name: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        listed = ", ".join(repr(c) for c in choices[:-1]) + f" or {choices[-1]!r}"
        raise InvalidParameterError(f"{name}: must be {listed}")


@dataclass(frozen=True, kw_only=True)
class _CoreOptions:
    """Options of every DP gradient method (also of the one-pass :func:`dp_online_gdws`)."""

    clip: float | None = _ranged(2.0, 0, None, True)
    clip_norm: ClipNorm = "auto"
    noise: str = "auto"
    grad_scale: GradScale = "sum"
    constants: str = "declared"
    smoothness: float | None = _ranged(None, 0, None, True)
    strong_convexity: float | None = _ranged(None, 0, None, True)
    x0: Any = None
    callback: Callback | None = None

    def __post_init__(self) -> None:
        _choice(self.grad_scale, "grad_scale", ("sum", "mean"))
        _choice(self.constants, "constants", ("declared", "data"))
        _choice(self.noise, "noise", ("auto", "laplace", "gaussian"))
        _choice(self.clip_norm, "clip_norm", ("auto", "l1", "l2"))
        if self.clip is not None:
            check_positive(self.clip, "clip")
        if self.smoothness is not None:
            check_positive(self.smoothness, "smoothness")
        if self.strong_convexity is not None:
            check_positive(self.strong_convexity, "strong_convexity")


@dataclass(frozen=True, kw_only=True)
class GradientOptions(_CoreOptions):
    """Options shared by the DP gradient methods with a planned number of steps.

    Attributes
    ----------
    max_iter : int
        Number of steps T (fixed before the run; formerly ``iterations``).
    batch_size, sampling_rate : optional
        Mini-batch size m / declared Poisson rate q (add/remove); ``None``: full gradients.
    clip, clip_norm, noise, grad_scale, constants, smoothness, strong_convexity, x0, callback
        See the methods' docstrings.
    paper_rule, tight_accountant
        Calibration details (see the methods' docstrings).
    """

    max_iter: int = _ranged(1000, 1, None)
    batch_size: int | None = _ranged(None, 1, None)
    sampling_rate: float | None = _ranged(None, 0, 1, True, False)
    paper_rule: Literal["bst14", "thesis"] = "bst14"
    tight_accountant: Literal["auto", "rdp", "pld"] = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self.max_iter, "max_iter")
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size")


def _check_step(step: Any, rules: tuple[str, ...]) -> None:
    """``step`` is one of the named ``rules`` or a positive constant."""
    if not (isinstance(step, str) and step in rules):
        check_positive(step, "step")


def check_momentum(value: Any) -> float:
    b = float(value)
    if not 0 <= b < 1:
        raise InvalidParameterError("momentum: must lie in [0, 1)")
    return b


def check_smoothing(value: Any) -> float:
    b = float(value)
    if not 0 < b <= 1:
        raise InvalidParameterError("smoothing: the weight β must lie in (0, 1]")
    return b


@dataclass(frozen=True, kw_only=True)
class GDOptions(GradientOptions):
    """Options of :func:`~dpopt.solvers.gradient.dp_gd` (DP-GD / DP-SGD)."""

    step: str | float = "inv_sqrt"
    step_scale: float = _ranged(1.0, 0, None, True)
    average: Literal["none", "suffix", "auto"] = "none"
    grad_scale: GradScale = "mean"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.step in ("inv_sqrt", "noise_scaled"):
            check_positive(self.step_scale, "step_scale")
        _check_step(self.step, ("inv_sqrt", "inverse_L", "noise_scaled"))
        _choice(self.average, "average", ("none", "suffix", "auto"))


@dataclass(frozen=True, kw_only=True)
class MomentumOptions(GradientOptions):
    """Constant step and momentum: the options of DP-HB and DP-NAG."""

    step: float | None = None
    momentum: float | None = _ranged(None, 0, 1, False, True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.step is not None:
            check_positive(self.step, "step")
        if self.momentum is not None:
            check_momentum(self.momentum)


@dataclass(frozen=True, kw_only=True)
class HeavyBallOptions(MomentumOptions):
    """Options of :func:`~dpopt.solvers.gradient.dp_heavy_ball` (DP-HB / DP-SHB)."""


@dataclass(frozen=True, kw_only=True)
class NesterovOptions(MomentumOptions):
    """Options of :func:`~dpopt.solvers.gradient.dp_nesterov` (DP-NAG / DP-SNAG)."""


@dataclass(frozen=True, kw_only=True)
class _SmoothingOptions(_CoreOptions):
    """The smoothing weight and step rule of DP-GDwS (shared with the one-pass variant)."""

    smoothing: float = _ranged(0.1, 0, 1, True, False)
    step: str | float = "noise_aware"
    safeguard: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_smoothing(self.smoothing)
        _check_step(self.step, ("noise_aware", "inverse_L"))


@dataclass(frozen=True, kw_only=True)
class GDwSOptions(GradientOptions, _SmoothingOptions):
    """Options of :func:`~dpopt.solvers.gradient.dp_gdws` (DP-GDwS / DP-SGDwS)."""

    first_step: Literal["auto", "full", "subsample"] = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice(self.first_step, "first_step", ("auto", "full", "subsample"))


@dataclass(frozen=True, kw_only=True)
class OnlineGDwSOptions(_SmoothingOptions):
    """Options of :func:`~dpopt.solvers.gradient.dp_online_gdws` (one pass over disjoint buckets)."""

    bucket_size: int = _ranged(10, 1, None)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self.bucket_size, "bucket_size")


@dataclass(frozen=True, kw_only=True)
class _StageOptions(GradientOptions):
    """The stage-length options of the multistage methods."""

    p: int = _ranged(1, 1, None)
    first_stage: int | None = _ranged(None, 1, None)


@dataclass(frozen=True, kw_only=True)
class MASGOptions(_StageOptions):
    """Options of :func:`~dpopt.solvers.multistage.dp_masg` (DP M-ASG / M-ASG*)."""

    variant: Literal["m-asg", "m-asg*"] = "m-asg"
    initial_gap: float | None = _ranged(None, 0, None, True)

    def __post_init__(self) -> None:
        _choice(self.variant, "variant", ("m-asg", "m-asg*"))
        super().__post_init__()


@dataclass(frozen=True, kw_only=True)
class MAGOptions(_StageOptions):
    """Options of :func:`~dpopt.solvers.multistage.dp_mag` (DP-MAG / DP-SMAG)."""

    stage_rule: Literal["default", "noise_aware_fixed_point"] = "default"
    momentum: Literal["fixed", "stage"] = "fixed"
    step: Literal["noise_aware", "masg"] = "noise_aware"
    safeguard: bool = False
    grad_scale: GradScale = "mean"

    def __post_init__(self) -> None:
        _choice(self.stage_rule, "stage_rule", ("default", "noise_aware_fixed_point"))
        _choice(self.momentum, "momentum", ("fixed", "stage"))
        _choice(self.step, "step", ("noise_aware", "masg"))
        super().__post_init__()


O = TypeVar("O", bound=_CoreOptions)

#: Old names of ``max_iter`` (accepted with a ``DeprecationWarning`` until the next release).
DEPRECATED_ITERATION_NAMES = ("iterations", "max_iterations")


def _renamed(overrides: Mapping[str, Any], method: str) -> Mapping[str, Any]:
    """``overrides`` with the deprecated names of ``max_iter`` renamed (warned)."""
    old = [k for k in DEPRECATED_ITERATION_NAMES if k in overrides]
    if not old:
        return overrides
    if len(old) > 1 or "max_iter" in overrides:
        raise InvalidParameterError(f"max_iter: pass either max_iter or {old[0]}, not both")
    warnings.warn(
        f"{method}(..., {old[0]}=...) is deprecated; pass max_iter=... (the old name will be removed in the "
        "next release)",
        DeprecationWarning,
        stacklevel=4,
    )
    out = {k: v for k, v in overrides.items() if k != old[0]}
    out["max_iter"] = overrides[old[0]]
    return out


def build_options(kind: type[O], options: O | None, overrides: Mapping[str, Any], method: str) -> O:
    """``options`` (default: ``kind()``) with the keyword ``overrides`` applied, checked once.

    Raises ``TypeError`` for a keyword that is not an option of ``method`` (as Python does for an
    unknown keyword argument) and :class:`InvalidParameterError` for an ``options`` of another type.
    """
    if options is not None and not isinstance(options, kind):
        raise InvalidParameterError(f"options: expected a {kind.__name__} for {method}")
    if issubclass(kind, GradientOptions):
        overrides = _renamed(overrides, method)
    names = {f.name for f in dataclasses.fields(kind)}
    for key in overrides:
        if key not in names:
            raise TypeError(f"{method}() got an unexpected keyword argument {key!r}")
    if options is None:
        return kind(**overrides)
    return dataclasses.replace(options, **overrides) if overrides else options


# ------------------------------------------------------------------------------------------------
# Shared documentation of the options (filled into the methods' docstrings by ``_docfmt``)
# ------------------------------------------------------------------------------------------------

_COMMON_DOC = """
    problem : ERMProblem
        Generalised-linear loss with declared ``bounds`` (needed for L) and ``l2_penalty`` (= 2λ of
        the thesis).
    X : array-like of shape (n_samples, n_features)
        Private features (checked against the declared bounds).
    y : array-like of shape (n_samples,)
        Private labels.
    budget : Budget, (ε, δ) or "non-private"
        Privacy budget; ``"non-private"`` switches the noise off (clipping stays).
    rng : int, Generator, "secure" or None
        Randomness for the noise and the batches (keyword only; ``"secure"`` = CSPRNG and exact
        discrete noise samplers).
    calibration : {"tight", "paper"}, default "tight"
        ``"tight"``: sound calibration (Laplace with l1 sensitivity for δ = 0, Gaussian with tight
        accounting for δ > 0).  ``"paper"``: the thesis's arithmetic (see *Privacy*).
    accountant : Accountant, optional
        Caller's ledger; the whole planned event is composed into it before any noise is drawn.
    diagnostics : bool, default False
        Also return **non-private** diagnostics (objective, gradient norm) computed on raw data.
    options : GradientOptions, optional
        All the options below as one frozen object (the method's subclass of
        :class:`~dpopt.solvers.gradient_options.GradientOptions`, checked when built); options passed
        as keyword arguments override its fields.
    max_iter : int, default 1000
        Number of steps T (fixed before the run).  ``iterations=`` and ``max_iterations=`` are the
        deprecated old names (a ``DeprecationWarning``; removed in the next release).
    batch_size : int, optional
        Mini-batch size m (``None`` or ``>= n``: full gradients).  With ``sampling_rate``: the
        declared (public) expected batch size, used as the normaliser of the noisy sum.
    sampling_rate : float, optional
        Declared (public) Poisson sampling rate q in (0, 1].  Switches the analysis to **add/remove**
        neighbours with nothing taken from the data's size (requires ``batch_size`` and
        ``calibration="tight"``; every step is sampled).  Default: q = m/n with n public, replace-one.
    clip : float or None, default 2.0
        Per-example gradient clipping threshold C (the thesis: 2).  ``None``: no clipping, the
        per-example bound then comes from the declared data bounds.
    clip_norm : {"auto", "l1", "l2"}, default "auto"
        Norm of the clipping: l1 for Laplace noise, l2 for Gaussian noise.
    noise : {"auto", "laplace", "gaussian"}, default "auto"
        ``"auto"``: Laplace when δ = 0 or with the paper calibration, Gaussian when δ > 0.
    grad_scale : {"sum", "mean"}
        Sum of per-example gradients over the batch (the thesis) or their mean.
    constants : {"declared", "data"}, default "declared"
        Where L and μ come from (``"data"`` only to reproduce the thesis; it voids the guarantee).
    smoothness, strong_convexity : float, optional
        Declared (public) per-example L and μ of the mean-scale objective, overriding the defaults.
    paper_rule : {"bst14", "thesis"}, default "bst14"
        The thesis's subsampling lemma used by ``calibration="paper"`` (2(m/n)ε0 or 2(e^ε0 - 1)m/n).
    tight_accountant : {"auto", "rdp", "pld"}, default "auto"
        Accountant calibrating Poisson-subsampled Gaussian noise: ``"auto"`` = PLD (the tight one:
        for the same noise RDP reports about 9% more ε); ``"rdp"`` only under add/remove
        (``sampling_rate`` given; RDP cannot analyse Poisson sampling under replace-one).
    x0 : array-like, optional
        Starting point (default 0; must not depend on the data); projected onto the constraint set.
    callback : callable, optional
        ``callback(info)`` after every step with a :class:`dpopt.iteration.IterationInfo`
        (``info.nit`` = t = 1..T, ``info.x`` = x_t, read-only); returning ``True`` or raising
        ``StopIteration`` stops the run (status ``"stopped"``; all T steps were paid for).  The
        iterates are part of the private release; whatever the callback computes from raw data is not.
"""

_COMMON_PRIVACY = """
    Every step releases ``Σ_{i∈B} ĝ_i(x) + |B|·l2_penalty·x + noise`` where ``ĝ_i`` is the loss
    gradient of record i clipped to norm ``clip`` in ``clip_norm`` (or bounded by the declared data
    bounds when ``clip=None``); the iterates are post-processing.  The whole planned event (T steps,
    sampling) is composed into the accountant(s) before any noise is drawn.

    * ``calibration="tight"``, δ = 0: Laplace noise, l1 sensitivity ``2C₁`` under **replace-one**
      neighbours (n public); full-data steps get ε/T each (basic composition); batches (fixed size m,
      without replacement, secret) use the tight amplification ln(1 + (m/n)(e^ε0 - 1)).
    * ``calibration="tight"``, δ > 0: Gaussian noise, l2 sensitivity; full data: replace-one,
      exact Gaussian composition (PLD-certified); batches: Poisson sampling with rate m/n under
      **replace-one** neighbours (n public; the two contributions of the replaced record differ by
      at most 2C₂), PLD-calibrated.
    * ``sampling_rate=q`` declared: **add/remove** neighbours; every step is Poisson-sampled at q,
      the noisy sum is normalised by the declared ``batch_size``, sensitivity C₂ (Gaussian) or C₁
      (Laplace); the data's size reaches neither the calibration nor the result
      (``parameters["n_samples"]`` is None).  ``privacy.neighbouring`` and a note say which
      analysis was used.
    * ``calibration="paper"``: the thesis's arithmetic -- Laplace, ε/T per step, its subsampling
      lemma.  Where it is unsound (per-step ε0 > 1 in the lemma, spec P6; full-gradient first step,
      P8; data-derived L/μ, P9) a :class:`~dpopt.exceptions.PrivacyClaimWarning` is issued and
      ``result.privacy.true_epsilon`` is the true figure.

    Data bounds are checked (or enforced by clipping with ``DataBounds(clip=True)``); no
    sensitivity is computed from the data.  Batch indices are never logged or returned.

    Feasibility: with a constraint set C every iterate is projected onto C (projected gradient;
    momentum methods project the new iterate, their extrapolated points may leave C), so the
    returned point lies in C.  The per-example bound behind the sensitivity is enforced by clipping
    at every point where a gradient is taken (also with ``clip=None``, where the bound comes from
    the declared data bounds over C and the clipping is a no-op inside C).
"""


_MOMENTUM_DOC = """
    step : float, optional
        Constant step α (default 1/L).
    momentum : float, optional
        β̄ in [0, 1) (default from κ).  Without strong convexity (``l2_penalty = 0`` and no
        ``strong_convexity``) the default runs on ``F(θ) + (μ_T/2)‖θ‖²``, a public surrogate ridge
        with ``μ_T = L/κ_T``, ``κ_T = max(4, (T/(2 ln(T+1)))²)`` (:func:`surrogate_condition_number`),
        whose bias is at most ``(μ_T/2)‖u‖²`` against any comparator u; ``parameters["surrogate_ridge"]``
        reports μ_T (0 when the problem has its own ridge).

    Returns
    -------
    OptimizeResult
        The last iterate; ``parameters`` holds the step α, the momentum β̄ and αL.

    Privacy
    -------
    {privacy}
"""


def _docfmt(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Fill the shared parameter, privacy and momentum texts into ``fn``'s docstring."""
    if fn.__doc__:
        for key, text in (
            ("{common}", _COMMON_DOC),
            ("{privacy}", _COMMON_PRIVACY),
            ("{momentum}", _MOMENTUM_DOC),
        ):
            fn.__doc__ = fn.__doc__.replace(key, text.strip())
    return fn
