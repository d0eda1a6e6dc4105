"""Noisy mirror descent (Noise-MD, Algorithm 1 of Talwar-Thakurta-Zhang, seed 002).

Each step perturbs the full gradient of the average loss with Gaussian noise and takes a mirror
step with a potential matched to the constraint set:

* ``"euclidean"``: ``Ψ = ½‖θ - θ₀‖²``; the step is a projected noisy gradient step (any set with a
  projection; [TTZ] eq. 13).
* ``"entropy"``: for polytopes given by vertices (l1 ball, simplex, :class:`~dpopt.problems.Polytope`)
  the iterate is lifted to the simplex of vertex weights, ``θ = Vα``, and the step is the
  exponentiated-gradient update on ``α`` with ``h = Vᵀ(γ + b)`` (post-processing of the noisy
  gradient, so privacy is unchanged; [TTZ] Remark 3).  Rate O(log k) with k vertices.
* ``"group"`` / ``"spectral"``: the grouped-l1 and nuclear-norm potentials of [TTZ] eqs. 15-16
  (Ben-Tal-Nemirovski), with exact mirror steps (block norms / singular values and one scalar
  bisection).
* ``"lq"``: the paper's potential ``ψ(α) = ‖α‖²_q / (4(q - 1))``, ``q = ln k/(ln k - 1)``, on the
  same lifting ([TTZ] eq. 14), with the mirror step solved exactly by a scalar bisection.

The output is the average of θ_1..θ_T.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Literal, cast

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import brentq
from scipy.special import logsumexp

from dpopt._validation import check_int, check_positive
from dpopt.accounting import Accountant, EpsilonDeltaEvent, GaussianEvent, PrivacyEvent, RepeatedEvent
from dpopt.exceptions import InvalidParameterError
from dpopt.iteration import Callback, Status, notify
from dpopt.mechanisms import GaussianMechanism
from dpopt.problems import ConstraintSet, ERMProblem, GroupL1Ball, NuclearBall, VertexSet
from dpopt.randomness import RNGLike, check_rng
from dpopt.solvers._result import OptimizeResult
from dpopt.solvers.minimize import (
    BudgetLike,
    check_accountant,
    check_calibration,
    commit_privacy,
    gaussian_sigma_for_steps,
    nonprivate_diagnostics,
    parse_budget,
)

__all__ = ["noisy_mirror_descent"]

Array = NDArray[np.float64]
Potential = Literal["auto", "euclidean", "entropy", "lq", "group", "spectral"]
StepRule = Literal["auto", "paper", "noise_aware", "strongly_convex"]


class _Geometry(ABC):
    """A potential on C with its mirror step and the constants of Thm 3.2."""

    name: str
    range_: float  # max_C Ψ - min_C Ψ
    width_ratio_sq: float  # G_Q² / ‖Q‖²₂ (enters the theorem's T)

    @abstractmethod
    def init(self) -> Any: ...

    @abstractmethod
    def step(self, state: Any, h: Array, eta: float) -> Any: ...

    @abstractmethod
    def theta(self, state: Any) -> Array: ...

    @abstractmethod
    def dual_bound(self, l2: float, linf: float) -> float:
        """Bound on the dual norm of a gradient with ‖γ‖₂ <= l2, ‖γ‖_∞ <= linf."""

    @abstractmethod
    def noise_dual_sq(self, sigma: float) -> float:
        """E‖b‖²_* for b ~ N(0, σ² I)."""


class _Euclidean(_Geometry):
    name = "euclidean"

    def __init__(self, C: ConstraintSet) -> None:
        self.C = C
        self.theta0 = C.center()
        r = C.radius_l2 + float(np.linalg.norm(self.theta0))
        self.range_ = 0.5 * min(r, C.diameter) ** 2
        self.width_ratio_sq = float(C.dim)

    def init(self) -> Array:
        return self.theta0.copy()

    def step(self, state: Array, h: Array, eta: float) -> Array:
        return self.C.project(state - eta * h)

    def theta(self, state: Array) -> Array:
        return state

    def dual_bound(self, l2: float, linf: float) -> float:
        return l2

    def noise_dual_sq(self, sigma: float) -> float:
        return self.C.dim * sigma**2


class _Lifted(_Geometry):
    """Potentials on the simplex of vertex weights α (θ = Vα)."""

    def __init__(self, C: VertexSet) -> None:
        self.C = C
        self.k = C.n_vertices
        self.width_ratio_sq = 2 * math.log(2 * self.k)
        self._V = C.vertex_matrix()

    def theta(self, state: Any) -> Array:
        return np.asarray(self._V @ self._alpha(state)).ravel()

    @abstractmethod
    def _alpha(self, state: Any) -> Array: ...

    def dual_bound(self, l2: float, linf: float) -> float:
        return min(self.C.max_vertex_l2 * l2, self.C.radius_l1 * linf)

    def noise_dual_sq(self, sigma: float) -> float:
        return sigma**2 * self.C.max_vertex_l2**2 * 2 * math.log(2 * self.k)


class _Entropy(_Lifted):
    name = "entropy"

    def __init__(self, C: VertexSet) -> None:
        super().__init__(C)
        self.range_ = math.log(self.k)

    def init(self) -> Array:
        return np.full(self.k, -math.log(self.k))  # log α, uniform

    def step(self, state: Array, h: Array, eta: float) -> Array:
        s = state - eta * self.C.vertex_scores(h)
        return s - logsumexp(s)

    def _alpha(self, state: Array) -> Array:
        return np.exp(state)


class _Lq(_Lifted):
    """ψ(α) = ‖α‖²_q / (4(q-1)), q = ln k/(ln k - 1) ([TTZ] eq. 14, paper's scaling)."""

    name = "lq"

    def __init__(self, C: VertexSet) -> None:
        super().__init__(C)
        if self.k < 3:
            raise InvalidParameterError("potential='lq' needs at least 3 vertices (ln k > 1)")
        lk = math.log(self.k)
        self.q = lk / (lk - 1)
        self.c = 1 / (4 * (self.q - 1))
        # on the simplex ‖α‖_q ranges over [k^{1/q-1}, 1]
        self.range_ = self.c * (1 - self.k ** (2 / self.q - 2))

    def init(self) -> Array:
        return np.full(self.k, 1.0 / self.k)

    def _alpha(self, state: Array) -> Array:
        return state

    def _grad(self, a: Array) -> Array:
        q = self.q
        nq = float(np.sum(a**q)) ** (1 / q)
        return 2 * self.c * nq ** (2 - q) * a ** (q - 1)

    def step(self, state: Array, h: Array, eta: float) -> Array:
        w = self._grad(state) - eta * self.C.vertex_scores(h)
        q, p_exp = self.q, 1 / (self.q - 1)
        wmax = float(w.max())
        log2c = math.log(2 * self.c)

        def f(lam: float) -> float:
            d = w - lam
            pos = d > 0
            lu = p_exp * np.log(d[pos])
            log_norm_q = logsumexp(q * lu) / q
            return float(log2c + (2 - q) * log_norm_q - logsumexp(lu))

        tiny = 1e-12 * max(1.0, abs(wmax))
        gap = 1.0
        while f(wmax - gap) > 0:
            gap *= 2
            if gap > 1e300:  # pragma: no cover
                break
        lo = float(brentq(f, wmax - gap, wmax - tiny, xtol=1e-15 * max(1.0, abs(wmax)), rtol=1e-15))
        d = np.maximum(w - lo, 0.0)
        lu = np.full(d.shape, -np.inf)
        lu[d > 0] = p_exp * np.log(d[d > 0])
        return np.exp(lu - logsumexp(lu))


def _radii_for_sum(norms: Array, power: Any, budget: float = 1.0) -> Array:
    """r_j = power((norms_j - λ)_+) with the smallest λ >= 0 such that Σ r_j <= budget (bisection)."""

    def radii(lam: float) -> Array:
        with np.errstate(over="ignore", divide="ignore"):
            return np.asarray(power(np.maximum(norms - lam, 0.0)))

    r = radii(0.0)
    if np.all(np.isfinite(r)) and r.sum() <= budget:
        return r
    lo, hi = 0.0, float(norms.max())
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        rm = radii(mid)
        if np.all(np.isfinite(rm)) and rm.sum() <= budget:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-15 * max(1.0, hi):
            break
    return radii(hi)


class _GroupL1(_Geometry):
    """Ψ(φ) = (1/(ρξ)) Σ_j ‖φ^{(j)}‖^ρ on the unit group-l1 ball (θ = rφ), [TTZ] eq. 15 / spec B.3(c)."""

    name = "group"

    def __init__(self, C: GroupL1Ball) -> None:
        self.C = C
        K = C.n_groups
        self.rho = 2.0 if K <= 2 else 1 + 1 / math.log(K)
        self.xi = 1.0 if K == 1 else (0.5 if K == 2 else 1 / (math.e * math.log(K)))
        self.range_ = 1 / (self.rho * self.xi)
        g = math.sqrt(C.group_size) + math.sqrt(2 * math.log(max(K, 1)))
        self.width_ratio_sq = g * g
        self._g = g
        self._idx = [slice(i, min(i + C.group_size, C.dim)) for i in range(0, C.dim, C.group_size)]

    def init(self) -> Array:
        return np.zeros(self.C.dim)  # φ

    def theta(self, state: Array) -> Array:
        return self.C.radius * state

    def step(self, state: Array, h: Array, eta: float) -> Array:
        grad = np.zeros_like(state)
        for sl in self._idx:
            nb = float(np.linalg.norm(state[sl]))
            if nb > 0:
                grad[sl] = nb ** (self.rho - 2) * state[sl] / self.xi
        Y = grad - eta * self.C.radius * h
        norms = np.array([np.linalg.norm(Y[sl]) for sl in self._idx])
        r = _radii_for_sum(norms, lambda d: (self.xi * d) ** (1 / (self.rho - 1)))
        out = np.zeros_like(state)
        for j, sl in enumerate(self._idx):
            if norms[j] > 0 and r[j] > 0:
                out[sl] = r[j] * Y[sl] / norms[j]
        return out

    def dual_bound(self, l2: float, linf: float) -> float:
        return self.C.radius * l2

    def noise_dual_sq(self, sigma: float) -> float:
        return (self.C.radius * sigma * self._g) ** 2


class _Spectral(_Geometry):
    """Ψ(Φ) = c Σ σ_i(Φ)^{1+q}, q = 1/(2 ln 2m) on the unit nuclear ball (Θ = rΦ), spec B.3(e).

    c = 4 sqrt(e) ln(2m)/(2^q (1+q)): the larger of the two readings of the printed constant (the
    safe choice, spec B.3(e)); max Ψ - min Ψ = c.
    """

    name = "spectral"

    def __init__(self, C: NuclearBall) -> None:
        self.C = C
        m = min(C.rows, C.cols)
        self.q = 1 / (2 * math.log(2 * m))
        self.c = 4 * math.sqrt(math.e) * math.log(2 * m) / (2**self.q * (1 + self.q))
        self.range_ = self.c
        g = math.sqrt(C.rows) + math.sqrt(C.cols)
        self.width_ratio_sq = g * g
        self._g = g

    def init(self) -> Array:
        return np.zeros(self.C.dim)

    def theta(self, state: Array) -> Array:
        return self.C.radius * state

    def step(self, state: Array, h: Array, eta: float) -> Array:
        shape = (self.C.rows, self.C.cols)
        k = self.c * (1 + self.q)
        U, s, Vt = np.linalg.svd(state.reshape(shape), full_matrices=False)
        grad = (U * (k * s**self.q)) @ Vt
        Y = grad - eta * self.C.radius * h.reshape(shape)
        U, s, Vt = np.linalg.svd(Y, full_matrices=False)
        r = _radii_for_sum(s, lambda d: (d / k) ** (1 / self.q))
        return ((U * r) @ Vt).ravel()

    def dual_bound(self, l2: float, linf: float) -> float:
        return self.C.radius * l2

    def noise_dual_sq(self, sigma: float) -> float:
        return (self.C.radius * sigma * self._g) ** 2


def _geometry(C: ConstraintSet, potential: str) -> _Geometry:
    if potential == "auto":
        if isinstance(C, VertexSet):
            potential = "entropy"
        elif isinstance(C, GroupL1Ball):
            potential = "group"
        elif isinstance(C, NuclearBall):
            potential = "spectral"
        else:
            potential = "euclidean"
    if potential == "group":
        if not isinstance(C, GroupL1Ball):
            raise InvalidParameterError("potential='group' needs a GroupL1Ball")
        return _GroupL1(C)
    if potential == "spectral":
        if not isinstance(C, NuclearBall):
            raise InvalidParameterError("potential='spectral' needs a NuclearBall")
        return _Spectral(C)
    if potential == "euclidean":
        return _Euclidean(C)
    if potential in ("entropy", "lq"):
        if not isinstance(C, VertexSet):
            raise InvalidParameterError(
                f"potential={potential!r} needs a polytope given by vertices (L1Ball, Simplex, Polytope)"
            )
        return _Entropy(C) if potential == "entropy" else _Lq(C)
    raise InvalidParameterError(
        "potential: must be 'auto', 'euclidean', 'entropy', 'lq', 'group' or 'spectral'"
    )


def theory_iterations(n: int, epsilon: float, delta: float, width_ratio_sq: float) -> int:
    """T of [TTZ] Thm 3.2: ``‖Q‖² ε² n² / (log²(n/δ)(G_Q² + ‖Q‖²))`` rounded up (>= 1)."""
    return max(1, math.ceil((epsilon * n) ** 2 / (math.log(n / delta) ** 2 * (width_ratio_sq + 1))))


def noisy_mirror_descent(
    problem: ERMProblem,
    X: Any,
    y: Any,
    *,
    budget: BudgetLike,
    rng: RNGLike,
    calibration: str = "tight",
    accountant: Accountant | None = None,
    diagnostics: bool = False,
    potential: Potential = "auto",
    iterations: int | None = None,
    max_iterations: int = 2000,
    step_rule: StepRule = "auto",
    step_size: float | None = None,
    callback: Callback | None = None,
) -> OptimizeResult:
    """Noisy mirror descent (Noise-MD, [TTZ] Algorithm 1).

    Parameters
    ----------
    problem : ERMProblem
        Needs a bounded constraint set.
    X, y
        Private data (checked against the declared bounds).
    budget, rng, calibration, accountant, diagnostics
        See :func:`dpopt.solvers.minimize`.  ``calibration`` is ``"tight"`` or ``"paper"``.
    potential : {"auto", "euclidean", "entropy", "lq", "group", "spectral"}, default "auto"
        Mirror map; ``"auto"`` = entropy on the lifted simplex for vertex polytopes, ``"group"``
        for :class:`~dpopt.problems.GroupL1Ball`, ``"spectral"`` for
        :class:`~dpopt.problems.NuclearBall`, Euclidean otherwise.
    iterations : int, optional
        T.  Default: Thm 3.2's ``T = ε²n²/(log²(n/δ)(G_Q²/‖Q‖² + 1))`` (data independent), capped at
        ``max_iterations`` (the cap is recorded in ``result.parameters``).
    max_iterations : int, default 2000
        Cap on the default T.
    step_rule : {"auto", "paper", "noise_aware", "strongly_convex"}, default "auto"
        ``"paper"``: constant ``η = sqrt(range Ψ)/(G_* sqrt(T))`` (Thm 3.2's proof, G_* the dual
        gradient bound).  ``"noise_aware"``: constant ``η = sqrt(2 range Ψ / (T (G_*² + E‖b‖²_*)))``,
        the minimiser of the mirror-descent bound including the noise.  ``"strongly_convex"``:
        ``η_t = 1/(λ t)`` with λ = ``problem.l2_penalty`` (Thm A.1, Euclidean only).  ``"auto"`` =
        ``"paper"`` with the paper calibration and ``"noise_aware"`` otherwise.
    step_size : float, optional
        A constant η overriding ``step_rule``.
    callback : callable, optional
        ``callback(info)`` after every step with a :class:`dpopt.iteration.IterationInfo`
        (``info.nit``, ``info.x`` = the running average, i.e. the solution if the run stopped
        there); returning ``True`` or raising ``StopIteration`` stops the run (status
        ``"stopped"``; the whole planned T was already paid for).

    Returns
    -------
    OptimizeResult
        ``parameters`` holds T, η, σ, the gradient sensitivity and the potential.

    Privacy
    -------
    Each step releases the average-loss gradient plus N(0, σ²I).  Under **replace-one** neighbours
    the gradient's l2 sensitivity is ``2L/n`` with L = ``problem.lipschitz("l2")`` (from the
    declared feature/label bounds and the constraint set).  The whole run is the T-fold adaptive
    composition of that Gaussian mechanism, composed into the accountant before any noise is drawn.
    ``"tight"`` (default): σ is the smallest value for which the PLD accountant certifies the budget
    (T Gaussians compose exactly to one Gaussian with σ/sqrt(T)).  ``"paper"``:
    ``σ² = 32 L² T log²(T/δ)/(εn)²`` ([TTZ] Alg. 1; sound by the zCDP check of the spec, the
    verified ε is reported in ``result.privacy.verified_epsilon``).  The averaged output and all
    iterates are post-processing of the noisy gradients.  Each step is a
    :class:`dpopt.mechanisms.GaussianMechanism` release (with ``rng="secure"``: the gradient snapped
    to the noise grid and the exact discrete sampler, with the grid's sensitivity accounted).
    """
    if not isinstance(problem, ERMProblem):
        raise InvalidParameterError("problem: expected a dpopt.problems.ERMProblem")
    C = problem.constraint
    if C is None:
        raise InvalidParameterError("mirror descent needs a bounded constraint set (problem.constraint)")
    calibration = check_calibration(calibration, ("tight", "paper"))
    bud = parse_budget(budget)
    acct = check_accountant(accountant)
    max_iterations = check_int(max_iterations, "max_iterations")
    Xc, yc = problem.prepare(X, y)
    n, p = Xc.shape
    geom = _geometry(C, potential)
    L2 = problem.lipschitz("l2")
    Linf = problem.lipschitz("linf")
    sens = 2 * L2 / n

    capped = False
    if iterations is not None:
        T = check_int(iterations, "iterations")
    elif bud is None:
        T = max_iterations
    else:
        if bud.delta <= 0:
            raise InvalidParameterError("mirror descent adds Gaussian noise and needs δ > 0 in the budget")
        T = theory_iterations(n, bud.epsilon, bud.delta, geom.width_ratio_sq)
        if T > max_iterations:
            T, capped = max_iterations, True

    event: PrivacyEvent | None = None
    sigma = 0.0
    if bud is not None:
        if bud.delta <= 0:
            raise InvalidParameterError("mirror descent adds Gaussian noise and needs δ > 0 in the budget")
        if calibration == "paper":
            sigma = math.sqrt(32 * L2**2 * T * math.log(max(T, 2) / bud.delta) ** 2) / (bud.epsilon * n)
            event = EpsilonDeltaEvent(
                bud.epsilon, bud.delta, source=RepeatedEvent(GaussianEvent(sigma, sens), T), rule="ttz-alg1"
            )
        else:
            sigma = gaussian_sigma_for_steps(bud, sens, T)
            event = RepeatedEvent(GaussianEvent(sigma, sens), T)

    # step size (data independent)
    R2 = C.radius_l2
    lam = problem.l2_penalty
    g_dual = geom.dual_bound(L2 + lam * R2, Linf + lam * R2)
    rule: str = step_rule
    if rule == "auto":
        rule = "paper" if calibration == "paper" else "noise_aware"
    if rule not in ("paper", "noise_aware", "strongly_convex"):
        raise InvalidParameterError("step_rule: must be 'auto', 'paper', 'noise_aware' or 'strongly_convex'")
    if rule == "strongly_convex":
        if lam <= 0 or not isinstance(geom, _Euclidean):
            raise InvalidParameterError(
                "step_rule='strongly_convex' needs problem.l2_penalty > 0 and the Euclidean potential"
            )
    if step_size is not None:
        eta0 = check_positive(step_size, "step_size")
        rule = "constant"
    elif rule == "paper":
        eta0 = math.sqrt(geom.range_) / (g_dual * math.sqrt(T))
    elif rule == "noise_aware":
        eta0 = math.sqrt(2 * geom.range_ / (T * (g_dual**2 + geom.noise_dual_sq(sigma))))
    else:
        eta0 = 1.0 / lam

    # ---- budget first: the whole planned release is composed before any noise is drawn
    privacy = commit_privacy(
        event,
        budget=bud,
        kind="advanced" if calibration == "paper" else "pld",
        accountant=acct,
        label="noisy-mirror-descent",
    )
    gen = check_rng(rng)

    noisy = GaussianMechanism(sigma, sens) if sigma > 0 else None
    state = geom.init()
    total = np.zeros(p)
    done, status = T, cast(Status, "completed")
    for t in range(1, T + 1):
        theta = geom.theta(state)
        total += theta
        h = problem.gradient(theta, Xc, yc)
        if noisy is not None:
            h = noisy.release(h, rng=gen)  # secure rng: snapped to the noise grid, exact sampler
        eta = eta0 / t if rule == "strongly_convex" else eta0
        state = geom.step(state, h, eta)
        if t < T and notify(callback, t, total / t):
            done, status = t, cast(Status, "stopped")
            break
    solution = total / done

    params: dict[str, Any] = {
        "iterations": T,
        "iterations_capped": capped,
        "step_rule": rule,
        "step_size": eta0,
        "sigma": sigma,
        "sensitivity_l2": sens,
        "lipschitz_l2": L2,
        "potential": geom.name,
        "potential_range": geom.range_,
        "n_samples": n,
    }
    diag = nonprivate_diagnostics(problem, solution, Xc, yc) if diagnostics else {}
    return OptimizeResult(
        solution=solution,
        privacy=privacy,
        status=status,
        iterations=done,
        method="mirror_descent",
        calibration=calibration if bud is not None else "none",
        parameters=params,
        message=f"ran {done} of the planned T={T} noisy mirror-descent steps ({geom.name} potential)",
        nonprivate_diagnostics=diag,
    )
