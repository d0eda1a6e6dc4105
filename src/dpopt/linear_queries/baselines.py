"""Baseline strategies of the COA paper's comparisons (spec A.12), as :class:`StrategyResult` objects.

* ``"identity"``: A = I (noise on every cell).
* ``"gm"``: A = W (the Gaussian mechanism on the queries) followed by least squares, i.e. the
  "GM+LS" reading; :func:`gm_direct_objective` gives the plain "noise on answers" error ``m‖W‖²_{2,inf}``
  (no inference), the reading used for the paper's GM curves in our reproductions.
* ``"hierarchical"`` (HM, Hay et al.): all node intervals of a b-ary tree over the cells
  (default b = 2), least-squares reconstruction (= constrained inference).
* ``"wavelet"`` (WM, Privelet): the unnormalized Haar matrix (n a power of two), unweighted rows
  (the l2 choice, spec A.12).
* ``"eigen"`` (AM, Li-Miklau eigen-design, corrected program): rows ``λ_i p_iᵀ`` along the
  eigenvectors of ``WᵀW``, weights from the concave dual solved by L-BFGS-B.

* ``"lrm"`` (LRM, low-rank mechanism): augmented-Lagrangian factorization ``W = B L`` (spec A.12;
  unspecified details are our choices, see :func:`low_rank_mechanism`).

* ``"esm"`` (ESM, exponential smoothing): spectral projected gradient on the smoothed program
  (spec A.12; μ, schedule and initialization are ours, see :func:`exponential_smoothing`).

DAWA (ε-DP, data dependent) lives in :mod:`dpopt.linear_queries.dawa` (it needs the histogram).
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import scipy.optimize as sopt
from numpy.typing import NDArray

from dpopt._validation import check_int
from dpopt.exceptions import ConvergenceWarning, InvalidParameterError
from dpopt.linear_queries.strategy import StrategyResult, _blas_threads, evaluate_strategy
from dpopt.linear_queries.workloads import Workload

__all__ = [
    "BASELINES",
    "baseline",
    "eigen_design",
    "exponential_smoothing",
    "gm_direct_objective",
    "haar_matrix",
    "hierarchical_matrix",
    "identity_result",
    "low_rank_mechanism",
]

FloatArray = NDArray[np.float64]


def hierarchical_matrix(n: int, branching: int = 2) -> FloatArray:
    """Indicator rows of every node of a ``branching``-ary tree of intervals over n cells (root first)."""
    n = check_int(n, "n")
    b = check_int(branching, "branching", minimum=2)
    rows: list[tuple[int, int]] = []
    level = [(0, n)]
    while level:
        nxt: list[tuple[int, int]] = []
        for lo, hi in level:
            rows.append((lo, hi))
            size = hi - lo
            if size > 1:
                cuts = np.linspace(lo, hi, min(b, size) + 1).round().astype(int)
                nxt.extend((int(a), int(c)) for a, c in itertools.pairwise(cuts) if c > a)
        level = nxt
    A = np.zeros((len(rows), n))
    for k, (lo, hi) in enumerate(rows):
        A[k, lo:hi] = 1.0
    return A


def haar_matrix(n: int) -> FloatArray:
    """Unnormalized Haar wavelet matrix (n = 2^d): one all-ones row and ±1 rows per dyadic block."""
    n = check_int(n, "n")
    if n & (n - 1):
        raise InvalidParameterError("n: the Haar wavelet strategy needs a power of two")
    rows = [np.ones(n)]
    size = n
    while size > 1:
        half = size // 2
        for start in range(0, n, size):
            r = np.zeros(n)
            r[start : start + half] = 1.0
            r[start + half : start + size] = -1.0
            rows.append(r)
        size = half
    return np.array(rows)


def eigen_design(workload: Workload, *, tol: float = 1e-10) -> FloatArray:
    """Eigen-design strategy (AM, spec A.12 corrected): ``A = diag(λ) Pᵀ`` with optimal weights."""
    V = workload.gram()
    w, P = np.linalg.eigh(V)
    keep = w > w.max() * tol
    d = np.sqrt(w[keep])
    P = P[:, keep]
    P2 = P**2  # P2[j, i] = p_i[j]^2 ; constraint per column j: sum_i u_i P2[j, i] <= 1
    n = V.shape[0]

    def negdual(y: FloatArray) -> tuple[float, FloatArray]:
        c = np.maximum(P2.T @ y, 1e-300)
        sc = np.sqrt(c)
        val = 2 * float(d @ sc) - float(y.sum())
        grad = P2 @ (d / sc) - 1.0
        return -val, -grad

    y0 = np.full(n, (d.sum() / n) ** 2 if d.size else 1.0)
    res = sopt.minimize(negdual, y0, jac=True, method="L-BFGS-B", bounds=[(0.0, None)] * n)
    c = np.maximum(P2.T @ res.x, 1e-300)
    u = d / np.sqrt(c)
    u /= float(np.max(P2 @ u))
    return np.sqrt(u)[:, None] * P.T


def _ball_least_squares(BtB: FloatArray, BtC: FloatArray) -> FloatArray:
    """Column-wise ``argmin_l ‖c_j - B l‖²`` subject to ``‖l‖₂ <= 1`` (trust-region subproblems)."""
    e, U = np.linalg.eigh(BtB)
    e = np.clip(e, 0.0, None)
    b = U.T @ BtC  # (r, n)
    floor = max(float(e.max()), 1.0) * 1e-12
    L = b / np.maximum(e, floor)[:, None]
    norms = np.linalg.norm(L, axis=0)
    out = np.where(norms <= 1.0, 1.0, 0.0)[None, :] * L
    big = np.flatnonzero(norms > 1.0)
    if big.size:
        bb = b[:, big]
        lo = np.zeros(big.size)
        hi = np.linalg.norm(bb, axis=0) + 1e-300  # ‖(E + μ)^-1 b‖ <= ‖b‖/μ <= 1 at μ = ‖b‖
        for _ in range(60):  # bisection on the secular equation ‖(E + μ)^-1 b‖ = 1
            mid = (lo + hi) / 2
            val = np.linalg.norm(bb / (e[:, None] + mid[None, :]), axis=0)
            lo = np.where(val > 1.0, mid, lo)
            hi = np.where(val > 1.0, hi, mid)
        out[:, big] = bb / (e[:, None] + hi[None, :])
    return np.asarray(U @ out)


def low_rank_mechanism(
    workload: Workload,
    *,
    rank: int | None = None,
    max_iter: int = 300,
    beta0: float | None = None,
    beta_growth: float = 1.05,
    tol: float = 1e-8,
) -> FloatArray:
    """Low-rank mechanism (LRM, Yuan et al. 2012) strategy L (r x n) by the augmented Lagrangian of spec A.12.

    ``min ½‖B‖_F² s.t. W = B L, ‖L‖_{2,inf} <= 1``: alternating B-step (closed form), L-step
    (column-wise ball-constrained least squares) and multiplier update, with the penalty β growing
    geometrically.  W is replaced by ``F`` with ``FᵀF = WᵀW`` (same error for every strategy).
    Choices not in the seeds (rank r = rank(W), β schedule, one B/L sweep per outer iteration,
    initialization from the right singular vectors) are ours.  The answers use least squares
    through L, so only L is returned.
    """
    V = workload.gram()
    w, Q = np.linalg.eigh(V)
    keep = w > w.max() * 1e-10
    F = np.sqrt(w[keep])[:, None] * Q[:, keep].T  # (r0, n)
    r = int(keep.sum()) if rank is None else check_int(rank, "rank")
    L = Q[:, keep][:, ::-1][:, :r].T.copy()  # top right singular vectors
    L /= float(np.max(np.linalg.norm(L, axis=0)))
    Pi = np.zeros_like(F)
    beta = (1.0 / max(float(w.max()), 1e-300)) if beta0 is None else float(beta0)
    eye = np.eye(r)
    for _ in range(max_iter):
        B = (beta * F + Pi) @ L.T @ np.linalg.inv(beta * (L @ L.T) + eye)
        C = F + Pi / beta
        L = _ball_least_squares(B.T @ B, B.T @ C)
        resid = F - B @ L
        Pi += beta * resid
        beta *= beta_growth
        if np.linalg.norm(resid) <= tol * np.linalg.norm(F):
            break
    return L


def exponential_smoothing(
    workload: Workload,
    *,
    mu: float = 0.01,
    max_iter: int = 300,
    floor: float = 1e-10,
    memory: int = 10,
    tol: float = 1e-9,
) -> FloatArray:
    """Exponential smoothing mechanism (ESM) strategy ``X^½`` (spec A.12; parameters are ours).

    Minimizes ``smax_μ(diag X)·tr(V X⁻¹)`` over X ≻ 0, ``smax_μ(v) = μ log Σ exp(v_i/μ)``, by a
    non-monotone spectral projected gradient (Barzilai-Borwein steps, Grippo line search with
    memory ``memory``, projection = eigenvalue clipping at ``floor·λ_max``), from X = I, with X
    rescaled to unit largest diagonal after every step (the objective is nearly scale invariant).
    """
    V = workload.gram()
    n = V.shape[0]

    def project(X: FloatArray) -> FloatArray:
        lam, Q = np.linalg.eigh((X + X.T) / 2)
        lam = np.maximum(lam, floor * max(float(lam.max()), 1e-300))
        return np.asarray((Q * lam) @ Q.T)

    def value_grad(X: FloatArray) -> tuple[float, FloatArray]:
        lam, Q = np.linalg.eigh(X)
        Z = (Q / lam) @ Q.T
        t = float(np.sum(Z * V))
        d = np.diag(X)
        e = np.exp((d - d.max()) / mu)
        smax = float(d.max() + mu * np.log(e.sum()))
        G = -smax * (Z @ V @ Z)
        G[np.diag_indices(n)] += t * e / e.sum()
        return smax * t, (G + G.T) / 2

    X = np.eye(n)
    f, G = value_grad(X)
    recent = [f]
    alpha = 1.0 / max(float(np.linalg.norm(G)), 1e-300)
    for _ in range(max_iter):
        D = project(X - alpha * G) - X
        slope = float(np.sum(G * D))
        if slope > -tol * abs(f):
            break
        ref = max(recent)
        lam_step = 1.0
        while True:
            Xn = X + lam_step * D
            try:
                fn, Gn = value_grad(Xn)
            except np.linalg.LinAlgError:  # pragma: no cover - eigh failure
                fn, Gn = np.inf, G
            if fn <= ref + 1e-4 * lam_step * slope or lam_step < 1e-12:
                break
            lam_step *= 0.5
        if not np.isfinite(fn):
            break
        scale = float(np.max(np.diag(Xn)))
        S, Yg = Xn / scale - X, Gn - G
        X = Xn / scale
        f, G = value_grad(X)
        recent = [*recent[-(memory - 1) :], f]
        sy = float(np.sum(S * Yg))
        alpha = float(np.clip(np.sum(S * S) / sy, 1e-12, 1e12)) if sy > 0 else alpha * 2
    lam, Q = np.linalg.eigh((X + X.T) / 2)
    return np.asarray((Q * np.sqrt(np.maximum(lam, 0.0))) @ Q.T)


def gm_direct_objective(workload: Workload) -> float:
    """Error per unit noise variance of plain GM (noise on each answer, no inference): ``m‖W‖²_{2,inf}``."""
    return workload.n_queries * workload.l2_sensitivity**2


_MAX_DENSE_ENTRIES = 1 << 26

#: Names of the comparison strategies that :func:`baseline` builds.
BASELINES = ("identity", "gm", "hierarchical", "wavelet", "eigen", "lrm", "esm")


def identity_result(workload: Workload) -> StrategyResult:
    """``A = I`` without any factorization: objective ``‖W‖_F²``, unbiased, any domain size.

    ``strategy`` is the dense identity only for n <= 4096 (an empty ``(0, n)`` array otherwise);
    :func:`~dpopt.linear_queries.answer` recognizes ``params["implicit"] == "identity"`` and
    releases ``x + noise`` directly.  No certificate (``lower_bound`` is NaN): use
    :func:`baseline` for the certified gap on small domains.
    """
    import time

    t0, w0 = time.process_time(), time.perf_counter()
    n = workload.domain_size
    objective = float(workload.frobenius_norm_sq)
    return StrategyResult(
        strategy=np.eye(n) if n <= _DENSE_IDENTITY else np.zeros((0, n)),
        objective=objective,
        lower_bound=math.nan,
        dual_bound=math.nan,
        svd_bound=math.nan,
        gap=math.nan,
        method="identity",
        status="completed",
        n_iter=0,
        cpu_seconds=time.process_time() - t0,
        wall_seconds=time.perf_counter() - w0,
        workload_fingerprint=workload.fingerprint(),
        params={"implicit": "identity"},
    )


_DENSE_IDENTITY = 4096


def baseline(name: str, workload: Workload, *, branching: int = 2) -> StrategyResult:
    """The named baseline strategy for ``workload`` as a :class:`StrategyResult` (exact error)."""
    n = workload.domain_size
    if name == "identity":
        A = np.eye(n)
    elif name == "gm":
        m = workload.n_queries
        if m * n > _MAX_DENSE_ENTRIES:
            raise InvalidParameterError(
                f"strategy 'gm': the workload has {m}x{n} entries, too many to use W itself as the strategy; "
                "use gm_direct_objective(workload) for its error, or another strategy"
            )
        A = workload.matrix()
    elif name == "hierarchical":
        A = hierarchical_matrix(n, branching)
    elif name == "wavelet":
        A = haar_matrix(n)
    elif name == "eigen":
        with _blas_threads(n):
            A = eigen_design(workload)
    elif name == "esm":
        with _blas_threads(n):
            A = exponential_smoothing(workload)
    elif name == "lrm":
        with _blas_threads(n):
            A = low_rank_mechanism(workload)
    else:
        raise InvalidParameterError(f"strategy: unknown baseline {name!r}; choose one of {BASELINES}")
    result = evaluate_strategy(workload, A, name=name)
    if math.isnan(result.bias) or result.bias <= _BIAS_SILENT:
        return result
    message = (
        f"strategy {name!r}: the workload does not lie exactly in its row space (relative squared "
        f"residual {result.bias:.1e}), so the answers are biased by that fraction of ‖W‖²"
    )
    if result.bias > _BIAS_REFUSED:
        raise InvalidParameterError(message + "; use another strategy")
    # LRM's factorization W ≈ L B is approximate by design (augmented Lagrangian tolerance)
    warnings.warn(message + " (reported in StrategyResult.bias)", ConvergenceWarning, stacklevel=2)
    return result


_BIAS_SILENT = 1e-8  # relative squared residual treated as exact
_BIAS_REFUSED = 1e-4  # above this the strategy is refused
