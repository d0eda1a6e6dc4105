"""The driver of the DP gradient methods: prepared data, noisy gradient oracle, plan, loops, result.

:func:`_setup` turns a call (problem, data, budget, rng, calibration and a
:class:`~dpopt.solvers.gradient_options.GradientOptions`) into a :class:`_Context`: the clipped data,
the per-example bounds behind the sensitivity, the public constants L and μ, the sampling scheme and the
noisy gradient oracle.  :meth:`_Context.make_plan` charges the whole planned event before any noise is
drawn; :func:`_finish` builds the :class:`~dpopt.solvers._result.OptimizeResult`.  The step
rules are in :mod:`dpopt.solvers.gradient_steps`, the methods in :mod:`dpopt.solvers.gradient` and
:mod:`dpopt.solvers.multistage`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
from numpy.typing import NDArray

from dpopt._validation import check_int, check_positive
from dpopt.accounting import Accountant, Budget
from dpopt.exceptions import InvalidParameterError, PrivacyClaimWarning
from dpopt.iteration import notify
from dpopt.problems import ERMProblem, Loss, make_loss
from dpopt.randomness import RNGLike, SecureRNG, check_rng
from dpopt.solvers._result import OptimizeResult
from dpopt.solvers.dp_calibration import (
    Calibration,
    Family,
    NoisePlan,
    Sampling,
    Segment,
    data_constants_spent,
    plan_noise,
    sampling_variance_term,
)
from dpopt.solvers.gradient_options import (
    Callback,
    GradientOptions,
    GradScale,
    OnlineGDwSOptions,
    _CoreOptions,
)
from dpopt.solvers.minimize import BudgetLike, nonprivate_diagnostics, parse_budget

Array = NDArray[np.float64]


# ------------------------------------------------------------------------------------------------
# Shared set-up: data, clipping, sensitivities, constants, noise plan, noisy gradient oracle
# ------------------------------------------------------------------------------------------------


@dataclass
class _Context:
    """Prepared data and public settings of one run (internal)."""

    X: Any
    y: Array
    problem: ERMProblem
    loss: Loss
    n: int
    d: int
    clip: float | None
    clip_norm: Literal["l1", "l2"]
    row_norms: Array
    bound_l1: float  # per-example bound on ‖ĝ_i‖₁
    bound_l2: float  # per-example bound on ‖ĝ_i‖₂
    noise_norm: Literal["l1", "l2"]  # norm of the sensitivity (l1 for Laplace, l2 for Gaussian)
    noise_row_norms: Array
    family: Family
    calibration: Calibration
    budget: Budget | None
    batch: int  # nominal batch size (n for full gradients)
    sampling: Sampling
    grad_scale: GradScale
    smoothness: float  # mean-scale constants of the (clipped) objective
    strong_convexity: float
    data_constants: bool
    gen: np.random.Generator | SecureRNG
    np_gen: np.random.Generator
    options: _CoreOptions
    accountant: Accountant | None = None  # the caller's ledger (charged by make_plan)
    diagnostics: bool = False  # also return non-private diagnostics
    sampling_rate: float | None = None  # declared (public) Poisson rate: add/remove analysis
    ridge: float = 0.0  # public surrogate ridge added by the momentum methods when μ = 0 (mean scale)
    plan: NoisePlan | None = None
    perm: NDArray[Any] | None = None
    notes: list[str] = field(default_factory=list)
    stopped_at: int | None = None  # steps done when a callback stopped the run

    def notify(self, callback: Callback | None, t: int, x: Array) -> bool:
        """Call ``callback`` after step ``t`` (1-based); remember the stop when it asks for one."""
        if notify(callback, t, x):
            self.stopped_at = t
            return True
        return False

    @property
    def scale(self) -> float:
        """Factor from the mean-scale objective to the one whose gradient the oracle returns."""
        return float(self.batch) if self.grad_scale == "sum" else 1.0

    @property
    def rate(self) -> float:
        """The sampling rate q: declared (add/remove) or m/n (replace-one, n public)."""
        return self.sampling_rate if self.sampling_rate is not None else self.batch / self.n

    @property
    def add_remove(self) -> bool:
        return self.sampling_rate is not None

    def project(self, x: Array) -> Array:
        """Euclidean projection onto the problem's constraint set (identity without one)."""
        C = self.problem.constraint
        return x if C is None else np.asarray(C.project(x), dtype=float)

    @property
    def L(self) -> float:
        return self.scale * self.smoothness

    @property
    def mu(self) -> float:
        return self.scale * self.strong_convexity

    @property
    def kappa(self) -> float:
        if self.strong_convexity <= 0:  # pragma: no cover - the momentum methods call ensure_strong_convexity
            raise InvalidParameterError(
                "this method needs a strongly convex objective: set problem.l2_penalty > 0 (or declare "
                "strong_convexity)"
            )
        return self.smoothness / self.strong_convexity

    def ensure_strong_convexity(self, iterations: int) -> None:
        """Add the public surrogate ridge when the objective has no strong convexity (μ = 0).

        The methods whose step sizes and momentum need μ (heavy ball, Nesterov, M-ASG, MAG) run on
        ``F(θ) + (μ_T/2)‖θ‖²`` with ``μ_T = L/κ_T`` and ``κ_T = surrogate_condition_number(T)``, a
        function of the public iteration count T and the declared smoothness only (the
        regularisation reduction of Allen-Zhu & Hazan 2016).  The ridge term is data-independent:
        the released clipped gradient sums, their sensitivity and the accounting are unchanged.
        """
        if self.strong_convexity > 0:
            return
        mu = self.smoothness / surrogate_condition_number(iterations)
        self.ridge = mu
        self.smoothness += mu
        self.strong_convexity = mu
        self.notes.append(
            f"no strong convexity (l2_penalty = 0): ran on the objective plus a public ridge (μ_T/2)‖θ‖² with "
            f"μ_T = {mu:.3g} (κ_T = {surrogate_condition_number(iterations):.4g} from T = {iterations}); "
            "bias at most (μ_T/2)‖u‖² against any comparator u"
        )

    def make_plan(self, segments: list[Segment], label: str) -> NoisePlan:
        """Plan the noise of the whole run and charge it to the accountant(s) before any noise is drawn.

        ``paper_rule`` and ``tight_accountant`` come from the options (the one-pass method has
        neither: its disjoint buckets are analysed with ``"bst14"`` / ``"rdp"``).
        """
        opts = self.options
        rule: Literal["bst14", "thesis"] = opts.paper_rule if isinstance(opts, GradientOptions) else "bst14"
        tight: Literal["auto", "rdp", "pld"] = (
            opts.tight_accountant if isinstance(opts, GradientOptions) else "rdp"
        )
        plan = plan_noise(
            self.budget,
            segments,
            calibration=self.calibration,
            family=self.family,
            sensitivity_l1=2 * self.bound_l1,
            sensitivity_l2=2 * self.bound_l2,
            n_samples=self.n,
            batch_size=self.batch,
            sampling=self.sampling,
            accountant=self.accountant,
            paper_rule=rule,
            tight_accountant=tight,
            label=label,
            sampling_rate=self.sampling_rate,
        )
        self.plan = plan
        return plan

    def sampling_term(self) -> float:
        """The thesis's sampling-variance term in the oracle's scale (see ``sampling_variance_term``).

        Under add/remove (declared rate q) the Poisson form ``S₂²·m(1 - q)/4`` with the declared m is
        used: the thesis's form needs the private n.
        """
        if self.add_remove:
            s2 = 2 * self.bound_l2
            v = s2 * s2 * self.batch * (1 - self.rate) / 4
        else:
            v = sampling_variance_term(2 * self.bound_l2, self.batch, self.n)
        return v if self.grad_scale == "sum" else v / self.batch**2

    def noise_variance(self, t: int = -1) -> float:
        """Per-coordinate noise variance on the *oracle's* gradient at step ``t`` (default: last)."""
        assert self.plan is not None
        if not self.plan.private:
            return 0.0
        v = self.plan.variance(t if t >= 0 else len(self.plan.step_scales) - 1)
        return v if self.grad_scale == "sum" else v / self.batch**2

    def indices(self, t: int, kind: str) -> NDArray[Any] | None:
        if kind == "full" or kind == "full_as_sampled" or self.sampling == "full":
            return None
        if self.sampling == "disjoint":
            if self.perm is None:  # drawn at the first step, i.e. after the plan was charged
                self.perm = self.np_gen.permutation(self.n)
            return self.perm[t * self.batch : (t + 1) * self.batch]
        if self.sampling == "poisson":
            return np.flatnonzero(self.np_gen.random(self.n) < self.rate)
        return self.np_gen.choice(self.n, self.batch, replace=False)

    def clipped_sum(self, x: Array, idx: NDArray[Any] | None) -> Array:
        """Σ_{i∈B} ĝ_i(x) (per-example clipped loss gradients), vectorised over the batch."""
        Xb = self.X if idx is None else self.X[idx]
        yb = self.y if idx is None else self.y[idx]
        z = np.asarray(Xb @ x).ravel()
        w = self.loss.derivative(z, yb)
        if self.clip is not None:
            norms = np.abs(w) * (self.row_norms if idx is None else self.row_norms[idx])
            w = w * np.minimum(1.0, self.clip / np.maximum(norms, 1e-300))
        # Always enforce the per-example bound behind the sensitivity, in the noise's norm: the
        # declared bounds hold only for points of the constraint set, and momentum methods evaluate
        # the gradient at extrapolated points that may lie outside it (a no-op inside the set).
        bound = self.bound_l1 if self.noise_norm == "l1" else self.bound_l2
        nn = np.abs(w) * (self.noise_row_norms if idx is None else self.noise_row_norms[idx])
        w = w * np.minimum(1.0, bound / np.maximum(nn, 1e-300))
        return np.asarray(Xb.T @ w).ravel()

    def gradient(self, x: Array, t: int, kind: str = "sampled") -> Array:
        """The released noisy gradient at step ``t`` (oracle scale)."""
        assert self.plan is not None
        idx = self.indices(t, kind)
        g = self.clipped_sum(x, idx)
        nominal = self.n if idx is None else self.batch
        lam = self.problem.l2_penalty + self.ridge  # public terms: no effect on the sensitivity
        if lam:
            g = g + (nominal * lam) * x
        g = self.plan.add_noise(g, t, self.gen)
        return g / nominal if self.grad_scale == "mean" else g

    def parameters(self) -> dict[str, Any]:
        assert self.plan is not None
        plan = self.plan
        segments: list[dict[str, Any]] = []
        t = 0
        for seg in plan.segments:
            scale = float(plan.step_scales[t]) if plan.private else 0.0
            segments.append({"count": seg.count, "kind": seg.kind, "noise_scale": scale})
            t += seg.count
        if self.sampling == "full":
            rate: float | None = 1.0
        elif self.sampling == "disjoint":
            rate = None  # parallel composition: each record is in exactly one step
        else:
            rate = self.rate
        return {
            # under add/remove the data's size is private: it is not part of the result
            "n_samples": None if self.add_remove else self.n,
            "n_features": self.d,
            "noise": plan.family or "none",
            "noise_scales": sorted({float(s) for s in plan.step_scales}) if plan.private else [],
            # what an independent accountant needs to recompute ε (tests/test_claims_vs_dp_accounting.py)
            "segments": segments,
            "sampling_rate": rate,
            "neighbouring": plan.privacy.neighbouring,
            "accountant": plan.privacy.accountant,
            "sensitivity": plan.sensitivity,
            "clip": self.clip,
            "clip_norm": self.clip_norm,
            "per_example_bound_l1": self.bound_l1,
            "per_example_bound_l2": self.bound_l2,
            "batch_size": self.batch,
            "sampling": self.sampling,
            "grad_scale": self.grad_scale,
            "smoothness": self.L,
            "strong_convexity": self.mu,
            "surrogate_ridge": self.ridge,
            "constants": "data" if self.data_constants else "declared",
        }

    def spent(self) -> Any:
        assert self.plan is not None
        spent = self.plan.privacy
        if self.data_constants and self.plan.private:
            spent = data_constants_spent(spent)
        return spent


