"""Registry of named reproductions (one per seed figure or table).

An :class:`Experiment` is an inert description: a name, a one-line description, where it comes
from in the seed documents, a ``run(config, rng)`` generator of tidy records, two configurations
(``"quick"`` for CI, ``"paper"`` for the full reproduction), and optional ``plot`` / ``tables``
functions that read records only.

Modules register experiments at import time with :func:`register`.  The built-in modules listed in
``_BUILTIN_MODULES`` are imported lazily, the first time the registry is read (:func:`get`,
:func:`names`, :func:`all_experiments`), so ``dpopt list`` sees them.  A built-in module that does
not exist yet is skipped silently; one that needs an optional third-party extra which is not
installed is skipped and reported by :func:`skipped_modules`.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeAlias

import numpy as np

from dpopt.exceptions import InvalidParameterError

__all__ = [
    "TOUR",
    "CheckFn",
    "Config",
    "Experiment",
    "PlotFn",
    "Record",
    "RunFn",
    "TablesFn",
    "all_experiments",
    "check_paths",
    "describe",
    "get",
    "names",
    "override_config",
    "placeholders",
    "register",
    "setting_text",
    "skip_module",
    "skipped_modules",
    "tour_names",
    "unregister",
]

#: One tidy record: a flat mapping from column names to JSON-compatible values.
Record: TypeAlias = dict[str, Any]
#: Any frozen dataclass instance (checked at registration).
Config: TypeAlias = Any
#: ``run(config, rng)``: yields the records of one seed (see :class:`Experiment`).
RunFn: TypeAlias = Callable[[Any, np.random.Generator], Iterable[Mapping[str, Any]]]
#: ``plot(records, out_dir) -> list[Path]``: figures drawn from the records read back.
PlotFn: TypeAlias = Callable[[Sequence[Record], Path], list[Path]]
#: ``tables(records) -> [(title, rows), ...]``: summary tables for the HTML report.
TablesFn: TypeAlias = Callable[[Sequence[Record]], list[tuple[str, list[Record]]]]
#: ``check(config)``: raises for a configuration that cannot run.
CheckFn: TypeAlias = Callable[[Any], None]

SCALES: tuple[str, ...] = ("quick", "paper")

#: Modules imported on first registry access; each registers its experiments at import time.
_BUILTIN_MODULES: tuple[str, ...] = (
    "dpopt.experiments.tour",
    "dpopt.experiments.coa",
    "dpopt.experiments.ttz",
    "dpopt.experiments.ttz_b13",
    "dpopt.experiments.kuru",
    "dpopt.experiments.kuru_lmi",  # needs the extra dpopt[repro] (cvxpy); skipped without it
    "dpopt.experiments.hamsi",
    "dpopt.experiments.admm",
    "dpopt.experiments.admm_utility",
)

#: Names of experiments (besides those named ``tour-*``) that ``dpopt tour`` also runs at quick scale.
TOUR: list[str] = []
#: The tour's privacy audit, which leads the tour and its report (``tour-mechanisms``).
TOUR_AUDIT = "tour-mechanisms"

_NAME_RE = re.compile(r"^[a-z0-9]+(?:[-.][a-z0-9]+)*$")

_registry: dict[str, Experiment] = {}
_skipped: dict[str, str] = {}
_loaded = False
_lock = threading.RLock()


def _check_config(config: object, where: str) -> None:
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise InvalidParameterError(
            f"{where}: expected a frozen dataclass instance, got {type(config).__name__}"
        )
    params = getattr(type(config), "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise InvalidParameterError(
            f"{where}: {type(config).__name__} must be a frozen dataclass (@dataclass(frozen=True))"
        )


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A named, reproducible experiment.

    Parameters
    ----------
    name
        Lower-case identifier such as ``"coa-fig2"`` or ``"kuru-fig4.2"`` (letters, digits, ``-``, ``.``).
    description
        What the experiment shows; the first line is the one-line summary printed by ``dpopt list``.
        It may name settings as ``{field}`` (a field of the configurations, e.g. ``m = {m}``) and
        the data as ``{data}``: a report fills them with the run's own settings and with the data
        its records say it used (:func:`describe`), so it never states a size or names a data set
        the run did not use.  Without a run they read as the paper scale's value with the quick
        one beside it (``m = 1024 (quick: 64)``) and as ``data``.  After construction this field
        holds that text; the text with the placeholders is ``description_template``.
    seed_doc
        Where it comes from, as a reader would cite it, e.g. ``"Yuan et al., KDD 2016, Fig. 2"``.
    run
        ``run(config, rng)`` yields one tidy record (a flat ``dict`` of JSON-able values) at a time.
        It must take all randomness from ``rng`` and use only dpopt's public API.  The keys
        ``"seed"`` and ``"repetition"`` are reserved (the runner adds them).
    configs
        ``{"quick": Config, "paper": Config}``: frozen dataclass instances.  ``quick`` must run in
        seconds (it runs in CI and in ``dpopt tour``).
    plot
        ``plot(records, out_dir) -> list[Path]`` draws PNG figures from records read back from disk
        and returns their paths.  It must not recompute anything.
    tables
        ``tables(records) -> [(title, rows), ...]`` summary tables (rows are flat dicts) for the
        HTML report.
    check
        ``check(config)`` raises :class:`~dpopt.exceptions.InvalidParameterError` for a
        configuration that cannot run (e.g. an unknown data set name).  It runs in
        :meth:`config`, so before the runner writes anything.  Every configuration also passes
        :func:`check_paths` (settings that name files must name existing ones).
    data
        What ``{data}`` in the description reads as when no records say which data was used
        (e.g. ``"UCI Adult"``); required when the description uses ``{data}``.
    description_template
        The description with its placeholders (set from ``description``; give it only to
        :func:`dataclasses.replace` an experiment's other fields).
    """

    name: str
    description: str
    seed_doc: str
    run: RunFn
    configs: Mapping[str, Config]
    plot: PlotFn | None = None
    tables: TablesFn | None = None
    check: CheckFn | None = None
    data: str = ""
    description_template: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise InvalidParameterError(
                f"name: {self.name!r} is not a valid experiment name; use lower-case letters, digits, "
                "'-' and '.', e.g. 'coa-fig2' or 'kuru-fig4.2'"
            )
        if not isinstance(self.description, str) or not self.description.strip():
            raise InvalidParameterError(f"{self.name}: description must be a non-empty string")
        if not isinstance(self.seed_doc, str):
            raise InvalidParameterError(f"{self.name}: seed_doc must be a string")
        if not callable(self.run):
            raise InvalidParameterError(f"{self.name}: run must be callable as run(config, rng)")
        for attr in ("plot", "tables", "check"):
            fn = getattr(self, attr)
            if fn is not None and not callable(fn):
                raise InvalidParameterError(f"{self.name}: {attr} must be callable or None")
        if not isinstance(self.configs, Mapping):
            raise InvalidParameterError(
                f"{self.name}: configs must be a mapping with keys 'quick' and 'paper'"
            )
        missing = [s for s in SCALES if s not in self.configs]
        if missing:
            raise InvalidParameterError(f"{self.name}: configs lacks the scale(s) {', '.join(missing)}")
        for scale, cfg in self.configs.items():
            if not isinstance(scale, str):
                raise InvalidParameterError(f"{self.name}: config scale names must be strings")
            _check_config(cfg, f"{self.name}: configs[{scale!r}]")
        object.__setattr__(self, "configs", MappingProxyType(dict(self.configs)))
        self._set_description()

    def _set_description(self) -> None:
        template = self.description
        if not placeholders(template) and self.description_template:
            template = self.description_template  # dataclasses.replace of another field
        for key in placeholders(template):
            if key == DATA_PLACEHOLDER:
                if not self.data:
                    raise InvalidParameterError(
                        f"{self.name}: the description names the data as {{data}}; give data= (e.g. 'UCI Adult')"
                    )
                continue
            for scale, cfg in self.configs.items():
                if _setting(cfg, key) is _MISSING:
                    raise InvalidParameterError(
                        f"{self.name}: the description names {{{key}}}, which configs[{scale!r}] does not have"
                    )
        object.__setattr__(self, "description_template", template)
        object.__setattr__(self, "description", self.describe())

    def describe(
        self, config: Config | Mapping[str, Any] | None = None, records: Sequence[Mapping[str, Any]] = ()
    ) -> str:
        """The description with its placeholders filled (see :func:`describe`).

        Without ``config`` a setting reads as the paper scale's value with the quick one beside it
        when they differ; without records naming the data, ``{data}`` reads as :attr:`data`.
        """
        if config is None:
            quick, paper = self.configs.get("quick"), self.configs.get("paper")
            values = {}
            for key in placeholders(self.description_template) - {DATA_PLACEHOLDER}:
                p, q = describe(f"{{{key}}}", paper), describe(f"{{{key}}}", quick)
                values[key] = p if p == q else f"{p} (quick: {q})"
            return describe(self.description_template, values, records, data=self.data)
        return describe(self.description_template, config, records, data=self.data)

    @property
    def summary(self) -> str:
        """The first line of the description."""
        return self.description.strip().splitlines()[0].strip()

    def config(self, scale: str, overrides: Mapping[str, Any] | None = None) -> Config:
        """The configuration for ``scale`` (``"quick"`` or ``"paper"``, or any extra scale defined).

        ``overrides`` replaces fields of that configuration (see :func:`override_config`).  The
        result is checked (:func:`check_paths`, then the experiment's own ``check``), so a bad
        setting fails here, before a run directory is created.
        """
        try:
            config = self.configs[scale]
        except KeyError:
            raise InvalidParameterError(
                f"scale: {self.name} has no scale {scale!r}; choose one of {', '.join(self.configs)}"
            ) from None
        config = override_config(config, overrides or {}, where=self.name)
        check_paths(config)
        if self.check is not None:
            self.check(config)
        return config


