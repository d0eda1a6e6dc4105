"""Shared-memory execution of HAMSI and mb-GD: the kernel layout of every subset (``_plan``), the
subset gradient, the resolution of the ``partition`` argument and the outer/inner loop (``_run``)."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import check_int, check_memory, check_nonneg, check_positive
from dpopt.datasets import Ratings
from dpopt.distributed.partition import Partition, make_partition
from dpopt.exceptions import InvalidParameterError
from dpopt.iteration import Callback, notify
from dpopt.randomness import RNGLike, as_generator, spawn
from dpopt.solvers import _mf_kernels as _k
from dpopt.solvers.hamsi.checkpoint import lbfgs_state, load_lbfgs, load_state, save_state, state_path
from dpopt.solvers.hamsi.lbfgs import CompactLBFGS
from dpopt.solvers.hamsi.result import HamsiResult
from dpopt.solvers.hamsi.safeguard import RestartSafeguard
from dpopt.solvers.hamsi.schedule import subset_schedule

if TYPE_CHECKING:
    from dpopt.matrix_factorization import MatrixFactorizationProblem

_PARALLEL_WORK = 1_000_000  # ratings x rank below which a subset's gradient runs serially

Float = NDArray[np.float64]


# ============================================================================ execution plan
@dataclass
class _Subset:
    rows: NDArray[np.integer[Any]]
    cols: NDArray[np.integer[Any]]
    vals: Float
    ptr: NDArray[np.int64]  # block pointers, stratum by stratum
    n_strata: int
    reg: float  # share of the l2 term
    share: float  # share of the ratings (scales the ridge term of the biased model)
    sse: Float
    parallel: bool


class _FullCover:
    """The single-subset cover (full gradients) without materializing ``arange(n_ratings)``."""

    scheme = "full"
    n_subsets = 1
    disjoint_blocks = True

    def __init__(self, n: int) -> None:
        self.n_functions = n

    def balance(self) -> dict[str, Any]:
        n = self.n_functions
        return {"scheme": "full", "n_subsets": 1, "subset_sizes": [n], "subset_imbalance": 1.0,
                "block_sizes": [[n]], "block_imbalance": 1.0}  # fmt: skip


def _plan(problem: MatrixFactorizationProblem, part: Partition | _FullCover, n_threads: int) -> list[_Subset]:
    """Kernel layout of every subset (independent of the thread count).

    Variable-disjoint blocks (STRATA, STRATA-B) form one stratum processed block-parallel; any other
    subset is laid out on the problem's ``grid x grid`` stratified layout.
    """
    rt = problem.ratings
    out = []
    n = problem.n_ratings
    mu = float(problem.offset or 0.0)
    if isinstance(part, _FullCover):
        # the single-subset cover is the problem's own stratified layout: no second copy
        return [
            _Subset(
                rows=problem.rows, cols=problem.cols, vals=problem.values, ptr=problem._ptr,
                n_strata=problem.grid, reg=problem.l2, share=1.0,
                sse=np.zeros(problem._ptr.shape[0] - 1),
                parallel=n_threads > 1 and n * problem.width >= _PARALLEL_WORK,
            )
        ]  # fmt: skip
    assert isinstance(part, Partition)
    for blocks in part.blocks:
        idx = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int64)
        if part.disjoint_blocks and len(blocks) >= 2:
            ptr = np.concatenate(([0], np.cumsum([b.shape[0] for b in blocks]))).astype(np.int64)
            n_strata = 1
        else:
            order, ptr = _k.stratify(rt.rows[idx], rt.cols[idx], problem.row_cuts, problem.col_cuts)
            idx = idx[order]
            n_strata = problem.grid
        rows, cols, vals = _k.layout(rt.rows, rt.cols, rt.values, idx, problem.shape, mu)
        out.append(
            _Subset(
                rows=rows,
                cols=cols,
                vals=vals,
                ptr=ptr,
                n_strata=n_strata,
                reg=problem.l2 * idx.shape[0] / n,
                share=idx.shape[0] / n,
                sse=np.zeros(max(ptr.shape[0] - 1, 1)),
                parallel=n_threads > 1 and idx.shape[0] * problem.width >= _PARALLEL_WORK,
            )
        )
    return out


def _subset_gradient(
    run: _k.BlockRunner,
    sub: _Subset,
    U: Float,
    V: Float,
    x: Float,
    g: Float,
    gU: Float,
    gV: Float,
    w: float,
    problem: MatrixFactorizationProblem,
) -> float:
    g.fill(0.0)
    if sub.rows.shape[0]:
        # small subsets run serially (identical bits, no thread rendezvous per stratum)
        run(
            U,
            V,
            sub.rows,
            sub.cols,
            sub.vals,
            sub.ptr,
            sub.n_strata,
            w,
            gU,
            gV,
            sub.sse,
            parallel=sub.parallel,
        )
    if problem.bias:
        problem.regularize(gU, gV, U, V, sub.share)  # ridge terms; the columns of ones stay fixed
    elif sub.reg:
        g += sub.reg * x
    return float(sub.sse.sum())


def _resolve_partition(
    problem: MatrixFactorizationProblem,
    partition: Partition | str | None,
    n_subsets: int,
    n_threads: int,
    rng: RNGLike,
) -> Partition | _FullCover:
    n = problem.n_ratings
    if partition is None:
        return _FullCover(n)
    if isinstance(partition, str):
        return make_partition(problem.ratings, partition, n_subsets=n_subsets, n_threads=n_threads, rng=rng)
    if not isinstance(partition, Partition):
        raise InvalidParameterError("partition: expected a Partition, a scheme name or None")
    if partition.n_functions != n:
        raise InvalidParameterError(
            f"partition: covers {partition.n_functions} functions but the problem has {n} ratings; build "
            "it on problem.ratings"
        )
    return partition


_DIVERGED = "diverged (non-finite values); the factors are the best evaluated iterate"


def _initial_point(
    problem: MatrixFactorizationProblem,
    init: Any,
    init_scale: float | Literal["spectral"] | None,
    rng: np.random.Generator,
) -> Float:
    """Flat working vector of the initial factors: ``init`` (plain or working factors) or random."""
    if init is None:
        U0, V0 = problem.init_factors(rng=rng, scale=init_scale)
        x = problem.pack(U0, V0)
    else:
        if not isinstance(init, tuple | list) or len(init) not in (2, 4):
            raise InvalidParameterError("init: expected (U0, V0), (U0, V0, row_bias, col_bias) or None")
        if len(init) == 4:
            x = problem.pack(*problem.augment(*init))
        else:
            x = problem.pack(init[0], init[1])
    if not np.all(np.isfinite(x)):
        raise InvalidParameterError("init: contains NaN or infinite entries")
    return x


def _run(
    problem: MatrixFactorizationProblem,
    partition: Partition | str | None,
    *,
    method: str,
    schedule: str,
    eta: float,
    gamma: float,
    eta_gd: float,
    gamma_gd: float,
    memory: int,
    beta_counter: str,
    beta_floor: float,
    sigma_mode: Literal["thesis", "running_min"],
    sigma0: float,
    curvature: Literal["relative", "reference", "thesis"],
    curvature_tol: float | None,
    safeguard: bool,
    restart_growth: float,
    max_epochs: int,
    time_budget: float | None,
    n_threads: int,
    backend: str,
    n_subsets: int,
    init: tuple[Any, Any] | None,
    init_scale: float | Literal["spectral"] | None,
    test: Ratings | None,
    eval_every: int,
    rng: RNGLike,
    callback: Callback | None = None,
    tol: float = 0.0,
    patience: int | None = None,
    early_stopping: bool = False,
    train_rmse: str = "exact",
    checkpoint_dir: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 1,
    resume: bool = False,
) -> HamsiResult:
    from dpopt.matrix_factorization import MatrixFactorizationProblem

    if not isinstance(problem, MatrixFactorizationProblem):
        raise InvalidParameterError(
            "problem: expected a dpopt.matrix_factorization.MatrixFactorizationProblem"
        )
    problem._require_uniform('hamsi and mbgd (use solver="als")')
    if schedule not in ("det", "stoc"):
        raise InvalidParameterError("schedule: must be 'det' (cyclic shift) or 'stoc' (shuffling)")
    if beta_counter not in ("outer", "inner"):
        raise InvalidParameterError("beta_counter: must be 'outer' (thesis) or 'inner' (reference code)")
    eta = check_positive(eta, "eta")
    gamma = check_positive(gamma, "gamma")
    eta_gd = check_positive(eta_gd, "eta_gd")
    gamma_gd = check_positive(gamma_gd, "gamma_gd")
    memory = check_int(memory, "memory")
    beta_floor = check_nonneg(beta_floor, "beta_floor")
    restart_growth = check_positive(restart_growth, "restart_growth")
    gd_floor = beta_floor if method == "mbgd" else 0.0  # HAMSI's warm-up uses the raw mb-GD schedule
    max_epochs = check_int(max_epochs, "max_epochs", minimum=0)
    budget = math.inf if time_budget is None else check_positive(time_budget, "time_budget")
    n_threads = check_int(n_threads, "n_threads")
    n_subsets = check_int(n_subsets, "n_subsets")
    eval_every = check_int(eval_every, "eval_every")
    tol = check_nonneg(tol, "tol")
    if patience is not None:
        patience = check_int(patience, "patience")
    if train_rmse not in ("exact", "running"):
        raise InvalidParameterError(
            "train_rmse: must be 'exact' (one pass over the training ratings per evaluation) or "
            "'running' (the mean of the epoch's subset losses, free)"
        )
    if early_stopping and test is None:
        raise InvalidParameterError("early_stopping: needs a validation split passed as test=")
    checkpoint_every = check_int(checkpoint_every, "checkpoint_every")
    if resume and checkpoint_dir is None:
        raise InvalidParameterError("resume: needs checkpoint_dir= (where the state file is kept)")
    ckpt = state_path(checkpoint_dir) if checkpoint_dir is not None else None
    t_setup = time.perf_counter()
    # factors, gradients and working copies (~8 vectors of (n_rows + n_cols) * rank float64) plus the
    # 2 * memory L-BFGS pairs: refuse before allocating them
    n_params = float(problem.shape[0] + problem.shape[1]) * problem.width
    check_memory(
        8.0 * n_params * (8 + (2 * memory if method == "hamsi" else 0)),
        f"rank={problem.rank} on a {problem.shape[0]} x {problem.shape[1]} matrix ({method}, memory={memory})",
        fix="use a smaller rank (or a smaller L-BFGS memory)",
    )
    if test is not None and (not isinstance(test, Ratings) or test.shape != problem.shape):
        raise InvalidParameterError(
            f"test: expected a Ratings of shape {problem.shape} (same users and items)"
        )
    r_init, r_sched, r_part = (as_generator(c) for c in spawn(rng, ["init", "schedule", "partition"]))

    part = _resolve_partition(problem, partition, n_subsets, n_threads, r_part)
    K = part.n_subsets
    x = _initial_point(problem, init, init_scale, r_init)
    if not np.all(np.isfinite(x)):
        raise InvalidParameterError("init: contains NaN or infinite entries")
    U, V = problem.unpack(x)
    g = np.zeros_like(x)
    gU, gV = problem.unpack(g)
    w = problem.weight
    lbfgs = (
        CompactLBFGS(
            x.shape[0],
            memory,
            sigma_mode=sigma_mode,
            sigma0=sigma0,
            curvature=curvature,
            curvature_tol=curvature_tol,
        )
        if method == "hamsi"
        else None
    )
    timings = {"gradient": 0.0, "update": 0.0, "hessian": 0.0}
    hist_t: list[float] = []
    hist_e: list[int] = []
    hist_r: list[float] = []
    hist_te: list[float] = []
    elapsed = 0.0
    eval_time = 0.0

    if backend not in ("threads", "numba"):
        raise InvalidParameterError("backend: must be 'threads' (thread pool, default) or 'numba' (prange)")
    with _k.thread_count(n_threads) as used_threads, _k.BlockRunner(used_threads, backend) as run:
        subsets = _plan(problem, part, used_threads)
        _k.warmup()  # load/compile kernels before the clock starts
        held_out = problem.evaluator(test) if test is not None else None

        best_rmse = [math.inf]  # best evaluated training RMSE and its iterate
        best_x = x.copy()
        # convergence / early stopping: the monitored value (validation RMSE with early stopping,
        # training RMSE otherwise), its best value, the iterate there, evaluations since improvement
        mon_best = [math.inf]
        mon_x = x.copy() if early_stopping else None
        since = [0]
        restarts_seen = [0]
        qn_seen = [lbfgs is None]  # a quasi-Newton step since the last evaluation (mb-GD: always)
        running = [0.0, 0]  # sum of the subset SSEs seen since the last evaluation, ratings counted

        def evaluate(epoch: int) -> None:
            nonlocal eval_time
            t_ev = time.perf_counter()
            hist_t.append(elapsed)
            hist_e.append(epoch)
            if train_rmse == "running" and running[1] > 0:
                hist_r.append(math.sqrt(running[0] / running[1]))
            else:
                hist_r.append(problem.rmse(U, V))
            running[0], running[1] = 0.0, 0
            if held_out is not None:
                hist_te.append(held_out(U, V))
            if hist_r[-1] < best_rmse[0]:
                best_rmse[0] = hist_r[-1]
                best_x[:] = x
            # monitored: validation RMSE, or the training objective (its data part from the RMSE)
            value = (
                hist_te[-1]
                if early_stopping
                else 0.5 * problem.weight * hist_r[-1] ** 2 * problem.n_ratings + problem.ridge(U, V)
            )
            if (
                value < mon_best[0] * (1.0 - tol)
                or not math.isfinite(mon_best[0])
                or restarts_seen[0] != guard.n_restarts
                or not qn_seen[0]
            ):
                # progress; epochs with a safeguard restart, or in HAMSI's gradient warm-up (whose
                # steps can be tiny on large data), do not count as stalled
                since[0] = 0
                restarts_seen[0] = guard.n_restarts
            else:
                since[0] += 1
            qn_seen[0] = lbfgs is None
            if value < mon_best[0]:
                mon_best[0] = value
                if mon_x is not None:
                    mon_x[:] = x
            eval_time += time.perf_counter() - t_ev

        setup_time = time.perf_counter() - t_setup
        guard = RestartSafeguard(K, enabled=safeguard and lbfgs is not None, growth=restart_growth)
        evaluate(0)
        orders = subset_schedule(
            K,
            "stoc" if schedule == "stoc" else "det",
            repeat_first=(method == "hamsi" and K > 1),
            rng=r_sched,
        )
        status = "max_iter"
        message = ""
        steps = 0
        epoch = 0
        ref_x = ref_g = None
        safe_x: Float | None = None  # start of the current outer iteration (checked)
        stop = False
        fingerprint = {
            "method": method, "shape": problem.shape, "n_ratings": problem.n_ratings, "rank": problem.rank,
            "bias": problem.bias, "l2": problem.l2, "n_subsets": K, "scheme": part.scheme, "schedule": schedule,
            "eta": eta, "gamma": gamma, "eta_gd": eta_gd, "gamma_gd": gamma_gd, "memory": memory,
            "beta_counter": beta_counter, "beta_floor": beta_floor, "train_rmse": train_rmse,
            "eval_every": eval_every, "early_stopping": early_stopping,
        }  # fmt: skip
        saved = load_state(ckpt, fingerprint) if resume and ckpt is not None else None
        if saved is not None:
            # continue the saved run: same point, memory, schedule position, safeguard and history
            x[:] = saved["x"]
            epoch, steps = int(saved["epoch"]), int(saved["steps"])
            elapsed, eval_time = float(saved["elapsed"]), float(saved["eval_time"])
            guard.load(saved)
            ref_x = saved["ref_x"].copy() if "ref_x" in saved else None
            ref_g = saved["ref_g"].copy() if "ref_g" in saved else None
            safe_x = saved["safe_x"].copy() if "safe_x" in saved else None
            best_x[:] = saved["best_x"]
            best_rmse[0], mon_best[0] = float(saved["best_rmse"]), float(saved["mon_best"])
            if mon_x is not None:
                mon_x[:] = saved["mon_x"]
            since[0], restarts_seen[0] = int(saved["since"]), int(saved["restarts_seen"])
            qn_seen[0] = bool(saved["qn_seen"])
            running[0], running[1] = float(saved["running_sum"]), int(saved["running_n"])
            hist_t[:], hist_e[:] = [float(v) for v in saved["hist_t"]], [int(v) for v in saved["hist_e"]]
            hist_r[:], hist_te[:] = [float(v) for v in saved["hist_r"]], [float(v) for v in saved["hist_te"]]
            for key in timings:
                timings[key] = float(saved["timing_" + key])
            if lbfgs is not None:
                load_lbfgs(lbfgs, saved)
            for _ in range(epoch):  # the schedule's position (its random stream is re-derived from rng)
                next(orders)

        def checkpoint() -> None:
            assert ckpt is not None
            state: dict[str, Any] = {
                "x": x, "epoch": epoch, "steps": steps, "elapsed": elapsed, "eval_time": eval_time,
                **guard.state(), "ref_x": ref_x, "ref_g": ref_g, "safe_x": safe_x, "best_x": best_x,
                "best_rmse": best_rmse[0], "mon_best": mon_best[0], "mon_x": mon_x, "since": since[0],
                "restarts_seen": restarts_seen[0], "qn_seen": qn_seen[0], "running_sum": running[0],
                "running_n": running[1], "hist_t": np.asarray(hist_t, dtype=np.float64),
                "hist_e": np.asarray(hist_e, dtype=np.int64), "hist_r": np.asarray(hist_r, dtype=np.float64),
                "hist_te": np.asarray(hist_te, dtype=np.float64),
            }  # fmt: skip
            state.update({"timing_" + k: v for k, v in timings.items()})
            state.update({"fp_" + k: str(v) for k, v in fingerprint.items()})
            if lbfgs is not None:
                state.update(lbfgs_state(lbfgs))
            save_state(ckpt, state)

        while epoch < max_epochs and not stop:
            order = next(orders)
            t_outer = epoch + 1
            for ell, k in enumerate(order):
                t0 = time.perf_counter()
                steps += 1
                counter = steps if beta_counter == "inner" else t_outer
                sse = _subset_gradient(run, subsets[k], U, V, x, g, gU, gV, w, problem)
                t1 = time.perf_counter()
                running[0] += sse
                running[1] += subsets[k].rows.shape[0]
                bad = not math.isfinite(sse) or not np.isfinite(g).all()
                verdict = guard.check(k, sse, bad, safe_x is not None)
                if verdict == "failed":
                    status, message = "failed", _DIVERGED
                    x[:] = best_x
                    stop = True
                    elapsed += t1 - t0
                    timings["gradient"] += t1 - t0
                    break
                skip = False
                if lbfgs is not None:
                    if verdict == "restart" and safe_x is not None:
                        # steps since the last safe point increased this subset's loss (or
                        # overflowed): return to that point and restart the L-BFGS memory (the
                        # safeguard shortened the steps that overshot)
                        x[:] = safe_x
                        lbfgs.reset()
                        ref_x = ref_g = None
                        skip = True
                    else:
                        if K == 1:
                            if ref_x is not None and ref_g is not None:
                                lbfgs.push(x - ref_x, g - ref_g)
                            ref_x, ref_g = x.copy(), g.copy()
                            safe_x = ref_x
                            guard.new_safe_point()
                        elif ell == 0:
                            ref_x, ref_g = x.copy(), g.copy()
                            safe_x = ref_x
                            guard.new_safe_point()
                        elif ell == len(order) - 1 and ref_x is not None and ref_g is not None:
                            lbfgs.push(x - ref_x, g - ref_g)
                if skip:
                    t2 = time.perf_counter()
                    timings["gradient"] += t1 - t0
                    timings["hessian"] += t2 - t1
                    elapsed += t2 - t0
                    if elapsed >= budget:
                        status = "max_time"
                        stop = True
                    break  # start the next outer iteration from the restored point
                t2 = time.perf_counter()
                if lbfgs is not None and lbfgs.full:
                    beta = max(beta_floor, (eta * counter) ** gamma)
                    coefs = lbfgs.coefficients(g)
                    _k.lbfgs_apply(x, g, lbfgs.A, coefs, lbfgs.sigma, guard.qn_scale / beta)
                    qn_seen[0] = True
                    guard.stepped(quasi_newton=True)
                else:
                    e_, g_ = (eta_gd, gamma_gd) if method == "hamsi" else (eta, gamma)
                    beta = max(gd_floor, (e_ * counter) ** g_)
                    x -= g * (guard.gd_scale / beta)
                    guard.stepped(quasi_newton=False)
                t3 = time.perf_counter()
                timings["gradient"] += t1 - t0
                timings["hessian"] += t2 - t1
                timings["update"] += t3 - t2
                elapsed += t3 - t0
                if elapsed >= budget:
                    status = "max_time"
                    stop = True
                    break
            epoch += 1
            if stop or epoch % eval_every == 0 or epoch == max_epochs:
                if not np.all(np.isfinite(x)):  # hand back the best evaluated iterate
                    status, message = "failed", _DIVERGED
                    stop = True
                    x[:] = best_x
                if status == "failed":
                    running[1] = 0  # evaluate the handed-back iterate exactly
                evaluate(epoch)
                if status == "failed" and hist_r[-1] > best_rmse[0]:
                    x[:] = best_x  # finite but exploded: also hand back the best iterate
                    running[1] = 0
                    evaluate(epoch)
                if not stop and patience is not None and since[0] >= patience:
                    status, stop = "converged", True
                    what = "validation RMSE" if early_stopping else "training objective"
                    message = (
                        f"{method}: converged after {epoch} epochs ({what} improved by less than "
                        f"tol={tol:g} (relative) in {patience} evaluations)"
                    )
            if ckpt is not None and not stop and epoch % checkpoint_every == 0:
                checkpoint()
            if not stop and notify(callback, epoch, rmse=hist_r[-1], elapsed=elapsed):
                status, stop = "stopped", True
                if hist_e[-1] != epoch:
                    evaluate(epoch)
        if mon_x is not None and status != "failed" and hist_te and hist_te[-1] > mon_best[0]:
            x[:] = mon_x  # early stopping hands back the best-validation factors
            running[1] = 0
            evaluate(epoch)

    options = {
        "eta": eta, "gamma": gamma, "eta_gd": eta_gd, "gamma_gd": gamma_gd, "memory": memory,
        "beta_counter": beta_counter, "beta_floor": beta_floor, "sigma_mode": sigma_mode, "sigma0": sigma0, "curvature": curvature,
        "curvature_tol": lbfgs.tol if lbfgs is not None else None, "safeguard": safeguard,
        "restart_growth": restart_growth, "l2": problem.l2,
        "scaling": problem.scaling, "rank": problem.rank, "n_subsets": K,
    }  # fmt: skip
    U_out, V_out, row_bias, col_bias = problem.split(U, V)
    return HamsiResult(
        U=U_out,
        V=V_out,
        method=method,
        scheme=part.scheme,
        schedule=schedule,
        status=status,
        n_epochs=epoch,
        n_steps=steps,
        history_time=np.asarray(hist_t),
        history_epoch=np.asarray(hist_e, dtype=np.int64),
        history_rmse=np.asarray(hist_r),
        history_test_rmse=np.asarray(hist_te) if test is not None else None,
        timings=MappingProxyType(timings),
        n_pairs_accepted=lbfgs.n_accepted if lbfgs is not None else 0,
        n_pairs_rejected=lbfgs.n_rejected if lbfgs is not None else 0,
        n_restarts=guard.n_restarts,
        n_threads=used_threads,
        partition_balance=MappingProxyType(part.balance()),
        options=MappingProxyType(options),
        message=message or f"{method}: {epoch} epochs ({status})",
        row_bias=row_bias,
        col_bias=col_bias,
        offset=float(problem.offset or 0.0),
        setup_time=setup_time,
        eval_time=eval_time,
    )
