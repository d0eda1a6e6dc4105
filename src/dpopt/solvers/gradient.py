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
data with ``constants="data"`` (warned: no finite guarantee covers such a run, spec P9).  For a
batch of nominal size m in sum scale the effective constants are ``m·L`` and ``m·μ``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
from numpy.typing import NDArray

from dpopt._validation import check_int, check_positive
from dpopt.accounting import Accountant, Budget
from dpopt.exceptions import InvalidParameterError, PrivacyClaimWarning
from dpopt.iteration import Callback as IterCallback
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
    gdws_step_size,
    plan_noise,
    sampling_variance_term,
)
from dpopt.solvers.minimize import BudgetLike, nonprivate_diagnostics, parse_budget

__all__ = ["dp_gd", "dp_gdws", "dp_heavy_ball", "dp_nesterov", "dp_online_gdws", "surrogate_condition_number"]

Array = NDArray[np.float64]
Callback = IterCallback
ClipNorm = Literal["auto", "l1", "l2"]
GradScale = Literal["sum", "mean"]


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
    sampling_rate: float | None = None  # declared (public) Poisson rate: add/remove analysis
    ridge: float = 0.0  # public surrogate ridge added by the momentum methods when μ = 0 (mean scale)
    plan: NoisePlan | None = None
    perm: NDArray[Any] | None = None
    notes: list[str] = field(default_factory=list)
    stopped_at: int | None = None  # steps done when a callback stopped the run

    def notify(self, callback: Callback | None, t: int, x: Array) -> bool:
        """Call ``callback`` after step ``t`` (1-based); remember the stop when it asks for one."""
        if callback is not None and notify(callback, t, x):
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

    def make_plan(
        self,
        segments: list[Segment],
        accountant: Accountant | None,
        *,
        paper_rule: Literal["bst14", "thesis"],
        tight_accountant: Literal["auto", "rdp", "pld"],
        label: str,
    ) -> NoisePlan:
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
            accountant=accountant,
            paper_rule=paper_rule,
            tight_accountant=tight_accountant,
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
    noise: str,
    clip: float | None,
    clip_norm: str,
    batch_size: int | None,
    online: bool = False,
    sampling_rate: float | None = None,
    grad_scale: str,
    constants: str,
    smoothness: float | None,
    strong_convexity: float | None,
) -> _Context:
    if not isinstance(problem, ERMProblem):
        raise InvalidParameterError("problem: expected a dpopt.problems.ERMProblem")
    if calibration not in ("tight", "paper"):
        raise InvalidParameterError("calibration: must be 'tight' or 'paper'")
    if grad_scale not in ("sum", "mean"):
        raise InvalidParameterError("grad_scale: must be 'sum' or 'mean'")
    if constants not in ("declared", "data"):
        raise InvalidParameterError("constants: must be 'declared' or 'data'")
    bud = parse_budget(budget)
    if noise == "auto":
        fam = "laplace" if (bud is None or bud.delta == 0 or calibration == "paper") else "gaussian"
    elif noise in ("laplace", "gaussian"):
        fam = noise
    else:
        raise InvalidParameterError("noise: must be 'auto', 'laplace' or 'gaussian'")
    if clip_norm == "auto":
        cnorm = "l1" if fam == "laplace" else "l2"
    elif clip_norm in ("l1", "l2"):
        cnorm = clip_norm
    else:
        raise InvalidParameterError("clip_norm: must be 'auto', 'l1' or 'l2'")
    c = None if clip is None else check_positive(clip, "clip")
    Xc, yc = problem.prepare(X, y)
    n, d = Xc.shape
    # per-example bounds: from clipping, and from the declared data bounds (both valid; take the min)
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
    rate: float | None = None
    if sampling_rate is not None:
        # add/remove neighbours: the user declares the (public) sampling rate and the expected batch
        # size that normalises the noisy sum; nothing below may use the data's n
        rate = float(sampling_rate)
        if not (math.isfinite(rate) and 0 < rate <= 1):
            raise InvalidParameterError("sampling_rate: must lie in (0, 1]")
        if online:  # pragma: no cover - dp_online_gdws has no sampling_rate
            raise InvalidParameterError("sampling_rate: not available for disjoint buckets")
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
        m = check_int(batch_size, "batch_size")
        sampling: Sampling = "poisson"
    elif online:
        m = check_int(batch_size, "bucket_size")
        if m > n:
            raise InvalidParameterError("bucket_size: must not exceed the number of samples")
        sampling = "disjoint"
    elif batch_size is None or batch_size >= n:
        if batch_size is not None:
            check_int(batch_size, "batch_size")
        m, sampling = n, "full"
    else:
        m = check_int(batch_size, "batch_size")
        sampling = "poisson" if (fam == "gaussian" and calibration == "tight") else "without_replacement"
    lam = problem.l2_penalty
    data_constants = constants == "data"
    notes: list[str] = []
    if smoothness is not None:
        Lm = check_positive(smoothness, "smoothness")
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
    mum = check_positive(strong_convexity, "strong_convexity") if strong_convexity is not None else lam
    if data_constants and bud is not None:
        msg = (
            "constants='data' computes L from the private data (as the thesis seems to): the step sizes "
            "leak information that no accountant covers (spec P9); result.privacy.true_epsilon is inf"
        )
        notes.append(msg)
        warnings.warn(msg, PrivacyClaimWarning, stacklevel=3)
    gen = check_rng(rng)
    np_gen = gen.generator if isinstance(gen, SecureRNG) else gen
    ctx = _Context(
        X=Xc,
        y=yc,
        problem=problem,
        loss=make_loss(problem.loss),
        n=n,
        d=d,
        clip=None if c is None else (b1 if cnorm == "l1" else b2),
        clip_norm=cnorm,  # type: ignore[arg-type]
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
        grad_scale=grad_scale,  # type: ignore[arg-type]
        smoothness=Lm,
        strong_convexity=mum,
        data_constants=data_constants,
        gen=gen,
        np_gen=np_gen,
        sampling_rate=rate,
        notes=notes,
    )
    return ctx


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
    diagnostics: bool,
) -> OptimizeResult:
    all_params = ctx.parameters()
    all_params.update(params)
    all_params["iterations"] = T
    diag = nonprivate_diagnostics(ctx.problem, x, ctx.X, ctx.y) if diagnostics else {}
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
    iterations : int, default 1000
        Number of steps T (fixed before the run).
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