#: ``{data}`` in a description: the data a run used (from its records' ``dataset`` field).
DATA_PLACEHOLDER = "data"
_PLACEHOLDER_RE = re.compile(r"\{([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)\}")


def placeholders(template: str) -> set[str]:
    """The ``{name}`` placeholders of a description."""
    return set(_PLACEHOLDER_RE.findall(template))


def setting_text(value: Any) -> str:
    """A setting as a description states it: ``64``, ``10,000``, ``0.5``, ``1, 10, 100``."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return setting_text(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:g}"
    if isinstance(value, list | tuple):
        return ", ".join(setting_text(v) for v in value)
    return "none" if value is None else str(value)


_MISSING = object()


def _setting(config: Any, dotted: str) -> Any:
    """The setting ``a.b`` of a configuration (dataclass or stored mapping); ``_MISSING`` if none."""
    if isinstance(config, Mapping) and dotted in config:
        return config[dotted]
    value = config
    for part in dotted.split("."):
        if isinstance(value, Mapping):
            value = value.get(part, _MISSING)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = getattr(value, part, _MISSING)
        else:
            return _MISSING
        if value is _MISSING:
            return _MISSING
    return value


def describe(
    template: str,
    config: Config | Mapping[str, Any] | None = None,
    records: Sequence[Mapping[str, Any]] = (),
    *,
    data: str = "",
) -> str:
    """Fill a description's placeholders for one run.

    ``{field}`` (or ``{field.subfield}`` of a nested setting) becomes the run's setting (``config``:
    a configuration dataclass or its stored mapping; a string is used as it is) and ``{data}`` the
    data that ``records`` say the run used (:func:`dpopt.experiments.data.data_phrase`), else
    ``data``.  A placeholder with nothing to fill it stays as it is.
    """
    from dpopt.experiments.data import data_phrase, data_used

    used = data_phrase(data_used(records)) or data

    def fill(m: re.Match[str]) -> str:
        key = m.group(1)
        if key == DATA_PLACEHOLDER:
            return used or m.group(0)
        value = _setting(config, key) if config is not None else _MISSING
        if value is _MISSING:
            return m.group(0)
        return value if isinstance(value, str) else setting_text(value)

    return _PLACEHOLDER_RE.sub(fill, template)


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _coerce(text: str, like: Any, key: str, optional: bool = False) -> Any:
    """Parse ``text`` as a value of the same kind as the field's current value ``like``.

    ``none`` gives ``None`` only for fields declared optional (or currently ``None``).
    """
    t = text.strip()
    if t.lower() == "none" and (optional or like is None):
        return None
    try:
        if isinstance(like, bool):
            if t.lower() in _TRUE + _FALSE:
                return t.lower() in _TRUE
            raise ValueError
        if isinstance(like, int):
            return int(t)
        if isinstance(like, float):
            return float(t)
        if isinstance(like, tuple):
            items = [u for u in (v.strip() for v in t.split(",")) if u]
            return tuple(_coerce(u, like[0], key) if like else _number_or_text(u) for u in items)
        if like is None:
            return _number_or_text(t)
    except ValueError:
        kind = "a comma-separated list" if isinstance(like, tuple) else type(like).__name__
        raise InvalidParameterError(f"--set {key}: expected {kind}, got {text!r}") from None
    return t


def _number_or_text(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def override_config(config: Config, overrides: Mapping[str, Any], *, where: str = "config") -> Config:
    """A copy of the frozen dataclass ``config`` with the fields in ``overrides`` replaced.

    String values are parsed like the field's current value (``int``, ``float``, ``bool`` as
    ``true``/``false``, tuples as comma-separated lists, ``none`` for ``None``); other values are
    used as given.  This is how ``dpopt reproduce NAME --set dataset=movielens:ratings.dat`` points
    a reproduction at a user's own copy of a data set.

    Raises
    ------
    InvalidParameterError
        For a field the configuration does not have (the message lists the fields) or a value
        that does not parse.
    """
    if not overrides:
        return config
    types = {f.name: f.type for f in dataclasses.fields(config)}
    fields = set(types)
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), sorted(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidParameterError(
                f"--set: {where} has no setting {key!r}{hint}; settings: {', '.join(sorted(fields))}"
            )
        like = getattr(config, key)
        optional = "None" in str(types[key]) or "Optional" in str(types[key])
        changes[key] = _coerce(value, like, key, optional) if isinstance(value, str) else value
    return dataclasses.replace(config, **changes)


#: ``dataset`` values of the form ``LOADER:PATH`` (e.g. ``movielens:ml-1m/ratings.dat``) name a file.
_LOADER_PATH_RE = re.compile(r"^([a-z][a-z0-9_-]*):(.+)$")


def check_paths(config: Config) -> None:
    """Refuse a configuration whose file settings name files or folders that do not exist.

    By convention a string setting whose name ends in ``_path`` or ``_dir`` names a file or a
    folder when it is not empty (empty means "look in the usual places"), and a ``dataset``
    setting of the form ``LOADER:PATH`` names a file.  Relative paths are relative to the working
    directory, as when the experiment runs.

    Raises
    ------
    InvalidParameterError
        Naming the setting and the missing path (a path is not data).
    """
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if not isinstance(value, str) or not value:
            continue
        path: str | None = None
        if field.name.endswith(("_path", "_dir")):
            path = value
        elif field.name == "dataset":
            m = _LOADER_PATH_RE.match(value)
            path = m.group(2) if m else None
        if path is not None and not Path(path).exists():
            raise InvalidParameterError(
                f"--set {field.name}: {path} does not exist (relative paths are relative to the "
                "working directory); give the path of an existing file"
            )


def _ensure_loaded() -> None:
    """Import the built-in experiment modules once (they register themselves)."""
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        _loaded = True  # set first: the modules call register() while being imported
        for module in _BUILTIN_MODULES:
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as exc:
                missing = exc.name or ""
                if missing == module:
                    continue  # not written yet: skip silently
                if missing and missing.split(".")[0] != "dpopt":
                    _skipped[module] = f"optional dependency {missing!r} is not installed"
                    continue
                raise


def register(experiment: Experiment, *, replace: bool = False) -> Experiment:
    """Add ``experiment`` to the registry and return it.

    Registering the same object twice is a no-op; registering a different experiment under a
    name already taken raises :class:`InvalidParameterError` unless ``replace=True``.
    """
    if not isinstance(experiment, Experiment):
        raise InvalidParameterError(f"register: expected an Experiment, got {type(experiment).__name__}")
    with _lock:
        existing = _registry.get(experiment.name)
        if existing is not None and existing is not experiment and not replace:
            raise InvalidParameterError(
                f"register: an experiment named {experiment.name!r} is already registered; "
                "choose another name or pass replace=True"
            )
        _registry[experiment.name] = experiment
    return experiment


def unregister(name: str) -> None:
    """Remove ``name`` from the registry (no error if absent).  Meant for tests."""
    with _lock:
        _registry.pop(name, None)


def get(name: str) -> Experiment:
    """The experiment called ``name`` (case-insensitive).

    Raises
    ------
    InvalidParameterError
        If no such experiment is registered; the message suggests close matches.
    """
    _ensure_loaded()
    if not isinstance(name, str):
        raise InvalidParameterError(f"experiment name: expected a string, got {type(name).__name__}")
    key = name.strip().lower()
    with _lock:
        if key in _registry:
            return _registry[key]
        known = sorted(_registry)
    msg = f"unknown experiment {name!r}"
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
    if close:
        msg += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    msg += f" (run 'dpopt list' to see the {len(known)} registered experiments)"
    raise InvalidParameterError(msg)


def names() -> list[str]:
    """Sorted names of all registered experiments."""
    _ensure_loaded()
    with _lock:
        return sorted(_registry)


def all_experiments() -> list[Experiment]:
    """All registered experiments, sorted by name."""
    _ensure_loaded()
    with _lock:
        return [_registry[n] for n in sorted(_registry)]


def skip_module(module: str, *, missing: str) -> None:
    """Record that experiment module ``module`` registered nothing because ``missing`` is not installed.

    A module whose experiments need an optional extra still imports without it (so documentation
    and doctest collection work) and calls this instead of :func:`register`; ``dpopt list`` then
    names the missing dependency.
    """
    with _lock:
        _skipped[module] = f"optional dependency {missing!r} is not installed"


def skipped_modules() -> dict[str, str]:
    """Built-in experiment modules that were skipped, with the reason (a missing optional extra)."""
    _ensure_loaded()
    return dict(_skipped)


def tour_names() -> list[str]:
    """Experiments run by ``dpopt tour``: all ``tour-*`` experiments, then registered names in :data:`TOUR`.

    The privacy audit (:data:`TOUR_AUDIT`) leads: the report opens with it.  Names in :data:`TOUR`
    that are not registered (e.g. their module was skipped) are left out; compare with
    :data:`TOUR` to report them.
    """
    registered = names()
    out = sorted((n for n in registered if n.startswith("tour-")), key=lambda n: (n != TOUR_AUDIT, n))
    for n in TOUR:
        if n in registered and n not in out:
            out.append(n)
    return out
