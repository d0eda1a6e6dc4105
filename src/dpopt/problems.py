"""Inert descriptions of private empirical-risk-minimisation problems.

An :class:`ERMProblem` is a loss, the **declared** data bounds (:class:`DataBounds`), a constraint
set and an optional l2 penalty.  Every constant a private solver needs -- Lipschitz constants in l2
and l∞ geometry, smoothness, the Frank-Wolfe curvature constant Γ -- is derived from these
declarations, never from the data.  The solvers of :mod:`dpopt.solvers` interpret problems.

Objective convention (one convention everywhere, because the normalisation *is* the sensitivity)::

    F(θ; D) = (1/n) Σ_i ℓ(<x_i, θ>, y_i) + (l2_penalty / 2) ‖θ‖²₂ ,   θ ∈ C.

All losses are generalised linear: ``ℓ(θ; x, y) = φ(<x, θ>, y)``, so the per-example gradient is
``φ'(<x, θ>, y) x`` and the per-example Hessian ``φ''·x xᵀ`` has rank one.

Constraint sets offer a Euclidean projection, a linear minimisation oracle (LMO), their l2 / l1
radius and l2 diameter, and the Gaussian width ``G_C = E sup_{θ∈C} <g, θ>`` (exact where a closed
form or a one-dimensional integral exists, Monte Carlo with a standard error otherwise).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import scipy.sparse
from numpy.typing import ArrayLike, NDArray
from scipy import integrate, special

from dpopt import exceptions
from dpopt._validation import check_array, check_int, check_nonneg, check_positive
from dpopt.exceptions import BoundsViolationError, InvalidParameterError, MissingDataBoundsError
from dpopt.randomness import RNGLike, as_generator

__all__ = [
    "ConstraintSet",
    "DataBounds",
    "ERMProblem",
    "GroupL1Ball",
    "InterpolationBall",
    "L1Ball",
    "L2Ball",
    "LogisticLoss",
    "Loss",
    "NuclearBall",
    "Polytope",
    "Simplex",
    "SmoothHingeLoss",
    "SquaredLoss",
    "VertexSet",
    "WidthEstimate",
    "make_loss",
    "project_l1_ball",
    "project_simplex",
]

Array = NDArray[np.float64]
NormName = Literal["l2", "linf"]


# ================================================================================================
# Data bounds
# ================================================================================================


def _row_norms(X: Any, norm: NormName) -> Array:
    if scipy.sparse.issparse(X):
        if norm == "l2":
            return np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        return np.asarray(abs(X).max(axis=1).todense()).ravel()
    if norm == "l2":
        return np.sqrt(np.einsum("ij,ij->i", X, X))
    return np.abs(X).max(axis=1) if X.shape[1] else np.zeros(X.shape[0])


@dataclass(frozen=True)
class DataBounds:
    """Declared public bounds on one record ``(x, y)``.

    Parameters
    ----------
    feature_norm : float or None
        Every feature vector satisfies ``‖x‖ <= feature_norm`` in the norm ``norm``.  ``None`` means
        undeclared: any private solver then raises :class:`~dpopt.exceptions.MissingDataBoundsError`.
    norm : {"l2", "linf"}, default "l2"
        The norm of ``feature_norm``.
    label_bound : float or None
        ``|y| <= label_bound``.  Needed by regression losses; classification losses use 1.
    clip : bool, default False
        Opt-in clipping: rows outside the declared ball are projected onto it and labels clipped to
        ``[-label_bound, label_bound]`` before training.  Without it, data outside the bounds raise
        :class:`~dpopt.exceptions.BoundsViolationError`.  Clipping is a per-record map, so it does not
        change the sensitivity analysis.
    """

    feature_norm: float | None = None
    norm: NormName = "l2"
    label_bound: float | None = None
    clip: bool = False

    def __post_init__(self) -> None:
        if self.feature_norm is not None:
            object.__setattr__(self, "feature_norm", check_positive(self.feature_norm, "feature_norm"))
        if self.norm not in ("l2", "linf"):
            raise InvalidParameterError("norm: must be 'l2' or 'linf'")
        if self.label_bound is not None:
            object.__setattr__(self, "label_bound", check_positive(self.label_bound, "label_bound"))
        if not isinstance(self.clip, bool):
            raise InvalidParameterError("clip: expected True or False")
        if max(self.feature_norm or 0.0, self.label_bound or 0.0) > 1e100:  # squared in the constants
            raise InvalidParameterError("feature_norm, label_bound: must be at most 1e100; rescale the data")

    @classmethod
    def from_dataset(cls, dataset: Any, *, clip: bool = False) -> DataBounds:
        """Bounds declared by a :class:`dpopt.datasets.Dataset` (``feature_l2_norm``, ``label_abs``)."""
        b = getattr(dataset, "bounds", None)
        if not isinstance(b, dict):
            raise InvalidParameterError("dataset: expected a dpopt.datasets.Dataset with declared bounds")
        if "feature_l2_norm" in b:
            return cls(b["feature_l2_norm"], "l2", b.get("label_abs"), clip)
        if "feature_linf_norm" in b:
            return cls(b["feature_linf_norm"], "linf", b.get("label_abs"), clip)
        raise MissingDataBoundsError(
            "dataset declares no feature bound (feature_l2_norm / feature_linf_norm); pass DataBounds"
        )

    def _need(self) -> float:
        if self.feature_norm is None:
            raise MissingDataBoundsError(
                "DataBounds.feature_norm is not declared: private ERM needs a public bound on the feature "
                "norm (e.g. DataBounds(feature_norm=1.0)), or clip=True with a declared bound"
            )
        return self.feature_norm

    def feature_l2(self, dim: int) -> float:
        """A bound on ‖x‖₂ (``feature_norm``, times sqrt(dim) when declared in l∞)."""
        b = self._need()
        return b if self.norm == "l2" else b * math.sqrt(dim)

    def feature_linf(self, dim: int) -> float:
        """A bound on ‖x‖_∞ (an l2 bound is also an l∞ bound)."""
        return self._need()

    def label(self, required: bool) -> float:
        """The label bound; raises if ``required`` and undeclared."""
        if self.label_bound is None:
            if required:
                raise MissingDataBoundsError(
                    "DataBounds.label_bound is not declared: regression losses need a public bound on |y| "
                    "(e.g. DataBounds(feature_norm=1.0, label_bound=1.0))"
                )
            return 1.0
        return self.label_bound

    def enforce(self, X: Any, y: Array | None, *, label_required: bool) -> tuple[Any, Array | None]:
        """Check (or, with ``clip``, clip) the data against the declared bounds.

        Returns the (possibly clipped) data; raises :class:`BoundsViolationError` naming only counts.
        """
        b = self._need()
        tol = 1e-9 * max(1.0, b)
        norms = _row_norms(X, self.norm)
        bad = norms > b + tol
        if np.any(bad):
            if not self.clip:
                raise BoundsViolationError(
                    f"{int(bad.sum())} of {norms.size} rows have {self.norm} norm above the declared "
                    "feature_norm",
                    hint=_CLIP_HINT,
                )
            X = _clip_rows(X, b, self.norm, norms)
        if y is not None:
            lb = self.label(label_required)
            badl = np.abs(y) > lb * (1 + 1e-12)
            if np.any(badl):
                if not self.clip:
                    raise BoundsViolationError(
                        f"{int(badl.sum())} of {y.size} labels exceed the declared label bound in absolute "
                        "value",
                        hint=_CLIP_HINT,
                    )
                y = np.clip(y, -lb, lb)
        return X, y


_CLIP_HINT = exceptions.Hint(
    "declare a larger bound or pass {0}", exceptions.Setting("clip", True, owner="DataBounds")
)


def _clip_rows(X: Any, b: float, norm: NormName, norms: Array) -> Any:
    if norm == "linf":
        if scipy.sparse.issparse(X):
            X = X.tocsr(copy=True)
            X.data = np.clip(X.data, -b, b)
            return X
        return np.clip(X, -b, b)
    scale = b / np.maximum(norms, b)
    if scipy.sparse.issparse(X):
        return scipy.sparse.diags(scale) @ X
    return X * scale[:, None]


# ================================================================================================
# Losses
# ================================================================================================


class Loss(ABC):
    """A generalised-linear per-example loss ``ℓ(θ; x, y) = φ(<x, θ>, y)``."""

    name: str = ""
    #: Classification losses expect labels in [-1, 1] (usually ±1) and need no declared label bound.
    classification: bool = True
    #: Twice continuously differentiable (needed by objective perturbation).
    smooth: bool = True

    @abstractmethod
    def value(self, z: Array, y: Array) -> Array:
        """φ(z, y) elementwise."""

    @abstractmethod
    def derivative(self, z: Array, y: Array) -> Array:
        """∂φ/∂z elementwise."""

    @abstractmethod
    def derivative_bound(self, margin_bound: float, label_bound: float) -> float:
        """sup |∂φ/∂z| over |z| <= margin_bound, |y| <= label_bound."""

    @abstractmethod
    def curvature_bound(self, label_bound: float) -> float:
        """sup ∂²φ/∂z² (the smoothness of φ in z)."""


@dataclass(frozen=True)
class LogisticLoss(Loss):
    """``log(1 + exp(-y z))``; |φ'| <= |y| <= 1 and φ'' <= y²/4 whatever the margin."""

    name = "logistic"

    def value(self, z: Array, y: Array) -> Array:
        return np.logaddexp(0.0, -y * z)

    def derivative(self, z: Array, y: Array) -> Array:
        return -y * special.expit(-y * z)

    def derivative_bound(self, margin_bound: float, label_bound: float) -> float:
        return label_bound

    def curvature_bound(self, label_bound: float) -> float:
        return label_bound**2 / 4


