"""The options of :func:`~dpopt.solvers.hamsi.hamsi`, ``mbgd`` and ``hamsi_distributed``: one frozen
:class:`HamsiOptions`, validated once when it is built, and :func:`resolve_options`, which turns a
solver's keyword arguments (the historical calling convention) into one."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Literal

from dpopt._validation import check_int, check_nonneg, check_positive
from dpopt.exceptions import InvalidParameterError
from dpopt.iteration import deprecated_alias


@dataclass(frozen=True)
class HamsiOptions:
    """Algorithm constants, stopping rules and run-state options of the HAMSI family.

    Every field is the keyword argument of the same name of :func:`~dpopt.solvers.hamsi.hamsi`
    (see there); ``max_recoveries`` and ``stall_*`` are those of
    :func:`~dpopt.solvers.hamsi.hamsi_distributed`.  The values are checked (and numbers
    normalized to ``float``/``int``) when the object is built; a solver reads only the fields it
    uses.  :meth:`for_solver` starts from a solver's own defaults (``mbgd``: ``eta=0.001``,
    ``beta_counter="outer"``, ``beta_floor=0``; ``hamsi_distributed``: ``max_iter=20``,
    ``checkpoint_every=5``).

    Raises
    ------
    InvalidParameterError
        For an unknown choice, a non-positive constant or inconsistent options.
    """

    schedule: Literal["det", "stoc"] = "det"
    eta: float = 0.06
    gamma: float = 0.51
    memory: int = 5
    eta_gd: float = 0.001
    gamma_gd: float = 0.51
    beta_counter: Literal["outer", "inner"] = "inner"
    beta_floor: float = 1.0
    sigma_mode: Literal["thesis", "running_min"] = "thesis"
    sigma0: float = 500.0
    curvature: Literal["relative", "reference", "thesis"] = "relative"
    curvature_tol: float | None = None
    safeguard: bool = True
    restart_growth: float = 2.0
    max_iter: int = 100
    time_budget: float | None = None
    n_threads: int = 1
    backend: Literal["threads", "numba"] = "threads"
    n_subsets: int = 20
    init_scale: float | Literal["spectral"] | None = 1.0
    eval_every: int = 1
    tol: float = 0.0
    patience: int | None = None
    early_stopping: bool = False
    train_rmse: Literal["exact", "running"] = "exact"
    checkpoint_dir: str | os.PathLike[str] | None = None
    checkpoint_every: int = 1
    resume: bool = False
    max_recoveries: int = 3
    stall_rescue: bool = True
    stall_window: int = 10
    stall_tol: float = 1e-3

    def __post_init__(self) -> None:
        if self.schedule not in ("det", "stoc"):
            raise InvalidParameterError("schedule: must be 'det' (cyclic shift) or 'stoc' (shuffling)")
        if self.beta_counter not in ("outer", "inner"):
            raise InvalidParameterError("beta_counter: must be 'outer' (thesis) or 'inner' (reference code)")
        checked: dict[str, Any] = {
            "eta": check_positive(self.eta, "eta"),
            "gamma": check_positive(self.gamma, "gamma"),
            "eta_gd": check_positive(self.eta_gd, "eta_gd"),
            "gamma_gd": check_positive(self.gamma_gd, "gamma_gd"),
            "memory": check_int(self.memory, "memory"),
            "beta_floor": check_nonneg(self.beta_floor, "beta_floor"),
            "restart_growth": check_positive(self.restart_growth, "restart_growth"),
            "safeguard": bool(self.safeguard),
            "max_iter": check_int(self.max_iter, "max_iter", minimum=0),
            "time_budget": None
            if self.time_budget is None
            else check_positive(self.time_budget, "time_budget"),
            "n_threads": check_int(self.n_threads, "n_threads"),
            "n_subsets": check_int(self.n_subsets, "n_subsets"),
            "eval_every": check_int(self.eval_every, "eval_every"),
            "tol": check_nonneg(self.tol, "tol"),
            "patience": None if self.patience is None else check_int(self.patience, "patience"),
            "checkpoint_every": check_int(self.checkpoint_every, "checkpoint_every"),
            "max_recoveries": check_int(self.max_recoveries, "max_recoveries", minimum=0),
            "stall_rescue": bool(self.stall_rescue),
            "stall_window": check_int(self.stall_window, "stall_window"),
            "stall_tol": check_nonneg(self.stall_tol, "stall_tol"),
        }
        if self.train_rmse not in ("exact", "running"):
            raise InvalidParameterError(
                "train_rmse: must be 'exact' (one pass over the training ratings per evaluation) or "
                "'running' (the mean of the epoch's subset losses, free)"
            )
        if self.resume and self.checkpoint_dir is None:
            raise InvalidParameterError("resume: needs checkpoint_dir= (where the state file is kept)")
        if self.backend not in ("threads", "numba"):
            raise InvalidParameterError(
                "backend: must be 'threads' (thread pool, default) or 'numba' (prange)"
            )
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @classmethod
    def for_solver(cls, solver: str, **changes: Any) -> HamsiOptions:
        """The defaults of ``solver`` (``"hamsi"``, ``"mbgd"`` or ``"hamsi_distributed"``) with ``changes``."""
        if solver not in _DEFAULTS:
            raise InvalidParameterError(f"solver: expected one of {sorted(_DEFAULTS)}")
        return cls(**{**_DEFAULTS[solver], **changes})

    def as_mbgd(self) -> HamsiOptions:
        """These options with HAMSI's own constants neutral (mb-GD has no memory and no safeguard;
        its warm-up schedule is its step schedule)."""
        return dataclasses.replace(
            self, memory=1, eta_gd=self.eta, gamma_gd=self.gamma, sigma_mode="thesis", sigma0=500.0,
            curvature="relative", curvature_tol=None, safeguard=False, restart_growth=2.0,
        )  # fmt: skip


_FIELDS = frozenset(f.name for f in dataclasses.fields(HamsiOptions))
_HAMSI_ONLY = frozenset(
    {"memory", "eta_gd", "gamma_gd", "sigma_mode", "sigma0", "curvature", "curvature_tol", "safeguard"}
    | {"restart_growth"}
)
_SHARED_MEMORY_ONLY = frozenset({"n_threads", "backend", "n_subsets", "eval_every", "train_rmse"})
_DISTRIBUTED_ONLY = frozenset({"max_recoveries", "stall_rescue", "stall_window", "stall_tol"})
_ACCEPTS = {
    "hamsi": _FIELDS - _DISTRIBUTED_ONLY,
    "mbgd": _FIELDS - _DISTRIBUTED_ONLY - _HAMSI_ONLY,
    "hamsi_distributed": _FIELDS - _SHARED_MEMORY_ONLY,
}
_DEFAULTS: dict[str, dict[str, Any]] = {
    "hamsi": {},
    "mbgd": {"eta": 0.001, "beta_counter": "outer", "beta_floor": 0.0},
    "hamsi_distributed": {"max_iter": 20, "checkpoint_every": 5},
}


def resolve_options(solver: str, options: HamsiOptions | None, keywords: dict[str, Any]) -> HamsiOptions:
    """``options`` (default: ``solver``'s defaults) with the keyword arguments ``keywords`` of a
    call to ``solver`` applied; ``max_epochs=`` is the deprecated name of ``max_iter=`` (warns).

    Raises
    ------
    TypeError
        For a keyword ``solver`` does not take (as Python does for an unknown argument).
    InvalidParameterError
        For invalid values, or ``options`` that is not a :class:`HamsiOptions`.
    """
    keywords = dict(keywords)
    if keywords.get("max_epochs", 0) is None:
        del keywords["max_epochs"]
    limit = deprecated_alias(
        keywords, "max_epochs", "max_iter", keywords.pop("max_iter", None), where=solver, stacklevel=4
    )
    if limit is not None:
        keywords["max_iter"] = limit
    for name in sorted(set(keywords) - _ACCEPTS[solver]):
        raise TypeError(f"{solver}() got an unexpected keyword argument {name!r}")
    if options is not None and not isinstance(options, HamsiOptions):
        raise InvalidParameterError("options: expected a HamsiOptions or None")
    if options is None:
        return HamsiOptions.for_solver(solver, **keywords)
    return dataclasses.replace(options, **keywords) if keywords else options
