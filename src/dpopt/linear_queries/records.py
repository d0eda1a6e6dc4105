"""Tables of records with declared attribute domains: the input users actually hold.

A :class:`Schema` declares, for every attribute, its domain -- a number of values ``n`` (codes
``0..n-1``), an integer range ``range(lo, hi + 1)`` (ordered, e.g. age) or an explicit list of
values (categories, in the order given).  :meth:`Schema.records` encodes a table -- a CSV file, a
numpy structured array, a pandas DataFrame or a mapping of column name to values -- into
:class:`Records`, which build marginal counts on demand (``bincount`` over the attributes asked
for) without ever forming a vector of the full domain.

The domain is declared, never inferred from the data: a record outside it is refused with the
attribute's name (never its value), or, for integer-range attributes and ``clip=True``, moved to
the nearest end of the range.

Privacy
-------
Each record adds one to exactly one cell of the (implicit) histogram, so adding or removing a
record changes the count vector by one unit vector -- the add/remove neighbouring relation the
matrix mechanism's sensitivity (the strategy's largest column norm) assumes.  Clipping is a
per-record map, so it keeps this property.  Under replace-one a record moves between two cells
(twice the add/remove sensitivity at most).  The number of records is part of the private data:
it is never used to calibrate anything.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt._validation import check_memory
from dpopt.exceptions import Hint, InvalidParameterError, Setting

__all__ = ["Attribute", "Records", "Schema"]

IntArray = NDArray[np.intp]


@dataclass(frozen=True)
class Attribute:
    """One attribute's declared domain.

    Attributes
    ----------
    name : str
        Column name in the table.
    size : int
        Number of values.
    low : int or None
        For ordered integer attributes: the value coded 0 (codes are ``value - low``).
    values : tuple or None
        For listed (categorical) attributes: the values, coded by position.
    """

    name: str
    size: int
    low: int | None = None
    values: tuple[Any, ...] | None = None

    @property
    def ordered(self) -> bool:
        """True for integer ranges (clipping is defined), False for listed values."""
        return self.values is None

    def encode(self, column: Any, *, clip: bool) -> IntArray:
        """Codes ``0..size-1`` of a column of values (refused or clipped when outside the domain)."""
        if self.values is None:
            arr = np.asarray(column)
            try:
                num = arr.astype(np.float64)
            except (TypeError, ValueError):
                raise InvalidParameterError(
                    f"attribute {self.name!r}: expected integer values (declared as a range)"
                ) from None
            if not np.all(np.isfinite(num)) or np.any(num != np.round(num)):
                raise InvalidParameterError(
                    f"attribute {self.name!r}: expected integer values (declared as a range); some are not"
                )
            codes = num.astype(np.int64) - int(self.low or 0)
            outside = (codes < 0) | (codes >= self.size)
            if np.any(outside):
                if not clip:
                    raise InvalidParameterError(
                        f"attribute {self.name!r}: some records lie outside the declared domain "
                        f"(a range of {self.size} values)",
                        hint=Hint(
                            "declare a wider domain, or pass {0} to move them to the nearest end of the range",
                            Setting("clip", True),
                        ),
                    )
                codes = np.clip(codes, 0, self.size - 1)
            return codes.astype(np.intp)
        lookup = {_key(v): k for k, v in enumerate(self.values)}
        uniq, inverse = np.unique(
            np.asarray([_key(v) for v in np.asarray(column, dtype=object).tolist()]), return_inverse=True
        )
        codes_u = np.empty(len(uniq), dtype=np.intp)
        for j, key in enumerate(uniq.tolist()):
            code = lookup.get(key)
            if code is None:
                raise InvalidParameterError(
                    f"attribute {self.name!r}: some records have a value that is not among its "
                    f"{self.size} declared values (clipping is only defined for integer ranges)"
                )
            codes_u[j] = code
        return codes_u[inverse.reshape(-1)]


def _key(v: Any) -> str:
    """Values compare by their text, integers without a decimal part (CSV ``"3"`` matches ``3`` and ``3.0``)."""
    if isinstance(v, bool | np.bool_):
        return str(bool(v))
    if (
        isinstance(v, int | float | np.integer | np.floating)
        and math.isfinite(float(v))
        and float(v).is_integer()
    ):
        return str(int(v))
    if isinstance(v, str):
        return v.strip()
    return str(v)


def _attribute(name: str, domain: Any) -> Attribute:
    if isinstance(domain, bool):
        raise InvalidParameterError(f"schema[{name!r}]: expected a size, a range or a list of values")
    if isinstance(domain, int | np.integer):
        if int(domain) < 1:
            raise InvalidParameterError(f"schema[{name!r}]: the domain size must be >= 1")
        return Attribute(name, int(domain), low=0)
    if isinstance(domain, range):
        if domain.step != 1 or len(domain) < 1:
            raise InvalidParameterError(
                f"schema[{name!r}]: a range domain needs step 1 and at least one value"
            )
        return Attribute(name, len(domain), low=domain.start)
    if isinstance(domain, Sequence | np.ndarray) and not isinstance(domain, str | bytes):
        values = tuple(domain.tolist() if isinstance(domain, np.ndarray) else domain)
        if not values:
            raise InvalidParameterError(f"schema[{name!r}]: a list of values must not be empty")
        if len({str(v) for v in values}) != len(values):
            raise InvalidParameterError(f"schema[{name!r}]: the listed values must be distinct")
        return Attribute(name, len(values), values=values)
    raise InvalidParameterError(f"schema[{name!r}]: expected a size, a range or a list of values")


@dataclass(frozen=True)
class Schema:
    """Declared attribute domains, in the order of the histogram's axes (cells in C order).

    Examples
    --------
    >>> from dpopt.linear_queries.records import Schema
    >>> schema = Schema.from_dict({"age": range(17, 91), "sex": ["F", "M"], "hours": 100})
    >>> schema.shape, schema.names
    ((74, 2, 100), ('age', 'sex', 'hours'))
    >>> rec = schema.records({"age": [30, 45, 45], "sex": ["F", "M", "M"], "hours": [40, 38, 40]})
    >>> float(rec.marginal((0, 1))[28, 1])  # age 45, sex M
    2.0
    """

    attributes: tuple[Attribute, ...]

    @classmethod
    def from_dict(cls, domains: Mapping[str, Any]) -> Schema:
        """``{name: size | range(lo, hi + 1) | [values...]}`` (insertion order = axis order)."""
        if not isinstance(domains, Mapping) or not domains:
            raise InvalidParameterError("schema: expected a non-empty mapping of attribute name to domain")
        return cls(tuple(_attribute(str(k), v) for k, v in domains.items()))

    @property
    def shape(self) -> tuple[int, ...]:
        """Attribute sizes."""
        return tuple(a.size for a in self.attributes)

    @property
    def names(self) -> tuple[str, ...]:
        """Attribute names."""
        return tuple(a.name for a in self.attributes)

    @property
    def domain_size(self) -> int:
        """Number of cells ``Π n_i``."""
        return math.prod(self.shape)

    def records(self, table: Any, *, clip: bool = False) -> Records:
        """Encode a table: CSV path, numpy structured array, pandas DataFrame or ``{name: column}``.

        Extra columns are ignored; a missing one is refused.  ``clip`` moves out-of-range values
        of integer-range attributes to the nearest end (listed attributes are always checked).
        """
        columns = _columns(table, self.names)
        n = {len(c) for c in columns.values()}
        if len(n) != 1:
            raise InvalidParameterError("records: the columns have different lengths")
        codes = np.empty((n.pop(), len(self.attributes)), dtype=np.intp)
        for j, a in enumerate(self.attributes):
            codes[:, j] = a.encode(columns[a.name], clip=clip)
        codes.setflags(write=False)
        return Records(codes=codes, schema=self)


def _columns(table: Any, names: Sequence[str]) -> dict[str, Any]:
    if isinstance(table, str | Path):
        return _read_csv(Path(table), names)
    if isinstance(table, np.ndarray) and table.dtype.names is not None:
        missing = [c for c in names if c not in table.dtype.names]
        if missing:
            raise InvalidParameterError(f"records: no field(s) {missing} in the structured array")
        return {c: table[c] for c in names}
    if type(table).__name__ == "DataFrame" and hasattr(table, "columns"):  # pandas, without importing it
        missing = [c for c in names if c not in table.columns]
        if missing:
            raise InvalidParameterError(f"records: no column(s) {missing} in the DataFrame")
        return {c: table[c].to_numpy() for c in names}
    if isinstance(table, Mapping):
        missing = [c for c in names if c not in table]
        if missing:
            raise InvalidParameterError(f"records: no column(s) {missing} in the mapping")
        return {c: np.asarray(table[c]) for c in names}
    raise InvalidParameterError(
        "records: expected a CSV path, a numpy structured array, a pandas DataFrame or a mapping of columns"
    )


def _read_csv(path: Path, names: Sequence[str]) -> dict[str, Any]:
    if not path.is_file():
        raise InvalidParameterError(f"records file not found: {path}")
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise InvalidParameterError(f"records file {path.name}: is empty (expected a header row)")
            header = [h.strip() for h in header]
            missing = [c for c in names if c not in header]
            if missing:
                raise InvalidParameterError(
                    f"records file {path.name}: no column(s) {missing} in its header row"
                )
            idx = [header.index(c) for c in names]
            cols: list[list[str]] = [[] for _ in names]
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) < len(header):
                    raise InvalidParameterError(
                        f"records file {path.name}: line {line} has {len(row)} fields, the header {len(header)}"
                    )
                for c, k in zip(cols, idx, strict=True):
                    c.append(row[k].strip())
    except UnicodeDecodeError:
        raise InvalidParameterError(f"records file {path.name}: is not a UTF-8 text file") from None
    return {c: np.asarray(col, dtype=object) for c, col in zip(names, cols, strict=True)}


@dataclass(frozen=True)
class Records:
    """Encoded records (private data): one row of attribute codes per record.

    Attributes
    ----------
    codes : ndarray of shape (n_records, d)
        Attribute codes (read-only).
    schema : Schema
        The declared domains.

    Privacy
    -------
    Private: pass it to :func:`~dpopt.linear_queries.answer`, which releases only noisy
    functions of its counts.  Nothing here is released.
    """

    codes: IntArray = field(repr=False)
    schema: Schema

    def __repr__(self) -> str:  # never print the data (or its size)
        return f"Records(schema={self.schema.names})"

    def marginal(self, attributes: Sequence[int]) -> NDArray[np.float64]:
        """Counts over the attributes (sorted), summed over the others: shape ``(n_i for i in attributes)``."""
        U = tuple(sorted(int(i) for i in attributes))
        dims = tuple(self.schema.shape[i] for i in U)
        if not U:
            return np.array(float(self.codes.shape[0]))
        size = math.prod(dims)
        check_memory(8.0 * size, f"the marginal on attributes {U}", fix="measure smaller marginals")
        flat = np.ravel_multi_index(tuple(self.codes[:, i] for i in U), dims)
        return np.bincount(flat, minlength=size).astype(np.float64).reshape(dims)

    def histogram(self) -> NDArray[np.float64]:
        """The dense count vector of the full domain (refused when it would not fit in memory)."""
        return self.marginal(range(len(self.schema.shape))).reshape(-1)
