"""Solvers: the ``minimize`` front door, the shared result type and the optimization algorithms.

Importing this package is light: the algorithm modules are imported on first use (by
:func:`minimize` or by attribute access, e.g. ``dpopt.solvers.noisy_mirror_descent``).
"""

from __future__ import annotations

import importlib
from typing import Any

from dpopt.solvers._result import OptimizeResult, Status
from dpopt.solvers.minimize import available_methods, minimize, register_method

__all__ = [
    "OptimizeResult",
    "Status",
    "available_methods",
    "dp_gd",
    "dp_gdws",
    "dp_heavy_ball",
    "dp_mag",
    "dp_masg",
    "dp_nesterov",
    "dp_online_gdws",
    "minimize",
    "noisy_mirror_descent",
    "private_frank_wolfe",
    "private_objective_perturbation",
    "private_output_perturbation",
    "register_method",
]

_LAZY = {
    "noisy_mirror_descent": "dpopt.solvers.mirror_descent",
    "private_objective_perturbation": "dpopt.solvers.objective_perturbation",
    "private_frank_wolfe": "dpopt.solvers.frank_wolfe",
    "private_output_perturbation": "dpopt.solvers.output_perturbation",
    "dp_gd": "dpopt.solvers.gradient",
    "dp_heavy_ball": "dpopt.solvers.gradient",
    "dp_nesterov": "dpopt.solvers.gradient",
    "dp_gdws": "dpopt.solvers.gradient",
    "dp_online_gdws": "dpopt.solvers.gradient",
    "dp_masg": "dpopt.solvers.multistage",
    "dp_mag": "dpopt.solvers.multistage",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dpopt.solvers' has no attribute {name!r}")
