"""Unions of Kronecker products on large multi-attribute domains: a residual-basis strategy.

A *union of products* stacks sub-workloads ``W_k = W_k1 ⊗ ... ⊗ W_kd`` on a domain with attribute
sizes ``(n_1, ..., n_d)`` -- e.g. all 2-way marginals with range queries on an ordered attribute
(HDMM's union-of-products class; :func:`product_marginals` builds them).  The domain may have 10⁹
cells or more: nothing here forms a vector of the full domain.

Strategy family
---------------
Per attribute i fix a matrix ``C_i`` whose rows are orthogonal to the all-ones vector (they span
``U1_i = 1^⊥``).  For every attribute subset T the strategy measures, with weight ``sqrt(u_T)``,

    B_T = ⊗_{i∈T} C_i ⊗_{i∉T} 1ᵀ,      i.e.  (⊗_{i∈T} C_i) · marginal_T(x).

The row spaces of different T are orthogonal, so least squares decouples: each measurement
estimates the residual ``r_T = (⊗_{i∈T} P1_i) marginal_T(x)`` (``P1 = I - J/n``) and every
marginal -- hence every product query -- is a sum of residuals.  With ``e_ik = ‖W_ki C_i⁺‖_F²``,
``t_ik = ‖W_ki 1‖²/n_i²`` and ``κ_i = max_j ‖C_i e_j‖²``:

    error(u) = Σ_T E_T / u_T,   E_T = Σ_k Π_{i∈T} e_ik Π_{i∉T} t_ik,   sensitivity² = Σ_T u_T Π_{i∈T} κ_i,

minimized in closed form by ``u_T ∝ sqrt(E_T / κ_T)``: ``error* = (Σ_T sqrt(E_T κ_T))²`` at
sensitivity 1.  With ``C_i = P1`` for every attribute this is the residual basis of
ResidualPlanner (exactly optimal for marginals: it attains the SVD bound).  For attributes with
other queries (ranges, prefixes) ``C_i`` is chosen by alternating: the per-attribute problem is a
small COA problem (:func:`~dpopt.linear_queries.optimize_strategy` on an ``n_i x n_i`` Gram
matrix, rows projected onto ``U1_i``), kept only when the total error drops.

Lower bound
-----------
No strategy with unit column norms beats ``tr(V^½)²/N`` (SVD bound).  For a union of products we
replace every factor Gram matrix ``V`` that does not commute with ``J`` by ``V' ⪯ V`` that does
(in the basis ``(1/√n, U1)``: ``V' = (a - s) ⊕ (C - bbᵀ/s)``, a rank-one Loewner decrease), so
``V' = Σ_k ⊗_i V'_ki ⪯ V`` is diagonal in a product eigenbasis and ``tr(V^½) >= tr(V'^½)``
(``sqrt`` is operator monotone) is a sum over attribute subsets.  ``s`` is chosen to make the
bound largest.  It is computed in floating point (not rounded rigorously as the dense
certificates are): a *reported* bound.

Privacy
-------
Under add/remove-one-record a record moves every ``B_T x`` by ``B_T e_cell``, whose squared norm
summed over T is at most ``Σ_T u_T Π_{i∈T} κ_i`` (attained: the max over cells of a product of
per-attribute column norms); the release adds i.i.d. Gaussian noise to all measurements at once,
calibrated to that sensitivity.  Replace-one uses twice it.  Everything else (reconstruction,
answers, error formulas) is post-processing or data independent.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import check_int
from dpopt.exceptions import InvalidParameterError
from dpopt.linear_queries._certificates import eig_null_threshold, round_down, sqrt_trace_lower
from dpopt.linear_queries._coa_newton import COAParams
from dpopt.linear_queries._dual_fixed_point import solve_dual
from dpopt.linear_queries._optimizer import optimize_dense
from dpopt.linear_queries._result import StrategyResult, empty_strategy
from dpopt.linear_queries.workloads import (
    AllRange,
    Identity,
    Kronecker,
    Prefix,
    Total,
    Union,
    Workload,
    kron_apply,
)

__all__ = [
    "ProductResidualPlan",
    "is_union_of_products",
    "optimize_union",
    "plan_from_result",
    "product_marginals",
    "union_lower_bound",
]

FloatArray = NDArray[np.float64]
Subset = tuple[int, ...]


# ============================================================================== workloads
def product_marginals(
    shape: Sequence[int],
    k: int | Sequence[Sequence[int]] = 2,
    *,
    queries: Mapping[int, str | Workload] | None = None,
    name: str | None = None,
) -> Union:
    """Marginals whose attributes may carry other per-attribute queries (HDMM's union of products).

    Parameters
    ----------
    shape : sequence of int
        Attribute sizes ``(n_1, ..., n_d)`` (cells in C order).
    k : int or sequence of attribute subsets, default 2
        All k-way subsets, or the subsets themselves.
    queries : mapping attribute index -> workload, optional
        The queries on attribute i inside every subset that contains it: ``"identity"`` (default:
        plain marginals), ``"prefix"``, ``"all_range"`` or a :class:`Workload` on ``n_i`` cells.
        Attributes outside a subset are summed out (``Total``).

    Returns
    -------
    Union
        One :class:`Kronecker` part per subset.

    Examples
    --------
    >>> from dpopt.linear_queries.union import product_marginals
    >>> W = product_marginals((90, 2, 50, 10), 2, queries={0: "all_range"})   # age ranges x marginals
    >>> W.domain_size, len(W.parts)
    (90000, 6)
    """
    dims = tuple(check_int(d, "shape") for d in shape)
    if not dims:
        raise InvalidParameterError("shape: need at least one attribute")
    if isinstance(k, int):
        kk = check_int(k, "k", minimum=0)
        if kk > len(dims):
            raise InvalidParameterError(f"k: at most the number of attributes ({len(dims)})")
        subsets = [tuple(c) for c in itertools.combinations(range(len(dims)), kk)]
    else:
        subsets = []
        for sub in k:
            t = tuple(sorted({int(i) for i in sub}))
            if any(i < 0 or i >= len(dims) for i in t):
                raise InvalidParameterError(f"k: attribute indices must lie in [0, {len(dims)})")
            if t not in subsets:
                subsets.append(t)
        if not subsets:
            raise InvalidParameterError("k: need at least one attribute subset")
    per_attr: dict[int, Workload] = {}
    for i, q in (queries or {}).items():
        if not 0 <= int(i) < len(dims):
            raise InvalidParameterError(f"queries: attribute index {i} outside [0, {len(dims)})")
        per_attr[int(i)] = _attribute_workload(q, dims[int(i)], int(i))
    parts = [
        Kronecker([per_attr.get(i, Identity(d)) if i in S else Total(d) for i, d in enumerate(dims)])
        for S in subsets
    ]
    label = name or (f"{k}-way product marginals" if isinstance(k, int) else "product marginals")
    out = Union(parts, name=label, params={"shape": list(dims), "subsets": [list(s) for s in subsets]})
    return out


def _attribute_workload(q: str | Workload, n: int, i: int) -> Workload:
    if isinstance(q, Workload):
        if q.domain_size != n:
            raise InvalidParameterError(
                f"queries[{i}]: has domain size {q.domain_size}, attribute {i} has {n}"
            )
        return q
    makers: dict[str, Callable[[int], Workload]] = {
        "identity": Identity,
        "prefix": Prefix,
        "all_range": AllRange,
        "total": Total,
    }
    if q not in makers:
        raise InvalidParameterError(f"queries[{i}]: unknown query class; choose one of {sorted(makers)}")
    return makers[q](n)


def is_union_of_products(workload: Workload) -> bool:
    """True for a :class:`Union` whose parts are :class:`Kronecker` products over the same attribute sizes."""
    if not isinstance(workload, Union) or not workload.parts:
        return False
    if not all(isinstance(p, Kronecker) for p in workload.parts):
        return False
    dims = [tuple(f.domain_size for f in p.factors) for p in workload.parts]  # type: ignore[attr-defined]
    return len(set(dims)) == 1


def _parts(workload: Workload) -> tuple[tuple[int, ...], list[tuple[Workload, ...]]]:
    if not is_union_of_products(workload):
        raise InvalidParameterError(
            "workload: expected a union of Kronecker products over the same attributes "
            "(e.g. workloads.marginals or union.product_marginals)"
        )
    assert isinstance(workload, Union)
    parts = [tuple(p.factors) for p in workload.parts]  # type: ignore[attr-defined]
    return tuple(f.domain_size for f in parts[0]), parts


# ============================================================================== the plan
@dataclass(frozen=True)
class ProductResidualPlan:
    """A strategy for a union of products, measured marginal by marginal (never on the full domain).

    Attributes ``S`` (``special``, e.g. an ordered attribute with range queries) are measured
    jointly by a dense matrix per term; every other attribute i by a basis ``C_i`` of ``1^⊥``
    (rows orthogonal to ones).  Term ``(T, A_T)`` (T a subset of the other attributes) measures

        (⊗_{i∈T} C_i ⊗ A_T) · marginal_{T∪S}(x) / sqrt(Π_{i∉T∪S} n_i),

    i.e. the rows ``⊗_{i∈T} C_i ⊗_{i∉T∪S} 1ᵀ/√n_i ⊗ A_T``.  Terms are mutually orthogonal, so
    least squares decouples term by term.

    Attributes
    ----------
    dims : tuple of int
        Attribute sizes.
    special : tuple of int
        The jointly measured attributes (sorted; may be empty, then ``A_T`` is 1 x 1).
    bases : tuple of ndarray
        ``C_i`` per attribute (those of special attributes are unused).
    terms : tuple of (subset, ndarray)
        ``(T, A_T)`` with ``A_T`` of shape ``(p_T, Π_{i∈S} n_i)``.
    """

    dims: tuple[int, ...]
    special: tuple[int, ...]
    bases: tuple[FloatArray, ...]
    terms: tuple[tuple[Subset, FloatArray], ...]

    @functools.cached_property
    def _pinvs(self) -> tuple[FloatArray, ...]:
        return tuple(np.asarray(np.linalg.pinv(C), dtype=np.float64) for C in self.bases)

    @functools.cached_property
    def _term_pinvs(self) -> tuple[FloatArray, ...]:
        return tuple(np.asarray(np.linalg.pinv(A), dtype=np.float64) for _, A in self.terms)

    def _rest(self, T: Subset) -> int:
        return math.prod(n for i, n in enumerate(self.dims) if i not in T and i not in self.special)

    def axes(self, T: Subset) -> tuple[int, ...]:
        """The attributes a term's marginal is taken over, in the term's order (T, then special)."""
        return (*T, *self.special)

    def sensitivity_profile(self) -> FloatArray:
        """Squared column norm of the strategy per special cell (max over the other attributes)."""
        kap = [float(np.max(np.sum(C**2, axis=0))) for C in self.bases]
        ns = math.prod(self.dims[i] for i in self.special)
        out = np.zeros(ns)
        for T, A in self.terms:
            out += math.prod(kap[i] for i in T) / self._rest(T) * np.sum(A**2, axis=0)
        return out

    def unit_sensitivity(self) -> float:
        """Add/remove l2 sensitivity: the largest column norm (exact: the max is attained by one cell)."""
        return math.sqrt(float(np.max(self.sensitivity_profile())))

    def n_measurements(self) -> int:
        """Number of noisy strategy queries released."""
        return sum(math.prod(self.bases[i].shape[0] for i in T) * A.shape[0] for T, A in self.terms)

    def measure(self, marginal: Callable[[Subset], FloatArray]) -> FloatArray:
        """``A x`` as one vector (terms in order); ``marginal(U)`` = counts summed over the attributes
        outside U, a tensor with axes in sorted(U) order."""
        out = []
        for T, A in self.terms:
            U = self.axes(T)
            m = np.asarray(marginal(tuple(sorted(U))), dtype=np.float64)
            m = np.transpose(m.reshape(tuple(self.dims[i] for i in sorted(U))), np.argsort(np.argsort(U)))
            y = kron_apply([*(self.bases[i] for i in T), A], m.reshape(-1))
            out.append(y / math.sqrt(self._rest(T)))
        return np.concatenate(out)

    def reconstruct(self, z: FloatArray) -> dict[Subset, FloatArray]:
        """Least-squares estimates per term (tensors on the term's axes) from the noisy measurements."""
        pinvs = self._pinvs
        out: dict[Subset, FloatArray] = {}
        pos = 0
        for (T, A), Ap in zip(self.terms, self._term_pinvs, strict=True):
            size = math.prod(self.bases[i].shape[0] for i in T) * A.shape[0]
            block = z[pos : pos + size] * math.sqrt(self._rest(T))
            pos += size
            r = kron_apply([*(pinvs[i] for i in T), Ap], block)
            out[T] = np.asarray(r).reshape(tuple(self.dims[i] for i in self.axes(T)))
        return out

    def part_answers(self, residuals: Mapping[Subset, FloatArray], factors: Sequence[Workload]) -> FloatArray:
        """Answers of one product ``⊗_i W_i`` (its queries in C order) from :meth:`reconstruct`'s output."""
        shape = tuple(f.n_queries for f in factors)
        out = np.zeros(shape)
        special = self._special_matrix(factors)
        for T, r in residuals.items():
            if any(isinstance(factors[i], Total) for i in T):
                continue  # 1ᵀ C_i = 0: no contribution
            t = kron_apply([*(_dense(factors[i]) for i in T), special], r.reshape(-1))
            out = out + self._spread(t, T, factors, shape)
        return np.asarray(out).reshape(-1)

    def part_variances(self, factors: Sequence[Workload]) -> FloatArray:
        """Per-query error variances of one product ``⊗_i W_i`` at unit noise (σ = 1)."""
        pinvs = self._pinvs
        shape = tuple(f.n_queries for f in factors)
        out = np.zeros(shape)
        special = self._special_matrix(factors)
        for (T, _), Ap in zip(self.terms, self._term_pinvs, strict=True):
            if any(isinstance(factors[i], Total) for i in T):
                continue
            term: FloatArray = np.array(float(self._rest(T)))
            for i in T:
                term = np.multiply.outer(term, np.sum((_dense(factors[i]) @ pinvs[i]) ** 2, axis=1))
            term = np.multiply.outer(term, np.sum((special @ Ap) ** 2, axis=1))
            out = out + self._spread(term.reshape(-1), T, factors, shape, squared=True)
        return np.asarray(out).reshape(-1)

    def _special_matrix(self, factors: Sequence[Workload]) -> FloatArray:
        M: FloatArray = np.ones((1, 1))
        for i in self.special:
            M = np.asarray(np.kron(M, _dense(factors[i])), dtype=np.float64)
        return M

    def _spread(
        self,
        t: FloatArray,
        T: Subset,
        factors: Sequence[Workload],
        shape: tuple[int, ...],
        *,
        squared: bool = False,
    ) -> FloatArray:
        """Outer product with ``W_i 1/n_i`` over the attributes outside the term, in attribute order."""
        axes = self.axes(T)
        full = t.reshape(tuple(shape[i] for i in axes))
        others = [i for i in range(len(self.dims)) if i not in axes]
        for i in others:
            v = factors[i].answer(np.full(self.dims[i], 1.0 / self.dims[i]))
            full = np.multiply.outer(full, v**2 if squared else v)
        order = [*axes, *others]
        return np.transpose(full, np.argsort(order))

    def dense_matrix(self, max_cells: int = 4096) -> FloatArray:
        """The strategy as a dense ``(p, N)`` matrix, columns in C order (small domains only)."""
        N = math.prod(self.dims)
        if N > max_cells:
            raise InvalidParameterError(f"dense_matrix: the domain has {N} cells (limit {max_cells})")
        others = [i for i in range(len(self.dims)) if i not in self.special]
        order = others + list(self.special)
        # column j of kron(others..., special) is the cell whose transposed C-order index is j
        idx = np.arange(N).reshape(self.dims).transpose(order).reshape(-1)
        rows = []
        for T, A in self.terms:
            R: FloatArray = np.ones((1, 1))
            for i in others:
                M = self.bases[i] if i in T else np.ones((1, self.dims[i])) / math.sqrt(self.dims[i])
                R = np.asarray(np.kron(R, M), dtype=np.float64)
            full = np.kron(R, A)
            cols = np.empty_like(full)
            cols[:, idx] = full
            rows.append(cols)
        return np.vstack(rows)

    def marginal_estimate(self, residuals: Mapping[Subset, FloatArray], S: Subset) -> FloatArray:
        """Estimated marginal table on the attributes S (axes in sorted order)."""
        S = tuple(sorted(S))
        factors = [Identity(n) if i in S else Total(n) for i, n in enumerate(self.dims)]
        return self.part_answers(residuals, factors).reshape(tuple(self.dims[i] for i in S))


def plan_from_result(result: Any) -> ProductResidualPlan:
    """The plan of a :class:`StrategyResult` from :func:`optimize_union` or the marginal closed form."""
    dims = tuple(int(d) for d in result.domain_shape)
    if result.attribute_bases:
        special = tuple(int(i) for i in result.params.get("special", ()))
        terms = tuple(
            (tuple(T), A) for (T, _), A in zip(result.residual_terms, result.term_matrices, strict=True)
        )
        return ProductResidualPlan(dims, special, tuple(result.attribute_bases), terms)
    # the marginals closed form X = Σ x_T Q_T: rows ⊗_{i∈T} P1 ⊗_{i∉T} 1ᵀ/√n_i times sqrt(x_T)
    bases = tuple(_residual_basis(n) for n in dims)
    return ProductResidualPlan(
        dims, (), bases, tuple((tuple(T), np.array([[math.sqrt(x)]])) for T, x in result.residual_terms)
    )


def _residual_basis(n: int) -> FloatArray:
    return np.eye(n) - 1.0 / n


_DENSE_CACHE: dict[str, FloatArray] = {}


def _dense(f: Workload) -> FloatArray:
    """The (small, per-attribute) dense matrix of a factor, memoized by fingerprint."""
    key = f.fingerprint()
    hit = _DENSE_CACHE.get(key)
    if hit is None:
        if len(_DENSE_CACHE) > 64:
            _DENSE_CACHE.clear()
        hit = np.asarray(f.matrix(), dtype=np.float64)
        hit.setflags(write=False)
        _DENSE_CACHE[key] = hit
    return hit


# ============================================================================== optimization
def _candidate_subsets(parts: list[tuple[Workload, ...]], exclude: Sequence[int] = ()) -> list[Subset]:
    seen: set[Subset] = set()
    for p in parts:
        support = [i for i, f in enumerate(p) if not isinstance(f, Total) and i not in exclude]
        for r in range(len(support) + 1):
            seen.update(itertools.combinations(support, r))
    return sorted(seen, key=lambda T: (len(T), T))


def _special_attributes(parts: list[tuple[Workload, ...]], dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(
        i
        for i in range(len(dims))
        if dims[i] > 1 and any(not isinstance(p[i], Identity | Total) for p in parts)
    )


class _BlockDual:
    """Dual evaluator of the symmetrized problem (block diagonal in the residual basis).

    The workload is invariant under permutations of every non-special attribute's values, so an
    optimal ``X = AᵀA`` is ``Σ_T Q_T ⊗ X_T`` (``Q_T`` the residual projectors of the other
    attributes) and the problem is ``min Σ_T tr(B̂_T X_T⁻¹) s.t. Σ_T ρ_T diag(X_T) <= 1`` with
    ``ρ_T = rank(Q_T)/N_other``.  For ``y > 0`` and ``M_T = (Y^½ B̂_T Y^½)^½`` the Lagrangian gives
    the lower bound ``(Σ_T sqrt(ρ_T) tr M_T)² / Σ y`` and the primal ``X_T ∝ ρ_T^-½ Y^-½ M_T Y^-½``:
    the same fixed point as the dense dual method, with blocks.  Blocks proportional to one
    matrix share one eigendecomposition (``group`` weights ``ω_g``).
    """

    def __init__(self, groups: list[tuple[FloatArray, float]]):
        self.groups = groups  # (B_g normalized, ω_g)
        self.n = groups[0][0].shape[0]
        self.tr_lower = 0.0
        self._eig: list[tuple[FloatArray, FloatArray]] = []
        self.diag_M = np.empty(0)

    def evaluate(self, y: FloatArray) -> tuple[float, FloatArray]:
        s = np.sqrt(y)
        tr = 0.0
        lower = 0.0
        diag = np.zeros(self.n)
        self._eig = []
        for B, w in self.groups:
            Bt = s[:, None] * B * s[None, :]
            Bt = (Bt + Bt.T) / 2
            lam, Q = np.linalg.eigh(Bt)
            sig = np.sqrt(np.clip(lam, 0.0, None))
            self._eig.append((sig, Q))
            tr += w * float(sig.sum())
            lower += round_down(w * sqrt_trace_lower(lam, eig_null_threshold(Bt)), 2)
            diag += w * np.einsum("ij,j,ij->i", Q, sig, Q)
        self.tr_lower = round_down(lower, len(self.groups))
        self.diag_M = diag
        return tr, diag

    def normalized_objective(self, d: FloatArray) -> float:
        return math.inf

    def strategy(self, y: FloatArray, kind: str) -> FloatArray:
        dmax = float(np.max(self.diag_M / y))
        roots = [np.sqrt(sig)[:, None] * Q.T / np.sqrt(y)[None, :] / math.sqrt(dmax) for sig, Q in self._eig]
        return np.vstack(roots)


def _optimize_blocks(
    dims: tuple[int, ...],
    parts: list[tuple[Workload, ...]],
    special: tuple[int, ...],
    tol: float,
    max_iter: int,
) -> tuple[ProductResidualPlan, float, float, int, str]:
    others = [i for i in range(len(dims)) if i not in special]
    N_other = math.prod(dims[i] for i in others)
    ns = math.prod(dims[i] for i in special)
    # distinct special-attribute Gram matrices of the parts
    sgrams: list[FloatArray] = []
    sindex: list[int] = []
    keys: dict[str, int] = {}
    for p in parts:
        key = "|".join(p[i].fingerprint() for i in special)
        if key not in keys:
            G: FloatArray = np.ones((1, 1))
            for i in special:
                G = np.asarray(np.kron(G, p[i].gram()), dtype=np.float64)
            keys[key] = len(sgrams)
            sgrams.append(G)
        sindex.append(keys[key])
    blocks: list[tuple[Subset, FloatArray, float, float]] = []  # (T, coefficients, m_T, ρ_T)
    for T in _candidate_subsets(parts, exclude=special):
        coef = np.zeros(len(sgrams))
        for p, g in zip(parts, sindex, strict=True):
            c = 1.0
            for i in others:
                f = p[i]
                if isinstance(f, Total):
                    c *= 0.0 if i in T else float(dims[i])
                # identity: eigenvalue 1 on both U0 and U1
            coef[g] += c
        if not np.any(coef):
            continue
        m = float(math.prod(dims[i] - 1 for i in T))
        blocks.append((T, coef, m, m / N_other))
    # group blocks whose Gram matrices are proportional: B_T = c_T B_g
    groups: list[tuple[FloatArray, float]] = []
    members: list[list[tuple[Subset, float, float, float]]] = []
    gkeys: dict[tuple[float, ...], int] = {}
    for T, coef, m, rho in blocks:
        scale = float(np.linalg.norm(coef))
        gkey = tuple(float(v) for v in np.round(coef / scale, 12))
        if gkey not in gkeys:
            B = sum((ck / scale) * sgrams[k] for k, ck in enumerate(coef) if ck)
            gkeys[gkey] = len(groups)
            groups.append((np.asarray(B, dtype=np.float64), 0.0))
            members.append([])
        g = gkeys[gkey]
        groups[g] = (groups[g][0], groups[g][1] + math.sqrt(rho * m * scale))
        members[g].append((T, scale, m, rho))
    ev = _BlockDual(groups)
    best_A, obj, _, status, n_iter, _, best_y = solve_dual(
        np.zeros((0, 0)),
        tol=tol,
        max_iter=max_iter,
        max_time=None,
        memory=5,
        exponent=2.0,
        callback=None,
        w=np.zeros(0),
        Q=np.zeros((0, 0)),
        evaluator=ev,
    )
    ev.evaluate(best_y)
    lower = ev.tr_lower**2 / (math.fsum(best_y.tolist()) * (1 + 4 * np.finfo(float).eps))
    terms: list[tuple[Subset, FloatArray]] = []
    for g, mem in enumerate(members):
        R = best_A[g * ns : (g + 1) * ns]
        R = R[np.any(R != 0, axis=1)]
        for T, scale, m, rho in mem:
            # X_T = sqrt(m c_T / ρ_T) RᵀR: the block's share of the group's primal
            terms.append((T, math.sqrt(math.sqrt(m * scale / rho)) * R))
    terms.sort(key=lambda t: (len(t[0]), t[0]))
    bases = tuple(_residual_basis(n) for n in dims)
    return ProductResidualPlan(dims, special, bases, tuple(terms)), obj, lower, n_iter, status


def optimize_union(
    workload: Workload,
    *,
    tol: float = 1e-4,
    max_iter: int = 500,
    max_special_cells: int = 4096,
    rounds: int = 3,
) -> StrategyResult:
    """Optimize a strategy for a union of products on any domain size (no data, no privacy cost).

    Attributes whose queries are all identities or totals are handled in the residual basis;
    the others ("special", e.g. an ordered attribute with ranges) are measured jointly by dense
    per-term matrices found by the dual fixed point on the symmetrized problem (class
    ``_BlockDual``): the result is the optimum over *all* strategies to within the certified gap
    ``tol``, when the special attributes have at most ``max_special_cells`` cells together.
    Otherwise a separable strategy (one basis per attribute, chosen by alternating) is used and
    the bound is the weaker, reported one of :func:`union_lower_bound`.

    Parameters
    ----------
    workload : Union of Kronecker products
        E.g. :func:`product_marginals` or :func:`~dpopt.linear_queries.workloads.marginals`.
    tol : float, default 1e-4
        Target relative gap.
    max_iter : int, default 500
        Dual iterations.
    max_special_cells : int, default 4096
        Largest joint domain of the special attributes for the block method.
    rounds : int, default 3
        Alternating rounds of the separable fallback.

    Returns
    -------
    StrategyResult
        ``strategy`` is an empty ``(0, n)`` array (never formed); ``attribute_bases``,
        ``residual_terms``/``term_matrices`` and ``params["special"]`` describe it
        (:func:`plan_from_result`); ``objective`` is the exact expected total squared error per
        unit noise variance at sensitivity 1.

    Examples
    --------
    >>> from dpopt.linear_queries.union import optimize_union, product_marginals
    >>> W = product_marginals((10, 20, 30), 2, queries={0: "prefix"})
    >>> res = optimize_union(W)
    >>> res.method, res.gap <= 1e-4
    ('union', True)
    """
    t0, w0 = time.process_time(), time.perf_counter()
    dims, parts = _parts(workload)
    special = _special_attributes(parts, dims)
    params: dict[str, Any] = {"tol": tol}
    if math.prod(dims[i] for i in special) <= max_special_cells:
        plan, _, lower, n_iter, status = _optimize_blocks(dims, parts, special, tol, max_iter)
        params.update(
            family="symmetrized block dual (optimal over all strategies)", lower_bound="dual, certified"
        )
    else:
        plan, n_iter = _optimize_separable(dims, parts, rounds)
        lower = union_lower_bound(workload)
        status = "completed"
        params.update(family="separable residual bases (heuristic)", lower_bound="reported (floating point)")
    params["special"] = list(plan.special)
    sens2 = float(np.max(plan.sensitivity_profile()))
    objective = sum(float(np.sum(plan.part_variances(p))) for p in parts) * sens2
    if lower > objective:  # rounding only
        params["lower_bound_lowered_by"] = float((lower - objective) / objective)
        lower = objective
    gap = (objective - lower) / lower if lower > 0 else math.nan
    if status == "converged" and not gap <= tol * (1 + 1e-6) + 1e-12:
        status = "max_iter"
    return StrategyResult(
        strategy=empty_strategy(workload.domain_size),
        objective=float(objective),
        lower_bound=float(lower),
        dual_bound=float(lower),
        svd_bound=math.nan,
        gap=float(gap),
        method="union",
        status=status,
        n_iter=int(n_iter),
        cpu_seconds=time.process_time() - t0,
        wall_seconds=time.perf_counter() - w0,
        workload_fingerprint=workload.fingerprint(),
        params=params,
        residual_terms=tuple((T, 1.0) for T, _ in plan.terms),
        domain_shape=dims,
        attribute_bases=plan.bases,
        term_matrices=tuple(A for _, A in plan.terms),
    )


# ------------------------------------------------------------------ separable fallback
def _error_terms(
    parts: list[tuple[Workload, ...]], bases: Sequence[FloatArray], subsets: list[Subset]
) -> dict[Subset, float]:
    pinvs = [np.linalg.pinv(C) for C in bases]
    e_cache: dict[tuple[int, str], float] = {}
    t_cache: dict[tuple[int, str], float] = {}

    def e(i: int, f: Workload) -> float:
        key = (i, f.fingerprint())
        if key not in e_cache:
            e_cache[key] = 0.0 if isinstance(f, Total) else float(np.sum((_dense(f) @ pinvs[i]) ** 2))
        return e_cache[key]

    def t(i: int, f: Workload) -> float:
        key = (i, f.fingerprint())
        if key not in t_cache:
            n = f.domain_size
            t_cache[key] = float(np.sum(f.answer(np.full(n, 1.0 / n)) ** 2))
        return t_cache[key]

    out: dict[Subset, float] = {}
    for T in subsets:
        total = 0.0
        for p in parts:
            term = 1.0
            for i, f in enumerate(p):
                term *= e(i, f) if i in T else t(i, f)
                if term == 0.0:
                    break
            total += term
        out[T] = total
    return out


def _separable_objective(
    parts: list[tuple[Workload, ...]], bases: Sequence[FloatArray], subsets: list[Subset]
) -> tuple[float, dict[Subset, float]]:
    """``(Σ_T sqrt(E_T κ_T))²`` and the optimal weights ``u_T ∝ sqrt(E_T/κ_T)`` (unit sensitivity)."""
    E = _error_terms(parts, bases, subsets)
    kap = [float(np.max(np.sum(C**2, axis=0))) for C in bases]
    roots = {T: math.sqrt(ET * math.prod(kap[i] for i in T)) for T, ET in E.items() if ET > 0}
    total = sum(roots.values())
    if total <= 0:
        raise InvalidParameterError("workload: every query is zero; there is nothing to answer")
    u = {T: math.sqrt(E[T] / math.prod(kap[i] for i in T)) / total for T in roots}
    return total * total, u


def _optimize_separable(
    dims: tuple[int, ...], parts: list[tuple[Workload, ...]], rounds: int
) -> tuple[ProductResidualPlan, int]:
    from dpopt.linear_queries.workloads import MatrixWorkload

    subsets = _candidate_subsets(parts)
    bases: list[FloatArray] = [_residual_basis(n) for n in dims]
    best, u = _separable_objective(parts, bases, subsets)
    done = 0
    for _ in range(check_int(rounds, "rounds", minimum=0)):
        done += 1
        improved = False
        for i in _special_attributes(parts, dims):
            Vi = _attribute_gram(i, parts, bases, u)
            if not np.any(Vi):
                continue
            lam, Q = np.linalg.eigh(Vi)
            keep = lam > lam.max() * 1e-12
            root = np.sqrt(lam[keep])[:, None] * Q[:, keep].T
            sub = optimize_dense(  # optimize_strategy's defaults on a plain matrix workload
                MatrixWorkload(root, allow_zero_columns=True),
                method="dual",
                tol=1e-6,
                params=COAParams(),
                anderson_memory=5,
                warn=False,
            )
            trial = [*bases]
            trial[i] = np.asarray(sub.strategy) @ _residual_basis(dims[i])  # rows onto 1^⊥
            obj, u_t = _separable_objective(parts, trial, subsets)
            if obj < best * (1 - 1e-9):
                bases, best, u, improved = trial, obj, u_t, True
        if not improved:
            break
    terms = []
    for T in subsets:
        if T in u:
            rest = math.prod(n for i, n in enumerate(dims) if i not in T)
            terms.append((T, np.array([[math.sqrt(u[T] * rest)]])))
    return ProductResidualPlan(dims, (), tuple(bases), tuple(terms)), done


def _attribute_gram(
    i: int, parts: list[tuple[Workload, ...]], bases: Sequence[FloatArray], u: Mapping[Subset, float]
) -> FloatArray:
    """``Σ_k a_k P1 V_ki P1``: attribute i's share of the error, weighted as in the current solution."""
    n = bases[i].shape[1]
    pinvs = [np.linalg.pinv(C) for C in bases]
    P1 = _residual_basis(n)
    V = np.zeros((n, n))
    for p in parts:
        f = p[i]
        if isinstance(f, Total):
            continue
        a = 0.0
        for T, uT in u.items():
            if i not in T:
                continue
            w = 1.0 / uT
            for j, g in enumerate(p):
                if j == i:
                    continue
                if j in T:
                    w *= 0.0 if isinstance(g, Total) else float(np.sum((_dense(g) @ pinvs[j]) ** 2))
                else:
                    w *= float(np.sum(g.answer(np.full(g.domain_size, 1.0 / g.domain_size)) ** 2))
                if w == 0.0:
                    break
            a += w
        if a > 0:
            V += a * (P1 @ f.gram() @ P1)
    return (V + V.T) / 2


# ============================================================================== lower bound
def _split(V: FloatArray) -> tuple[float, FloatArray, FloatArray, FloatArray]:
    """``V`` in the basis (e0 = 1/√n, orthonormal basis Q of 1^⊥): ``a``, ``b``, ``C`` and Q."""
    n = V.shape[0]
    H = np.linalg.qr(np.column_stack([np.ones(n), np.eye(n)[:, : n - 1]]))[0]
    e0 = H[:, 0] * np.sign(H[0, 0])
    Q = H[:, 1:]
    return float(e0 @ V @ e0), Q.T @ V @ e0, Q.T @ V @ Q, Q


def _commuting_lower(V: FloatArray, s: float) -> tuple[float, FloatArray] | None:
    """``(α, eigenvalues of C - bbᵀ/s)`` with ``V' = α e0e0ᵀ ⊕ (C - bbᵀ/s) ⪯ V``, or None if ``V' ⋡ 0``."""
    a, b, C, _ = _split(V)
    alpha = a - s
    mu = np.linalg.eigvalsh(C - np.outer(b, b) / s)
    if alpha < 0 or mu.min() < -1e-9 * max(1.0, float(np.abs(mu).max())):
        return None
    return alpha, np.clip(mu, 0.0, None)


def union_lower_bound(workload: Workload, *, grid: int = 24) -> float:
    """Reported lower bound ``tr(V'^½)²/N <= tr(V^½)²/N`` on the error of every strategy (module docstring).

    Exact (equal to the SVD bound) when every factor is an identity or a total; NaN when an
    attribute carries two different non-trivial query classes (no common eigenbasis).
    """
    dims, parts = _parts(workload)
    d = len(dims)
    N = math.prod(dims)
    # per attribute: distinct factor grams; classify identity / total / one "special"
    special: dict[int, FloatArray] = {}
    for i in range(d):
        grams = {}
        for p in parts:
            f = p[i]
            if not isinstance(f, Identity | Total):
                grams[f.fingerprint()] = f.gram()
        if len(grams) > 1:
            return math.nan
        if grams:
            special[i] = next(iter(grams.values()))

    def spectra(choice: Mapping[int, float]) -> list[dict[str, tuple[float, FloatArray]]]:
        out = []
        for i, n in enumerate(dims):
            entry: dict[str, tuple[float, FloatArray]] = {
                "identity": (1.0, np.ones(n - 1)),
                "total": (float(n), np.zeros(n - 1)),
            }
            if i in special:
                got = _commuting_lower(special[i], choice[i])
                if got is None:
                    return []
                entry["special"] = got
            out.append(entry)
        return out

    def kind(f: Workload) -> str:
        return "identity" if isinstance(f, Identity) else "total" if isinstance(f, Total) else "special"

    kinds = [tuple(kind(f) for f in p) for p in parts]
    subsets = _candidate_subsets(parts)

    def bound(choice: Mapping[int, float]) -> float:
        sp = spectra(choice)
        if not sp:
            return -math.inf
        tr = 0.0
        for T in subsets:
            lam: FloatArray = np.zeros(tuple(dims[i] - 1 for i in T))
            for kd in kinds:
                coef = math.prod(sp[i][kd[i]][0] for i in range(d) if i not in T)
                if coef == 0.0:
                    continue
                term: FloatArray = np.array(coef)
                for i in T:
                    term = np.multiply.outer(term, sp[i][kd[i]][1])
                lam = lam + term
            tr += float(np.sum(np.sqrt(np.clip(lam, 0.0, None))))
        return tr * tr / N

    # s ranges over [bᵀC⁺b, a]; search a log grid per special attribute (coordinate ascent)
    ranges: dict[int, tuple[float, float]] = {}
    for i, V in special.items():
        a, b, C, _ = _split(V)
        lo = float(b @ np.linalg.lstsq(C, b, rcond=None)[0]) if np.any(b) else 0.0
        ranges[i] = (max(lo, 1e-12 * a) * (1 + 1e-9), a)
    choice = {i: math.sqrt(lo * hi) if lo > 0 else hi / 2 for i, (lo, hi) in ranges.items()}
    best = bound(choice)
    for _ in range(2):
        for i, (lo, hi) in ranges.items():
            for s in np.geomspace(lo, hi, grid):
                trial = {**choice, i: float(s)}
                val = bound(trial)
                if val > best:
                    best, choice = val, trial
    return best if best > -math.inf else math.nan