def surrogate_condition_number(iterations: int) -> float:
    """κ_T = max(4, (T / (2 ln(T + 1)))²): the condition number of the public surrogate ridge.

    With ``μ_T = L/κ_T`` an accelerated method's contraction ``exp(-T/√κ_T) ≈ T⁻²`` and the ridge's
    bias ``(μ_T/2)‖u‖² = ‖u‖²·2L ln²(T+1)/T²`` are of the same order, the convex accelerated rate up to
    the log factor (Allen-Zhu & Hazan 2016, "Optimal black-box reductions between optimization
    objectives").  A function of the public T only.
    """
    T = max(1, int(iterations))
    return max(4.0, (T / (2.0 * math.log(T + 1.0))) ** 2)


def _row_norms(X: Any, norm: str) -> Array:
    if scipy.sparse.issparse(X):
        if norm == "l1":
            return np.asarray(abs(X).sum(axis=1)).ravel()
        return np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    if norm == "l1":
        return np.abs(X).sum(axis=1)
    return np.sqrt(np.einsum("ij,ij->i", X, X))


def _setup(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str,
    options: _CoreOptions,
    accountant: Accountant | None = None,
    diagnostics: bool = False,
) -> _Context:
    """The shared prologue of the DP gradient methods: check the call, prepare the data and constants."""
    if not isinstance(problem, ERMProblem):
        raise InvalidParameterError("problem: expected a dpopt.problems.ERMProblem")
    if calibration not in ("tight", "paper"):
        raise InvalidParameterError("calibration: must be 'tight' or 'paper'")
    o = options
    bud = parse_budget(budget)
    if o.noise == "auto":
        fam = "laplace" if (bud is None or bud.delta == 0 or calibration == "paper") else "gaussian"
    else:
        fam = o.noise
    cnorm = ("l1" if fam == "laplace" else "l2") if o.clip_norm == "auto" else o.clip_norm
    c = None if o.clip is None else check_positive(o.clip, "clip")
    Xc, yc = problem.prepare(X, y)
    n, d = Xc.shape
    b1, b2 = _example_bounds(problem, d, c, cnorm)
    rate, m, sampling = _sampling(o, n, fam, calibration)
    Lm, mum, notes = _constants(problem, o, Xc, n, d, bud)
    gen = check_rng(rng)
    np_gen = gen.generator if isinstance(gen, SecureRNG) else gen
    return _Context(
        X=Xc,
        y=yc,
        problem=problem,
        loss=make_loss(problem.loss),
        n=n,
        d=d,
        clip=None if c is None else (b1 if cnorm == "l1" else b2),
        clip_norm=cnorm,
        row_norms=_row_norms(Xc, cnorm),
        bound_l1=b1,
        bound_l2=b2,
        noise_norm="l1" if fam == "laplace" else "l2",
        noise_row_norms=_row_norms(Xc, "l1" if fam == "laplace" else "l2"),
        family=fam,  # type: ignore[arg-type]
        calibration=calibration,  # type: ignore[arg-type]
        budget=bud,
        batch=m,
        sampling=sampling,
        grad_scale=o.grad_scale,
        smoothness=Lm,
        strong_convexity=mum,
        data_constants=o.constants == "data",
        gen=gen,
        np_gen=np_gen,
        options=o,
        accountant=accountant,
        diagnostics=diagnostics,
        sampling_rate=rate,
        notes=notes,
    )


