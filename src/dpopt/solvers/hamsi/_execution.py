"""Shared-memory execution of HAMSI and mb-GD: the kernel layout of every subset (``_plan``), the
subset gradient, the resolution of the ``partition`` argument, the working set of a run with the steps
of its loop (``_SharedRun``) and the driver (``_run``); the features around the loop are the hooks of
:mod:`dpopt.solvers.hamsi.hooks`."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import check_memory
from dpopt.datasets import Ratings
from dpopt.distributed.partition import Partition, make_partition
from dpopt.exceptions import InvalidParameterError
from dpopt.iteration import Callback
from dpopt.randomness import RNGLike, as_generator, spawn
from dpopt.solvers import _mf_kernels as _k
from dpopt.solvers.hamsi.checkpoint import RunRecord, lbfgs_state, load_lbfgs, state_path
from dpopt.solvers.hamsi.hooks import Hook, shared_memory_hooks
from dpopt.solvers.hamsi.lbfgs import CompactLBFGS
from dpopt.solvers.hamsi.options import HamsiOptions
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


class _SharedRun(RunRecord):
    """The working set of one shared-memory run (point, L-BFGS memory, safeguard, history,
    counters); the steps of the loop are its methods, the features around it are its ``hooks``."""

    def __init__(
        self,
        problem: MatrixFactorizationProblem,
        method: str,
        opts: HamsiOptions,
        part: Partition | _FullCover,
        x: Float,
        subsets: list[_Subset],
        blocks: _k.BlockRunner,
    ) -> None:
        super().__init__()
        self.problem, self.method, self.opts, self.part = problem, method, opts, part
        self.subsets, self.blocks = subsets, blocks
        self.x = x
        self.U, self.V = problem.unpack(x)
        self.g = np.zeros_like(x)
        self.gU, self.gV = problem.unpack(self.g)
        self.lbfgs = (
            CompactLBFGS(
                x.shape[0], opts.memory, sigma_mode=opts.sigma_mode, sigma0=opts.sigma0,
                curvature=opts.curvature, curvature_tol=opts.curvature_tol,
            )
            if method == "hamsi"
            else None
        )  # fmt: skip
        self.guard = RestartSafeguard(
            part.n_subsets, enabled=opts.safeguard and self.lbfgs is not None, growth=opts.restart_growth
        )
        self.gd_floor = opts.beta_floor if method == "mbgd" else 0.0  # HAMSI's warm-up: raw mb-GD schedule
        self.held_out: Callable[[Float, Float], float] | None = None
        self.best_rmse = math.inf  # best evaluated training RMSE and its iterate
        self.best_x = x.copy()
        self.qn_seen = self.lbfgs is None  # a quasi-Newton step since the last evaluation (mb-GD: always)
        self.running = [0.0, 0]  # sum of the subset SSEs seen since the last evaluation, ratings counted
        self.status, self.message = "max_iter", ""
        self.steps = self.epoch = 0
        self.ref_x: Float | None = None
        self.ref_g: Float | None = None
        self.safe_x: Float | None = None  # start of the current outer iteration (checked)
        self.stop = False
        self.hooks: list[Hook[_SharedRun]] = []
        self.orders: Iterator[list[int]] = iter(())

    # ------------------------------------------------------------------ the loop's steps
    def evaluate(self, epoch: int) -> None:
        """Record the RMSE(s) of the current point (then the hooks' ``on_evaluate``)."""
        t_ev = time.perf_counter()
        self.hist_t.append(self.elapsed)
        self.hist_e.append(epoch)
        if self.opts.train_rmse == "running" and self.running[1] > 0:
            self.hist_r.append(math.sqrt(self.running[0] / self.running[1]))
        else:
            self.hist_r.append(self.problem.rmse(self.U, self.V))
        self.running[0], self.running[1] = 0.0, 0
        if self.held_out is not None:
            self.hist_te.append(self.held_out(self.U, self.V))
        if self.hist_r[-1] < self.best_rmse:
            self.best_rmse = self.hist_r[-1]
            self.best_x[:] = self.x
        for hook in self.hooks:
            hook.on_evaluate(self)
        self.qn_seen = self.lbfgs is None
        self.eval_time += time.perf_counter() - t_ev

    def outer_iteration(self, order: list[int]) -> None:
        """Visit the subsets of ``order`` (the hooks' ``on_step_end`` after every step)."""
        t_outer = self.epoch + 1
        x, g, guard, timings = self.x, self.g, self.guard, self.timings
        for ell, k in enumerate(order):
            t0 = time.perf_counter()
            self.steps += 1
            counter = self.steps if self.opts.beta_counter == "inner" else t_outer
            sub = self.subsets[k]
            sse = _subset_gradient(
                self.blocks, sub, self.U, self.V, x, g, self.gU, self.gV, self.problem.weight, self.problem
            )
            t1 = time.perf_counter()
            self.running[0] += sse
            self.running[1] += sub.rows.shape[0]
            bad = not math.isfinite(sse) or not np.isfinite(g).all()
            verdict = guard.check(k, sse, bad, self.safe_x is not None)
            if verdict == "failed":
                self.status, self.message = "failed", _DIVERGED
                x[:] = self.best_x
                self.stop = True
                self.elapsed += t1 - t0
                timings["gradient"] += t1 - t0
                break
            restarted = self._memory(verdict, k, ell, len(order))
            t2 = time.perf_counter()
            if not restarted:
                self._update(counter)
            t3 = time.perf_counter()
            timings["gradient"] += t1 - t0
            timings["hessian"] += t2 - t1
            if not restarted:
                timings["update"] += t3 - t2
            self.elapsed += (t2 if restarted else t3) - t0
            for hook in self.hooks:
                hook.on_step_end(self)
            if restarted or self.stop:
                break  # a restart: the next outer iteration starts from the restored point

    def _memory(self, verdict: str, k: int, ell: int, n: int) -> bool:
        """Curvature pairs and safe points of HAMSI; True after a safeguard restart."""
        lbfgs, x, g = self.lbfgs, self.x, self.g
        if lbfgs is None:
            return False
        if verdict == "restart" and self.safe_x is not None:
            # steps since the last safe point increased this subset's loss (or overflowed): return
            # to that point and restart the L-BFGS memory (the safeguard shortened the steps that
            # overshot)
            x[:] = self.safe_x
            lbfgs.reset()
            self.ref_x = self.ref_g = None
            return True
        if self.part.n_subsets == 1 or ell == 0:
            if self.part.n_subsets == 1 and self.ref_x is not None and self.ref_g is not None:
                lbfgs.push(x - self.ref_x, g - self.ref_g)
            self.ref_x, self.ref_g = x.copy(), g.copy()
            self.safe_x = self.ref_x
            self.guard.new_safe_point()
        elif ell == n - 1 and self.ref_x is not None and self.ref_g is not None:
            lbfgs.push(x - self.ref_x, g - self.ref_g)
        return False

    def _update(self, counter: int) -> None:
        """The quasi-Newton step once the memory is full, a gradient step before (and in mb-GD)."""
        o, lbfgs, guard = self.opts, self.lbfgs, self.guard
        if lbfgs is not None and lbfgs.full:
            beta = max(o.beta_floor, (o.eta * counter) ** o.gamma)
            coefs = lbfgs.coefficients(self.g)
            _k.lbfgs_apply(self.x, self.g, lbfgs.A, coefs, lbfgs.sigma, guard.qn_scale / beta)
            self.qn_seen = True
            guard.stepped(quasi_newton=True)
        else:
            e_, g_ = (o.eta_gd, o.gamma_gd) if self.method == "hamsi" else (o.eta, o.gamma)
            beta = max(self.gd_floor, (e_ * counter) ** g_)
            self.x -= self.g * (guard.gd_scale / beta)
            guard.stepped(quasi_newton=False)

    def end_of_epoch(self) -> None:
        """Evaluate when due (handing back the best iterate after a divergence), then the hooks'
        ``on_evaluated`` (after an evaluation) and ``on_epoch_end``."""
        o, x = self.opts, self.x
        if self.stop or self.epoch % o.eval_every == 0 or self.epoch == o.max_iter:
            if not np.all(np.isfinite(x)):  # hand back the best evaluated iterate
                self.status, self.message = "failed", _DIVERGED
                self.stop = True
                x[:] = self.best_x
            if self.status == "failed":
                self.running[1] = 0  # evaluate the handed-back iterate exactly
            self.evaluate(self.epoch)
            if self.status == "failed" and self.hist_r[-1] > self.best_rmse:
                x[:] = self.best_x  # finite but exploded: also hand back the best iterate
                self.running[1] = 0
                self.evaluate(self.epoch)
            for hook in self.hooks:
                hook.on_evaluated(self)
        for hook in self.hooks:
            hook.on_epoch_end(self)

    # ------------------------------------------------------------------ state and result
    def state(self) -> dict[str, Any]:
        """The run's state for a checkpoint (the hooks add theirs)."""
        state: dict[str, Any] = {
            "x": self.x, "epoch": self.epoch, "steps": self.steps, **self.guard.state(), "ref_x": self.ref_x,
            "ref_g": self.ref_g, "safe_x": self.safe_x, "best_x": self.best_x, "best_rmse": self.best_rmse, "qn_seen": self.qn_seen,
            "running_sum": self.running[0], "running_n": self.running[1], **self.record_state(),
        }  # fmt: skip
        if self.lbfgs is not None:
            state.update(lbfgs_state(self.lbfgs))
        return state

    def load(self, saved: dict[str, Any]) -> None:
        """Continue the saved run: same point, memory, schedule position, safeguard and history."""
        self.x[:] = saved["x"]
        self.epoch, self.steps = int(saved["epoch"]), int(saved["steps"])
        self.guard.load(saved)
        self.ref_x = saved["ref_x"].copy() if "ref_x" in saved else None
        self.ref_g = saved["ref_g"].copy() if "ref_g" in saved else None
        self.safe_x = saved["safe_x"].copy() if "safe_x" in saved else None
        self.best_x[:] = saved["best_x"]
        self.best_rmse = float(saved["best_rmse"])
        self.qn_seen = bool(saved["qn_seen"])
        self.running[0], self.running[1] = float(saved["running_sum"]), int(saved["running_n"])
        self.load_record(saved)
        if self.lbfgs is not None:
            load_lbfgs(self.lbfgs, saved)
        for _ in range(self.epoch):  # the schedule's position (its random stream is re-derived from rng)
            next(self.orders)

    def result(self, used_threads: int, setup_time: float, has_test: bool) -> HamsiResult:
        o, lbfgs, problem = self.opts, self.lbfgs, self.problem
        options = {
            "eta": o.eta, "gamma": o.gamma, "eta_gd": o.eta_gd, "gamma_gd": o.gamma_gd, "memory": o.memory,
            "beta_counter": o.beta_counter, "beta_floor": o.beta_floor, "sigma_mode": o.sigma_mode,
            "sigma0": o.sigma0, "curvature": o.curvature,
            "curvature_tol": lbfgs.tol if lbfgs is not None else None, "safeguard": o.safeguard,
            "restart_growth": o.restart_growth, "l2": problem.l2,
            "scaling": problem.scaling, "rank": problem.rank, "n_subsets": self.part.n_subsets,
        }  # fmt: skip
        U_out, V_out, row_bias, col_bias = problem.split(self.U, self.V)
        return HamsiResult(
            U=U_out, V=V_out, method=self.method, scheme=self.part.scheme, schedule=o.schedule,
            status=self.status, n_epochs=self.epoch, n_steps=self.steps,
            history_time=np.asarray(self.hist_t), history_epoch=np.asarray(self.hist_e, dtype=np.int64),
            history_rmse=np.asarray(self.hist_r),
            history_test_rmse=np.asarray(self.hist_te) if has_test else None,
            timings=MappingProxyType(self.timings),
            n_pairs_accepted=lbfgs.n_accepted if lbfgs is not None else 0,
            n_pairs_rejected=lbfgs.n_rejected if lbfgs is not None else 0,
            n_restarts=self.guard.n_restarts, n_threads=used_threads,
            partition_balance=MappingProxyType(self.part.balance()), options=MappingProxyType(options),
            message=self.message or f"{self.method}: {self.epoch} epochs ({self.status})",
            row_bias=row_bias, col_bias=col_bias, offset=float(problem.offset or 0.0),
            setup_time=setup_time, eval_time=self.eval_time,
        )  # fmt: skip


def _check_inputs(
    problem: MatrixFactorizationProblem, opts: HamsiOptions, test: Ratings | None, solver: str
) -> None:
    """The checks of a run that involve the problem (the options are checked already)."""
    from dpopt.matrix_factorization import MatrixFactorizationProblem

    if not isinstance(problem, MatrixFactorizationProblem):
        raise InvalidParameterError(
            "problem: expected a dpopt.matrix_factorization.MatrixFactorizationProblem"
        )
    problem._require_uniform(f'{solver} (use solver="als")')
    if opts.early_stopping and test is None:
        raise InvalidParameterError("early_stopping: needs a validation split passed as test=")
    if test is not None and (not isinstance(test, Ratings) or test.shape != problem.shape):
        raise InvalidParameterError(
            f"test: expected a Ratings of shape {problem.shape} (same users and items)"
        )


def _check_footprint(problem: MatrixFactorizationProblem, method: str, memory: int) -> None:
    """Refuse a run whose factors, gradients and working copies (~8 vectors of
    (n_rows + n_cols) * rank float64) plus the 2 * memory L-BFGS pairs do not fit in memory."""
    n_params = float(problem.shape[0] + problem.shape[1]) * problem.width
    check_memory(
        8.0 * n_params * (8 + (2 * memory if method == "hamsi" else 0)),
        f"rank={problem.rank} on a {problem.shape[0]} x {problem.shape[1]} matrix ({method}, memory={memory})",
        fix="use a smaller rank (or a smaller L-BFGS memory)",
    )


def _run(
    problem: MatrixFactorizationProblem,
    partition: Partition | str | None,
    method: str,
    opts: HamsiOptions,
    *,
    test: Ratings | None,
    init: tuple[Any, ...] | None,
    rng: RNGLike,
    callback: Callback | None,
) -> HamsiResult:
    """Run HAMSI or mb-GD (``method``) with the checked options ``opts``: set up, evaluate the
    start, run the outer iterations until a hook (or ``max_iter``) stops them, hand back."""
    _check_inputs(problem, opts, test, "hamsi and mbgd")
    _check_footprint(problem, method, opts.memory)
    ckpt = state_path(opts.checkpoint_dir) if opts.checkpoint_dir is not None else None
    t_setup = time.perf_counter()
    r_init, r_sched, r_part = (as_generator(c) for c in spawn(rng, ["init", "schedule", "partition"]))
    part = _resolve_partition(problem, partition, opts.n_subsets, opts.n_threads, r_part)
    x = _initial_point(problem, init, opts.init_scale, r_init)
    with (
        _k.thread_count(opts.n_threads) as used_threads,
        _k.BlockRunner(used_threads, opts.backend) as blocks,
    ):
        run = _SharedRun(problem, method, opts, part, x, _plan(problem, part, used_threads), blocks)
        _k.warmup()  # load/compile kernels before the clock starts
        run.held_out = problem.evaluator(test) if test is not None else None
        run.hooks = shared_memory_hooks(run, ckpt, callback)
        setup_time = time.perf_counter() - t_setup
        run.evaluate(0)
        K = part.n_subsets
        run.orders = subset_schedule(
            K, opts.schedule, repeat_first=(method == "hamsi" and K > 1), rng=r_sched
        )
        for hook in run.hooks:
            hook.on_start(run)
        while run.epoch < opts.max_iter and not run.stop:
            run.outer_iteration(next(run.orders))
            run.epoch += 1
            run.end_of_epoch()
        for hook in run.hooks:
            hook.on_run_end(run)
    return run.result(used_threads, setup_time, test is not None)
