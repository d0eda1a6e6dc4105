"""The ``flower`` engine: private ADMM across organizations over a Flower federation (``dpopt[flower]``).

Each site runs a Flower SuperNode; its ClientApp (:data:`client_app`) hosts the site's shard
program, loads the site's rows with the loader named in the site's *own* configuration (never the
coordinator's), and runs the local steps.  The coordinator runs :class:`FlowerEngine` inside a
Flower ServerApp (:data:`server_app`): it drives the rounds and routes the released primal vectors
along the graph's edges; what it receives is what the other engines' drivers receive (released
vectors, ``B_i``, the dimension, a yes/no for the declared row-norm bound, and the per-node state
used for checkpoints).  See ``docs/security.md`` for the threat model and
``docs/guides/flower.md`` for a three-site federation with TLS and node authentication.

Messages
--------
Every message is a Flower ``RecordDict``: arrays travel as ``ArrayRecord`` entries, the shard
spec and small values as bytes that the receiver decodes with a **restricted unpickler**
(:func:`safe_loads`): only numpy arrays, dtypes, builtin containers and dpopt's spec dataclasses
can be built; the few functions a spec names (the shard factory, the row converter) are resolved
*after* decoding from an allow-list, so decoding a message never calls code the receiver did not
choose.  The site replaces every :class:`~dpopt.distributed.sites.Site` in a spec by its own local
description (name, loader, kwargs from its ``site.toml``) and refuses specs naming sites it does
not host: the coordinator cannot make a site run a loader of its choosing.

A SuperNode starts a fresh ClientApp process per message (Flower's subprocess isolation), so the
program is rebuilt from the stored spec and the last snapshot at every message (the site's rows
are read again each round); the per-node state lives in Flower's per-run node state.

Noise keys: a site whose ``site.toml`` names a key file (``[privacy] noise_key_file``, see
:func:`load_noise_key`) draws its nodes' noise from its own key, and the coordinator's run key is
ignored for them, so the coordinator cannot recompute (and remove) that site's noise.

Limitations (not implemented): the privacy schedules (penalty, noise rates) are still chosen by the
coordinator and sent in the spec; no per-site budget cap or per-site ledger; no site-side durable
checkpoint of the per-node state (the coordinator's run directory holds it, as with the other
engines); see ``docs/security.md``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import io
import pickle
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt.distributed.engines import STARTUP_TIMEOUT, TIMEOUT_FLOOR, Engine, EngineError
from dpopt.distributed.sites import Site
from dpopt.exceptions import DPOptError, InvalidParameterError

__all__ = [
    "FACTORIES",
    "FlowerEngine",
    "MessageRefused",
    "flower_available",
    "load_noise_key",
    "load_site_config",
    "make_client_app",
    "make_server_app",
    "safe_dumps",
    "safe_loads",
    "write_app",
]

Array = NDArray[np.float64]

#: Shard factories a site accepts, by name (the coordinator sends the name, never code).
FACTORIES = ("dpopt.distributed.sites:make_site_shard", "dpopt.distributed._admm_node:make_shard")

_CLASSES = frozenset(
    {
        ("dpopt.distributed.sites", "Site"),
        ("dpopt.distributed.sites", "SiteShardSpec"),
        ("dpopt.distributed._admm_node", "ShardSpec"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy.core.multiarray", "scalar"),
        ("functools", "partial"),
        ("builtins", "tuple"),
        ("builtins", "list"),
        ("builtins", "dict"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "complex"),
        ("builtins", "slice"),
    }
)
#: Functions a spec may name; decoded as inert placeholders and resolved after decoding.
_FUNCTIONS = frozenset(
    {
        ("dpopt.distributed.sites", "make_site_shard"),
        ("dpopt.distributed._admm_node", "make_shard"),
        ("dpopt.distributed.admm", "_node_rows"),
    }
)

NODE_CONFIG_KEY = "dpopt-site-config"


class MessageRefused(DPOptError, ValueError):
    """A message asked for something the receiver does not allow (a class, function or site)."""


def flower_available() -> bool:
    """True if the optional dependency ``flwr`` can be imported."""
    try:
        import flwr  # noqa: F401
    except ImportError:
        return False
    return True


# ----------------------------------------------------------------------------------------------
# Restricted serialization
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Placeholder:
    """An allow-listed function named in a message; calling it during decoding is refused."""

    module: str
    name: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise MessageRefused("a message tried to call a function while it was being decoded")


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _CLASSES:
            return super().find_class(module, name)
        if (module, name) in _FUNCTIONS:
            return _Placeholder(module, name)
        raise MessageRefused(f"message refused: it names {module}.{name}, which is not allowed")


def _resolve(obj: Any) -> Any:
    """Replace placeholders by the allow-listed functions they name (recursively)."""
    if isinstance(obj, _Placeholder):
        return getattr(importlib.import_module(obj.module), obj.name)
    if isinstance(obj, functools.partial):
        return functools.partial(
            _resolve(obj.func), *[_resolve(a) for a in obj.args], **{k: _resolve(v) for k, v in obj.keywords.items()}
        )
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            new = _resolve(value)
            if new is not value:
                changes[f.name] = new
        return dataclasses.replace(obj, **changes) if changes else obj
    if isinstance(obj, tuple):
        items = [_resolve(v) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj, strict=True)) else tuple(items)
    if isinstance(obj, list):
        return [_resolve(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _resolve(v) for k, v in obj.items()}
    return obj


def safe_dumps(obj: Any) -> bytes:
    """Encode a spec, state or diagnostic for a message (decode with :func:`safe_loads`)."""
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def safe_loads(data: bytes) -> Any:
    """Decode a message built by :func:`safe_dumps`, refusing anything outside the allow-list.

    Examples
    --------
    >>> import numpy as np
    >>> safe_loads(safe_dumps({"x": np.arange(3.0)}))["x"]
    array([0., 1., 2.])
    >>> import os
    >>> safe_loads(safe_dumps(os.system))
    Traceback (most recent call last):
    ...
    dpopt.distributed.flower_engine.MessageRefused: message refused: it names posix.system, which is not allowed
    """
    return _resolve(_Unpickler(io.BytesIO(data)).load())


# ----------------------------------------------------------------------------------------------
# The site side (ClientApp)
# ----------------------------------------------------------------------------------------------


def load_site_config(path: str | Path) -> dict[str, Site]:
    """The sites a SuperNode hosts, from its ``site.toml`` (``[[site]]`` tables: name, loader, kwargs).

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> p = os.path.join(d, "site.toml")
    >>> _ = open(p, "w").write('[[site]]\\nname = "a"\\nloader = "/data/a.npz"\\n')
    >>> load_site_config(p)["a"].loader
    '/data/a.npz'
    """
    import tomllib

    with open(path, "rb") as fh:
        raw = tomllib.load(fh)
    entries = raw.get("site", [])
    if not isinstance(entries, list) or not entries:
        raise InvalidParameterError(f"{path}: needs at least one [[site]] table with name and loader")
    out = {}
    for e in entries:
        if not isinstance(e, dict) or "name" not in e or "loader" not in e:
            raise InvalidParameterError(f"{path}: every [[site]] needs name and loader")
        site = Site(str(e["name"]), loader=str(e["loader"]), kwargs=dict(e.get("kwargs", {})))
        out[site.name] = site
    return out


def load_noise_key(path: str | Path) -> tuple[int, int] | None:
    """The site's own noise key, if its ``site.toml`` names one (``[privacy] noise_key_file``).

    The key file holds two integers; it is created from the operating system's CSPRNG (mode 0600,
    never overwritten) the first time.  A site with its own key draws the noise of its nodes from
    it instead of the coordinator's run key, so the coordinator cannot recompute that noise; keep
    the file as private as the data and reuse it only to resume the same run (a resumed run
    replays the same noise).  ``None`` when the file names no key.

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> p = os.path.join(d, "site.toml")
    >>> _ = open(p, "w").write('[privacy]\\nnoise_key_file = "key"\\n[[site]]\\nname = "a"\\nloader = "a.npz"\\n')
    >>> load_noise_key(p) == load_noise_key(p)
    True
    >>> oct(os.stat(os.path.join(d, "key")).st_mode & 0o777)
    '0o600'
    """
    import os
    import secrets
    import tomllib

    cfg = Path(path)
    with open(cfg, "rb") as fh:
        raw = tomllib.load(fh)
    name = raw.get("privacy", {}).get("noise_key_file")
    if not name:
        return None
    key_path = Path(str(name))
    if not key_path.is_absolute():
        key_path = cfg.parent / key_path
    if not key_path.exists():
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{secrets.randbits(63)} {secrets.randbits(63)}\n")
            fh.flush()
            os.fsync(fh.fileno())
    parts = key_path.read_text().split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise InvalidParameterError(f"{key_path}: a noise key file holds two non-negative integers")
    return int(parts[0]), int(parts[1])


def _localize_sites(spec: Any, local: Mapping[str, Site]) -> Any:
    """The spec with every Site replaced by this node's own description; foreign sites refused."""
    sites = getattr(spec, "sites", None)
    if sites is None:
        raise MessageRefused("message refused: a site only runs shard programs that host its own sites")
    mine = []
    for s in sites:
        if not isinstance(s, Site) or s.name not in local:
            raise MessageRefused("message refused: the spec names a site this node does not host")
        mine.append(dataclasses.replace(local[s.name], group=s.group))
    return dataclasses.replace(spec, sites=tuple(mine))


