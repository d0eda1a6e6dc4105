"""Tidy records: JSON-lines files on disk, and small helpers to group and summarize them for plots.

A record is a flat ``dict`` of JSON values (numbers, strings, booleans, ``None``, lists, dicts).
:func:`to_jsonable` converts numpy scalars and arrays, tuples, paths, enums and dataclasses.
Non-finite floats are written as ``NaN`` / ``Infinity`` (Python's and pandas' JSON readers accept
them).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from dpopt.exceptions import InvalidParameterError

__all__ = [
    "RECORDS_FILE",
    "append_record",
    "dumps_record",
    "group_by",
    "load_records",
    "read_jsonl",
    "select",
    "sort_key",
    "summarize",
    "to_jsonable",
    "write_json_atomic",
    "write_jsonl",
]

#: Name of a run directory's records file (one JSON record per line).
RECORDS_FILE = "records.jsonl"


def to_jsonable(value: Any, where: str = "record") -> Any:
    """Return ``value`` converted to plain JSON types (recursively).

    Raises
    ------
    InvalidParameterError
        For values with no JSON form (e.g. complex numbers, arbitrary objects); the message names
        the offending key path, never the value.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf":
            return value.tolist()
        if value.dtype.kind in "OUS":
            return [to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value.tolist())]
        raise InvalidParameterError(f"{where}: arrays of dtype {value.dtype} cannot be stored in a record")
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value, where)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, _dt.datetime | _dt.date):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: to_jsonable(getattr(value, f.name), f"{where}.{f.name}")
            for f in dataclasses.fields(value)
        }
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if isinstance(k, str):
                key = str(k)
            elif isinstance(k, bool | int | float | np.integer | np.floating):
                key = str(to_jsonable(k))
            else:
                raise InvalidParameterError(
                    f"{where}: dict keys must be strings or numbers, got {type(k).__name__}"
                )
            out[key] = to_jsonable(v, f"{where}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, set | frozenset):
        items = [to_jsonable(v, f"{where}{{}}") for v in value]
        try:
            return sorted(items)
        except TypeError:
            raise InvalidParameterError(
                f"{where}: a set of mixed types cannot be stored; use a list"
            ) from None
    raise InvalidParameterError(
        f"{where}: a {type(value).__name__} cannot be stored in a JSON record; "
        "convert it to a number, string, list or dict"
    )


def dumps_record(record: Mapping[str, Any]) -> str:
    """One JSON line (without the newline) for ``record``."""
    return json.dumps(to_jsonable(record), separators=(",", ":"), ensure_ascii=False)


def append_record(fh: IO[str], record: Mapping[str, Any]) -> None:
    """Write ``record`` as one line to the open text file ``fh`` and flush it."""
    fh.write(dumps_record(record) + "\n")
    fh.flush()


def write_jsonl(
    path: str | os.PathLike[str], records: Iterable[Mapping[str, Any]], *, append: bool = False
) -> Path:
    """Write ``records`` to ``path``, one JSON line each (appending if ``append``); returns the path."""
    p = Path(path)
    with p.open("a" if append else "w", encoding="utf-8") as fh:
        for rec in records:
            append_record(fh, rec)
    return p


def _file_mode() -> int:
    """The mode a newly created file gets under the current umask (0644 under the usual 022)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` via a temporary file and an atomic rename; the file gets the permissions of a
    normally created file (``mkstemp`` alone would leave it readable by its owner only)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        os.fchmod(fd, _file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as indented JSON via a temporary file and an atomic rename (mode as usual)."""
    text = json.dumps(to_jsonable(obj), indent=2, ensure_ascii=False) + "\n"
    return write_text_atomic(path, text)


def read_jsonl(path: str | os.PathLike[str], *, allow_truncated: bool = True) -> list[dict[str, Any]]:
    """Read a JSON-lines file.

    A malformed *last* line with no trailing newline (a write interrupted by a crash) is dropped
    when ``allow_truncated``; any other malformed line raises :class:`InvalidParameterError`.
    """
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    lines = text.split("\n")
    out: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if allow_truncated and i == len(lines) - 1:
                break  # last line without newline: an interrupted write
            raise InvalidParameterError(f"{p}: line {i + 1} is not valid JSON") from None
        if not isinstance(obj, dict):
            raise InvalidParameterError(f"{p}: line {i + 1} is not a JSON object")
        out.append(obj)
    return out


def load_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Records of a run: ``path`` is a run directory (containing ``records.jsonl``) or the file itself."""
    p = Path(path)
    if p.is_dir():
        p = p / RECORDS_FILE
    if not p.is_file():
        raise InvalidParameterError(f"no records found at {p}")
    return read_jsonl(p)


# ----------------------------------------------------------------------------------- tidy helpers


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def sort_key(value: Any) -> tuple[int, Any]:
    """A key that sorts mixed values: numbers (numerically), then strings, then anything else, then None."""
    if value is None:
        return (3, "")
    if isinstance(value, bool | int | float):
        return (0, float(value))
    if isinstance(value, str):
        return (1, value)
    return (2, repr(value))


def _keys(by: str | Sequence[str] | None) -> tuple[str, ...]:
    if by is None:
        return ()
    if isinstance(by, str):
        return (by,)
    return tuple(by)


def select(records: Iterable[Mapping[str, Any]], **where: Any) -> list[dict[str, Any]]:
    """Records whose fields equal every ``key=value`` given (a list/tuple/set value means "one of")."""
    out = []
    for rec in records:
        ok = True
        for k, v in where.items():
            if k not in rec:
                ok = False
            elif isinstance(v, list | tuple | set | frozenset):
                ok = rec[k] in v
            else:
                ok = rec[k] == v
            if not ok:
                break
        if ok:
            out.append(dict(rec))
    return out


def group_by(
    records: Iterable[Mapping[str, Any]], by: str | Sequence[str]
) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Group records by the values of the keys ``by`` (records lacking a key are left out).

    Returns a dict from value tuples to record lists, ordered by the sorted group keys.
    """
    keys = _keys(by)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for rec in records:
        if any(k not in rec for k in keys):
            continue
        groups.setdefault(tuple(_hashable(rec[k]) for k in keys), []).append(dict(rec))
    return {k: groups[k] for k in sorted(groups, key=lambda t: tuple(sort_key(v) for v in t))}


def summarize(
    records: Iterable[Mapping[str, Any]], value: str, by: str | Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Mean and spread of ``value`` over the records of each ``by`` group (typically the repetitions).

    Records without ``value`` (or with ``value`` None) are ignored.  Each output row holds the
    ``by`` fields and ``mean``, ``std`` (sample standard deviation, 0 for a single repetition),
    ``sem`` (standard error of the mean), ``min``, ``max`` and ``count`` (number of values; not ``n``, which is a common record field).  Rows are sorted by the group key.
    """
    keys = _keys(by)
    usable = [r for r in records if r.get(value) is not None]
    rows = []
    for key, group in group_by(usable, keys).items():
        try:
            vals = np.array([float(r[value]) for r in group], dtype=float)
        except (TypeError, ValueError):
            raise InvalidParameterError(f"summarize: field {value!r} must be numeric") from None
        n = vals.size
        std = float(np.std(vals, ddof=1)) if n > 1 else 0.0
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        row.update(
            mean=float(np.mean(vals)),
            std=std,
            sem=std / math.sqrt(n),
            min=float(np.min(vals)),
            max=float(np.max(vals)),
            count=int(n),
        )
        rows.append(row)
    return rows