@dataclass(frozen=True)
class SquaredLoss(Loss):
    """``(z - y)² / 2`` (least squares / LASSO); |φ'| <= margin bound + label bound, φ'' = 1."""

    name = "squared"
    classification = False

    def value(self, z: Array, y: Array) -> Array:
        return 0.5 * (z - y) ** 2

    def derivative(self, z: Array, y: Array) -> Array:
        return z - y

    def derivative_bound(self, margin_bound: float, label_bound: float) -> float:
        if math.isinf(margin_bound):
            raise InvalidParameterError(
                "the squared loss is Lipschitz only on a bounded constraint set: pass a constraint "
                "(e.g. L2Ball or L1Ball) to ERMProblem"
            )
        return margin_bound + label_bound

    def curvature_bound(self, label_bound: float) -> float:
        return 1.0


@dataclass(frozen=True)
class SmoothHingeLoss(Loss):
    """Huberised hinge of the margin m = y z with smoothing ``h``.

    ``φ = 0`` for m >= 1, ``(1 - m)²/(2h)`` for 1 - h < m < 1, ``1 - m - h/2`` for m <= 1 - h.
    |φ'| <= |y| and φ'' <= y²/h.
    """

    smoothing: float = 1.0
    name = "smooth_hinge"

    def __post_init__(self) -> None:
        check_positive(self.smoothing, "smoothing")

    def value(self, z: Array, y: Array) -> Array:
        m = y * z
        h = self.smoothing
        return np.where(m >= 1, 0.0, np.where(m > 1 - h, (1 - m) ** 2 / (2 * h), 1 - m - h / 2))

    def derivative(self, z: Array, y: Array) -> Array:
        m = y * z
        h = self.smoothing
        dm = np.where(m >= 1, 0.0, np.where(m > 1 - h, -(1 - m) / h, -1.0))
        return y * dm

    def derivative_bound(self, margin_bound: float, label_bound: float) -> float:
        return label_bound

    def curvature_bound(self, label_bound: float) -> float:
        return label_bound**2 / self.smoothing


