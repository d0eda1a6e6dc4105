"""Declared solver specifications: what each registered method supports, checked by ``minimize``.

Every method registered with :func:`~dpopt.solvers.register_method` carries a :class:`MethodSpec`:
the constraint sets, losses, neighbouring relations, noise families and calibrations it supports,
whether it is iterative (and the name of its planned-iterations option), extra requirements on the
problem (e.g. strong convexity), and its options with types and ranges.  :func:`check_call` holds a
call to the spec *before anything runs* (in the spirit of scikit-learn's ``_parameter_constraints``)
and raises an :class:`~dpopt.exceptions.InvalidParameterError` that says what is unsupported and which
methods do support it; unknown options get a did-you-mean listing the valid ones.

Option types are read from the solver's signature (``Literal[...]`` gives the choices, ``X | None``
allows ``None``); :class:`MethodSpec.ranges` adds numeric ranges.  A solver whose options are one
dataclass (a parameter ``options: SomeOptions | None``, the other options taken as ``**kwargs``, as the
DP gradient methods do) has that dataclass's fields as options, with the ranges of their
``metadata["range"]``.  The spec is the contract the suites
in ``tests/contracts/`` run over.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import math
import numbers
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dpopt.exceptions import InvalidParameterError
from dpopt.problems import ConstraintSet, ERMProblem, Loss

__all__ = ["COMMON_ARGUMENTS", "MethodSpec", "OptionSpec", "check_call", "describe_constraint"]

#: Arguments every method takes (checked by ``minimize`` itself, not listed as options).
COMMON_ARGUMENTS = ("problem", "X", "y", "budget", "rng", "calibration", "accountant", "diagnostics")

Requirement = Callable[[ERMProblem, Mapping[str, Any]], "str | None"]


@dataclass(frozen=True)
class OptionSpec:
    """One method option: accepted types, choices, numeric range, default.

    ``low``/``high`` are inclusive unless ``low_open``/``high_open``; ``allow_none`` accepts ``None``.
    """

    name: str
    types: tuple[type, ...] = ()
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    allow_none: bool = False
    default: Any = None

    def describe(self) -> str:
        """A short human description (used in error messages and ``help``)."""
        parts: list[str] = []
        if self.choices is not None:
            parts.append(" | ".join(repr(c) for c in self.choices))
        elif self.types:
            parts.append(" | ".join(t.__name__ for t in self.types))
        if self.low is not None or self.high is not None:
            lo = "-inf" if self.low is None else f"{self.low:g}"
            hi = "inf" if self.high is None else f"{self.high:g}"
            parts.append(f"in {'(' if self.low_open else '['}{lo}, {hi}{')' if self.high_open else ']'}")
        if self.allow_none:
            parts.append("or None")
        return " ".join(parts) or "any"

    def check(self, value: Any, method: str) -> None:
        """Raise :class:`InvalidParameterError` when ``value`` is not acceptable."""
        where = f"{self.name} (method {method!r})"
        if value is None:
            if self.allow_none:
                return
            raise InvalidParameterError(f"{where}: None is not accepted; expected {self.describe()}")
        if self.choices is not None:
            if isinstance(value, str) or not self.types or not isinstance(value, self.types):
                if not any(_same(value, c) for c in self.choices):
                    raise InvalidParameterError(f"{where}: must be one of {list(self.choices)}")
                return
        if self.types and not _isinstance(value, self.types):
            raise InvalidParameterError(
                f"{where}: expected {' or '.join(t.__name__ for t in self.types)}, got {type(value).__name__}"
            )
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            v = float(value)
            if math.isnan(v):
                raise InvalidParameterError(f"{where}: must not be NaN")
            lo_bad = self.low is not None and (v <= self.low if self.low_open else v < self.low)
            hi_bad = self.high is not None and (v >= self.high if self.high_open else v > self.high)
            if lo_bad or hi_bad:
                raise InvalidParameterError(f"{where}: out of range; expected {self.describe()}")


def _same(value: Any, choice: Any) -> bool:
    try:
        return bool(value == choice) and type(value) is type(choice)
    except Exception:  # pragma: no cover - exotic __eq__
        return False


def _isinstance(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in kinds:
        return False  # True is not an iteration count
    if float in kinds and isinstance(value, numbers.Real):
        return True
    if int in kinds and isinstance(value, numbers.Integral):
        return True
    return isinstance(value, kinds)


@dataclass(frozen=True)
class MethodSpec:
    """What a registered method supports.

    Attributes
    ----------
    summary : str
        One line for ``help(minimize)`` and ``dpopt.solvers.describe_methods()``.
    target : str or callable
        The solver, or ``"module:function"`` imported on first use.
    constraints : tuple of ConstraintSet subclasses
        Supported constraint sets (a subclass of any entry is supported).
    unconstrained : bool
        Whether ``problem.constraint=None`` (θ ∈ R^p) is supported.
    losses : tuple of Loss subclasses
        Supported losses.
    neighbouring : tuple of str
        Relations the method's guarantee is stated under (a caller's accountant must use one).
    noise : tuple of str
        Noise families it can draw.
    calibrations : tuple of str
        Accepted ``calibration=`` values (the first is the default).
    iterative : bool
        Whether it runs an iteration loop (then ``max_iter`` maps to ``iteration_option``).
    iteration_option : str or None
        Name of the solver's own option for the planned/maximal number of iterations.
    requires : tuple of callables
        Extra checks ``(problem, options) -> message or None``.
    ranges : mapping
        Numeric ranges of options: name → ``(low, high)`` or ``(low, high, low_open, high_open)``.
    """

    summary: str
    target: str | Callable[..., Any]
    constraints: tuple[type[ConstraintSet], ...] = (ConstraintSet,)
    unconstrained: bool = False
    losses: tuple[type[Loss], ...] = (Loss,)
    neighbouring: tuple[str, ...] = ("replace_one",)
    noise: tuple[str, ...] = ("gaussian",)
    calibrations: tuple[str, ...] = ("tight", "paper")
    iterative: bool = True
    iteration_option: str | None = "iterations"
    requires: tuple[Requirement, ...] = ()
    ranges: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)

    def solver(self) -> Callable[..., Any]:
        """The solver callable (imports ``target`` on first use)."""
        if callable(self.target):
            return self.target
        module, func = self.target.split(":")
        fn = getattr(importlib.import_module(module), func)
        if not callable(fn):  # pragma: no cover - registry error
            raise InvalidParameterError(f"method target {self.target!r} is not callable")
        return fn

    def options(self) -> dict[str, OptionSpec]:
        """The method's options (from the solver's signature and ``ranges``), by name."""
        return _options_of(self.solver(), tuple(sorted((k, tuple(v)) for k, v in self.ranges.items())))

    def supports_constraint(self, constraint: ConstraintSet | None) -> bool:
        if constraint is None:
            return self.unconstrained
        return isinstance(constraint, self.constraints)

    def supports_loss(self, loss: Any) -> bool:
        return isinstance(loss, self.losses)


_OPTION_CACHE: dict[tuple[Any, ...], dict[str, OptionSpec]] = {}


def _options_of(
    fn: Callable[..., Any], ranges: tuple[tuple[str, tuple[Any, ...]], ...]
) -> dict[str, OptionSpec]:
    key = (fn, ranges)
    if key in _OPTION_CACHE:
        return _OPTION_CACHE[key]
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolved annotations: no type check, names only
        hints = {}
    rng_map = dict(ranges)
    out: dict[str, OptionSpec] = {}
    for name, par in inspect.signature(fn).parameters.items():
        if name in COMMON_ARGUMENTS or par.kind in (par.VAR_KEYWORD, par.VAR_POSITIONAL):
            continue
        hint = hints.get(name, Any)
        default = None if par.default is inspect.Parameter.empty else par.default
        out[name] = _option(name, hint, default, rng_map.get(name, ()))
        if name == "options":  # a dataclass of options (passed whole or field by field as keywords)
            out.update(_dataclass_options(hint, rng_map))
    _OPTION_CACHE[key] = out
    return out


def _option(name: str, hint: Any, default: Any, r: tuple[Any, ...]) -> OptionSpec:
    kinds, choices, allow_none = _parse_hint(hint)
    return OptionSpec(
        name=name,
        types=kinds,
        choices=choices,
        low=r[0] if len(r) > 0 else None,
        high=r[1] if len(r) > 1 else None,
        low_open=bool(r[2]) if len(r) > 2 else False,
        high_open=bool(r[3]) if len(r) > 3 else False,
        allow_none=allow_none or default is None,
        default=default,
    )


def _dataclass_options(hint: Any, rng_map: Mapping[str, tuple[Any, ...]]) -> dict[str, OptionSpec]:
    """The fields of the dataclass in ``hint`` (``Options | None``) as options; ranges from ``metadata["range"]``."""
    kinds = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    cls = next((k for k in kinds if dataclasses.is_dataclass(k) and isinstance(k, type)), None)
    if cls is None:
        return {}
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # pragma: no cover - unresolved annotations: no type check, names only
        hints = {}
    out: dict[str, OptionSpec] = {}
    for f in dataclasses.fields(cls):
        default = None if f.default is dataclasses.MISSING else f.default
        r = rng_map.get(f.name, tuple(f.metadata.get("range", ())))
        out[f.name] = _option(f.name, hints.get(f.name, Any), default, r)
    return out


def _parse_hint(hint: Any) -> tuple[tuple[type, ...], tuple[Any, ...] | None, bool]:
    """(types, choices, allow_none) of an annotation; ``()`` types means unchecked."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return (), tuple(typing.get_args(hint)), False
    if origin in (typing.Union, types.UnionType):
        kinds: list[type] = []
        choices: list[Any] = []
        allow_none = False
        for arg in typing.get_args(hint):
            if arg is type(None):
                allow_none = True
                continue
            k, c, _ = _parse_hint(arg)
            if not k and c is None:
                return (), None, allow_none or type(None) in typing.get_args(hint)
            kinds.extend(k)
            choices.extend(c or ())
        if choices and not kinds:
            return (), tuple(choices), allow_none
        return tuple(kinds), None, allow_none  # a Literal mixed with a type: check the type only
    if hint in (int, float, bool, str):
        return (hint,), None, False
    return (), None, False


