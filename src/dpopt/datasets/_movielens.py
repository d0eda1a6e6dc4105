"""Loader of the published MovieLens rating files (``u.data`` of 100K, ``ratings.dat`` of 1M/10M)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from dpopt.datasets._types import DatasetFormatError, PathLike, Ratings
from dpopt.exceptions import InvalidParameterError

__all__ = ["load_movielens"]


_MOVIELENS_FORMATS = {
    "u.data": (
        "MovieLens 100K u.data: tab-separated 'user id, item id, rating, timestamp', one rating per line"
    ),
    "ratings.dat": "MovieLens 1M/10M ratings.dat: 'UserID::MovieID::Rating::Timestamp', one rating per line",
}


def _first_bad_movielens_line(lines: list[str], sep: str) -> tuple[int, str]:
    """Locate the first malformed line (1-based) and say what is wrong, without quoting it."""
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fields = line.strip().split(sep)
        if len(fields) != 4:
            return lineno, f"found {len(fields)} fields, expected 4"
        try:
            [float(f) for f in fields]
        except ValueError:
            return lineno, "a field is not a number"
    return 0, "could not be parsed"


def load_movielens(path: PathLike) -> Ratings:
    """Load MovieLens ratings from ``u.data`` (100K) or ``ratings.dat`` (1M, 10M).

    Parameters
    ----------
    path : str or PathLike
        The ``u.data`` / ``ratings.dat`` file itself, or a directory containing exactly one of them.
        A file named otherwise is read as ``ratings.dat`` if its first line contains ``::``,
        else as tab-separated ``u.data``.

    Returns
    -------
    Ratings
        ``rows`` = user index, ``cols`` = item index, ``values`` = ratings (in file order).

    Raises
    ------
    FileNotFoundError
        If the path does not exist or a directory contains neither file.
    DatasetFormatError
        If a line does not have 4 numeric fields, an id is not a positive integer or a rating lies
        outside the published scale (file and line are named, not the value).

    Examples
    --------
    A two-rating file in the 100K format (``user item rating timestamp``, tab-separated):

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "u.data"
    >>> _ = path.write_text("1\\t10\\t4\\t881250949\\n2\\t10\\t5\\t881250950\\n")
    >>> ratings = load_movielens(path)
    >>> ratings.shape, ratings.values.tolist()
    ((2, 1), [4.0, 5.0])

    Notes
    -----
    **Re-indexing.**  File ids are 1-based and, in the larger sets, not contiguous (MovieLens 1M has
    movie ids up to 3,952 but only 3,706 rated movies; 10M has gaps in both).  Rows and columns are
    the ranks of the ids that occur: ``row_ids = sorted unique user ids``, ``rows[k]`` is the position
    of the k-th rating's user id in ``row_ids`` (so ``row_ids[rows]`` recovers the file ids), and the
    same for items.  ``shape = (len(row_ids), len(col_ids))`` counts users and items that have at
    least one rating, not the largest id.  For 100K the ids are exactly 1..943 and 1..1682, so
    ``rows = user id - 1`` and the shape is 943 x 1682 with 100,000 ratings.

    **Bounds.**  The rating scale is part of the published format: integer stars 1-5 in
    ``u.data``, half stars 0.5-5 in ``ratings.dat`` (whole stars in 1M); values are checked against
    it and declared in ``bounds`` as ``rating_min``/``rating_max``.  Timestamps are read and dropped.
    """
    p = Path(path)
    if p.is_dir():
        found = [p / f for f in _MOVIELENS_FORMATS if (p / f).is_file()]
        if not found:
            raise FileNotFoundError(
                f"MovieLens directory {str(p)!r} contains neither u.data nor ratings.dat; expected "
                f"{_MOVIELENS_FORMATS['u.data']} or {_MOVIELENS_FORMATS['ratings.dat']}"
            )
        if len(found) > 1:
            raise InvalidParameterError(
                f"path: directory {str(p)!r} contains both u.data and ratings.dat; pass the file to load"
            )
        p = found[0]
    elif not p.is_file():
        raise FileNotFoundError(
            f"MovieLens file {str(p)!r} not found; expected {_MOVIELENS_FORMATS['u.data']} or "
            f"{_MOVIELENS_FORMATS['ratings.dat']}"
        )
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DatasetFormatError(f"{p.name}: is not a text file; expected MovieLens ratings") from None
    first = text.split("\n", 1)[0]
    kind = p.name if p.name in _MOVIELENS_FORMATS else ("ratings.dat" if "::" in first else "u.data")
    fmt = _MOVIELENS_FORMATS[kind]
    sep = "::" if kind == "ratings.dat" else "\t"
    if sep == "::":
        text = text.replace("::", "\t")
    if not text.strip():
        raise DatasetFormatError(f"{p.name}: contains no ratings; expected {fmt}")
    try:
        data = np.loadtxt(io.StringIO(text), delimiter="\t", dtype=np.float64, ndmin=2, comments=None)
    except ValueError:
        lineno, what = _first_bad_movielens_line(text.splitlines(), "\t")
        raise DatasetFormatError(f"{p.name} line {lineno}: {what}; expected {fmt}") from None
    if data.shape[1] != 4:
        raise DatasetFormatError(
            f"{p.name}: found {data.shape[1]} fields per line, expected 4; expected {fmt}"
        )
    if not np.all(np.isfinite(data)):
        bad = int(np.flatnonzero(~np.all(np.isfinite(data), axis=1))[0]) + 1
        raise DatasetFormatError(f"{p.name} rating {bad}: a field is not a finite number; expected {fmt}")
    ids = data[:, :2]
    bad_ids = (ids < 1) | (ids != np.floor(ids))
    if np.any(bad_ids):
        bad = int(np.flatnonzero(bad_ids.any(axis=1))[0]) + 1
        raise DatasetFormatError(
            f"{p.name} rating {bad}: user and item ids must be positive integers; expected {fmt}"
        )
    lo, hi = (1.0, 5.0) if kind == "u.data" else (0.5, 5.0)
    out_of_scale = (data[:, 2] < lo) | (data[:, 2] > hi)
    if np.any(out_of_scale):
        bad = int(np.flatnonzero(out_of_scale)[0]) + 1
        raise DatasetFormatError(
            f"{p.name} rating {bad}: rating outside the published scale [{lo:g}, {hi:g}]; expected {fmt}"
        )
    user_ids, rows = np.unique(ids[:, 0].astype(np.int64), return_inverse=True)
    item_ids, cols = np.unique(ids[:, 1].astype(np.int64), return_inverse=True)
    name = {"u.data": "movielens-100k", "ratings.dat": "movielens"}[kind]
    return Ratings(
        rows=rows.astype(np.int64).ravel(),
        cols=cols.astype(np.int64).ravel(),
        values=data[:, 2].copy(),
        shape=(int(user_ids.shape[0]), int(item_ids.shape[0])),
        name=name,
        description=(
            f"MovieLens ratings from {p.name}: {data.shape[0]} ratings, {user_ids.shape[0]} users x "
            f"{item_ids.shape[0]} items (ids re-indexed to contiguous zero-based indices). "
            "Harper & Konstan (2015), GroupLens Research; redistribution is not permitted."
        ),
        bounds={"rating_min": lo, "rating_max": hi},
        row_ids=user_ids.astype(np.int64),
        col_ids=item_ids.astype(np.int64),
    )