def make_loss(loss: str | Loss) -> Loss:
    """A loss from its name (``"logistic"``, ``"squared"``, ``"smooth_hinge"``) or the loss itself."""
    if isinstance(loss, Loss):
        return loss
    table: dict[str, type[Loss]] = {
        "logistic": LogisticLoss,
        "squared": SquaredLoss,
        "least_squares": SquaredLoss,
        "smooth_hinge": SmoothHingeLoss,
    }
    if loss not in table:
        raise InvalidParameterError(f"loss: must be a Loss or one of {sorted(table)}")
    return table[loss]()


# ================================================================================================
# Constraint sets
# ================================================================================================


@dataclass(frozen=True)
class WidthEstimate:
    """A Gaussian width ``E sup_{θ∈C} <g, θ>`` with its standard error (0 when exact)."""

    value: float
    stderr: float
    method: Literal["exact", "integral", "monte_carlo"]

    def __float__(self) -> float:
        return self.value


def project_simplex(v: ArrayLike, scale: float = 1.0) -> Array:
    """Euclidean projection onto ``{w >= 0, Σ w = scale}`` (sort-based, Duchi et al. 2008)."""
    v = np.asarray(v, dtype=float)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - scale
    ind = np.arange(1, v.size + 1)
    rho = np.nonzero(u - css / ind > 0)[0][-1]
    tau = css[rho] / (rho + 1.0)
    return np.maximum(v - tau, 0.0)


def project_l1_ball(v: ArrayLike, radius: float = 1.0) -> Array:
    """Euclidean projection onto ``{‖w‖₁ <= radius}``."""
    v = np.asarray(v, dtype=float)
    if np.abs(v).sum() <= radius:
        return v.copy()
    return np.sign(v) * project_simplex(np.abs(v), radius)


def _mc_width(sup: Any, dim: int, n_draws: int, rng: RNGLike) -> WidthEstimate:
    g = as_generator(rng)
    vals = np.array([sup(g.standard_normal(dim)) for _ in range(check_int(n_draws, "n_draws", minimum=2))])
    return WidthEstimate(float(vals.mean()), float(vals.std(ddof=1) / math.sqrt(vals.size)), "monte_carlo")


