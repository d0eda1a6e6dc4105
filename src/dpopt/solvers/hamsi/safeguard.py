"""The restart safeguard of HAMSI, shared by :func:`~dpopt.solvers.hamsi.hamsi` (one process) and
:func:`~dpopt.solvers.hamsi.hamsi_distributed` (every shard holds an identical copy, fed with the
same all-reduced subset losses, so all shards take the same decision).

The loss of a subset is known for free when its gradient is computed.  After steps taken since the
last *safe point* (the start of an outer iteration, checked when its first gradient was), a subset
whose loss exceeds ``growth`` times its value at its previous visit, or a non-finite gradient, sends
the iterate back to the safe point, clears the L-BFGS memory (warm-up again) and shortens the steps
that overshot: gradient steps by 4 when no quasi-Newton step was taken since the safe point,
quasi-Newton steps by 2 otherwise.  A non-finite gradient with nothing to return to is a failure.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

Float = NDArray[np.float64]

#: Keys of :meth:`RestartSafeguard.state` (the names the checkpoint files have always used).
STATE_KEYS = ("n_restarts", "gd_scale", "qn_scale", "qn_since_safe", "gd_since_safe", "prev_sse")


class RestartSafeguard:
    """Decisions and step scales of the restart safeguard (the caller owns the iterate).

    Parameters
    ----------
    n_subsets : int
        Subsets of the cover (one remembered loss each).
    enabled : bool
        False: never restart (only report a non-finite gradient as a failure).
    growth : float
        Loss growth factor that triggers a restart.
    """

    def __init__(self, n_subsets: int, *, enabled: bool, growth: float) -> None:
        self.enabled = enabled
        self.growth = growth
        self.prev_sse = np.full(n_subsets, math.inf)  # loss of each subset at its previous visit
        self.gd_scale = 1.0  # shrinks when warm-up gradient steps alone increased a subset's loss
        self.qn_scale = 1.0  # shrinks when quasi-Newton steps increased it
        self.qn_since_safe = False
        self.gd_since_safe = False
        self.n_restarts = 0

    def guarded(self, has_safe_point: bool) -> bool:
        """Whether a restart is possible now (a safe point exists and steps were taken since)."""
        return self.enabled and has_safe_point and (self.qn_since_safe or self.gd_since_safe)

    def check(
        self, k: int, sse: float, bad: bool, has_safe_point: bool
    ) -> Literal["ok", "restart", "failed"]:
        """Judge the loss ``sse`` of subset ``k`` (``bad``: non-finite loss or gradient).

        ``"restart"``: the caller returns to its safe point, clears its L-BFGS memory and starts the
        next outer iteration (the scales and counters are updated here); ``"failed"``: diverged
        with nothing to return to; ``"ok"``: the loss is remembered, go on.
        """
        guarded = self.guarded(has_safe_point)
        if bad and not guarded:
            return "failed"
        if guarded and (bad or sse > self.growth * self.prev_sse[k]):
            self.n_restarts += 1
            self.prev_sse[:] = math.inf
            if not self.qn_since_safe:
                # gradient steps alone overshot: their schedule does not fit the curvature of
                # this problem (e.g. few ratings per row): shorten them
                self.gd_scale *= 0.25
            else:
                self.qn_scale *= 0.5  # and quasi-Newton steps that overshot take shorter steps
            self.qn_since_safe = self.gd_since_safe = False
            return "restart"
        self.prev_sse[k] = sse
        return "ok"

    def new_safe_point(self) -> None:
        """The caller stored a new safe point (no step taken since)."""
        self.qn_since_safe = self.gd_since_safe = False

    def stepped(self, quasi_newton: bool) -> None:
        """A quasi-Newton (or gradient) step was taken; returns nothing."""
        if quasi_newton:
            self.qn_since_safe = True
        else:
            self.gd_since_safe = True

    def state(self) -> dict[str, Any]:
        """Everything needed to continue (for checkpoints)."""
        return {
            "n_restarts": self.n_restarts, "gd_scale": self.gd_scale, "qn_scale": self.qn_scale,
            "qn_since_safe": self.qn_since_safe, "gd_since_safe": self.gd_since_safe,
            "prev_sse": self.prev_sse.copy(),
        }  # fmt: skip

    def load(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state` (numbers may come back as 0-d arrays from a file)."""
        self.n_restarts = int(state["n_restarts"])
        self.gd_scale, self.qn_scale = float(state["gd_scale"]), float(state["qn_scale"])
        self.qn_since_safe, self.gd_since_safe = bool(state["qn_since_safe"]), bool(state["gd_since_safe"])
        self.prev_sse[:] = np.asarray(state["prev_sse"], dtype=np.float64)