def _docfmt(fn: Callable[..., Any]) -> Callable[..., Any]:
    if fn.__doc__:
        fn.__doc__ = fn.__doc__.replace("{common}", _COMMON_DOC.strip()).replace(
            "{privacy}", _COMMON_PRIVACY.strip()
        )
    return fn


def _step_value(step: Any, name: str = "step") -> float:
    return check_positive(step, name)


# ------------------------------------------------------------------------------------------------
# Baselines
# ------------------------------------------------------------------------------------------------


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
    iterations: int = 1000,
    batch_size: int | None = None,
    sampling_rate: float | None = None,
    step: str | float = "inv_sqrt",
    step_scale: float = 1.0,
    average: Literal["none", "suffix", "auto"] = "none",
    clip: float | None = 2.0,
    clip_norm: ClipNorm = "auto",
    noise: str = "auto",
    grad_scale: GradScale = "mean",
    constants: str = "declared",
    smoothness: float | None = None,
    strong_convexity: float | None = None,
    paper_rule: Literal["bst14", "thesis"] = "bst14",
    tight_accountant: Literal["auto", "rdp", "pld"] = "auto",
    x0: Any = None,
    callback: Callback | None = None,
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
    ctx = _setup(
        problem, X, y, budget=budget, rng=rng, calibration=calibration, noise=noise, clip=clip,
        clip_norm=clip_norm, batch_size=batch_size, sampling_rate=sampling_rate, grad_scale=grad_scale,
        constants=constants,
        smoothness=smoothness, strong_convexity=strong_convexity,
    )  # fmt: skip
    T = check_int(iterations, "iterations")
    ctx.make_plan(
        _uniform_segments(ctx, T), accountant, paper_rule=paper_rule, tight_accountant=tight_accountant,
        label="dp-gd",
    )  # fmt: skip
    if step == "inv_sqrt":
        s0 = check_positive(step_scale, "step_scale")
        alphas = s0 / np.sqrt(np.arange(1, T + 1))
    elif step == "inverse_L":
        alphas = np.full(T, 1.0 / ctx.L)
    elif step == "noise_scaled":
        alphas = np.full(T, noise_scaled_step(ctx, check_positive(step_scale, "step_scale")))
    else:
        alphas = np.full(T, _step_value(step))
    if average not in ("none", "suffix", "auto"):
        raise InvalidParameterError("average: must be 'none', 'suffix' or 'auto'")
    plan = ctx.plan
    assert plan is not None
    multiplier = float(plan.step_scales[0]) / plan.sensitivity if plan.private else 0.0
    use_avg = average == "suffix" or (average == "auto" and multiplier >= SUFFIX_AVERAGE_MULTIPLIER)
    start = T - T // 2 if use_avg else T  # iterates x_{start+1}, ..., x_T are averaged
    x = ctx.project(_x0(x0, ctx.d))
    acc, count = np.zeros_like(x), 0
    for t in range(T):
        x = ctx.project(x - alphas[t] * ctx.gradient(x, t))
        if t >= start:
            acc += x
            count += 1
        if ctx.notify(callback, t + 1, x):
            break
    out = acc / count if count else x  # a convex combination of points of the set stays in it
    return _finish(
        ctx, out, T=T, method=_method_name("dp_gd", ctx),
        params={"step": step if isinstance(step, str) else "constant", "step_first": float(alphas[0]),
                "step_last": float(alphas[-1]), "average": "suffix" if count else "none",
                "averaged_iterates": count, "noise_multiplier": multiplier},
        message=f"ran the planned T={T} noisy gradient steps", diagnostics=diagnostics,
    )  # fmt: skip


