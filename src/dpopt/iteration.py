"""One iteration vocabulary for every iterative solver: callback protocol, status strings, names.

The ERM solvers, the DP gradient methods, the strategy optimizer, private ADMM and HAMSI share

* **one callback protocol**: ``callback(info)`` is called after every iteration with an
  :class:`IterationInfo` (the iteration count ``nit``, the current public iterate ``x`` and
  method-specific public values); returning ``True`` or raising ``StopIteration`` stops the run,
  which then ends with status ``"stopped"``;
* **one set of status strings** (:data:`Status`); the detail (diverged, line search failed, ...)
  goes to the result's ``message``;
* **one name for the iteration limit**, ``max_iter``, and for the number of iterations run, ``nit``.

The older names (``iterations=``, ``max_iterations=``, ``max_epochs=``, ``n_rounds=``; results'
``iterations``/``rounds``/``n_epochs``) keep working for one release with a ``DeprecationWarning``
where they are arguments.

Unlike SciPy's ``OptimizeResult`` (a mutable dict), dpopt's results are frozen dataclasses that keep
the private release apart from non-private diagnostics; they expose ``nit``, ``status``,
``success`` and ``message`` with SciPy's meaning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from dpopt import progress

__all__ = [
    "STATUSES",
    "Callback",
    "IterationInfo",
    "Status",
    "deprecated_alias",
    "notify",
    "wants_stop",
]

#: ``"completed"``: ran its planned, data-independent number of iterations (private methods: the
#: only honest stopping rule).  ``"converged"``: met its tolerance.  ``"max_iter"``: reached the
#: iteration limit without meeting its tolerance.  ``"max_time"``: reached its time limit.
#: ``"stopped"``: the callback asked to stop.  ``"failed"``: could not continue (diverged, line search
#: failed, ...; the message says which).
Status = Literal["completed", "converged", "max_iter", "max_time", "stopped", "failed"]
#: The values of :data:`Status`, as a tuple.
STATUSES: tuple[str, ...] = ("completed", "converged", "max_iter", "max_time", "stopped", "failed")


@dataclass(frozen=True, eq=False)
class IterationInfo:
    """What a callback sees after an iteration (public values only).

    Attributes
    ----------
    nit : int
        Iterations completed so far (1 after the first).
    x : ndarray or None
        The current iterate, read-only (for private methods: part of the private release).
    extra : mapping
        Method-specific public values (e.g. ``"upper_bound"``, ``"rmse"``, ``"privacy_bound"``),
        also readable as attributes (``info.rmse``) and items (``info["rmse"]``).
    """

    nit: int
    x: NDArray[np.float64] | None = field(default=None, repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.x is not None:
            x = np.array(self.x, dtype=np.float64)
            x.setflags(write=False)
            object.__setattr__(self, "x", x)
        object.__setattr__(self, "extra", MappingProxyType(dict(self.extra)))

    def __getitem__(self, key: str) -> Any:
        if key in ("nit", "x"):
            return getattr(self, key)
        return self.extra[key]

    def __contains__(self, key: object) -> bool:
        return key in ("nit", "x") or key in self.extra

    def keys(self) -> Iterator[str]:
        yield "nit"
        yield "x"
        yield from self.extra

    def __getattr__(self, name: str) -> Any:
        extra = self.__dict__.get("extra", {})
        if name in extra:
            return extra[name]
        raise AttributeError(f"IterationInfo has no field {name!r} (available: {list(self.keys())})")


#: ``callback(info)``: called after every iteration; returning ``True`` stops the run.
Callback = Callable[[IterationInfo], Any]


def wants_stop(callback: Callable[..., Any] | None, *args: Any) -> bool:
    """Call ``callback(*args)``; True when it returned ``True`` or raised ``StopIteration``."""
    if callback is None:
        return False
    try:
        return callback(*args) is True
    except StopIteration:
        return True


def notify(callback: Callback | None, nit: int, x: Any = None, **values: Any) -> bool:
    """Build the :class:`IterationInfo` and call ``callback`` with it; True when it asks to stop.

    Also the solvers' sign of life: with a progress reporter current (:func:`dpopt.progress.reporting`),
    it writes ``iteration nit`` at most once per the reporter's interval.
    """
    reporter = progress.current()
    if reporter is not None:
        reporter.heartbeat(f"iteration {nit}")
    if callback is None:
        return False
    return wants_stop(callback, IterationInfo(nit, x, values))


def deprecated_alias(
    options: dict[str, Any], old: str, new: str, value: Any, *, where: str, stacklevel: int = 3
) -> Any:
    """Resolve a renamed argument: ``value`` of ``new`` or, with a DeprecationWarning, ``options[old]``."""
    if old not in options:
        return value
    old_value = options.pop(old)
    warnings.warn(
        f"{where}: {old}= is deprecated; pass {new}= (the old name will be removed in the next release)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    if value is not None:
        from dpopt.exceptions import InvalidParameterError

        raise InvalidParameterError(f"{new}: pass either {new} or {old}, not both")
    return old_value