class ConstraintSet(ABC):
    """A closed convex set C ⊂ R^dim with the oracles the private solvers need."""

    dim: int

    @abstractmethod
    def project(self, v: Array) -> Array:
        """Euclidean projection onto C."""

    @abstractmethod
    def lmo(self, g: Array) -> Array:
        """A point of C minimising ``<g, θ>`` (linear minimisation oracle)."""

    @abstractmethod
    def support(self, g: Array) -> float:
        """``sup_{θ∈C} <g, θ>``."""

    @property
    @abstractmethod
    def radius_l2(self) -> float:
        """``‖C‖₂ = max_{θ∈C} ‖θ‖₂`` (called "diameter" in [TTZ], used as a radius)."""

    @property
    @abstractmethod
    def radius_l1(self) -> float:
        """``‖C‖₁ = max_{θ∈C} ‖θ‖₁``."""

    @property
    def diameter(self) -> float:
        """l2 diameter (an upper bound ``2‖C‖₂`` unless a subclass knows better)."""
        return 2 * self.radius_l2

    def center(self) -> Array:
        """The starting point: the minimiser of the set's natural potential (0 for balls)."""
        return np.zeros(self.dim)

    def contains(self, theta: ArrayLike, tol: float = 1e-9) -> bool:
        """Whether ``theta`` lies in C up to ``tol`` (by projection distance)."""
        t = np.asarray(theta, dtype=float)
        return bool(np.linalg.norm(self.project(t) - t) <= tol * max(1.0, self.radius_l2))

    def margin_bound(self, bounds: DataBounds) -> float:
        """``sup |<x, θ>|`` over θ ∈ C and feature vectors allowed by ``bounds``."""
        return min(
            bounds.feature_l2(self.dim) * self.radius_l2, bounds.feature_linf(self.dim) * self.radius_l1
        )

    def gaussian_width(
        self, *, method: Literal["auto", "monte_carlo"] = "auto", n_draws: int = 2000, rng: RNGLike = None
    ) -> WidthEstimate:
        """``G_C = E_{g~N(0,I)} sup_{θ∈C} <g, θ>`` (exact when available, else Monte Carlo)."""
        return _mc_width(self.support, self.dim, n_draws, rng)


def _check_dim(dim: Any) -> int:
    return check_int(dim, "dim")


@dataclass(frozen=True)
class L2Ball(ConstraintSet):
    """``{‖θ‖₂ <= radius}``."""

    dim: int
    radius: float = 1.0

    def __post_init__(self) -> None:
        _check_dim(self.dim)
        check_positive(self.radius, "radius")

    def project(self, v: Array) -> Array:
        nrm = float(np.linalg.norm(v))
        return v * (self.radius / nrm) if nrm > self.radius else np.array(v, dtype=float)

    def lmo(self, g: Array) -> Array:
        nrm = float(np.linalg.norm(g))
        return np.zeros(self.dim) if nrm == 0 else -self.radius * g / nrm

    def support(self, g: Array) -> float:
        return self.radius * float(np.linalg.norm(g))

    @property
    def radius_l2(self) -> float:
        return self.radius

    @property
    def radius_l1(self) -> float:
        return self.radius * math.sqrt(self.dim)

    def gaussian_width(
        self, *, method: Literal["auto", "monte_carlo"] = "auto", n_draws: int = 2000, rng: RNGLike = None
    ) -> WidthEstimate:
        if method == "monte_carlo":
            return super().gaussian_width(method=method, n_draws=n_draws, rng=rng)
        p = self.dim
        e = math.sqrt(2) * math.exp(math.lgamma((p + 1) / 2) - math.lgamma(p / 2))
        return WidthEstimate(self.radius * e, 0.0, "exact")


class VertexSet(ConstraintSet):
    """A polytope given by finitely many vertices (vertex-indexed oracles for Frank-Wolfe / lifting)."""

    @property
    @abstractmethod
    def n_vertices(self) -> int: ...

    @abstractmethod
    def vertex_scores(self, g: Array) -> Array:
        """``<v_k, g>`` for every vertex k (length n_vertices)."""

    @abstractmethod
    def vertex(self, k: int) -> Array:
        """Vertex k as a dense vector."""

    @abstractmethod
    def vertex_matrix(self) -> Any:
        """V of shape (dim, n_vertices) (sparse for the l1 ball and the simplex)."""

    def lift(self, alpha: Array) -> Array:
        """θ = V α."""
        return np.asarray(self.vertex_matrix() @ alpha).ravel()

    @property
    def max_vertex_l2(self) -> float:
        return self.radius_l2


