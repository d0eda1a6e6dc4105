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
    are handed actor-to-actor as object references.  Starts a local cluster
    (``ray.init(num_cpus=...)``) unless one is running or ``address=`` names one.

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
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import check_int
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
    "ray_available",
]

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


class Engine(ABC):
    """Base class: start shard programs, run rounds, call auxiliary methods, stop.

    Use as a context manager or call :meth:`close`.  One engine runs one job at a time.
    """

    name: str = ""

    def __init__(self) -> None:
        self._factory: Factory | None = None
        self._specs: list[Any] = []
        self._sources: list[tuple[int, ...]] = []

    @property
    def n_shards(self) -> int:
        """Number of shards of the running job."""
        return len(self._specs)

    def start(self, factory: Factory, specs: Sequence[Any], sources: Sequence[Sequence[int]]) -> None:
        """Build one program per spec; ``sources[s]`` lists the shards whose output shard ``s`` reads."""
        if len(specs) != len(sources):
            raise InvalidParameterError("sources: need one entry per shard spec")
        self._release()
        self._factory = factory
        self._specs = list(specs)
        self._sources = [tuple(int(k) for k in src) for src in sources]
        self._launch(None)

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


def _worker_main(conn: Any, factory: Factory, spec: Any, state: Any) -> None:  # pragma: no cover - subprocess
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with _one_blas_thread():
        program: Any = None
        pending: tuple[Any, ...] | None = ("init", factory, spec, state)
        while True:
            if pending is not None:
                msg, pending = pending, None
            else:
                try:
                    msg = conn.recv()
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
    timeout : float, default 600
        Seconds to wait for one reply before declaring the worker dead.

    Notes
    -----
    Workers stay alive between jobs run on the same engine object (they receive the new shard
    programs), until :meth:`close`; dead workers are replaced at the next start.
    """

    name = "processes"

    def __init__(self, n_workers: int = 2, *, start_method: str = "spawn", timeout: float = 600.0) -> None:
        super().__init__()
        self.default_shards = check_int(n_workers, "n_workers")
        if start_method not in mp.get_all_start_methods():
            raise InvalidParameterError(f"start_method: must be one of {mp.get_all_start_methods()}")
        self._ctx: Any = mp.get_context(start_method)
        self.timeout = float(timeout)
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._outputs: list[NDArray[np.float64]] = []
        self._round = -1
        self._dirty = False

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers (shard order)."""
        return [int(p.pid) for p in self._procs]

    def _recv(self, s: int, what: str) -> Any:
        conn = self._conns[s]
        proc = self._procs[s]
        waited = 0.0
        try:
            while not conn.poll(0.05):
                waited += 0.05
                if not proc.is_alive() and not conn.poll(0):
                    raise EOFError
                if waited >= self.timeout:
                    raise EngineError(
                        f"processes engine: shard {s} did not answer within {self.timeout:g} s ({what})",
                        shard=s,
                        round=self._round,
                    )
            status, payload = conn.recv()
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
        for s in range(len(self._conns)):
            try:
                out.append(self._recv(s, what))
            except EngineError as err:
                out.append(None)
                first = first or err
        if first is not None:
            if first.crashed:
                self._dirty = True
            raise first
        return out

    def _launch(self, states: list[Any] | None) -> None:
        n = len(self._specs)
        reusable = not self._dirty and len(self._procs) == n and all(p.is_alive() for p in self._procs)
        self._dirty = False
        if reusable:  # idle workers of a previous job: send them the new shard programs
            for s, spec in enumerate(self._specs):
                self._send(
                    s, ("init", self._factory, spec, None if states is None else states[s]), "start-up"
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
        try:
            self._conns[s].send(msg)
        except (OSError, ConnectionError):
            self._dirty = True
            raise EngineError(
                f"processes engine: worker of shard {s} died before {what}", shard=s, round=self._round
            ) from None

    def step(self, t: int) -> list[Any]:
        self._round = t
        for s in range(self.n_shards):
            self._send(s, ("step", t, [self._outputs[k] for k in self._sources[s]]), f"round {t}")
        results = self._gather(f"round {t}")
        self._outputs = [r[0] for r in results]
        return [r[1] for r in results]

    def call(self, name: str, *args: Any) -> list[Any]:
        for s in range(self.n_shards):
            self._send(s, ("call", name, args), f"call {name!r}")
        return self._gather(f"call {name!r}")

    def _shutdown_workers(self) -> None:
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


# ----------------------------------------------------------------------------------------------
# Ray
# ----------------------------------------------------------------------------------------------


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


class RayEngine(Engine):
    """One Ray actor per shard; published arrays move actor-to-actor through the object store.

    Parameters
    ----------
    n_actors : int, default 2
        Number of actors = number of shards an algorithm should create.
    address : str or None
        Address of an existing cluster (``"auto"`` or ``"ray://host:port"``).  When None and Ray is
        not initialized, a local cluster with ``num_cpus`` CPUs is started and shut down on
        :meth:`close`.
    num_cpus : int or None
        CPUs of the local cluster started by dpopt (default: ``n_actors * cpus_per_actor``).
    cpus_per_actor : float, default 1
        CPUs each actor asks for; its BLAS is limited to one thread, so it never uses more.
    init_kwargs : dict, optional
        Extra keyword arguments for ``ray.init``.
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
    ) -> None:
        super().__init__()
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
        if not ray.is_initialized():
            kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            kw.update(init_kwargs or {})
            if address is not None:
                ray.init(address=address, **kw)
            else:
                cpus = (
                    num_cpus
                    if num_cpus is not None
                    else int(np.ceil(self.default_shards * self.cpus_per_actor))
                )
                ray.init(num_cpus=cpus, **kw)
                self._started_ray = True
        self._actor_cls = ray.remote(_ShardHost)
        self._actors: list[Any] = []
        self._outputs: list[Any] = []
        self._round = -1
        self._dirty = False

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles (shard order)."""
        return list(self._actors)

    def _get(self, refs: list[Any], what: str) -> list[Any]:
        ray = self._ray
        out = []
        for s, ref in enumerate(refs):
            try:
                out.append(ray.get(ref))
            except ray.exceptions.RayActorError:
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
        return out

    def _launch(self, states: list[Any] | None) -> None:
        n = len(self._specs)
        if len(self._actors) == n and not self._dirty:  # idle actors of a previous job: new programs
            self._outputs = [
                a.init.remote(self._factory, spec, None if states is None else states[s])
                for s, (a, spec) in enumerate(zip(self._actors, self._specs, strict=True))
            ]
        else:
            self._shutdown_workers()
            opts = {"num_cpus": self.cpus_per_actor, "max_restarts": 0}
            self._actors = [
                self._actor_cls.options(**opts).remote(
                    self._factory, spec, None if states is None else states[s]
                )
                for s, spec in enumerate(self._specs)
            ]
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
                self._ray.kill(a)
        self._actors, self._outputs = [], []

    def close(self) -> None:
        self._shutdown_workers()
        if self._started_ray:
            with contextlib.suppress(Exception):
                self._ray.shutdown()
            self._started_ray = False


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
