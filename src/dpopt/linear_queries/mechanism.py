"""The Gaussian matrix mechanism: answer a workload privately through a strategy.

``answer(workload, histogram, strategy=..., budget=..., rng=...)`` measures ``z = A x + b`` with
i.i.d. Gaussian noise calibrated to the l2 sensitivity of the strategy ``A``, reconstructs the
histogram by least squares ``x̂ = A⁺ z`` and returns the answers ``W x̂``.  Everything after the
noisy measurement is post-processing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np
import scipy.linalg as sla
from numpy.typing import ArrayLike, NDArray

from dpopt._validation import as_float_array, check_array
from dpopt.accounting import Accountant, Budget, PrivacySpent, check_neighbouring, make_accountant
from dpopt.accounting.events import Neighbouring
from dpopt.exceptions import Hint, InvalidParameterError, Setting
from dpopt.linear_queries.records import Records, Schema
from dpopt.linear_queries.strategy import (
    StrategyResult,
    _blas_threads,
    evaluate_strategy,
    optimize_strategy,
    residual_projector,
)
from dpopt.linear_queries.workloads import (
    AllRange,
    Identity,
    Kronecker,
    Prefix,
    Ranges,
    Total,
    Union,
    Workload,
    kron_apply,
)
from dpopt.mechanisms import GaussianMechanism
from dpopt.randomness import RNGLike

__all__ = ["Answers", "answer", "expected_error", "query_variances", "strategy_sensitivity"]

FloatArray = NDArray[np.float64]
_T = TypeVar("_T")
Calibration = Literal["analytic", "paper", "classic"]


@dataclass(frozen=True)
class Answers:
    """Private answers to a workload.

    Attributes
    ----------
    values : ndarray of shape (m,)
        The private answers ``W x̂``.
    histogram_estimate : ndarray of shape (n,)
        The least-squares histogram ``x̂ = A⁺ z`` (private; post-processing of the release).
        Empty (shape ``(0,)``) for marginal-by-marginal releases on domains above 2²² cells.
    expected_error : float
        Expected total squared error ``E‖W x̂ - W x‖² = σ² tr(W A⁺A⁺ᵀWᵀ)`` (data independent).
    expected_error_per_query : float
        ``expected_error / m``.
    sigma : float
        Standard deviation of the Gaussian noise added to each strategy query.
    sensitivity : float
        l2 sensitivity of ``x -> A x`` under ``neighbouring`` (computed from the numeric A).
    privacy : PrivacySpent
        What the accountant recorded (ε, δ, neighbouring relation, accountant).
    calibration : str
        ``"analytic"`` (exact, Balle-Wang) or ``"paper"`` (COA's ``sqrt(2 ln(2/δ))/ε``).
    strategy_method : str
        How the strategy was obtained (``"dual"``, ``"paper"``, a baseline name, ...).
    bias : float
        Relative squared norm of the workload outside the strategy's row space (0 = unbiased).
    postprocessing : str
        ``"least_squares"`` or ``"nonnegative"`` (``answer(..., nonnegative=True)``; the
        histogram estimate is then the projected one, or empty for marginal-table projections).

    Privacy
    -------
    Only ``values`` and ``histogram_estimate`` depend on the data; they are post-processing of one
    Gaussian release and carry the guarantee in ``privacy``.  ``expected_error`` depends only on
    the public workload, strategy and budget.
    """

    values: FloatArray
    histogram_estimate: FloatArray
    expected_error: float
    expected_error_per_query: float
    sigma: float
    sensitivity: float
    privacy: PrivacySpent
    calibration: str
    strategy_method: str
    bias: float
    postprocessing: str = "least_squares"


def strategy_sensitivity(A: ArrayLike, neighbouring: Neighbouring = "add_remove") -> float:
    """l2 sensitivity of ``x -> A x`` for unit-count histograms.

    ``"add_remove"``: one count changes by ±1, Δ = max column norm ``‖A‖_{2,inf}``.
    ``"replace_one"``: one record moves between cells i and j, Δ = max_{i≠j} ‖A_i - A_j‖₂
    (at most twice the add/remove value).
    """
    Aa = as_float_array(A, "A", ndim=2)
    rel = check_neighbouring(neighbouring)
    norms2 = np.sum(Aa**2, axis=0)
    if rel == "add_remove" or Aa.shape[1] == 1:
        return float(math.sqrt(norms2.max())) if rel == "add_remove" else 0.0
    gram = Aa.T @ Aa
    dist2 = norms2[:, None] + norms2[None, :] - 2 * gram
    np.fill_diagonal(dist2, 0.0)
    return float(math.sqrt(max(float(dist2.max()), 0.0)))


def _check_histogram(histogram: ArrayLike, n: int, counts: str) -> FloatArray:
    x = check_array(histogram, "histogram", ndim=1)
    if x.shape != (n,):
        raise InvalidParameterError(
            f"expected length {n} (the workload's domain size), got length {x.shape[0]}", param="histogram"
        )
    if counts == "integer":
        if np.any(x < 0) or np.any(x != np.round(x)):
            raise InvalidParameterError(
                "expected non-negative integer counts (one unit per record)",
                param="histogram",
                hint=Hint(
                    "pass {0} for real-valued data vectors, whose sensitivity you then vouch for",
                    Setting("counts", "real"),
                ),
            )
    elif counts != "real":
        raise InvalidParameterError("counts: must be 'integer' or 'real'")
    return np.asarray(x, dtype=np.float64)


def _digest(A: FloatArray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(A).tobytes(), digest_size=16).digest()


_CACHE_SIZE = 4
_CACHE_LOCK = threading.Lock()
_RESOLVED: OrderedDict[tuple[Any, ...], StrategyResult] = OrderedDict()
_SENSITIVITY: OrderedDict[tuple[Any, ...], float] = OrderedDict()
_RECON_CACHE: OrderedDict[tuple[Any, ...], tuple[FloatArray, FloatArray, FloatArray, float]] = OrderedDict()
_PLANS: OrderedDict[tuple[Any, ...], tuple[StrategyResult, Any, float, float]] = OrderedDict()


def _cached(cache: OrderedDict[tuple[Any, ...], _T], key: tuple[Any, ...], compute: Callable[[], _T]) -> _T:
    """LRU memo of data-independent quantities (strategies, reconstructions, sensitivities)."""
    with _CACHE_LOCK:
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
    value = compute()
    with _CACHE_LOCK:
        cache[key] = value
        while len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)
    return value


def clear_caches() -> None:
    """Forget every cached strategy, reconstruction and sensitivity (they are data independent)."""
    with _CACHE_LOCK:
        for cache in (_RESOLVED, _SENSITIVITY, _RECON_CACHE, _PLANS):
            cache.clear()


def _resolve_strategy(
    workload: Workload, strategy: StrategyResult | ArrayLike | str | None
) -> StrategyResult:
    """The :class:`StrategyResult` to release with; named and array strategies are evaluated once.

    Named baselines and raw arrays are wrapped by :func:`evaluate_strategy` (one SVD); the result
    is memoized per (workload fingerprint, name or digest of the array), so repeated releases
    with the same strategy do not redo it.  ``"identity"`` is never factorized at all.
    """
    if strategy is None or (isinstance(strategy, str) and strategy == "optimal"):
        return _cached(_RESOLVED, ("optimal", workload.fingerprint()), lambda: optimize_strategy(workload))
    if isinstance(strategy, StrategyResult):
        if strategy.workload_fingerprint and strategy.workload_fingerprint != workload.fingerprint():
            A = strategy.strategy
            if A.shape[1] != workload.domain_size:
                raise InvalidParameterError(
                    f"strategy: has {A.shape[1]} columns but the workload's domain size is {workload.domain_size}"
                )
            rkey = ("result", workload.fingerprint(), A.shape, _digest(A), strategy.method)
            return _cached(
                _RESOLVED, rkey, lambda: evaluate_strategy(workload, A, name=strategy.method, certify=False)
            )
        return strategy
    if isinstance(strategy, str):
        from dpopt.linear_queries import baselines

        if strategy == "identity":
            return _cached(
                _RESOLVED, ("identity", workload.fingerprint()), lambda: baselines.identity_result(workload)
            )
        return _cached(
            _RESOLVED,
            ("named", strategy, workload.fingerprint()),
            lambda: baselines.baseline(strategy, workload),
        )
    A = as_float_array(strategy, "strategy", ndim=2)
    key = ("array", workload.fingerprint(), A.shape, _digest(A))
    return _cached(_RESOLVED, key, lambda: evaluate_strategy(workload, A, certify=False))


def answer(
    workload: Workload,
    histogram: ArrayLike,
    *,
    budget: Budget,
    rng: RNGLike,
    strategy: StrategyResult | ArrayLike | str | None = None,
    neighbouring: Neighbouring = "add_remove",
    calibration: Calibration = "analytic",
    accountant: Accountant | None = None,
    counts: Literal["integer", "real"] = "integer",
    rcond: float = 1e-10,
    schema: Schema | None = None,
    clip: bool = False,
    nonnegative: bool = False,
) -> Answers:
    """Answer ``workload`` on ``histogram`` with the Gaussian matrix mechanism.

    Parameters
    ----------
    workload : Workload
        The public queries.
    histogram : array of shape (n,), Records, or a table of records with ``schema``
        The private data: one count per cell (non-negative integers unless ``counts="real"``);
        or records (:class:`~dpopt.linear_queries.records.Records`, or a CSV path, numpy
        structured array, pandas DataFrame or mapping of columns together with ``schema``).
        With records and a union-of-products workload (marginals, :func:`~dpopt.linear_queries.
        union.product_marginals`) only the marginals the strategy measures are counted: the full
        domain is never formed, whatever its size.
    budget : Budget
        Target (ε, δ) with δ > 0.
    rng : int, Generator, "secure" or None
        Randomness of the noise (keyword only; no default seed).
    strategy : StrategyResult, array of shape (p, n), str or None
        ``None`` / ``"optimal"`` optimizes one (:func:`optimize_strategy`, data independent); a
        string names a baseline (``"identity"``, ``"gm"``, ``"hierarchical"``, ``"wavelet"``, ...).
    neighbouring : {"add_remove", "replace_one"}, default "add_remove"
        Neighbouring relation; replace-one uses the largest column *difference* norm as sensitivity.
    calibration : {"analytic", "paper", "classic"}, default "analytic"
        ``"analytic"``: exact smallest σ (Balle-Wang).  ``"paper"``: COA's
        ``σ = Δ sqrt(2 ln(2/δ))/ε`` (valid for ε < 1; above, a warning states the true ε).
    accountant : Accountant, optional
        Ledger to compose into (before the noise is drawn); refused if over its budget.  By default
        a fresh PLD accountant (``"paper"`` calibration: the basic paper-rule accountant) limited
        to ``budget``.  Its neighbouring relation must equal ``neighbouring``.
    counts : {"integer", "real"}, default "integer"
        Validation of the histogram.
    rcond : float
        Relative cut-off for small singular values of A in the least-squares reconstruction.
    schema : Schema, optional
        Declared attribute domains of a table of records passed as ``histogram``; its shape must
        match the workload's domain (C order).  Records outside the domain are refused.
    clip : bool, default False
        With ``schema``: move out-of-range values of integer-range attributes to the nearest end
        (a per-record map: the sensitivity is unchanged).
    nonnegative : bool, default False
        Post-process (no privacy cost) into non-negative, mutually consistent answers: for unions
        of products the estimated marginal tables are projected onto the non-negative tables that
        agree on every shared sub-marginal
        (:func:`~dpopt.linear_queries.consistency.nonnegative_tables`); otherwise the histogram
        estimate is projected onto ``x >= 0`` in the strategy's metric (domains up to 4096 cells).
        ``expected_error`` stays the least-squares figure.

    Returns
    -------
    Answers

    Privacy
    -------
    (ε, δ)-DP under ``neighbouring`` for unit-count histograms (each record adds 1 to one cell):
    one Gaussian release of ``A x`` with σ calibrated to the l2 sensitivity computed from the
    numeric strategy A (spec C.2).  Records count one unit in one cell each, so adding or
    removing a record moves the count vector by a unit vector: the same relation.  The strategy
    and the workload are public and data independent.  Calibration: ``"analytic"`` (default, tight) or ``"paper"`` (the seed's formula,
    for reproductions); the accountant's ``privacy`` reports the verified figure.
    """
    if not isinstance(workload, Workload):
        raise InvalidParameterError("workload: expected a dpopt.linear_queries Workload")
    if not isinstance(budget, Budget):
        raise InvalidParameterError("budget: expected a dpopt.accounting.Budget")
    if budget.delta <= 0:
        raise InvalidParameterError("budget: the Gaussian matrix mechanism needs δ > 0")
    rel = check_neighbouring(neighbouring)
    method = {"analytic": "analytic", "paper": "coa", "classic": "classic"}.get(calibration)
    if method is None:
        raise InvalidParameterError("calibration: must be 'analytic', 'paper' or 'classic'")
    records = _as_records(histogram, schema, workload, clip)
    if records is not None:
        result = _resolve_strategy(workload, strategy)
        if result.residual_terms:  # measured marginal by marginal: the full domain is never formed
            return _answer_plan(
                workload,
                records.marginal,
                result,
                budget,
                rng,
                rel,
                method,
                accountant,
                calibration,
                nonnegative,
            )
        x = records.histogram()  # other strategies measure every cell
    else:
        x = _check_histogram(histogram, workload.domain_size, counts)
        result = _resolve_strategy(workload, strategy)
    if result.attribute_bases or (nonnegative and result.residual_terms):
        shape = result.domain_shape

        def marginal(U: tuple[int, ...]) -> FloatArray:
            others = tuple(i for i in range(len(shape)) if i not in U)
            return np.asarray(x.reshape(shape).sum(axis=others), dtype=np.float64)

        return _answer_plan(
            workload, marginal, result, budget, rng, rel, method, accountant, calibration, nonnegative
        )
    gram: Callable[[], FloatArray] | None = None
    if result.params.get("implicit") == "identity":
        out = _answer_identity(workload, x, result, budget, rng, rel, method, accountant, calibration)
        gram = None  # G = I: the projection is a clip
    elif result.residual_terms:
        return _answer_residual(workload, x, result, budget, rng, rel, method, accountant, calibration)
    elif result.factors:
        if nonnegative:
            _check_dense_projection(workload.domain_size)
        out = _answer_product(workload, x, result, budget, rng, rel, method, accountant, calibration, rcond)

        def gram() -> FloatArray:
            G: FloatArray = np.ones((1, 1))
            for F in result.factors:
                G = np.asarray(np.kron(G, F.T @ F), dtype=np.float64)
            return G

    else:
        A = result.strategy
        sens = _cached(_SENSITIVITY, (A.shape, _digest(A), rel), lambda: strategy_sensitivity(A, rel))
        if not sens > 0:
            raise InvalidParameterError(
                "strategy: has zero sensitivity (all columns equal); it measures nothing"
            )
        if nonnegative:
            _check_dense_projection(workload.domain_size)
        accountant = _default_accountant(accountant, calibration, budget, rel)
        mech = GaussianMechanism.calibrate(budget, sens, method=method)  # type: ignore[arg-type]
        with _blas_threads(max(A.shape)):
            out = _release(workload, A, x, mech, rng, accountant, calibration, result, sens, rcond)

        def gram() -> FloatArray:
            _, sk, Pk, _ = _reconstruction(workload, A, rcond)
            return np.asarray((Pk.T * sk**2) @ Pk)

    if not nonnegative:
        return out
    # post-processing (no privacy cost): project x̂ onto x >= 0 in the strategy's metric
    from dpopt.linear_queries.consistency import nonnegative_histogram

    x_nn = (
        np.maximum(out.histogram_estimate, 0.0)
        if gram is None
        else nonnegative_histogram(out.histogram_estimate, gram())
    )
    return dataclasses.replace(
        out, values=workload.answer(x_nn), histogram_estimate=x_nn, postprocessing="nonnegative"
    )


_DENSE_PROJECTION_LIMIT = 4096


def _check_dense_projection(n: int) -> None:
    if n > _DENSE_PROJECTION_LIMIT:
        raise InvalidParameterError(
            f"nonnegative: the projection of this strategy's estimate needs a dense {n}x{n} matrix (limit "
            f"{_DENSE_PROJECTION_LIMIT}); use a structured workload (marginals, union.product_marginals), whose "
            "tables are projected without forming the domain"
        )


def _default_accountant(
    accountant: Accountant | None, calibration: str, budget: Budget, rel: Neighbouring
) -> Accountant:
    if accountant is None:
        kind = "basic" if calibration != "analytic" else "pld"
        return make_accountant(kind, budget=budget, neighbouring=rel)
    if not isinstance(accountant, Accountant):
        raise InvalidParameterError("accountant: expected a dpopt.accounting.Accountant or None")
    if accountant.neighbouring != rel:
        raise InvalidParameterError(
            f"accountant: its neighbouring relation is {accountant.neighbouring!r} but the sensitivity "
            f"was computed for {rel!r}; pass the same relation to both"
        )
    return accountant


def _as_records(histogram: Any, schema: Schema | None, workload: Workload, clip: bool) -> Records | None:
    if isinstance(histogram, Records):
        records = histogram
    elif schema is not None:
        if not isinstance(schema, Schema):
            raise InvalidParameterError("schema: expected a dpopt.linear_queries.records.Schema")
        records = schema.records(histogram, clip=clip)
    else:
        return None
    if records.schema.domain_size != workload.domain_size:
        raise InvalidParameterError(
            f"records: the schema's domain has {records.schema.domain_size} cells (shape {records.schema.shape}) "
            f"but the workload's has {workload.domain_size}"
        )
    return records


_DENSE_ESTIMATE_LIMIT = 1 << 22


def _answer_plan(
    workload: Workload,
    marginal: Callable[[tuple[int, ...]], FloatArray],
    result: StrategyResult,
    budget: Budget,
    rng: RNGLike,
    rel: Neighbouring,
    method: str,
    accountant: Accountant | None,
    calibration: str,
    nonnegative: bool = False,
) -> Answers:
    """Residual-basis strategies of unions of products: measure marginals, answer part by part."""
    from dpopt.linear_queries.union import _parts, plan_from_result

    dims, parts = _parts(workload)

    def prepare() -> tuple[StrategyResult, Any, float, float]:
        plan = plan_from_result(result)
        unit = sum(float(np.sum(plan.part_variances(p))) for p in parts)
        return result, plan, plan.unit_sensitivity(), unit

    # keyed by the result's identity (kept alive by the entry, so the id is not reused)
    _, plan, add_remove, unit = _cached(_PLANS, (id(result), workload.fingerprint()), prepare)
    if tuple(dims) != tuple(plan.dims):
        raise InvalidParameterError(
            f"strategy: made for attribute sizes {plan.dims}, the workload has {tuple(dims)}"
        )
    sens = add_remove if rel == "add_remove" else 2.0 * add_remove  # replace-one: the 2x bound
    acct = _default_accountant(accountant, calibration, budget, rel)
    mech = GaussianMechanism.calibrate(budget, sens, method=method)  # type: ignore[arg-type]
    measured = plan.measure(marginal)
    z = np.atleast_1d(mech.release(measured, rng=rng, accountant=acct, label="matrix-mechanism"))
    residuals = plan.reconstruct(np.asarray(z, dtype=np.float64))
    expected = mech.sigma**2 * unit
    if nonnegative:  # post-processing: non-negative consistent tables on every part's attributes
        from dpopt.linear_queries.consistency import nonnegative_tables
        from dpopt.linear_queries.union import _dense
        from dpopt.linear_queries.workloads import Total as _Total

        supports = [tuple(i for i, f in enumerate(p) if not isinstance(f, _Total)) for p in parts]
        tables, _ = nonnegative_tables({S: plan.marginal_estimate(residuals, S) for S in set(supports)}, dims)
        values = np.concatenate(
            [
                kron_apply([_dense(p[i]) for i in S], tables[S].reshape(-1)) if S else tables[S].reshape(-1)
                for p, S in zip(parts, supports, strict=True)
            ]
        )
        return _answers(
            workload,
            np.zeros(0),
            expected,
            mech,
            sens,
            acct,
            calibration,
            result,
            values=values,
            postprocessing="nonnegative",
        )
    values = np.concatenate([plan.part_answers(residuals, p) for p in parts])
    if workload.domain_size <= _DENSE_ESTIMATE_LIMIT:
        x_hat = plan.part_answers(residuals, [Identity(n) for n in dims])
    else:
        x_hat = np.zeros(0)
    return _answers(workload, x_hat, expected, mech, sens, acct, calibration, result, values=values)


def _answer_identity(
    workload: Workload,
    x: FloatArray,
    result: StrategyResult,
    budget: Budget,
    rng: RNGLike,
    rel: Neighbouring,
    method: str,
    accountant: Accountant | None,
    calibration: str,
) -> Answers:
    """``A = I``: noise on every cell, ``x̂ = z`` (no factorization, any domain size)."""
    n = workload.domain_size
    sens = 1.0 if rel == "add_remove" else (math.sqrt(2.0) if n > 1 else 0.0)
    if not sens > 0:
        raise InvalidParameterError("strategy: has zero sensitivity (all columns equal); it measures nothing")
    acct = _default_accountant(accountant, calibration, budget, rel)
    mech = GaussianMechanism.calibrate(budget, sens, method=method)  # type: ignore[arg-type]
    z = np.atleast_1d(mech.release(x, rng=rng, accountant=acct, label="matrix-mechanism"))
    expected = mech.sigma**2 * result.objective
    return _answers(
        workload, np.asarray(z, dtype=np.float64), expected, mech, sens, acct, calibration, result
    )


def _answer_residual(
    workload: Workload,
    x: FloatArray,
    result: StrategyResult,
    budget: Budget,
    rng: RNGLike,
    rel: Neighbouring,
    method: str,
    accountant: Accountant | None,
    calibration: str,
) -> Answers:
    """Implicit residual-basis strategy ``A = Σ_T sqrt(x_T) Q_T`` (marginal workloads)."""
    dims = result.domain_shape
    if int(np.prod(dims)) != workload.domain_size:
        raise InvalidParameterError("strategy: its domain shape does not match the workload's domain")
    # diag(AᵀA) = Σ_T x_T d_T / N = 1 by construction (recomputed here from the terms)
    N = workload.domain_size
    diag = sum(xT * float(np.prod([dims[i] - 1 for i in T])) for T, xT in result.residual_terms) / N
    add_remove = math.sqrt(diag)
    sens = add_remove if rel == "add_remove" else 2.0 * add_remove  # replace-one: the 2x bound
    acct = _default_accountant(accountant, calibration, budget, rel)
    mech = GaussianMechanism.calibrate(budget, sens, method=method)  # type: ignore[arg-type]
    projectors = [(residual_projector(dims, T), xT) for T, xT in result.residual_terms]
    Ax = sum(math.sqrt(xT) * kron_apply(P, x) for P, xT in projectors)
    z = np.atleast_1d(mech.release(np.asarray(Ax), rng=rng, accountant=acct, label="matrix-mechanism"))
    x_hat = np.asarray(sum(kron_apply(P, z) / math.sqrt(xT) for P, xT in projectors))
    expected = mech.sigma**2 * result.objective / add_remove**2
    return _answers(workload, x_hat, expected, mech, sens, acct, calibration, result)


def _answer_product(
    workload: Workload,
    x: FloatArray,
    result: StrategyResult,
    budget: Budget,
    rng: RNGLike,
    rel: Neighbouring,
    method: str,
    accountant: Accountant | None,
    calibration: str,
    rcond: float,
) -> Answers:
    """Implicit product strategy ``A = ⊗A_i``: measure, reconstruct and answer factor by factor."""
    factors = result.factors
    if int(np.prod([A.shape[1] for A in factors])) != workload.domain_size:
        raise InvalidParameterError("strategy: its factors do not match the workload's domain")
    add_remove = float(np.prod([np.sqrt(np.max(np.sum(A**2, axis=0))) for A in factors]))
    # replace-one: ‖A e_i - A e_j‖ <= 2 max_k ‖A e_k‖ (the bound; exact value needs all pairs)
    sens = add_remove if rel == "add_remove" else 2.0 * add_remove
    acct = _default_accountant(accountant, calibration, budget, rel)
    mech = GaussianMechanism.calibrate(budget, sens, method=method)  # type: ignore[arg-type]
    z = np.atleast_1d(
        mech.release(kron_apply(factors, x), rng=rng, accountant=acct, label="matrix-mechanism")
    )
    x_hat = kron_apply([np.linalg.pinv(A, rcond=rcond) for A in factors], z)
    expected = mech.sigma**2 * result.objective / add_remove**2
    return _answers(workload, x_hat, expected, mech, sens, acct, calibration, result)


def _release(
    workload: Workload,
    A: FloatArray,
    x: FloatArray,
    mech: GaussianMechanism,
    rng: RNGLike,
    accountant: Accountant,
    calibration: str,
    result: StrategyResult,
    sens: float,
    rcond: float,
) -> Answers:
    z = np.atleast_1d(mech.release(A @ x, rng=rng, accountant=accountant, label="matrix-mechanism"))
    # post-processing: least squares through the (cached, data-independent) SVD of A
    Uk, sk, Pk, unit_error = _reconstruction(workload, A, rcond)
    x_hat = Pk.T @ ((Uk.T @ z) / sk)
    expected = mech.sigma**2 * unit_error
    return _answers(workload, x_hat, expected, mech, sens, accountant, calibration, result)


def _reconstruction(
    workload: Workload, A: FloatArray, rcond: float
) -> tuple[FloatArray, FloatArray, FloatArray, float]:
    """Truncated SVD factors of ``A`` and the unit-noise error ``tr(W A⁺ A⁺ᵀ Wᵀ)``.

    They depend only on the public strategy and workload, so repeated releases with the same
    strategy (experiments, several budgets) reuse them; the key is a digest of ``A``'s bytes.
    """
    key = (A.shape, _digest(A), workload.fingerprint(), rcond)

    def compute() -> tuple[FloatArray, FloatArray, FloatArray, float]:
        U, s, Pt = sla.svd(A, full_matrices=False, lapack_driver="gesdd")
        keep = s > rcond * s[0]
        Pk = Pt[keep]
        proj = np.sum((Pk @ workload.gram()) * Pk, axis=1)  # diag(P V Pᵀ) through BLAS
        return (
            np.ascontiguousarray(U[:, keep]),
            s[keep],
            np.ascontiguousarray(Pk),
            float(np.sum(proj / s[keep] ** 2)),
        )

    return _cached(_RECON_CACHE, key, compute)


def _answers(
    workload: Workload,
    x_hat: FloatArray,
    expected: float,
    mech: GaussianMechanism,
    sens: float,
    accountant: Accountant,
    calibration: str,
    result: StrategyResult,
    *,
    values: FloatArray | None = None,
    postprocessing: str = "least_squares",
) -> Answers:
    """The common result of every release path: answers are post-processing of ``x_hat``
    (``values`` defaults to ``W x_hat``; marginal-by-marginal releases pass their own)."""
    return Answers(
        values=workload.answer(x_hat) if values is None else values,
        histogram_estimate=x_hat,
        expected_error=expected,
        expected_error_per_query=expected / workload.n_queries,
        sigma=mech.sigma,
        sensitivity=sens,
        privacy=accountant.spent(),
        calibration=calibration,
        strategy_method=result.method,
        bias=result.bias,
        postprocessing=postprocessing,
    )


def expected_error(
    result: StrategyResult,
    budget: Budget,
    *,
    calibration: Calibration = "analytic",
    per_query: bool = False,
    n_queries: int | None = None,
) -> float:
    """Expected total squared error ``σ² · objective`` of answering with ``result`` at ``budget``."""
    from dpopt.accounting import gaussian_sigma

    method: Any = {"analytic": "analytic", "paper": "coa", "classic": "classic"}.get(calibration)
    if method is None:
        raise InvalidParameterError("calibration: must be 'analytic', 'paper' or 'classic'")
    # objective = ‖A‖²_{2,inf}·tr(W A⁺A⁺ᵀWᵀ): the error of a release at add/remove sensitivity 1
    sigma = gaussian_sigma(budget.epsilon, budget.delta, 1.0, method=method)
    err = sigma**2 * result.objective
    if per_query:
        if n_queries is None:
            raise InvalidParameterError("n_queries: required with per_query=True")
        err /= n_queries
    return float(err)


def query_variances(
    workload: Workload,
    result: StrategyResult,
    budget: Budget,
    *,
    calibration: Calibration = "analytic",
    rcond: float = 1e-10,
) -> FloatArray:
    """Expected squared error of every query, shape (m,): ``σ² ‖(W A⁺)_q‖²`` (sums to the total).

    Data independent (no privacy cost).  Computed column by column of ``A⁺`` through the
    workload's implicit ``answer``, so it never forms W.
    """
    from dpopt.accounting import gaussian_sigma

    method: Any = {"analytic": "analytic", "paper": "coa", "classic": "classic"}.get(calibration)
    if method is None:
        raise InvalidParameterError("calibration: must be 'analytic', 'paper' or 'classic'")
    if result.params.get("implicit") == "identity":  # W A⁺ = W: the squared row norms of W
        return np.asarray(
            gaussian_sigma(budget.epsilon, budget.delta, 1.0, method=method) ** 2 * row_norms_sq(workload)
        )
    if result.residual_terms:  # unions of products: part by part, never on the full domain
        from dpopt.linear_queries.union import _parts, plan_from_result

        plan = plan_from_result(result)
        _, parts = _parts(workload)
        unit = np.concatenate([plan.part_variances(p) for p in parts])
        sigma1 = gaussian_sigma(budget.epsilon, budget.delta, plan.unit_sensitivity(), method=method)
        return np.asarray(sigma1**2 * unit)
    out = np.zeros(workload.n_queries)
    if result.strategy.shape[0] == 0 and not result.factors:
        raise InvalidParameterError(
            "query_variances: the strategy is implicit and has no per-query error formula"
        )
    if result.factors:
        sens = float(np.prod([np.sqrt(np.max(np.sum(A**2, axis=0))) for A in result.factors]))
        pinvs = [np.linalg.pinv(A, rcond=rcond) for A in result.factors]
        if isinstance(workload, Kronecker) and [f.domain_size for f in workload.factors] == [
            P.shape[0] for P in pinvs
        ]:  # both products: the variances are the product of the per-factor ones
            out = np.ones(1)
            for f, P in zip(workload.factors, pinvs, strict=True):
                cols = np.column_stack([f.answer(P[:, k]) for k in range(P.shape[1])])
                out = np.kron(out, np.sum(cols**2, axis=1))
        else:
            pinv: FloatArray = np.ones((1, 1))
            for P in pinvs:
                pinv = np.asarray(np.kron(pinv, P), dtype=np.float64)
            for k in range(pinv.shape[1]):
                out += workload.answer(pinv[:, k]) ** 2
    else:
        A = result.strategy
        sens = _cached(_SENSITIVITY, (A.shape, _digest(A), "add_remove"), lambda: strategy_sensitivity(A))
        _, sk, Pk, _ = _reconstruction(workload, A, rcond)  # cached: A⁺ = Pkᵀ diag(1/sk) Ukᵀ
        pinv_t = Pk.T / sk[None, :]
        for k in range(pinv_t.shape[1]):  # W A⁺ = (W Pkᵀ diag(1/sk)) Ukᵀ; Uk has orthonormal columns
            out += workload.answer(pinv_t[:, k]) ** 2
    sigma = gaussian_sigma(budget.epsilon, budget.delta, sens, method=method)
    return np.asarray(sigma**2 * out)


def row_norms_sq(workload: Workload) -> FloatArray:
    """``‖w_q‖²`` for every query q of ``workload`` (shape (m,)), without forming W when structured."""
    if isinstance(workload, Kronecker):
        out: FloatArray = np.ones(1)
        for f in workload.factors:
            out = np.asarray(np.kron(out, row_norms_sq(f)), dtype=np.float64)
        return out
    if isinstance(workload, Union):
        return np.concatenate([row_norms_sq(p) for p in workload.parts])
    if isinstance(workload, Identity):
        return np.ones(workload.domain_size)
    if isinstance(workload, Total):
        return np.array([float(workload.domain_size)])
    if isinstance(workload, Prefix):
        return np.arange(1, workload.domain_size + 1, dtype=np.float64)
    if isinstance(workload, AllRange):
        a, b = np.triu_indices(workload.domain_size)
        return (b - a + 1).astype(np.float64)
    if isinstance(workload, Ranges):
        return (workload.hi - workload.lo + 1).astype(np.float64)
    m, n = workload.shape
    if m * n > _MAX_DENSE_ROWS:
        raise InvalidParameterError(
            f"workload: its {m}x{n} matrix is too large to form for per-query errors; use a structured workload"
        )
    return np.asarray(np.sum(workload.matrix() ** 2, axis=1), dtype=np.float64)


_MAX_DENSE_ROWS = 1 << 26