def _factory(name: str) -> Callable[[Any], Any]:
    if name not in FACTORIES:
        raise MessageRefused("message refused: unknown shard factory")
    module, attr = name.split(":")
    fn: Callable[[Any], Any] = getattr(importlib.import_module(module), attr)
    return fn


def _snapshot(program: Any) -> Any:
    try:
        return program.call("snapshot")
    except (RuntimeError, ValueError):  # the probe job has no state
        return None


def handle_site_message(op: str, cfg: Mapping[str, Any], inputs: list[Array], state: dict[str, Any],
                        local: Mapping[str, Site], noise_key: tuple[int, int] | None = None,
                        ) -> tuple[Array | None, Any]:  # fmt: skip
    """Run one coordinator request on this site; ``state`` (this run's node state) is updated.

    ``op`` is ``"hello"`` (names of the hosted sites), ``"init"``, ``"step"`` or ``"call"``.
    ``noise_key`` (the site's own, :func:`load_noise_key`) replaces the coordinator's run key in
    the shard spec.  Returns ``(array or None, picklable value)``.
    """

    def _localize(spec: Any, local: Mapping[str, Site]) -> Any:
        spec = _localize_sites(spec, local)
        base = getattr(spec, "base", None)
        if noise_key is not None and base is not None and hasattr(base, "key"):
            spec = dataclasses.replace(spec, base=dataclasses.replace(base, key=noise_key))
        return spec

    if op == "hello":
        return None, sorted(local)
    shard = int(cfg["shard"])
    key = f"shard{shard}"
    if op == "init":
        spec = _localize(safe_loads(bytes(cfg["spec"])), local)
        factory = _factory(str(cfg["factory"]))
        init_state = safe_loads(bytes(cfg["state"])) if cfg.get("state") else None
        program = factory(spec)
        out = program.initial_output() if init_state is None else program.call("restore", init_state)
        state[key] = {"spec": bytes(cfg["spec"]), "factory": str(cfg["factory"]), "snap": _snapshot(program)}
        return np.asarray(out), None
    if key not in state:
        raise MessageRefused(f"shard {shard} was not started on this node")
    held = state[key]
    program = _factory(held["factory"])(_localize(safe_loads(held["spec"]), local))
    if held["snap"] is not None:
        program.call("restore", held["snap"])
    if op == "step":
        out, diag = program.step(int(cfg["t"]), inputs)
        held["snap"] = _snapshot(program)
        return np.asarray(out), diag
    if op == "call":
        name = str(cfg["name"])
        args = safe_loads(bytes(cfg["args"]))
        result = program.call(name, *args)
        if name == "restore":
            held["snap"] = _snapshot(program)
            return np.asarray(result), None
        return None, result
    raise MessageRefused("message refused: unknown operation")


