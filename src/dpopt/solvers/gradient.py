"""Differentially private first-order methods of seed 003 ch. 4 and their baselines.

* :func:`dp_gd` -- DP-GD / DP-SGD (step ``1/√t`` as in Song et al. 2013, or ``1/L``).
* :func:`dp_heavy_ball` -- DP-HB / DP-SHB (``α = 1/L``, momentum ``((√κ-1)/(√κ+1))²``).
* :func:`dp_nesterov` -- DP-NAG / DP-SNAG (``α = 1/L``, momentum ``(√κ-1)/(√κ+1)``).
* :func:`dp_gdws` -- DP-GDwS / DP-SGDwS: exponential smoothing of the noisy gradients with weight β
  and the thesis's noise-aware step (eqs. 4.21 / 4.55) (Algorithms 4 and 6).
* :func:`dp_online_gdws` -- DP-onlineGDwS: one pass over disjoint buckets (§3.6 of the spec).

Every method releases, at each step, the sum of per-example **clipped** gradients of a batch (or of
all records) plus noise, and only post-processes those releases.  The problem is an
:class:`~dpopt.problems.ERMProblem` with a generalised linear loss; with ``l2_penalty = 2λ`` its
objective times n is the thesis's ``F(x) = Σ_i [ℓ_i(x) + λ‖x‖²]`` (eq. 4.60, minimisation,
"per-sample" regulariser).  ``grad_scale="sum"`` (default for the thesis's methods) runs on the
sum-scaled gradient of the thesis: ``Σ_{i∈B} ĝ_i(x) + |B|·l2_penalty·x``; ``"mean"`` divides it by
the (nominal) batch size.  Noise calibration, accounting and the step-size formulas live in
:mod:`dpopt.solvers.dp_calibration`.

Without a ridge (``l2_penalty = 0``, no declared μ) the methods whose momentum needs μ add the public
surrogate ridge ``(μ_T/2)‖θ‖²``, ``μ_T = L/κ_T`` with κ_T from the public iteration count (see
:func:`surrogate_condition_number`); the ridge is data-independent, so the privacy analysis is unchanged.

Constants L and μ (step sizes, momentum) come from the declared bounds by default
(``L = φ''_max R² + l2_penalty``, ``μ = l2_penalty`` per example), or from ``smoothness`` /
``strong_convexity`` given by the user (public), or -- only to reproduce the thesis -- from the

The options of each method are one frozen object (:mod:`dpopt.solvers.gradient_options`,
``options=``), also accepted as keyword arguments; the driver (data, clipping, noisy oracle, plan,
result) is :mod:`dpopt.solvers.gradient_driver`, the step rules :mod:`dpopt.solvers.gradient_steps`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpopt.accounting import Accountant
from dpopt.problems import ERMProblem
from dpopt.randomness import RNGLike
from dpopt.solvers._result import OptimizeResult
from dpopt.solvers.dp_calibration import Segment
from dpopt.solvers.gradient_driver import (
    Array,
    _Context,
    _finish,
    _method_name,
    _setup,
    _smoothed_loop,
    _stage_loop,
    _uniform_segments,
    _x0,
    surrogate_condition_number,
)
from dpopt.solvers.gradient_options import (
    GDOptions,
    GDwSOptions,
    GradientOptions,
    HeavyBallOptions,
    MomentumOptions,
    NesterovOptions,
    OnlineGDwSOptions,
    _docfmt,
    build_options,
    check_momentum,
    check_smoothing,
)
from dpopt.solvers.gradient_steps import (
    NOISE_SCALED_STEP,
    SUFFIX_AVERAGE_MULTIPLIER,
    _gd_steps,
    _gdws_step,
    _momentum_default,
    _step_value,
    _suffix_start,
    noise_scaled_step,
)
from dpopt.solvers.minimize import BudgetLike

__all__ = [
    "NOISE_SCALED_STEP",
    "SUFFIX_AVERAGE_MULTIPLIER",
    "GDOptions",
    "GDwSOptions",
    "GradientOptions",
    "HeavyBallOptions",
    "MomentumOptions",
    "NesterovOptions",
    "OnlineGDwSOptions",
    "dp_gd",
    "dp_gdws",
    "dp_heavy_ball",
    "dp_nesterov",
    "dp_online_gdws",
    "noise_scaled_step",
    "surrogate_condition_number",
]


@_docfmt
def dp_gd(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str = "tight",
    accountant: Accountant | None = None,
    diagnostics: bool = False,
    options: GDOptions | None = None,
    **kwargs: Any,
) -> OptimizeResult:
    """DP gradient descent (DP-GD; DP-SGD with ``batch_size``): ``x_{t+1} = x_t - α_t g̃(x_t)``.

    Parameters
    ----------
    {common}
    step : {"inv_sqrt", "inverse_L", "noise_scaled"} or float, default "inv_sqrt"
        ``"inv_sqrt"``: ``α_t = step_scale/√t`` (Song et al. 2013, the thesis's baseline);
        ``"inverse_L"``: ``α = 1/L``; ``"noise_scaled"``: the constant ``α = step_scale ·
        min(1, NOISE_SCALED_STEP / r)`` with ``r`` the per-step noise standard deviation in units of
        the per-example gradient bound (public: fixed by the plan before any data access; the
        smaller step under heavier noise, as the noise-dominated SGD analysis asks for α ∝ 1/σ);
        a float: that constant step.
    step_scale : float, default 1.0
        Multiplier of the ``1/√t`` schedule.
    average : {"none", "suffix", "auto"}, default "none"
        Output: ``"none"`` the last iterate; ``"suffix"`` the average of the last ⌊T/2⌋ iterates
        (suffix averaging, Rakhlin-Shamir-Sridharan 2012, Shamir-Zhang 2013: it averages out the
        injected noise; post-processing); ``"auto"`` suffix averaging when the per-step noise
        multiplier σ/Δ (public, fixed by the plan) is at least ``SUFFIX_AVERAGE_MULTIPLIER``, the last
        iterate otherwise.  ``minimize(..., neighbouring="add_remove")`` uses ``"auto"``.

    Notes
    -----
    ``grad_scale`` defaults to ``"mean"`` here: with sum-scaled gradients (‖∇F‖ ~ n) the ``1/√t``
    step diverges (spec N9).

    Returns
    -------
    OptimizeResult
        The last iterate; ``parameters`` holds the noise scales, sensitivities and step rule.

    Privacy
    -------
    {privacy}
    """
    o = build_options(GDOptions, options, kwargs, "dp_gd")
    ctx = _setup(problem, X, y, budget=budget, rng=rng, calibration=calibration, options=o,
                 accountant=accountant, diagnostics=diagnostics)  # fmt: skip
    T = int(o.max_iter)
    ctx.make_plan(_uniform_segments(ctx, T), "dp-gd")
    alphas = _gd_steps(ctx, o, T)
    start, multiplier = _suffix_start(ctx, o.average, T)
    x = ctx.project(_x0(o.x0, ctx.d))
    acc, count = np.zeros_like(x), 0
    for t in range(T):
        x = ctx.project(x - alphas[t] * ctx.gradient(x, t))
        if t >= start:
            acc += x
            count += 1
        if ctx.notify(o.callback, t + 1, x):
            break
    out = acc / count if count else x  # a convex combination of points of the set stays in it
    step = o.step
    return _finish(
        ctx, out, T=T, method=_method_name("dp_gd", ctx),
        params={"step": step if isinstance(step, str) else "constant", "step_first": float(alphas[0]),
                "step_last": float(alphas[-1]), "average": "suffix" if count else "none",
                "averaged_iterates": count, "noise_multiplier": multiplier},
        message=f"ran the planned T={T} noisy gradient steps",
    )  # fmt: skip


@_docfmt
def dp_heavy_ball(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str = "tight",
    accountant: Accountant | None = None,
    diagnostics: bool = False,
    options: HeavyBallOptions | None = None,
    **kwargs: Any,
) -> OptimizeResult:
    """DP heavy ball (DP-HB; DP-SHB with ``batch_size``).

    ``x_{t+1} = x_t - α g̃(x_t) + β̄ (x_t - x_{t-1})`` with ``α = 1/L`` and
    ``β̄ = ((√κ - 1)/(√κ + 1))²`` by default (spec §3.7).

    Parameters
    ----------
    {common}
    {momentum}
    """
    o = build_options(HeavyBallOptions, options, kwargs, "dp_heavy_ball")
    ctx = _setup(problem, X, y, budget=budget, rng=rng, calibration=calibration, options=o,
                 accountant=accountant, diagnostics=diagnostics)  # fmt: skip
    return _momentum_run(ctx, o, "dp_heavy_ball")


@_docfmt
def dp_nesterov(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str = "tight",
    accountant: Accountant | None = None,
    diagnostics: bool = False,
    options: NesterovOptions | None = None,
    **kwargs: Any,
) -> OptimizeResult:
    """DP Nesterov accelerated gradient (DP-NAG; DP-SNAG with ``batch_size``).

    ``z_t = (1 + β̄) x_t - β̄ x_{t-1}``, ``x_{t+1} = z_t - α g̃(z_t)`` with ``α = 1/L`` and
    ``β̄ = (√κ - 1)/(√κ + 1)`` by default (spec §3.7).

    Parameters
    ----------
    {common}
    {momentum}
    """
    o = build_options(NesterovOptions, options, kwargs, "dp_nesterov")
    ctx = _setup(problem, X, y, budget=budget, rng=rng, calibration=calibration, options=o,
                 accountant=accountant, diagnostics=diagnostics)  # fmt: skip
    return _momentum_run(ctx, o, "dp_nesterov")


def _momentum_run(ctx: _Context, o: MomentumOptions, name: str) -> OptimizeResult:
    """DP-HB (``name="dp_heavy_ball"``) or DP-NAG (``"dp_nesterov"``) with constant step and momentum."""
    T = int(o.max_iter)
    if o.momentum is None:  # the default momentum needs μ: a public surrogate ridge when there is none
        ctx.ensure_strong_convexity(T)
    heavy = name == "dp_heavy_ball"
    alpha = 1.0 / ctx.L if o.step is None else _step_value(o.step)
    beta = _momentum_default(ctx.kappa, heavy) if o.momentum is None else check_momentum(o.momentum)
    ctx.make_plan(_uniform_segments(ctx, T), "dp-heavy-ball" if heavy else "dp-nesterov")
    if heavy:
        x = ctx.project(_x0(o.x0, ctx.d))
        x_prev = x
        for t in range(T):
            x, x_prev = ctx.project(x - alpha * ctx.gradient(x, t) + beta * (x - x_prev)), x
            if ctx.notify(o.callback, t + 1, x):
                break
    else:  # z_t = (1 + β̄) x_t - β̄ x_{t-1} may leave the set: the gradient is clipped to the bound there
        x = _stage_loop(ctx, _x0(o.x0, ctx.d), (T,), [alpha], [beta], "sampled")
    return _finish(
        ctx, x, T=T, method=_method_name(name, ctx),
        params={"step": alpha, "momentum": beta, "step_times_L": alpha * ctx.L},
        message=f"ran the planned T={T} noisy {'heavy-ball' if heavy else 'Nesterov'} steps",
    )  # fmt: skip


def _smoothed_run(
    ctx: _Context, o: GDwSOptions | OnlineGDwSOptions, T: int, first_kind: str
) -> tuple[Array, dict[str, Any]]:
    """The planned DP-GDwS run (after ``make_plan``): the last iterate and the step's parameters."""
    beta = check_smoothing(o.smoothing)
    alpha, rule, capped = _gdws_step(ctx, T, beta, o.step, o.safeguard)
    x = _smoothed_loop(ctx, _x0(o.x0, ctx.d), T, beta, alpha, first_kind)
    params = {"smoothing": beta, "step": alpha, "step_rule": rule, "step_capped": capped,
              "step_times_L": alpha * ctx.L}  # fmt: skip
    return x, params


@_docfmt
def dp_gdws(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str = "tight",
    accountant: Accountant | None = None,
    diagnostics: bool = False,
    options: GDwSOptions | None = None,
    **kwargs: Any,
) -> OptimizeResult:
    """DP gradient descent with smoothing (DP-GDwS, Alg. 4; DP-SGDwS, Alg. 6, with ``batch_size``).

    ``m_t = (1 - β) m_{t-1} + β g̃_t`` (``m_0 = β g̃_0``), ``x_{t+1} = x_t - α m_t``, where ``g̃_t``
    is the released noisy gradient.  Equivalently heavy ball with step ``αβ`` and momentum ``1 - β``
    (spec §3.2).  The thesis writes the noise on ``β g_t`` with scale ``β b``; that is the same
    release.

    Parameters
    ----------
    {common}
    smoothing : float, default 0.1
        The weight β in (0, 1] (β = 1: DP-GD with this step).
    step : {"noise_aware", "inverse_L"} or float, default "noise_aware"
        ``"noise_aware"``: the thesis's constant step (4.21) / (4.55) computed with the actual
        per-coordinate noise variance of the calibrated noise; ``"inverse_L"``: 1/L.
    safeguard : bool, default False
        Cap α at 1/L (the thesis's steps ignore L, spec N8); ``parameters["step_capped"]`` says
        whether it was active, ``parameters["step_times_L"]`` logs αL.
    first_step : {"auto", "full", "subsample"}, default "auto"
        The thesis's Alg. 6 uses the full gradient at t = 0 with noise calibrated for a batch
        (spec P8).  ``"auto"`` = ``"full"`` with ``calibration="paper"`` (reproduction; warned and
        the true ε reported), ``"subsample"`` otherwise.  With ``"full"`` and the tight
        calibration the first step is noised and charged as a full-data step (Laplace only).

    Returns
    -------
    OptimizeResult

    Privacy
    -------
    {privacy}

    Smoothing is post-processing of the released noisy gradients: it does not reduce the privacy
    loss (spec P4); the thesis's "smaller β ⇒ less noise" is a rescaling.
    """
    o = build_options(GDwSOptions, options, kwargs, "dp_gdws")
    ctx = _setup(problem, X, y, budget=budget, rng=rng, calibration=calibration, options=o,
                 accountant=accountant, diagnostics=diagnostics)  # fmt: skip
    T = int(o.max_iter)
    beta = check_smoothing(o.smoothing)
    fs = ("full" if calibration == "paper" else "subsample") if o.first_step == "auto" else o.first_step
    stochastic = ctx.sampling != "full"
    segs = _uniform_segments(ctx, T, first_full=stochastic and fs == "full" and calibration == "paper")
    if stochastic and fs == "full" and calibration != "paper":
        segs = [Segment(1, 1.0 / T, "full"), *([Segment(T - 1, 1.0 / T, "sampled")] if T > 1 else [])]
    ctx.make_plan(segs, "dp-gdws")
    x, params = _smoothed_run(ctx, o, T, segs[0].kind)
    params["first_step"] = fs if stochastic else "full"
    return _finish(
        ctx, x, T=T, method="dp_sgdws" if stochastic else "dp_gdws", params=params,
        message=f"ran the planned T={T} smoothed noisy gradient steps (β={beta:g})",
    )  # fmt: skip


@_docfmt
def dp_online_gdws(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str = "tight",
    accountant: Accountant | None = None,
    diagnostics: bool = False,
    options: OnlineGDwSOptions | None = None,
    **kwargs: Any,
) -> OptimizeResult:
    """DP-onlineGDwS: one smoothed pass over disjoint buckets (each record used once).

    The records are split by a data-independent random permutation (drawn from ``rng`` at the
    first step, after the whole run was charged) into ``T = n // bucket_size`` buckets; step t uses
    bucket t.  Smoothing and the step size are those of :func:`dp_gdws` (4.55 with m = bucket size and the per-step noise variance, spec
    §3.6; the thesis gives neither).

    Parameters
    ----------
    {common}
    bucket_size : int, default 10
        Records per step (the thesis: 10, so T = n/10).
    smoothing, step, safeguard
        As in :func:`dp_gdws`.

    Returns
    -------
    OptimizeResult

    Privacy
    -------
    Each record influences exactly one release (disjoint buckets fixed before the run), so by
    parallel composition the run is ε-DP when every step is: Laplace noise with scale ``S₁/ε`` on
    the bucket's clipped gradient sum (S₁ = 2C₁, replace-one), or Gaussian noise calibrated to
    (ε, δ) with l2 sensitivity 2C₂ when δ > 0.  ``"paper"`` and ``"tight"`` coincide here (the
    thesis gives no calibration, spec P10).  Only the ``T·bucket_size`` records in the buckets are
    used.
    """
    o = build_options(OnlineGDwSOptions, options, kwargs, "dp_online_gdws")
    ctx = _setup(problem, X, y, budget=budget, rng=rng, calibration=calibration, options=o,
                 accountant=accountant, diagnostics=diagnostics)  # fmt: skip
    T = ctx.n // ctx.batch
    beta = check_smoothing(o.smoothing)
    ctx.make_plan([Segment(T, 1.0 / T, "sampled")], "dp-online-gdws")
    x, params = _smoothed_run(ctx, o, T, "sampled")
    params["bucket_size"] = ctx.batch
    return _finish(
        ctx, x, T=T, method="dp_online_gdws", params=params,
        message=f"one pass over {T} disjoint buckets of {ctx.batch} records (β={beta:g})",
    )  # fmt: skip
