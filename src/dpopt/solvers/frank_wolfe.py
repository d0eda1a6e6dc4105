"""Private Frank-Wolfe (Noise-FW, Algorithms 4 and 5 of Talwar-Thakurta-Zhang, seed 002).

* **Polytope variant** (Alg. 4): C = conv(S) for a finite vertex set S (l1 ball: S = {±r e_j},
  simplex, or a :class:`~dpopt.problems.Polytope`).  Each step selects a vertex by report-noisy-min
  over the scores ``<s, ∇F(θ_t)>`` with Laplace noise and moves ``θ ← (1-μ)θ + μ s``.  For the l1
  ball the scores cost O(p) from the gradient; the predictions ``z = Xθ`` are updated in O(n) per
  step from one column of X, so an iteration reads X once (for the gradient ``Xᵀφ'(z)``), or not
  at all for the squared loss with the Gram-matrix path (O(p) per step after an O(np²) set-up).
* **Gaussian variant** (Alg. 5): any set with a linear minimisation oracle; the LMO is applied to
  the gradient plus Gaussian noise.

Step sizes: ``μ_t = 2/(t+2)`` (Jaggi 2013, which gives the O(Γ/T) term; default), the paper's
constant ``μ = 1/(T+2)``, or ``μ_t = 1/t`` (``"average"``: θ_T is the average of the selected
vertices, robust to wrong selections and exact for a k-sparse target with T-1 = k selections).
``residual_clip=c`` clips the loss derivative φ' to [-c, c] (a Huber-type loss for least squares),
which lowers the selection's sensitivity from the declared residual bound to c.  Only the selected vertices / LMO outputs are covered by the analysis: the
noisy scores and exact gradients are never returned.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal

import numpy as np
import scipy.sparse
import scipy.stats
from numpy.typing import NDArray

from dpopt._validation import check_int
from dpopt.accounting import (
    Accountant,
    Budget,
    EpsilonDeltaEvent,
    GaussianEvent,
    Neighbouring,
    PrivacyEvent,
    RepeatedEvent,
    ReportNoisyMinEvent,
    advanced_composition_step,
    certify,
    check_caller_accountant,
    commit,
)
from dpopt.exceptions import InvalidParameterError
from dpopt.iteration import Callback, Status, notify
from dpopt.mechanisms import GaussianMechanism, ReportNoisyMin, laplace_noise
from dpopt.problems import ERMProblem, L1Ball, Simplex, SquaredLoss, VertexSet
from dpopt.randomness import RNGLike, SecureRNG, check_rng
from dpopt.solvers._result import OptimizeResult
from dpopt.solvers.minimize import (
    BudgetLike,
    check_accountant,
    check_calibration,
    gaussian_sigma_for_steps,
    nonprivate_diagnostics,
    parse_budget,
)

__all__ = ["private_frank_wolfe", "theory_iterations_polytope"]

Array = NDArray[np.float64]


def theory_iterations_polytope(n: int, epsilon: float, curvature: float, l1_scale: float) -> int:
    """T of [TTZ] Thm 5.5: ``(Γ n ε / (L₁‖C‖₁))^{2/3}`` rounded up, at least 2."""
    return max(2, math.ceil((curvature * n * epsilon / l1_scale) ** (2 / 3)))


def _pure_composition_delta(eps0: float, k: int, epsilon: float) -> float:
    """Exact δ(ε) of the k-fold composition of ε0-DP mechanisms (Kairouz-Oh-Viswanath 2015).

    Randomised response dominates every ε0-DP mechanism, so the privacy loss of k adaptive ε0-DP
    steps is dominated by ε0(2J - k) with J ~ Binomial(k, e^ε0/(1 + e^ε0)).
    """
    j = np.arange(k + 1)
    p = 1.0 / (1.0 + math.exp(-eps0))
    loss = eps0 * (2 * j - k)
    logpmf = scipy.stats.binom.logpmf(j, k, p)
    mask = loss > epsilon
    if not np.any(mask):
        return 0.0
    return float(np.sum(np.exp(logpmf[mask]) * -np.expm1(epsilon - loss[mask])))


@functools.lru_cache(maxsize=256)
def _tight_rnm_scale(
    sens: float, steps: int, epsilon: float, delta: float, neighbouring: Neighbouring = "replace_one"
) -> float:
    """Smallest Laplace scale (about 0.2%) for ``steps`` report-noisy-min selections.

    The per-step ε0 is found with the exact optimal composition of pure-DP steps, then lowered
    until the PLD accountant (which rounds pessimistically) certifies the budget.
    """
    if delta <= 0:
        return 2 * sens * steps / epsilon
    lo, hi = 0.0, epsilon
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if _pure_composition_delta(mid, steps, epsilon) <= delta:
            lo = mid
        else:
            hi = mid
    eps0 = lo
    # the ε0 found by the exact composition is nudged down (the scale up) until the PLD accountant,
    # which rounds pessimistically, certifies it
    return certify(
        lambda scale: RepeatedEvent(ReportNoisyMinEvent(scale, sens), steps),
        2 * sens / eps0,
        Budget(epsilon, delta),
        accountant="pld",
        neighbouring=neighbouring,
        ratio=1.005,
        max_steps=200,
    )


def _mu(t: int, T: int, rule: str) -> float:
    if rule == "average":
        return 1.0 / t
    return 2.0 / (t + 2) if rule == "jaggi" else 1.0 / (T + 2)


def _derivative(loss: Any, z: Array, y: Array, clip: float | None) -> Array:
    d = loss.derivative(z, y)
    return d if clip is None else np.clip(d, -clip, clip)


class _Predictions:
    """Maintains z = Xθ under θ ← (1-μ)θ + μ s, reading one column of X when s is a coordinate vertex."""

    def __init__(self, X: Any, theta: Array) -> None:
        self.X = X
        self.sparse = scipy.sparse.issparse(X)
        self.Xcsc = X.tocsc() if self.sparse else None
        self.z = np.asarray(X @ theta).ravel()

    def column(self, j: int) -> Array:
        if self.Xcsc is not None:
            col = np.zeros(self.X.shape[0])
            lo, hi = self.Xcsc.indptr[j], self.Xcsc.indptr[j + 1]
            col[self.Xcsc.indices[lo:hi]] = self.Xcsc.data[lo:hi]
            return col
        return np.asarray(self.X[:, j])

    def update(self, mu: float, Xs: Array) -> None:
        self.z *= 1 - mu
        self.z += mu * Xs


def private_frank_wolfe(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str = "tight",
    accountant: Accountant | None = None,
    diagnostics: bool = False,
    variant: Literal["auto", "polytope", "gaussian"] = "auto",
    iterations: int | None = None,
    max_iterations: int = 5000,
    step_rule: Literal["jaggi", "paper", "average"] = "jaggi",
    gram: Literal["auto"] | bool = "auto",
    residual_clip: float | None = None,
    callback: Callback | None = None,
    declared_size: int | None = None,
) -> OptimizeResult:
    """Private Frank-Wolfe (Noise-FW, [TTZ] Algorithms 4 and 5).

    Parameters
    ----------
    problem : ERMProblem
        Needs a bounded constraint set; the polytope variant needs a vertex polytope
        (:class:`~dpopt.problems.L1Ball`, :class:`~dpopt.problems.Simplex`,
        :class:`~dpopt.problems.Polytope`).
    X, y
        Private data, dense or CSR sparse (cost proportional to the non-zeros).
    budget, rng, calibration, accountant, diagnostics
        See :func:`dpopt.solvers.minimize`.  Polytope variant: ``"tight"``, ``"conservative"`` or
        ``"paper"``; Gaussian variant: ``"tight"`` or ``"paper"``.
    variant : {"auto", "polytope", "gaussian"}, default "auto"
        ``"auto"`` = polytope for vertex polytopes, Gaussian otherwise.
    iterations : int, optional
        T (the run makes T-1 private selections and returns θ_T).  Default: the theorem's T,
        ``(Γnε/(L₁‖C‖₁))^{2/3}`` (Thm 5.5) or ``Γ^{2/3}(nε)^{2/3}/(L₂G_C)^{2/3}`` (Thm B.2), capped at
        ``max_iterations``.
    max_iterations : int, default 5000
        Cap on the default T (recorded in ``result.parameters``).
    step_rule : {"jaggi", "paper", "average"}, default "jaggi"
        ``μ_t = 2/(t+2)``, the paper's constant ``μ = 1/(T+2)``, or ``μ_t = 1/t`` (θ_T = average of
        the selected vertices) (privacy does not depend on μ).
    gram : "auto" or bool, default "auto"
        For the squared loss on the l1 ball / simplex: precompute ``XᵀX/n`` and update the gradient in
        O(p) per step.  ``"auto"`` uses it for dense X when p < T (never with ``residual_clip``).
    residual_clip : float, optional
        Clip the loss derivative φ'(⟨x, θ⟩, y) of every example to ``[-c, c]`` before it enters the
        gradient (for least squares: the Huber loss's gradient).  The sensitivity then uses
        ``min(c, sup|φ'|)`` instead of the declared bound ``sup|φ'|``.  ``None`` (default): no clipping.
    callback : callable, optional
        ``callback(info)`` after every step with a :class:`dpopt.iteration.IterationInfo`
        (``info.nit``, ``info.x`` = θ_t); returning ``True`` or raising ``StopIteration`` stops the
        run (status ``"stopped"``, solution θ_t; the whole planned run was already paid for).
    declared_size : int, optional
        Polytope variant only: analyse the run under **add/remove** neighbours with a public,
        declared dataset size N (the data's own size is then private and never used): the scores
        are ``<s, Σᵢ∇ℓᵢ>/N + λ<s, θ>`` and one record added or removed moves each by at most
        ``Δ = min(‖C‖₁ L_∞, ‖C‖₂ L₂)/N``; the default T is computed from N.  A wrong N costs
        accuracy, never privacy.

    Returns
    -------
    OptimizeResult

    Privacy
    -------
    Replace-one neighbours (add/remove with ``declared_size``), declared bounds.  **Polytope variant**: each of the T-1 selections is
    report-noisy-min over ``|S|`` scores ``<s, ∇F>``, whose sensitivity is
    ``Δ = (2/n)·min(‖C‖₁ L_∞, ‖C‖₂ L₂)`` (L_∞, L₂ = ``problem.lipschitz("linf"/"l2")``); with
    Laplace scale b it is (2Δ/b)-DP.  ``"tight"`` (default): the smallest b for which the PLD
    accountant certifies the (T-1)-fold composition; ``"conservative"``: per-step ε₀ from strong
    composition (δ' = δ), b = 2Δ/ε₀; ``"paper"``: ``b = L₁‖C‖₁ sqrt(8T log(1/δ))/(nε)``, which is
    about half the scale the general report-noisy-min proof needs under replace-one neighbours --
    a :class:`~dpopt.exceptions.PrivacyClaimWarning` is issued and ``result.privacy`` reports the
    true ε (≈ 2ε).  **Gaussian variant**: T-1 Gaussian releases of the gradient (l2 sensitivity
    ``2L₂/n``); ``"tight"`` as for mirror descent; ``"paper"``:
    ``σ² = 32 L₂² T log²(max(n, T)/δ)/(nε)²`` (the spec's fix of the printed formula).  Only the
    selected vertices / LMO outputs are released.
    """
    if not isinstance(problem, ERMProblem):
        raise InvalidParameterError("problem: expected a dpopt.problems.ERMProblem")
    C = problem.constraint
    if C is None:
        raise InvalidParameterError("Frank-Wolfe needs a bounded constraint set (problem.constraint)")
    if variant == "auto":
        variant = "polytope" if isinstance(C, VertexSet) else "gaussian"
    if variant not in ("polytope", "gaussian"):
        raise InvalidParameterError("variant: must be 'auto', 'polytope' or 'gaussian'")
    if variant == "polytope" and not isinstance(C, VertexSet):
        raise InvalidParameterError("variant='polytope' needs a vertex polytope (L1Ball, Simplex, Polytope)")
    allowed = ("tight", "conservative", "paper") if variant == "polytope" else ("tight", "paper")
    calibration = check_calibration(calibration, allowed)
    if step_rule not in ("jaggi", "paper", "average"):
        raise InvalidParameterError("step_rule: must be 'jaggi', 'paper' or 'average'")
    bud = parse_budget(budget)
    relation: Neighbouring = "replace_one" if declared_size is None else "add_remove"
    if declared_size is not None:
        declared_size = check_int(declared_size, "declared_size", minimum=1)
        if variant != "polytope":
            raise InvalidParameterError("declared_size (add/remove neighbours): polytope variant only")
        if calibration == "paper":
            raise InvalidParameterError(
                "declared_size (add/remove neighbours): calibration='paper' is replace-one"
            )
    acct = check_accountant(accountant) if declared_size is None else check_caller_accountant(
        accountant, "add_remove", who="Frank-Wolfe with declared_size"
    )  # fmt: skip
    max_iterations = check_int(max_iterations, "max_iterations", minimum=2)  # T-1 >= 1 selections
    Xc, yc = problem.prepare(X, y)
    n, _p = Xc.shape
    # the scores' normaliser: the public n (replace-one) or the declared N (add/remove; n is private)
    norm = float(n if declared_size is None else declared_size)
    L2 = problem.lipschitz("l2")
    Linf = problem.lipschitz("linf")
    gamma = problem.curvature()
    if residual_clip is not None:
        c = float(residual_clip)
        if not (math.isfinite(c) and c > 0):
            raise InvalidParameterError("residual_clip: must be a positive finite number or None")
        shrink = min(1.0, c / problem.derivative_bound())
        L2, Linf = L2 * shrink, Linf * shrink
        residual_clip = c if shrink < 1.0 else None  # a clip above the declared bound changes nothing

    if variant == "polytope":
        l1_scale = min(C.radius_l1 * Linf, C.radius_l2 * L2)  # "L₁‖C‖₁"
        # replace-one: a record's term changes by up to 2·l1_scale; add/remove: appears or vanishes
        sens = (2 * l1_scale if declared_size is None else l1_scale) / norm
        width = None
    else:
        l1_scale = L2
        sens = 2 * L2 / n
        width = C.gaussian_width(rng=0).value  # data independent

    capped = False
    if iterations is not None:
        T = check_int(iterations, "iterations", minimum=2)
    elif bud is None:
        T = max_iterations
    else:
        if variant == "polytope":
            T = theory_iterations_polytope(int(norm), bud.epsilon, gamma, l1_scale)
        else:
            assert width is not None
            T = max(2, math.ceil(gamma ** (2 / 3) * (n * bud.epsilon) ** (2 / 3) / (L2 * width) ** (2 / 3)))
        if T > max_iterations:
            T, capped = max_iterations, True
    steps = T - 1

    event: PrivacyEvent | None = None
    scale = 0.0
    kind = "pld"
    if bud is not None:
        if variant == "polytope":
            if calibration == "paper":
                if bud.delta <= 0:
                    raise InvalidParameterError("calibration='paper' uses log(1/δ) and needs δ > 0")
                scale = l1_scale * math.sqrt(8 * T * math.log(1 / bud.delta)) / (n * bud.epsilon)
                event = EpsilonDeltaEvent(
                    bud.epsilon,
                    bud.delta,
                    source=RepeatedEvent(ReportNoisyMinEvent(scale, sens), steps),
                    rule="ttz-alg4",
                )
                kind = "advanced"
            elif calibration == "conservative":
                if bud.delta <= 0:
                    scale = 2 * sens * steps / bud.epsilon
                elif declared_size is not None:
                    raise InvalidParameterError("calibration='conservative' with δ > 0 is replace-one only")
                else:
                    eps0, _ = advanced_composition_step(bud.epsilon, bud.delta, steps, slack_fraction=1.0)
                    scale = 2 * sens / eps0 * (1 + 1e-9)
                event = RepeatedEvent(ReportNoisyMinEvent(scale, sens), steps)
                kind = "advanced"
            else:
                scale = _tight_rnm_scale(sens, steps, bud.epsilon, bud.delta, relation)
                event = RepeatedEvent(ReportNoisyMinEvent(scale, sens), steps)
        else:
            if bud.delta <= 0:
                raise InvalidParameterError("the Gaussian Frank-Wolfe variant needs δ > 0 in the budget")
            if calibration == "paper":
                scale = math.sqrt(32 * L2**2 * T * math.log(max(n, T) / bud.delta) ** 2) / (n * bud.epsilon)
                event = EpsilonDeltaEvent(
                    bud.epsilon,
                    bud.delta,
                    source=RepeatedEvent(GaussianEvent(scale, sens), steps),
                    rule="ttz-alg5",
                )
                kind = "advanced"
            else:
                scale = gaussian_sigma_for_steps(bud, sens, steps)
                event = RepeatedEvent(GaussianEvent(scale, sens), steps)

    # ---- budget first
    privacy = commit(
        event, budget=bud, neighbouring=relation, kind=kind, accountant=acct, label=f"frank-wolfe-{variant}"
    )
    gen = check_rng(rng)

    if variant == "polytope":
        assert isinstance(C, VertexSet)
        theta, used_gram, done = _run_polytope(
            problem, C, Xc, yc, steps, T, scale, step_rule, gram, gen, callback, sens=sens, clip=residual_clip,
            norm=norm,
        )  # fmt: skip
    else:
        (theta, done), used_gram = (
            _run_gaussian(
                problem, Xc, yc, steps, T, scale, sens, step_rule, gen, callback, clip=residual_clip
            ),
            False,
        )
    status: Status = "completed" if done == steps else "stopped"

    params: dict[str, Any] = {
        "variant": variant,
        "iterations": T,
        "iterations_capped": capped,
        "step_rule": step_rule,
        "noise": "laplace" if variant == "polytope" else "gaussian",
        "noise_scale": scale,
        "sensitivity": sens,
        "curvature": gamma,
        "lipschitz_l2": L2,
        "lipschitz_linf": Linf,
        "gram": used_gram,
        "n_samples": n if declared_size is None else None,  # private under add/remove
        "declared_size": declared_size,
        "residual_clip": residual_clip,
    }
    if width is not None:
        params["gaussian_width"] = width
    diag = nonprivate_diagnostics(problem, theta, Xc, yc) if diagnostics else {}
    return OptimizeResult(
        solution=theta,
        privacy=privacy,
        status=status,
        iterations=done + 1 if done < steps else T,
        method="frank_wolfe",
        calibration=calibration if bud is not None else "none",
        parameters=params,
        message=f"ran {done} of the planned {steps} private Frank-Wolfe selections ({variant} variant)",
        nonprivate_diagnostics=diag,
    )


def _rnm(scores: Array, scale: float, gen: np.random.Generator | SecureRNG, sens: float = 0.0) -> int:
    """Index of the smallest noisy score (noise only if scale > 0)."""
    if scale > 0 and isinstance(gen, SecureRNG):  # exact grid RNM (scores snapped); event committed above
        return ReportNoisyMin(scale, sens).release(scores, rng=gen)
    if scale > 0:
        scores = scores + laplace_noise(scale, scores.shape, rng=gen)
    return int(np.argmin(scores))


def _run_polytope(
    problem: ERMProblem,
    C: VertexSet,
    X: Any,
    y: Array,
    steps: int,
    T: int,
    scale: float,
    step_rule: str,
    gram: Any,
    gen: np.random.Generator | SecureRNG,
    callback: Callback | None = None,
    sens: float = 0.0,
    clip: float | None = None,
    norm: float | None = None,
) -> tuple[Array, bool, int]:
    n, p = X.shape
    if norm is None:
        norm = float(n)
    lam = problem.l2_penalty
    coord = isinstance(C, L1Ball | Simplex)
    theta = np.zeros(p) if isinstance(C, L1Ball) else C.vertex(0)
    use_gram = (
        isinstance(problem.loss, SquaredLoss)
        and coord
        and clip is None
        and (gram is True or (gram == "auto" and not scipy.sparse.issparse(X) and p < T))
    )
    loss = problem.loss
    assert not isinstance(loss, str)
    if use_gram:
        K = np.asarray(X.T @ X) / norm
        if lam:
            K[np.diag_indices(p)] += lam
        c = np.asarray(X.T @ y).ravel() / norm
        g = K @ theta - c
        for t in range(1, steps + 1):
            k = _rnm(C.vertex_scores(g), scale, gen, sens)
            mu = _mu(t, T, step_rule)
            j, sgn = _coord_vertex(C, k)
            theta *= 1 - mu
            theta[j] += mu * sgn
            g *= 1 - mu
            g += mu * (sgn * K[:, j] - c)
            if t < steps and notify(callback, t + 1, theta):
                return theta, True, t
        return theta, True, steps

    V = None if coord else C.vertex_matrix()
    XV = None if coord else np.asarray(X @ V)
    pred = _Predictions(X, theta)
    for t in range(1, steps + 1):
        w = _derivative(loss, pred.z, y, clip) / norm
        g = np.asarray(X.T @ w).ravel()
        if lam:
            g += lam * theta
        k = _rnm(C.vertex_scores(g), scale, gen, sens)
        mu = _mu(t, T, step_rule)
        theta *= 1 - mu
        if coord:
            j, sgn = _coord_vertex(C, k)
            theta[j] += mu * sgn
            pred.update(mu, sgn * pred.column(j))
        else:
            assert XV is not None
            theta += mu * C.vertex(k)
            pred.update(mu, XV[:, k])
        if t < steps and notify(callback, t + 1, theta):
            return theta, False, t
    return theta, False, steps


def _coord_vertex(C: VertexSet, k: int) -> tuple[int, float]:
    if isinstance(C, L1Ball):
        return k // 2, (C.radius if k % 2 == 0 else -C.radius)
    assert isinstance(C, Simplex)
    return k, C.scale


def _run_gaussian(
    problem: ERMProblem,
    X: Any,
    y: Array,
    steps: int,
    T: int,
    sigma: float,
    sens: float,
    step_rule: str,
    gen: np.random.Generator | SecureRNG,
    callback: Callback | None = None,
    clip: float | None = None,
) -> tuple[Array, int]:
    C = problem.constraint
    assert C is not None
    theta = C.center()
    noisy = GaussianMechanism(sigma, sens) if sigma > 0 else None
    for t in range(1, steps + 1):
        if clip is None:
            g = problem.gradient(theta, X, y)
        else:
            assert not isinstance(problem.loss, str)
            g = np.asarray(
                X.T @ _derivative(problem.loss, np.asarray(X @ theta).ravel(), y, clip)
            ).ravel() / len(y)
            if problem.l2_penalty:
                g = g + problem.l2_penalty * theta
        if noisy is not None:  # secure rng: snapped to the noise grid, exact sampler
            g = noisy.release(g, rng=gen)
        s = C.lmo(g)
        mu = _mu(t, T, step_rule)
        theta = (1 - mu) * theta + mu * s
        if t < steps and notify(callback, t + 1, theta):
            return theta, t
    return theta, steps