def _example_bounds(problem: ERMProblem, d: int, c: float | None, cnorm: str) -> tuple[float, float]:
    """Per-example bounds (l1, l2) on the loss gradient: from clipping and from the declared data bounds."""
    try:
        deriv = problem.derivative_bound(d)
    except InvalidParameterError:
        if c is None:
            raise InvalidParameterError(
                "clip: the per-example gradient of this loss is unbounded without a constraint set; "
                "pass a clipping threshold"
            ) from None
        deriv = math.inf
    declared_l2 = deriv * problem.bounds.feature_l2(d)
    declared_l1 = deriv * min(math.sqrt(d) * problem.bounds.feature_l2(d), d * problem.bounds.feature_linf(d))
    if c is None:
        b1, b2 = declared_l1, declared_l2
    elif cnorm == "l1":
        b1, b2 = min(c, declared_l1), min(c, declared_l2)
    else:
        b1, b2 = min(c * math.sqrt(d), declared_l1), min(c, declared_l2)
    if math.isinf(b1) or math.isinf(b2):  # pragma: no cover - bounded by construction
        raise InvalidParameterError("clip: the per-example gradient is unbounded; pass a clip norm")
    return b1, b2


def _sampling(o: _CoreOptions, n: int, fam: str, calibration: str) -> tuple[float | None, int, Sampling]:
    """(declared rate, nominal batch size, sampling scheme) of the run."""
    if isinstance(o, OnlineGDwSOptions):
        m = check_int(o.bucket_size, "bucket_size")
        if m > n:
            raise InvalidParameterError("bucket_size: must not exceed the number of samples")
        return None, m, "disjoint"
    assert isinstance(o, GradientOptions)
    batch_size = o.batch_size
    if o.sampling_rate is not None:
        # add/remove neighbours: the user declares the (public) sampling rate and the expected batch
        # size that normalises the noisy sum; nothing below may use the data's n
        rate = float(o.sampling_rate)
        if not (math.isfinite(rate) and 0 < rate <= 1):
            raise InvalidParameterError("sampling_rate: must lie in (0, 1]")
        if batch_size is None:
            raise InvalidParameterError(
                "sampling_rate: also pass batch_size=, the declared (public) expected batch size that "
                "normalises the noisy sum; under add/remove neighbours the data's size is private and "
                "cannot be used"
            )
        if calibration != "tight":
            raise InvalidParameterError(
                "sampling_rate: the thesis's calibration ('paper') samples fixed-size batches of a public n "
                "(replace-one); use calibration='tight' with a declared sampling rate"
            )
        return rate, check_int(batch_size, "batch_size"), "poisson"
    if batch_size is None or batch_size >= n:
        return None, n, "full"
    m = check_int(batch_size, "batch_size")
    return None, m, "poisson" if (fam == "gaussian" and calibration == "tight") else "without_replacement"


