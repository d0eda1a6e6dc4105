"""Private answering of linear-query workloads with optimized strategies (COA, seeds 000/001).

* :mod:`~dpopt.linear_queries.workloads`: implicit workloads (identity, prefix, ranges, marginals, ...).
* :mod:`~dpopt.linear_queries.strategy`: :func:`optimize_strategy` (COA and a certified default) and
  :class:`StrategyResult`.
* :mod:`~dpopt.linear_queries.baselines`: the paper's comparison strategies (GM, Identity, HM, WM, ...).
* :mod:`~dpopt.linear_queries.mechanism`: :func:`answer`, the Gaussian matrix mechanism.
* :mod:`~dpopt.linear_queries.union`: unions of Kronecker products on domains of any size
  (:func:`product_marginals`, :func:`optimize_union`).
* :mod:`~dpopt.linear_queries.records`: tables of records with declared domains (:class:`Schema`).

Example
-------
>>> import numpy as np
>>> from dpopt.accounting import Budget
>>> from dpopt.linear_queries import answer, optimize_strategy, workloads
>>> W = workloads.all_range(64)                       # public, no data
>>> strategy = optimize_strategy(W)                   # data independent; cacheable (cache_dir=...)
>>> strategy.converged and strategy.gap <= 1e-4       # certified within 0.01% of the optimum
True
>>> x = np.arange(64)                                 # the private histogram (unit counts)
>>> out = answer(W, x, strategy=strategy, budget=Budget(1.0, 1e-6), rng=0)
>>> out.values.shape, out.privacy.neighbouring
((2080,), 'add_remove')
"""

from dpopt.linear_queries import baselines, records, union, workloads
from dpopt.linear_queries.dawa import DawaResult, dawa
from dpopt.linear_queries.mechanism import (
    Answers,
    answer,
    expected_error,
    query_variances,
    strategy_sensitivity,
)
from dpopt.linear_queries.records import Records, Schema
from dpopt.linear_queries.strategy import (
    COAParams,
    StrategyResult,
    dual_lower_bound,
    evaluate_strategy,
    optimize_strategy,
    strategy_error,
    svd_lower_bound,
)
from dpopt.linear_queries.union import optimize_union, product_marginals
from dpopt.linear_queries.workloads import Workload

__all__ = [
    "Answers",
    "COAParams",
    "DawaResult",
    "Records",
    "Schema",
    "StrategyResult",
    "Workload",
    "answer",
    "baselines",
    "dawa",
    "dual_lower_bound",
    "evaluate_strategy",
    "expected_error",
    "optimize_strategy",
    "optimize_union",
    "product_marginals",
    "query_variances",
    "records",
    "strategy_error",
    "strategy_sensitivity",
    "svd_lower_bound",
    "union",
    "workloads",
]
