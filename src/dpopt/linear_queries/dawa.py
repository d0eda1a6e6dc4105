"""DAWA: the data- and workload-aware algorithm of Li, Hay, Miklau and Wang (2014), pure ε-DP.

Two stages, sequentially composed:

1. **Partition** (budget ``ρε``): release a Laplace-noised histogram ``x̃ = x + Lap(Δ/ρε)`` and
   choose, by dynamic programming over intervals, the partition of the (1-d) domain into buckets
   that minimizes ``Σ_B [dev(B) + Δ/ε₂]``, where ``dev(B)`` is the L1 deviation of ``x̃`` from its
   bucket mean, corrected for the deviation the noise alone contributes, and ``Δ/ε₂`` is the
   expected absolute noise of one measured bucket total.  This is the "simpler sound variant" of
   the paper's stage 1: the original adds Laplace noise to the interval costs themselves; here
   every cost is post-processing of one noisy histogram.  As in the paper, candidate buckets are
   the intervals whose length is a power of two (any start), so costs take ``O(n²)`` time in the
   worst case rather than ``O(n³)``.
2. **Measurement** (budget ``(1 - ρ)ε``): the bucket totals ``y`` are measured through a
   ``branching``-ary hierarchy of intervals over the buckets with Laplace noise, the rows of each
   level weighted by a workload-aware greedy search (our simplification of the paper's GreedyH:
   level weights, not per-node weights, chosen to minimize the expected workload error on the
   reduced domain, which depends only on the public workload and the already released
   partition).  The bucket totals are reconstructed by least squares and spread uniformly over the
   cells of each bucket; the workload is answered on that histogram estimate.

Only 1-d histograms (one count per cell of an ordered domain) are supported.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import ArrayLike, NDArray

from dpopt._validation import check_array, check_int, check_positive
from dpopt.accounting import (
    Accountant,
    Budget,
    ComposedEvent,
    PrivacySpent,
    make_accountant,
)
from dpopt.exceptions import BudgetExceededError, InvalidParameterError
from dpopt.linear_queries.workloads import Workload
from dpopt.mechanisms import LaplaceMechanism
from dpopt.randomness import RNGLike, check_rng

__all__ = ["DawaResult", "dawa"]

FloatArray = NDArray[np.float64]

_GREEDY_MAX_BUCKETS = 256  # level-weight search above this many buckets: uniform weights
_GREEDY_MAX_DOMAIN = 4096  # workload Gram matrix (n x n) formed only up to this domain size
_GREEDY_FACTORS = (0.0, 0.5, 2.0)


@dataclass(frozen=True)
class DawaResult:
    """Output of :func:`dawa`.

    Attributes
    ----------
    answers : ndarray of shape (m,)
        Private answers ``W x̂`` to the workload.
    estimate : ndarray of shape (n,)
        The private histogram estimate ``x̂`` (bucket estimates spread uniformly over their cells).
    partition : ndarray of int, shape (k + 1,)
        Bucket boundaries ``0 = c_0 < c_1 < ... < c_k = n``; bucket ``j`` is cells ``[c_j, c_{j+1})``.
    privacy : PrivacySpent
        What the accountant recorded after both stages.
    level_weights : ndarray of shape (levels,)
        Weights of the hierarchy levels (root first) used in stage 2, scaled so that the measurement
        has l1 sensitivity one per unit of bucket-total change.

    Privacy
    -------
    ``answers``, ``estimate``, ``partition`` and ``level_weights`` are post-processing of the two
    Laplace releases whose guarantee is in ``privacy``.
    """

    answers: FloatArray
    estimate: FloatArray
    partition: NDArray[np.intp]
    privacy: PrivacySpent
    level_weights: FloatArray


# --------------------------------------------------------------------------------------- stage 1
def _interval_costs(noisy: FloatArray, noise_scale: float) -> list[tuple[int, FloatArray]]:
    """For every power-of-two length L: corrected L1 deviation of each window ``noisy[s:s+L]``."""
    n = noisy.shape[0]
    out: list[tuple[int, FloatArray]] = []
    L = 1
    while L <= n:
        if L == 1:
            cost = np.zeros(n)
        else:
            win = sliding_window_view(noisy, L)
            dev = np.abs(win - win.mean(axis=1, keepdims=True)).sum(axis=1)
            # Laplace noise alone contributes about (L - 1)·b of deviation: remove it (clip at 0)
            cost = np.maximum(dev - (L - 1) * noise_scale, 0.0)
        out.append((L, cost))
        L *= 2
    return out


def _best_partition(noisy: FloatArray, noise_scale: float, bucket_penalty: float) -> NDArray[np.intp]:
    """Dynamic program: boundaries minimizing Σ (cost(B) + bucket_penalty) over power-of-two buckets."""
    n = noisy.shape[0]
    costs = _interval_costs(noisy, noise_scale)
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    back = np.zeros(n + 1, dtype=np.intp)
    for j in range(1, n + 1):
        for L, cost in costs:
            if L > j:
                break
            cand = best[j - L] + cost[j - L] + bucket_penalty
            if cand < best[j]:
                best[j] = cand
                back[j] = j - L
    cuts = [n]
    while cuts[-1] > 0:
        cuts.append(int(back[cuts[-1]]))
    return np.asarray(cuts[::-1], dtype=np.intp)


# --------------------------------------------------------------------------------------- stage 2
def _tree(k: int, branching: int) -> tuple[FloatArray, NDArray[np.intp]]:
    """Indicator rows of a ``branching``-ary tree of intervals over k cells and each row's level."""
    rows: list[tuple[int, int]] = []
    levels: list[int] = []
    frontier = [(0, k)]
    depth = 0
    while frontier:
        nxt: list[tuple[int, int]] = []
        for lo, hi in frontier:
            rows.append((lo, hi))
            levels.append(depth)
            if hi - lo > 1:
                cuts = np.linspace(lo, hi, min(branching, hi - lo) + 1).round().astype(int)
                nxt.extend((int(a), int(c)) for a, c in itertools.pairwise(cuts) if c > a)
        frontier = nxt
        depth += 1
    H = np.zeros((len(rows), k))
    for r, (lo, hi) in enumerate(rows):
        H[r, lo:hi] = 1.0
    return H, np.asarray(levels, dtype=np.intp)