def client_reply(msg: Any, context: Any) -> Any:  # pragma: no cover - runs in Flower's ClientApp processes
    """The ClientApp's handler: one coordinator request (a Flower ``Message``) on this site."""
    from flwr.app import Array as FArray
    from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

    path = context.node_config.get(NODE_CONFIG_KEY)
    if not path:
        raise InvalidParameterError(f"SuperNode started without --node-config \"{NODE_CONFIG_KEY}='site.toml'\"")
    local = load_site_config(str(path))
    cfg = dict(msg.content["cfg"])
    arrays = msg.content.array_records.get("inputs")
    inputs = [] if arrays is None else [arrays[str(k)].numpy() for k in range(int(cfg.get("n_inputs", 0)))]
    held = context.state.config_records.get("dpopt")
    state: dict[str, Any] = safe_loads(bytes(held["state"])) if held is not None else {}
    out, value = handle_site_message(str(cfg["op"]), cfg, inputs, state, local, load_noise_key(str(path)))
    context.state["dpopt"] = ConfigRecord({"state": safe_dumps(state)})
    content = RecordDict({"reply": ConfigRecord({"value": safe_dumps(value), "tag": int(cfg.get("tag", -1))})})
    if out is not None:
        content["out"] = ArrayRecord({"out": FArray(np.ascontiguousarray(out))})
    return Message(content, reply_to=msg)


