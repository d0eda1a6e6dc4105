"""Private answering of linear-query workloads with optimized strategies (COA, seeds 000/001).

* :mod:`~dpopt.linear_queries.workloads`: implicit workloads (identity, prefix, ranges, marginals, ...).
* :mod:`~dpopt.linear_queries.strategy`: :func:`optimize_strategy` (COA and a certified default) and
  :class:`StrategyResult`.
* :mod:`~dpopt.linear_queries.baselines`: the paper's comparison strategies (GM, Identity, HM, WM, ...).
* :mod:`~dpopt.linear_queries.mechanism`: :func:`answer`, the Gaussian matrix mechanism.
"""

from dpopt.linear_queries import baselines, workloads
from dpopt.linear_queries.mechanism import Answers, answer, expected_error, strategy_sensitivity
from dpopt.linear_queries.strategy import (
    COAParams,
    StrategyResult,
    dual_lower_bound,
    evaluate_strategy,
    optimize_strategy,
    strategy_error,
    svd_lower_bound,
)
from dpopt.linear_queries.workloads import Workload

__all__ = [
    "Answers",
    "COAParams",
    "StrategyResult",
    "Workload",
    "answer",
    "baselines",
    "dual_lower_bound",
    "evaluate_strategy",
    "expected_error",
    "optimize_strategy",
    "strategy_error",
    "strategy_sensitivity",
    "svd_lower_bound",
    "workloads",
]