def describe_constraint(constraint: ConstraintSet | None) -> str:
    """The constraint set in words, for messages."""
    return (
        "no constraint set (θ ∈ R^p)" if constraint is None else f"a {type(constraint).__name__} constraint"
    )


def check_call(
    name: str,
    spec: MethodSpec,
    problem: ERMProblem,
    calibration: str,
    accountant_neighbouring: str | None,
    options: Mapping[str, Any],
    registry: Mapping[str, MethodSpec],
) -> None:
    """Hold one ``minimize`` call to ``spec``; raise before anything runs."""

    def others(pred: Callable[[MethodSpec], bool]) -> str:
        ok = sorted(k for k, s in registry.items() if k != name and pred(s))
        return f"methods that do: {ok}" if ok else "no registered method does"

    if not spec.supports_constraint(problem.constraint):
        c = problem.constraint
        if c is None:
            raise InvalidParameterError(
                f"{name!r} needs a bounded constraint set (problem.constraint is None); "
                + others(lambda s: s.unconstrained),
                param="method",
            )
        raise InvalidParameterError(
            f"{name!r} does not support {describe_constraint(c)}; "
            + others(lambda s: s.supports_constraint(c)),
            param="method",
        )
    if not spec.supports_loss(problem.loss):
        loss = problem.loss
        raise InvalidParameterError(
            f"{name!r} does not support the {type(loss).__name__}; "
            + others(lambda s: s.supports_loss(loss)),
            param="method",
        )
    if calibration not in spec.calibrations:
        raise InvalidParameterError(
            f"calibration: method {name!r} accepts {list(spec.calibrations)}, not {calibration!r}"
        )
    if accountant_neighbouring is not None and accountant_neighbouring not in spec.neighbouring:
        rel = accountant_neighbouring
        raise InvalidParameterError(
            f"accountant: method {name!r} is analysed under {list(spec.neighbouring)} neighbours but the "
            f"accountant uses {rel!r}; create it with neighbouring={spec.neighbouring[0]!r} ("
            + others(lambda s: rel in s.neighbouring)
            + ")"
        )
    valid = spec.options()
    for key, value in options.items():
        if key not in valid:
            close = difflib.get_close_matches(key, list(valid), n=3, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise InvalidParameterError(
                f"{key}: not an option of method {name!r}; {hint}valid options: {sorted(valid)}"
            )
        valid[key].check(value, name)
    for req in spec.requires:
        msg = req(problem, options)
        if msg:
            raise InvalidParameterError(f"method {name!r}: {msg}")
