"""The optimizer of one dense (or tridiagonal-structured) strategy problem, behind ``optimize_strategy``.

:func:`optimize_dense` forms the workload's Gram matrix on the measured cells (or, for prefix and
all-range workloads past n = 2048, only its closed-form tridiagonal inverse), merges cells with
identical columns, runs the chosen method (the dual fixed point of
:mod:`~dpopt.linear_queries._dual_fixed_point` or COA's Newton of
:mod:`~dpopt.linear_queries._coa_newton`), certifies the result
(:mod:`~dpopt.linear_queries._certificates`) and embeds the strategy into the full domain.  Also
the memory and time estimates and the BLAS-thread limit shared by the strategy code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from typing import Any

import numpy as np
import scipy.linalg as sla
from numpy.typing import ArrayLike, NDArray

from dpopt._validation import check_int
from dpopt.exceptions import ConvergenceWarning, InvalidParameterError
from dpopt.iteration import Callback, IterationInfo, notify, wants_stop
from dpopt.linear_queries._certificates import (
    EPS,
    dual_lower_bound,
    eig_null_threshold,
    factor_dual_bound,
    gram_norm_bound,
    round_down,
    sqrt_trace_lower,
    strategy_error,
    sym,
    tridiagonal_dual_bound,
    tridiagonal_inverse,
)
from dpopt.linear_queries._coa_newton import COAParams, chol_inverse, primal_newton, strategy_from_X
from dpopt.linear_queries._dual_fixed_point import TridiagonalDual, solve_dual
from dpopt.linear_queries._result import FloatArray, IterateCallback, StrategyResult
from dpopt.linear_queries.workloads import Workload

__all__ = [
    "blas_threads",
    "check_workload",
    "column_classes",
    "estimate_memory",
    "estimate_seconds_per_iteration",
    "optimize_dense",
]

_BYTES_PER_ENTRY = 8
_CONTROLLER: Any = None
_VERIFY_LIMIT = 2048  # re-evaluate the objective by SVD up to this n
_SMALL_N = 256  # below this size BLAS runs single-threaded
_DENSE_COPIES = 10  # n x n float64 arrays alive at the peak of one iteration
_STRUCTURED_COPIES = 4  # the same on the tridiagonal-inverse path (eigenvectors, two strategies, slack)


def check_workload(workload: Workload | ArrayLike) -> Workload:
    if isinstance(workload, Workload):
        return workload
    from dpopt.linear_queries.workloads import MatrixWorkload

    return MatrixWorkload(workload)


def estimate_memory(n: int) -> int:
    """Bytes the optimizer needs at domain size n (about ten dense ``n x n`` float64 arrays)."""
    n = check_int(n, "n")
    return _DENSE_COPIES * _BYTES_PER_ENTRY * n * n


def _available_memory() -> int | None:
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - platform dependent
        return None


def _check_memory(n: int, max_memory: float | None, copies: int = _DENSE_COPIES) -> None:
    need = copies * _BYTES_PER_ENTRY * n * n
    limit = _available_memory() if max_memory is None else int(max_memory)
    if limit is not None and need > limit:
        raise InvalidParameterError(
            f"n={n}: optimizing a strategy needs about {need / 2**30:.2f} GiB "
            f"(≈{copies} dense n×n float64 arrays) but only {limit / 2**30:.2f} GiB is "
            "available; reduce n, use a structured workload, or raise max_memory"
        )


def blas_threads(n: int) -> contextlib.AbstractContextManager[Any]:
    """One BLAS thread for small problems (threading only adds overhead there, badly so on busy machines)."""
    global _CONTROLLER
    if n > _SMALL_N:
        return contextlib.nullcontext()
    if _CONTROLLER is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
            return contextlib.nullcontext()
        _CONTROLLER = ThreadpoolController()  # scanning the loaded libraries is slow: do it once
    return _CONTROLLER.limit(limits=1, user_api="blas")


def _progress_bar(n: int, method: str, tol: float, callback: Callback | None) -> tuple[Any, Callback]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    per_iter = estimate_seconds_per_iteration(n, method)
    Console(stderr=True).print(
        f"optimize_strategy: n={n}, method={method!r}: needs ≈{estimate_memory(n) / 2**30:.2f} GiB; "
        f"≈{per_iter:.3g} CPU s per iteration (single-threaded BLAS estimate)"
    )
    bar = Progress(
        TextColumn("[bold]strategy[/] it {task.completed:>4.0f}"),
        BarColumn(),
        TextColumn("gap {task.fields[gap]}"),
        TimeElapsedColumn(),
        transient=False,
        console=Console(stderr=True),
    )
    task = bar.add_task("optimize", total=None, gap="-")
    bar.start()
    user = callback

    def cb(info: IterationInfo) -> bool:
        gap = info["gap"] if "gap" in info else None
        bar.update(task, completed=info.nit, gap="-" if gap is None else f"{gap:.2e} (target {tol:.0e})")
        return wants_stop(user, info)

    return bar, cb


def estimate_seconds_per_iteration(n: int, method: str = "dual") -> float:
    """Rough single-threaded CPU seconds per outer iteration (measured: ≈0.3 s at n = 1024, ∝ n³)."""
    base = 0.3 if method == "dual" else 0.65
    return base * (check_int(n, "n") / 1024) ** 3


def _embed(
    A_s: FloatArray, support: NDArray[np.intp], n_full: int, classes: NDArray[np.intp] | None = None
) -> FloatArray:
    """The strategy on the full domain: zero columns off ``support``, column norms at most one.

    Column ``classes[i]`` of ``A_s`` goes to cell ``support[i]`` (cells with identical workload
    columns share one column of the reduced problem, see :func:`column_classes`; default: column
    i).  When every cell is its own column, ``A_s`` itself is returned (no n x n copy).
    """
    col = float(np.max(np.sum(A_s**2, axis=0)))
    if classes is None and support.size == n_full:  # support is then 0..n-1
        A = A_s
    else:
        A = np.zeros((A_s.shape[0], n_full))
        A[:, support] = A_s if classes is None else A_s[:, classes]
    if col > 1.0:
        A = A / math.sqrt(col)
    return A


def _workload_factor(wl: Workload, cols: NDArray[np.intp], n: int) -> FloatArray | None:
    """``W[:, cols]`` when the workload has fewer rows than columns (``m < n``) and is given
    explicitly (intervals or a matrix): the final certificate is then the sum of the singular
    values of ``W Y^½`` (:func:`factor_dual_bound`), whose error allowance is absolute per term,
    instead of square roots of the eigenvalues of ``Y^½ V Y^½`` (which lose ``sqrt(n eps)``-sized
    amounts on the many small eigenvalues of rank-deficient workloads)."""
    from dpopt.linear_queries.workloads import MatrixWorkload, Ranges

    m = wl.n_queries
    if not isinstance(wl, Ranges | MatrixWorkload) or m >= n or m * wl.domain_size > 2**27:
        return None
    return np.ascontiguousarray(wl.matrix()[:, cols])


def column_classes(
    V: FloatArray, support: NDArray[np.intp]
) -> tuple[NDArray[np.intp], NDArray[np.intp]] | None:
    """Group the measured cells whose workload columns are identical (rows of ``V`` equal).

    Returns ``(representatives, classes)``: one cell per group (sorted) and, for every cell of
    ``support``, the index of its group; None when all columns differ.  Columns i and j of W are
    equal exactly when rows i and j of ``V = WᵀW`` are (``‖w_i - w_j‖² = V_ii + V_jj - 2 V_ij``).
    Rows are grouped by a digest of their bytes and then compared exactly, in O(n²).
    """
    groups: dict[bytes, int] = {}
    classes = np.empty(support.size, dtype=np.intp)
    reps: list[int] = []
    import hashlib

    for i, j in enumerate(support.tolist()):
        row = V[j, support]
        key = hashlib.blake2b(row.tobytes(), digest_size=16).digest()
        g = groups.get(key)
        if g is None or not np.array_equal(row, V[reps[g], support]):
            if g is not None:  # pragma: no cover - a digest collision: keep the rows apart
                key += i.to_bytes(8, "little")
            g = groups[key] = len(reps)
            reps.append(j)
        classes[i] = g
    if len(reps) == support.size:
        return None
    return np.asarray(reps, dtype=np.intp), classes


def optimize_dense(
    wl: Workload,
    *,
    method: str,
    tol: float,
    params: COAParams,
    anderson_memory: int,
    warn: bool,
    max_iter: int | None = None,
    max_time: float | None = None,
    callback: Callback | None = None,
    max_memory: float | None = None,
    progress: bool = False,
) -> StrategyResult:
    """:func:`~dpopt.linear_queries.strategy.optimize_strategy` on a workload without product or
    marginal structure (arguments validated by it): one problem on the measured cells."""
    n_full = wl.domain_size
    classes: NDArray[np.intp] | None = None
    if method == "dual" and n_full > _VERIFY_LIMIT and tridiagonal_inverse(wl, n_full) is not None:
        # O(n²) iterations and certificate from the closed-form tridiagonal V⁻¹: V is never formed
        _check_memory(n_full, max_memory, copies=_STRUCTURED_COPIES)
        V = np.empty((0, 0))
        support = reps = np.arange(n_full)
        t0, w0 = time.process_time(), time.perf_counter()
    else:
        _check_memory(n_full, max_memory)
        V_full = wl.gram()
        if not np.all(np.isfinite(V_full)):
            raise InvalidParameterError("workload: its Gram matrix has non-finite entries")
        support = np.flatnonzero(np.diag(V_full) > 0)
        if support.size == 0:
            raise InvalidParameterError("workload: every column is zero; there is nothing to answer")
        reps = support
        t0, w0 = time.process_time(), time.perf_counter()  # the grouping counts as optimization time
        found = column_classes(V_full, support) if method == "dual" else None
        if found is not None:  # cells with identical columns: solve on one cell per group
            reps, classes = found
            V = V_full[np.ix_(reps, reps)]
        elif support.size == n_full:  # no copy when every cell is measured (512 MiB at n = 8192)
            V = np.ascontiguousarray(V_full)
        else:
            V = V_full[np.ix_(support, support)]
    n = support.size if V.size == 0 else V.shape[0]
    factor = _workload_factor(wl, reps, n) if method == "dual" and V.size else None

    bar = None
    if progress:
        bar, callback = _progress_bar(n, method, tol, callback)
    try:
        with blas_threads(n):
            return _optimize(
                wl,
                V,
                support,
                n_full,
                method,
                tol,
                max_iter,
                max_time,
                params,
                anderson_memory,
                callback,
                warn,
                t0,
                w0,
                classes,
                factor,
            )
    finally:
        if bar is not None:
            bar.stop()


def _spectrum(
    V: FloatArray, n: int, tri: tuple[FloatArray, FloatArray] | None
) -> tuple[Any, FloatArray, FloatArray, float]:
    """``(evaluator, eigenvalues clipped at 0, eigenvectors, certified Σ sqrt λ)`` of V: from the
    tridiagonal inverse with its O(n²) evaluator when there is one and n is not small, else dense."""
    if tri is not None and n > _SMALL_N:  # structure-aware: O(n²) per iteration
        mu = sla.eigh_tridiagonal(*tri, eigvals_only=True, lapack_driver="stemr")
        Q = np.empty((0, 0))  # not needed: the evaluator computes its own eigenvectors
        lam = 1.0 / mu
        tau = 4.0 * n * EPS * float(np.max(np.abs(tri[0])) + 2 * np.max(np.abs(tri[1])))
        root_lower = round_down(math.fsum((1.0 / np.sqrt(mu + tau)).tolist()), 3)
        return TridiagonalDual(*tri), np.clip(lam, 0.0, None), Q, root_lower
    lam, Q = sla.eigh(V, driver="evd")
    # certified: eigenvalues within eigh's error bound of 0 count as 0, the rest are lowered by it
    root_lower = sqrt_trace_lower(lam, eig_null_threshold(V))
    return None, np.clip(lam, 0.0, None), Q, root_lower


def _run_dual(
    wl: Workload,
    V: FloatArray,
    n: int,
    *,
    tol: float,
    max_iter: int | None,
    max_time: float | None,
    anderson_memory: int,
    callback: IterateCallback | None,
    spectrum: tuple[Any, FloatArray, FloatArray, float],
    tri: tuple[FloatArray, FloatArray] | None,
    classes: NDArray[np.intp] | None,
    factor: FloatArray | None,
    run_params: dict[str, Any],
) -> tuple[FloatArray, float, str, int, list[dict[str, Any]], float]:
    """The ``"dual"`` method and its final certificate: ``(A, objective, status, iterations,
    history, dual bound)``; records its settings and structure in ``run_params``."""
    evaluator, w, Q, root_lower = spectrum
    iters = 500 if max_iter is None else check_int(max_iter, "max_iter")
    A_s, obj, _, status, n_iter, history, best_y = solve_dual(
        V,
        # the structured path steers by an uncertified bound, within ~1e-8 of the certificate
        tol=tol if evaluator is None and factor is None else tol - min(0.5 * tol, 5e-8),
        max_iter=iters,
        max_time=max_time,
        memory=check_int(anderson_memory, "anderson_memory", minimum=0),
        exponent=2.0,
        callback=callback,
        w=w,
        Q=Q,
        root_lower=root_lower,
        evaluator=evaluator,
        factor=factor,
    )
    run_params.update(max_iter=iters, anderson_memory=anderson_memory)
    if evaluator is not None:
        run_params["structure"] = "tridiagonal inverse (O(n²) per iteration)"
    if classes is not None:
        run_params["structure"] = f"{n} classes of identical columns"
    if evaluator is None and factor is not None and factor.shape[0] <= 0.8 * n:
        run_params["iteration"] = f"{factor.shape[0]} x {factor.shape[0]} eigenproblem of W Y Wᵀ"
    if tri is not None and evaluator is not None:  # O(n²) Sturm-count certificate, no n·eps loss
        dual_lb = tridiagonal_dual_bound(tri[0], tri[1], best_y, gram_norm=gram_norm_bound(wl, n))
    elif factor is not None:  # singular values of W Y^½: no square-root loss on small eigenvalues
        dual_lb = factor_dual_bound(factor, best_y)
        run_params["certificate"] = "singular values of the workload's columns"
    else:
        dual_lb = dual_lower_bound(V, best_y)  # the certificate, rigorous in floating point
    return A_s, obj, status, n_iter, history, dual_lb


def _paper_thetas(params: COAParams) -> list[float]:
    """The ridges of Algorithm 3 (θ0, θ0·factor, ... down to ``homotopy_min``), or just θ."""
    thetas = [params.theta]
    if params.homotopy:
        thetas, th = [], params.homotopy_theta0
        while th >= params.homotopy_min * (1 - 1e-9):
            thetas.append(th)
            th *= params.homotopy_factor
    return thetas


def _run_newton(
    V: FloatArray,
    *,
    method: str,
    tol: float,
    max_iter: int | None,
    max_time: float | None,
    params: COAParams,
    callback: IterateCallback | None,
    w: FloatArray,
    Q: FloatArray,
    t0: float,
    history: list[dict[str, Any]],
    run_params: dict[str, Any],
) -> tuple[FloatArray, float, str, int, float]:
    """The ``"paper"`` and ``"newton"`` methods: ``(A, objective, status, iterations, dual bound)``."""
    n = V.shape[0]
    if max_iter is not None:
        params = dataclasses.replace(params, max_iter=check_int(max_iter, "max_iter"))
    run_params.update(dataclasses.asdict(params))
    scale = float(np.mean(np.diag(V))) if params.relative_theta else 1.0
    singular = w.min() <= w.max() * n * np.finfo(float).eps
    if singular and (params.theta <= 0 or (params.homotopy and params.homotopy_min <= 0)):
        raise InvalidParameterError(
            f"theta: the workload's Gram matrix is rank deficient (rank {int(np.sum(w > w.max() * 1e-12))} "
            f"< n = {n}), so method={method!r} needs a ridge θ > 0 (the θ = 0 optimum is singular); "
            "use theta > 0, the homotopy, or method='dual', which handles singular workloads exactly"
        )
    if method == "paper":
        run_params["stopping_rule"] = "relative objective decrease <= accuracy (the paper's; no certificate)"
        X = np.eye(n)
        status, n_iter = "max_iter", 0
        for theta in _paper_thetas(params):
            V_reg = V + theta * scale * np.eye(n)
            X, status, k, _ = primal_newton(
                V_reg,
                V,
                X,
                params,
                forcing=False,
                certify=False,
                tol=tol,
                first_gradient=params.first_step_gradient,
                history=history,
                callback=callback,
                max_time=max_time,
                t0=t0,
                k0=n_iter,
            )
            n_iter += k
            if status in ("stopped", "max_time"):
                break
        dual_lb = -math.inf
    else:  # newton
        full_rank = w.min() > w.max() * 1e-10
        theta = 0.0 if full_rank else params.theta * scale  # ridge only where V is singular
        V_reg = V + theta * np.eye(n)
        wr = w + theta
        root = (Q * np.sqrt(wr)) @ Q.T
        dg = np.sqrt(np.diag(root))
        X0 = sym(root / np.outer(dg, dg))
        newton_params = dataclasses.replace(params, cg_steps=max(params.cg_steps, 50))
        X, status, n_iter, dual_lb = primal_newton(
            V_reg,
            V,
            X0,
            newton_params,
            forcing=True,
            certify=True,
            tol=tol,
            first_gradient=False,
            history=history,
            callback=callback,
            max_time=max_time,
            t0=t0,
        )
    A_s = strategy_from_X(X)
    Z = chol_inverse(X)
    assert Z is not None
    obj = float(np.sum(Z * V))
    y0 = np.clip(np.diag(Z @ V @ Z), 0.0, None)
    if y0.sum() > 0:
        dual_lb = max(dual_lb, dual_lower_bound(V, y0))
    return A_s, obj, status, n_iter, dual_lb


def _exact_error(
    A_s: FloatArray, V: FloatArray, n: int, obj: float, bound: float, run_params: dict[str, Any]
) -> tuple[float, float, float]:
    """``(objective, lower bound, bias)``: the objective re-evaluated independently up to n = 2048,
    and the best certified bound ``bound``, lowered to the objective if rounding put it above."""
    if n <= _VERIFY_LIMIT:
        exact, bias = strategy_error(A_s, V)  # independent re-evaluation (one SVD of A)
    else:  # the SVD would cost more than the optimization; obj is exact for these strategies
        exact, bias = obj, 0.0
        run_params["re_evaluated"] = False
    objective = exact if math.isfinite(exact) else obj
    lower = bound
    if lower > objective:
        # Both bounds are rigorous for V, so this can only come from rounding in the objective
        # (or a bug): lower the bound rather than report a negative gap, and say so.
        run_params["lower_bound_lowered_by"] = float((lower - objective) / objective)
        lower = objective
    return objective, lower, bias


def _warn(method: str, status: str, gap: float, tol: float, bias: float, warn: bool) -> None:
    """The bias and convergence warnings, attributed to the caller of ``optimize_strategy``."""
    import warnings

    if bias > 1e-8:
        warnings.warn(
            f"the optimized strategy misses a relative {bias:.1e} of the workload's row space (numerical "
            "rank loss); answers are slightly biased and the objective is not exact",
            ConvergenceWarning,
            stacklevel=5,
        )
    if warn and method != "paper" and status not in ("converged", "stopped"):
        warnings.warn(
            f"optimize_strategy({method!r}) stopped with status {status!r} at certified gap {gap:.2e} "
            f"(tol {tol:.1e}); the strategy is valid but may be suboptimal",
            ConvergenceWarning,
            stacklevel=5,
        )


def _optimize(
    wl: Workload,
    V: FloatArray,
    support: NDArray[np.intp],
    n_full: int,
    method: str,
    tol: float,
    max_iter: int | None,
    max_time: float | None,
    params: COAParams,
    anderson_memory: int,
    callback: Callback | None,
    warn: bool,
    t0: float,
    w0: float,
    classes: NDArray[np.intp] | None = None,
    factor: FloatArray | None = None,
) -> StrategyResult:
    n = support.size if V.size == 0 else V.shape[0]
    full = support.size == n_full and classes is None
    tri = tridiagonal_inverse(wl, n) if method == "dual" and full else None
    spectrum = _spectrum(V, n, tri)
    _, w, Q, root_lower = spectrum
    svd_bound = round_down(root_lower**2 / n, 2)
    history: list[dict[str, Any]] = []
    run_params: dict[str, Any] = {"tol": tol}
    user_callback = callback

    def with_iterate(rec: dict[str, Any], A_it: FloatArray) -> bool:
        strategy = _embed(A_it, support, n_full, classes)
        return notify(user_callback, int(rec["iteration"]), strategy, **rec, strategy=strategy)

    inner = None if user_callback is None else with_iterate
    if method == "dual":
        A_s, obj, status, n_iter, history, dual_lb = _run_dual(
            wl,
            V,
            n,
            tol=tol,
            max_iter=max_iter,
            max_time=max_time,
            anderson_memory=anderson_memory,
            callback=inner,
            spectrum=spectrum,
            tri=tri,
            classes=classes,
            factor=factor,
            run_params=run_params,
        )
    else:
        A_s, obj, status, n_iter, dual_lb = _run_newton(
            V,
            method=method,
            tol=tol,
            max_iter=max_iter,
            max_time=max_time,
            params=params,
            callback=inner,
            w=w,
            Q=Q,
            t0=t0,
            history=history,
            run_params=run_params,
        )
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0

    # embed into the full domain (unmeasured cells get zero columns) and evaluate exactly
    A = _embed(A_s, support, n_full, classes)
    objective, lower, bias = _exact_error(A_s, V, n, obj, max(dual_lb, svd_bound), run_params)
    gap = (objective - lower) / lower if lower > 0 else math.inf
    if status == "converged" and gap > tol * (1 + 1e-6) + 1e-12:
        status = "max_iter" if method == "dual" else status
    _warn(method, status, gap, tol, bias, warn)
    return StrategyResult(
        strategy=A,
        objective=float(objective),
        lower_bound=float(lower),
        dual_bound=float(dual_lb),
        svd_bound=svd_bound,
        gap=float(gap),
        method=method,
        status=status,
        n_iter=int(n_iter),
        cpu_seconds=cpu,
        wall_seconds=wall,
        history=tuple(history),
        workload_fingerprint=wl.fingerprint(),
        bias=float(bias),
        params=run_params,
    )
