"""Engines: where the shards of a distributed algorithm run and how their messages move.

An algorithm (e.g. :class:`dpopt.distributed.admm.PrivateADMM`) is written as *shard programs*:
objects that own a group of nodes and expose pure, deterministic steps.  An engine only places the
programs (one per shard) and moves arrays between them; it knows nothing about the algorithm or
about privacy.

The shard-program protocol (:class:`ShardProgram`):

* ``program = factory(spec)`` builds it inside the worker (``factory`` must be picklable: a
  module-level function or class);
* ``program.initial_output()`` returns the array the shard publishes before round 0;
* ``program.step(t, inputs)`` runs round ``t`` given ``inputs[k]`` = the last published array of the
  shard ``sources[k]`` and returns ``(output, diagnostics)``: the new array it publishes (only its
  boundary nodes' vectors) and a picklable value for the driver;
* ``program.call(name, *args)`` runs an auxiliary method (``"snapshot"``, ``"restore"``, ...).

Engines
-------
``"inprocess"`` (:class:`InProcessEngine`, default)
    Every shard in the calling process, run one after the other; no extra dependency.
``"processes"`` (:class:`ProcessEngine`)
    One local worker process per shard (stdlib :mod:`multiprocessing`), messages routed by the
    driver through pipes.
``"ray"`` (:class:`RayEngine`, extra ``dpopt[ray]``)
    One Ray actor per shard (never one per node); published arrays stay in Ray's object store and
    are handed actor-to-actor as object references.  Starts its own private local cluster
    (``ray.init(address="local", num_cpus=...)``) unless Ray is already initialized in this process
    or ``address=`` names a cluster to join (``"auto"`` joins the one ``ray start`` started).

Placement: :meth:`Engine.start` takes ``placement[s]``, the custom resources shard ``s`` needs
(``{"site:NAME": 1}`` for the sites it hosts, see :mod:`dpopt.distributed.sites`); the Ray engine
places the shard's actor on a cluster node that offers all of them, the local engines ignore it.

No hangs: every wait on a worker has a time limit.  ``timeout=None`` (default) derives it from
the observed times, ``max(timeout_floor, 10 x the slowest step or call so far)`` (before anything
was observed, and at start-up, where sites load their data: ``startup_timeout``).  A worker that
does not answer in time is handled like a dead one (:class:`EngineError` with ``crashed=True``; it
is killed, so a restart replaces it).  Workers started by dpopt do not outlive the driver, even when it is SIGKILLed: worker
processes ask the kernel to kill them when their parent dies (``PR_SET_PDEATHSIG`` on Linux), and a
local Ray cluster started by dpopt is watched by a small reaper process
(:mod:`dpopt.distributed._reaper`) that kills the cluster's processes when the driver disappears.

Every worker runs with BLAS limited to one thread, so a worker never uses more CPUs than it asked
for and the floating-point results of a shard do not depend on the engine.  When a worker dies the
engine raises :class:`EngineError` naming the shard and the round; :meth:`Engine.restart` rebuilds
the workers from program states (used by the ADMM driver to recover from a checkpoint).  The
processes and Ray engines keep their workers between jobs run on the same engine object (a
sweep pays the start-up once); a worker that died is replaced at the next start.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import check_int, check_positive
from dpopt.exceptions import DPOptError, InvalidParameterError

__all__ = [
    "ENGINES",
    "Engine",
    "EngineError",
    "InProcessEngine",
    "ProcessEngine",
    "RayEngine",
    "ShardProgram",
    "make_engine",
    "make_shard_engine",
    "ray_available",
]

#: Names of the built-in engines (``engine=``); an :class:`Engine` instance is accepted too.
ENGINES = ("inprocess", "processes", "ray")


class EngineError(DPOptError, RuntimeError):
    """A worker failed or died; the message names the shard and the round.

    Attributes
    ----------
    shard, round : int or None
        Where it happened.
    crashed : bool
        True when the worker died or stopped answering (recoverable by restarting it); False when
        the shard program itself raised (a replay would raise again).
    """

    def __init__(
        self, message: str, *, shard: int | None = None, round: int | None = None, crashed: bool = True
    ) -> None:
        super().__init__(message)
        self.shard = shard
        self.round = round
        self.crashed = crashed


class ShardProgram(Protocol):
    """What an engine runs for one shard (see the module docstring)."""

    def initial_output(self) -> NDArray[np.float64]: ...

    def step(self, t: int, inputs: Sequence[NDArray[np.float64]]) -> tuple[NDArray[np.float64], Any]: ...

    def call(self, name: str, *args: Any) -> Any: ...


Factory = Callable[[Any], ShardProgram]


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        yield
        return
    with threadpool_limits(limits=1):
        yield


Placement = Mapping[str, float]

#: Observed-time multiple and floor of the default (adaptive) time limit of one wait on a worker.
TIMEOUT_FACTOR = 10.0
TIMEOUT_FLOOR = 60.0
STARTUP_TIMEOUT = 600.0


class Engine(ABC):
    """Base class: start shard programs, run rounds, call auxiliary methods, stop.

    Use as a context manager or call :meth:`close`.  One engine runs one job at a time.

    Parameters
    ----------
    timeout : float or None, default None
        Seconds to wait for one reply of a worker (a step or a call).  ``None``: adaptive,
        ``max(timeout_floor, 10 x the slowest step or call observed so far)`` (``startup_timeout``
        until one has been observed).
    timeout_floor : float, default 60
        Smallest adaptive time limit.
    startup_timeout : float, default 600
        Time limit for starting the workers (sites load their data then).
    """

    name: str = ""

    def __init__(
        self,
        *,
        timeout: float | None = None,
        timeout_floor: float = TIMEOUT_FLOOR,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        self._factory: Factory | None = None
        self._specs: list[Any] = []
        self._sources: list[tuple[int, ...]] = []
        self._placement: list[dict[str, float]] = []
        self.timeout = None if timeout is None else check_positive(timeout, "timeout")
        self.timeout_floor = check_positive(timeout_floor, "timeout_floor")
        self.startup_timeout = check_positive(startup_timeout, "startup_timeout")
        self._slowest = 0.0

    @property
    def n_shards(self) -> int:
        """Number of shards of the running job."""
        return len(self._specs)

    def wait_limit(self, what: str = "round") -> float:
        """Seconds the engine waits for one reply of a worker (see the ``timeout`` parameter)."""
        if what == "start-up":
            return self.startup_timeout if self.timeout is None else max(self.timeout, self.startup_timeout)
        if self.timeout is not None:
            return self.timeout
        if self._slowest == 0.0:  # nothing observed yet (e.g. the first round of a large run)
            return max(self.timeout_floor, self.startup_timeout)
        return max(self.timeout_floor, TIMEOUT_FACTOR * self._slowest)

    def _observe(self, seconds: float) -> None:
        self._slowest = max(self._slowest, seconds)

    def start(
        self,
        factory: Factory,
        specs: Sequence[Any],
        sources: Sequence[Sequence[int]],
        *,
        states: Sequence[Any] | None = None,
        placement: Sequence[Placement] | None = None,
    ) -> None:
        """Build one program per spec; ``sources[s]`` lists the shards whose output shard ``s`` reads.

        ``states[s]`` (from ``call("snapshot")``), when given, is loaded into shard ``s`` instead of
        its initial state; ``placement[s]`` names the custom resources shard ``s`` needs (see the
        module docstring).
        """
        if len(specs) != len(sources):
            raise InvalidParameterError("sources: need one entry per shard spec")
        if states is not None and len(states) != len(specs):
            raise InvalidParameterError("states: need one entry per shard spec")
        if placement is not None and len(placement) != len(specs):
            raise InvalidParameterError("placement: need one entry per shard spec")
        self._release()
        self._factory = factory
        self._specs = list(specs)
        self._sources = [tuple(int(k) for k in src) for src in sources]
        self._placement = [dict(p) for p in placement] if placement is not None else [{} for _ in specs]
        self._launch(None if states is None else list(states))

    def restart(self, states: Sequence[Any]) -> None:
        """Rebuild every worker and load ``states[s]`` (from ``call("snapshot")``) into shard ``s``."""
        self._shutdown_workers()
        self._launch(list(states))

    @abstractmethod
    def _launch(self, states: list[Any] | None) -> None: ...

    @abstractmethod
    def step(self, t: int) -> list[Any]:
        """Run round ``t`` on every shard; returns the shards' diagnostics in shard order."""

    @abstractmethod
    def call(self, name: str, *args: Any) -> list[Any]:
        """``program.call(name, *args)`` on every shard; results in shard order."""

    @abstractmethod
    def _shutdown_workers(self) -> None: ...

    def _release(self) -> None:
        """Drop the previous job before a new :meth:`start` (engines may keep idle workers)."""
        self._shutdown_workers()

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        self._shutdown_workers()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_shards={self.n_shards})"


