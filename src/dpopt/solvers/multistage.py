"""Multistage accelerated methods with noisy gradients (seed 003 ch. 4, Algorithms 5 and 7).

* :func:`dp_masg` -- DP versions of M-ASG and M-ASG* (Aybat-Fallah-Gürbüzbalaban-Ozdaglar 2019,
  reference [3] of the thesis): K stages of Nesterov's method restarted at each stage, stage step
  ``α_1 = 1/L``, ``α_k = 1/(2^{2k} L)``, momentum ``β_k = (1 - √(μα_k))/(1 + √(μα_k))``, noise
  calibrated for ``ε/T`` per step (the thesis's baselines, spec §3.7).
* :func:`dp_mag` -- DP-MAG (deterministic) and DP-SMAG (``batch_size``): the same stage structure
  with the thesis's stage-wise privacy split (ε/K per stage, ε/(K n_k) per step of stage k), fixed
  momentum ``(1 - √(μ/L))/(1 + √(μ/L))`` and the noise-aware stage step (eqs. 4.43 / 4.59).

Stage lengths are fixed before the run from public quantities only (see
:func:`~dpopt.solvers.dp_calibration.masg_schedule` and
:func:`~dpopt.solvers.dp_calibration.noise_aware_schedule`).  The data, clipping, noise and
accounting conventions are those of :mod:`dpopt.solvers.gradient`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpopt._validation import check_int, check_positive
from dpopt.accounting import Accountant, gaussian_sigma
from dpopt.exceptions import InvalidParameterError
from dpopt.problems import ERMProblem, LogisticLoss
from dpopt.randomness import RNGLike
from dpopt.solvers._result import OptimizeResult
from dpopt.solvers.dp_calibration import (
    Segment,
    _paper_eps0,
    mag_step_size,
    masg_schedule,
    noise_aware_schedule,
)
from dpopt.solvers.gradient_driver import _Context, _finish, _setup, _stage_loop, _uniform_segments, _x0
from dpopt.solvers.gradient_options import MAGOptions, MASGOptions, _docfmt, build_options
from dpopt.solvers.gradient_steps import _masg_momentum, _masg_step
from dpopt.solvers.minimize import BudgetLike

__all__ = ["MAGOptions", "MASGOptions", "dp_mag", "dp_masg", "masg_star_first_stage"]


def masg_star_first_stage(
    iterations: int, kappa: float, smoothness: float, initial_gap: float, noise_second_moment: float
) -> int:
    """First-stage length of M-ASG* (reconstructed from [3]; marked external in the spec).

    M-ASG* uses knowledge of the initial gap Δ = f(x0) - f* (or a public upper bound) and of the
    noise level to decide when to leave the constant-step first stage: it stops when the stage-1
    bias term ``2 exp(-n_1/√κ) Δ`` of the M-ASG bound (4.39) falls to its variance floor
    ``σ²√κ/L``, i.e. ``n_1 = ⌈√κ ln(2ΔL/(σ²√κ))⌉`` (at least 1, at most T; T when σ² = 0).
    σ² is E‖noise‖² of one gradient (noise plus sampling variance).
    """
    T = check_int(iterations, "iterations")
    if noise_second_moment <= 0:
        return T
    rk = math.sqrt(kappa)
    arg = 2 * initial_gap * smoothness / (noise_second_moment * rk)
    n1 = math.ceil(rk * math.log(arg)) if arg > 1 else 1
    return int(min(T, max(1, n1)))


def _initial_gap(ctx: _Context, initial_gap: float | None, x0: Any) -> float:
    if initial_gap is not None:
        return ctx.scale * check_positive(initial_gap, "initial_gap")
    if isinstance(ctx.problem.loss, LogisticLoss) and (x0 is None or not np.any(np.asarray(x0, dtype=float))):
        # f(0) = ln 2 per record and f* >= 0: a public bound on the gap
        return ctx.scale * math.log(2)
    raise InvalidParameterError(
        "initial_gap: M-ASG* needs a public upper bound on f(x0) - f* (mean scale); it is known only "
        "for the logistic loss started at 0"
    )


@_docfmt
def dp_masg(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str = "tight",
    accountant: Accountant | None = None,
    diagnostics: bool = False,
    options: MASGOptions | None = None,
    **kwargs: Any,
) -> OptimizeResult:
    """DP M-ASG and M-ASG* (the thesis's baselines; stocMASG / stocMASG* with ``batch_size``).

    Parameters
    ----------
    {common}
    variant : {"m-asg", "m-asg*"}, default "m-asg"
        ``"m-asg"``: stage lengths (4.38) with ``n_1 = ⌈2√κ ln √κ⌉``.  ``"m-asg*"``: the first stage
        ends when its bias reaches the noise floor (:func:`masg_star_first_stage`, needs a public
        bound on the initial gap), later stages as in (4.38).
    p : int, default 1
        The ``p >= 1`` of (4.38).
    first_stage : int, optional
        Override n_1.
    initial_gap : float, optional
        Public bound on f(x0) - f* of the mean-scale objective (M-ASG*; default ln 2 for the
        logistic loss from x0 = 0).

    Returns
    -------
    OptimizeResult
        ``parameters["stages"]`` holds the stage lengths.

    Privacy
    -------
    {privacy}

    Every step gets the share ε/T (as the thesis's baselines, spec §3.7); the stage structure is
    post-processing and chosen from public quantities only.

    Without strong convexity (``l2_penalty = 0`` and no ``strong_convexity``) the stages, steps and
    momentum are those of ``F(θ) + (μ_T/2)‖θ‖²`` with the public surrogate ridge ``μ_T = L/κ_T``,
    ``κ_T = max(4, (T/(2 ln(T+1)))²)`` (:func:`~dpopt.solvers.gradient.surrogate_condition_number`);
    the bias is at most ``(μ_T/2)‖u‖²`` against any comparator u, ``parameters["surrogate_ridge"]``
    reports μ_T.  The ridge is data-independent: sensitivity and accounting are unchanged.
    """
    o = build_options(MASGOptions, options, kwargs, "dp_masg")
    ctx = _setup(problem, X, y, budget=budget, rng=rng, calibration=calibration, options=o,
                 accountant=accountant, diagnostics=diagnostics)  # fmt: skip
    T = int(o.max_iter)
    ctx.ensure_strong_convexity(T)  # μ = 0: a public surrogate ridge (documented under Notes)
    kappa = ctx.kappa
    segs = _uniform_segments(ctx, T)
    ctx.make_plan(segs, "dp-masg")
    n1 = o.first_stage
    if o.variant == "m-asg*" and n1 is None:
        sampling_var = 0.0 if ctx.sampling == "full" else ctx.sampling_term()
        sig2 = ctx.d * ctx.noise_variance() + sampling_var
        n1 = masg_star_first_stage(T, kappa, ctx.L, _initial_gap(ctx, o.initial_gap, o.x0), sig2)
    stages = masg_schedule(T, kappa, p=o.p, first_stage=n1)
    alphas = [_masg_step(k, ctx.L) for k in range(1, len(stages) + 1)]
    betas = [_masg_momentum(a, ctx.mu) for a in alphas]
    x = _stage_loop(ctx, _x0(o.x0, ctx.d), stages, alphas, betas, segs[0].kind)
    stoch = ctx.sampling != "full"
    name = ("dp_stoc_masg" if stoch else "dp_masg") + ("_star" if o.variant == "m-asg*" else "")
    return _finish(
        ctx, x, T=T, method=name,
        params={"variant": o.variant, "stages": list(stages), "stage_steps": alphas, "stage_momentum": betas,
                "kappa": kappa, "p": o.p},
        message=f"ran {len(stages)} stages, T={T} noisy accelerated steps",
    )  # fmt: skip


def _share_variance(ctx: _Context, share: float) -> float:
    """Per-coordinate noise variance (oracle scale) of a step with privacy share ``share``.

    Exact for Laplace; for Gaussian noise the full-data formula (times m/n for Poisson batches, the
    small-q CLT approximation) -- used only to pick stage lengths.
    """
    bud = ctx.budget
    if bud is None:
        return 0.0
    eps = bud.epsilon * share
    q = ctx.rate
    sampled = ctx.sampling != "full"
    if ctx.family == "laplace":
        S1 = 2 * ctx.bound_l1
        if not sampled:
            eps0 = eps
        elif ctx.calibration == "paper":
            eps0 = _paper_eps0(eps, q, "bst14")
        else:
            eps0 = math.log1p(math.expm1(eps) / q)
        var = 2 * (S1 / eps0) ** 2
    else:
        sigma = 2 * ctx.bound_l2 * gaussian_sigma(bud.epsilon, max(bud.delta, 1e-300), 1.0) / math.sqrt(share)
        var = (sigma * (q if sampled else 1.0)) ** 2
    return var if ctx.grad_scale == "sum" else var / ctx.batch**2


@_docfmt
def dp_mag(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str = "tight",
    accountant: Accountant | None = None,
    diagnostics: bool = False,
    options: MAGOptions | None = None,
    **kwargs: Any,
) -> OptimizeResult:
    """DP multistage accelerated gradient (DP-MAG, Alg. 5; DP-SMAG, Alg. 7, with ``batch_size``).

    Parameters
    ----------
    {common}
    p : int, default 1
        The ``p >= 1`` of the stage lengths.
    stage_rule : {"default", "noise_aware_fixed_point"}, default "default"
        ``"default"``: the (4.38) lengths truncated to T (spec §8).  ``"noise_aware_fixed_point"``:
        the thesis's noise-aware lengths (4.45), which are circular (n_k appears in V_k, K in
        every V_k); resolved as documented in
        :func:`~dpopt.solvers.dp_calibration.noise_aware_schedule`.  Both are computed before the
        run from public quantities.
    first_stage : int, optional
        Override n_1 (default ``⌈2√κ ln √κ⌉``).
    momentum : {"fixed", "stage"}, default "fixed"
        ``"fixed"``: the thesis's single ``β = (1 - √(μ/L))/(1 + √(μ/L))``; ``"stage"``: [3]'s
        ``β_k = (1 - √(μα_k))/(1 + √(μα_k))``.
    step : {"noise_aware", "masg"}, default "noise_aware"
        ``"noise_aware"``: (4.43) / (4.59) with the stage's actual noise variance; ``"masg"``: the
        original (4.38) steps.
    safeguard : bool, default False
        Cap every α_k at 1/L (spec N8).

    Notes
    -----
    ``grad_scale`` defaults to ``"mean"`` here.  The noise-aware step (4.43) is not invariant to
    the scale of the gradient (α_k ∝ 1/(L·√V_k): rescaling the gradient by n rescales L by n but
    √V_k by n too), unlike (4.21).  With the thesis's sum-scaled gradients on n = 10⁴ records,
    α_k·L is 1e-4 ... 1e-9 and the method does not move; with mean-scaled gradients α_1·L is about
    0.75 and DP-MAG behaves as the thesis reports (it beats DP-M-ASG and DP-GDwS).

    Returns
    -------
    OptimizeResult
        ``parameters`` holds the stages, their steps, momentum and noise scales.

    Privacy
    -------
    {privacy}

    Stage k gets the share ε/K and each of its n_k steps ε/(K n_k) (for Gaussian noise the share is
    taken in the Gaussian's additive currency 1/z²).  The total is ε exactly as with ε/T per step:
    the split reallocates noise between stages, it saves nothing (spec P13).

    Without strong convexity (``l2_penalty = 0`` and no ``strong_convexity``) the method runs on
    ``F(θ) + (μ_T/2)‖θ‖²`` with the public surrogate ridge of :func:`dp_masg` (bias at most
    ``(μ_T/2)‖u‖²``; ``parameters["surrogate_ridge"]``); sensitivity and accounting are unchanged.
    """
    o = build_options(MAGOptions, options, kwargs, "dp_mag")
    ctx = _setup(problem, X, y, budget=budget, rng=rng, calibration=calibration, options=o,
                 accountant=accountant, diagnostics=diagnostics)  # fmt: skip
    T = int(o.max_iter)
    ctx.ensure_strong_convexity(T)  # μ = 0: a public surrogate ridge (documented under Notes)
    kappa = ctx.kappa
    rq = math.sqrt(1 / kappa)
    beta_fixed = (1 - rq) / (1 + rq)
    stages = _mag_stages(ctx, o, T, beta_fixed)
    K = len(stages)
    kind = "full" if ctx.sampling == "full" else "sampled"
    segs = [Segment(n_k, 1.0 / (K * n_k), kind) for n_k in stages]  # type: ignore[arg-type]
    plan = ctx.make_plan(segs, "dp-mag")
    variances = plan.segment_variances() if plan.private else [0.0] * K
    if ctx.grad_scale == "mean":
        variances = [v / ctx.batch**2 for v in variances]
    alphas: list[float] = []
    capped = False
    for k in range(1, K + 1):
        if o.step == "noise_aware":
            a = mag_step_size(k, ctx.L, beta_fixed, ctx.d, variances[k - 1], ctx.sampling_term())
        else:
            a = _masg_step(k, ctx.L)
        if o.safeguard and a > 1.0 / ctx.L:
            a, capped = 1.0 / ctx.L, True
        alphas.append(a)
    betas = [beta_fixed] * K if o.momentum == "fixed" else [_masg_momentum(a, ctx.mu) for a in alphas]
    x = _stage_loop(ctx, _x0(o.x0, ctx.d), stages, alphas, betas, kind)
    name = "dp_smag" if ctx.sampling != "full" else "dp_mag"
    return _finish(
        ctx, x, T=T, method=name,
        params={"stages": list(stages), "stage_rule": o.stage_rule, "stage_steps": alphas,
                "stage_momentum": betas, "step_rule": o.step, "step_capped": capped,
                "step_times_L": [a * ctx.L for a in alphas], "kappa": kappa, "p": o.p,
                "stage_noise_scales": [float(s) for s in _segment_scales(plan.step_scales, stages)]},
        message=f"ran {K} stages, T={T} noisy accelerated steps",
    )  # fmt: skip


def _mag_stages(ctx: _Context, o: MAGOptions, T: int, beta_fixed: float) -> tuple[int, ...]:
    """DP-MAG's stage lengths, from public quantities only (before the plan)."""
    if o.stage_rule == "default":
        return masg_schedule(T, ctx.kappa, p=o.p, first_stage=o.first_stage)
    sterm = ctx.sampling_term()

    def stage_variance(n_k: float, K: int) -> float:
        return (sterm / ctx.d + _share_variance(ctx, 1.0 / (K * n_k))) / (1 - beta_fixed**2)

    return noise_aware_schedule(T, ctx.kappa, p=o.p, stage_variance=stage_variance, first_stage=o.first_stage)


def _segment_scales(step_scales: np.ndarray, stages: tuple[int, ...]) -> list[float]:
    out, t = [], 0
    for n_k in stages:
        out.append(float(step_scales[t]) if step_scales.size else 0.0)
        t += n_k
    return out
