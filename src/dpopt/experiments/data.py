"""Where the reproductions find the public reference data sets, and how their records say which
data a run actually used.

dpopt ships no data files.  A reproduction that uses a public set (UCI Adult, MovieLens 100K)
looks for it with :func:`find_file`: in the folder named by the ``DPOPT_DATASETS`` environment
variable when it is set (and only there), else in ``shared/datasets`` next to the source tree or
next to the working directory.  When the files are absent, most reproductions run on a synthetic
stand-in of the same shape instead.

Every record of such a run names the data it was computed on in its ``dataset`` field: the set's
name (e.g. ``"UCI Adult"``) or :func:`stand_in` of it (``"synthetic stand-in for UCI Adult (not
found)"``).  The report reads this field (:func:`data_used`), never the configuration, to say what
a run used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "DATA_FIELD",
    "ENV",
    "FILES",
    "data_phrase",
    "data_used",
    "dataset_dirs",
    "find_file",
    "missing_sets",
    "stand_in",
]

#: The environment variable naming the folder that holds the public data sets.
ENV = "DPOPT_DATASETS"
#: The record field naming the data a record was computed on (``"data"`` in runs before 2026-11-28).
DATA_FIELD = "dataset"
_OLD_FIELD = "data"
#: The file under the data-set folder that each public set is read from.
FILES: Mapping[str, str] = {
    "UCI Adult": "adult/adult.data",
    "Adult capital-gain": "adult/adult.data",
    "MovieLens 100K": "movielens-100k/u.data",
}
_STAND_IN = re.compile(r"^synthetic stand-in for (?P<name>.+) \(not found\)$")
_OLD_STAND_IN = re.compile(r"^synthetic \((?P<name>.+) not found\)$")  # runs before 2026-11-28


def dataset_dirs() -> list[Path]:
    """The folders searched for the public data sets, in order.

    ``$DPOPT_DATASETS`` alone when it is set (so pointing it at an empty folder makes every set
    absent); otherwise ``shared/datasets`` beside the source tree's ancestors and beside the
    working directory.
    """
    env = os.environ.get(ENV)
    if env:
        return [Path(env)]
    here = Path(__file__).resolve()
    dirs = [p / "shared" / "datasets" for p in here.parents[2:5]]
    dirs.append(Path.cwd().parent / "shared" / "datasets")
    return dirs


def find_file(*relative: str) -> Path | None:
    """The first data-set folder holding every one of ``relative`` (e.g. ``"adult/adult.data"``),
    as the path of the first of them; ``None`` when no folder holds them all."""
    for d in dataset_dirs():
        if all((d / r).is_file() for r in relative):
            return d / relative[0]
    return None


def stand_in(name: str) -> str:
    """The ``dataset`` label of a synthetic stand-in for the public set ``name`` (which was not found)."""
    return f"synthetic stand-in for {name} (not found)"


def _stood_in(label: str) -> str | None:
    m = _STAND_IN.match(label) or _OLD_STAND_IN.match(label)
    return m.group("name") if m else None


def data_used(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The distinct ``dataset`` labels of ``records``, in order of first appearance."""
    seen: dict[str, None] = {}
    for r in records:
        value = r.get(DATA_FIELD, r.get(_OLD_FIELD))
        if isinstance(value, str) and value:
            seen.setdefault(value, None)
    return list(seen)


def missing_sets(labels: Iterable[str]) -> list[str]:
    """The public sets that ``labels`` (from :func:`data_used`) stood in for: they were not found."""
    out: dict[str, None] = {}
    for label in labels:
        name = _stood_in(label)
        if name is not None:
            out.setdefault(name, None)
    return list(out)


def data_phrase(labels: Iterable[str]) -> str:
    """What a description's ``{data}`` becomes for a run that used ``labels``: the sets' names, and
    ``"synthetic data"`` for a stand-in (the set it stands in for was not used, so it is not named)."""
    parts: dict[str, None] = {}
    for label in labels:
        parts.setdefault("synthetic data" if _stood_in(label) is not None else label, None)
    words = list(parts)
    if len(words) <= 1:
        return words[0] if words else ""
    return ", ".join(words[:-1]) + " and " + words[-1]
