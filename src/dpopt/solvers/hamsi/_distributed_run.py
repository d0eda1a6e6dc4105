"""The driver of :func:`~dpopt.solvers.hamsi.hamsi_distributed`: its working set and the steps of
its loop (``DistributedRun``), and the features around the loop as hooks (:mod:`.hooks`'s points):
stall rescue, the in-memory and durable checkpoints, the time budget, the stopping rules (early
stopping) and the callback."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from dpopt.iteration import Callback, notify
from dpopt.solvers.hamsi.checkpoint import RunRecord, save_state
from dpopt.solvers.hamsi.hooks import Hook, converged_message
from dpopt.solvers.hamsi.options import HamsiOptions

if TYPE_CHECKING:
    from dpopt.matrix_factorization import MatrixFactorizationProblem

Float = NDArray[np.float64]
_PHASES = ("gradient", "hessian", "update")
DIVERGED = "diverged (non-finite values); the factors are the best evaluated iterate"


class DistributedRun(RunRecord):
    """The driver's working set: gathered factors, history, engine, diagnostics of shard 0."""

    def __init__(
        self, problem: MatrixFactorizationProblem, opts: HamsiOptions, eng: Any, cuts: tuple[Any, Any],
        U0: Float, V0: Float, held_out: Callable[[Float, Float], float] | None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.problem, self.opts, self.eng, self.held_out = problem, opts, eng, held_out
        self.rc, self.cc = cuts
        self.U, self.V = U0.copy(), V0.copy()
        self.best = math.inf  # best evaluated training RMSE and its factors
        self.best_U, self.best_V = U0.copy(), V0.copy()
        self.diag: dict[str, Any] = {"failed": False, "restarts": 0, "steps": 0, "pairs": (0, 0), "qn": 0}
        self.status, self.message = "max_iter", ""
        self.recoveries: list[str] = []
        self.notes: list[str] = []  # rescues and resharding, for the message
        self.epoch = self.done = 0
        self.failed = self.stop = False
        self.memory_ckpt: tuple[int, Any, dict[str, Any]] = (0, None, {})
        self.hooks: list[Hook[DistributedRun]] = []

    def fill(self) -> None:
        """Gather the shards' factors into ``U`` and ``V``."""
        width = self.problem.width
        for r, xr in enumerate(self.eng.call("x")):
            nU = (self.rc[r + 1] - self.rc[r]) * width
            self.U[self.rc[r] : self.rc[r + 1]] = xr[:nU].reshape(-1, width)
            self.V[self.cc[r] : self.cc[r + 1]] = xr[nU:].reshape(-1, width)

    def gather(self, epoch: int) -> None:
        """Gather and evaluate the current factors (then the hooks' ``on_evaluate``)."""
        self.fill()
        t_ev = time.perf_counter()
        self.hist_t.append(self.elapsed)
        self.hist_e.append(epoch)
        self.hist_r.append(self.problem.rmse(self.U, self.V))
        if self.held_out is not None:
            self.hist_te.append(self.held_out(self.U, self.V))
        if self.hist_r[-1] < self.best:
            self.best = self.hist_r[-1]
            self.best_U[:], self.best_V[:] = self.U, self.V
        for hook in self.hooks:
            hook.on_evaluate(self)
        self.eval_time += time.perf_counter() - t_ev

    def driver_state(self, epoch: int) -> dict[str, Any]:
        """The driver's state after outer iteration ``epoch`` (copies; the hooks add theirs)."""
        state: dict[str, Any] = {
            "epoch": epoch, "best_rmse": self.best,
            "best_U": self.best_U.copy(), "best_V": self.best_V.copy(), **self.record_state(),
        }  # fmt: skip
        for hook in self.hooks:
            state.update(hook.state())
        return state

    def load_driver(self, state: dict[str, Any]) -> int:
        """Continue from :meth:`driver_state`; returns its outer iteration."""
        self.best = float(state["best_rmse"])
        self.best_U[:], self.best_V[:] = state["best_U"], state["best_V"]
        self.load_record(state)
        for hook in self.hooks:
            hook.load(state)
        return int(state["epoch"])

    def start(self, factory: Any, specs: list[Any], saved: dict[str, Any] | None, saved_shards: int) -> Any:
        """Start the shards (afresh, from a saved state, or from a state of another shard count);
        returns their states (the first in-memory checkpoint)."""
        eng, P = self.eng, len(specs)
        if saved is not None and saved_shards != P:
            # resumed with another shard count: the saved factors (already in the specs), fresh
            # shard programs (L-BFGS memory, safeguard, step schedules), the driver's history
            self.done = self.load_driver(saved)
            eng.start(factory, specs, [list(range(P))] * P)
            eng.call(
                "rescue", self.U, self.V, [int(c) for c in self.rc], [int(c) for c in self.cc], self.done
            )
            self.fill()
            self.notes.append(
                f"resumed from a checkpoint of {saved_shards} shards with n_shards={P}: continued "
                f"from its factors after outer iteration {self.done} with fresh quasi-Newton memory and "
                "step schedules (not the result of an uninterrupted run)"
            )
            return eng.call("snapshot")
        if saved is not None:
            states = [
                {
                    key[len(f"shard{r}_") :]: value
                    for key, value in saved.items()
                    if key.startswith(f"shard{r}_")
                }
                for r in range(P)
            ]
            self.done = self.load_driver(saved)
            eng.start(factory, specs, [list(range(P))] * P, states=states)
            self.fill()
            s0 = states[0]
            self.diag = {
                "failed": bool(s0["failed"]), "restarts": int(s0["n_restarts"]), "steps": int(s0["n_steps"]),
                "qn": int(s0["n_qn"]), "pairs": (int(s0["lbfgs_acc"]), int(s0["lbfgs_rej"])),
            }  # fmt: skip
            return states
        eng.start(factory, specs, [list(range(P))] * P)
        self.gather(0)
        return eng.call("snapshot")

    def loop(self, first_round: list[int]) -> None:
        """The outer iterations: engine rounds, evaluation, the hooks; recovery from a lost worker."""
        from dpopt.distributed.engines import EngineError

        self.epoch = self.done
        while self.epoch < self.opts.max_iter:
            try:
                self._rounds(first_round[self.epoch], first_round[self.epoch + 1])
                self.epoch += 1
                self.gather(self.epoch)
                self.failed = bool(self.diag["failed"]) or not math.isfinite(self.hist_r[-1])
                for hook in self.hooks:
                    hook.on_epoch_end(self)
            except EngineError as err:
                self._recover(err)
                continue
            self.done = self.epoch
            if self.failed:
                self._hand_back_best()
                break
            for hook in self.hooks:
                hook.on_evaluated(self)
                if self.stop:
                    break
            if self.stop:
                break
        for hook in self.hooks:
            hook.on_run_end(self)

    def _rounds(self, begin: int, end: int) -> None:
        for t in range(begin, end):
            t0 = time.perf_counter()
            diags = self.eng.step(t)
            dt = time.perf_counter() - t0
            self.timings[_PHASES[t % 3]] += dt
            self.elapsed += dt
            if t % 3 == 2:
                self.diag = diags[0]

    def _recover(self, err: Any) -> None:
        if not err.crashed or len(self.recoveries) >= self.opts.max_recoveries:
            raise err
        first_line = str(err).splitlines()[0]
        self.recoveries.append(
            f"{first_line}; recovered from the checkpoint of outer iteration {self.memory_ckpt[0]}"
        )
        self.eng.restart(self.memory_ckpt[1])
        self.epoch = self.load_driver(self.memory_ckpt[2])

    def _hand_back_best(self) -> None:
        self.status, self.message = "failed", DIVERGED
        self.U[:], self.V[:] = self.best_U, self.best_V
        self.hist_t.append(self.elapsed)
        self.hist_e.append(self.epoch)
        self.hist_r.append(self.best)
        if self.held_out is not None:
            self.hist_te.append(self.held_out(self.U, self.V))


class StallRescue(Hook[DistributedRun]):
    """Restart every shard from the spectral start after ``stall_window`` outer iterations of less
    than ``stall_tol`` relative progress each (none with a restart), if that start fits better;
    at most once per run (see :func:`~dpopt.solvers.hamsi.hamsi_distributed`)."""

    def __init__(self, opts: HamsiOptions, rescue_seed: int) -> None:
        self.enabled, self.window, self.tol = opts.stall_rescue, opts.stall_window, opts.stall_tol
        self.seed = rescue_seed  # a replayed rescue draws the same start
        self.clean = 0  # evaluations since the last restart / rescue
        self.rescues = 0
        self.spectral_rmse = math.nan  # the spectral start's RMSE (computed once per run)
        self.restarts = 0

    def on_evaluate(self, run: DistributedRun) -> None:
        self.clean = 0 if run.diag["restarts"] != self.restarts else self.clean + 1
        self.restarts = run.diag["restarts"]

    def stalled(self, hist_r: list[float]) -> bool:
        """Less than ``stall_tol`` relative progress per outer iteration over ``stall_window`` of
        them, none with a restart (an increase is the safeguard's business, not a stall)."""
        if not self.enabled or self.rescues or self.clean < self.window:
            return False
        if len(hist_r) <= self.window or not math.isfinite(hist_r[-1]):
            return False
        ref = hist_r[-1 - self.window]
        return ref * (1.0 - self.tol * self.window) < hist_r[-1] <= ref

    def on_epoch_end(self, run: DistributedRun) -> None:
        if run.failed or run.epoch >= run.opts.max_iter or not self.stalled(run.hist_r):
            return
        problem = run.problem

        def spectral() -> tuple[Float, Float]:
            return problem.init_factors(rng=np.random.default_rng(self.seed), scale="spectral")

        if math.isnan(self.spectral_rmse):
            self.spectral_rmse = problem.rmse(*spectral())
        at, fresh = run.hist_r[-1], self.spectral_rmse
        if not fresh < at:
            return
        Us, Vs = spectral()
        run.eng.call("rescue", Us, Vs, [int(c) for c in run.rc], [int(c) for c in run.cc], run.epoch)
        self.rescues += 1
        run.gather(run.epoch)  # the new point is evaluated and recorded
        self.clean = 0
        note = (
            f"stalled at training RMSE {at:.4g} (less than tol={self.tol:g} relative progress per "
            f"outer iteration over {self.window}); restarted after outer iteration {run.epoch} from "
            f"the spectral start (RMSE {fresh:.4g})"
        )
        if note not in run.notes:  # a recovery may replay the rescue
            run.notes.append(note)

    def state(self) -> dict[str, Any]:
        return {
            "stall_clean": self.clean,
            "stall_rescues": self.rescues,
            "stall_spectral_rmse": self.spectral_rmse,
        }

    def load(self, saved: dict[str, Any]) -> None:
        self.clean, self.rescues = int(saved["stall_clean"]), int(saved["stall_rescues"])
        self.spectral_rmse = float(saved["stall_spectral_rmse"])
        self.restarts = int(saved["mon_restarts"])


class ShardCheckpoint(Hook[DistributedRun]):
    """Every ``checkpoint_every`` outer iterations (not after the last or a failed one) the shard
    states and the driver's state, in memory (for recoveries) and, with a path, on disk."""

    def __init__(self, opts: HamsiOptions, path: Path | None, fingerprint: dict[str, Any]) -> None:
        self.every, self.path, self.fingerprint = opts.checkpoint_every, path, fingerprint

    def on_epoch_end(self, run: DistributedRun) -> None:
        epoch = run.epoch
        if run.failed or epoch >= run.opts.max_iter or epoch % self.every:
            return
        states = run.eng.call("snapshot")
        run.memory_ckpt = (epoch, states, run.driver_state(epoch))
        if self.path is not None:
            state = run.driver_state(epoch)
            for r, st in enumerate(states):
                state.update({f"shard{r}_{key}": value for key, value in st.items()})
            state.update({"fp_" + k: str(v) for k, v in self.fingerprint.items()})
            save_state(self.path, state)


class DistributedBudget(Hook[DistributedRun]):
    """Stop (status ``"max_time"``) after the outer iteration that exhausts ``budget`` seconds."""

    def __init__(self, budget: float) -> None:
        self.budget = budget

    def on_evaluated(self, run: DistributedRun) -> None:
        if run.elapsed >= self.budget:
            run.status, run.stop = "max_time", True
            run.message = (
                f"hamsi_distributed: time budget of {self.budget:g} s reached after {run.epoch} epochs"
            )


class DistributedConvergence(Hook[DistributedRun]):
    """``tol``/``patience`` on the monitored value (validation RMSE with early stopping, the
    training objective otherwise); early stopping hands back the best-validation factors."""

    def __init__(self, opts: HamsiOptions, U0: Float, V0: Float) -> None:
        self.tol, self.patience, self.early_stopping = opts.tol, opts.patience, opts.early_stopping
        # the monitored value's best, evaluations since it improved by tol, restarts and
        # quasi-Newton steps at the previous evaluation; the best-validation factors
        self.mon: dict[str, Any] = {"best": math.inf, "since": 0, "restarts": 0, "qn": 0}
        self.best_UV = (U0.copy(), V0.copy()) if opts.early_stopping else None

    def on_evaluate(self, run: DistributedRun) -> None:
        problem, mon, d = run.problem, self.mon, run.diag
        value = (
            run.hist_te[-1]
            if self.early_stopping
            else 0.5 * problem.weight * run.hist_r[-1] ** 2 * problem.n_ratings + problem.ridge(run.U, run.V)
        )
        if (
            value < mon["best"] * (1.0 - self.tol)
            or not math.isfinite(mon["best"])
            or d["restarts"] != mon["restarts"]
            or d["qn"] == mon["qn"]
        ):
            mon["since"] = 0  # progress, a restart, or no quasi-Newton step yet (warm-up)
        else:
            mon["since"] += 1
        mon["restarts"], mon["qn"] = d["restarts"], d["qn"]
        if value < mon["best"]:
            mon["best"] = value
            if self.best_UV is not None:
                self.best_UV[0][:], self.best_UV[1][:] = run.U, run.V

    def on_evaluated(self, run: DistributedRun) -> None:
        if self.patience is not None and self.mon["since"] >= self.patience:
            run.status, run.stop = "converged", True
            run.message = converged_message(
                "hamsi_distributed", run.epoch, self.early_stopping, self.tol, self.patience
            )

    def on_run_end(self, run: DistributedRun) -> None:
        if self.best_UV is not None and run.status != "failed" and run.hist_te[-1] > self.mon["best"]:
            run.U[:], run.V[:] = self.best_UV  # early stopping hands back the best-validation factors
            run.hist_t.append(run.elapsed)
            run.hist_e.append(run.done)
            run.hist_r.append(run.problem.rmse(run.U, run.V))
            run.hist_te.append(self.mon["best"])

    def state(self) -> dict[str, Any]:
        state = {"mon_" + k: v for k, v in self.mon.items()}
        if self.best_UV is not None:
            state.update({"mon_U": self.best_UV[0].copy(), "mon_V": self.best_UV[1].copy()})
        return state

    def load(self, saved: dict[str, Any]) -> None:
        self.mon["best"] = float(saved["mon_best"])
        for key in ("since", "restarts", "qn"):
            self.mon[key] = int(saved["mon_" + key])
        if self.best_UV is not None:
            self.best_UV[0][:], self.best_UV[1][:] = saved["mon_U"], saved["mon_V"]


class DistributedCallback(Hook[DistributedRun]):
    """The user's ``callback(info)`` after every outer iteration; ``True`` stops (``"stopped"``).
    Installed without a callback too (the progress heartbeat of :func:`dpopt.iteration.notify`)."""

    def __init__(self, callback: Callback | None) -> None:
        self.callback = callback

    def on_evaluated(self, run: DistributedRun) -> None:
        if notify(self.callback, run.epoch, rmse=run.hist_r[-1], elapsed=run.elapsed):
            run.status, run.stop = "stopped", True


def distributed_hooks(
    opts: HamsiOptions, U0: Float, V0: Float, rescue_seed: int, checkpoint: tuple[Path | None, dict[str, Any]],
    callback: Callback | None,
) -> list[Hook[DistributedRun]]:  # fmt: skip
    """The hooks of a distributed run, in the order they are called at every point."""
    hooks: list[Hook[DistributedRun]] = [
        StallRescue(opts, rescue_seed), ShardCheckpoint(opts, *checkpoint),
        DistributedConvergence(opts, U0, V0),
    ]  # fmt: skip
    if opts.time_budget is not None:
        hooks.insert(2, DistributedBudget(opts.time_budget))
    hooks.append(DistributedCallback(callback))
    return hooks
