"""dpopt: differentially private optimization and query release, and distributed optimizers.

The front doors are available from the top level (imported on first use, so ``import dpopt`` stays
fast):

* :func:`dpopt.minimize` -- private empirical risk minimisation (``dpopt.available_methods()``);
* :func:`dpopt.answer` and :func:`dpopt.optimize_strategy` -- linear-query release;
* :class:`dpopt.PrivateADMM` -- private ADMM across data owners; :func:`dpopt.hamsi` -- matrix
  factorization, and :class:`dpopt.MFRecommender` -- a recommender fitted with it (not private);
* :class:`dpopt.Budget`, :func:`dpopt.make_accountant`, :func:`dpopt.calibrate_noise` -- budgets and
  accounting;
* the scikit-learn estimators :class:`dpopt.DPLogisticRegression`, :class:`dpopt.DPLinearRegression`,
  :class:`dpopt.DPLasso`;
* the exceptions (all derive from :class:`dpopt.DPOptError`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dpopt.exceptions import (
    BoundsViolationError,
    BudgetExceededError,
    ConvergenceWarning,
    DPOptError,
    InexactSolveError,
    InvalidParameterError,
    LargeDeltaWarning,
    MissingDataBoundsError,
    PrivacyClaimWarning,
    UnsupportedEventError,
)

#: The version of this dpopt.
__version__ = "0.1.0"

#: public name -> module that defines it (imported on first attribute access)
_LAZY: dict[str, str] = {
    "minimize": "dpopt.solvers.minimize",
    "available_methods": "dpopt.solvers.minimize",
    "describe_methods": "dpopt.solvers.minimize",
    "method_spec": "dpopt.solvers.minimize",
    "register_method": "dpopt.solvers.minimize",
    "OptimizeResult": "dpopt.solvers._result",
    "Budget": "dpopt.accounting",
    "PrivacySpent": "dpopt.accounting",
    "make_accountant": "dpopt.accounting",
    "calibrate_noise": "dpopt.accounting",
    "answer": "dpopt.linear_queries",
    "optimize_strategy": "dpopt.linear_queries",
    "PrivateADMM": "dpopt.distributed.admm",
    "hamsi": "dpopt.solvers.hamsi",
    "MFRecommender": "dpopt.recommender",
    "DPLogisticRegression": "dpopt.estimators",
    "DPLinearRegression": "dpopt.estimators",
    "DPLasso": "dpopt.estimators",
    "ERMProblem": "dpopt.problems",
    "DataBounds": "dpopt.problems",
}

__all__ = [
    "BoundsViolationError",
    "Budget",
    "BudgetExceededError",
    "ConvergenceWarning",
    "DPLasso",
    "DPLinearRegression",
    "DPLogisticRegression",
    "DPOptError",
    "DataBounds",
    "ERMProblem",
    "InexactSolveError",
    "InvalidParameterError",
    "LargeDeltaWarning",
    "MFRecommender",
    "MissingDataBoundsError",
    "OptimizeResult",
    "PrivacyClaimWarning",
    "PrivacySpent",
    "PrivateADMM",
    "UnsupportedEventError",
    "__version__",
    "answer",
    "available_methods",
    "calibrate_noise",
    "describe_methods",
    "hamsi",
    "make_accountant",
    "method_spec",
    "minimize",
    "optimize_strategy",
    "register_method",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from dpopt.accounting import Budget, PrivacySpent, calibrate_noise, make_accountant
    from dpopt.distributed.admm import PrivateADMM
    from dpopt.estimators import DPLasso, DPLinearRegression, DPLogisticRegression
    from dpopt.linear_queries import answer, optimize_strategy
    from dpopt.problems import DataBounds, ERMProblem
    from dpopt.recommender import MFRecommender
    from dpopt.solvers._result import OptimizeResult
    from dpopt.solvers.hamsi import hamsi
    from dpopt.solvers.minimize import (
        available_methods,
        describe_methods,
        method_spec,
        minimize,
        register_method,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dpopt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
