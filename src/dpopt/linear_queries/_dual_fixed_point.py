"""The dual fixed point of the ``"dual"`` method, with its evaluators (dense, low-rank, tridiagonal).

:func:`solve_dual` iterates ``y ← y ⊙ diag(X(y))²`` on ``log y`` with Anderson mixing; an
evaluator computes ``M(y) = (Y^½ V Y^½)^½``, the fast (steering) lower bound and the two primal
candidates: :class:`DualEvaluator` (dense, low-rank or workload-factor path) and
:class:`TridiagonalDual` (Gram matrices with a tridiagonal inverse, O(n²) per iteration).  Other
evaluators with the same methods plug in (:mod:`dpopt.linear_queries.union`'s block-diagonal one).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import scipy.linalg as sla

from dpopt.linear_queries._certificates import EPS, eig_null_threshold, round_down, sqrt_trace_lower
from dpopt.linear_queries._result import FloatArray, IterateCallback

__all__ = ["DualEvaluator", "TridiagonalDual", "solve_dual"]

_LOG_Y_RANGE = 30.0  # dual variables span at most e^30 (see solve_dual)


class DualEvaluator:
    """Evaluates M(y), the lower bound and the two primal candidates, full or low-rank path."""

    def __init__(
        self,
        V: FloatArray,
        w: FloatArray,
        Q: FloatArray,
        low_rank: bool,
        root_lower: float = 0.0,
        factor: FloatArray | None = None,
    ):
        self.V = V
        # a workload factor with m <= 0.8 n rows (V = FᵀF): M(y) from the m x m eigenproblem of
        # F Y Fᵀ instead of the n x n one of Y^½ V Y^½ (2.2x cheaper per iteration at m/n = 0.64)
        self.factor = factor if factor is not None and factor.shape[0] <= 0.8 * V.shape[0] else None
        self.root_lower = root_lower  # certified lower bound on Σ sqrt λ(V)
        self.tr_lower = 0.0  # certified lower bound on tr M(y) for the last evaluated y
        self.n = V.shape[0]
        self.low_rank = low_rank
        self.w: FloatArray | None = w
        self.Q = Q
        if low_rank:
            keep = w > w.max() * self.n * np.finfo(float).eps
            self.F = (np.sqrt(w[keep])[:, None] * Q[:, keep].T).copy()  # V ≈ FᵀF, F is r x n
        self.sigma = np.empty(0)
        self.vecs = np.empty((0, 0))
        self.diag_M = np.empty(0)

    def evaluate(self, y: FloatArray) -> tuple[float, FloatArray]:
        """Return (tr M, diag M) and keep the factors of M for candidate building."""
        s = np.sqrt(y)
        if not self.low_rank and self.w is not None and np.all(y == y[0]):
            # y = c·1: B = cV, whose eigendecomposition is already known
            self.sigma, self.vecs = np.sqrt(y[0] * self.w), self.Q
            self._y = y
            self.tr_lower = round_down(math.sqrt(y[0]) * self.root_lower, 2)
        elif self.factor is not None:
            Fs = self.factor * s[None, :]
            _, U = sla.eigh(Fs @ Fs.T, driver="evd", overwrite_a=True, check_finite=False)
            P = Fs.T @ U  # columns σ_j p_j; their norms are more accurate than sqrt(μ_j) for small μ_j
            sig = np.sqrt(np.einsum("ij,ij->j", P, P))
            keep = sig > sig.max() * 1e-12
            self.sigma, self.vecs = sig[keep], P[:, keep] / sig[keep][None, :]  # M = P diag(σ) Pᵀ
            self._y = y
            # steers the iteration only: the certificate is recomputed rigorously at the best dual
            # point (factor_dual_bound), so no error allowance here
            self.tr_lower = math.fsum(self.sigma.tolist())
        elif self.low_rank:
            Fs = self.F * s[None, :]
            # singular values are computed to within p(n) eps ‖Fs‖₂ (backward stability + Weyl);
            # this bounds tr M for FᵀF, which the final certificate (on V itself) replaces
            tau = 2.0 * (sum(Fs.shape) + 2) * EPS * float(np.linalg.norm(Fs)) * (1 + Fs.size * EPS)
            _, sig, Pt = sla.svd(Fs, full_matrices=False, lapack_driver="gesdd")
            self.sigma, self.vecs = sig, Pt.T  # M = P diag(sig) Pᵀ
            self.tr_lower = round_down(math.fsum(np.clip(sig - tau, 0.0, None).tolist()), 2)
        else:
            B = s[:, None] * self.V * s[None, :]
            tau = eig_null_threshold(B)
            lam, Qb = sla.eigh(B, driver="evd", overwrite_a=True, check_finite=False)
            self.sigma, self.vecs = np.sqrt(np.clip(lam, 0.0, None)), Qb
            self.tr_lower = sqrt_trace_lower(lam, tau)
        self.diag_M = np.einsum("ij,j,ij->i", self.vecs, self.sigma, self.vecs)
        return float(self.sigma.sum()), self.diag_M

    def normalized_objective(self, d: FloatArray) -> float:
        """Objective of X(y) rescaled to unit diagonal (full path; inf if M is singular)."""
        if self.factor is not None:
            return self._padded_objective(d)
        if self.low_rank or self.sigma.min() <= self.sigma.max() * 1e-12:
            return math.inf
        Q = self.vecs
        C = Q.T @ (np.sqrt(d)[:, None] * Q)
        return float(np.einsum("ij,j,i->", C * C, self.sigma**2, 1.0 / self.sigma))

    def _padded_chol(self, d: FloatArray) -> FloatArray | None:
        """Cholesky factor of ``X(y)/max d + diag(1 - d/max d)``: the uniformly scaled candidate
        plus one extra measurement of every cell with unused column norm.  Extra rows never raise
        the least-squares error, so it is at least as good as the uniform candidate, and it has
        unit columns and full rank (a rank-deficient V is covered)."""
        dmax = float(d.max())
        R = self.vecs * (np.sqrt(self.sigma) / np.sqrt(dmax))[None, :]
        R /= np.sqrt(self._y)[:, None]
        X = R @ R.T
        X[np.diag_indices_from(X)] += np.clip(1.0 - d / dmax, 0.0, None)
        try:
            return np.asarray(sla.cholesky(X, lower=True, overwrite_a=True, check_finite=False))
        except np.linalg.LinAlgError:
            return None

    def _padded_objective(self, d: FloatArray) -> float:
        """``tr(V X'⁻¹) = ‖L⁻¹ Wᵀ‖_F²`` of the padded candidate, every 4th iteration."""
        self._calls = getattr(self, "_calls", 0) + 1
        if self._calls % 4 or self.factor is None:
            return math.inf
        L = self._padded_chol(d)
        if L is None:
            return math.inf
        Z = sla.solve_triangular(L, self.factor.T, lower=True, check_finite=False)
        return float(np.einsum("ij,ij->", Z, Z))

    def strategy(self, y: FloatArray, kind: str) -> FloatArray:
        """The strategy for the current factors: uniform scaling or unit-column rescaling."""
        if self.factor is not None and kind == "normalized":  # the padded candidate
            L = self._padded_chol(self.diag_M / y)
            assert L is not None
            return np.ascontiguousarray(L.T)
        root = np.sqrt(self.sigma)[:, None] * self.vecs.T  # rows: sqrt(sig_k) q_kᵀ ; (·)ᵀ(·) = M
        if kind == "uniform":
            A = root / np.sqrt(y)[None, :]
            return A / math.sqrt(float(np.max(self.diag_M / y)))
        return root / np.sqrt(self.diag_M)[None, :]


class TridiagonalDual:
    """Dual evaluator for Gram matrices with a tridiagonal inverse (prefix, all ranges).

    ``B = Y^½ V Y^½`` has the tridiagonal inverse ``Y^-½ V⁻¹ Y^-½``, whose eigendecomposition
    (LAPACK's MRRR, ``eigh_tridiagonal``) costs O(n²) instead of the O(n³) dense ``eigh``: the
    eigenvalues of B are the reciprocals and the eigenvectors are shared.  Every quantity of the
    dense evaluator follows (``tr M``, ``diag M``, the strategy); the final certificate is still
    recomputed densely (:func:`dual_lower_bound`).
    """

    def __init__(self, d: FloatArray, e: FloatArray):
        self.d, self.e = d, e
        self.n = d.size
        self.tr_lower = 0.0
        self.sigma = np.empty(0)
        self.vecs = np.empty((0, 0))
        self.diag_M = np.empty(0)

    def evaluate(self, y: FloatArray) -> tuple[float, FloatArray]:
        s = np.sqrt(y)
        dB = self.d / y
        eB = self.e / (s[:-1] * s[1:])
        self.vecs = np.empty((0, 0))  # free the previous n x n eigenvector matrix first
        mu, Q = sla.eigh_tridiagonal(dB, eB, lapack_driver="stemr")
        mu = np.maximum(mu, EPS * float(np.max(np.abs(mu))))
        self.sigma = 1.0 / np.sqrt(mu)
        self.vecs = Q
        # steers the iteration only: the certificate is recomputed rigorously at the best dual
        # point (tridiagonal_dual_bound), so no error allowance here
        self.tr_lower = math.fsum(self.sigma.tolist())
        self.diag_M = np.concatenate([(Q[b] * Q[b]) @ self.sigma for b in _row_blocks(self.n)])
        return float(self.sigma.sum()), self.diag_M

    def normalized_objective(self, d: FloatArray) -> float:
        """Objective of the unit-column rescaling: one O(n³) product, so every 4th iteration only
        (the uniform candidate's gap is the diagonal's deviation, which stalls near 1e-4).

        ``Σ_ij C_ij² σ_j² / σ_i`` with ``C = Qᵀ diag(√d) Q``, accumulated over column blocks of C
        (no n x n temporary)."""
        self._calls = getattr(self, "_calls", 0) + 1
        if self._calls % 4:
            return math.inf
        Q, root_d = self.vecs, np.sqrt(d)
        acc = np.zeros(self.n)
        for b in _row_blocks(self.n):
            Cb = Q.T @ (root_d[:, None] * Q[:, b])
            Cb *= Cb
            acc += Cb @ (self.sigma[b] ** 2)
        return float(acc @ (1.0 / self.sigma))

    def strategy(self, y: FloatArray, kind: str) -> FloatArray:
        # rows sqrt(σ_k) q_kᵀ scaled per column, built in one n x n array (no temporaries)
        A = np.multiply(self.vecs.T, np.sqrt(self.sigma)[:, None])
        if kind == "uniform":
            A *= (1.0 / np.sqrt(y) / math.sqrt(float(np.max(self.diag_M / y))))[None, :]
        else:
            A *= (1.0 / np.sqrt(self.diag_M))[None, :]
        return A


def _row_blocks(n: int, size: int = 512) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def solve_dual(
    V: FloatArray,
    *,
    tol: float,
    max_iter: int,
    max_time: float | None,
    memory: int,
    exponent: float,
    callback: IterateCallback | None,
    w: FloatArray,
    Q: FloatArray,
    root_lower: float = 0.0,
    evaluator: Any = None,
    factor: FloatArray | None = None,
) -> tuple[FloatArray, float, float, str, int, list[dict[str, Any]], FloatArray]:
    """The dual fixed point; ``evaluator`` (with ``n`` and :class:`DualEvaluator`'s methods)
    replaces the dense one (e.g. the block-diagonal problems of unions of products)."""
    if evaluator is not None:
        ev = evaluator
        n = int(ev.n)
        u = np.zeros(n)
    else:
        n = V.shape[0]
        rank = int(np.sum(w > w.max() * n * np.finfo(float).eps))
        ev = DualEvaluator(V, w, Q, low_rank=rank <= 0.6 * n, root_lower=root_lower, factor=factor)
        u = np.full(n, math.log(max(np.sqrt(w).sum() / n, 1e-300)))
    best_lb, best_ub = -math.inf, math.inf
    best_steer = math.inf
    padded_only = getattr(ev, "factor", None) is not None
    best: tuple[FloatArray, str] | None = None
    best_A: FloatArray | None = None
    best_y = np.ones(n)
    us: list[FloatArray] = []
    fs: list[FloatArray] = []
    history: list[dict[str, Any]] = []
    status = "max_iter"
    t0 = time.process_time()
    k = stall = plain = 0
    for k in range(1, max_iter + 1):
        y = np.exp(u)
        trM, diagM = ev.evaluate(y)
        d = diagM / y
        lb = round_down(ev.tr_lower**2 / (math.fsum(y.tolist()) * (1 + 4 * EPS)), 2)
        ub_uniform = trM * float(d.max())
        ub_norm = ev.normalized_objective(d)
        if lb > best_lb:  # the fast bound steers the iteration; the certificate is recomputed at best_y
            best_lb, best_y = lb, y
        improved = False
        if ub_uniform < best_ub:
            best_ub, best, improved = ub_uniform, (y, "uniform"), True
        if ub_norm < best_ub:
            best_ub, best, improved = ub_norm, (y, "normalized"), True
        # the factor path's padded candidate only closes the gap: the Anderson restarts below
        # follow the uniform candidate alone, so the dual iterates are those without it
        if padded_only:
            improved_steer = ub_uniform < best_steer
            best_steer = min(best_steer, ub_uniform)
        else:
            improved_steer = improved
        if improved and best is not None:
            best_A = None  # free the old strategy first (n x n at the peak)
            best_A = ev.strategy(*best)
        gap = (best_ub - best_lb) / best_lb
        rec = {
            "iteration": k,
            "objective": best_ub,
            "lower_bound": best_lb,
            "gap": gap,
            "max_diag_deviation": float(np.max(np.abs(d - 1))),
            "cpu_seconds": time.process_time() - t0,
        }
        history.append(rec)
        if callback is not None and best_A is not None and callback(dict(rec), best_A):
            status = "stopped"
            break
        if gap <= tol:
            status = "converged"
            break
        if max_time is not None and time.process_time() - t0 > max_time:
            status = "max_time"
            break
        with np.errstate(divide="ignore"):
            f = exponent * np.log(d)
        if not np.all(np.isfinite(f)):
            f = np.where(np.isfinite(f), f, 0.0)
        us.append(u.copy())
        fs.append(f)
        if len(us) > memory + 1:
            us.pop(0)
            fs.pop(0)
        step = u + f
        if improved_steer:
            stall = 0
        else:
            stall += 1
        if stall > memory + 2:  # Anderson is not helping here: restart from plain steps
            us, fs, stall = [], [], 0
            plain = 2 * (memory + 2)
        if plain > 0:
            plain -= 1
        elif memory > 0 and len(us) > 1:
            dF = np.diff(np.array(fs), axis=0).T
            dU = np.diff(np.array(us), axis=0).T
            gamma, *_ = np.linalg.lstsq(dF, f, rcond=None)
            cand = u + f - (dU + dF) @ gamma
            if np.all(np.isfinite(cand)) and np.max(np.abs(cand - u)) < 20:
                step = cand
            else:
                us, fs = [], []
        # y_i -> 0 where a column constraint is inactive; keep y_i >= e^-30 max(y) so the
        # rescaled strategy keeps the workload in its row space to working precision
        u = np.maximum(step, float(step.max()) - _LOG_Y_RANGE)
    assert best_A is not None
    return best_A, best_ub, best_lb, status, k, history, best_y