#: ``dp_gd(step="noise_scaled")``: the full ``step_scale`` while the per-step noise standard deviation
#: is at most this many per-example gradient bounds, ``∝ 1/σ`` above.  Chosen with
#: ``LOGISTIC_STEP_MULTIPLIER`` of :mod:`dpopt.solvers.minimize` on validation splits of the *training*
#: data of Adult and breast cancer (``benchmarks/erm_logistic_validation.py``): the best constant
#: step of the grid 1, 2, 4, 8 (× 1/(4L)) fell from 8 to 1 as σ/C grew from 1 to 12 (add/remove)
#: and from 2 to 23 (replace-one).
NOISE_SCALED_STEP = 1.5


def noise_scaled_step(ctx: _Context, scale: float) -> float:
    """``scale · min(1, NOISE_SCALED_STEP / r)``, r = the plan's noise std / the per-example bound."""
    plan = ctx.plan
    assert plan is not None
    if not plan.private:
        return scale
    bound = ctx.bound_l2 if ctx.noise_norm == "l2" else ctx.bound_l1
    r = float(plan.step_scales[0]) / bound if bound > 0 else math.inf
    return scale * min(1.0, NOISE_SCALED_STEP / r) if r > 0 else scale


#: ``dp_gd(average="auto")`` averages the last half of the iterates from this per-step noise
#: multiplier σ/Δ on.  Chosen on a validation split of Adult's *training* set (70/30, 3 seeds,
#: add/remove DP-SGD defaults): at multiplier 15.5 (ε = 0.1) the suffix average gained 0.012 accuracy
#: (0.807 vs 0.795), at 2.8 / 1.6 / 0.7 (ε = 0.5 / 1 / 5) it lost 0.001-0.0015; 6 lies between.
SUFFIX_AVERAGE_MULTIPLIER = 6.0


