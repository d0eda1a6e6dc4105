"""dpopt: differentially private optimization and query release, and distributed optimizers."""

from dpopt.exceptions import (
    BoundsViolationError,
    BudgetExceededError,
    ConvergenceWarning,
    DPOptError,
    InvalidParameterError,
    MissingDataBoundsError,
    PrivacyClaimWarning,
    UnsupportedEventError,
)

__version__ = "0.1.0"

__all__ = [
    "BoundsViolationError",
    "BudgetExceededError",
    "ConvergenceWarning",
    "DPOptError",
    "InvalidParameterError",
    "MissingDataBoundsError",
    "PrivacyClaimWarning",
    "UnsupportedEventError",
    "__version__",
]
