"""Per-node steps of (private) M-ADMM and the shard program that runs them (engine-agnostic).

Everything here is a pure function of its inputs: the shard program holds the data and state of a
group of nodes, and every random draw is keyed by ``(run key, node, round, purpose)`` so that a
node's trajectory does not depend on how nodes are grouped into shards or on the engine, and a
replayed round releases exactly the same values.

A shard works on all its nodes at once: the neighbour sums are one sparse product (or, on the
complete graph, the total minus the node's own vector), the local subproblems are solved batched
over the nodes (:func:`solve_local_batch`: gradient steps on stacks of node data where the
subproblem is well conditioned, batched Newton on stacks of d x d systems elsewhere) and the noise
of all nodes of a round is drawn in one block from a counter-based stream (:func:`l2_laplace_block`).
Per-node arithmetic never mixes nodes, so the released values do not depend on the sharding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.linalg import cho_factor, cho_solve
from scipy.special import expit, gammaincinv, ndtri

from dpopt.exceptions import DPOptError

Array = NDArray[np.float64]
IntArray = NDArray[np.int64]

PURPOSE_INIT = 0
PURPOSE_NOISE = 1
PURPOSE_INEXACT = 2  # the output noise that covers an inexact (certified) local solve


class LocalSolveError(DPOptError, RuntimeError):
    """A node's local subproblem was not solved to the requested tolerance.

    The privacy bound of penalty/dual/primal perturbation assumes exact local minimisers, so the run
    stops and releases nothing more.  The message names the node, the round and the public
    tolerance, never the achieved (data-dependent) gradient norm.
    """


def l2_laplace_draw(alpha: float, dim: int, rng: np.random.Generator) -> Array:
    """One vector with density ∝ exp(−α‖v‖₂): norm ~ Gamma(dim, 1/α), uniform direction.

    The same law and the same draws as :func:`dpopt.mechanisms.l2_laplace_noise` for a given
    generator (kept here so that engine workers need not import the accounting stack).
    """
    direction = rng.standard_normal((1, dim))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    radius = rng.gamma(shape=dim, scale=1.0 / alpha, size=(1, 1))
    return np.asarray((radius * direction)[0])


def keyed_generator(key: tuple[int, int], node: int, round_: int, purpose: int) -> np.random.Generator:
    """The generator for one draw, keyed by (run key, node, round, purpose)."""
    return np.random.default_rng(np.random.SeedSequence([key[0], key[1], node, round_, purpose]))


def l2_laplace_block(
    rates: Array, dim: int, key: tuple[int, int], round_: int, purpose: int, nodes: IntArray
) -> Array:
    """One l2-Laplace vector per node (density ∝ exp(−α_i‖v‖₂)), drawn in one block.

    Node ``i``'s draw uses the 64-bit words ``[i·K, (i+1)·K)`` (K = 4⌈(dim+1)/4⌉) of a Philox stream
    keyed by ``(run key, round, purpose)``: ``dim`` of them give a Gaussian direction (inverse CDF),
    one the radius ~ Gamma(dim, 1/α_i) (inverse CDF).  The draw of a node therefore does not depend
    on which other nodes are drawn with it (sharding), and contiguous nodes cost one call.
    """
    nodes = np.asarray(nodes, dtype=np.int64)
    rates = np.asarray(rates, dtype=np.float64)
    n = nodes.size
    k = 4 * (-(-(dim + 1) // 4))
    words = np.empty((n, k), dtype=np.uint64)
    seed = np.random.SeedSequence([key[0], key[1], round_, purpose]).generate_state(2, np.uint64)
    start = 0
    while start < n:  # one Philox call per run of consecutive node ids
        stop = start + 1
        while stop < n and nodes[stop] == nodes[stop - 1] + 1:
            stop += 1
        bg = np.random.Philox(key=seed, counter=[int(nodes[start]) * (k // 4), 0, 0, 0])
        words[start:stop] = bg.random_raw((stop - start) * k).reshape(stop - start, k)
        start = stop
    u = ((words[:, : dim + 1] >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53  # in (0, 1)
    z = ndtri(u[:, :dim])
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    radius = gammaincinv(float(dim), u[:, dim]) / rates
    return np.asarray(z * radius[:, None])


# ----------------------------------------------------------------------------------------------
# Losses of the local subproblems (generalised linear: φ(z, y) with z = <x, f>)
# ----------------------------------------------------------------------------------------------

#: φ'' bounds c₁ of the supported losses (for |y| <= 1; ``smooth_hinge``: 1/h).
LOSS_NAMES = ("logistic", "squared", "smooth_hinge")


def loss_terms(name: str, param: float, z: Array, y: Array, order: int) -> tuple[Array, ...]:
    """(φ, φ', φ'') up to ``order`` (0, 1 or 2) of the loss ``name`` at margins z and labels y."""
    if name == "logistic":
        m = y * z
        s = expit(-m)
        out: list[Array] = []
        if order == 0:
            return (np.logaddexp(0.0, -m),)
        out = [np.empty(0), -y * s]
        if order >= 2:
            out.append(y * y * s * (1.0 - s))
        return tuple(out)
    if name == "squared":
        r = z - y
        if order == 0:
            return (0.5 * r * r,)
        return (np.empty(0), r, np.ones_like(r)) if order >= 2 else (np.empty(0), r)
    if name == "smooth_hinge":
        h = param
        m = y * z
        if order == 0:
            return (np.where(m >= 1, 0.0, np.where(m > 1 - h, (1 - m) ** 2 / (2 * h), 1 - m - h / 2)),)
        d1 = y * np.where(m >= 1, 0.0, np.where(m > 1 - h, -(1 - m) / h, -1.0))
        if order >= 2:
            return (np.empty(0), d1, np.where((m < 1) & (m > 1 - h), y * y / h, 0.0))
        return (np.empty(0), d1)
    raise ValueError(f"unknown loss {name!r}")


def loss_curvature(name: str, param: float) -> float:
    """sup φ'' for labels |y| <= 1."""
    return {"logistic": 0.25, "squared": 1.0}.get(name, 1.0 / param if name == "smooth_hinge" else math.nan)


# ----------------------------------------------------------------------------------------------
# Batched local solves
# ----------------------------------------------------------------------------------------------

#: Nodes whose subproblem contracts at least this fast under a fixed gradient step are solved by
#: gradient steps (two passes over the node's data per step, no d x d system); the others by Newton.
GRADIENT_RATE = 0.3
GRADIENT_MAX_ITER = 60


@dataclass(frozen=True)
class NodeStack:
    """Zero-padded data of nodes with the same padded size: X (n, P, d), y (n, P), true sizes (n,)."""

    X: Array
    y: Array
    sizes: IntArray


def padded_size(b: int) -> int:
    """The padded row count used for a node with ``b`` rows (a function of ``b`` only, <= 12.5 % more)."""
    if b <= 16:
        return b
    step = 1 << (b.bit_length() - 4)
    return -(-b // step) * step


def gram_top_eigenvalue(X: Array, *, chunk: int = 256, n_iter: int = 30) -> Array:
    """An estimate of λ_max(X_kᵀX_k) for every node of a stack (power iteration on the d x d Gram matrices).

    Used only to choose the step of the gradient phase (a solver setting: every solve is still
    certified by its final gradient norm).  Slightly enlarged (x 1.1) and capped by the trace
    ‖X_k‖²_F, which is an upper bound.
    """
    n, _, d = X.shape
    out = np.empty(n)
    v0 = np.cos(np.arange(d) + 0.5)
    for a in range(0, n, chunk):
        xs = X[a : a + chunk]
        gram = np.matmul(xs.transpose(0, 2, 1), xs)
        trace = np.trace(gram, axis1=1, axis2=2)
        v = np.broadcast_to(v0, (xs.shape[0], d)).copy()
        lam = np.zeros(xs.shape[0])
        for _ in range(n_iter):
            w = np.matmul(gram, v[:, :, None])[:, :, 0]
            lam = np.linalg.norm(w, axis=1)
            v = w / np.maximum(lam, 1e-300)[:, None]
        out[a : a + chunk] = np.minimum(trace, 1.1 * lam)
    return out


def _margins(X: Array, f: Array) -> Array:
    return np.matmul(X, f[:, :, None])[:, :, 0]


def _xt(X: Array, w: Array) -> Array:
    return np.matmul(w[:, None, :], X)[:, 0, :]


def solve_local_batch(
    stack: NodeStack,
    f0: Array,
    *,
    loss: str,
    loss_param: float,
    cw: Array,
    reg: float,
    lin: Array,
    center: Array,
    pen: Array,
    tol: float,
    max_iter: int,
    abs_tol: float = math.inf,
    data_curvature: Array | None = None,
) -> tuple[Array, Array, Array, IntArray]:
    """Minimise Φ_k(f) = cw_k Σ_n φ(<x_n, f>, y_n) + reg/2‖f‖² + lin_kᵀf + pen_k‖f − center_k‖² for every node k.

    Node k stops when ‖∇Φ_k‖ <= tol·scale_k and ‖∇Φ_k‖ <= ``abs_tol`` (``scale_k`` = the size of
    the gradient's terms, as in :func:`solve_local`).  Φ_k is (reg + 2pen_k)-strongly convex with a
    data curvature of about ``data_curvature[k]`` (default cw_k·c₁·λ_max(X_kᵀX_k)): when the fixed step
    2/(2μ + L) contracts the gradient by at least :data:`GRADIENT_RATE` per step the node takes
    gradient steps (up to :data:`GRADIENT_MAX_ITER`), and the nodes not done by then (or
    ill-conditioned) take damped Newton steps (batched Cholesky-free ``np.linalg.solve`` on the
    stack of d x d Hessians, Armijo backtracking), at most ``max_iter``.

    Returns
    -------
    f (n, d), grad_norm (n,), scale (n,), iterations (n,)
    """
    X, y = stack.X, stack.y
    n, _, d = X.shape
    f = np.array(f0, dtype=np.float64)
    mu = reg + 2.0 * pen
    if data_curvature is None:
        data_curvature = cw * loss_curvature(loss, loss_param) * gram_top_eigenvalue(X)
    lin_norm = np.linalg.norm(lin, axis=1)
    center_norm = np.linalg.norm(center, axis=1)
    data_scale = cw * stack.sizes
    gn = np.full(n, np.inf)
    scale = np.ones(n)
    iters = np.zeros(n, dtype=np.int64)
    done = np.zeros(n, dtype=bool)

    def grad(idx: IntArray, fi: Array, Xi: Array, yi: Array) -> Array:
        z = _margins(Xi, fi)
        d1 = loss_terms(loss, loss_param, z, yi, 1)[1]
        d1 = np.where(_pad_mask(stack, idx), d1, 0.0)
        return np.asarray(
            cw[idx, None] * _xt(Xi, d1) + reg * fi + lin[idx] + 2.0 * pen[idx, None] * (fi - center[idx])
        )

    def converged(idx: IntArray, fi: Array, g: Array) -> NDArray[np.bool_]:
        gnorm = np.linalg.norm(g, axis=1)
        fn = np.linalg.norm(fi, axis=1)
        sc = np.maximum.reduce(
            [
                np.ones(idx.size),
                data_scale[idx],
                lin_norm[idx],
                reg * fn,
                2.0 * pen[idx] * (fn + center_norm[idx]),
            ]
        )
        gn[idx], scale[idx] = gnorm, sc
        return np.asarray((gnorm <= tol * sc) & (gnorm <= abs_tol))

    # gradient phase on the well-conditioned nodes (compacted when fewer than half are still going)
    rate = data_curvature / (2.0 * mu + data_curvature)
    step = 2.0 / (2.0 * mu + data_curvature)
    cols = np.flatnonzero(rate <= GRADIENT_RATE)
    Xw, yw = (X, y) if cols.size == n else (X[cols], y[cols])
    live = np.ones(cols.size, dtype=bool)
    for _ in range(GRADIENT_MAX_ITER + 1):
        n_live = int(live.sum())
        if n_live == 0:
            break
        if n_live < 0.5 * cols.size:
            sel = np.flatnonzero(live)
            cols, Xw, yw, live = cols[sel], Xw[sel], yw[sel], live[sel]
        fw = f[cols]
        g = grad(cols, fw, Xw, yw)
        li = np.flatnonzero(live)
        ok = converged(cols[li], fw[li], g[li])
        done[cols[li[ok]]] = True
        move = li[~ok]
        f[cols[move]] = fw[move] - step[cols[move], None] * g[move]
        iters[cols[move]] += 1
        live[li[ok]] = False
    # Newton phase on the rest
    work = np.flatnonzero(~done)
    newton = np.zeros(n, dtype=np.int64)
    while work.size:
        Xw, yw = (X, y) if work.size == n else (X[work], y[work])
        fw = f[work]
        z = _margins(Xw, fw)
        mask = _pad_mask(stack, work)
        _, d1, d2 = loss_terms(loss, loss_param, z, yw, 2)
        d1 = np.where(mask, d1, 0.0)
        d2 = np.where(mask, d2, 0.0)
        cwk, pk, lk, ck = cw[work], pen[work], lin[work], center[work]
        g = cwk[:, None] * _xt(Xw, d1) + reg * fw + lk + 2.0 * pk[:, None] * (fw - ck)
        ok = converged(work, fw, g)
        done[work[ok]] = True
        over = newton[work] >= max_iter
        keep = ~ok & ~over
        if not keep.any():
            break
        sel = np.flatnonzero(keep)
        work, Xw, yw, fw, z, d2, g = work[sel], Xw[sel], yw[sel], fw[sel], z[sel], d2[sel], g[sel]
        mask = mask[sel]
        cwk, pk, lk, ck = cwk[sel], pk[sel], lk[sel], ck[sel]
        h = np.matmul(Xw.transpose(0, 2, 1), Xw * (cwk[:, None] * d2)[:, :, None])
        h[:, np.arange(d), np.arange(d)] += (reg + 2.0 * pk)[:, None]
        p = np.asarray(np.linalg.solve(h, g[:, :, None])[:, :, 0], dtype=np.float64)

        allk = np.arange(work.size)
        phi = _NewtonObjective(loss, loss_param, reg, mask, yw, cwk, pk, lk, ck)
        phi0 = phi(fw, z, allk)
        slope = np.einsum("kd,kd->k", g, p)
        slack = 1e-13 * (1.0 + np.abs(phi0))
        xp = _margins(Xw, p)
        t = np.ones(work.size)
        pending = allk
        for _ in range(40):
            f_new = fw[pending] - t[pending, None] * p[pending]
            z_new = z[pending] - t[pending, None] * xp[pending]
            ok_ls = (
                phi(f_new, z_new, pending)
                <= phi0[pending] - 1e-4 * t[pending] * slope[pending] + slack[pending]
            )
            pending = pending[~ok_ls]
            if pending.size == 0:
                break
            t[pending] *= 0.5
        f[work] = fw - t[:, None] * p
        iters[work] += 1
        newton[work] += 1
    return f, gn, scale, iters


@dataclass(frozen=True)
class _NewtonObjective:
    """Φ_k at trial points of the nodes ``kk`` of a Newton batch (for the Armijo test)."""

    loss: str
    loss_param: float
    reg: float
    mask: NDArray[np.bool_]
    y: Array
    cw: Array
    pen: Array
    lin: Array
    center: Array

    def __call__(self, fv: Array, zv: Array, kk: IntArray) -> Array:
        val = np.where(self.mask[kk], loss_terms(self.loss, self.loss_param, zv, self.y[kk], 0)[0], 0.0)
        diff = fv - self.center[kk]
        return np.asarray(
            self.cw[kk] * val.sum(axis=1)
            + 0.5 * self.reg * np.einsum("kd,kd->k", fv, fv)
            + np.einsum("kd,kd->k", self.lin[kk], fv)
            + self.pen[kk] * np.einsum("kd,kd->k", diff, diff)
        )


def _pad_mask(stack: NodeStack, idx: IntArray) -> NDArray[np.bool_]:
    return np.asarray(np.arange(stack.X.shape[1])[None, :] < stack.sizes[idx, None])


def solve_local(
    xy: Array,
    f0: Array,
    *,
    cw: float,
    reg: float,
    lin: Array,
    center: Array,
    pen: float,
    tol: float,
    max_iter: int,
    abs_tol: float = math.inf,
) -> tuple[Array, float, float, int]:
    """One node's logistic subproblem Φ(f) = cw Σ_n log(1 + exp(−(y_n x_n)ᵀf)) + reg/2‖f‖² + linᵀf + pen‖f − center‖².

    ``xy`` holds the rows y_n x_n.  Same solver as the shards use (:func:`solve_local_batch` on a
    batch of one).  Stops when ‖∇Φ(f)‖₂ <= tol · scale, where ``scale = max(1, cw·n, ‖lin‖,
    reg‖f‖, 2·pen·(‖f‖ + ‖center‖))`` is the size of the gradient's terms (so the test is relative
    and does not ask for accuracy below floating-point round-off when the penalty is huge), and
    ‖∇Φ(f)‖₂ <= ``abs_tol``.

    Returns
    -------
    f, grad_norm, scale, iterations
    """
    xy = np.asarray(xy, dtype=np.float64)
    stack = NodeStack(xy[None], np.ones((1, xy.shape[0])), np.array([xy.shape[0]], dtype=np.int64))
    f, gn, sc, it = solve_local_batch(
        stack,
        np.asarray(f0, dtype=np.float64)[None],
        loss="logistic",
        loss_param=0.0,
        cw=np.array([cw]),
        reg=reg,
        lin=np.asarray(lin)[None],
        center=np.asarray(center)[None],
        pen=np.array([pen]),
        tol=tol,
        max_iter=max_iter,
        abs_tol=abs_tol,
    )
    return f[0], float(gn[0]), float(sc[0]), int(it[0])


@dataclass(frozen=True)
class ShardSpec:
    """Everything one shard needs (picklable; sent once to the worker).

    Schedules are tables with one row per round ``r = 1..T`` and one column per node of the shard.
    The shard's *buffer* holds f_j(t) of its own nodes and of their neighbours in other shards
    (the halo), in increasing global id; ``nbr_indptr``/``nbr_indices`` index it (CSR, one row per
    own node, neighbours in increasing id).  On the complete graph (``complete=True``) the buffer
    holds every node and the neighbour sum is the total minus the node's own vector.
    """

    nodes: IntArray  # global ids of this shard's nodes (sorted)
    data: tuple[tuple[Array, Array], ...]  # per node: (X_i, y_i) as given (not copied)
    degrees: Array  # V_i (float)
    n_buffer: int
    own_pos: IntArray  # buffer positions of the own nodes
    nbr_indptr: IntArray | None
    nbr_indices: IntArray | None
    halo_from: tuple[
        tuple[int, IntArray, IntArray], ...
    ]  # (source position, rows of its output, buffer positions)
    boundary: IntArray  # local indices of own nodes published to other shards
    penalty: Array  # η_i(r)
    theta: Array  # θ_i(r)
    noise_rate: Array | None  # α_i(r) (None without noise)
    perturbation: str  # "none", "penalty" (PP/DVP) or "primal"
    loss_weight: float  # C
    reg_per_node: float  # ρ / N
    key: tuple[int, int]
    init: str  # "zeros" | "normal" | "given"
    init_scale: float
    init_models: Array | None
    tol: float
    max_iter: int
    dim: int
    solve_tol: float = math.inf  # certified absolute ‖∇Φ‖ bound of private local solves
    inexact_rate: Array | None = None  # β_i(r) of the output noise covering the inexact solve
    complete: bool = False
    loss: str = "logistic"
    loss_param: float = 0.0
    c1: float = math.nan  # the privacy bound's curvature constant (for a site's own ledger; not used here)
    lipschitz: float = math.nan  # its gradient constant G
    inexact_fraction: float = 0.0  # f of inexact_rate (a site that sets its own schedule derives β from it)


class ADMMShard:
    """Shard program (see :mod:`dpopt.distributed.engines`) for M-ADMM and its private variants.

    State: ``F`` = f_i(t) and ``L`` = λ_i(t−1) of the shard's nodes.  Round ``t`` (0-based):

    1. neighbour sums S_i = Σ_{j∈𝒱_i} f_j(t) from own and received (halo) vectors (one sparse product);
    2. for t >= 1, dual step Z(11): λ_i(t) = λ_i(t−1) + θ_i(t)/2 · (V_i f_i(t) − S_i);
    3. local solves Z(10) / PP (24) / primal perturbation for f_i(t+1), batched over the nodes, noise
       keyed by (node, t+1);
    4. publish f_i(t+1) of the boundary nodes; report all f_i(t+1) and (non-private) diagnostics.
    """

    def __init__(self, spec: ShardSpec) -> None:
        self.spec = spec
        n, d = spec.nodes.size, spec.dim
        self.F = np.zeros((n, d))
        self.L = np.zeros((n, d))
        for k, node in enumerate(spec.nodes.tolist()):
            if spec.init == "normal":
                g = keyed_generator(spec.key, node, 0, PURPOSE_INIT)
                self.F[k] = spec.init_scale * g.standard_normal(d)
            elif spec.init == "given":
                assert spec.init_models is not None
                self.F[k] = spec.init_models[k]
        self.sizes = np.array([x.shape[0] for x, _ in spec.data], dtype=np.int64)
        # group the nodes by padded size and stack their data (one copy)
        padded = np.array([padded_size(int(b)) for b in self.sizes], dtype=np.int64)
        self.groups: list[tuple[IntArray, NodeStack]] = []
        for p in np.unique(padded).tolist():
            members = np.flatnonzero(padded == p)
            X = np.zeros((members.size, p, d))
            y = np.zeros((members.size, p))
            for r, k in enumerate(members.tolist()):
                xk, yk = spec.data[k]
                X[r, : xk.shape[0]] = xk
                y[r, : xk.shape[0]] = yk
            self.groups.append((members, NodeStack(X, y, self.sizes[members])))
        self.curvature = np.zeros(n)
        c1 = loss_curvature(spec.loss, spec.loss_param)
        for members, st in self.groups:
            self.curvature[members] = spec.loss_weight / st.sizes * c1 * gram_top_eigenvalue(st.X)
        if spec.nbr_indptr is not None and spec.nbr_indices is not None:
            import scipy.sparse

            self.gather = scipy.sparse.csr_array(
                (np.ones(spec.nbr_indices.size), spec.nbr_indices, spec.nbr_indptr),
                shape=(n, spec.n_buffer),
            )

    def initial_output(self) -> Array:
        return np.ascontiguousarray(self.F[self.spec.boundary])

    def _neighbour_sums(self, inputs: Sequence[Array]) -> Array:
        spec = self.spec
        buf = np.empty((spec.n_buffer, spec.dim))
        buf[spec.own_pos] = self.F
        for pos, rows, at in spec.halo_from:
            buf[at] = np.asarray(inputs[pos])[rows]
        if spec.complete:
            return np.asarray(buf.sum(axis=0)[None, :] - self.F)
        return np.asarray(self.gather @ buf)

    def step(self, t: int, inputs: Sequence[Array]) -> tuple[Array, dict[str, Any]]:
        spec = self.spec
        s = self._neighbour_sums(inputs)
        v = spec.degrees[:, None]
        if t >= 1:
            self.L = self.L + 0.5 * spec.theta[t - 1][:, None] * (v * self.F - s)
        center = 0.5 * self.F + 0.5 * s / v
        n, d = self.F.shape
        pen = spec.penalty[t] * spec.degrees  # η_i(t+1) V_i
        lin = 2.0 * self.L
        noise = None
        if spec.perturbation != "none":
            assert spec.noise_rate is not None
            noise = l2_laplace_block(spec.noise_rate[t], d, spec.key, t + 1, PURPOSE_NOISE, spec.nodes)
            if spec.perturbation == "penalty":
                lin = lin + 2.0 * pen[:, None] * noise  # λ̃ = λ + η V ε  (PP ≡ dual perturbation, §4.4)
        new = np.empty_like(self.F)
        gnorm = np.empty(n)
        scale = np.empty(n)
        iters = np.empty(n, dtype=np.int64)
        certify = spec.inexact_rate is not None
        for members, st in self.groups:
            f, gn, sc, it = solve_local_batch(
                st,
                self.F[members],
                loss=spec.loss,
                loss_param=spec.loss_param,
                cw=spec.loss_weight / st.sizes,
                reg=spec.reg_per_node,
                lin=lin[members],
                center=center[members],
                pen=pen[members],
                tol=spec.tol,
                max_iter=spec.max_iter,
                abs_tol=spec.solve_tol if certify else math.inf,
                data_curvature=self.curvature[members],
            )
            new[members], gnorm[members], scale[members], iters[members] = f, gn, sc, it
        bad = np.flatnonzero(~(gnorm <= spec.tol * scale))
        if bad.size:
            raise LocalSolveError(
                f"node {int(spec.nodes[bad[0]])}, round {t + 1}: Newton did not reach the relative gradient norm "
                f"local_tol={spec.tol:g} within local_max_iter={spec.max_iter} iterations, so the run stops "
                "and releases nothing more (the privacy bound assumes exact local solves); raise "
                "local_max_iter"
            )
        if certify:
            assert spec.inexact_rate is not None
            bad = np.flatnonzero(~(gnorm <= spec.solve_tol))
            if bad.size:
                raise LocalSolveError(
                    f"node {int(spec.nodes[bad[0]])}, round {t + 1}: Newton did not certify the absolute gradient "
                    f"norm solve_tol={spec.solve_tol:g} within local_max_iter={spec.max_iter} iterations; the run "
                    "stops and releases nothing more (the privacy bound covers certified solves only); "
                    "raise solve_tol (more inexactness noise) or local_max_iter"
                )
            # ‖f − f*‖ <= solve_tol/μ: an l2-Laplace output noise of rate β covers it (ε += 2β·solve_tol/μ)
            new = new + l2_laplace_block(
                spec.inexact_rate[t], d, spec.key, t + 1, PURPOSE_INEXACT, spec.nodes
            )
        if spec.perturbation == "primal" and noise is not None:
            new = new + noise
        loss = np.empty(n)
        for members, st in self.groups:
            z = _margins(st.X, new[members])
            val = loss_terms(spec.loss, spec.loss_param, z, st.y, 0)[0]
            loss[members] = np.where(_pad_mask(st, np.arange(members.size)), val, 0.0).sum(axis=1) / st.sizes
        self.F = new
        diag = {
            "models": new.copy(),
            "grad_norm": gnorm,
            "rel_grad_norm": gnorm / scale,
            "newton_iters": iters,
            "loss": loss,
        }
        return np.ascontiguousarray(new[spec.boundary]), diag

    def call(self, name: str, *args: Any) -> Any:
        if name == "snapshot":
            return {"F": self.F.copy(), "L": self.L.copy()}
        if name == "restore":
            state = args[0]
            self.F = np.array(state["F"], dtype=np.float64)
            self.L = np.array(state["L"], dtype=np.float64)
            return self.initial_output()
        if name == "pid":
            import os

            return os.getpid()
        raise ValueError(f"unknown shard call {name!r}")


def make_shard(spec: ShardSpec) -> ADMMShard:
    """Factory used by the engines (module level, hence picklable)."""
    return ADMMShard(spec)


def logistic_newton(
    xy_blocks: Sequence[Array],
    weights: Sequence[float],
    reg: float,
    *,
    tol: float = 1e-12,
    max_iter: int = 100,
) -> tuple[Array, float]:
    """Minimise Σ_k w_k Σ_n log(1+exp(−(y x)ᵀf)) + reg/2‖f‖² by Newton; returns (f, gradient norm)."""
    d = xy_blocks[0].shape[1]
    f = np.zeros(d)
    gn = math.inf
    for _ in range(max_iter):
        g = reg * f
        h = reg * np.eye(d)
        phi0 = 0.5 * reg * f @ f
        for xy, w in zip(xy_blocks, weights, strict=True):
            m = xy @ f
            sig = expit(-m)
            g = g - w * (xy.T @ sig)
            h = h + w * (xy.T @ (xy * (sig * (1 - sig))[:, None]))
            phi0 += w * np.logaddexp(0.0, -m).sum()
        gn = float(np.linalg.norm(g))
        if gn <= tol * max(1.0, sum(w * xy.shape[0] for xy, w in zip(xy_blocks, weights, strict=True))):
            break
        p = cho_solve(cho_factor(h), g)
        step = 1.0
        for _ in range(40):
            fn = f - step * p
            phi = 0.5 * reg * fn @ fn + sum(
                w * np.logaddexp(0.0, -(xy @ fn)).sum() for xy, w in zip(xy_blocks, weights, strict=True)
            )
            if phi <= phi0 - 1e-4 * step * float(g @ p) + 1e-13 * (1 + abs(phi0)):
                break
            step *= 0.5
        f = fn
    return f, gn