def _momentum_default(kappa: float, squared: bool) -> float:
    r = (math.sqrt(kappa) - 1) / (math.sqrt(kappa) + 1)
    return r * r if squared else r


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
    iterations: int = 1000,
    batch_size: int | None = None,
    sampling_rate: float | None = None,
    step: float | None = None,
    momentum: float | None = None,
    clip: float | None = 2.0,
    clip_norm: ClipNorm = "auto",
    noise: str = "auto",
    grad_scale: GradScale = "sum",
    constants: str = "declared",
    smoothness: float | None = None,
    strong_convexity: float | None = None,
    paper_rule: Literal["bst14", "thesis"] = "bst14",
    tight_accountant: Literal["auto", "rdp", "pld"] = "auto",
    x0: Any = None,
    callback: Callback | None = None,
) -> OptimizeResult:
    """DP heavy ball (DP-HB; DP-SHB with ``batch_size``).

    ``x_{t+1} = x_t - α g̃(x_t) + β̄ (x_t - x_{t-1})`` with ``α = 1/L`` and
    ``β̄ = ((√κ - 1)/(√κ + 1))²`` by default (spec §3.7).

    Parameters
    ----------
    {common}
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

    Privacy
    -------
    {privacy}
    """
    ctx = _setup(
        problem, X, y, budget=budget, rng=rng, calibration=calibration, noise=noise, clip=clip,
        clip_norm=clip_norm, batch_size=batch_size, sampling_rate=sampling_rate, grad_scale=grad_scale,
        constants=constants,
        smoothness=smoothness, strong_convexity=strong_convexity,
    )  # fmt: skip
    T = check_int(iterations, "iterations")
    if momentum is None:  # the default momentum needs μ: a public surrogate ridge when there is none
        ctx.ensure_strong_convexity(T)
    alpha = 1.0 / ctx.L if step is None else _step_value(step)
    beta = _momentum_default(ctx.kappa, True) if momentum is None else _check_momentum(momentum)
    ctx.make_plan(
        _uniform_segments(ctx, T), accountant, paper_rule=paper_rule, tight_accountant=tight_accountant,
        label="dp-heavy-ball",
    )  # fmt: skip
    x = ctx.project(_x0(x0, ctx.d))
    x_prev = x
    for t in range(T):
        x, x_prev = ctx.project(x - alpha * ctx.gradient(x, t) + beta * (x - x_prev)), x
        if ctx.notify(callback, t + 1, x):
            break
    return _finish(
        ctx, x, T=T, method=_method_name("dp_heavy_ball", ctx),
        params={"step": alpha, "momentum": beta, "step_times_L": alpha * ctx.L},
        message=f"ran the planned T={T} noisy heavy-ball steps", diagnostics=diagnostics,
    )  # fmt: skip


