"""Privacy events as JSON data (what the ledger stores for every release).

Every event class of :mod:`dpopt.accounting.events` is a frozen dataclass of numbers, strings,
booleans and nested events; it is written as ``{"type": "GaussianEvent", "sigma": 2.0, ...}``
(nested events as nested objects, tuples of events as lists).  Floats round-trip exactly (Python
writes the shortest repr); ``inf`` is written as the string ``"inf"`` so that the text is standard
JSON (PostgreSQL and most tools refuse ``Infinity``).  Reading checks every field through the
event's own constructor, so a tampered record is refused like a bad argument.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from dpopt.accounting import events as _events
from dpopt.accounting.events import PrivacyEvent
from dpopt.exceptions import DPOptError, InvalidParameterError

__all__ = ["describe_event", "event_from_data", "event_from_json", "event_to_data", "event_to_json"]


def _event_classes() -> dict[str, type[PrivacyEvent]]:
    out: dict[str, type[PrivacyEvent]] = {}
    for name in _events.__all__:
        obj = getattr(_events, name)
        if isinstance(obj, type) and issubclass(obj, PrivacyEvent) and dataclasses.is_dataclass(obj):
            out[name] = obj
    return out


_CLASSES = _event_classes()


def _value_to_data(value: Any) -> Any:
    if isinstance(value, PrivacyEvent):
        return event_to_data(value)
    if isinstance(value, tuple):
        return [_value_to_data(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            raise InvalidParameterError("event: a NaN field cannot be recorded")
        return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    raise InvalidParameterError(f"event: a field of type {type(value).__name__} cannot be recorded")


def event_to_data(event: PrivacyEvent) -> dict[str, Any]:
    """``event`` as a JSON-ready dict (``{"type": class name, field: value, ...}``).

    Examples
    --------
    >>> from dpopt.accounting import GaussianEvent, RepeatedEvent
    >>> event_to_data(RepeatedEvent(GaussianEvent(2.0), 10))
    {'type': 'RepeatedEvent', 'event': {'type': 'GaussianEvent', 'sigma': 2.0, 'sensitivity': 1.0}, 'count': 10}
    """
    name = type(event).__name__
    if _CLASSES.get(name) is not type(event):
        raise InvalidParameterError(
            f"event: {name} is not one of dpopt's event classes (dpopt.accounting.events); only those "
            "can be recorded in a ledger"
        )
    out: dict[str, Any] = {"type": name}
    for f in dataclasses.fields(event):  # type: ignore[arg-type]
        out[f.name] = _value_to_data(getattr(event, f.name))
    return out


def _value_from_data(value: Any, where: str) -> Any:
    if isinstance(value, dict):
        return event_from_data(value)
    if isinstance(value, list):
        return tuple(_value_from_data(v, where) for v in value)
    if value == "inf":
        return math.inf
    if value == "-inf":
        return -math.inf
    return value


def event_from_data(data: Any) -> PrivacyEvent:
    """The event described by ``data`` (as written by :func:`event_to_data`); fields are re-checked."""
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise InvalidParameterError("event record: expected an object with a 'type'")
    cls = _CLASSES.get(data["type"])
    if cls is None:
        raise InvalidParameterError(
            f"event record: unknown event type {data['type'][:60]!r} (written by a newer dpopt?)"
        )
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    extra = set(data) - names - {"type"}
    if extra:
        raise InvalidParameterError(f"event record: {cls.__name__} has no field(s) {sorted(extra)}")
    kwargs = {k: _value_from_data(v, k) for k, v in data.items() if k != "type"}
    try:
        return cls(**kwargs)
    except DPOptError:
        raise
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(
            f"event record: not a valid {cls.__name__} ({type(exc).__name__})"
        ) from None


def event_to_json(event: PrivacyEvent) -> str:
    """``event`` as a compact, standard JSON string.

    Examples
    --------
    >>> from dpopt.accounting import LaplaceEvent
    >>> text = event_to_json(LaplaceEvent(scale=2.0))
    >>> text
    '{"type":"LaplaceEvent","scale":2.0,"sensitivity":1.0}'
    >>> event_from_json(text) == LaplaceEvent(scale=2.0)
    True
    """
    return json.dumps(event_to_data(event), separators=(",", ":"), allow_nan=False)


def event_from_json(text: str) -> PrivacyEvent:
    """The event stored as ``text`` by :func:`event_to_json`."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError):
        raise InvalidParameterError("event record: not valid JSON") from None
    return event_from_data(data)


def describe_event(event: PrivacyEvent, *, limit: int = 100) -> str:
    """A short human description of ``event`` (for tables), at most ``limit`` characters.

    Examples
    --------
    >>> from dpopt.accounting import GaussianEvent, PoissonSampledEvent, RepeatedEvent
    >>> describe_event(RepeatedEvent(PoissonSampledEvent(GaussianEvent(2.0, 0.5), 0.01), 1000))
    '1000 × Gaussian σ/Δ=4, Poisson q=0.01'
    """
    text = _describe(event)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe(e: PrivacyEvent) -> str:
    if isinstance(e, _events.LaplaceEvent):
        return f"Laplace b/Δ={e.scale / e.sensitivity:.4g}"
    if isinstance(e, _events.GaussianEvent):
        return f"Gaussian σ/Δ={e.sigma / e.sensitivity:.4g}"
    if isinstance(e, _events.EpsilonDeltaEvent):
        claim = f"(ε={e.epsilon:.4g}, δ={e.delta:.3g})"
        return claim if e.source is None else f"{_describe(e.source)} {claim}"
    if isinstance(e, _events.ReportNoisyMinEvent):
        return f"report-noisy-min b/Δ={e.scale / e.sensitivity:.4g}"
    if isinstance(e, _events.ExponentialEvent):
        return f"exponential ε={e.epsilon:.4g}"
    if isinstance(e, _events.L2LaplaceEvent):
        return f"l2-Laplace αΔ={e.alpha * e.sensitivity:.4g}"
    if isinstance(e, _events.RepeatedEvent):
        return f"{e.count} × {_describe(e.event)}"
    if isinstance(e, _events.ComposedEvent):
        return (
            "; ".join(_describe(x) for x in e.events)
            if len(e.events) <= 3
            else (f"{len(e.events)} releases: " + "; ".join(_describe(x) for x in e.events[:2]) + "; …")
        )
    if isinstance(e, _events.PoissonSampledEvent):
        return f"{_describe(e.event)}, Poisson q={e.rate:.4g}"
    if isinstance(e, _events.SampledWithoutReplacementEvent):
        return f"{_describe(e.event)}, sampled {e.sample_size}/{e.population_size}"
    if isinstance(e, _events.NonPrivateEvent):
        return "non-private" + (f" ({e.reason})" if e.reason else "")
    return type(e).__name__
