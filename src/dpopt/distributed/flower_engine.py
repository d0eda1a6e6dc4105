"""The ``flower`` engine: private ADMM across organizations over a Flower federation (``dpopt[flower]``).

Each site runs a Flower SuperNode; its ClientApp (:data:`client_app`) hosts the site's shard
program, loads the site's rows with the loader named in the site's *own* configuration (never the
coordinator's), and runs the local steps.  The coordinator runs :class:`FlowerEngine` inside a
Flower ServerApp (:data:`server_app`): it drives the rounds and routes the released primal vectors
along the graph's edges; what it receives is what the other engines' drivers receive (released
vectors, ``B_i``, the dimension and the per-node state used for checkpoints; rows are mapped onto
the declared norm ball at the site, never checked and reported).  See ``docs/security.md`` for the threat model and
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

A SuperNode starts a fresh ClientApp process per message (Flower's subprocess isolation, and
``flwr-clientapp`` also exits after one message), so the program is rebuilt from the stored spec
and the last snapshot at every message (the site's rows are read again each round); the per-node
state lives in Flower's per-run node state.  A process that handles several messages (the
in-process stand-in of the tests) reuses the program it built.  The replies to start-up and
rounds carry the shard's snapshot and the probe's description, so checkpoints and ``describe``
cost no message round: a run of T rounds exchanges T + 3 message rounds.

Noise keys: a site whose ``site.toml`` names a key file (``[privacy] noise_key_file``, see
:func:`load_noise_key`) draws its nodes' noise from a key derived from its own secret and the run
key (:func:`derive_noise_key`), so the coordinator cannot recompute (and remove) that site's noise.

Site privacy: each site computes its nodes' per-node bound P_i from the schedules it runs and its own
node sizes (:func:`site_round_epsilon`), reports the run's plan at start-up
(:attr:`FlowerEngine.site_plans`), and, with a cap (``[privacy] budget``, :class:`SitePolicy`),
records every round in its own ledger before the round's noise is drawn and refuses a run or a
round that would exceed the cap.  A noise draw is never reused for a different release.

Site-owned schedules: a site whose ``site.toml`` has a ``[privacy.schedule]`` table
(:class:`SiteSchedule`: its penalty η_i(t) and noise rate α_i(t), or an ε target from which it
derives α_i locally) runs its nodes with that schedule instead of the job's.  The coordinator never
receives it: the probe tells it only *that* the site keeps its own schedule, and the start-up reply
carries the site's bound P_i(t) (its guarantee, which the run reports and composes before the first
round's noise).  The dual update uses only the public θ and released vectors, so the coordinator's
checkpoints still hold nothing that depends on the site's schedule.  Such a site must have its own
noise key (with the coordinator's key, the noise would be known).

Lost sites: a site that stops answering (or whose SuperNode restarted) is waited for, up to
``rejoin_timeout``, and the run replays from the last checkpoint.  The per-node state of the
checkpoints (primal vectors, which are released, and dual vectors, which the dual update computes
from released vectors and the public θ) is held by the coordinator; see ``docs/security.md``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import io
import pickle
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt.distributed.engines import STARTUP_TIMEOUT, TIMEOUT_FLOOR, Engine, EngineError
from dpopt.distributed.flower_job import load_job
from dpopt.distributed.sites import Site
from dpopt.exceptions import BudgetExceededError, DPOptError, InvalidParameterError

__all__ = [
    "FACTORIES",
    "FlowerEngine",
    "MessageRefused",
    "NodeStateLost",
    "SitePolicy",
    "SiteSchedule",
    "coordinator_lock",
    "derive_noise_key",
    "flower_available",
    "load_noise_key",
    "load_site_config",
    "load_site_policy",
    "make_client_app",
    "make_server_app",
    "safe_dumps",
    "safe_loads",
    "serve_site_worker",
    "site_round_epsilon",
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

#: Flower error codes (flwr.common.constant.ErrorCode): a ClientApp that raised, and the codes of a
#: node or reply that is gone (a lost site: the coordinator waits for it to rejoin).
_APP_ERROR = 2
_LOST_CODES = frozenset({3, 4, 5, 8})


class MessageRefused(DPOptError, ValueError):
    """A message asked for something the receiver does not allow (a class, function or site)."""


class NodeStateLost(MessageRefused):
    """A round reached a SuperNode that does not hold the shard (restarted since its start-up).

    The coordinator treats it as a lost site: it restarts the shards from the last checkpoint.
    """


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
            _resolve(obj.func),
            *[_resolve(a) for a in obj.args],
            **{k: _resolve(v) for k, v in obj.keywords.items()},
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
    :func:`derive_noise_key` (its key and the run's key) instead of the coordinator's run key, so
    the coordinator cannot recompute that noise; a resumed run (same run key) replays the same
    noise and another run draws new noise.  Keep the file as private as the data.  ``None`` when
    the file names no key.

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


@dataclasses.dataclass(frozen=True)
class SitePolicy:
    """A site's own privacy settings: the ``[privacy]`` table of its ``site.toml``.

    Attributes
    ----------
    noise_key : (int, int) or None
        The site's own noise key (``noise_key_file``, see :func:`load_noise_key`).
    budget : float or None
        ``budget``: the per-node ε this site lets all runs together spend on each site it hosts
        (pure ε, replace-one, the per-node bound P_i of the ADMM paper); ``None``: no cap and no
        ledger.
    ledger : str or None
        The site's own ledger (:class:`dpopt.ledger.Ledger` URL): ``ledger = "path.db"`` (SQLite,
        relative to ``site.toml``); default ``dpopt-site-ledger.db`` beside ``site.toml`` when
        ``budget`` is set.  One dataset per hosted site (its name), budget ``budget``.
    feature_norm : float or None
        Optional pin of the declared bound on the rows' l2 norm: the site then derives the privacy
        constants (c₁, G) itself and refuses a job that claims smaller ones.  It never refuses
        because of its rows (that refusal would be a bit about them reaching the coordinator): the
        job's row converter maps every row onto the job's declared ball, whose constants the
        site has just checked cover its own.
    schedule : SiteSchedule or None
        ``[privacy.schedule]``: the site's own penalty and noise schedule, used instead of the job's
        and never sent to the coordinator (needs ``noise_key_file``); ``None``: the job's.
    """

    noise_key: tuple[int, int] | None = None
    budget: float | None = None
    ledger: str | None = None
    feature_norm: float | None = None
    schedule: SiteSchedule | None = None


@dataclasses.dataclass(frozen=True)
class SiteSchedule:
    """A site's own privacy schedule (``[privacy.schedule]`` of its ``site.toml``), never sent.

    The site's nodes use it instead of the job's: penalty η(r) = ``penalty``·``penalty_ratio``^(r−1)
    (the job's η when ``penalty`` is not set) and noise rate α(r) = α(1)·``noise_ratio``^(r−1), with
    α(1) = ``noise_rate``, or derived on the site from ``epsilon``, the per-node bound P_i(T) the
    site wants for the whole run (the largest α(1) whose bound, inexact-solve share included, stays
    within it; :func:`~dpopt.distributed.admm_privacy.calibrate_noise_rate`).  The output noise
    covering certified inexact solves (β) is derived from these on the site as well.  The dual step
    θ and the number of rounds stay the job's (public: θ must be shared for the consensus).

    Attributes
    ----------
    penalty, penalty_ratio : float or None, float
        η(1) and its growth per round.
    noise_rate : float or None
        α(1) (exactly one of ``noise_rate`` and ``epsilon``).
    epsilon : float or None
        The site's target P_i(T) (pure ε, replace-one) from which α(1) is derived.
    noise_ratio : float
        α(r+1)/α(r).
    """

    penalty: float | None = None
    penalty_ratio: float = 1.0
    noise_rate: float | None = None
    epsilon: float | None = None
    noise_ratio: float = 1.0

    def tables(
        self, base: Any, sizes: Array, c1: float, lipschitz: float
    ) -> tuple[Array, Array, Array | None]:
        """(η, α, β) tables of shape (T, n) for the nodes of ``base`` (a shard spec) with sizes B_i."""
        from dpopt.accounting import Budget
        from dpopt.distributed.admm_privacy import (
            calibrate_noise_rate,
            pp_privacy_bound,
            primal_privacy_bound,
        )
        from dpopt.distributed.schedules import geometric

        t_, n = np.asarray(base.penalty).shape
        eta = (np.array(base.penalty, dtype=np.float64) if self.penalty is None
               else geometric(self.penalty, self.penalty_ratio).table(t_, n, "penalty"))  # fmt: skip
        f = float(base.inexact_fraction)
        if self.noise_rate is not None:
            a1 = self.noise_rate
        else:
            assert self.epsilon is not None
            a1 = calibrate_noise_rate(
                Budget(self.epsilon / (1.0 + f), 0.0), penalty=eta, degrees=base.degrees, sizes=sizes,
                ratio=self.noise_ratio, loss_weight=base.loss_weight,
                method="primal" if base.perturbation == "primal" else "pp", reg_per_node=base.reg_per_node,
                c1=c1, lipschitz=lipschitz,
            )  # fmt: skip
        alpha = np.full((t_, n), a1) * self.noise_ratio ** np.arange(t_)[:, None]
        if base.inexact_rate is None:
            return eta, alpha, None
        if base.perturbation == "primal":
            exact = primal_privacy_bound(
                eta, alpha, base.degrees, sizes, base.loss_weight, base.reg_per_node, lipschitz
            )
        else:
            exact = pp_privacy_bound(eta, alpha, base.degrees, sizes, base.loss_weight, c1, lipschitz)
        mu = base.reg_per_node + 2.0 * eta * np.asarray(base.degrees)[None, :]
        rate = f * np.diff(exact, axis=0, prepend=0.0) * mu / (2.0 * base.solve_tol)
        return eta, alpha, np.maximum(rate, np.finfo(float).tiny)


def _scheduled_factory(schedule: SiteSchedule, names: tuple[str, ...], c1: float, lipschitz: float,
                       factory: Callable[[Any], Any], full: Any) -> Any:  # fmt: skip
    """Build the shard program with the site's own schedule in place of the job's (on the site)."""
    sizes = np.array([x.shape[0] for x, _ in full.data], dtype=np.float64)
    try:
        eta, alpha, beta = schedule.tables(full, sizes, c1, lipschitz)
    except (DPOptError, ValueError) as exc:
        raise InvalidParameterError(
            f"site {', '.join(names)}: its own privacy schedule (site.toml): {exc}"
        ) from None
    theta = np.asarray(full.theta)
    if full.perturbation == "penalty" and np.any(theta.max(axis=0) > eta.min(axis=0)):
        raise MessageRefused(
            f"site {', '.join(names)}: refuses the job: its own penalty η (site.toml) falls below the job's "
            "dual step θ (the privacy bound needs θ <= η); raise [privacy.schedule] penalty"
        )
    return factory(dataclasses.replace(full, penalty=eta, noise_rate=alpha, inexact_rate=beta))


def load_site_policy(path: str | Path) -> SitePolicy:
    """The ``[privacy]`` table of a site's ``site.toml`` (noise key, budget cap, ledger, feature bound, own schedule).

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> p = os.path.join(d, "site.toml")
    >>> _ = open(p, "w").write('[privacy]\\nbudget = 2.0\\n[[site]]\\nname = "a"\\nloader = "a.npz"\\n')
    >>> pol = load_site_policy(p)
    >>> pol.budget, pol.ledger.endswith("dpopt-site-ledger.db")
    (2.0, True)
    >>> _ = open(p, "w").write('[privacy]\\nnoise_key_file = "k"\\n[privacy.schedule]\\npenalty = 0.7\\nepsilon = 0.8\\n'
    ...                        '[[site]]\\nname = "a"\\nloader = "a.npz"\\n')
    >>> load_site_policy(p).schedule
    SiteSchedule(penalty=0.7, penalty_ratio=1.0, noise_rate=None, epsilon=0.8, noise_ratio=1.0)
    """
    import math
    import tomllib

    cfg = Path(path)
    with open(cfg, "rb") as fh:
        raw = tomllib.load(fh).get("privacy", {})
    if not isinstance(raw, dict):
        raise InvalidParameterError(f"{cfg}: [privacy] must be a table")
    unknown = set(raw) - {"noise_key_file", "budget", "ledger", "feature_norm", "schedule"}
    if unknown:
        raise InvalidParameterError(f"{cfg}: [privacy] has unknown keys {sorted(unknown)}")

    def positive(name: str, table: Mapping[str, Any] = raw, where: str = "[privacy]") -> float | None:
        if name not in table:
            return None
        v = table[name]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise InvalidParameterError(f"{cfg}: {where} {name} must be a positive finite number")
        return float(v)

    schedule = None
    if "schedule" in raw:
        sch, where = raw["schedule"], "[privacy.schedule]"
        if not isinstance(sch, dict):
            raise InvalidParameterError(f"{cfg}: {where} must be a table")
        unknown = set(sch) - {"penalty", "penalty_ratio", "noise_rate", "epsilon", "noise_ratio"}
        if unknown:
            raise InvalidParameterError(f"{cfg}: {where} has unknown keys {sorted(unknown)}")
        if ("noise_rate" in sch) == ("epsilon" in sch):
            raise InvalidParameterError(f"{cfg}: {where} needs exactly one of noise_rate and epsilon")
        if not raw.get("noise_key_file"):
            raise InvalidParameterError(
                f"{cfg}: {where} needs noise_key_file in [privacy]: a site that keeps its schedule from the "
                "coordinator must keep its noise from it too (with the coordinator's key the noise is known)"
            )
        schedule = SiteSchedule(
            penalty=positive("penalty", sch, where), penalty_ratio=positive("penalty_ratio", sch, where) or 1.0,
            noise_rate=positive("noise_rate", sch, where), epsilon=positive("epsilon", sch, where),
            noise_ratio=positive("noise_ratio", sch, where) or 1.0,
        )  # fmt: skip

    budget = positive("budget")
    ledger = None
    if "ledger" in raw or budget is not None:
        if budget is None:
            raise InvalidParameterError(f"{cfg}: [privacy] ledger needs budget (the per-node ε cap)")
        text = str(raw.get("ledger", "dpopt-site-ledger.db"))
        if "://" not in text:
            q = Path(text)
            text = "sqlite:///" + str(q if q.is_absolute() else cfg.resolve().parent / q)
        ledger = text
    return SitePolicy(noise_key=load_noise_key(cfg), budget=budget, ledger=ledger, feature_norm=positive("feature_norm"),
                      schedule=schedule)  # fmt: skip


def site_round_epsilon(
    base: Any, sizes: Any, *, c1: float | None = None, lipschitz: float | None = None
) -> Array:
    """The per-round increments of the per-node bound P_i for the nodes of one shard spec.

    Computed on the site from the schedules it runs, the job's or its own (penalty η_i(r), noise
    rates α_i(r), output noise β_i(r) of certified inexact solves), the node degrees V_i and the site's own node sizes B_i,
    with the formulas of :mod:`dpopt.distributed.admm_privacy` (Thm 4.1 for penalty/dual
    perturbation, output perturbation for primal).  Row r−1 holds P_i(r) − P_i(r−1); a job
    without noise gives ``inf``.
    """
    from dpopt.distributed.admm_privacy import pp_privacy_bound, primal_privacy_bound

    b = np.asarray(sizes, dtype=float)
    t_, n = np.asarray(base.penalty).shape
    if base.perturbation == "none" or base.noise_rate is None:
        return np.full((t_, n), np.inf)
    c1 = float(base.c1) if c1 is None else c1
    g = float(base.lipschitz) if lipschitz is None else lipschitz
    if not (np.isfinite(c1) and np.isfinite(g)):
        raise MessageRefused(
            "message refused: the job does not carry the privacy constants (c1, lipschitz) this site needs "
            "for its own ledger (coordinator and site must run the same dpopt)"
        )
    if base.perturbation == "penalty":
        total = pp_privacy_bound(base.penalty, base.noise_rate, base.degrees, b, base.loss_weight, c1, g)
    else:
        total = primal_privacy_bound(base.penalty, base.noise_rate, base.degrees, b, base.loss_weight,
                                     base.reg_per_node, g)  # fmt: skip
    inc = np.diff(total, axis=0, prepend=0.0)
    if base.inexact_rate is not None:  # the output noise covering a certified inexact solve
        mu = base.reg_per_node + 2.0 * np.asarray(base.penalty) * np.asarray(base.degrees)[None, :]
        inc = inc + 2.0 * np.asarray(base.inexact_rate) * base.solve_tol / mu
    return np.asarray(inc, dtype=np.float64)


class _SiteBudget:
    """The per-node ledger of the sites one shard hosts (dpopt.ledger, one dataset per site)."""

    def __init__(self, policy: SitePolicy, names: list[str]) -> None:
        from dpopt.accounting import Budget
        from dpopt.ledger import Ledger, LedgerError, UnknownDatasetError

        assert policy.ledger is not None and policy.budget is not None
        self.names = names
        self.cap = policy.budget
        self.ledger = Ledger(policy.ledger, create=True)
        for name in names:
            try:
                ds = self.ledger.dataset(name)
            except UnknownDatasetError:
                try:
                    ds = self.ledger.add_dataset(
                        name, budget=Budget(self.cap, 0.0), neighbouring="replace_one", accountant="basic",
                        description="per-node privacy of this site's private ADMM rounds (dpopt site)",
                    )  # fmt: skip
                except LedgerError:  # another process of this site created it first
                    ds = self.ledger.dataset(name)
            if ds.budget.epsilon != self.cap or ds.accountant != "basic":
                raise InvalidParameterError(
                    f"site {name}: its ledger {self.ledger.url} holds budget ε={ds.budget.epsilon:g} "
                    f"({ds.accountant}), but site.toml says budget = {self.cap:g}; make them agree"
                )

    def spent(self, name: str, prefix: str = "") -> tuple[float, set[str]]:
        """(ε recorded on ``name`` by releases whose label starts with ``prefix``, their labels)."""
        hist = self.ledger.history(name)
        mine = [r for r in hist if r.label.startswith(prefix)]
        return float(sum(r.epsilon_spent for r in mine)), {r.label for r in mine}

    def check_plan(self, noise: str, plan: Array) -> None:
        """Refuse a run whose planned total on some site would exceed the cap (nothing drawn yet).

        ``noise`` identifies the run's noise stream: rounds already recorded with it (a resumed
        run) are part of the plan, not of the other spending.
        """
        for name, planned in zip(self.names, plan.tolist(), strict=True):
            total, _ = self.spent(name)
            this_run, _ = self.spent(name, f"admm noise {noise} ")
            other = total - this_run
            if not other + planned <= self.cap * (1 + 1e-9):
                raise BudgetExceededError(
                    f"site {name}: refuses the run: its planned per-node privacy P(T)={planned:.4g} plus "
                    f"{other:.4g} already spent exceeds the site's budget cap ε={self.cap:g} (site.toml); "
                    "nothing was drawn"
                )

    def charge_round(self, noise: str, t: int, digest: str, inc: Array) -> None:
        """Record round ``t`` (0-based) for every hosted site before its noise is drawn.

        ``noise`` identifies the noise stream (key and nodes) and ``digest`` everything else the
        round's release depends on (job, rows, state, received vectors).  A round already recorded
        with the same digest (a replay: the same values with the same noise) is not charged again;
        a round whose noise was already used with a different digest is refused, since releasing
        two different values with the same noise would reveal their difference exactly.
        """
        from dpopt.accounting import EpsilonDeltaEvent

        prefix = f"admm noise {noise} round {t + 1} "
        label = f"{prefix}({digest})"
        todo = []
        for name, eps in zip(self.names, inc.tolist(), strict=True):
            _, labels = self.spent(name, prefix)
            if label in labels:
                continue
            if labels:
                raise MessageRefused(
                    f"site {name}: refuses round {t + 1}: its noise was already used for a different release "
                    "(another job, other rows, or another state or inputs with the same noise key); a noise "
                    "draw is never reused.  Start a new run (a new run key)"
                )
            total, _ = self.spent(name)
            if not total + eps <= self.cap * (1 + 1e-9):
                raise BudgetExceededError(
                    f"site {name}: refuses round {t + 1}: its per-node privacy would reach "
                    f"ε={total + eps:.4g}, over the site's budget cap ε={self.cap:g} (site.toml); nothing "
                    "was recorded or drawn"
                )
            todo.append((name, eps))
        for name, eps in todo:
            self.ledger.accountant(name, note="dpopt site").compose(
                EpsilonDeltaEvent(float(eps), 0.0, rule="admm-site-round"), label=label
            )


def _check_pinned_bound(policy: SitePolicy, spec: Any, program: Any) -> tuple[float | None, float | None]:
    """With ``feature_norm`` pinned: the site's own (c₁, G), after checking the job's constants.

    The rows are not checked against the pin: the job's row converter has mapped them onto the
    job's declared ball, and the constants used (the larger of the job's and the site's) cover
    that ball.  A refusal that depended on the rows would tell the coordinator something about
    them outside the guarantee.
    """
    from dpopt.distributed._admm_node import loss_curvature

    if policy.feature_norm is None:
        return None, None
    xb = policy.feature_norm
    base = spec.base
    c1 = loss_curvature(base.loss, base.loss_param) * xb * xb
    g = xb  # sup|φ'| = 1 for the covered losses with labels ±1
    names = ", ".join(s.name for s in spec.sites)
    if not (base.c1 >= c1 * (1 - 1e-12) and base.lipschitz >= g * (1 - 1e-12)):
        raise MessageRefused(
            f"site {names}: refuses the job: its privacy constants are smaller than this site's declared "
            f"feature_norm={xb:g} implies (site.toml); the coordinator's problem must declare the same bound"
        )
    return max(c1, float(base.c1)), max(g, float(base.lipschitz))


def derive_noise_key(site_key: tuple[int, int], run_key: tuple[int, int]) -> tuple[int, int]:
    """The noise key of a site's nodes in one run: SHA-256 of the site's secret and the run's key.

    The coordinator knows the run key but not the site's secret, so it cannot recompute the noise;
    a resumed run (same run key, kept in the coordinator's run directory) gets the same noise, and
    another run another noise, so one key file serves every run of the site.
    """
    import hashlib

    h = hashlib.sha256(
        f"dpopt-site-noise|{site_key[0]}|{site_key[1]}|{run_key[0]}|{run_key[1]}".encode()
    ).digest()
    return int.from_bytes(h[:8], "big") >> 1, int.from_bytes(h[8:16], "big") >> 1


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


#: Programs built in this process, by (run, shard, epoch): reused when the same process handles the
#: next message of a shard (a long-lived ClientApp process or the in-process stand-in), so the rows
#: are loaded once; a Flower SuperNode that starts a process per message rebuilds them every time.
_PROGRAMS: dict[tuple[str, int, int], tuple[Any, str]] = {}


def _keep_program(key: tuple[str, int, int], program: Any, snap_digest: str) -> None:
    """Cache ``program`` for the next message of its shard; older launches of that shard are dropped
    (a long-lived site worker keeps at most one program per shard index)."""
    for old in [k for k in _PROGRAMS if k[1] == key[1] and k != key]:
        del _PROGRAMS[old]
    _PROGRAMS[key] = (program, snap_digest)


def _digest(*parts: Any) -> str:
    import hashlib

    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, np.ndarray):
            h.update(np.ascontiguousarray(p).tobytes())
        elif isinstance(p, bytes):
            h.update(p)
        else:
            h.update(repr(p).encode())
        h.update(b"|")
    return h.hexdigest()[:16]


def handle_site_message(op: str, cfg: Mapping[str, Any], inputs: list[Array], state: dict[str, Any],
                        local: Mapping[str, Site], noise_key: tuple[int, int] | None = None, *,
                        policy: SitePolicy | None = None) -> tuple[Array | None, Any]:  # fmt: skip
    """Run one coordinator request on this site; ``state`` (this run's node state) is updated.

    ``op`` is ``"hello"`` (names of the hosted sites), ``"init"``, ``"step"`` or ``"call"``.
    ``policy`` (the site's ``[privacy]`` table, :func:`load_site_policy`) gives the site's own
    noise key, which replaces the coordinator's run key in the shard spec (``noise_key`` is the
    older form of that argument), and its budget cap: at ``"init"`` a run whose planned per-node
    privacy would exceed the cap is refused, and every ``"step"`` is recorded in the site's ledger
    before the round's noise is drawn (refused when over the cap).  Messages of an earlier launch
    (``epoch``) are refused.  Returns ``(array or None, picklable value)``.

    Privacy
    -------
    The site computes its nodes' privacy from the job's schedules and its own node sizes
    (:func:`site_round_epsilon`), not from anything the coordinator claims about the total.
    """
    policy = policy if policy is not None else SitePolicy(noise_key=noise_key)
    key_ = policy.noise_key

    def _localize(spec: Any, local: Mapping[str, Site]) -> Any:
        spec = _localize_sites(spec, local)
        base = getattr(spec, "base", None)
        if key_ is not None and base is not None and hasattr(base, "key"):
            spec = dataclasses.replace(
                spec, base=dataclasses.replace(base, key=derive_noise_key(key_, base.key))
            )
        if policy.schedule is not None and base is not None and hasattr(base, "penalty"):
            names = tuple(s.name for s in spec.sites)
            if base.perturbation == "none" or base.noise_rate is None:
                raise MessageRefused(
                    f"site {', '.join(names)}: keeps its own privacy schedule (site.toml) and refuses a job "
                    "without noise (use a private method: 'pp', 'dvp' or 'primal')"
                )
            c1, g = _check_pinned_bound(policy, spec, None)
            c1 = float(base.c1) if c1 is None else c1
            g = float(base.lipschitz) if g is None else g
            if not (np.isfinite(c1) and np.isfinite(g)):
                raise MessageRefused(
                    f"site {', '.join(names)}: the job does not carry the privacy constants (c1, lipschitz) "
                    "this site needs for its own schedule (coordinator and site must run the same dpopt)"
                )
            spec = dataclasses.replace(
                spec,
                factory=functools.partial(_scheduled_factory, policy.schedule, names, c1, g, spec.factory),
            )
        return spec

    if op == "hello":
        return None, sorted(local)
    shard = int(cfg["shard"])
    key = f"shard{shard}"
    epoch = int(cfg.get("epoch", 0))
    if op == "init":
        if key in state and epoch < int(state[key].get("epoch", 0)):
            raise MessageRefused(f"shard {shard}: a start-up message of an earlier launch was refused")
        spec = _localize(safe_loads(bytes(cfg["spec"])), local)
        factory = _factory(str(cfg["factory"]))
        init_state = safe_loads(bytes(cfg["state"])) if cfg.get("state") else None
        program = factory(spec)
        run = _digest(bytes(cfg["spec"]))
        noise = ""
        plan: dict[str, float] = {}
        base = getattr(spec, "base", None)
        own: dict[str, list[float]] = {}
        if base is not None and hasattr(base, "penalty"):
            c1, g = _check_pinned_bound(policy, spec, program)
            eff = program.program.spec  # the job's schedules, or the site's own (policy.schedule)
            inc = site_round_epsilon(eff, program.program.sizes, c1=c1, lipschitz=g)
            plan = {s.name: float(v) for s, v in zip(spec.sites, inc.sum(axis=0).tolist(), strict=True)}
            noise = _digest("noise", base.key, base.nodes)
            run = _digest(run, *[a for pair in eff.data for a in pair])  # job and rows
            if policy.schedule is not None:  # the site's P_i(t), t = 1..T: its guarantee, not its schedule
                run = _digest(run, eff.penalty, eff.noise_rate)
                cum = np.cumsum(inc, axis=0)
                own = {s.name: cum[:, j].tolist() for j, s in enumerate(spec.sites)}
            if policy.budget is not None:
                _SiteBudget(policy, [s.name for s in spec.sites]).check_plan(noise, inc.sum(axis=0))
        out = program.initial_output() if init_state is None else program.call("restore", init_state)
        snap = _snapshot(program)
        state[key] = {"spec": bytes(cfg["spec"]), "factory": str(cfg["factory"]), "snap": snap,
                      "epoch": epoch, "run": run, "noise": noise}  # fmt: skip
        _keep_program((run, shard, epoch), program, _digest(safe_dumps(snap)))
        described = program.call("describe") if base is None and hasattr(program, "spec") else None
        if described is not None and policy.schedule is not None:  # a flag only: the schedule stays here
            described = [dict(d, site_schedule=True) for d in described]
        return np.asarray(out), {"plan": plan, "describe": described, "site_privacy": own}
    if key not in state:
        raise NodeStateLost(f"shard {shard} was not started on this node (restarted since the start-up?)")
    held = state[key]
    if epoch != int(held.get("epoch", 0)):
        raise MessageRefused(f"shard {shard}: a message of another launch was refused")
    run = str(held.get("run", ""))
    snap_digest = _digest(safe_dumps(held["snap"]))
    cached = _PROGRAMS.pop((run, shard, epoch), None)  # put back only after a successful message
    if cached is not None and cached[1] == snap_digest:
        program = cached[0]
    else:
        program = _factory(held["factory"])(_localize(safe_loads(held["spec"]), local))
        if held["snap"] is not None:
            program.call("restore", held["snap"])
    if op == "step":
        t = int(cfg["t"])
        if policy.budget is not None and getattr(program, "program", None) is not None:
            spec = program.spec
            c1, g = _check_pinned_bound(policy, spec, program)
            inc = site_round_epsilon(program.program.spec, program.program.sizes, c1=c1, lipschitz=g)
            if t < inc.shape[0]:
                digest = _digest(run, t, snap_digest, *inputs)
                _SiteBudget(policy, [s.name for s in spec.sites]).charge_round(
                    str(held["noise"]), t, digest, inc[t]
                )
        out, diag = program.step(t, inputs)
        held["snap"] = _snapshot(program)
        _keep_program((run, shard, epoch), program, _digest(safe_dumps(held["snap"])))
        return np.asarray(out), diag
    if op == "call":
        name = str(cfg["name"])
        args = safe_loads(bytes(cfg["args"]))
        result = program.call(name, *args)
        if name == "restore":
            held["snap"] = _snapshot(program)
            _keep_program((run, shard, epoch), program, _digest(safe_dumps(held["snap"])))
            return np.asarray(result), None
        _keep_program((run, shard, epoch), program, snap_digest)
        return None, result
    raise MessageRefused("message refused: unknown operation")


def _error_reason(exc: BaseException) -> str:
    """What a site tells the coordinator about a refused or failed message: type and message only."""
    return f"{type(exc).__name__}: {exc}"


def _process_age() -> float:
    """Seconds since this process started (Linux; NaN elsewhere)."""
    import os

    try:
        with open("/proc/self/stat") as fh:
            start_ticks = float(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def _log_timing(op: str, seconds: float) -> None:
    """With ``DPOPT_FLOWER_TIMING`` set: one line on this site's stderr (never sent to the coordinator)."""
    import os
    import sys

    if os.environ.get("DPOPT_FLOWER_TIMING"):
        print(
            f"[dpopt site] op={op} handler={seconds:.3f} s process_age={_process_age():.3f} s",
            file=sys.stderr,
        )


#: Set by ``dpopt site serve`` for its SuperNode: the Unix socket of the site's long-lived worker
#: and the key that authenticates the ClientApp processes to it (see :func:`serve_site_worker`).
WORKER_ENV = "DPOPT_SITE_WORKER"
WORKER_KEY_ENV = "DPOPT_SITE_WORKER_KEY"
#: Seconds the site worker gives a peer for the authentication handshake (a peer that does not
#: answer the challenge in time is dropped); a ClientApp waits three times as long for the worker
#: (which may first have to drop a stuck peer), then answers the request itself.
WORKER_HANDSHAKE_TIMEOUT = 10.0
#: Seconds the site worker waits for a connected ClientApp to send its request (then drops it).
WORKER_READ_TIMEOUT = 30.0
#: Seconds a ClientApp waits for the worker's answer (a local step; the coordinator's own round
#: limit normally ends a stuck round first).
WORKER_REPLY_TIMEOUT = 3600.0


def _site_request(config: str, request: Any) -> tuple[str, Any, Any, Any]:
    """One request ``(op, cfg, inputs, state)`` on this site: ("ok", out, value, state) or ("error", reason)."""
    op, cfg, inputs, state = request
    began = time.perf_counter()
    try:
        out, value = handle_site_message(str(op), cfg, inputs, state, load_site_config(config),
                                         policy=load_site_policy(config))  # fmt: skip
    except DPOptError as exc:
        return "error", _error_reason(exc), None, None
    _log_timing(str(op), time.perf_counter() - began)
    return "ok", out, value, state


def _io_timeout(conn: Any, seconds: float) -> None:
    """Bound every read and write on ``conn``'s socket to ``seconds`` (SO_RCVTIMEO / SO_SNDTIMEO).

    A read or write that waits longer fails with ``OSError`` (also a partial message that stalls),
    so no peer of the site worker's socket can block the other end.
    """
    import socket
    import struct

    whole = int(seconds)
    tv = struct.pack("ll", whole, int((seconds - whole) * 1e6))
    s = socket.socket(fileno=conn.fileno())
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    finally:
        s.detach()  # the connection keeps the descriptor


def serve_site_worker(config: str | Path, address: str, authkey: bytes, *, ready: Any = None) -> None:
    """Answer this site's ClientApp requests in one long-lived process (``dpopt site serve`` runs it).

    Flower starts a new ClientApp process for every message; without a worker each of them imports
    the numerical stack, reads the site's rows and rebuilds the shard program.  The worker keeps
    them: a ClientApp process hands its request to the worker over a Unix socket (mode 0600, in a
    private directory, HMAC-authenticated with ``authkey`` by ``multiprocessing``'s challenge) and
    returns the answer.  Requests and answers are encoded with :func:`safe_dumps` and decoded with
    :func:`safe_loads` (no pickle of arbitrary objects); the node state still lives in Flower's
    node state, sent with each request.  Every wait is bounded: a peer that does not complete the
    authentication within :data:`WORKER_HANDSHAKE_TIMEOUT` or send its request within
    :data:`WORKER_READ_TIMEOUT` is dropped, so no process that opens the socket can block the site.
    Runs until the process exits; ``ready`` (a ``threading.Event``) is set once it listens.
    """
    import os
    import socket
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(address)
        os.chmod(address, 0o600)
        sock.listen()
        if ready is not None:
            ready.set()
        while True:
            try:
                peer, _ = sock.accept()
            except OSError:
                continue
            peer.setblocking(True)
            with Connection(peer.detach()) as conn:
                try:
                    _io_timeout(conn, WORKER_HANDSHAKE_TIMEOUT)  # a peer that never answers is dropped
                    deliver_challenge(conn, authkey)
                    answer_challenge(conn, authkey)
                    _io_timeout(conn, WORKER_READ_TIMEOUT)
                    if not conn.poll(WORKER_READ_TIMEOUT):  # a silent client must not block the site
                        continue
                    request = conn.recv_bytes()
                except (AuthenticationError, OSError, EOFError):
                    continue
                try:
                    reply: Any = _site_request(str(config), safe_loads(request))
                except (
                    Exception
                ) as exc:  # an unexpected failure is the ClientApp's error, not the worker's end
                    reply = ("crash", f"{type(exc).__name__}: {exc}", None, None)
                try:
                    conn.send_bytes(safe_dumps(reply))
                except (OSError, EOFError):
                    continue
    finally:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(address)


def _ask_worker(request: Any) -> tuple[str, Any, Any, Any] | None:
    """The site worker's answer, or None when no worker is configured or reachable."""
    import os
    import socket
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

    address = os.environ.get(WORKER_ENV)
    if not address or not os.path.exists(address):
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            wait = 3.0 * WORKER_HANDSHAKE_TIMEOUT  # the worker may first have to drop a stuck peer
            s.settimeout(wait)
            s.connect(address)
            s.setblocking(True)
            conn = Connection(s.detach())
        with conn:
            _io_timeout(conn, wait)  # a worker that never sends the challenge
            authkey = bytes.fromhex(os.environ.get(WORKER_KEY_ENV, ""))
            answer_challenge(conn, authkey)
            deliver_challenge(conn, authkey)
            _io_timeout(conn, WORKER_REPLY_TIMEOUT)
            conn.send_bytes(safe_dumps(request))
            if not conn.poll(WORKER_REPLY_TIMEOUT):
                raise RuntimeError(
                    f"site worker: no answer within {WORKER_REPLY_TIMEOUT:g} s (is 'dpopt site serve' stuck?)"
                )
            reply: tuple[str, Any, Any, Any] = safe_loads(conn.recv_bytes())
    except AuthenticationError:
        raise RuntimeError("site worker: the worker's socket refused this ClientApp's key") from None
    except (OSError, EOFError, ValueError):
        return None
    if reply[0] == "crash":
        raise RuntimeError(f"site worker: {reply[1]}")
    return reply


def client_reply(msg: Any, context: Any) -> Any:  # pragma: no cover - runs in Flower's ClientApp processes
    """The ClientApp's handler: one coordinator request (a Flower ``Message``) on this site.

    A dpopt error (a refused message, a budget cap, a failed check) is returned to the coordinator
    as an error reply naming the site, with the node state left as it was.
    """
    from flwr.app import Array as FArray
    from flwr.app import ArrayRecord, ConfigRecord, Error, Message, RecordDict

    path = context.node_config.get(NODE_CONFIG_KEY)
    if not path:
        raise InvalidParameterError(
            f"SuperNode started without --node-config \"{NODE_CONFIG_KEY}='site.toml'\""
        )
    cfg = {k: (bytes(v) if isinstance(v, bytes) else v) for k, v in dict(msg.content["cfg"]).items()}
    arrays = msg.content.array_records.get("inputs")
    inputs = [] if arrays is None else [arrays[str(k)].numpy() for k in range(int(cfg.get("n_inputs", 0)))]
    held = context.state.config_records.get("dpopt")
    state: dict[str, Any] = safe_loads(bytes(held["state"])) if held is not None else {}
    request = (str(cfg["op"]), cfg, inputs, state)
    _log_timing("clientapp-start", 0.0)  # this ClientApp process's age: Flower's start-up of it
    answer = _ask_worker(request)
    status, out, value, new_state = answer if answer is not None else _site_request(str(path), request)
    if status != "ok":
        return Message(Error(code=_APP_ERROR, reason=str(out)), reply_to=msg)
    state = new_state
    context.state["dpopt"] = ConfigRecord({"state": safe_dumps(state)})
    reply: dict[str, Any] = {"value": safe_dumps(value), "tag": int(cfg.get("tag", -1))}
    shard_state = state.get(f"shard{int(cfg['shard'])}") if "shard" in cfg else None
    if out is not None and shard_state is not None and shard_state.get("snap") is not None:
        reply["snap"] = safe_dumps(
            shard_state["snap"]
        )  # a function of released vectors (saves a message round)
    content = RecordDict({"reply": ConfigRecord(reply)})
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
    rejoin_timeout : float, default 300
        How long to wait for a lost site to come back.  A site that does not answer a round (or
        whose SuperNode Flower reports as unavailable) is treated as lost: the run restarts the
        shards from the last checkpoint (:meth:`PrivateADMM.run <dpopt.distributed.admm.PrivateADMM.run>`,
        ``max_recoveries``), and the engine waits up to ``rejoin_timeout`` seconds for a SuperNode
        hosting that site to answer again (e.g. restarted by the site's operator).  It then
        replays the rounds since the checkpoint: a site with its own noise key file replays the
        same noise, and its ledger does not charge a replayed round again.  If the site does not
        come back in time the run stops with :class:`EngineError` naming the site and the round.

    Attributes
    ----------
    site_plans : dict
        Per site, the per-node privacy P_i(T) of the whole run as the site computed it at start-up
        (from the job's schedules, or its own, and its own node size): what the site's own ledger
        will hold.
    site_privacy : dict
        Per site that keeps its own schedule (``[privacy.schedule]`` in its ``site.toml``), its
        P_i(t) for t = 1..T as reported at start-up (the run's per-node report uses these).

    Notes
    -----
    Each shard's sites must all be hosted by one SuperNode (its ``site.toml``); a shard whose
    sites are not is refused at start, naming them.  A site's error (a refused message, its
    budget cap) is reported by name (:class:`EngineError` with the shard and round) and stops
    the run.
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
        rejoin_timeout: float = 300.0,
    ) -> None:
        super().__init__(timeout=timeout, timeout_floor=timeout_floor, startup_timeout=startup_timeout)
        if not (isinstance(rejoin_timeout, int | float) and rejoin_timeout >= 0):
            raise InvalidParameterError("rejoin_timeout: must be a number of seconds >= 0")
        self._grid = grid
        self._n_sites = n_sites
        self.rejoin_timeout = float(rejoin_timeout)
        self._site_node: dict[str, int] = {}
        self._shard_node: list[int] = []
        self._outputs: list[Array] = []
        self._round = -1
        self._epoch = 0
        self._lost: list[int] = []
        self.site_plans: dict[str, float] = {}
        self.site_privacy: dict[str, Array] = {}
        self.message_rounds: list[tuple[str, float]] = []
        self._snaps: list[bytes | None] = []
        self._described: list[Any] | None = None
        self.default_shards = 1

    # -- messaging
    def _send(self, requests: Mapping[int, tuple[int, dict[str, Any], list[Array]]], what: str, *,
              limit: float | None = None, partial: bool = False) -> dict[int, Any]:  # fmt: skip
        """requests[k] = (node id, config, input arrays); returns replies by k (content).

        With ``partial`` the replies that came (no error for the missing ones).
        """
        from flwr.app import Array as FArray
        from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

        msgs, order = [], []
        for k, (node, cfg, inputs) in requests.items():
            content = RecordDict(
                {"cfg": ConfigRecord({**cfg, "n_inputs": len(inputs), "tag": k, "epoch": self._epoch})}
            )
            if inputs:
                content["inputs"] = ArrayRecord(
                    {str(i): FArray(np.ascontiguousarray(a)) for i, a in enumerate(inputs)}
                )
            m = Message(content=content, dst_node_id=node, message_type="query")
            msgs.append(m)
            order.append(k)
        if limit is None:
            limit = self.wait_limit("start-up" if what in ("start-up", "hello") else "round")
        began = time.monotonic()
        replies = list(self._grid.send_and_receive(msgs, timeout=limit))
        by_node = {m.metadata.dst_node_id: k for m, k in zip(msgs, order, strict=True)}
        got: dict[int, Any] = {}
        for r in replies:
            if r.has_error():  # no content: attribute it by the replying node
                k = by_node.get(r.metadata.src_node_id, order[0])
                if (
                    int(r.error.code) in _LOST_CODES
                    or partial
                    or r.error.reason.startswith(NodeStateLost.__name__)
                ):
                    continue  # the node, its state or its reply is gone: treated as a missing reply
                raise EngineError(
                    f"flower engine: {self._label(k)} failed during {what}: {_clean_reason(r.error.reason)}",
                    shard=k, round=self._round, crashed=False,
                )  # fmt: skip
            k = int(r.content["reply"]["tag"])
            if k in requests:
                got[k] = r.content
        missing = [k for k in order if k not in got]
        if missing and not partial:
            self._lost = missing
            raise EngineError(
                f"flower engine: {self._label(missing[0])} did not answer within {limit:g} s during {what}",
                shard=missing[0],
                round=self._round,
            )
        if what not in ("start-up", "hello"):
            self._observe(time.monotonic() - began)
        self.message_rounds.append((what, time.monotonic() - began))
        for k, c in got.items():
            if "snap" in c["reply"] and k < len(self._snaps):
                self._snaps[k] = bytes(c["reply"]["snap"])
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

    def _hello(self, limit: float) -> dict[str, int]:
        """Sites hosted by the connected SuperNodes that answer within ``limit`` seconds."""
        nodes = list(self._grid.get_node_ids())
        if not nodes:
            return {}
        replies = self._send({i: (n, {"op": "hello"}, []) for i, n in enumerate(nodes)}, "hello",
                             limit=limit, partial=True)  # fmt: skip
        return {name: nodes[i] for i, c in replies.items() for name in self._value(c)}

    def _discover(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            self._site_node = self._hello(self.wait_limit("start-up"))
            if self._n_sites is None or len(self._site_node) >= self._n_sites:
                return
            if time.monotonic() > deadline:
                raise EngineError(
                    f"flower engine: {len(self._site_node)} of {self._n_sites} sites connected "
                    f"after {self.startup_timeout:g} s"
                )
            time.sleep(1.0)

    def _await_rejoin(self) -> None:
        """After a lost site: wait (bounded) until SuperNodes host every site of the job again."""
        wanted = [s.name for spec in self._specs for s in getattr(spec, "sites", ())]
        lost = [
            s.name for k in self._lost if k < len(self._specs) for s in getattr(self._specs[k], "sites", ())
        ]
        deadline = time.monotonic() + self.rejoin_timeout
        while True:
            remaining = deadline - time.monotonic()
            self._site_node = self._hello(max(1.0, min(30.0, remaining)))
            absent = [n for n in wanted if n not in self._site_node]
            if not absent:
                self._lost = []
                return
            if time.monotonic() >= deadline:
                where = f"round {self._round + 1}" if self._round >= 0 else "start-up"
                raise EngineError(
                    f"flower engine: site(s) {', '.join(absent or lost)} lost at {where} did not rejoin within "
                    f"rejoin_timeout={self.rejoin_timeout:g} s; the run stops (its run directory can be resumed)",
                    shard=self._lost[0] if self._lost else None, round=self._round, crashed=False,
                )  # fmt: skip
            time.sleep(min(2.0, max(0.0, deadline - time.monotonic())))

    def _launch(self, states: list[Any] | None) -> None:
        if states is not None and self._lost:
            self._await_rejoin()
        elif not self._site_node:
            self._discover()
        self._epoch = max(self._epoch + 1, time.time_ns())  # messages of an earlier launch are refused
        factory = f"{self._factory.__module__}:{getattr(self._factory, '__name__', '')}"
        if factory not in FACTORIES:
            raise InvalidParameterError("flower engine: runs only dpopt's site shard programs (pass sites)")
        self._shard_node = []
        for s, spec in enumerate(self._specs):
            names = [site.name for site in getattr(spec, "sites", ())]
            if not names:
                raise InvalidParameterError(
                    "flower engine: pass Site descriptions (the data stays at the sites)"
                )
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
        self._snaps = [None] * len(self._specs)
        self._described = None
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
        described = []
        for s in range(self.n_shards):
            value = self._value(got[s])
            if isinstance(value, dict):
                self.site_plans.update({str(k): float(v) for k, v in value.get("plan", {}).items()})
                self.site_privacy.update(
                    {
                        str(k): np.asarray(v, dtype=np.float64)
                        for k, v in value.get("site_privacy", {}).items()
                    }
                )
                described.append(value.get("describe"))
        if described and all(d is not None for d in described):
            self._described = described  # the probe's answer to "describe", sent with its start-up

    def step(self, t: int) -> list[Any]:
        self._round = t
        reqs: dict[int, tuple[int, dict[str, Any], list[Array]]] = {
            s: (
                self._shard_node[s],
                {"op": "step", "shard": s, "t": t},
                [self._outputs[k] for k in self._sources[s]],
            )
            for s in range(self.n_shards)
        }
        got = self._send(reqs, f"round {t + 1}")
        self._outputs = [self._out(got[s]) for s in range(self.n_shards)]
        return [self._value(got[s]) for s in range(self.n_shards)]

    def call(self, name: str, *args: Any) -> list[Any]:
        if name == "snapshot" and not args and self._snaps and all(b is not None for b in self._snaps):
            return [safe_loads(b) for b in self._snaps if b is not None]  # sent with the last replies
        if name == "describe" and not args and self._described is not None:
            return list(self._described)
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


def _clean_reason(reason: str) -> str:
    """Flower's ``"<class 'pkg.Err'>:<'message'>"`` as ``"Err: message"`` (other text unchanged)."""
    import re

    m = re.fullmatch(r"<class '(?:[\w.]*\.)?(\w+)'>:<'(.*)'>", reason, flags=re.S)
    return f"{m.group(1)}: {m.group(2)}" if m else reason


@contextlib.contextmanager
def coordinator_lock(checkpoint_dir: str | Path | None) -> Iterator[None]:
    """Hold the run directory for one coordinator process (an exclusive lock on ``coordinator.lock``).

    A coordinator that resumes a run while the one it replaces is still alive (e.g. only the
    ``dpopt admm run`` command died, not its ServerApp) would drive the same sites from the same
    run directory twice; it is refused instead.  The operating system releases the lock when the
    holder exits, also when it is killed, so a resume after a crash is never blocked.  No-op for
    ``None`` (no run directory) and where ``fcntl`` is missing.

    Examples
    --------
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> with coordinator_lock(d):
    ...     pass
    """
    if checkpoint_dir is None:
        yield
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    path = Path(checkpoint_dir)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(path / "coordinator.lock", "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EngineError(
                f"flower engine: another coordinator process is running the run in {str(path)!r}; stop it "
                "(or wait until it has stopped) before resuming"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def make_server_app() -> Any:  # pragma: no cover - runs in Flower's ServerApp process
    """The Flower ServerApp of the coordinator: runs a job with :class:`FlowerEngine`."""
    from flwr.app import Context
    from flwr.serverapp import Grid, ServerApp

    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        """Run config: ``job = "module:function"`` returning ``(admm, sites, run_kwargs)``, ``output``."""
        admm, sites, kwargs = load_job(str(context.run_config["job"]))()
        engine = FlowerEngine(grid, n_sites=len(sites), timeout=kwargs.pop("timeout", None),
                              rejoin_timeout=kwargs.pop("rejoin_timeout", 300.0))  # fmt: skip
        began = time.perf_counter()
        with coordinator_lock(kwargs.get("checkpoint_dir")):  # one live coordinator per run directory
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
            site_names=np.array([s.name for s in sites]),
            site_plans=np.array([engine.site_plans.get(s.name, np.nan) for s in sites]),
            message_rounds=np.array([sec for _, sec in engine.message_rounds]),
            recoveries=int(result.parameters.get("recoveries", 0)),
            notes=np.array(list(result.privacy.notes)),
        )
        tmp.replace(out)

    return app


def write_app(directory: str | Path, *, name: str = "dpopt-admm") -> Path:
    """Write a Flower App directory (``pyproject.toml``) whose components are this module's apps.

    ``flwr run DIRECTORY FEDERATION --run-config "job='pkg.mod:fn' output='/path/result.npz'"``
    then runs the job in the ServerApp, where ``pkg.mod`` must be importable (see ``flower_job``).
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        f'[project]\nname = "{name}"\nversion = "1.0.0"\ndescription = "dpopt private ADMM"\n'
        'license = "MIT"\ndependencies = []\n\n'
        '[tool.flwr.app]\npublisher = "dpopt"\n\n'
        "[tool.flwr.app.components]\n"
        'serverapp = "dpopt_flower_app:serverapp"\n'
        'clientapp = "dpopt_flower_app:clientapp"\n\n'
        '[tool.flwr.app.config]\njob = ""\noutput = ""\n',
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