def make_client_app() -> Any:  # pragma: no cover - runs in Flower's ClientApp processes
    """The Flower ClientApp a site's SuperNode runs (its handler is :func:`client_reply`)."""
    from flwr.clientapp import ClientApp

    app = ClientApp()
    app.query()(client_reply)
    return app


# ----------------------------------------------------------------------------------------------
# The coordinator side (engine, ServerApp)
# ----------------------------------------------------------------------------------------------


class FlowerEngine(Engine):
    """Shards run on the SuperNodes of a Flower federation; use inside a Flower ServerApp.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The ServerApp's grid (its connection to the SuperLink).
    n_sites : int or None
        Wait (up to ``startup_timeout``) until SuperNodes hosting this many sites are connected.
    timeout, timeout_floor, startup_timeout : float
        Time limits of one wait for the sites' replies (see :class:`~dpopt.distributed.engines.Engine`).

    Notes
    -----
    Each shard's sites must all be hosted by one SuperNode (its ``site.toml``); a shard whose
    sites are not is refused at start, naming them.  A site that does not reply in time is
    reported by name (:class:`EngineError` with the shard and round).
    """

    name = "flower"

    def __init__(
        self,
        grid: Any,
        *,
        n_sites: int | None = None,
        timeout: float | None = None,
        timeout_floor: float = TIMEOUT_FLOOR,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        super().__init__(timeout=timeout, timeout_floor=timeout_floor, startup_timeout=startup_timeout)
        self._grid = grid
        self._n_sites = n_sites
        self._site_node: dict[str, int] = {}
        self._shard_node: list[int] = []
        self._outputs: list[Array] = []
        self._round = -1
        self.default_shards = 1

    # -- messaging
    def _send(self, requests: Mapping[int, tuple[int, dict[str, Any], list[Array]]], what: str) -> dict[int, Any]:
        """requests[k] = (node id, config, input arrays); returns replies by k (content)."""
        from flwr.app import Array as FArray
        from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

        msgs, order = [], []
        for k, (node, cfg, inputs) in requests.items():
            content = RecordDict({"cfg": ConfigRecord({**cfg, "n_inputs": len(inputs), "tag": k})})
            if inputs:
                content["inputs"] = ArrayRecord({str(i): FArray(np.ascontiguousarray(a)) for i, a in enumerate(inputs)})
            m = Message(content=content, dst_node_id=node, message_type="query")
            msgs.append(m)
            order.append(k)
        limit = self.wait_limit("start-up" if what in ("start-up", "hello") else "round")
        began = time.monotonic()
        replies = list(self._grid.send_and_receive(msgs, timeout=limit))
        by_node = {m.metadata.dst_node_id: k for m, k in zip(msgs, order, strict=True)}
        got: dict[int, Any] = {}
        for r in replies:
            if r.has_error():  # no content: attribute it by the replying node
                k = by_node.get(r.metadata.src_node_id, order[0])
                raise EngineError(
                    f"flower engine: {self._label(k)} failed during {what}: {r.error.reason}",
                    shard=k, round=self._round, crashed=False,
                )  # fmt: skip
            k = int(r.content["reply"]["tag"])
            if k in requests:
                got[k] = r.content
        missing = [k for k in order if k not in got]
        if missing:
            raise EngineError(
                f"flower engine: {self._label(missing[0])} did not answer within {limit:g} s during {what}",
                shard=missing[0],
                round=self._round,
            )
        if what not in ("start-up", "hello"):
            self._observe(time.monotonic() - began)
        return got

    def _label(self, k: int) -> str:
        if self._specs and k < len(self._specs):
            names = [s.name for s in getattr(self._specs[k], "sites", ())]
            if names:
                return "site " + ", ".join(names) + f" (shard {k})"
        return f"node {k}"

    @staticmethod
    def _value(content: Any) -> Any:
        return safe_loads(bytes(content["reply"]["value"]))

    @staticmethod
    def _out(content: Any) -> Array:
        return np.asarray(content["out"]["out"].numpy(), dtype=np.float64)

    def _discover(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            nodes = list(self._grid.get_node_ids())
            if nodes:
                replies = self._send({i: (n, {"op": "hello"}, []) for i, n in enumerate(nodes)}, "hello")
                self._site_node = {name: nodes[i] for i, c in replies.items() for name in self._value(c)}
            if self._n_sites is None or len(self._site_node) >= self._n_sites:
                return
            if time.monotonic() > deadline:
                raise EngineError(
                    f"flower engine: {len(self._site_node)} of {self._n_sites} sites connected "
                    f"after {self.startup_timeout:g} s"
                )
            time.sleep(1.0)

    def _launch(self, states: list[Any] | None) -> None:
        if not self._site_node:
            self._discover()
        factory = f"{self._factory.__module__}:{getattr(self._factory, '__name__', '')}"
        if factory not in FACTORIES:
            raise InvalidParameterError("flower engine: runs only dpopt's site shard programs (pass sites)")
        self._shard_node = []
        for s, spec in enumerate(self._specs):
            names = [site.name for site in getattr(spec, "sites", ())]
            if not names:
                raise InvalidParameterError("flower engine: pass Site descriptions (the data stays at the sites)")
            hosts = {self._site_node.get(n) for n in names}
            if None in hosts or len(hosts) != 1:
                absent = [n for n in names if n not in self._site_node]
                raise EngineError(
                    "flower engine: "
                    + (f"no connected SuperNode hosts site(s) {', '.join(absent)}" if absent
                       else f"sites {', '.join(names)} of shard {s} are on different SuperNodes"),
                    shard=s, crashed=False,
                )  # fmt: skip
            self._shard_node.append(next(iter(hosts)))  # type: ignore[arg-type]
        reqs: dict[int, tuple[int, dict[str, Any], list[Array]]] = {
            s: (
                self._shard_node[s],
                {"op": "init", "shard": s, "factory": factory, "spec": safe_dumps(spec),
                 "state": b"" if states is None else safe_dumps(states[s])},
                [],
            )
            for s, spec in enumerate(self._specs)
        }  # fmt: skip
        got = self._send(reqs, "start-up")
        self._outputs = [self._out(got[s]) for s in range(self.n_shards)]

    def step(self, t: int) -> list[Any]:
        self._round = t
        reqs: dict[int, tuple[int, dict[str, Any], list[Array]]] = {
            s: (self._shard_node[s], {"op": "step", "shard": s, "t": t}, [self._outputs[k] for k in self._sources[s]])
            for s in range(self.n_shards)
        }
        got = self._send(reqs, f"round {t}")
        self._outputs = [self._out(got[s]) for s in range(self.n_shards)]
        return [self._value(got[s]) for s in range(self.n_shards)]

    def call(self, name: str, *args: Any) -> list[Any]:
        reqs: dict[int, tuple[int, dict[str, Any], list[Array]]] = {
            s: (self._shard_node[s], {"op": "call", "shard": s, "name": name, "args": safe_dumps(args)}, [])
            for s in range(self.n_shards)
        }
        got = self._send(reqs, f"call {name!r}")
        if name == "restore":
            self._outputs = [self._out(got[s]) for s in range(self.n_shards)]
            return list(self._outputs)
        return [self._value(got[s]) for s in range(self.n_shards)]

    def _shutdown_workers(self) -> None:
        self._outputs = []


def make_server_app() -> Any:  # pragma: no cover - runs in Flower's ServerApp process
    """The Flower ServerApp of the coordinator: runs a job with :class:`FlowerEngine`."""
    from flwr.app import Context
    from flwr.serverapp import Grid, ServerApp

    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        """Run config: ``job = "module:function"`` returning ``(admm, sites, run_kwargs)``, ``output``."""
        module, attr = str(context.run_config["job"]).split(":")
        admm, sites, kwargs = getattr(importlib.import_module(module), attr)()
        engine = FlowerEngine(grid, n_sites=len(sites), timeout=kwargs.pop("timeout", None))
        began = time.perf_counter()
        result = admm.run(sites, engine=engine, **kwargs)
        seconds = time.perf_counter() - began
        out = Path(str(context.run_config["output"]))
        tmp = out.with_suffix(".tmp.npz")
        np.savez(
            tmp,
            models=result.models,
            models_history=np.asarray(result.models_history if result.models_history is not None else []),
            node_privacy_history=result.node_privacy_history,
            epsilon=result.privacy.epsilon,
            seconds=seconds,
        )
        tmp.replace(out)

    return app


def write_app(directory: str | Path, *, name: str = "dpopt-admm") -> Path:
    """Write a Flower App directory (``pyproject.toml``) whose components are this module's apps.

    ``flwr run DIRECTORY FEDERATION --run-config "job='pkg.mod:fn' output='/path/result.npz'"``
    then runs the job on the federation.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "pyproject.toml").write_text(
        "[build-system]\nrequires = [\"hatchling\"]\nbuild-backend = \"hatchling.build\"\n\n"
        f"[project]\nname = \"{name}\"\nversion = \"1.0.0\"\ndescription = \"dpopt private ADMM\"\n"
        "license = \"MIT\"\ndependencies = []\n\n"
        "[tool.flwr.app]\npublisher = \"dpopt\"\n\n"
        "[tool.flwr.app.components]\n"
        "serverapp = \"dpopt_flower_app:serverapp\"\n"
        "clientapp = \"dpopt_flower_app:clientapp\"\n\n"
        "[tool.flwr.app.config]\njob = \"\"\noutput = \"\"\n",
        encoding="utf-8",
    )
    (d / "dpopt_flower_app.py").write_text(
        '"""Flower components of dpopt\'s private ADMM (see dpopt.distributed.flower_engine)."""\n\n'
        "from dpopt.distributed import flower_engine\n\n"
        "clientapp = flower_engine.make_client_app()\n"
        "serverapp = flower_engine.make_server_app()\n",
        encoding="utf-8",
    )
    return d
