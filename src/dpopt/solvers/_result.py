"""The result type shared by every solver of :mod:`dpopt.solvers`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt.accounting import PrivacySpent, non_private_spent
from dpopt.iteration import Status

__all__ = ["OptimizeResult", "Status", "non_private_spent"]

#: The shared status strings (:data:`dpopt.iteration.Status`): ``"completed"`` (a private solver ran
#: its planned, data-independent number of iterations: the only honest stopping rule for
#: gradient-perturbation methods), ``"converged"`` (an inner or non-private solve met its tolerance),
#: ``"max_iter"`` (it did not; a :class:`~dpopt.exceptions.ConvergenceWarning` is issued),
#: ``"max_time"``, ``"stopped"`` (the callback asked) and ``"failed"``.


@dataclass(frozen=True, eq=False)
class OptimizeResult:
    """What a solver returns.  Fields are the same for every method.

    Attributes
    ----------
    solution : ndarray of shape (n_features,)
        The private release θ_priv (read-only).  Everything the privacy guarantee covers.
    privacy : PrivacySpent
        What this run spent, under which neighbouring relation and accountant; for ``"paper"``
        calibrations ``privacy.verified_epsilon`` / ``privacy.true_epsilon`` give the figure that
        actually holds.
    status : {"completed", "converged", "max_iter", "max_time", "stopped", "failed"}
        See :data:`Status`.
    iterations : int
        Number of (outer) iterations run.
    method : str
        Solver name, e.g. ``"mirror_descent"``.
    calibration : str
        ``"tight"`` (noise calibrated with the tight PLD accountant), ``"paper"`` (the seed's
        formula), ``"kst"``/``"conservative"`` (a stated sound rule) or ``"none"`` (no noise).
    parameters : mapping
        Public, data-independent settings actually used (T, step sizes, σ or Laplace scale,
        sensitivities, constants).  Safe to publish.
    message : str
        One human-readable sentence about the outcome.
    nonprivate_diagnostics : mapping
        **Not private.**  Quantities computed on the raw data (objective value at the solution,
        inner-solver residuals, ...).  Empty unless requested with ``diagnostics=True``; never
        publish them alongside the private release.
    """

    solution: NDArray[np.float64] = field(repr=False)
    privacy: PrivacySpent
    status: Status
    iterations: int
    method: str
    calibration: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    message: str = ""
    nonprivate_diagnostics: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        sol = np.array(self.solution, dtype=np.float64)
        sol.setflags(write=False)
        object.__setattr__(self, "solution", sol)
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))
        object.__setattr__(
            self, "nonprivate_diagnostics", MappingProxyType(dict(self.nonprivate_diagnostics))
        )

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (
            type(self),
            (
                self.solution,
                self.privacy,
                self.status,
                self.iterations,
                self.method,
                self.calibration,
                dict(self.parameters),
                self.message,
                dict(self.nonprivate_diagnostics),
            ),
        )

    @property
    def x(self) -> NDArray[np.float64]:
        """Alias of :attr:`solution` (SciPy's name)."""
        return self.solution

    @property
    def nit(self) -> int:
        """Number of iterations run (SciPy's name; same as :attr:`iterations`)."""
        return self.iterations

    @property
    def success(self) -> bool:
        """True unless an inner solve failed to converge or the run was stopped early."""
        return self.status in ("completed", "converged")

    def __repr__(self) -> str:
        return (
            f"OptimizeResult(method={self.method!r}, status={self.status!r}, iterations={self.iterations}, "
            f"calibration={self.calibration!r}, privacy={self.privacy})"
        )
