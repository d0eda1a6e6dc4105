"""The result of a strategy optimization: :class:`StrategyResult` (save, load, certificate fields).

Shared by the optimizers of :mod:`dpopt.linear_queries.strategy` and
:mod:`dpopt.linear_queries.union`; import it from :mod:`dpopt.linear_queries.strategy` (or
:mod:`dpopt.linear_queries`), where it is documented.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt.exceptions import Hint, InvalidParameterError
from dpopt.linear_queries.workloads import Workload

__all__ = ["FloatArray", "IterateCallback", "StrategyResult", "empty_strategy"]

FloatArray = NDArray[np.float64]
# the inner solvers' per-iteration hook: (history record, current strategy) -> stop?
IterateCallback = Callable[[dict[str, Any], FloatArray], Any]


@dataclass(frozen=True)
class StrategyResult:
    """An optimized (or given) strategy with its certificate.

    Attributes
    ----------
    strategy : ndarray of shape (p, n)
        The strategy matrix ``A``; every column has l2 norm at most 1 (add/remove sensitivity 1).
    objective : float
        ``‖A‖²_{2,inf} · tr(W A⁺A⁺ᵀWᵀ)``: total expected squared error per unit noise variance.
    lower_bound : float
        Certified lower bound on the objective of *every* strategy (max of the dual and SVD bounds).
    dual_bound, svd_bound : float
        The Lagrange-dual bound ``tr(M(y))²/Σy`` at the best ``y`` found, and ``‖W‖_*²/n``.
        When cells with identical workload columns were merged (``params["structure"]``), both
        are computed on the k merged columns: ``svd_bound`` is then ``‖W_k‖_*²/k``, the dual
        bound at ``y_j = 1/c_j`` (``c_j`` cells per class), also a bound for the full problem.
    gap : float
        ``(objective - lower_bound) / lower_bound``: the strategy is certified within this factor.
    method : str
        ``"dual"``, ``"paper"``, ``"newton"`` or the name of a baseline / given strategy.
    status : str
        The shared statuses (:data:`dpopt.iteration.Status`): ``"converged"`` (gap <= tol, or for
        ``"paper"`` its relative-decrease rule: ``params["stopping_rule"]`` says which),
        ``"max_iter"``, ``"max_time"``, ``"failed"`` (a line search found no descent step),
        ``"stopped"`` (the callback asked) or ``"completed"`` (a given strategy, evaluated, not
        optimized).
    n_iter : int
        Outer iterations performed (also :attr:`nit`).
    cpu_seconds, wall_seconds : float
        Time spent optimizing (the workload's Gram matrix excluded).
    history : tuple of dict
        One record per iteration (objective, lower bound, gap and method-specific diagnostics).
    workload_fingerprint : str
        :meth:`Workload.fingerprint` of the workload it was computed for (for caching).
    bias : float
        ``‖W - W A⁺A‖_F² / ‖W‖_F²``: 0 when the workload lies in the strategy's row space (the
        answers are then unbiased and ``objective`` is exact).
    params : dict
        Solver settings.
    factors : tuple of ndarray
        For a product (Kronecker) workload: the per-attribute strategies, ``A = A_1 ⊗ ... ⊗ A_d``.
        ``strategy`` is then the dense product when n <= 4096 and an empty ``(0, n)`` array
        otherwise (the mechanism works with the factors).
    residual_terms, domain_shape : tuple
        For a :class:`~dpopt.linear_queries.workloads.Marginals` workload: ``X = AᵀA = Σ_T x_T Q_T``
        over residual subspaces ``Q_T = ⊗_{i∈T} P1 ⊗_{i∉T} P0`` of the domain ``domain_shape``,
        as ``(T, x_T)`` pairs; ``A = X^½`` is applied implicitly (``strategy`` is an empty
        ``(0, n)`` array; :func:`~dpopt.linear_queries.union.plan_from_result` gives the plan and
        its ``dense_matrix()`` on small domains).
    attribute_bases : tuple of ndarray
        For a union of products optimized by :func:`~dpopt.linear_queries.union.optimize_union`:
        the per-attribute bases ``C_i`` of the residual-basis strategy, whose measured subsets and
        weights are ``residual_terms``; ``term_matrices`` holds each term's matrix on the jointly
        measured attributes ``params["special"]``; ``strategy`` is then empty.
    """

    strategy: FloatArray
    objective: float
    lower_bound: float
    dual_bound: float
    svd_bound: float
    gap: float
    method: str
    status: str
    n_iter: int
    cpu_seconds: float
    wall_seconds: float
    history: tuple[dict[str, Any], ...] = ()
    workload_fingerprint: str = ""
    bias: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    factors: tuple[FloatArray, ...] = ()
    residual_terms: tuple[tuple[tuple[int, ...], float], ...] = ()
    domain_shape: tuple[int, ...] = ()
    attribute_bases: tuple[FloatArray, ...] = ()
    term_matrices: tuple[FloatArray, ...] = ()

    def __post_init__(self) -> None:
        # results are frozen: make the arrays read-only too (a strategy must not change after its
        # error and sensitivity were computed)
        for A in (self.strategy, *self.factors, *self.attribute_bases, *self.term_matrices):
            if isinstance(A, np.ndarray) and A.flags.writeable and A.flags.owndata:
                A.setflags(write=False)

    @property
    def shape(self) -> tuple[int, int]:
        """Shape ``(p, n)`` of the strategy matrix."""
        return (int(self.strategy.shape[0]), int(self.strategy.shape[1]))

    @property
    def converged(self) -> bool:
        """True when the optimizer met its tolerance."""
        return self.status == "converged"

    @property
    def nit(self) -> int:
        """Outer iterations performed (the shared name; same as :attr:`n_iter`)."""
        return self.n_iter

    @property
    def success(self) -> bool:
        """True unless the optimizer failed or was stopped before meeting its tolerance."""
        return self.status in ("converged", "completed")

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Save to ``path`` (``.npz``: the strategy plus JSON metadata).  Load with :meth:`load`."""
        p = Path(path)
        if p.suffix != ".npz":
            p = p.with_suffix(".npz")
        skip = ("strategy", "factors", "attribute_bases", "term_matrices")
        meta = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}
        meta["history"] = list(self.history)
        meta["n_factors"] = len(self.factors)
        meta["n_bases"] = len(self.attribute_bases)
        meta["n_terms"] = len(self.term_matrices)
        arrays: dict[str, Any] = {f"factor_{i}": A for i, A in enumerate(self.factors)}
        arrays.update({f"basis_{i}": C for i, C in enumerate(self.attribute_bases)})
        arrays.update({f"term_{i}": C for i, C in enumerate(self.term_matrices)})
        arrays["strategy"] = self.strategy
        arrays["meta"] = np.array(json.dumps(meta, default=float))
        np.savez_compressed(p, **arrays)
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, workload: Workload | None = None) -> StrategyResult:
        """Load a saved result; with ``workload`` check that it was computed for that workload."""
        with np.load(Path(path), allow_pickle=False) as data:
            strategy = np.array(data["strategy"], dtype=np.float64)
            meta = json.loads(str(data["meta"]))
            k = int(meta.pop("n_factors", 0))
            factors = tuple(np.array(data[f"factor_{i}"], dtype=np.float64) for i in range(k))
            nb = int(meta.pop("n_bases", 0))
            bases = tuple(np.array(data[f"basis_{i}"], dtype=np.float64) for i in range(nb))
            nt = int(meta.pop("n_terms", 0))
            terms = tuple(np.array(data[f"term_{i}"], dtype=np.float64) for i in range(nt))
        meta["history"] = tuple(meta.get("history", ()))
        meta["factors"] = factors
        meta["attribute_bases"] = bases
        meta["term_matrices"] = terms
        meta["residual_terms"] = tuple((tuple(T), float(x)) for T, x in meta.get("residual_terms", ()))
        meta["domain_shape"] = tuple(meta.get("domain_shape", ()))
        result = cls(strategy=strategy, **meta)
        if workload is not None and result.workload_fingerprint != workload.fingerprint():
            raise InvalidParameterError(
                "the saved strategy was optimized for a different workload (fingerprint mismatch)",
                hint=Hint("re-run optimize_strategy for this workload"),
            )
        return result


def empty_strategy(N: int) -> FloatArray:
    """The placeholder ``(0, N)`` strategy of implicit results (``(0, 0)`` past numpy's index range)."""
    return np.zeros((0, N)) if N < 2**62 else np.zeros((0, 0))