def _weighted(H: FloatArray, levels: NDArray[np.intp], weights: FloatArray) -> FloatArray:
    """Rows scaled by their level's weight, zero-weight rows dropped, l1 sensitivity normalized to 1."""
    w = weights[levels]
    A = H[w > 0] * w[w > 0, None]
    return np.asarray(A / np.abs(A).sum(axis=0).max())


def _reduced_error(A: FloatArray, Vr: FloatArray) -> float:
    """``tr(V_r (AᵀA)⁻¹)`` (unit noise), ``inf`` if A does not have full column rank."""
    try:
        C = np.linalg.cholesky(A.T @ A)
    except np.linalg.LinAlgError:
        return math.inf
    Ci = np.linalg.solve(C, np.eye(C.shape[0]))
    val = float(np.sum((Ci @ Vr) * Ci))  # tr(C⁻ᵀ C⁻¹ V_r) = tr(C⁻¹ V_r C⁻ᵀ)
    return val if np.isfinite(val) and val > 0 else math.inf


def _level_weights(
    workload: Workload, partition: NDArray[np.intp], H: FloatArray, levels: NDArray[np.intp]
) -> FloatArray:
    """Greedy coordinate search over level weights minimizing the expected reduced-domain error."""
    n_levels = int(levels.max()) + 1
    weights = np.ones(n_levels)
    k = partition.shape[0] - 1
    n = workload.domain_size
    if k <= 1 or k > _GREEDY_MAX_BUCKETS or n > _GREEDY_MAX_DOMAIN:
        return weights
    sizes = np.diff(partition)
    E = np.zeros((n, k))
    E[np.arange(n), np.repeat(np.arange(k), sizes)] = 1.0 / np.repeat(sizes, sizes)
    Vr = E.T @ workload.gram() @ E
    current = _reduced_error(_weighted(H, levels, weights), Vr)
    for _ in range(4 * n_levels):
        best_val, best_w = current, None
        for lev in range(n_levels):
            for f in _GREEDY_FACTORS:
                cand = weights.copy()
                cand[lev] = f * cand[lev] if cand[lev] > 0 else 1.0
                if cand.max() <= 0:
                    continue
                val = _reduced_error(_weighted(H, levels, cand), Vr)
                if val < best_val * (1 - 1e-9):
                    best_val, best_w = val, cand
        if best_w is None:
            break
        weights, current = best_w, best_val
    return weights


# ------------------------------------------------------------------------------------------ API
def _check_histogram(histogram: ArrayLike, n: int) -> FloatArray:
    x = check_array(histogram, "histogram", ndim=1)
    if x.shape[0] != n:
        raise InvalidParameterError(
            f"histogram: expected length {n} (the workload's domain size), got length {x.shape[0]}"
        )
    if np.any(x < 0):
        raise InvalidParameterError("histogram: counts must be non-negative (one unit per record)")
    return np.asarray(x, dtype=np.float64)


