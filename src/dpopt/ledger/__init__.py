"""A persistent privacy ledger: budgets that outlive a Python process.

A ledger holds datasets, each with a total budget (ε, δ), a neighbouring relation and an
accountant kind, and the history of every release on them (when, who, what, the privacy event
as data, what it spent).  It lives in an SQLite file (the embedded default) or a PostgreSQL
database (a team's shared ledger; ``pip install 'dpopt[postgres]'``), selected by URL.

:meth:`Ledger.accountant` returns a :class:`LedgerAccountant`, an ordinary dpopt accountant that
records every charge in the database, checked against the dataset's total across processes,
before any noise is drawn.  The command line is ``dpopt ledger init|add-dataset|show|history|export``.

Examples
--------
>>> import os, tempfile
>>> from dpopt.accounting import Budget
>>> from dpopt.mechanisms import LaplaceMechanism
>>> url = "sqlite:///" + os.path.join(tempfile.mkdtemp(), "ledger.db")
>>> ledger = Ledger(url, create=True)
>>> _ = ledger.add_dataset("survey", budget=Budget(1.0))
>>> acct = ledger.accountant("survey")
>>> mech = LaplaceMechanism.calibrate(0.4, sensitivity=1.0)
>>> _ = mech.release(10.0, rng=0, accountant=acct)
>>> _ = mech.release(10.0, rng=1, accountant=acct)
>>> _ = mech.release(10.0, rng=2, accountant=acct)
Traceback (most recent call last):
...
dpopt.exceptions.BudgetExceededError: dataset 'survey': this release would bring its total to ε=1.2 ...
>>> round(Ledger(url).spent("survey").epsilon, 6)   # another connection sees the same total
0.8
"""

from dpopt.ledger.accountant import LedgerAccountant
from dpopt.ledger.errors import (
    LedgerConnectionError,
    LedgerError,
    LedgerReadOnlyError,
    LedgerSchemaError,
    UnknownDatasetError,
)
from dpopt.ledger.records import Dataset, Release
from dpopt.ledger.schema import SCHEMA_VERSION
from dpopt.ledger.serialize import event_from_json, event_to_json
from dpopt.ledger.store import Ledger

__all__ = [
    "SCHEMA_VERSION",
    "Dataset",
    "Ledger",
    "LedgerAccountant",
    "LedgerConnectionError",
    "LedgerError",
    "LedgerReadOnlyError",
    "LedgerSchemaError",
    "Release",
    "UnknownDatasetError",
    "event_from_json",
    "event_to_json",
]
