"""Per-node steps of (private) M-ADMM and the shard program that runs them (engine-agnostic).

Everything here is a pure function of its inputs: the shard program holds the data and state of a
group of nodes, and every random draw is keyed by ``(run key, node, round, purpose)`` so that a
node's trajectory does not depend on how nodes are grouped into shards or on the engine, and a
replayed round releases exactly the same values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.linalg import cho_factor, cho_solve
from scipy.linalg.blas import dsyrk
from scipy.linalg.lapack import dpotrf, dpotrs
from scipy.special import expit

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


def local_objective(
    f: Array, xy: Array, cw: float, reg: float, lin: Array, center: Array, pen: float
) -> float:
    """Φ(f) = cw Σ_n log(1 + exp(-(y_n x_n)ᵀf)) + reg/2 ‖f‖² + linᵀf + pen ‖f − center‖²."""
    m = xy @ f
    return float(
        cw * np.logaddexp(0.0, -m).sum() + 0.5 * reg * f @ f + lin @ f + pen * np.sum((f - center) ** 2)
    )


def local_gradient(
    f: Array, xy: Array, cw: float, reg: float, lin: Array, center: Array, pen: float
) -> Array:
    """∇Φ(f) (see :func:`local_objective`)."""
    sig = expit(-(xy @ f))
    return np.asarray(-cw * (xy.T @ sig) + reg * f + lin + 2.0 * pen * (f - center))


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
    """Minimise Φ (:func:`local_objective`) by damped Newton (Cholesky + Armijo), warm-started at ``f0``.

    Stops when ‖∇Φ(f)‖₂ <= tol · scale, where ``scale = max(1, cw·Σ‖x_n‖ bound, ‖lin‖, reg‖f‖,
    2·pen·(‖f‖ + ‖center‖))`` is the size of the gradient's terms (so the test is relative and does
    not ask for accuracy below floating-point round-off when the penalty is huge).

    Returns
    -------
    f, grad_norm, scale, iterations
    """
    f = np.array(f0, dtype=np.float64)
    d = f.size
    n = xy.shape[0]
    data_scale = cw * n  # ‖Σ_n σ(·) y_n x_n‖ <= n since ‖x_n‖ <= 1
    lin_norm = math.sqrt(float(lin @ lin))
    center_norm = math.sqrt(float(center @ center))
    diag_add = reg + 2.0 * pen
    xyt = xy.T  # Fortran-ordered view for BLAS syrk
    gn = math.inf
    m = xy @ f
    loss_terms = np.logaddexp(0.0, -m)
    for it in range(max_iter + 1):
        sig = expit(-m)
        g = -cw * (xyt @ sig) + reg * f + lin + 2.0 * pen * (f - center)
        gn = math.sqrt(float(g @ g))
        fn = math.sqrt(float(f @ f))
        scale = max(1.0, data_scale, lin_norm, reg * fn, 2.0 * pen * (fn + center_norm))
        if gn <= tol * scale and gn <= abs_tol:
            return f, gn, scale, it
        if it == max_iter:
            break
        root_w = np.sqrt(sig * (1.0 - sig))
        h = dsyrk(cw, (xy * root_w[:, None]).T, trans=0)  # upper triangle of cw·Xᵀdiag(w)X
        h[np.diag_indices(d)] += diag_add
        chol, info = dpotrf(h, lower=0, clean=0, overwrite_a=1)
        if info != 0:  # pragma: no cover - the Hessian is positive definite by construction
            raise LocalSolveError(f"Cholesky of the local Hessian failed (LAPACK info={info})")
        p, _ = dpotrs(chol, g, lower=0)
        diff = f - center
        phi0 = cw * loss_terms.sum() + 0.5 * reg * (f @ f) + lin @ f + pen * (diff @ diff)
        slope = float(g @ p)
        step = 1.0
        slack = 1e-13 * (1.0 + abs(phi0))
        xp = xy @ p
        for _ in range(40):
            f_new = f - step * p
            m_new = m - step * xp
            terms_new = np.logaddexp(0.0, -m_new)
            diff = f_new - center
            phi = cw * terms_new.sum() + 0.5 * reg * (f_new @ f_new) + lin @ f_new + pen * (diff @ diff)
            if phi <= phi0 - 1e-4 * step * slope + slack:
                break
            step *= 0.5
        f, m, loss_terms = f_new, m_new, terms_new
    return f, gn, scale, max_iter


@dataclass(frozen=True)
class ShardSpec:
    """Everything one shard needs (picklable; sent once to the worker).

    Schedules are tables with one row per round ``r = 1..T`` and one column per node of the shard.
    """

    nodes: IntArray  # global ids of this shard's nodes (sorted)
    xy: tuple[Array, ...]  # per node: rows y_n x_n
    degrees: Array  # V_i (float)
    nbr_index: IntArray  # concatenated neighbour positions in the local buffer [own nodes; halo]
    nbr_ptr: IntArray  # segment starts into nbr_index, one per node
    halo_from: tuple[tuple[int, IntArray], ...]  # per source shard: (source position, rows of its output)
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


class ADMMShard:
    """Shard program (see :mod:`dpopt.distributed.engines`) for M-ADMM and its private variants.

    State: ``F`` = f_i(t) and ``L`` = λ_i(t−1) of the shard's nodes.  Round ``t`` (0-based):

    1. neighbour sums S_i = Σ_{j∈𝒱_i} f_j(t) from own and received (halo) vectors;
    2. for t >= 1, dual step Z(11): λ_i(t) = λ_i(t−1) + θ_i(t)/2 · (V_i f_i(t) − S_i);
    3. local solve Z(10) / PP (24) / primal perturbation for f_i(t+1), noise keyed by (node, t+1);
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

    def initial_output(self) -> Array:
        return np.ascontiguousarray(self.F[self.spec.boundary])

    def _neighbour_sums(self, inputs: Sequence[Array]) -> Array:
        spec = self.spec
        parts = [self.F]
        for pos, rows in spec.halo_from:
            parts.append(np.asarray(inputs[pos])[rows])
        buf = np.concatenate(parts, axis=0)
        return np.add.reduceat(buf[spec.nbr_index], spec.nbr_ptr, axis=0)

    def step(self, t: int, inputs: Sequence[Array]) -> tuple[Array, dict[str, Any]]:
        spec = self.spec
        s = self._neighbour_sums(inputs)
        v = spec.degrees[:, None]
        if t >= 1:
            self.L = self.L + 0.5 * spec.theta[t - 1][:, None] * (v * self.F - s)
        center = 0.5 * self.F + 0.5 * s / v
        n, d = self.F.shape
        new = np.empty_like(self.F)
        gnorm = np.empty(n)
        rel = np.empty(n)
        iters = np.empty(n, dtype=np.int64)
        loss = np.empty(n)
        for k, node in enumerate(spec.nodes.tolist()):
            xy = spec.xy[k]
            pen = float(spec.penalty[t, k] * spec.degrees[k])  # η_i(t+1) V_i
            lin = 2.0 * self.L[k]
            noise = None
            if spec.perturbation != "none":
                assert spec.noise_rate is not None
                g = keyed_generator(spec.key, node, t + 1, PURPOSE_NOISE)
                noise = l2_laplace_draw(float(spec.noise_rate[t, k]), d, g)
                if spec.perturbation == "penalty":
                    lin = lin + 2.0 * pen * noise  # λ̃ = λ + η V ε  (PP ≡ dual perturbation, §4.4)
            f, gn, scale, it = solve_local(
                xy,
                self.F[k],
                cw=spec.loss_weight / xy.shape[0],
                reg=spec.reg_per_node,
                lin=lin,
                center=center[k],
                pen=pen,
                tol=spec.tol,
                max_iter=spec.max_iter,
                abs_tol=spec.solve_tol if spec.inexact_rate is not None else math.inf,
            )
            if not gn <= spec.tol * scale:
                raise LocalSolveError(
                    f"node {node}, round {t + 1}: Newton did not reach the relative gradient norm "
                    f"local_tol={spec.tol:g} within local_max_iter={spec.max_iter} iterations, so the run stops "
                    "and releases nothing more (the privacy bound assumes exact local solves); raise "
                    "local_max_iter"
                )
            if spec.inexact_rate is not None:
                if not gn <= spec.solve_tol:
                    raise LocalSolveError(
                        f"node {node}, round {t + 1}: Newton did not certify the absolute gradient norm "
                        f"solve_tol={spec.solve_tol:g} within local_max_iter={spec.max_iter} iterations; the run "
                        "stops and releases nothing more (the privacy bound covers certified solves only); "
                        "raise solve_tol (more inexactness noise) or local_max_iter"
                    )
                # ‖f − f*‖ <= solve_tol/μ: an l2-Laplace output noise of rate β covers it (ε += 2β·solve_tol/μ)
                g2 = keyed_generator(spec.key, node, t + 1, PURPOSE_INEXACT)
                f = f + l2_laplace_draw(float(spec.inexact_rate[t, k]), d, g2)
            if spec.perturbation == "primal" and noise is not None:
                f = f + noise
            new[k] = f
            gnorm[k], rel[k], iters[k] = gn, gn / scale, it
            loss[k] = float(np.logaddexp(0.0, -(xy @ f)).mean())
        self.F = new
        diag = {
            "models": new.copy(),
            "grad_norm": gnorm,
            "rel_grad_norm": rel,
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