def dawa(
    workload: Workload,
    histogram: ArrayLike,
    *,
    epsilon: float,
    rng: RNGLike,
    ratio: float = 0.25,
    branching: int = 2,
    accountant: Accountant | None = None,
) -> DawaResult:
    """Answer a workload on a 1-d histogram with DAWA (Li, Hay, Miklau, Wang 2014), pure ε-DP.

    Parameters
    ----------
    workload : Workload
        Public linear queries over the ``n`` cells of an ordered 1-d domain (prefix, ranges, ...).
    histogram : array of shape (n,)
        The private data: one non-negative count per cell (each record adds 1 to one cell).
    epsilon : float
        Total privacy budget ε > 0.
    rng : int, Generator, "secure" or None
        Randomness of the noise (keyword only; no default seed).
    ratio : float, default 0.25
        Fraction ρ of ε spent on choosing the partition, ``0 < ρ < 1`` (the paper's default 0.25).
    branching : int, default 2
        Branching factor of the measurement hierarchy over the buckets (>= 2).
    accountant : Accountant, optional
        Ledger to compose into; refused (unchanged, no noise drawn) if the two stages together
        would exceed its budget.  Default: a fresh ``make_accountant("basic", budget=Budget(ε))``.
        Its neighbouring relation sets the sensitivities (``"replace_one"`` doubles them).

    Returns
    -------
    DawaResult

    Raises
    ------
    InvalidParameterError
        On a bad parameter, a histogram that is not 1-d, has the wrong length, or contains negative
        or non-finite counts (messages never include data values).
    BudgetExceededError
        If the accountant's budget cannot cover both stages; nothing is recorded or drawn.

    Privacy
    -------
    Pure ε-DP under the accountant's neighbouring relation (add/remove one record by default), by
    sequential composition of two Laplace releases, each composed into the accountant before its
    noise is drawn:

    * stage 1, ``ρε``: the noisy histogram ``x + Lap(Δ/(ρε))``, l1 sensitivity Δ = 1 (add/remove)
      or 2 (replace-one); the partition is post-processing of it;
    * stage 2, ``(1 - ρ)ε``: the weighted hierarchy ``A y`` of the bucket totals ``y``, with A
      scaled to l1 column norm 1 so its sensitivity is again Δ; A depends only on the public
      workload and the stage-1 release.

    Least squares, uniform spreading and the answers are post-processing.  The privacy spent is
    ``ρε + (1 - ρ)ε = ε``.  Floating-point Laplace sampling has the usual caveat; pass
    ``rng="secure"`` for the exact discrete samplers of :mod:`dpopt.mechanisms`.

    Notes
    -----
    Choices where the paper differs or is silent (documented, ours): partition costs are computed
    from one noisy histogram with the deviation the noise contributes, ``(|B| - 1)·b``, subtracted
    (clipped at zero); candidate buckets are power-of-two-length intervals; GreedyH is replaced by a
    greedy search over per-level weights (zero allowed for internal levels), skipped (uniform
    weights) above 256 buckets or a 4096-cell domain.
    """
    if not isinstance(workload, Workload):
        raise InvalidParameterError("workload: expected a dpopt.linear_queries Workload")
    eps = check_positive(epsilon, "epsilon")
    rho = float(check_positive(ratio, "ratio"))
    if not rho < 1:
        raise InvalidParameterError("ratio: must lie in (0, 1)")
    b = check_int(branching, "branching", minimum=2)
    x = _check_histogram(histogram, workload.domain_size)
    if accountant is None:
        accountant = make_accountant("basic", budget=Budget(eps))
    elif not isinstance(accountant, Accountant):
        raise InvalidParameterError("accountant: expected a dpopt.accounting.Accountant or None")
    gen = check_rng(rng)
    sens = 1.0 if accountant.neighbouring == "add_remove" else 2.0
    eps1 = rho * eps
    eps2 = eps - eps1
    stage1 = LaplaceMechanism.calibrate(eps1, sens)
    stage2 = LaplaceMechanism.calibrate(eps2, sens)
    if accountant.budget is not None:
        total = accountant.would_spend(ComposedEvent((stage1.event, stage2.event)))
        if not total <= accountant.budget.epsilon * (1 + 1e-9) + 1e-12:
            raise BudgetExceededError(
                f"dawa: the two stages would bring the ledger to ε={total:.4g}, over its budget "
                f"ε={accountant.budget.epsilon:g}; lower epsilon or raise the budget (nothing was spent)"
            )

    # stage 1: noisy histogram (composed before drawing), partition by post-processing
    noisy = np.asarray(stage1.release(x, rng=gen, accountant=accountant, label="dawa/partition"))
    partition = _best_partition(np.atleast_1d(noisy), stage1.scale, stage2.scale)
    sizes = np.diff(partition)
    k = sizes.shape[0]
    y = np.add.reduceat(x, partition[:-1])

    # stage 2: weighted hierarchy over the bucket totals (public given stage 1)
    H, levels = _tree(k, b)
    weights = _level_weights(workload, partition, H, levels)
    A = _weighted(H, levels, weights)
    z = np.atleast_1d(stage2.release(A @ y, rng=gen, accountant=accountant, label="dawa/measure"))
    y_hat, *_ = np.linalg.lstsq(A, z, rcond=None)
    estimate = np.repeat(y_hat / sizes, sizes)
    return DawaResult(
        answers=workload.answer(estimate),
        estimate=estimate,
        partition=partition,
        privacy=accountant.spent(),
        level_weights=weights / float(np.abs(H * weights[levels, None]).sum(axis=0).max()),
    )
