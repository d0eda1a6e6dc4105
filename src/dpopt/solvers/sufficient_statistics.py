"""Sufficient-statistics perturbation for least squares (AdaSSP, Wang 2018).

Release ``XᵀX``, ``Xᵀy`` and ``λ_min(XᵀX)`` once with Gaussian noise, then solve the ridge problem
they define over the constraint set.  Everything after the release is post-processing, so the cost
does not depend on how the solve is done, and the noise does not grow with the number of solver
steps.  The ridge that keeps the noisy Gram matrix positive definite is chosen from the noisy
smallest eigenvalue and a high-probability bound on the noise's spectral norm (the "adaptive" part
of Wang's AdaSSP), so a well-conditioned design is regularised less.

Reference: Y.-X. Wang, "Revisiting differentially private linear regression: optimal and adaptive
prediction & estimation in unbounded domain", UAI 2018 (Algorithm 2, AdaSSP).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import scipy.sparse
from numpy.typing import NDArray
from scipy import optimize

from dpopt._validation import check_positive, check_probability
from dpopt.accounting import Accountant, GaussianEvent, PrivacyEvent
from dpopt.exceptions import Hint, InvalidParameterError, Setting
from dpopt.mechanisms import gaussian_noise
from dpopt.problems import ERMProblem, L2Ball, SquaredLoss
from dpopt.randomness import RNGLike, SecureRNG, check_rng
from dpopt.solvers._result import OptimizeResult
from dpopt.solvers.minimize import (
    BudgetLike,
    check_accountant,
    check_calibration,
    commit_privacy,
    gaussian_sigma_for_steps,
    nonprivate_diagnostics,
    parse_budget,
)

__all__ = ["private_sufficient_statistics", "ssp_sensitivities"]

Array = NDArray[np.float64]


def ssp_sensitivities(feature_l2: float, label_bound: float) -> tuple[float, float, float]:
    """Replace-one l2 sensitivities of (upper triangle of XᵀX, Xᵀy, λ_min(XᵀX)).

    For rows with ``‖x‖₂ <= B`` and ``|y| <= Y``: ``‖xxᵀ − x'x'ᵀ‖_F² = ‖x‖⁴ + ‖x'‖⁴ − 2(xᵀx')² <= 2B⁴``
    and the upper triangle (diagonal included) holds at most that much, so ``√2·B²``;
    ``‖xy − x'y'‖ <= 2BY``; and by Weyl's inequality λ_min moves by at most
    ``‖xxᵀ − x'x'ᵀ‖₂ <= B²`` (a difference of two PSD rank-one matrices of norm <= B²).
    """
    B, Y = float(feature_l2), float(label_bound)
    return math.sqrt(2.0) * B * B, 2.0 * B * Y, B * B


def _check_shares(shares: Any) -> tuple[float, float, float]:
    try:
        s = tuple(float(v) for v in shares)
    except (TypeError, ValueError):
        raise InvalidParameterError("shares: expected three positive numbers (Gram, Xᵀy, λ_min)") from None
    if len(s) != 3 or not all(math.isfinite(v) and v > 0 for v in s):
        raise InvalidParameterError("shares: expected three positive numbers (Gram, Xᵀy, λ_min)")
    total = sum(s)
    return s[0] / total, s[1] / total, s[2] / total


def _solve_quadratic(M: Array, b: Array, radius: float | None) -> Array:
    """argmin ½θᵀMθ − bᵀθ over ``‖θ‖₂ <= radius`` (or R^d) for a symmetric PSD ``M``.

    Eigen-decomposition ``M = U diag(m) Uᵀ``; unconstrained: the minimum-norm minimiser; on the ball:
    ``θ(ν) = U (c/(m + ν))`` with the ν >= 0 that puts it on the sphere when the unconstrained one
    lies outside (the trust-region subproblem with PSD M; ‖θ(ν)‖ decreases in ν).
    """
    m, U = np.linalg.eigh(M)
    m = np.maximum(m, 0.0)
    c = U.T @ b
    tiny = 1e-12 * max(1.0, float(np.max(m)))
    pos = m > tiny
    coef = np.zeros_like(c)
    coef[pos] = c[pos] / m[pos]
    theta = U @ coef
    if radius is None or float(np.linalg.norm(theta)) <= radius:
        return theta

    def excess(nu: float) -> float:
        return float(np.linalg.norm(c / (m + nu))) - radius

    # excess(0+) >= ‖θ‖ - radius > 0 and excess(‖c‖/radius) <= 0
    nu = float(optimize.brentq(excess, tiny, float(np.linalg.norm(c)) / radius, xtol=1e-15, rtol=1e-14))
    return U @ (c / (m + nu))


def private_sufficient_statistics(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str = "tight",
    accountant: Accountant | None = None,
    diagnostics: bool = False,
    shares: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3),
    failure_probability: float = 0.05,
    ridge: float | None = None,
) -> OptimizeResult:
    """Private least squares by sufficient-statistics perturbation (AdaSSP, Wang 2018).

    Parameters
    ----------
    problem : ERMProblem
        Squared loss with declared ``feature_norm`` (any norm; its l2 form is used) and
        ``label_bound``; ``constraint`` None or an :class:`~dpopt.problems.L2Ball`; ``l2_penalty``
        is added to the solve (public).
    X, y
        Private data.
    budget, rng, accountant, diagnostics
        See :func:`dpopt.solvers.minimize`.  δ > 0 is needed (Gaussian noise).
    calibration : {"tight"}
        The PLD-certified Gaussian calibration.
    shares : tuple of three floats, default (1/3, 1/3, 1/3)
        Split of the Gaussian budget (in its additive currency 1/z²) between XᵀX, Xᵀy and
        λ_min(XᵀX) (Wang's AdaSSP splits ε in thirds).  Normalised to sum to 1.
    failure_probability : float, default 0.05
        ρ of the high-probability bounds behind the adaptive ridge (a public constant; a failure
        only makes the ridge too small for that draw, it never affects privacy).
    ridge : float, optional
        A public ridge λ (mean scale, like ``l2_penalty``) to use instead of the adaptive one; the
        λ_min release is then skipped and its share goes to the other two.

    Returns
    -------
    OptimizeResult
        ``parameters`` holds the noise scales, the sensitivities and the ridge used (``ridge``,
        mean scale; it is a function of the noisy release, so it may be published).

    Privacy
    -------
    (ε, δ)-DP under **replace-one** neighbours (n public).  One Gaussian mechanism on the vector
    (upper triangle of XᵀX, Xᵀy, λ_min(XᵀX)) with per-block noise ``σ_k = z·Δ_k/√s_k`` (Δ_k from
    :func:`ssp_sensitivities` with the declared B and Y, s_k the shares): scaled block by block it
    is one Gaussian release of l2 sensitivity at most 1 with noise multiplier z, composed into the
    accountant as ``GaussianEvent(z, 1)`` before any noise is drawn, z certified by the PLD
    accountant for (ε, δ).  The ridge, the eigen-decomposition and the constrained solve are
    post-processing of the release.  Rows outside the declared bounds are refused (or clipped with
    ``DataBounds(clip=True)``).
    """
    if not isinstance(problem, ERMProblem):
        raise InvalidParameterError("problem: expected a dpopt.problems.ERMProblem")
    if not isinstance(problem.loss, SquaredLoss):
        raise InvalidParameterError("sufficient-statistics perturbation needs the squared loss")
    C = problem.constraint
    if C is not None and not isinstance(C, L2Ball):
        raise InvalidParameterError(
            "sufficient-statistics perturbation solves over an L2Ball or without a constraint set"
        )
    check_calibration(calibration, ("tight",))
    bud = parse_budget(budget)
    acct = check_accountant(accountant)
    s_gram, s_lin, s_min = _check_shares(shares)
    rho = check_probability(failure_probability, "failure_probability", open_left=True)
    fixed = None if ridge is None else check_positive(ridge, "ridge")
    if fixed is not None:
        s_gram, s_lin, s_min = s_gram / (1 - s_min), s_lin / (1 - s_min), 0.0
    if bud is not None and bud.delta <= 0:
        raise InvalidParameterError(
            "sufficient-statistics perturbation uses Gaussian noise and needs δ > 0",
            hint=Hint("for pure ε use {0}", Setting("method", "objective_perturbation")),
        )
    gen = check_rng(rng)
    if bud is not None and isinstance(gen, SecureRNG):  # refused before anything is spent
        raise InvalidParameterError(
            "rng='secure': the noisy Gram matrix is not snapped to a grid here; use an int seed / None, "
            "or output_perturbation with rng='secure'"
        )
    Xc, yc = problem.prepare(X, y)
    n, d = Xc.shape
    B = problem.bounds.feature_l2(d)
    Y = problem.bounds.label(required=True)
    d_gram, d_lin, d_min = ssp_sensitivities(B, Y)

    event: PrivacyEvent | None = None
    z = 0.0
    if bud is not None:
        z = gaussian_sigma_for_steps(bud, 1.0, 1)
        event = GaussianEvent(z, 1.0)
    privacy = commit_privacy(event, budget=bud, kind="pld", accountant=acct, label="sufficient-statistics")

    gram_sp = Xc.T @ Xc
    gram = np.asarray(gram_sp.toarray() if scipy.sparse.issparse(gram_sp) else gram_sp, dtype=float)
    lin = np.asarray(Xc.T @ yc, dtype=float).ravel()
    sig_gram = sig_lin = sig_min = 0.0
    lam_sum = 0.0  # ridge in the sum scale of XᵀX
    if z > 0:
        sig_gram = z * d_gram / math.sqrt(s_gram)
        sig_lin = z * d_lin / math.sqrt(s_lin)
        lam_min = float(np.linalg.eigvalsh(gram)[0]) if fixed is None else 0.0  # before the noise
        iu = np.triu_indices(d)
        noise = np.zeros((d, d))
        noise[iu] = gaussian_noise(sig_gram, len(iu[0]), rng=gen)
        gram = gram + noise + np.triu(noise, 1).T
        lin = lin + gaussian_noise(sig_lin, d, rng=gen)
        t = math.sqrt(2.0 * math.log(1.0 / rho))
        if fixed is None:
            sig_min = z * d_min / math.sqrt(s_min)
            lam_min_noisy = max(lam_min + float(gaussian_noise(sig_min, 1, rng=gen)[0]) - sig_min * t, 0.0)
            # ‖E‖₂ <= σ(2√d + √2·t) with probability >= 1 − ρ for the symmetric noise E (its upper
            # triangle i.i.d. N(0, σ²); the spectral norm is √2-Lipschitz in it)
            noise_norm = sig_gram * (2.0 * math.sqrt(d) + math.sqrt(2.0) * t)
            lam_sum = max(noise_norm - lam_min_noisy, 0.0)
        else:
            lam_sum = fixed * n
    elif fixed is not None:
        lam_sum = fixed * n
    M = gram + (lam_sum + n * problem.l2_penalty) * np.eye(d)
    if z > 0:  # post-processing: a failed high-probability bound must not make the solve non-convex
        m, U = np.linalg.eigh(M)
        M = (U * np.maximum(m, sig_gram)) @ U.T
    theta = _solve_quadratic(M, lin, None if C is None else float(C.radius))
    if C is not None:
        theta = np.asarray(C.project(theta), dtype=float)
    params = {
        "n_samples": n,
        "noise": "gaussian" if z > 0 else "none",
        "noise_multiplier": z,
        "shares": [s_gram, s_lin, s_min],
        "sensitivities": list(ssp_sensitivities(B, Y)),
        "sigma_gram": sig_gram,
        "sigma_xty": sig_lin,
        "sigma_lambda_min": sig_min,
        "ridge": lam_sum / n,
        "ridge_rule": "fixed" if fixed is not None else ("adaptive" if z > 0 else "none"),
        "l2_penalty": problem.l2_penalty,
    }
    diag = nonprivate_diagnostics(problem, theta, Xc, yc) if diagnostics else {}
    return OptimizeResult(
        solution=theta,
        privacy=privacy,
        status="completed",
        iterations=1,
        method="ssp",
        calibration="tight" if z > 0 else "none",
        parameters=params,
        message="one Gaussian release of (XᵀX, Xᵀy, λ_min), then the ridge solve (post-processing)",
        nonprivate_diagnostics=diag,
    )
