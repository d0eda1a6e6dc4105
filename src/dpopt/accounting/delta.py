"""Warnings for a δ too large to mean anything (issue 26): δ >= 1/2 always, δ >= 1/n for a known n.

The mechanism that publishes each record in the clear, independently with probability δ, is
(0, δ)-DP under either neighbouring relation (neighbouring outputs differ only in the record's own
publication, an event of probability δ).  So an (ε, δ) guarantee with δ >= 1/n allows exposing about
δ·n >= 1 whole records of an n-record data set.

* :data:`MAX_MEANINGFUL_DELTA` = 1/2: 1/n <= 1/2 for every data set of two or more records (the
  smallest in which a record has others to hide among), so δ >= 1/2 is void whatever n is; the
  :class:`~dpopt.accounting.Budget` constructor warns without knowing n.
* :func:`warn_if_delta_exceeds_size`: the front doors that know a *public* n (replace-one: the
  number of rows; add/remove: only ``declared_size``, never the private data's size) warn for
  δ >= 1/n.  Nothing is refused and no calibration reads n: the warning is advice on the budget.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Iterator

from dpopt import _validation
from dpopt.exceptions import LargeDeltaWarning

__all__ = ["MAX_MEANINGFUL_DELTA", "delta_size_checked", "warn_if_delta_exceeds_size"]

#: δ at or above this (1/2) is at least 1/n for every data set of n >= 2 records (module docstring):
#: :class:`~dpopt.accounting.Budget` warns for it (defined next to its check in ``dpopt._validation``)
MAX_MEANINGFUL_DELTA = _validation.MAX_MEANINGFUL_DELTA

#: set inside :func:`delta_size_checked`: a front door already checked δ against n for this call
_CHECKED: contextvars.ContextVar[bool] = contextvars.ContextVar("dpopt_delta_size_checked", default=False)


def warn_if_delta_exceeds_size(
    delta: float, n: int | None, *, who: str, size: str, stacklevel: int = 3
) -> None:
    """Warn (:class:`~dpopt.exceptions.LargeDeltaWarning`) when ``delta >= 1/n``.

    Parameters
    ----------
    delta
        The budget's δ (0 never warns).
    n
        A public size: the number of rows under replace-one, ``declared_size`` under add/remove
        (never the private size); None skips the check.
    who, size
        The front door and the name of n in the caller's terms (``"the number of rows"``,
        ``"declared_size"``).
    """
    if _CHECKED.get() or n is None or not delta > 0 or delta * int(n) < 1:
        return
    warnings.warn(
        f"{who}: delta={delta:g} is at least 1/n with n={int(n)} ({size}); a mechanism that publishes each "
        "record with probability delta meets such a guarantee, exposing about delta*n >= 1 records in the "
        "clear. Use delta well below 1/n (e.g. at most 1/n**2)",
        LargeDeltaWarning,
        stacklevel=stacklevel,
    )


@contextlib.contextmanager
def delta_size_checked() -> Iterator[None]:
    """Within the block (this context), :func:`warn_if_delta_exceeds_size` is silent.

    A front door that checked δ against n once wraps its inner calls (``minimize`` on shares of the
    budget, planning passes) so that the caller sees one warning.
    """
    token = _CHECKED.set(True)
    try:
        yield
    finally:
        _CHECKED.reset(token)