def _constants(
    problem: ERMProblem, o: _CoreOptions, Xc: Any, n: int, d: int, bud: Budget | None
) -> tuple[float, float, list[str]]:
    """Mean-scale smoothness and strong convexity (declared, given or -- warned -- from the data)."""
    lam = problem.l2_penalty
    data_constants = o.constants == "data"
    notes: list[str] = []
    if o.smoothness is not None:
        Lm = check_positive(o.smoothness, "smoothness")
    elif data_constants:
        loss = make_loss(problem.loss)
        curv = loss.curvature_bound(problem.bounds.label(not loss.classification))
        if scipy.sparse.issparse(Xc):
            top = float(scipy.sparse.linalg.svds(Xc, k=1, return_singular_vectors=False)[0])
        else:
            top = float(np.linalg.norm(Xc, 2))
        Lm = curv * top * top / n + lam
    else:
        Lm = problem.smoothness(d) + lam
    mum = check_positive(o.strong_convexity, "strong_convexity") if o.strong_convexity is not None else lam
    if data_constants and bud is not None:
        msg = (
            "constants='data' computes L from the private data (as the thesis seems to): the step sizes "
            "leak information that no accountant covers (spec P9); result.privacy.true_epsilon is inf"
        )
        notes.append(msg)
        warnings.warn(msg, PrivacyClaimWarning, stacklevel=4)
    return Lm, mum, notes


