"""What a ledger holds: its datasets and their releases, and how a release row is written.

The rows' column lists and time stamps live here, below both the :class:`~dpopt.ledger.Ledger`
(``store``) and its accountant (``accountant``), so neither imports the other at load time.
"""

from __future__ import annotations

import datetime as _dt
import getpass
import os
import socket
from dataclasses import dataclass
from typing import Any

from dpopt.accounting import Budget, PrivacyEvent
from dpopt.accounting.events import Neighbouring, check_neighbouring
from dpopt.ledger.serialize import event_from_json

__all__ = ["RELEASE_COLUMNS", "Dataset", "Release", "default_actor", "now", "parse_time"]

#: The columns of a release row, in the order :class:`Release` reads them.
RELEASE_COLUMNS = "dataset, seq, recorded_at, actor, label, note, event, count, epsilon_spent, epsilon_total"


def default_actor() -> str:
    """Who records a release: ``$DPOPT_LEDGER_ACTOR``, else ``user@host (pid N)``."""
    env = os.environ.get("DPOPT_LEDGER_ACTOR", "").strip()
    if env:
        return env[:200]
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()} (pid {os.getpid()})"


def now() -> str:
    """The current UTC time as the ledger stores it (ISO 8601, microseconds, ``Z``)."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(text: str) -> _dt.datetime:
    """A time stamp written by :func:`now`, as an aware UTC datetime."""
    return _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Dataset:
    """A dataset registered in a ledger.

    Attributes
    ----------
    name : str
    budget : Budget
        The total (ε, δ) every release on this dataset together may spend.
    neighbouring : {"add_remove", "replace_one"}
        The relation every release's sensitivities are declared under.
    accountant : str
        How releases compose: ``"pld"`` (default), ``"rdp"``, ``"basic"`` or ``"advanced"``.
    description, created_at, created_by
        Free text, when and by whom it was registered.
    n_releases : int
        Releases recorded so far.
    """

    name: str
    budget: Budget
    neighbouring: Neighbouring
    accountant: str
    description: str
    created_at: _dt.datetime
    created_by: str
    n_releases: int

    @classmethod
    def _from_row(cls, row: tuple[Any, ...]) -> Dataset:
        return cls(
            name=row[0],
            budget=Budget(float(row[1]), float(row[2])),
            neighbouring=check_neighbouring(row[3]),
            accountant=str(row[4]),
            description=str(row[5]),
            created_at=parse_time(row[6]),
            created_by=str(row[7]),
            n_releases=int(row[8]),
        )


@dataclass(frozen=True)
class Release:
    """One recorded release.

    Attributes
    ----------
    dataset : str
    seq : int
        1, 2, ... in the order the releases were recorded on the dataset.
    recorded_at : datetime
        When it was recorded (UTC), before its noise was drawn.
    actor : str
        Who recorded it (``user@host (pid N)`` or ``$DPOPT_LEDGER_ACTOR``).
    label : str
        What was released (the release's own label, e.g. ``"dp_sgd"`` or ``"gaussian"``).
    note : str
        Free text given to :meth:`Ledger.accountant` (the CLI puts its command here).
    event : PrivacyEvent
        The privacy event, as composed.
    count : int
        Number of copies of ``event``.
    epsilon_spent : float
        What this release added to the dataset's ε (at the dataset's δ) when it was recorded.
    epsilon_total : float
        The dataset's ε after this release.
    """

    dataset: str
    seq: int
    recorded_at: _dt.datetime
    actor: str
    label: str
    note: str
    event: PrivacyEvent
    count: int
    epsilon_spent: float
    epsilon_total: float

    @classmethod
    def _from_row(cls, row: tuple[Any, ...]) -> Release:
        return cls(
            dataset=row[0],
            seq=int(row[1]),
            recorded_at=parse_time(row[2]),
            actor=row[3],
            label=row[4],
            note=row[5],
            event=event_from_json(row[6]),
            count=int(row[7]),
            epsilon_spent=float(row[8]),
            epsilon_total=float(row[9]),
        )