@dataclass(frozen=True)
class L1Ball(VertexSet):
    """``{‖θ‖₁ <= radius}`` = conv{±radius·e_j}: 2·dim vertices, vertex 2j = +r e_j, 2j+1 = -r e_j."""

    dim: int
    radius: float = 1.0

    def __post_init__(self) -> None:
        _check_dim(self.dim)
        check_positive(self.radius, "radius")

    def project(self, v: Array) -> Array:
        return project_l1_ball(v, self.radius)

    def lmo(self, g: Array) -> Array:
        j = int(np.argmax(np.abs(g)))
        out = np.zeros(self.dim)
        out[j] = -self.radius * (1.0 if g[j] >= 0 else -1.0)
        return out

    def support(self, g: Array) -> float:
        return self.radius * float(np.max(np.abs(g)))

    @property
    def radius_l2(self) -> float:
        return self.radius

    @property
    def radius_l1(self) -> float:
        return self.radius

    @property
    def n_vertices(self) -> int:
        return 2 * self.dim

    def vertex_scores(self, g: Array) -> Array:
        out = np.empty(2 * self.dim)
        out[0::2] = self.radius * g
        out[1::2] = -self.radius * g
        return out

    def vertex(self, k: int) -> Array:
        out = np.zeros(self.dim)
        out[k // 2] = self.radius if k % 2 == 0 else -self.radius
        return out

    def vertex_matrix(self) -> Any:
        j = np.repeat(np.arange(self.dim), 2)
        vals = np.tile([self.radius, -self.radius], self.dim)
        return scipy.sparse.csr_matrix((vals, (j, np.arange(2 * self.dim))), shape=(self.dim, 2 * self.dim))

    def gaussian_width(
        self, *, method: Literal["auto", "monte_carlo"] = "auto", n_draws: int = 2000, rng: RNGLike = None
    ) -> WidthEstimate:
        if method == "monte_carlo":
            return super().gaussian_width(method=method, n_draws=n_draws, rng=rng)
        p = self.dim
        # E max|g_i| = ∫_0^∞ 1 - (2Φ(t) - 1)^p dt
        val, err = integrate.quad(
            lambda t: -math.expm1(p * math.log(max(special.erf(t / math.sqrt(2)), 1e-300))), 0, 40
        )
        return WidthEstimate(self.radius * val, self.radius * err, "integral")


@dataclass(frozen=True)
class Simplex(VertexSet):
    """The scaled probability simplex ``{θ >= 0, Σθ = scale}`` (vertices scale·e_j)."""

    dim: int
    scale: float = 1.0

    def __post_init__(self) -> None:
        _check_dim(self.dim)
        check_positive(self.scale, "scale")

    def project(self, v: Array) -> Array:
        return project_simplex(v, self.scale)

    def lmo(self, g: Array) -> Array:
        out = np.zeros(self.dim)
        out[int(np.argmin(g))] = self.scale
        return out

    def support(self, g: Array) -> float:
        return self.scale * float(np.max(g))

    @property
    def radius_l2(self) -> float:
        return self.scale

    @property
    def radius_l1(self) -> float:
        return self.scale

    @property
    def diameter(self) -> float:
        return self.scale * math.sqrt(2) if self.dim > 1 else 0.0

    def center(self) -> Array:
        return np.full(self.dim, self.scale / self.dim)

    @property
    def n_vertices(self) -> int:
        return self.dim

    def vertex_scores(self, g: Array) -> Array:
        return self.scale * np.asarray(g, dtype=float)

    def vertex(self, k: int) -> Array:
        out = np.zeros(self.dim)
        out[k] = self.scale
        return out

    def vertex_matrix(self) -> Any:
        return scipy.sparse.identity(self.dim, format="csr") * self.scale

    def gaussian_width(
        self, *, method: Literal["auto", "monte_carlo"] = "auto", n_draws: int = 2000, rng: RNGLike = None
    ) -> WidthEstimate:
        if method == "monte_carlo":
            return super().gaussian_width(method=method, n_draws=n_draws, rng=rng)
        p = self.dim
        # E max g_i = ∫_0^∞ (1 - Φ^p) dt - ∫_{-∞}^0 Φ^p dt
        a, e1 = integrate.quad(lambda t: -math.expm1(p * special.log_ndtr(t)), 0, 40)
        b, e2 = integrate.quad(lambda t: math.exp(p * special.log_ndtr(t)), -40, 0)
        return WidthEstimate(self.scale * (a - b), self.scale * (e1 + e2), "integral")


@dataclass(frozen=True, eq=False)
class Polytope(VertexSet):
    """``conv{v_1, ..., v_k}`` given by its vertices (rows of ``vertices``, shape (k, dim))."""

    vertices: Array = field(repr=False)

    def __post_init__(self) -> None:
        V = check_array(self.vertices, "vertices", ndim=2)
        if V.shape[0] < 1 or V.shape[1] < 1:
            raise InvalidParameterError("vertices: need at least one vertex of dimension >= 1")
        V = V.copy()
        V.setflags(write=False)
        object.__setattr__(self, "vertices", V)

    @property
    def dim(self) -> int:  # type: ignore[override]
        return int(self.vertices.shape[1])

    def project(self, v: Array) -> Array:
        # min_α ‖Vᵀα - v‖² over the simplex, by accelerated projected gradient.
        V = self.vertices
        k = V.shape[0]
        lip = max(float(np.linalg.norm(V, 2)) ** 2, 1e-300)
        a = np.full(k, 1.0 / k)
        z, t = a.copy(), 1.0
        for _ in range(5000):
            grad = V @ (V.T @ z - v)
            a_new = project_simplex(z - grad / lip)
            t_new = (1 + math.sqrt(1 + 4 * t * t)) / 2
            z = a_new + ((t - 1) / t_new) * (a_new - a)
            if np.linalg.norm(a_new - a) <= 1e-13:
                a = a_new
                break
            a, t = a_new, t_new
        return V.T @ a

    def lmo(self, g: Array) -> Array:
        return self.vertices[int(np.argmin(self.vertices @ g))].copy()

    def support(self, g: Array) -> float:
        return float(np.max(self.vertices @ g))

    @property
    def radius_l2(self) -> float:
        return float(np.max(np.linalg.norm(self.vertices, axis=1)))

    @property
    def radius_l1(self) -> float:
        return float(np.max(np.abs(self.vertices).sum(axis=1)))

    def center(self) -> Array:
        return self.vertices.mean(axis=0)

    @property
    def n_vertices(self) -> int:
        return int(self.vertices.shape[0])

    def vertex_scores(self, g: Array) -> Array:
        return self.vertices @ g

    def vertex(self, k: int) -> Array:
        return self.vertices[k].copy()

    def vertex_matrix(self) -> Any:
        return self.vertices.T


@dataclass(frozen=True)
class GroupL1Ball(ConstraintSet):
    """``{Σ_j ‖θ^{(j)}‖₂ <= radius}`` over consecutive blocks of size ``group_size`` (last may be shorter)."""

    dim: int
    group_size: int
    radius: float = 1.0

    def __post_init__(self) -> None:
        _check_dim(self.dim)
        check_int(self.group_size, "group_size")
        check_positive(self.radius, "radius")
        if self.group_size > self.dim:
            raise InvalidParameterError("group_size: must not exceed dim")

    @property
    def n_groups(self) -> int:
        return -(-self.dim // self.group_size)

    def _norms(self, v: Array) -> Array:
        k = self.group_size
        return np.array([np.linalg.norm(v[i : i + k]) for i in range(0, self.dim, k)])

    def project(self, v: Array) -> Array:
        norms = self._norms(v)
        if norms.sum() <= self.radius:
            return np.array(v, dtype=float)
        new = project_simplex(norms, self.radius)
        scale = np.divide(new, norms, out=np.zeros_like(new), where=norms > 0)
        return v * np.repeat(scale, self.group_size)[: self.dim]

    def lmo(self, g: Array) -> Array:
        norms = self._norms(g)
        j = int(np.argmax(norms))
        out = np.zeros(self.dim)
        if norms[j] > 0:
            s = slice(j * self.group_size, min((j + 1) * self.group_size, self.dim))
            out[s] = -self.radius * g[s] / norms[j]
        return out

    def support(self, g: Array) -> float:
        return self.radius * float(self._norms(g).max())

    @property
    def radius_l2(self) -> float:
        return self.radius

    @property
    def radius_l1(self) -> float:
        return self.radius * math.sqrt(self.group_size)


@dataclass(frozen=True)
class NuclearBall(ConstraintSet):
    """``{Θ ∈ R^{rows×cols}: ‖Θ‖_nuc <= radius}``, flattened row-major to a vector of length rows·cols."""

    rows: int
    cols: int
    radius: float = 1.0

    def __post_init__(self) -> None:
        check_int(self.rows, "rows")
        check_int(self.cols, "cols")
        check_positive(self.radius, "radius")

    @property
    def dim(self) -> int:  # type: ignore[override]
        return self.rows * self.cols

    def project(self, v: Array) -> Array:
        U, s, Vt = np.linalg.svd(np.reshape(v, (self.rows, self.cols)), full_matrices=False)
        if s.sum() <= self.radius:
            return np.array(v, dtype=float)
        s = project_simplex(s, self.radius)
        return ((U * s) @ Vt).ravel()

    def lmo(self, g: Array) -> Array:
        U, s, Vt = np.linalg.svd(np.reshape(g, (self.rows, self.cols)), full_matrices=False)
        if s[0] == 0:
            return np.zeros(self.dim)
        return (-self.radius * np.outer(U[:, 0], Vt[0])).ravel()

    def support(self, g: Array) -> float:
        return self.radius * float(np.linalg.norm(np.reshape(g, (self.rows, self.cols)), 2))

    @property
    def radius_l2(self) -> float:
        return self.radius

    @property
    def radius_l1(self) -> float:
        return self.radius * math.sqrt(min(self.rows, self.cols)) * 1.0 * math.sqrt(max(self.rows, self.cols))


def _soft(v: Array, t: float) -> Array:
    return np.sign(v) * np.maximum(np.abs(v) - t, 0.0)


@dataclass(frozen=True)
class InterpolationBall(ConstraintSet):
    """``{(1 - α)‖θ‖₁ + α‖θ‖₂ <= radius}``, the l1/l2 interpolation-norm ball of [TTZ] (0 < α < 1).

    [TTZ] gives no explicit mirror map for it (spec B.3(d)); use objective perturbation,
    Gaussian Frank-Wolfe (LMO below) or Euclidean mirror descent (projection below).  Projection:
    the prox of ``λN`` is soft-thresholding by ``λ(1 - α)`` followed by l2 shrinkage by ``λα``, with
    λ found by bisection.  Dual norm: ``N*(g) = min t`` with ``‖S(g, (1 - α)t)‖₂ <= αt``.
    """

    dim: int
    alpha: float = 0.5
    radius: float = 1.0

    def __post_init__(self) -> None:
        _check_dim(self.dim)
        check_positive(self.radius, "radius")
        if not 0 < check_positive(self.alpha, "alpha") < 1:
            raise InvalidParameterError("alpha: must lie in (0, 1) (use L1Ball or L2Ball for the end points)")

    def norm(self, v: Array) -> float:
        return (1 - self.alpha) * float(np.abs(v).sum()) + self.alpha * float(np.linalg.norm(v))

    def _prox(self, v: Array, lam: float) -> Array:
        u = _soft(v, lam * (1 - self.alpha))
        nu = float(np.linalg.norm(u))
        return u * max(0.0, 1 - lam * self.alpha / nu) if nu > 0 else u

    def project(self, v: Array) -> Array:
        v = np.asarray(v, dtype=float)
        if self.norm(v) <= self.radius:
            return v.copy()
        lo, hi = 0.0, float(np.abs(v).max()) / (1 - self.alpha) + float(np.linalg.norm(v)) / self.alpha
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if self.norm(self._prox(v, mid)) > self.radius:
                lo = mid
            else:
                hi = mid
            if hi - lo <= 1e-15 * max(1.0, hi):
                break
        return self._prox(v, hi)

    def _dual(self, g: Array) -> tuple[float, Array]:
        a = self.alpha
        lo, hi = 0.0, float(np.linalg.norm(g)) / a
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if float(np.linalg.norm(_soft(g, (1 - a) * mid))) <= a * mid:
                hi = mid
            else:
                lo = mid
            if hi - lo <= 1e-15 * max(1.0, hi):
                break
        return hi, _soft(g, (1 - a) * hi)

    def lmo(self, g: Array) -> Array:
        g = np.asarray(g, dtype=float)
        if not np.any(g):
            return np.zeros(self.dim)
        _, u = self._dual(g)
        if not np.any(u):  # the l1 part is active: the best vertex is a signed coordinate vector
            j = int(np.argmax(np.abs(g)))
            u = np.zeros(self.dim)
            u[j] = g[j]
        return -self.radius * u / self.norm(u)

    def support(self, g: Array) -> float:
        return self.radius * self._dual(np.asarray(g, dtype=float))[0]

    @property
    def radius_l2(self) -> float:
        # ‖θ‖₂ <= N(θ) since ‖θ‖₁ >= ‖θ‖₂
        return self.radius

    @property
    def radius_l1(self) -> float:
        # max ‖θ‖₁ s.t. (1-α)‖θ‖₁ + α‖θ‖₂ <= r: attained by a vector spread evenly over all
        # coordinates (‖θ‖₂ = ‖θ‖₁/sqrt(p))
        return self.radius / ((1 - self.alpha) + self.alpha / math.sqrt(self.dim))


# ================================================================================================
# The problem
# ================================================================================================


@dataclass(frozen=True)
class ERMProblem:
    """Private empirical risk minimisation: ``min_{θ∈C} (1/n)Σ ℓ(<x_i,θ>, y_i) + (l2_penalty/2)‖θ‖²``.

    Parameters
    ----------
    loss : Loss or str
        ``"logistic"``, ``"squared"``, ``"smooth_hinge"`` or a :class:`Loss`.
    bounds : DataBounds
        Declared public bounds on one record; all sensitivities come from these.
    constraint : ConstraintSet or None
        The feasible set C (``None`` = R^p, allowed for losses with a bounded derivative and
        only by solvers that do not need a bounded set, e.g. objective perturbation).
    l2_penalty : float, default 0
        Coefficient λ of ``(λ/2)‖θ‖²`` (public, data independent, so it does not change the
        sensitivity).

    Notes
    -----
    Constants (all per example, valid on all of C and for every record allowed by ``bounds``):
    ``lipschitz("l2")`` bounds ‖∇ℓ‖₂, ``lipschitz("linf")`` bounds ‖∇ℓ‖_∞, ``smoothness()`` bounds
    the largest Hessian eigenvalue, and ``curvature()`` bounds the Frank-Wolfe curvature constant Γ
    of the whole objective (Γ <= φ''_max·max_{a,b∈C} <x, a-b>² + λ·diam²).
    """

    loss: Loss | str
    bounds: DataBounds = field(default_factory=DataBounds)
    constraint: ConstraintSet | None = None
    l2_penalty: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "loss", make_loss(self.loss))
        if not isinstance(self.bounds, DataBounds):
            raise InvalidParameterError("bounds: expected a dpopt.problems.DataBounds")
        if self.constraint is not None and not isinstance(self.constraint, ConstraintSet):
            raise InvalidParameterError("constraint: expected a dpopt.problems.ConstraintSet or None")
        object.__setattr__(self, "l2_penalty", check_nonneg(self.l2_penalty, "l2_penalty"))

    @property
    def _loss(self) -> Loss:
        assert isinstance(self.loss, Loss)
        return self.loss

    @property
    def dim(self) -> int | None:
        return None if self.constraint is None else self.constraint.dim

    # ------------------------------------------------------------------ declared constants
    def _dim_for(self, dim: int | None) -> int:
        d = self.dim if dim is None else dim
        if d is None:
            raise InvalidParameterError("dim: unknown (no constraint set); pass dim")
        return d

    def margin_bound(self, dim: int | None = None) -> float:
        """``sup |<x, θ>|`` over C and the declared records (∞ without a constraint)."""
        if self.constraint is None:
            return math.inf
        return self.constraint.margin_bound(self.bounds)

    def derivative_bound(self, dim: int | None = None) -> float:
        """``sup |φ'|`` over C and the declared records."""
        lb = self.bounds.label(required=not self._loss.classification)
        return self._loss.derivative_bound(self.margin_bound(dim), lb)

    def lipschitz(self, norm: NormName = "l2", dim: int | None = None) -> float:
        """Per-example bound on ‖∇ℓ(θ; x, y)‖ (l2 or l∞ norm) over C and declared records."""
        d = self._dim_for(dim)
        fb = self.bounds.feature_l2(d) if norm == "l2" else self.bounds.feature_linf(d)
        return self.derivative_bound(d) * fb

    def smoothness(self, dim: int | None = None) -> float:
        """Per-example bound on the largest eigenvalue of ∇²ℓ (= φ''_max ‖x‖²₂), penalty excluded."""
        d = self._dim_for(dim)
        lb = self.bounds.label(required=not self._loss.classification)
        return self._loss.curvature_bound(lb) * self.bounds.feature_l2(d) ** 2

    def curvature(self, dim: int | None = None) -> float:
        """Frank-Wolfe curvature constant Γ of the objective on C (Def. 5.1 of [TTZ])."""
        if self.constraint is None:
            raise InvalidParameterError("curvature: needs a bounded constraint set")
        lb = self.bounds.label(required=not self._loss.classification)
        width = 2 * self.margin_bound(dim)  # max_{a,b∈C} <x, a - b> for symmetric C (upper bound)
        return self._loss.curvature_bound(lb) * width**2 + self.l2_penalty * self.constraint.diameter**2

    # ------------------------------------------------------------------ data and evaluation
    def prepare(self, X: Any, y: Any) -> tuple[Any, Array]:
        """Validate ``X`` (dense or sparse), ``y`` and enforce (or clip to) the declared bounds."""
        if scipy.sparse.issparse(X):
            Xc: Any = scipy.sparse.csr_matrix(X, dtype=np.float64)
            if not np.all(np.isfinite(Xc.data)):
                raise InvalidParameterError(
                    "X: contains NaN or infinite entries; remove or impute them first"
                )
        else:
            Xc = check_array(X, "X", ndim=2)
        if y is None:
            raise InvalidParameterError("y: ERM problems need labels")
        yc = check_array(y, "y", ndim=1)
        if yc.shape[0] != Xc.shape[0]:
            raise InvalidParameterError(f"y: has {yc.shape[0]} entries but X has {Xc.shape[0]} rows")
        if Xc.shape[0] < 1:
            raise InvalidParameterError("X: needs at least one row")
        if self.dim is not None and Xc.shape[1] != self.dim:
            raise InvalidParameterError(
                f"X: has {Xc.shape[1]} columns but the constraint set has dimension {self.dim}"
            )
        Xc, yc2 = self.bounds.enforce(Xc, yc, label_required=not self._loss.classification)
        assert yc2 is not None
        return Xc, yc2

    def objective(self, theta: ArrayLike, X: Any, y: Array) -> float:
        """F(θ; D) (computed on raw data: **not private**)."""
        t = np.asarray(theta, dtype=float)
        z = np.asarray(X @ t).ravel()
        val = float(np.mean(self._loss.value(z, y)))
        return val + 0.5 * self.l2_penalty * float(t @ t)

    def gradient(self, theta: ArrayLike, X: Any, y: Array) -> Array:
        """∇F(θ; D) (computed on raw data: **not private**)."""
        t = np.asarray(theta, dtype=float)
        z = np.asarray(X @ t).ravel()
        w = self._loss.derivative(z, y) / y.shape[0]
        g = np.asarray(X.T @ w).ravel()
        return g + self.l2_penalty * t if self.l2_penalty else g