def _check_momentum(value: Any) -> float:
    b = float(value)
    if not 0 <= b < 1:
        raise InvalidParameterError("momentum: must lie in [0, 1)")
    return b


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
    iterations: int = 1000,
    batch_size: int | None = None,
    sampling_rate: float | None = None,
    step: float | None = None,
    momentum: float | None = None,
    clip: float | None = 2.0,
    clip_norm: ClipNorm = "auto",
    noise: str = "auto",
    grad_scale: GradScale = "sum",
    constants: str = "declared",
    smoothness: float | None = None,
    strong_convexity: float | None = None,
    paper_rule: Literal["bst14", "thesis"] = "bst14",
    tight_accountant: Literal["auto", "rdp", "pld"] = "auto",
    x0: Any = None,
    callback: Callback | None = None,
) -> OptimizeResult:
    """DP Nesterov accelerated gradient (DP-NAG; DP-SNAG with ``batch_size``).

    ``z_t = (1 + β̄) x_t - β̄ x_{t-1}``, ``x_{t+1} = z_t - α g̃(z_t)`` with ``α = 1/L`` and
    ``β̄ = (√κ - 1)/(√κ + 1)`` by default (spec §3.7).

    Parameters
    ----------
    {common}
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

    Privacy
    -------
    {privacy}
    """
    ctx = _setup(
        problem, X, y, budget=budget, rng=rng, calibration=calibration, noise=noise, clip=clip,
        clip_norm=clip_norm, batch_size=batch_size, sampling_rate=sampling_rate, grad_scale=grad_scale,
        constants=constants,
        smoothness=smoothness, strong_convexity=strong_convexity,
    )  # fmt: skip
    T = check_int(iterations, "iterations")
    if momentum is None:  # the default momentum needs μ: a public surrogate ridge when there is none
        ctx.ensure_strong_convexity(T)
    alpha = 1.0 / ctx.L if step is None else _step_value(step)
    beta = _momentum_default(ctx.kappa, False) if momentum is None else _check_momentum(momentum)
    ctx.make_plan(
        _uniform_segments(ctx, T), accountant, paper_rule=paper_rule, tight_accountant=tight_accountant,
        label="dp-nesterov",
    )  # fmt: skip
    x = ctx.project(_x0(x0, ctx.d))
    x_prev = x
    for t in range(T):
        z = (1 + beta) * x - beta * x_prev  # may leave the set: the gradient is clipped to the bound
        x, x_prev = ctx.project(z - alpha * ctx.gradient(z, t)), x
        if ctx.notify(callback, t + 1, x):
            break
    return _finish(
        ctx, x, T=T, method=_method_name("dp_nesterov", ctx),
        params={"step": alpha, "momentum": beta, "step_times_L": alpha * ctx.L},
        message=f"ran the planned T={T} noisy Nesterov steps", diagnostics=diagnostics,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------
# DP-GDwS / DP-SGDwS / DP-onlineGDwS
# ------------------------------------------------------------------------------------------------


def _smoothed_loop(
    ctx: _Context, x: Array, T: int, beta: float, alpha: float, first_kind: str, callback: Callback | None
) -> Array:
    mom: Array | None = None
    x = ctx.project(x)
    for t in range(T):
        g = ctx.gradient(x, t, first_kind if t == 0 else "sampled")
        mom = beta * g if mom is None else (1 - beta) * mom + beta * g
        x = ctx.project(x - alpha * mom)
        if ctx.notify(callback, t + 1, x):
            break
    return x


def _gdws_step(ctx: _Context, T: int, beta: float, step: Any, safeguard: bool) -> tuple[float, str, bool]:
    if step == "noise_aware":
        alpha = gdws_step_size(T, beta, ctx.d, ctx.noise_variance(), ctx.sampling_term())
        rule = "noise_aware"
    elif step == "inverse_L":
        alpha, rule = 1.0 / ctx.L, "inverse_L"
    else:
        alpha, rule = _step_value(step), "constant"
    capped = False
    if safeguard and alpha > 1.0 / ctx.L:
        alpha, capped = 1.0 / ctx.L, True
    return alpha, rule, capped


def _check_smoothing(value: Any) -> float:
    b = float(value)
    if not 0 < b <= 1:
        raise InvalidParameterError("smoothing: the weight β must lie in (0, 1]")
    return b


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
    iterations: int = 1000,
    smoothing: float = 0.1,
    batch_size: int | None = None,
    sampling_rate: float | None = None,
    step: str | float = "noise_aware",
    safeguard: bool = False,
    first_step: Literal["auto", "full", "subsample"] = "auto",
    clip: float | None = 2.0,
    clip_norm: ClipNorm = "auto",
    noise: str = "auto",
    grad_scale: GradScale = "sum",
    constants: str = "declared",
    smoothness: float | None = None,
    strong_convexity: float | None = None,
    paper_rule: Literal["bst14", "thesis"] = "bst14",
    tight_accountant: Literal["auto", "rdp", "pld"] = "auto",
    x0: Any = None,
    callback: Callback | None = None,
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
    ctx = _setup(
        problem, X, y, budget=budget, rng=rng, calibration=calibration, noise=noise, clip=clip,
        clip_norm=clip_norm, batch_size=batch_size, sampling_rate=sampling_rate, grad_scale=grad_scale,
        constants=constants,
        smoothness=smoothness, strong_convexity=strong_convexity,
    )  # fmt: skip
    T = check_int(iterations, "iterations")
    beta = _check_smoothing(smoothing)
    if first_step not in ("auto", "full", "subsample"):
        raise InvalidParameterError("first_step: must be 'auto', 'full' or 'subsample'")
    fs = ("full" if calibration == "paper" else "subsample") if first_step == "auto" else first_step
    stochastic = ctx.sampling != "full"
    segs = _uniform_segments(ctx, T, first_full=stochastic and fs == "full" and calibration == "paper")
    if stochastic and fs == "full" and calibration != "paper":
        segs = [Segment(1, 1.0 / T, "full"), *([Segment(T - 1, 1.0 / T, "sampled")] if T > 1 else [])]
    ctx.make_plan(segs, accountant, paper_rule=paper_rule, tight_accountant=tight_accountant, label="dp-gdws")
    alpha, rule, capped = _gdws_step(ctx, T, beta, step, safeguard)
    first_kind = segs[0].kind
    x = _smoothed_loop(ctx, _x0(x0, ctx.d), T, beta, alpha, first_kind, callback)
    name = "dp_sgdws" if stochastic else "dp_gdws"
    return _finish(
        ctx, x, T=T, method=name,
        params={"smoothing": beta, "step": alpha, "step_rule": rule, "step_capped": capped,
                "step_times_L": alpha * ctx.L, "first_step": fs if stochastic else "full"},
        message=f"ran the planned T={T} smoothed noisy gradient steps (β={beta:g})", diagnostics=diagnostics,
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
    bucket_size: int = 10,
    smoothing: float = 0.1,
    step: str | float = "noise_aware",
    safeguard: bool = False,
    clip: float | None = 2.0,
    clip_norm: ClipNorm = "auto",
    noise: str = "auto",
    grad_scale: GradScale = "sum",
    constants: str = "declared",
    smoothness: float | None = None,
    strong_convexity: float | None = None,
    x0: Any = None,
    callback: Callback | None = None,
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
    ctx = _setup(
        problem, X, y, budget=budget, rng=rng, calibration=calibration, noise=noise, clip=clip,
        clip_norm=clip_norm, batch_size=bucket_size, online=True, grad_scale=grad_scale,
        constants=constants, smoothness=smoothness, strong_convexity=strong_convexity,
    )  # fmt: skip
    T = ctx.n // ctx.batch
    beta = _check_smoothing(smoothing)
    ctx.make_plan(
        [Segment(T, 1.0 / T, "sampled")], accountant, paper_rule="bst14", tight_accountant="rdp",
        label="dp-online-gdws",
    )  # fmt: skip
    alpha, rule, capped = _gdws_step(ctx, T, beta, step, safeguard)
    x = _smoothed_loop(ctx, _x0(x0, ctx.d), T, beta, alpha, "sampled", callback)
    return _finish(
        ctx, x, T=T, method="dp_online_gdws",
        params={"smoothing": beta, "step": alpha, "step_rule": rule, "step_capped": capped,
                "step_times_L": alpha * ctx.L, "bucket_size": ctx.batch},
        message=f"one pass over {T} disjoint buckets of {ctx.batch} records (β={beta:g})",
        diagnostics=diagnostics,
    )  # fmt: skip