def _x0(x0: Any, d: int) -> Array:
    if x0 is None:
        return np.zeros(d)
    arr = np.array(x0, dtype=float).ravel()
    if arr.shape != (d,) or not np.all(np.isfinite(arr)):
        raise InvalidParameterError(f"x0: expected a finite vector of length {d}")
    return arr


def _uniform_segments(ctx: _Context, T: int, first_full: bool = False) -> list[Segment]:
    kind = "full" if ctx.sampling == "full" else "sampled"
    if first_full and kind == "sampled":
        segs = [Segment(1, 1.0 / T, "full_as_sampled")]
        if T > 1:
            segs.append(Segment(T - 1, 1.0 / T, "sampled"))
        return segs
    return [Segment(T, 1.0 / T, kind)]  # type: ignore[arg-type]


def _finish(
    ctx: _Context,
    x: Array,
    *,
    T: int,
    method: str,
    params: dict[str, Any],
    message: str,
) -> OptimizeResult:
    """The shared epilogue: the result of a run of T planned steps (fewer when a callback stopped it)."""
    all_params = ctx.parameters()
    all_params.update(params)
    all_params["iterations"] = T
    diag = nonprivate_diagnostics(ctx.problem, x, ctx.X, ctx.y) if ctx.diagnostics else {}
    assert ctx.plan is not None
    done = T if ctx.stopped_at is None or ctx.stopped_at >= T else ctx.stopped_at
    if done < T:
        message += f"; stopped by the callback after {done} steps (all {T} were paid for)"
    return OptimizeResult(
        solution=x,
        privacy=ctx.spent(),
        status="completed" if done == T else "stopped",
        iterations=done,
        method=method,
        calibration=ctx.plan.calibration,
        parameters=all_params,
        message=message,
        nonprivate_diagnostics=diag,
    )


