"""The result type :class:`HamsiResult` of :func:`hamsi`, :func:`mbgd` and :func:`hamsi_distributed`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

Float = NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class HamsiResult:
    """Outcome of :func:`hamsi` or :func:`mbgd`.

    Attributes
    ----------
    U, V : ndarray
        Final factors (``rank`` columns; without the bias columns of the biased model).
    method : {"hamsi", "mbgd"}
    scheme : str
        Partitioning scheme (``"full"`` for the single-subset cover).
    schedule : {"det", "stoc"}
    status : str
        ``"max_iter"`` (ran ``max_iter`` epochs), ``"max_time"`` (``time_budget`` reached),
        ``"stopped"`` (the callback asked), ``"converged"`` (the monitored RMSE improved by less
        than ``tol`` in ``patience`` evaluations; with ``early_stopping`` the factors are the
        best-validation ones) or ``"failed"`` (diverged: non-finite values; the factors
        are then the best evaluated iterate, whose RMSE is the last history entry; ``message`` says so).
    n_epochs, n_steps : int
        Outer iterations (also :attr:`nit`) and inner steps (subset visits) done.
    history_time : ndarray
        Optimization wall-clock seconds at each evaluation (evaluations themselves excluded, as in
        the reference code); ``history_time[0] = 0`` is the initial point.
    history_epoch : ndarray of int
    history_rmse : ndarray
        Training RMSE at each evaluation.
    history_test_rmse : ndarray or None
        Held-out RMSE at each evaluation when a ``test`` split was given.
    timings : mapping
        Seconds spent in the ``"gradient"``, ``"update"`` and ``"hessian"`` phases (Fig. 3.7).
    n_pairs_accepted, n_pairs_rejected : int
        Curvature pairs stored / rejected by the curvature test (HAMSI only).
    n_restarts : int
        Times the safeguard returned to the start of an outer iteration and cleared the memory.
    n_threads : int
        Threads actually used.
    partition_balance : mapping
        :meth:`dpopt.distributed.partition.Partition.balance` of the cover used.
    options : mapping
        The algorithm constants used.
    message : str
        One sentence about the outcome.
    row_bias, col_bias : ndarray or None
        Biases ``p`` and ``q`` of the biased model (``None`` without biases).
    offset : float
        The constant ``μ`` of the model (added to every prediction).
    setup_time, eval_time : float
        Seconds spent before the first step (layout, initialization) and in evaluations; neither is
        in ``history_time``.
    n_recoveries : int
        Worker failures :func:`hamsi_distributed` recovered from (``message`` says which);
        0 for the shared-memory solvers.
    """

    U: Float = field(repr=False)
    V: Float = field(repr=False)
    method: str
    scheme: str
    schedule: str
    status: str
    n_epochs: int
    n_steps: int
    history_time: Float = field(repr=False)
    history_epoch: NDArray[np.int64] = field(repr=False)
    history_rmse: Float = field(repr=False)
    history_test_rmse: Float | None = field(repr=False)
    timings: Mapping[str, float]
    n_pairs_accepted: int
    n_pairs_rejected: int
    n_restarts: int
    n_threads: int
    partition_balance: Mapping[str, Any] = field(repr=False)
    options: Mapping[str, Any] = field(repr=False)
    message: str = ""
    row_bias: Float | None = field(default=None, repr=False)
    col_bias: Float | None = field(default=None, repr=False)
    offset: float = 0.0
    setup_time: float = 0.0
    eval_time: float = 0.0
    n_recoveries: int = 0

    @property
    def nit(self) -> int:
        """Outer iterations done (the shared name; same as :attr:`n_epochs`)."""
        return self.n_epochs

    @property
    def success(self) -> bool:
        """True unless the run failed (diverged)."""
        return self.status != "failed"

    @property
    def rmse(self) -> float:
        """Final training RMSE."""
        return float(self.history_rmse[-1])

    @property
    def test_rmse(self) -> float | None:
        """Final held-out RMSE (``None`` without a test split)."""
        return None if self.history_test_rmse is None else float(self.history_test_rmse[-1])

    @property
    def wall_time(self) -> float:
        """Set-up, optimization and evaluation seconds together."""
        return self.setup_time + self.elapsed + self.eval_time

    @property
    def elapsed(self) -> float:
        """Optimization wall-clock seconds (evaluations excluded)."""
        return float(self.history_time[-1])

    def rmse_at(self, seconds: float) -> float:
        """Training RMSE of the last evaluation at or before ``seconds`` of optimization time."""
        i = int(np.searchsorted(self.history_time, seconds, side="right")) - 1
        return float(self.history_rmse[max(i, 0)])
