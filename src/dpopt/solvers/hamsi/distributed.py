"""HAMSI with STRATA-B on the engines of :mod:`dpopt.distributed.engines`: the picklable shard spec
and program (``_ShardSpec``, ``_HamsiShard``, the factory ``_make_hamsi_shard``) and
:func:`hamsi_distributed`."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import check_int
from dpopt.datasets import Ratings
from dpopt.exceptions import InvalidParameterError
from dpopt.iteration import Callback
from dpopt.randomness import RNGLike, as_generator, spawn
from dpopt.solvers import _mf_kernels as _k
from dpopt.solvers.hamsi._distributed_run import DistributedRun, StallRescue, distributed_hooks
from dpopt.solvers.hamsi._execution import _check_inputs, _initial_point
from dpopt.solvers.hamsi.checkpoint import lbfgs_state, load_lbfgs, load_state, state_path
from dpopt.solvers.hamsi.lbfgs import CompactLBFGS, _dot, _matvec, _pair_products
from dpopt.solvers.hamsi.options import HamsiOptions, resolve_options
from dpopt.solvers.hamsi.result import HamsiResult
from dpopt.solvers.hamsi.safeguard import RestartSafeguard
from dpopt.solvers.hamsi.schedule import subset_schedule

if TYPE_CHECKING:
    from dpopt.matrix_factorization import MatrixFactorizationProblem

Float = NDArray[np.float64]


# ============================================================================ distributed (engines)
@dataclass(frozen=True)
class _ShardSpec:
    """Everything shard ``r`` of a distributed STRATA-B run needs (picklable)."""

    r: int
    n_shards: int
    rank: int
    U0: Float
    V0: Float
    blocks: tuple[
        tuple[NDArray[np.integer[Any]], NDArray[np.integer[Any]], Float], ...
    ]  # per stratum, local ids
    reg: tuple[float, ...]  # l2 share per stratum
    weight: float
    steps: tuple[tuple[int, int, int, bool, bool], ...]  # (epoch, step, stratum, first, closing)
    options: dict[str, Any]
    share: tuple[float, ...] = ()  # share of the ratings per stratum (ridge of the biased model)
    reg_U: Float | None = None  # per-column ridge weights of the biased model (None: plain model)
    reg_V: Float | None = None


class _HamsiShard:
    """Shard ``r`` owns rows ``R_r`` of U and ``C_r`` of V (and their L-BFGS slices).

    Every inner step takes three engine rounds: (0) compute the block ``R_r x C_c`` of the current
    stratum with the column block ``V_c`` published by its owner, publish its ``gV_c``; (1) gather
    ``gV_r`` from the shard that processed column block ``r``, publish the partial inner products
    (``Wᵀg``, the curvature-pair products and the block's loss, 2M + 3M + 7 numbers); (2) sum the
    partials in shard order (every shard then holds the same small matrices and the same subset
    loss), let the restart safeguard judge the loss (identical decision on every shard), store the
    pair, update the own slices, publish the new ``V_r``.  DSGD-style, only column blocks and O(M)
    scalars travel.  After a restart the remaining steps of the outer iteration are skipped, as in
    :func:`~dpopt.solvers.hamsi.hamsi`.
    """

    def __init__(self, spec: _ShardSpec) -> None:
        self.spec = spec
        o = spec.options
        self.nU = spec.U0.size
        self.x = np.concatenate([spec.U0.ravel(), spec.V0.ravel()]).astype(np.float64)
        self.mem = CompactLBFGS(
            self.x.shape[0], o["memory"], sigma_mode=o["sigma_mode"], sigma0=o["sigma0"],
            curvature=o["curvature"], curvature_tol=o["curvature_tol"],
        )  # fmt: skip
        self.guard = RestartSafeguard(spec.n_shards, enabled=o["safeguard"], growth=o["restart_growth"])
        self.g = np.zeros_like(self.x)
        self.gU = np.zeros_like(spec.U0)
        self.ref_x: Float | None = None
        self.ref_g: Float | None = None
        self.safe_x: Float | None = None  # start of the current outer iteration (checked)
        self.pair: tuple[Float, Float] | None = None
        self.sse = 0.0
        self.n_steps = 0  # inner steps taken (skipped ones excluded), as hamsi counts them
        self.step_base = 0  # n_steps at the last stall rescue: the step schedules restart there
        self.n_qn = 0  # quasi-Newton steps taken
        self.skip = False  # a restart skips the rest of the outer iteration
        self.failed = False
        self.epoch_base = 0  # outer iterations done at the last stall rescue
        m = self.mem.memory
        self._len = 3 + 5 * m + 4  # pair products, A g, s·g, y·g, subset loss, non-finite flag

    def _V(self) -> Float:
        return self.x[self.nU :].reshape(-1, self.spec.rank)

    def initial_output(self) -> Float:
        return self._V().ravel().copy()

    def step(self, t: int, inputs: Sequence[Float]) -> tuple[Float, Any]:
        sp = self.spec
        o = sp.options
        i, phase = divmod(t, 3)
        epoch, _, k, first, closing = sp.steps[i]
        P, r, m = sp.n_shards, sp.r, self.mem.memory
        if phase == 0 and first:
            self.skip = False
        if self.skip or self.failed:  # the rest of the outer iteration after a restart
            if phase == 0:
                return np.zeros(0), {}
            if phase == 1:
                return np.zeros(self._len), {}
            return self._V().ravel().copy(), self._diag()
        if phase == 0:
            c = (r + k) % P
            Vc = np.ascontiguousarray(inputs[c]).reshape(-1, sp.rank)
            U = self.x[: self.nU].reshape(-1, sp.rank)
            self.gU = np.zeros_like(U)
            gVc = np.zeros_like(Vc)
            rows, cols, vals = sp.blocks[k]
            self.sse = float(
                _k.gradient_block(U, Vc, rows, cols, vals, 0, rows.shape[0], sp.weight, self.gU, gVc)
            ) if rows.shape[0] else 0.0  # fmt: skip
            return gVc.ravel(), {"sse": self.sse}
        if phase == 1:
            gVr = np.asarray(inputs[(r - k) % P], dtype=np.float64)
            self.g = np.concatenate([self.gU.ravel(), gVr])
            if sp.reg_U is not None and sp.reg_V is not None:
                L = sp.rank - 2  # working width = rank + 2: [U | p | 1] and [V | 1 | q]
                gU_, gV_ = self.g[: self.nU].reshape(-1, sp.rank), self.g[self.nU :].reshape(-1, sp.rank)
                xU, xV = self.x[: self.nU].reshape(-1, sp.rank), self.x[self.nU :].reshape(-1, sp.rank)
                _k.regularize(gU_, xU, sp.share[k] * sp.reg_U, L + 1)
                _k.regularize(gV_, xV, sp.share[k] * sp.reg_V, L)
            elif sp.reg[k]:
                self.g += sp.reg[k] * self.x
            out = np.zeros(self._len)
            self.pair = None
            if closing and self.ref_x is not None and self.ref_g is not None:
                s_ = self.x - self.ref_x
                y_ = self.g - self.ref_g
                self.pair = (s_, y_)
                out[: 3 + 3 * m] = _pair_products(self.mem.A, s_, y_)
                out[-4], out[-3] = _dot(s_, self.g), _dot(y_, self.g)
            out[3 + 3 * m : 3 + 5 * m] = _matvec(self.mem.A, self.g)
            out[-2] = self.sse
            out[-1] = 0.0 if math.isfinite(self.sse) and np.isfinite(self.g).all() else 1.0
            return out, {}
        # phase 2: reduce in shard order, judge the subset loss, then update the own slices
        tot = np.zeros(self._len)
        for part in inputs:
            tot = tot + np.asarray(part, dtype=np.float64)
        self.n_steps += 1
        sse = float(tot[-2])
        bad = not (tot[-1] == 0.0 and math.isfinite(sse))
        verdict = self.guard.check(k, sse, bad, self.safe_x is not None)
        if verdict == "failed":
            self.failed = True
            return self._V().ravel().copy(), self._diag()
        if verdict == "restart" and self.safe_x is not None:
            # steps since the last safe point increased this subset's loss (or overflowed): return
            # to that point, clear the memory, skip the rest of the outer iteration
            self.x[:] = self.safe_x
            self.mem.reset()
            self.ref_x = self.ref_g = None
            self.skip = True
            return self._V().ravel().copy(), self._diag()
        v = tot[3 + 3 * m : 3 + 5 * m].copy()
        if self.pair is not None:
            s_, y_ = self.pair
            accepted = self.mem.push_reduced(
                s_, y_, float(tot[0]), float(tot[1]), float(tot[2]), tot[3 : 3 + m], tot[3 + m : 3 + 2 * m],
                tot[3 + 2 * m : 3 + 3 * m],
            )  # fmt: skip
            if accepted:
                slot = self.mem.order[-1]
                v[slot], v[m + slot] = tot[-4], tot[-3]
        if first:
            self.ref_x, self.ref_g = self.x.copy(), self.g.copy()
            self.safe_x = self.ref_x
            self.guard.new_safe_point()
        counter = (
            self.n_steps - self.step_base if o["beta_counter"] == "inner" else epoch + 1 - self.epoch_base
        )
        if self.mem.full:
            beta = max(o["beta_floor"], (o["eta"] * counter) ** o["gamma"])
            coefs = self.mem.coefficients_from(v)
            _k.lbfgs_apply(self.x, self.g, self.mem.A, coefs, self.mem.sigma, self.guard.qn_scale / beta)
            self.guard.stepped(quasi_newton=True)
            self.n_qn += 1
        else:
            beta = (o["eta_gd"] * counter) ** o["gamma_gd"]
            self.x -= self.g * (self.guard.gd_scale / beta)
            self.guard.stepped(quasi_newton=False)
        return self._V().ravel().copy(), self._diag()

    def _diag(self) -> dict[str, Any]:
        return {
            "failed": self.failed, "restarts": self.guard.n_restarts, "steps": self.n_steps,
            "pairs": (self.mem.n_accepted, self.mem.n_rejected), "qn": self.n_qn,
        }  # fmt: skip

    def snapshot(self) -> dict[str, Any]:
        """The whole shard state between outer iterations (copies; arrays and numbers only)."""
        state: dict[str, Any] = {
            "x": self.x.copy(), "n_steps": self.n_steps, "n_qn": self.n_qn, "skip": self.skip,
            "failed": self.failed, "step_base": self.step_base, "epoch_base": self.epoch_base,
            **lbfgs_state(self.mem, copy=True), **self.guard.state(),
        }  # fmt: skip
        for name in ("ref_x", "ref_g", "safe_x"):
            value = getattr(self, name)
            if value is not None:
                state[name] = value.copy()
        return state

    def restore(self, state: dict[str, Any]) -> Float:
        """Continue from :meth:`snapshot` (also read back from a file); returns the published ``V_r``."""
        self.x[:] = state["x"]
        self.n_steps, self.skip, self.failed = (
            int(state["n_steps"]),
            bool(state["skip"]),
            bool(state["failed"]),
        )
        self.n_qn = int(state["n_qn"])
        self.step_base = int(state.get("step_base", 0))
        self.epoch_base = int(state.get("epoch_base", 0))
        load_lbfgs(self.mem, state)
        self.guard.load(state)
        for name in ("ref_x", "ref_g", "safe_x"):
            setattr(self, name, np.array(state[name], dtype=np.float64) if name in state else None)
        if self.safe_x is not None and self.ref_x is not None and np.array_equal(self.safe_x, self.ref_x):
            self.safe_x = self.ref_x
        return self.initial_output()

    def rescue(self, U: Float, V: Float, row_cut: Sequence[int], col_cut: Sequence[int], epoch: int) -> None:
        """Start afresh from the working factors ``U``, ``V`` (all rows; the shard keeps its block):
        empty L-BFGS memory, a new safeguard (its restart count kept), step schedules from zero."""
        r = self.spec.r
        self.x[: self.nU] = np.asarray(U[row_cut[r] : row_cut[r + 1]], dtype=np.float64).ravel()
        self.x[self.nU :] = np.asarray(V[col_cut[r] : col_cut[r + 1]], dtype=np.float64).ravel()
        self.mem.reset()
        restarts = self.guard.n_restarts
        o = self.spec.options
        self.guard = RestartSafeguard(self.spec.n_shards, enabled=o["safeguard"], growth=o["restart_growth"])
        self.guard.n_restarts = restarts
        self.ref_x = self.ref_g = self.safe_x = None
        self.pair = None
        self.skip = False
        self.step_base, self.epoch_base = self.n_steps, int(epoch)

    def call(self, name: str, *args: Any) -> Any:
        if name == "x":
            return self.x.copy()
        if name == "pairs":
            return (self.mem.n_accepted, self.mem.n_rejected)
        if name == "snapshot":
            return self.snapshot()
        if name == "restore":
            return self.restore(*args)
        if name == "rescue":
            return self.rescue(*args)
        raise ValueError(f"unknown shard call {name!r}")


def _make_hamsi_shard(spec: _ShardSpec) -> _HamsiShard:
    """Engine factory (module level, hence picklable)."""
    return _HamsiShard(spec)


def hamsi_distributed(
    problem: MatrixFactorizationProblem,
    n_shards: int = 2,
    *,
    engine: Any = "inprocess",
    options: HamsiOptions | None = None,
    rng: RNGLike,
    test: Ratings | None = None,
    init: tuple[Any, ...] | None = None,
    callback: Callback | None = None,
    **keywords: Any,
) -> HamsiResult:
    """HAMSI (L-BFGS, STRATA-B with ``P = n_shards``) on the engines of :mod:`dpopt.distributed.engines`.

    One shard program per row block (``"inprocess"``, ``"processes"`` or ``"ray"``: one worker
    process or actor per shard); shard ``r`` owns row block ``R_r`` of U and column block ``C_r``
    of V; in stratum ``s`` it processes block ``R_r x C_{(r+s) mod P}`` with the column factors
    sent by their owner, and the L-BFGS step needs one all-reduce of ``2M`` (plus ``3M + 5`` for a
    curvature pair, and 2 for the subset loss) scalars per inner step (spec §2.11).  The iterates
    equal those of :func:`hamsi` on :func:`~dpopt.distributed.partition.strata_b` (same
    ``safeguard``) up to the summation order of the inner products, and are identical on every
    engine.  HAMSI is an optimizer and is **not** differentially private.

    Parameters
    ----------
    problem : MatrixFactorizationProblem
    n_shards : int, default 2
        ``P``: shards (workers) and strata.
    options : HamsiOptions or None, default None
        All the options below in one checked object (:class:`HamsiOptions`; start from
        ``HamsiOptions.for_solver("hamsi_distributed")`` for this function's defaults); keyword
        arguments given as well override its fields.
    engine : {"inprocess", "processes", "ray"} or Engine, default "inprocess"
        Where the shards run.  By name, an engine with one worker per shard is started and closed
        here; pass an :class:`~dpopt.distributed.engines.Engine` instance to choose its time limits
        (``timeout=``, ``timeout_floor=``: every wait on a worker has one) or a Ray cluster
        (``address=``), or to keep the workers for several runs.
    schedule, eta, gamma, memory, eta_gd, gamma_gd, beta_counter, beta_floor, sigma_mode, sigma0, curvature, curvature_tol
        As in :func:`hamsi`.
    safeguard, restart_growth
        The restart safeguard of :func:`hamsi` (:mod:`dpopt.solvers.hamsi.safeguard`): every
        shard holds a copy, fed with the same all-reduced subset losses, so all take the same
        decision; ``n_restarts`` counts the restarts.
    max_iter : int, default 20
        Outer iterations (``max_epochs=`` is the deprecated old name).
    init, init_scale, test, rng
        As in :func:`hamsi` (``rng`` keys ``"init"`` and ``"schedule"``).
    callback : callable, optional
        As in :func:`hamsi`; after a worker failure, the outer iterations replayed from the
        checkpoint are reported again.
    tol, patience, early_stopping
        As in :func:`hamsi` (the training RMSE is evaluated exactly after every outer iteration):
        stop with status ``"converged"`` after ``patience`` evaluations that improved the monitored
        value by less than ``tol`` (relative); outer iterations of the gradient warm-up or with a
        safeguard restart count as progress.  ``early_stopping`` monitors the RMSE on ``test``
        and hands back the best-validation factors.
    time_budget : float or None, default None
        Stop (status ``"max_time"``) after the first outer iteration that ends with more than
        this many seconds of optimization (``elapsed``: set-up and evaluations excluded, as in
        :func:`hamsi`); ``None``: no limit.  A resumed run counts the seconds of the run it
        continues.
    stall_rescue, stall_window, stall_tol
        Stall detection: when the training RMSE improved by less than ``stall_tol`` (relative)
        per outer iteration on average over ``stall_window`` outer iterations without a safeguard
        restart, the spectral start (``init_scale="spectral"``, from ``rng`` key ``"rescue"``) is
        computed once and, if its training RMSE is lower than the current one, every shard starts
        afresh from it (empty L-BFGS memory, new safeguard, step schedules from zero).  The issue-17
        case (2M uncentred ratings, no biases, ``init_scale=1.0``, 2 shards: training RMSE 3.03
        after 80 outer iterations) is rescued after iteration 18 and ends at 0.544, as 1 shard
        does (``docs/mf_peers.md``).  At most one rescue per run; a run slowing down near its
        optimum pays one spectral start (seconds on millions of ratings) and goes on unchanged.
        ``n_rescues`` in ``options`` and the message report it.
    checkpoint_every : int, default 5
        Outer iterations between checkpoints of every shard's state (factors, L-BFGS memory,
        safeguard), kept in the driver's memory and, with ``checkpoint_dir``, written to disk.
    max_recoveries : int, default 3
        A worker that dies (SIGKILL, ``ray.kill``, a lost node) or does not answer within the
        engine's time limit is replaced: all workers restart from the last checkpoint and the
        outer iterations since are replayed, with the same result as an uninterrupted run, at most
        this many times; then, or when a shard program itself raises, the
        :class:`~dpopt.distributed.engines.EngineError` (naming the shard and round) is raised.
        ``n_recoveries`` counts them.
    checkpoint_dir : str, path or None
        Durable run state: every ``checkpoint_every`` outer iterations the shard states and the
        driver's history are written atomically to ``hamsi_state.npz`` there (one file, replaced
        in place; about ``2 memory + 4`` copies of the factors).  Not written after the stopping
        iteration.
    resume : bool, default False
        Continue from the state in ``checkpoint_dir`` if there is one (else start afresh), e.g.
        after the driver crashed.  With the same problem, options, shard count and ``rng`` seed
        the factors and the RMSE history equal those of an uninterrupted run (times differ); a
        state saved by a different run (other data or options) is refused.  A state saved with
        another ``n_shards`` is continued from its factors, on the new shards, with fresh L-BFGS
        memory, safeguard and step schedules (the driver's history, stopping-rule and
        ``time_budget`` accounting are kept; the message says so): a valid run, not the one an
        uninterrupted run would have given, and ``n_steps`` counts the new shards' steps only.

    Returns
    -------
    HamsiResult
        ``scheme`` is ``"strata-b/<engine>"``; ``status`` ``"failed"`` means a non-finite loss with
        nothing to return to (the factors are then the best evaluated ones).

    Raises
    ------
    InvalidParameterError
        For invalid options, a mismatched ``test`` split or a state file of another run.
    TypeError
        For a keyword argument that is not one of the options above.
    EngineError
        When a worker failure cannot be recovered (see ``max_recoveries``).

    Examples
    --------
    >>> from dpopt.datasets import make_low_rank_ratings
    >>> from dpopt.matrix_factorization import MatrixFactorizationProblem
    >>> from dpopt.solvers.hamsi import hamsi_distributed
    >>> p = MatrixFactorizationProblem(make_low_rank_ratings(60, 40, 2, 0.3, rng=0), rank=2)
    >>> res = hamsi_distributed(p, 2, max_iter=30, memory=3, rng=0)
    >>> res.scheme, res.n_epochs, bool(res.rmse < res.history_rmse[0])
    ('strata-b/inprocess', 30, True)
    """
    from dpopt.distributed.engines import make_shard_engine
    from dpopt.distributed.partition import strata_b

    opts = resolve_options("hamsi_distributed", options, keywords)
    _check_inputs(problem, opts, test, "hamsi_distributed")
    P = check_int(n_shards, "n_shards")
    ckpt = state_path(opts.checkpoint_dir) if opts.checkpoint_dir is not None else None
    t_setup = time.perf_counter()
    r_init, r_sched, _, r_rescue = (
        as_generator(c) for c in spawn(rng, ["init", "schedule", "partition", "rescue"])
    )
    rescue_seed = int(r_rescue.integers(2**63 - 1))  # a replayed rescue draws the same start
    fingerprint = _fingerprint(problem, P, opts, ckpt is not None)
    saved, saved_shards = None, P
    if opts.resume and ckpt is not None:
        # another shard count is allowed: the run continues from the saved factors (see resume)
        saved = load_state(ckpt, {k: v for k, v in fingerprint.items() if k != "n_shards"})
        if saved is not None:
            saved_shards = int(str(saved["fp_n_shards"]))
    part = strata_b(problem.ratings, P)
    assert part.row_cuts is not None and part.col_cuts is not None
    U0, V0 = (a.copy() for a in problem.unpack(_initial_point(problem, init, opts.init_scale, r_init)))
    if saved is not None and saved_shards != P:
        _factors_of(saved, strata_b(problem.ratings, saved_shards), problem.width, U0, V0)
    specs, first_round = _shard_specs(problem, part, opts, U0, V0, r_sched)
    eng, own = make_shard_engine(engine, P)
    held_out = problem.evaluator(test) if test is not None else None
    run = DistributedRun(problem, opts, eng, (part.row_cuts, part.col_cuts), U0, V0, held_out)
    run.hooks = distributed_hooks(opts, U0, V0, rescue_seed, (ckpt, fingerprint), callback)
    try:
        _k.warmup()
        shard_states = run.start(_make_hamsi_shard, specs, saved, saved_shards)
        setup_time = time.perf_counter() - t_setup
        run.memory_ckpt = (run.done, shard_states, run.driver_state(run.done))
        run.loop(first_round)
    finally:
        if own:
            eng.close()
    U_out, V_out, row_bias, col_bias = problem.split(run.U, run.V)
    message = run.message
    if run.recoveries or run.notes:
        message = (message + "; " if message else "") + "; ".join(run.notes + run.recoveries)
    n_rescues = next(h.rescues for h in run.hooks if isinstance(h, StallRescue))
    return HamsiResult(
        U=U_out, V=V_out, method="hamsi", scheme=f"strata-b/{eng.name}", schedule=opts.schedule,
        status=run.status, n_epochs=run.done, n_steps=int(run.diag["steps"]),
        history_time=np.asarray(run.hist_t), history_epoch=np.asarray(run.hist_e, dtype=np.int64),
        history_rmse=np.asarray(run.hist_r), history_test_rmse=np.asarray(run.hist_te) if test is not None else None,
        timings=MappingProxyType(run.timings), n_pairs_accepted=int(run.diag["pairs"][0]),
        n_pairs_rejected=int(run.diag["pairs"][1]), n_restarts=int(run.diag["restarts"]), n_threads=P,
        partition_balance=MappingProxyType(part.balance()),
        options=MappingProxyType(dict(_algorithm(opts), n_subsets=P, engine=eng.name, n_rescues=n_rescues)),
        message=message or f"hamsi_distributed: {run.done} epochs ({run.status})", row_bias=row_bias,
        col_bias=col_bias, offset=float(problem.offset or 0.0), setup_time=setup_time, eval_time=run.eval_time,
        n_recoveries=len(run.recoveries),
    )  # fmt: skip


def _algorithm(opts: HamsiOptions) -> dict[str, Any]:
    """The algorithm constants every shard needs (and the result reports)."""
    return {
        "eta": opts.eta, "gamma": opts.gamma, "eta_gd": opts.eta_gd, "gamma_gd": opts.gamma_gd,
        "memory": opts.memory, "beta_counter": opts.beta_counter, "beta_floor": opts.beta_floor,
        "sigma_mode": opts.sigma_mode, "sigma0": opts.sigma0, "curvature": opts.curvature,
        "curvature_tol": opts.curvature_tol, "safeguard": opts.safeguard, "restart_growth": opts.restart_growth,
    }  # fmt: skip


def _fingerprint(
    problem: MatrixFactorizationProblem, P: int, opts: HamsiOptions, durable: bool
) -> dict[str, Any]:
    """What a resumed run must share with the saved one (with the data's digest when durable)."""
    fingerprint = {
        "method": "hamsi_distributed", "shape": problem.shape, "n_ratings": problem.n_ratings,
        "rank": problem.rank, "bias": problem.bias, "l2": problem.l2, "n_shards": P, "schedule": opts.schedule,
        "early_stopping": opts.early_stopping, "offset": float(problem.offset or 0.0),
        "stall_rescue": opts.stall_rescue, "stall_window": opts.stall_window, "stall_tol": opts.stall_tol,
        **_algorithm(opts),
    }  # fmt: skip
    if durable:
        fingerprint["data"] = _data_digest(problem)
    return fingerprint


def _shard_specs(
    problem: MatrixFactorizationProblem, part: Any, opts: HamsiOptions, U0: Float, V0: Float, rng: Any
) -> tuple[list[_ShardSpec], list[int]]:
    """The shard specs of a run (blocks in local ids, the whole step schedule) and the first engine
    round of every outer iteration (and the end)."""
    P, rt, n = part.n_subsets, problem.ratings, problem.n_ratings
    mu = float(problem.offset or 0.0)
    rc, cc = part.row_cuts, part.col_cuts
    orders = subset_schedule(P, opts.schedule, repeat_first=P > 1, rng=rng)
    steps: list[tuple[int, int, int, bool, bool]] = []
    first_round = [0]
    for epoch in range(opts.max_iter):
        order = next(orders)
        for ell, k in enumerate(order):
            first = P == 1 or ell == 0
            closing = P == 1 or ell == len(order) - 1
            steps.append((epoch, len(steps), k, first, closing))
        first_round.append(3 * len(steps))
    share = tuple(float(sum(b.shape[0] for b in part.blocks[s])) / n for s in range(P))
    reg = tuple(problem.l2 * sh for sh in share)
    specs = []
    for r in range(P):
        blocks = []
        for s in range(P):
            idx = part.blocks[s][r]
            c = (r + s) % P
            b_rows, b_cols, b_vals = _k.layout(rt.rows, rt.cols, rt.values, idx, problem.shape, mu)
            b_rows -= rc[r]  # local ids of the shard's row block and of column block c
            b_cols -= cc[c]
            blocks.append((b_rows, b_cols, b_vals))
        specs.append(
            _ShardSpec(
                r=r, n_shards=P, rank=problem.width, U0=np.ascontiguousarray(U0[rc[r] : rc[r + 1]]),
                V0=np.ascontiguousarray(V0[cc[r] : cc[r + 1]]), blocks=tuple(blocks), reg=reg,
                weight=problem.weight, steps=tuple(steps), options=_algorithm(opts), share=share,
                reg_U=problem._reg_U if problem.bias else None, reg_V=problem._reg_V if problem.bias else None,
            )
        )  # fmt: skip
    return specs, first_round


def _factors_of(saved: dict[str, Any], part: Any, width: int, U: Float, V: Float) -> None:
    """Write the working factors held by the shards of a saved state into ``U`` and ``V``
    (``part``: the STRATA-B partition with the saved shard count)."""
    rc, cc = part.row_cuts, part.col_cuts
    for r in range(len(rc) - 1):
        key = f"shard{r}_x"
        if key not in saved:
            raise InvalidParameterError(f"checkpoint_dir: the state file lacks shard {r}'s factors")
        x = np.asarray(saved[key], dtype=np.float64)
        nU = (rc[r + 1] - rc[r]) * width
        if x.shape != (nU + (cc[r + 1] - cc[r]) * width,):
            raise InvalidParameterError(f"checkpoint_dir: shard {r}'s factors do not fit this problem")
        U[rc[r] : rc[r + 1]] = x[:nU].reshape(-1, width)
        V[cc[r] : cc[r + 1]] = x[nU:].reshape(-1, width)


def _data_digest(problem: MatrixFactorizationProblem) -> str:
    """A short digest of the training ratings (a resumed run must see the same data)."""
    h = hashlib.blake2b(digest_size=12)
    rt = problem.ratings
    for a in (rt.rows, rt.cols, rt.values):
        h.update(np.ascontiguousarray(a).view(np.uint8).data)
    return h.hexdigest()