def _method_name(base: str, ctx: _Context) -> str:
    if ctx.sampling in ("without_replacement", "poisson"):
        return {"dp_gd": "dp_sgd", "dp_heavy_ball": "dp_sheavy_ball", "dp_nesterov": "dp_snesterov"}.get(
            base, base
        )
    return base


# ------------------------------------------------------------------------------------------------
# Loops shared by several methods
# ------------------------------------------------------------------------------------------------


def _smoothed_loop(ctx: _Context, x: Array, T: int, beta: float, alpha: float, first_kind: str) -> Array:
    """DP-GDwS: ``m_t = (1 - β) m_{t-1} + β g̃_t`` (``m_0 = β g̃_0``), ``x_{t+1} = x_t - α m_t``."""
    callback = ctx.options.callback
    mom: Array | None = None
    x = ctx.project(x)
    for t in range(T):
        g = ctx.gradient(x, t, first_kind if t == 0 else "sampled")
        mom = beta * g if mom is None else (1 - beta) * mom + beta * g
        x = ctx.project(x - alpha * mom)
        if ctx.notify(callback, t + 1, x):
            break
    return x


def _stage_loop(
    ctx: _Context,
    x: Array,
    stages: tuple[int, ...],
    alphas: list[float],
    betas: list[float],
    kind: str,
) -> Array:
    """Nesterov's method restarted at each stage (one stage: DP-NAG), stage k with step α_k, momentum β_k."""
    callback = ctx.options.callback
    t = 0
    x = ctx.project(x)
    for n_k, a_k, b_k in zip(stages, alphas, betas, strict=True):
        x_prev = x  # restart: x_0^k = x_1^k = last iterate of the previous stage
        for _ in range(n_k):
            # the extrapolated point may leave the set: the gradient is clipped to the bound there
            yv = (1 + b_k) * x - b_k * x_prev
            x, x_prev = ctx.project(yv - a_k * ctx.gradient(yv, t, kind)), x
            t += 1
            if ctx.notify(callback, t, x):
                return x
    return x
