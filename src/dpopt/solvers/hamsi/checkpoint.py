"""Durable run state of :func:`dpopt.solvers.hamsi.hamsi`, ``mbgd`` and ``hamsi_distributed``: one
``.npz`` file written atomically (a temporary file in the same directory, then ``os.replace``), so an
interrupted run can resume from its last checkpoint with the result of an uninterrupted run (same
seed); also the (de)serialisation of an L-BFGS memory shared by the solvers' checkpoints."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpopt.exceptions import InvalidParameterError

if TYPE_CHECKING:
    from dpopt.solvers.hamsi.lbfgs import CompactLBFGS

FORMAT_VERSION = 1
FILE_NAME = "hamsi_state.npz"


def state_path(checkpoint_dir: str | os.PathLike[str]) -> Path:
    """The state file of a checkpoint directory (created if missing)."""
    d = Path(checkpoint_dir)
    d.mkdir(parents=True, exist_ok=True)
    return d / FILE_NAME


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` (arrays, numbers, strings; ``None`` values omitted) atomically to ``path``."""
    arrays = {k: np.asarray(v) for k, v in state.items() if v is not None}
    arrays["format_version"] = np.asarray(FORMAT_VERSION)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".hamsi_state.", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)  # type: ignore[arg-type]
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_state(path: Path, fingerprint: dict[str, Any]) -> dict[str, Any] | None:
    """The saved state, ``None`` when there is none; an error when it belongs to another run."""
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            state = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise InvalidParameterError(
            f"checkpoint_dir: cannot read the state file {path.name} ({exc})"
        ) from None
    if int(state.get("format_version", -1)) != FORMAT_VERSION:
        raise InvalidParameterError(f"checkpoint_dir: {path.name} has an unknown format version")
    for key, want in fingerprint.items():
        got = state.get("fp_" + key)
        if got is None or str(got) != str(want):
            raise InvalidParameterError(
                f"checkpoint_dir: the saved run differs from this one in {key!r}; "
                "use another directory or resume=False"
            )
    return state


class RunRecord:
    """What every HAMSI run records: the evaluation history (times, epochs, training and held-out
    RMSE), the phase timings and the clocks; its part of a checkpoint."""

    def __init__(self) -> None:
        self.timings = {"gradient": 0.0, "update": 0.0, "hessian": 0.0}
        self.hist_t: list[float] = []
        self.hist_e: list[int] = []
        self.hist_r: list[float] = []
        self.hist_te: list[float] = []
        self.elapsed = self.eval_time = 0.0

    def record_state(self) -> dict[str, Any]:
        """The history, timings and clocks (arrays and numbers, for a checkpoint)."""
        return {
            "elapsed": self.elapsed, "eval_time": self.eval_time,
            "hist_t": np.asarray(self.hist_t, dtype=np.float64), "hist_e": np.asarray(self.hist_e, dtype=np.int64),
            "hist_r": np.asarray(self.hist_r, dtype=np.float64), "hist_te": np.asarray(self.hist_te, dtype=np.float64),
            **{"timing_" + k: v for k, v in self.timings.items()},
        }  # fmt: skip

    def load_record(self, state: dict[str, Any]) -> None:
        """Put :meth:`record_state`'s content back."""
        self.elapsed, self.eval_time = float(state["elapsed"]), float(state["eval_time"])
        self.hist_t[:], self.hist_e[:] = (
            [float(v) for v in state["hist_t"]],
            [int(v) for v in state["hist_e"]],
        )
        self.hist_r[:], self.hist_te[:] = (
            [float(v) for v in state["hist_r"]],
            [float(v) for v in state["hist_te"]],
        )
        for key in self.timings:
            self.timings[key] = float(state["timing_" + key])


def lbfgs_state(mem: CompactLBFGS, prefix: str = "lbfgs_", *, copy: bool = False) -> dict[str, Any]:
    """The stored pairs, their inner products, ``σ`` and the counters of ``mem`` (the arrays
    themselves, or copies with ``copy=True``)."""
    A, STY, YTY = (a.copy() for a in (mem.A, mem.STY, mem.YTY)) if copy else (mem.A, mem.STY, mem.YTY)
    return {
        prefix + "A": A, prefix + "STY": STY, prefix + "YTY": YTY,
        prefix + "order": np.asarray(mem.order, dtype=np.int64), prefix + "sigma": mem.sigma,
        prefix + "acc": mem.n_accepted, prefix + "rej": mem.n_rejected,
    }  # fmt: skip


def load_lbfgs(mem: CompactLBFGS, state: dict[str, Any], prefix: str = "lbfgs_") -> None:
    """Put :func:`lbfgs_state`'s content back into ``mem`` (same dimension and memory)."""
    mem.A[:], mem.STY[:], mem.YTY[:] = state[prefix + "A"], state[prefix + "STY"], state[prefix + "YTY"]
    mem.order = [int(v) for v in np.asarray(state[prefix + "order"]).ravel()]
    mem.sigma = float(state[prefix + "sigma"])
    mem.n_accepted, mem.n_rejected = int(state[prefix + "acc"]), int(state[prefix + "rej"])
    if mem.order:
        mem._rebuild()