# ----------------------------------------------------------------------------------------------
# In-process
# ----------------------------------------------------------------------------------------------


class InProcessEngine(Engine):
    """All shards in the calling process (the default; vectorized work happens inside a shard).

    Parameters
    ----------
    n_shards : int, default 1
        Default number of shards an algorithm should create (1 = all nodes in one shard).
    n_threads : int, optional
        Shards run concurrently on this many threads (numpy releases the GIL inside BLAS/LAPACK);
        default ``min(n_shards, os.cpu_count())``.  Each shard's BLAS is single-threaded, so results
        do not depend on the thread count.
    """

    name = "inprocess"

    def __init__(self, n_shards: int = 1, *, n_threads: int | None = None) -> None:
        super().__init__()
        self.default_shards = check_int(n_shards, "n_shards")
        cpus = os.cpu_count() or 1
        self.n_threads = (
            min(self.default_shards, cpus) if n_threads is None else check_int(n_threads, "n_threads")
        )
        self._programs: list[ShardProgram] = []
        self._outputs: list[NDArray[np.float64]] = []
        self._pool: ThreadPoolExecutor | None = None

    def _launch(self, states: list[Any] | None) -> None:
        assert self._factory is not None
        with _one_blas_thread():
            self._programs = [self._factory(spec) for spec in self._specs]
            if states is None:
                self._outputs = [p.initial_output() for p in self._programs]
            else:
                self._outputs = [p.call("restore", s) for p, s in zip(self._programs, states, strict=True)]
        if self.n_threads > 1 and len(self._programs) > 1:
            self._pool = ThreadPoolExecutor(max_workers=min(self.n_threads, len(self._programs)))

    def step(self, t: int) -> list[Any]:
        def run(s: int) -> tuple[NDArray[np.float64], Any]:
            return self._programs[s].step(t, [self._outputs[k] for k in self._sources[s]])

        with _one_blas_thread():
            if self._pool is not None:
                results = list(self._pool.map(run, range(len(self._programs))))
            else:
                results = [run(s) for s in range(len(self._programs))]
        self._outputs = [r[0] for r in results]
        return [r[1] for r in results]

    def call(self, name: str, *args: Any) -> list[Any]:
        with _one_blas_thread():
            return [p.call(name, *args) for p in self._programs]

    def _shutdown_workers(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._programs = []
        self._outputs = []


# ----------------------------------------------------------------------------------------------
# Local processes
# ----------------------------------------------------------------------------------------------


def die_with_parent() -> None:  # pragma: no cover - runs in workers
    """Ask the kernel to SIGKILL this process when its parent dies (Linux ``PR_SET_PDEATHSIG``).

    A no-op elsewhere.  If the parent is already gone, exit at once.
    """
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if os.getppid() != parent or parent == 1:
        os._exit(1)


def _worker_main(conn: Any, factory: Factory, spec: Any, state: Any) -> None:  # pragma: no cover - subprocess
    die_with_parent()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with _one_blas_thread():
        program: Any = None
        pending: tuple[Any, ...] | None = ("init", factory, spec, state)
        while True:
            if pending is not None:
                msg, pending = pending, None
            else:
                try:
                    msg = conn.recv()  # idle worker: waits for the driver; EOF when the driver is gone
                except (EOFError, OSError):
                    return
            kind = msg[0]
            if kind == "stop":
                return
            try:
                if kind == "init":
                    program = msg[1](msg[2])
                    result: Any = (
                        program.initial_output() if msg[3] is None else program.call("restore", msg[3])
                    )
                elif kind == "step":
                    result = program.step(msg[1], msg[2])
                else:
                    result = program.call(msg[1], *msg[2])
                conn.send(("ok", result))
            except BaseException:
                conn.send(("error", traceback.format_exc(limit=5)))


class ProcessEngine(Engine):
    """One local worker process per shard (stdlib :mod:`multiprocessing`).

    Parameters
    ----------
    n_workers : int, default 2
        Number of worker processes = number of shards an algorithm should create.
    start_method : {"spawn", "forkserver", "fork"}, default "spawn"
        How workers are started (``"spawn"`` is the safe choice with threaded BLAS).
    timeout, timeout_floor, startup_timeout : float
        Time limits of the waits on a worker (see :class:`Engine`); a worker that does not answer
        in time (e.g. stopped with SIGSTOP) is killed and reported as dead.

    Notes
    -----
    Workers stay alive between jobs run on the same engine object (they receive the new shard
    programs), until :meth:`close`; dead workers are replaced at the next start.  Workers die
    with the driver (``PR_SET_PDEATHSIG`` on Linux; elsewhere they exit when their pipe closes).
    The kernel ties that signal to the *thread* that started the worker: start and use an engine
    from one long-lived thread (e.g. the main thread), or its workers die when that thread ends.
    """

    name = "processes"

    def __init__(
        self,
        n_workers: int = 2,
        *,
        start_method: str = "spawn",
        timeout: float | None = None,
        timeout_floor: float = TIMEOUT_FLOOR,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        super().__init__(timeout=timeout, timeout_floor=timeout_floor, startup_timeout=startup_timeout)
        self.default_shards = check_int(n_workers, "n_workers")
        if start_method not in mp.get_all_start_methods():
            raise InvalidParameterError(f"start_method: must be one of {mp.get_all_start_methods()}")
        self._ctx: Any = mp.get_context(start_method)
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._outputs: list[NDArray[np.float64]] = []
        self._round = -1
        self._dirty = False
        self._pool: ThreadPoolExecutor | None = None

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers (shard order)."""
        return [int(p.pid) for p in self._procs]

    def _kill(self, s: int) -> None:
        proc = self._procs[s]
        with contextlib.suppress(Exception):
            proc.kill()
        proc.join(timeout=5.0)

    def _io(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=max(2, len(self._specs) + 1), thread_name_prefix="dpopt-engine-io"
            )
        return self._pool

    def _read(self, conn: Any, deadline: float) -> Any:
        """``conn.recv()`` that gives up at ``deadline`` (a worker stopped mid-message cannot hang it)."""
        fut = self._io().submit(conn.recv)
        try:
            return fut.result(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
        except FutureTimeout:  # the blocked thread ends when the killed worker's pipe closes
            raise

    def _recv(self, s: int, what: str, deadline: float) -> Any:
        conn = self._conns[s]
        proc = self._procs[s]
        limit = self.wait_limit("start-up" if what == "start-up" else "round")
        try:
            while not conn.poll(min(0.05, max(0.0, deadline - time.monotonic()))):
                if not proc.is_alive() and not conn.poll(0):
                    raise EOFError
                if time.monotonic() >= deadline:
                    raise FutureTimeout
            status, payload = self._read(conn, deadline)
        except FutureTimeout:
            self._kill(s)
            raise EngineError(
                f"processes engine: shard {s} did not answer within {limit:g} s during {what} "
                "(worker stalled or stopped); it was killed",
                shard=s,
                round=self._round,
            ) from None
        except (EOFError, OSError, ConnectionError):
            proc.join(timeout=1.0)
            code = proc.exitcode
            hint = ""
            if what == "start-up":
                hint = (
                    "; with the 'spawn'/'forkserver' start methods the main script must be importable "
                    "without side effects (guard it with `if __name__ == '__main__':`)"
                )
            raise EngineError(
                f"processes engine: worker of shard {s} died during {what} (exit code {code}){hint}",
                shard=s,
                round=self._round,
            ) from None
        if status == "error":
            raise EngineError(
                f"processes engine: shard {s} failed during {what}:\n{payload}",
                shard=s,
                round=self._round,
                crashed=False,
            )
        return payload

    def _gather(self, what: str) -> list[Any]:
        """One reply from every shard (all are read, so no stale reply is left in a pipe)."""
        out: list[Any] = []
        first: EngineError | None = None
        began = time.monotonic()
        deadline = began + self.wait_limit("start-up" if what == "start-up" else "round")
        for s in range(len(self._conns)):
            try:
                out.append(self._recv(s, what, deadline))
            except EngineError as err:
                out.append(None)
                first = first or err
        if first is not None:
            if first.crashed:
                self._dirty = True
            raise first
        if what != "start-up":
            self._observe(time.monotonic() - began)
        return out

    def _launch(self, states: list[Any] | None) -> None:
        n = len(self._specs)
        reusable = not self._dirty and len(self._procs) == n and all(p.is_alive() for p in self._procs)
        self._dirty = False
        if reusable:  # idle workers of a previous job: send them the new shard programs
            self._send_all(
                {
                    s: ("init", self._factory, spec, None if states is None else states[s])
                    for s, spec in enumerate(self._specs)
                },
                "start-up",
            )
        else:
            self._shutdown_workers()
            for s, spec in enumerate(self._specs):
                parent, child = self._ctx.Pipe()
                state = None if states is None else states[s]
                proc = self._ctx.Process(
                    target=_worker_main,
                    args=(child, self._factory, spec, state),
                    daemon=True,
                    name=f"dpopt-shard-{s}",
                )
                proc.start()
                child.close()
                self._procs.append(proc)
                self._conns.append(parent)
        self._outputs = self._gather("start-up")

    def _release(self) -> None:
        self._outputs = []  # keep live workers for the next job (they get new programs)

    def _send(self, s: int, msg: tuple[Any, ...], what: str) -> None:
        self._send_all({s: msg}, what)

    def _send_all(self, msgs: Mapping[int, tuple[Any, ...]], what: str) -> None:
        """Send to several workers at once; a worker that does not take its message in time is killed."""
        limit = self.wait_limit("start-up" if what == "start-up" else "round")
        deadline = time.monotonic() + limit
        futs = {s: self._io().submit(self._conns[s].send, m) for s, m in msgs.items()}
        first: EngineError | None = None
        for s, fut in futs.items():
            try:
                fut.result(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
            except FutureTimeout:
                self._kill(s)
                first = first or EngineError(
                    f"processes engine: shard {s} did not accept its message within {limit:g} s before "
                    f"{what} (worker stalled or stopped); it was killed",
                    shard=s,
                    round=self._round,
                )
            except (OSError, ConnectionError, ValueError):
                first = first or EngineError(
                    f"processes engine: worker of shard {s} died before {what}", shard=s, round=self._round
                )
        if first is not None:
            self._dirty = True
            raise first

    def step(self, t: int) -> list[Any]:
        self._round = t
        self._send_all(
            {s: ("step", t, [self._outputs[k] for k in self._sources[s]]) for s in range(self.n_shards)},
            f"round {t}",
        )
        results = self._gather(f"round {t}")
        self._outputs = [r[0] for r in results]
        return [r[1] for r in results]

    def call(self, name: str, *args: Any) -> list[Any]:
        self._send_all({s: ("call", name, args) for s in range(self.n_shards)}, f"call {name!r}")
        return self._gather(f"call {name!r}")

    def _shutdown_workers(self) -> None:
        if self._dirty:  # after a failure: a stalled worker would not read "stop"
            for s in range(len(self._procs)):
                self._kill(s)
        for conn in self._conns:
            with contextlib.suppress(Exception):
                conn.send(("stop",))
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        for conn in self._conns:
            with contextlib.suppress(Exception):
                conn.close()
        self._procs, self._conns, self._outputs = [], [], []
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


# ----------------------------------------------------------------------------------------------
# Ray
# ----------------------------------------------------------------------------------------------


#: Amount of a site's custom resource an actor asks for: small, so that an actor being replaced
#: never blocks its successor, while still pinning the actor to a node that offers the resource.
SITE_RESOURCE_AMOUNT = 0.001


def ray_available() -> bool:
    """True if the optional dependency ``ray`` can be imported."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


class _ShardHost:  # pragma: no cover - runs inside Ray actors
    """Actor body: holds one shard program."""

    def __init__(self, factory: Factory, spec: Any, state: Any) -> None:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        self._limit = _one_blas_thread()
        self._limit.__enter__()
        self.program = factory(spec)
        self.first = self.program.initial_output() if state is None else self.program.call("restore", state)

    def initial_output(self) -> NDArray[np.float64]:
        return self.first

    def init(self, factory: Factory, spec: Any, state: Any) -> NDArray[np.float64]:
        self.program = factory(spec)
        self.first = self.program.initial_output() if state is None else self.program.call("restore", state)
        return self.first

    def step(self, t: int, *inputs: NDArray[np.float64]) -> tuple[NDArray[np.float64], Any]:
        return self.program.step(t, list(inputs))

    def call(self, name: str, *args: Any) -> Any:
        return self.program.call(name, *args)

    def pid(self) -> int:
        return os.getpid()


#: Seconds between two tries of a failed ``ray.init`` (see :func:`_init_ray`).
RAY_RETRY_PAUSE = 5.0


def _is_ray_startup_failure(exc: BaseException) -> bool:
    """Ray's own start-up failures: its bare ``Exception`` (``"The current node timed out during
    startup"``, after a fixed 30 s wait for the raylet), a timeout, or a cluster it cannot reach."""
    return type(exc) is Exception or isinstance(exc, TimeoutError | ConnectionError)


def _init_ray(ray: Any, startup_timeout: float, **kwargs: Any) -> None:
    """``ray.init(**kwargs)`` within ``startup_timeout`` seconds, or :class:`EngineError`.

    Ray offers no time limit on ``ray.init``: it waits a fixed 30 s for its node to start and then
    raises a bare ``Exception``.  A failed start is cleaned up (``ray.shutdown``) and tried again
    while ``startup_timeout`` has not elapsed (a loaded machine often starts on a later try); then
    the failure becomes an :class:`EngineError` naming the limit and how to raise it.  Other errors
    (bad ``init_kwargs``) propagate as they are.
    """
    began = time.monotonic()
    tries = 0
    while True:
        tries += 1
        try:
            ray.init(**kwargs)
            return
        except Exception as exc:
            if not _is_ray_startup_failure(exc):
                raise
            with contextlib.suppress(Exception):
                ray.shutdown()  # what the failed start left running
            remaining = startup_timeout - (time.monotonic() - began)
            if remaining > 0:
                time.sleep(min(remaining, RAY_RETRY_PAUSE))  # no busy loop on an immediate failure
            elapsed = time.monotonic() - began
            if elapsed < startup_timeout:
                continue
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise EngineError(
                f"ray engine: Ray did not start within startup_timeout={startup_timeout:g} s ({tries} "
                f"tries, {elapsed:.0f} s; Ray said: {first}); on a loaded machine raise the limit, e.g. "
                "RayEngine(startup_timeout=1200), or use engine='processes'"
            ) from exc


class RayEngine(Engine):
    """One Ray actor per shard; published arrays move actor-to-actor through the object store.

    Parameters
    ----------
    n_actors : int, default 2
        Number of actors = number of shards an algorithm should create.
    address : str or None
        Address of an existing cluster (``"auto"`` or ``"ray://host:port"``).  When None and Ray is
        not initialized, a new private local cluster with ``num_cpus`` CPUs is started (never a
        cluster found on the machine or in ``RAY_ADDRESS``: joining one is an explicit choice) and
        shut down on :meth:`close`; a reaper process kills it if the driver dies without closing it.
    num_cpus : int or None
        CPUs of the local cluster started by dpopt (default: ``n_actors * cpus_per_actor``).
    cpus_per_actor : float, default 1
        CPUs each actor asks for; its BLAS is limited to one thread, so it never uses more.
    init_kwargs : dict, optional
        Extra keyword arguments for ``ray.init``.
    timeout, timeout_floor, startup_timeout : float
        Time limits of the waits on an actor (see :class:`Engine`); an actor that does not answer
        in time is killed and reported as dead.  ``startup_timeout`` also bounds ``ray.init``: a
        start that fails (Ray waits a fixed 30 s for its node) is retried until it has elapsed,
        then :class:`EngineError` is raised.

    Notes
    -----
    Placement: shard ``s``'s actor asks for a small amount (:data:`SITE_RESOURCE_AMOUNT`) of every
    custom resource in ``placement[s]``, so Ray puts it on a node that offers all of them (e.g. a
    machine started with ``ray start --resources='{"site:NAME": 1}'``); a shard whose resources no
    live node offers is refused at start with an error naming them.
    """

    name = "ray"

    def __init__(
        self,
        n_actors: int = 2,
        *,
        address: str | None = None,
        num_cpus: int | None = None,
        cpus_per_actor: float = 1.0,
        init_kwargs: dict[str, Any] | None = None,
        timeout: float | None = None,
        timeout_floor: float = TIMEOUT_FLOOR,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        super().__init__(timeout=timeout, timeout_floor=timeout_floor, startup_timeout=startup_timeout)
        try:
            import ray
        except ImportError:
            raise ImportError(
                "the 'ray' engine needs the optional dependency ray: pip install 'dpopt[ray]'"
            ) from None
        self._ray = ray
        self.default_shards = check_int(n_actors, "n_actors")
        self.cpus_per_actor = float(cpus_per_actor)
        self._started_ray = False
        self._reaper: Any = None
        if not ray.is_initialized():
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            kw.update(init_kwargs or {})
            if address is not None:
                _init_ray(ray, self.startup_timeout, address=address, **kw)
            else:
                cpus = (
                    num_cpus
                    if num_cpus is not None
                    else int(np.ceil(self.default_shards * self.cpus_per_actor))
                )
                from dpopt.distributed import _reaper

                before = _reaper.child_pids()
                _init_ray(ray, self.startup_timeout, address="local", num_cpus=cpus, **kw)
                self._started_ray = True
                self._reaper = _reaper.start_reaper(_reaper.child_pids() - before)
        self._actor_cls = ray.remote(_ShardHost)
        self._actors: list[Any] = []
        self._actor_placement: list[dict[str, float]] = []
        self._outputs: list[Any] = []
        self._round = -1
        self._dirty = False

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles (shard order)."""
        return list(self._actors)

    def _get(self, refs: list[Any], what: str) -> list[Any]:
        ray = self._ray
        limit = self.wait_limit("start-up" if what == "start-up" else "round")
        began = time.monotonic()
        _ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=limit)
        if pending:
            s = next(k for k, r in enumerate(refs) if r in pending)
            self._dirty = True
            self._shutdown_workers()  # a stalled actor would hold its resources forever
            raise EngineError(
                f"ray engine: shard {s} did not answer within {limit:g} s during {what} (actor stalled, "
                "stopped or unplaceable); the actors were killed",
                shard=s,
                round=self._round,
            )
        out = []
        for s, ref in enumerate(refs):
            try:
                out.append(ray.get(ref, timeout=limit))
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                self._dirty = True
                raise EngineError(
                    f"ray engine: actor of shard {s} died during {what}", shard=s, round=self._round
                ) from None
            except ray.exceptions.RayTaskError as err:
                raise EngineError(
                    f"ray engine: shard {s} failed during {what}: {err}",
                    shard=s,
                    round=self._round,
                    crashed=False,
                ) from None
        if what != "start-up":
            self._observe(time.monotonic() - began)
        return out

    def _check_placement(self) -> None:
        """Refuse shards whose custom resources no single live node offers (they would wait forever)."""
        wanted = [p for p in self._placement if p]
        if not wanted:
            return
        nodes = [n.get("Resources", {}) for n in self._ray.nodes() if n.get("Alive", False)]
        for s, place in enumerate(self._placement):
            if place and not any(all(res.get(k, 0.0) > 0 for k in place) for res in nodes):
                names = ", ".join(sorted(place))
                raise EngineError(
                    f"ray engine: no live node of the cluster offers all of {names} (needed by shard {s}); "
                    "start each site's machine with `ray start --resources='{\"site:NAME\": 1}'` and put "
                    "only sites of one machine in a group",
                    shard=s,
                    crashed=False,
                )

    def _launch(self, states: list[Any] | None) -> None:
        n = len(self._specs)
        self._check_placement()
        same_place = self._actor_placement == self._placement
        if len(self._actors) == n and not self._dirty and same_place:  # idle actors: new programs
            self._outputs = [
                a.init.remote(self._factory, spec, None if states is None else states[s])
                for s, (a, spec) in enumerate(zip(self._actors, self._specs, strict=True))
            ]
        else:
            self._shutdown_workers()
            self._actors = []
            for s, spec in enumerate(self._specs):
                opts: dict[str, Any] = {"num_cpus": self.cpus_per_actor, "max_restarts": 0}
                if self._placement[s]:
                    opts["resources"] = {k: SITE_RESOURCE_AMOUNT for k in self._placement[s]}
                self._actors.append(
                    self._actor_cls.options(**opts).remote(
                        self._factory, spec, None if states is None else states[s]
                    )
                )
            self._actor_placement = [dict(p) for p in self._placement]
            self._outputs = [a.initial_output.remote() for a in self._actors]
        self._dirty = False
        self._get(list(self._outputs), "start-up")

    def _release(self) -> None:
        self._outputs = []  # keep the actors for the next job (they get new programs)

    def step(self, t: int) -> list[Any]:
        self._round = t
        outs, diags = [], []
        for s, actor in enumerate(self._actors):
            out_ref, diag_ref = actor.step.options(num_returns=2).remote(
                t, *[self._outputs[k] for k in self._sources[s]]
            )
            outs.append(out_ref)
            diags.append(diag_ref)
        result = self._get(diags, f"round {t}")
        self._outputs = outs
        return result

    def call(self, name: str, *args: Any) -> list[Any]:
        return self._get([a.call.remote(name, *args) for a in self._actors], f"call {name!r}")

    def _shutdown_workers(self) -> None:
        for a in self._actors:
            with contextlib.suppress(Exception):
                self._ray.kill(a, no_restart=True)
        self._actors, self._outputs, self._actor_placement = [], [], []

    def close(self) -> None:
        self._shutdown_workers()
        if self._started_ray:
            with contextlib.suppress(Exception):
                self._ray.shutdown()
            self._started_ray = False
        if self._reaper is not None:
            from dpopt.distributed import _reaper

            _reaper.stop_reaper(self._reaper)
            self._reaper = None


def make_engine(engine: str | Engine = "inprocess", **options: Any) -> Engine:
    """An engine from its name (``"inprocess"``, ``"processes"``, ``"ray"``) or an instance as is.

    ``options`` go to the engine's constructor (``n_shards``, ``n_workers``, ``n_actors``, ...).
    """
    if isinstance(engine, Engine):
        if options:
            raise InvalidParameterError("engine options: pass them to the engine's constructor instead")
        return engine
    if engine == "inprocess":
        return InProcessEngine(**options)
    if engine == "processes":
        return ProcessEngine(**options)
    if engine == "ray":
        return RayEngine(**options)
    raise InvalidParameterError(f"engine: must be one of {ENGINES} or an Engine instance")


def make_shard_engine(engine: str | Engine, n_shards: int) -> tuple[Engine, bool]:
    """An engine with one worker per shard (a name) or the caller's instance as is, and whether
    the caller owns it (must close it): ``True`` for a name, ``False`` for an instance."""
    if isinstance(engine, Engine):
        return engine, False
    per_shard = {"processes": {"n_workers": n_shards}, "ray": {"n_actors": n_shards}}
    options = per_shard.get(engine, {}) if isinstance(engine, str) else {}
    return make_engine(engine, **options), True
