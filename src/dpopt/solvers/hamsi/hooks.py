"""Features attached at named points of the shared-memory HAMSI / mb-GD loop (``_SharedRun`` in
:mod:`dpopt.solvers.hamsi._execution`) instead of written into it: the time budget, the stopping
rules (``tol``/``patience``, early stopping), the durable checkpoint and the user's callback.

A :class:`Hook` is called ``on_start`` (after the start is evaluated), ``on_evaluate`` (after every
evaluation), ``on_step_end`` (after every inner step), ``on_evaluated`` (after the end-of-epoch
evaluation), ``on_epoch_end`` (after every outer iteration) and ``on_run_end``; it stops the run
by setting ``run.status`` and ``run.stop``.  ``state``/``load`` carry its part of a checkpoint."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dpopt.iteration import Callback, notify
from dpopt.solvers.hamsi.checkpoint import load_state, save_state

if TYPE_CHECKING:
    from dpopt.solvers.hamsi._execution import _SharedRun


RunT = TypeVar("RunT")


class Hook(Generic[RunT]):
    """A no-op at every point of the loop; subclasses override the points they need (``RunT``: the
    run type, ``_SharedRun`` here, the distributed driver's run in
    :mod:`dpopt.solvers.hamsi._distributed_run`)."""

    def on_start(self, run: RunT) -> None:
        """After the start is evaluated and the schedule made, before the first outer iteration."""

    def on_evaluate(self, run: RunT) -> None:
        """After every evaluation is recorded."""

    def on_step_end(self, run: RunT) -> None:
        """After every inner step (also a safeguard restart's)."""

    def on_evaluated(self, run: RunT) -> None:
        """After the end-of-epoch evaluation (not every epoch with ``eval_every > 1``)."""

    def on_epoch_end(self, run: RunT) -> None:
        """After every outer iteration."""

    def on_run_end(self, run: RunT) -> None:
        """After the last outer iteration."""

    def state(self) -> dict[str, Any]:
        """This hook's part of a checkpoint."""
        return {}

    def load(self, saved: dict[str, Any]) -> None:
        """Continue from :meth:`state` (read back from a checkpoint)."""


def converged_message(solver: str, epoch: int, early_stopping: bool, tol: float, patience: int) -> str:
    """The message of a run stopped by ``tol``/``patience``."""
    what = "validation RMSE" if early_stopping else "training objective"
    return (
        f"{solver}: converged after {epoch} epochs ({what} improved by less than "
        f"tol={tol:g} (relative) in {patience} evaluations)"
    )


class TimeBudget(Hook["_SharedRun"]):
    """Stop (status ``"max_time"``) after the inner step that exhausts ``budget`` seconds."""

    def __init__(self, budget: float) -> None:
        self.budget = budget

    def on_step_end(self, run: _SharedRun) -> None:
        if run.elapsed >= self.budget:
            run.status = "max_time"
            run.stop = True


class Convergence(Hook["_SharedRun"]):
    """``tol``/``patience`` and early stopping: the monitored value (validation RMSE with early
    stopping, the training objective otherwise), its best value, the iterate there and the
    evaluations since it improved; stop after ``patience`` of them, hand back the best-validation
    iterate at the end with early stopping."""

    def __init__(self, run: _SharedRun) -> None:
        o = run.opts
        self.tol, self.patience, self.early_stopping = o.tol, o.patience, o.early_stopping
        self.best = math.inf
        self.best_x = run.x.copy() if o.early_stopping else None
        self.since = 0
        self.restarts_seen = 0

    def on_evaluate(self, run: _SharedRun) -> None:
        problem = run.problem
        # monitored: validation RMSE, or the training objective (its data part from the RMSE)
        value = (
            run.hist_te[-1]
            if self.early_stopping
            else 0.5 * problem.weight * run.hist_r[-1] ** 2 * problem.n_ratings + problem.ridge(run.U, run.V)
        )
        if (
            value < self.best * (1.0 - self.tol)
            or not math.isfinite(self.best)
            or self.restarts_seen != run.guard.n_restarts
            or not run.qn_seen
        ):
            # progress; epochs with a safeguard restart, or in HAMSI's gradient warm-up (whose
            # steps can be tiny on large data), do not count as stalled
            self.since = 0
            self.restarts_seen = run.guard.n_restarts
        else:
            self.since += 1
        if value < self.best:
            self.best = value
            if self.best_x is not None:
                self.best_x[:] = run.x

    def on_evaluated(self, run: _SharedRun) -> None:
        if not run.stop and self.patience is not None and self.since >= self.patience:
            run.status, run.stop = "converged", True
            run.message = converged_message(
                run.method, run.epoch, self.early_stopping, self.tol, self.patience
            )

    def on_run_end(self, run: _SharedRun) -> None:
        if self.best_x is not None and run.status != "failed" and run.hist_te and run.hist_te[-1] > self.best:
            run.x[:] = self.best_x  # early stopping hands back the best-validation factors
            run.running[1] = 0
            run.evaluate(run.epoch)

    def state(self) -> dict[str, Any]:
        return {
            "mon_best": self.best,
            "mon_x": self.best_x,
            "since": self.since,
            "restarts_seen": self.restarts_seen,
        }

    def load(self, saved: dict[str, Any]) -> None:
        self.best = float(saved["mon_best"])
        if self.best_x is not None:
            self.best_x[:] = saved["mon_x"]
        self.since, self.restarts_seen = int(saved["since"]), int(saved["restarts_seen"])


class Checkpoint(Hook["_SharedRun"]):
    """Durable run state: resume from ``path`` at the start (with ``resume``), write the run's and
    the hooks' state there every ``every`` outer iterations (not after the stopping one)."""

    def __init__(self, run: _SharedRun, path: Path) -> None:
        o, problem, part = run.opts, run.problem, run.part
        self.path, self.every, self.resume = path, o.checkpoint_every, o.resume
        self.fingerprint = {
            "method": run.method, "shape": problem.shape, "n_ratings": problem.n_ratings, "rank": problem.rank,
            "bias": problem.bias, "l2": problem.l2, "n_subsets": part.n_subsets, "scheme": part.scheme,
            "schedule": o.schedule, "eta": o.eta, "gamma": o.gamma, "eta_gd": o.eta_gd, "gamma_gd": o.gamma_gd,
            "memory": o.memory, "beta_counter": o.beta_counter, "beta_floor": o.beta_floor,
            "train_rmse": o.train_rmse, "eval_every": o.eval_every, "early_stopping": o.early_stopping,
        }  # fmt: skip

    def on_start(self, run: _SharedRun) -> None:
        saved = load_state(self.path, self.fingerprint) if self.resume else None
        if saved is not None:
            run.load(saved)
            for hook in run.hooks:
                hook.load(saved)

    def on_epoch_end(self, run: _SharedRun) -> None:
        if not run.stop and run.epoch % self.every == 0:
            state = run.state()
            for hook in run.hooks:
                state.update(hook.state())
            state.update({"fp_" + k: str(v) for k, v in self.fingerprint.items()})
            save_state(self.path, state)


class CallbackHook(Hook["_SharedRun"]):
    """The user's ``callback(info)`` after every outer iteration; ``True`` (or ``StopIteration``)
    stops the run (status ``"stopped"``, the stopping point evaluated).  Installed without a callback
    too: :func:`dpopt.iteration.notify` is also the progress heartbeat."""

    def __init__(self, callback: Callback | None) -> None:
        self.callback = callback

    def on_epoch_end(self, run: _SharedRun) -> None:
        if not run.stop and notify(self.callback, run.epoch, rmse=run.hist_r[-1], elapsed=run.elapsed):
            run.status, run.stop = "stopped", True
            if run.hist_e[-1] != run.epoch:
                run.evaluate(run.epoch)


def shared_memory_hooks(
    run: _SharedRun, checkpoint: Path | None, callback: Callback | None
) -> list[Hook[_SharedRun]]:
    """The hooks of a shared-memory run, in the order they are called at every point."""
    hooks: list[Hook[_SharedRun]] = [Convergence(run)]
    if run.opts.time_budget is not None:
        hooks.append(TimeBudget(run.opts.time_budget))
    if checkpoint is not None:
        hooks.append(Checkpoint(run, checkpoint))
    hooks.append(CallbackHook(callback))
    return hooks
