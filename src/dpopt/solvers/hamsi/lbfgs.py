"""Compact L-BFGS inverse-Hessian representation (:class:`CompactLBFGS`) and the dense reductions it uses.

The reductions (``_matvec``, ``_pair_products``, ``_dot``) sum in fixed-length chunks so the results do
not depend on the thread count; ``_mm`` and ``_triu_inverse`` are BLAS-free small-matrix helpers.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import check_int, check_nonneg, check_positive
from dpopt.exceptions import InvalidParameterError
from dpopt.solvers import _mf_kernels as _k

_CHUNK = 8192  # fixed chunk length of dense reductions (thread-count independent)

Float = NDArray[np.float64]


# ============================================================================ dense reductions
def _matvec(A: Float, v: Float) -> Float:
    """``A @ v`` for a wide ``A`` (m x n) with a fixed, thread-independent summation order."""
    n = A.shape[1]
    partial = np.empty(((n + _CHUNK - 1) // _CHUNK, A.shape[0]))
    _k.chunked_matvec(A, v, _CHUNK, partial)
    out: Float = partial.sum(axis=0)
    return out


def _pair_products(A: Float, s: Float, y: Float) -> Float:
    """``[s·y, y·y, s·s, S_j·y, Y_j·s, Y_j·y]`` in one sweep (see :func:`_mf_kernels.pair_products`)."""
    m = A.shape[0] // 2
    partial = np.empty(((A.shape[1] + _CHUNK - 1) // _CHUNK, 3 + 3 * m))
    _k.pair_products(A, s, y, _CHUNK, partial)
    out: Float = partial.sum(axis=0)
    return out


def _dot(a: Float, b: Float) -> float:
    return float(_matvec(a.reshape(1, -1), b)[0])


def _mm(a: Float, b: Float) -> Float:
    """Product of small matrices without BLAS (see :func:`_triu_inverse`)."""
    out: Float = (a[:, :, None] * b[None, :, :]).sum(axis=1)
    return out


def _triu_inverse(R: Float) -> Float:
    """Inverse of a small upper-triangular matrix by back substitution (LAPACK calls on 5 x 5 matrices
    cost milliseconds here because of BLAS thread start-up)."""
    k = R.shape[0]
    inv = np.zeros((k, k))
    for j in range(k):
        inv[j, j] = 1.0 / R[j, j]
        for i in range(j - 1, -1, -1):
            acc = 0.0
            for m in range(i + 1, j + 1):
                acc += R[i, m] * inv[m, j]
            inv[i, j] = -acc / R[i, i]
    return inv


# ============================================================================ compact L-BFGS
class CompactLBFGS:
    """Compact L-BFGS inverse-Hessian approximation ``H = σ I + W N Wᵀ`` (Byrd-Nocedal-Schnabel).

    Keeps the last ``memory`` accepted pairs in a circular buffer (rows of :attr:`A`: the ``s``
    slots, then the ``y`` slots) and maintains ``SᵀY`` and ``YᵀY`` incrementally (one new row and
    column per pair).  ``N`` is rebuilt in chronological order with triangular solves.

    Parameters
    ----------
    n : int
        Dimension.
    memory : int
        ``M >= 1``.
    sigma_mode : {"thesis", "running_min"}
        ``σ = sᵀy / yᵀy`` of the newest pair, or ``min(σ_prev, sᵀy / yᵀy)`` with ``σ_prev = sigma0``.
    curvature : {"relative", "reference", "thesis"}
        Pair acceptance: ``sᵀy > tol ||s|| ||y||``; ``sᵀy / ||y|| > tol``; or ``sᵀy > 0``.
    curvature_tol : float
        ``tol`` above (defaults: 1e-8 relative, 1e-6 reference).
    """

    def __init__(
        self,
        n: int,
        memory: int,
        *,
        sigma_mode: Literal["thesis", "running_min"] = "thesis",
        sigma0: float = 500.0,
        curvature: Literal["relative", "reference", "thesis"] = "relative",
        curvature_tol: float | None = None,
    ) -> None:
        self.n = check_int(n, "n")
        self.memory = check_int(memory, "memory")
        if sigma_mode not in ("thesis", "running_min"):
            raise InvalidParameterError("sigma_mode: must be 'thesis' or 'running_min'")
        if curvature not in ("relative", "reference", "thesis"):
            raise InvalidParameterError("curvature: must be 'relative', 'reference' or 'thesis'")
        self.sigma_mode = sigma_mode
        self.curvature = curvature
        default_tol = {"relative": 1e-8, "reference": 1e-6, "thesis": 0.0}[curvature]
        self.tol = default_tol if curvature_tol is None else check_nonneg(curvature_tol, "curvature_tol")
        self.sigma = check_positive(sigma0, "sigma0") if sigma_mode == "running_min" else 1.0
        self._sigma_init = self.sigma
        m = self.memory
        self.A = np.zeros((2 * m, self.n))
        self.STY = np.zeros((m, m))
        self.YTY = np.zeros((m, m))
        self.order: list[int] = []
        self.n_accepted = 0
        self.n_rejected = 0
        self._N = np.zeros((2 * m, 2 * m))

    @property
    def full(self) -> bool:
        """Whether ``memory`` pairs are stored (HAMSI takes quasi-Newton steps only then)."""
        return len(self.order) == self.memory

    @property
    def size(self) -> int:
        """Number of stored pairs."""
        return len(self.order)

    def push(self, s: Float, y: Float) -> bool:
        """Offer a curvature pair; return whether it passed the curvature test and was stored."""
        m = self.memory
        p = _pair_products(self.A, s, y)
        return self.push_reduced(
            s, y, float(p[0]), float(p[1]), float(p[2]), p[3 : 3 + m], p[3 + m : 3 + 2 * m], p[3 + 2 * m :]
        )

    def push_reduced(
        self,
        s: Float,
        y: Float,
        sy: float,
        yy: float,
        ss: float,
        s_dot_y: Float,
        y_dot_s: Float,
        y_dot_y: Float,
    ) -> bool:
        """:meth:`push` with the inner products given (summed over the shards of a distributed run).

        ``s``/``y`` are this memory's slices of the pair; ``s_dot_y[i] = s_i · y`` over the slots
        *before* insertion (likewise ``y_dot_s[i] = y_i · s``, ``y_dot_y[i] = y_i · y``).
        """
        if self.curvature == "relative":
            ok = sy > self.tol * math.sqrt(max(ss * yy, 0.0))
        elif self.curvature == "reference":
            ok = yy > 0 and sy / math.sqrt(yy) > self.tol
        else:
            ok = sy > self.tol
        if not ok or not math.isfinite(sy) or yy <= 0:
            self.n_rejected += 1
            return False
        m = self.memory
        slot = self.order.pop(0) if len(self.order) == m else len(self.order)
        self.n_accepted += 1
        self.order.append(slot)
        self.A[slot] = s
        self.A[m + slot] = y
        s_dot_y = np.array(s_dot_y, dtype=np.float64)
        y_dot_s = np.array(y_dot_s, dtype=np.float64)
        y_dot_y = np.array(y_dot_y, dtype=np.float64)
        s_dot_y[slot] = y_dot_s[slot] = sy
        y_dot_y[slot] = yy
        self.STY[:, slot] = s_dot_y
        self.STY[slot, :] = y_dot_s
        self.YTY[:, slot] = y_dot_y
        self.YTY[slot, :] = y_dot_y
        ratio = sy / yy
        self.sigma = min(self.sigma, ratio) if self.sigma_mode == "running_min" else ratio
        self._rebuild()
        return True

    def reset(self) -> None:
        """Forget all pairs (and return σ to its initial value)."""
        self.order = []
        self.A[:] = 0.0
        self.STY[:] = 0.0
        self.YTY[:] = 0.0
        self.sigma = self._sigma_init

    def _rebuild(self) -> None:
        idx = np.asarray(self.order)
        k = idx.shape[0]
        sty = self.STY[np.ix_(idx, idx)]
        R = np.triu(sty)
        D = np.diag(np.diag(sty))
        Cy = self.YTY[np.ix_(idx, idx)]
        Rinv = _triu_inverse(R)
        N = np.zeros((2 * k, 2 * k))
        N[:k, :k] = _mm(_mm(Rinv.T, D + self.sigma * Cy), Rinv)
        N[:k, k:] = -Rinv.T
        N[k:, :k] = -Rinv
        self._N = N

    def coefficients(self, g: Float) -> Float:
        """Weights ``c`` (one per row of :attr:`A`) with ``H g = σ g + Aᵀ c``."""
        if not self.order:
            return np.zeros(2 * self.memory)
        return self.coefficients_from(_matvec(self.A, g))

    def coefficients_from(self, v: Float) -> Float:
        """:meth:`coefficients` given ``v = A g`` (summed over shards in a distributed run)."""
        m = self.memory
        idx = np.asarray(self.order, dtype=np.int64)
        k = idx.shape[0]
        coefs = np.zeros(2 * m)
        if k == 0:
            return coefs
        v1 = np.concatenate([v[idx], self.sigma * v[m + idx]])
        v2 = (self._N * v1[None, :]).sum(axis=1)
        coefs[idx] = v2[:k]
        coefs[m + idx] = self.sigma * v2[k:]
        return coefs

    def direction(self, g: Any) -> Float:
        """``H g = σ g + W (N (Wᵀ g))`` (a new array)."""
        gg = np.ascontiguousarray(g, dtype=np.float64)
        out: Float = self.sigma * gg + self.A.T @ self.coefficients(gg)
        return out
