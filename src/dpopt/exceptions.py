"""Exceptions and warnings raised by dpopt.

Every error message says what is wrong and how to fix it, and never echoes data values (only
parameter names, shapes, counts and declared bounds).
"""

from __future__ import annotations

__all__ = [
    "BoundsViolationError",
    "BudgetExceededError",
    "ConvergenceWarning",
    "DPOptError",
    "InexactSolveError",
    "InvalidParameterError",
    "MissingDataBoundsError",
    "PrivacyClaimWarning",
    "UnsupportedEventError",
]


class DPOptError(Exception):
    """Base class of every error raised by dpopt."""


class InvalidParameterError(DPOptError, ValueError):
    """An argument has the wrong type, range, shape or contains non-finite values."""


class MissingDataBoundsError(DPOptError, ValueError):
    """A private computation needs a declared bound (feature norm, label bound, ...) that is absent.

    dpopt never infers sensitivities from the private data; declare the bound or opt in to clipping.
    """


class BoundsViolationError(DPOptError, ValueError):
    """The data violate a declared bound and clipping was not requested."""


class BudgetExceededError(DPOptError):
    """Composing an event would exceed the accountant's budget; the accountant was left unchanged."""


class UnsupportedEventError(DPOptError, TypeError):
    """An accountant cannot analyse the given privacy event (or a precondition of its rule fails)."""


class InexactSolveError(DPOptError, RuntimeError):
    """The inner solver could not certify the declared tolerance; nothing was released.

    The privacy analysis of objective and output perturbation covers a computed point only when its
    gradient-mapping norm is certified to be at most the declared ``tol``.  The budget committed to
    the run is spent (it was composed before any noise was drawn).
    """


class ConvergenceWarning(UserWarning):
    """An iterative solver stopped before meeting its tolerance."""


class PrivacyClaimWarning(UserWarning):
    """A seed's ("paper") calibration is unsound or used outside its preconditions.

    The computation still runs (for reproduction), but the reported privacy is the true figure.
    """
