"""HAMSI with STRATA-B on the engines of :mod:`dpopt.distributed.engines`: the picklable shard spec
and program (``_ShardSpec``, ``_HamsiShard``, the factory ``_make_hamsi_shard``) and
:func:`hamsi_distributed`."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import check_int, check_nonneg, check_positive
from dpopt.datasets import Ratings
from dpopt.exceptions import InvalidParameterError
from dpopt.iteration import Callback, deprecated_alias, notify
from dpopt.randomness import RNGLike, as_generator, spawn
from dpopt.solvers import _mf_kernels as _k
from dpopt.solvers.hamsi.lbfgs import CompactLBFGS, _dot, _matvec, _pair_products
from dpopt.solvers.hamsi.result import HamsiResult
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
    (``Wᵀg`` and the curvature-pair products, 2M + 3M + 5 numbers); (2) sum the partials in shard
    order (every shard then holds the same small matrices), store the pair, update the own slices,
    publish the new ``V_r``.  DSGD-style, only column blocks and O(M) scalars travel.
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
        self.g = np.zeros_like(self.x)
        self.gU = np.zeros_like(spec.U0)
        self.ref_x: Float | None = None
        self.ref_g: Float | None = None
        self.pair: tuple[Float, Float] | None = None
        self.sse = 0.0

    def _V(self) -> Float:
        return self.x[self.nU :].reshape(-1, self.spec.rank)

    def initial_output(self) -> Float:
        return self._V().ravel().copy()

    def step(self, t: int, inputs: Sequence[Float]) -> tuple[Float, Any]:
        sp = self.spec
        o = sp.options
        i, phase = divmod(t, 3)
        epoch, step, k, first, closing = sp.steps[i]
        P, r, m = sp.n_shards, sp.r, self.mem.memory
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
            out = np.zeros(3 + 3 * m + 2 * m + 2)
            self.pair = None
            if closing and self.ref_x is not None and self.ref_g is not None:
                s_ = self.x - self.ref_x
                y_ = self.g - self.ref_g
                self.pair = (s_, y_)
                out[: 3 + 3 * m] = _pair_products(self.mem.A, s_, y_)
                out[-2], out[-1] = _dot(s_, self.g), _dot(y_, self.g)
            out[3 + 3 * m : 3 + 5 * m] = _matvec(self.mem.A, self.g)
            return out, {}
        # phase 2: reduce in shard order, then update the own slices
        tot = np.zeros_like(np.asarray(inputs[0], dtype=np.float64))
        for part in inputs:
            tot = tot + np.asarray(part, dtype=np.float64)
        v = tot[3 + 3 * m : 3 + 5 * m].copy()
        if self.pair is not None:
            s_, y_ = self.pair
            accepted = self.mem.push_reduced(
                s_, y_, float(tot[0]), float(tot[1]), float(tot[2]), tot[3 : 3 + m], tot[3 + m : 3 + 2 * m],
                tot[3 + 2 * m : 3 + 3 * m],
            )  # fmt: skip
            if accepted:
                slot = self.mem.order[-1]
                v[slot], v[m + slot] = tot[-2], tot[-1]
        if first:
            self.ref_x, self.ref_g = self.x.copy(), self.g.copy()
        counter = step + 1 if o["beta_counter"] == "inner" else epoch + 1
        if self.mem.full:
            beta = max(o["beta_floor"], (o["eta"] * counter) ** o["gamma"])
            coefs = self.mem.coefficients_from(v)
            _k.lbfgs_apply(self.x, self.g, self.mem.A, coefs, self.mem.sigma, 1.0 / beta)
        else:
            beta = (o["eta_gd"] * counter) ** o["gamma_gd"]
            self.x -= self.g * (1.0 / beta)
        return self._V().ravel().copy(), {}

    def call(self, name: str, *args: Any) -> Any:
        if name == "x":
            return self.x.copy()
        if name == "pairs":
            return (self.mem.n_accepted, self.mem.n_rejected)
        raise ValueError(f"unknown shard call {name!r}")


def _make_hamsi_shard(spec: _ShardSpec) -> _HamsiShard:
    """Engine factory (module level, hence picklable)."""
    return _HamsiShard(spec)


def hamsi_distributed(
    problem: MatrixFactorizationProblem,
    n_shards: int = 2,
    *,
    engine: Any = "inprocess",
    schedule: Literal["det", "stoc"] = "det",
    eta: float = 0.06,
    gamma: float = 0.51,
    memory: int = 5,
    eta_gd: float = 0.001,
    gamma_gd: float = 0.51,
    beta_counter: Literal["outer", "inner"] = "inner",
    beta_floor: float = 1.0,
    sigma_mode: Literal["thesis", "running_min"] = "thesis",
    sigma0: float = 500.0,
    curvature: Literal["relative", "reference", "thesis"] = "relative",
    curvature_tol: float | None = None,
    max_iter: int | None = None,
    init: tuple[Any, ...] | None = None,
    init_scale: float | Literal["spectral"] | None = 1.0,
    test: Ratings | None = None,
    rng: RNGLike,
    callback: Callback | None = None,
    max_epochs: int | None = None,
) -> HamsiResult:
    """HAMSI (L-BFGS, STRATA-B with ``P = n_shards``) on the engines of :mod:`dpopt.distributed.engines`.

    One shard program per row block (``"inprocess"``, ``"processes"`` or ``"ray"``: one actor per
    shard); shard ``r`` owns row block ``R_r`` of U and column block ``C_r`` of V; in stratum ``s`` it
    processes block ``R_r x C_{(r+s) mod P}`` with the column factors sent by their owner, and the
    L-BFGS step needs one all-reduce of ``2M`` (plus ``3M + 5`` for a curvature pair) scalars per
    inner step (spec §2.11).  The iterates equal those of :func:`hamsi` on
    :func:`~dpopt.distributed.partition.strata_b` with ``safeguard=False`` up to the summation order of
    the inner products, and are identical on every engine.  Options as in :func:`hamsi`; the
    restart safeguard is not available here.  ``max_iter`` (default 20) counts outer iterations
    (``max_epochs=`` is the deprecated old name); ``callback`` as in :func:`hamsi`.
    """
    from dpopt.distributed.engines import Engine, make_engine
    from dpopt.distributed.partition import strata_b
    from dpopt.matrix_factorization import MatrixFactorizationProblem

    if not isinstance(problem, MatrixFactorizationProblem):
        raise InvalidParameterError(
            "problem: expected a dpopt.matrix_factorization.MatrixFactorizationProblem"
        )
    P = check_int(n_shards, "n_shards")
    if beta_counter not in ("outer", "inner"):
        raise InvalidParameterError("beta_counter: must be 'outer' or 'inner'")
    limit = deprecated_alias(
        {"max_epochs": max_epochs} if max_epochs is not None else {},
        "max_epochs",
        "max_iter",
        max_iter,
        where="hamsi_distributed",
    )
    max_epochs = check_int(20 if limit is None else limit, "max_iter", minimum=0)
    options = {
        "eta": check_positive(eta, "eta"), "gamma": check_positive(gamma, "gamma"),
        "eta_gd": check_positive(eta_gd, "eta_gd"), "gamma_gd": check_positive(gamma_gd, "gamma_gd"),
        "memory": check_int(memory, "memory"), "beta_counter": beta_counter,
        "beta_floor": check_nonneg(beta_floor, "beta_floor"), "sigma_mode": sigma_mode, "sigma0": sigma0,
        "curvature": curvature, "curvature_tol": curvature_tol,
    }  # fmt: skip
    if test is not None and (not isinstance(test, Ratings) or test.shape != problem.shape):
        raise InvalidParameterError(
            f"test: expected a Ratings of shape {problem.shape} (same users and items)"
        )
    r_init, r_sched, _ = (as_generator(c) for c in spawn(rng, ["init", "schedule", "partition"]))
    part = strata_b(problem.ratings, P)
    assert part.row_cuts is not None and part.col_cuts is not None
    rc, cc = part.row_cuts, part.col_cuts
    from dpopt.solvers.hamsi._execution import _initial_point

    U0, V0 = (a.copy() for a in problem.unpack(_initial_point(problem, init, init_scale, r_init)))
    rt = problem.ratings
    mu = float(problem.offset or 0.0)
    orders = subset_schedule(P, schedule, repeat_first=P > 1, rng=r_sched)
    steps: list[tuple[int, int, int, bool, bool]] = []
    n_steps = 0
    for epoch in range(max_epochs):
        order = next(orders)
        for ell, k in enumerate(order):
            first = P == 1 or ell == 0
            closing = P == 1 or ell == len(order) - 1
            steps.append((epoch, n_steps, k, first, closing))
            n_steps += 1
    n = problem.n_ratings
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
                r=r,
                n_shards=P,
                rank=problem.width,
                U0=np.ascontiguousarray(U0[rc[r] : rc[r + 1]]),
                V0=np.ascontiguousarray(V0[cc[r] : cc[r + 1]]),
                blocks=tuple(blocks),
                reg=reg,
                weight=problem.weight,
                steps=tuple(steps),
                options=dict(options),
                share=share,
                reg_U=problem._reg_U if problem.bias else None,
                reg_V=problem._reg_V if problem.bias else None,
            )
        )
    eng = make_engine(engine)
    own = not isinstance(engine, Engine)
    timings = {"gradient": 0.0, "update": 0.0, "hessian": 0.0}
    phase_name = ("gradient", "hessian", "update")
    hist_t: list[float] = []
    hist_e: list[int] = []
    hist_r: list[float] = []
    hist_te: list[float] = []
    elapsed = 0.0
    U = U0.copy()
    V = V0.copy()
    held_out = problem.evaluator(test) if test is not None else None
    width = problem.width

    def gather() -> None:
        for r, xr in enumerate(eng.call("x")):
            nU = (rc[r + 1] - rc[r]) * width
            U[rc[r] : rc[r + 1]] = xr[:nU].reshape(-1, width)
            V[cc[r] : cc[r + 1]] = xr[nU:].reshape(-1, width)
        hist_t.append(elapsed)
        hist_r.append(problem.rmse(U, V))
        if held_out is not None:
            hist_te.append(held_out(U, V))

    status, message = "max_iter", ""
    try:
        _k.warmup()
        eng.start(_make_hamsi_shard, specs, [list(range(P))] * P)
        hist_e.append(0)
        gather()
        t = 0
        done_epochs = 0
        for epoch in range(max_epochs):
            while t < 3 * len(steps) and steps[t // 3][0] == epoch:
                t0 = time.perf_counter()
                eng.step(t)
                dt = time.perf_counter() - t0
                timings[phase_name[t % 3]] += dt
                elapsed += dt
                t += 1
            done_epochs = epoch + 1
            hist_e.append(done_epochs)
            gather()
            if not math.isfinite(hist_r[-1]):
                status, message = "failed", "diverged (non-finite values)"
                break
            if notify(callback, done_epochs, rmse=hist_r[-1], elapsed=elapsed):
                status = "stopped"
                break
        pairs = eng.call("pairs")[0]
    finally:
        if own:
            eng.close()
    U_out, V_out, row_bias, col_bias = problem.split(U, V)
    return HamsiResult(
        U=U_out,
        V=V_out,
        method="hamsi",
        scheme=f"strata-b/{eng.name}",
        schedule=schedule,
        status=status,
        n_epochs=done_epochs,
        n_steps=sum(1 for st in steps if st[0] < done_epochs),
        history_time=np.asarray(hist_t),
        history_epoch=np.asarray(hist_e, dtype=np.int64),
        history_rmse=np.asarray(hist_r),
        history_test_rmse=np.asarray(hist_te) if test is not None else None,
        timings=MappingProxyType(timings),
        n_pairs_accepted=int(pairs[0]),
        n_pairs_rejected=int(pairs[1]),
        n_restarts=0,
        n_threads=P,
        partition_balance=MappingProxyType(part.balance()),
        options=MappingProxyType(dict(options, n_subsets=P, engine=eng.name)),
        message=message or f"hamsi_distributed: {done_epochs} epochs ({status})",
        row_bias=row_bias,
        col_bias=col_bias,
        offset=mu,
    )
