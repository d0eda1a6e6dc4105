"""Algorithm H1 with explicit Hessians: the model-minimiser step :func:`hamsi_step` and the dense
reference :func:`hamsi_dense` for small partially separable problems."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import scipy.linalg
from numpy.typing import NDArray

from dpopt._validation import check_int, check_nonneg, check_positive
from dpopt.exceptions import InvalidParameterError
from dpopt.iteration import deprecated_alias
from dpopt.randomness import RNGLike, as_generator
from dpopt.solvers.hamsi.schedule import subset_schedule

Float = NDArray[np.float64]


# ============================================================================ H1 with explicit Hessians
def hamsi_step(x: Any, g: Any, H: Any, beta: float) -> Float:
    """Minimiser of the local model ``Q(z) = (z-x)ᵀg + ½(z-x)ᵀH(z-x) + ½β||z-x||²``: ``x - (H + βI)⁻¹ g``.

    Raises
    ------
    InvalidParameterError
        If ``H + βI`` is not positive definite.
    """
    xx = np.asarray(x, dtype=np.float64)
    gg = np.asarray(g, dtype=np.float64)
    HH = np.asarray(H, dtype=np.float64)
    b = check_nonneg(beta, "beta")
    n = xx.shape[0]
    if gg.shape != (n,) or HH.shape != (n, n):
        raise InvalidParameterError("x, g, H: expected shapes (n,), (n,) and (n, n)")
    try:
        c = scipy.linalg.cho_factor(HH + b * np.eye(n))
    except np.linalg.LinAlgError:
        raise InvalidParameterError("H + beta*I: must be positive definite; increase beta") from None
    out: Float = xx - scipy.linalg.cho_solve(c, gg)
    return out


def hamsi_dense(
    grad: Any,
    hessian: Any,
    x0: Any,
    cover: Any,
    alpha: Any,
    *,
    eta: float = 0.06,
    gamma: float = 0.51,
    max_iter: int | None = None,
    schedule: Literal["det", "stoc"] = "det",
    rng: RNGLike = None,
    max_epochs: int | None = None,
) -> Float:
    """Algorithm H1/H2 with explicit Hessians for small dense partially separable problems.

    Parameters
    ----------
    grad : callable
        ``grad(functions, x)`` -> gradient of ``Σ_{i in functions} f_i`` at ``x`` (full length).
    hessian : callable
        ``hessian(x)`` -> approximate Hessian ``H`` (n x n), re-evaluated after every outer iteration.
    x0 : array
    cover : sequence of subsets, each a sequence of blocks (function index arrays)
    alpha : sequence
        ``alpha[i]`` = variables of function ``i`` (for the principal submatrices ``H_{α_{k,b}}``).
    eta, gamma : float
        ``β_t = (η t)^γ``.
    max_iter : int, default 10
    schedule : {"det", "stoc"}
    rng : for ``"stoc"``.

    Returns
    -------
    ndarray
        The final iterate.  With one subset of one block, each step is the regularized Newton step
        ``x - (H + β_t I)⁻¹ ∇f(x)``.
    """
    x = np.array(x0, dtype=np.float64)
    K = len(cover)
    gen = as_generator(rng) if schedule == "stoc" else None
    H = np.asarray(hessian(x), dtype=np.float64)
    orders = subset_schedule(K, schedule, repeat_first=True, rng=gen)
    limit = deprecated_alias(
        {"max_epochs": max_epochs} if max_epochs is not None else {},
        "max_epochs",
        "max_iter",
        max_iter,
        where="hamsi_dense",
    )
    for t in range(1, check_int(10 if limit is None else limit, "max_iter", minimum=0) + 1):
        beta = (check_positive(eta, "eta") * t) ** check_positive(gamma, "gamma")
        for k in next(orders):
            steps = []
            for block in cover[k]:
                fn = np.asarray(block, dtype=np.int64)
                var = np.unique(np.concatenate([np.asarray(alpha[i], dtype=np.int64) for i in fn]))
                g = np.asarray(grad(fn, x), dtype=np.float64)
                steps.append((var, hamsi_step(x[var], g[var], H[np.ix_(var, var)], beta)))
            for var, z in steps:  # blocks are variable-disjoint: order-free
                x[var] = z
        H = np.asarray(hessian(x), dtype=np.float64)
    return x
