"""The :class:`Ledger`: datasets with a total budget, and the history of every release."""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import warnings
from typing import TYPE_CHECKING, Any

from dpopt.accounting import Budget, PrivacySpent, make_accountant
from dpopt.accounting.accountants import available_accountants
from dpopt.accounting.events import Neighbouring, check_neighbouring
from dpopt.exceptions import DPOptError, Hint, InvalidParameterError, PrivacyClaimWarning
from dpopt.ledger.backend import Backend, Transaction
from dpopt.ledger.connect import open_backend
from dpopt.ledger.errors import CREATE_HINT, LedgerError, LedgerSchemaError, UnknownDatasetError
from dpopt.ledger.records import RELEASE_COLUMNS, Dataset, Release, default_actor, now
from dpopt.ledger.schema import FORMAT, MIGRATIONS, SCHEMA_VERSION

if TYPE_CHECKING:
    from dpopt.ledger.accountant import LedgerAccountant

__all__ = ["Ledger"]  # Dataset, Release and default_actor live in dpopt.ledger.records (importable here too)

_NAME_RE = re.compile(r"^[\w][\w.:@+/-]{0,99}$")
_DATASET_COLUMNS = (
    "name, epsilon, delta, neighbouring, accountant, description, created_at, created_by, n_releases"
)


class Ledger:
    """A persistent privacy ledger: datasets, each with a total budget, and every release on them.

    Parameters
    ----------
    url : str
        ``"sqlite:///ledger.db"`` (relative to the working directory; ``sqlite:////abs/path.db``
        absolute; a plain file path also works; ``?mode=ro`` for read-only) or
        ``"postgresql://user@host:port/dbname"`` (needs ``pip install 'dpopt[postgres]'``).
    create : bool, default False
        Create the ledger (the SQLite file and/or the tables) if it does not exist yet; otherwise
        a missing ledger is an error.
    timeout : float, default 30
        Seconds to wait for a lock (another process recording) or a connection before giving up.

    Notes
    -----
    Each release is recorded by :meth:`LedgerAccountant.compose <dpopt.ledger.LedgerAccountant.compose>`
    in one transaction that locks the dataset (SQLite ``BEGIN IMMEDIATE``, PostgreSQL ``SELECT ...
    FOR UPDATE``), composes every stored event and the new one with the dataset's accountant,
    refuses when over the dataset's budget and otherwise records the release -- all before the
    caller draws any noise.  A process that dies after that leaves the spend recorded.

    Examples
    --------
    >>> import os, tempfile
    >>> from dpopt.accounting import Budget, LaplaceEvent
    >>> path = os.path.join(tempfile.mkdtemp(), "ledger.db")
    >>> with Ledger(f"sqlite:///{path}", create=True) as ledger:
    ...     _ = ledger.add_dataset("census", budget=Budget(1.0), neighbouring="add_remove")
    ...     acct = ledger.accountant("census")
    ...     acct.compose(LaplaceEvent(scale=4.0), label="count")   # ε = 0.25, recorded
    ...     print(round(ledger.spent("census").epsilon, 3), len(ledger.history("census")))
    0.25 1
    """

    def __init__(self, url: str, *, create: bool = False, timeout: float = 30.0) -> None:
        self._backend: Backend = open_backend(url, timeout=timeout, create=create)
        self.schema_version = self._open(create)

    # --- opening and migrating --------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The ledger's location (passwords redacted)."""
        return self._backend.display_url

    def _open(self, create: bool) -> int:
        be = self._backend
        with be.transaction(write=False) as tx:
            tables = be.table_names(tx)
            version = self._read_version(tx, tables)
        if version == SCHEMA_VERSION:
            return version
        if version == 0 and tables - {"sqlite_sequence"}:
            raise LedgerSchemaError(
                f"{be.display_url} is not a dpopt ledger (it holds other tables); give the ledger its own "
                "file, or its own PostgreSQL database or schema"
            )
        if version == 0 and not create:
            raise LedgerError(
                f"no ledger at {be.display_url}",
                hint=Hint("create one with 'dpopt ledger init --ledger URL'", more=CREATE_HINT),
            )
        with be.transaction(write=True) as tx:  # migrate (or create) under the write lock
            be.lock_schema(tx)
            tables = be.table_names(tx)
            version = self._read_version(tx, tables)
            if version == 0 and tables & {"dpopt_datasets", "dpopt_releases"}:
                raise LedgerSchemaError(f"{be.display_url}: a damaged dpopt ledger (its version is missing)")
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[target]:
                    tx.run(statement)
                if target == 1:
                    tx.run("INSERT INTO dpopt_ledger_meta (key, value) VALUES (?, ?)", ("format", FORMAT))
                    tx.run(
                        "INSERT INTO dpopt_ledger_meta (key, value) VALUES (?, ?)", ("schema_version", "1")
                    )
                    tx.run("INSERT INTO dpopt_ledger_meta (key, value) VALUES (?, ?)", ("created_at", now()))
                else:
                    tx.run(
                        "UPDATE dpopt_ledger_meta SET value = ? WHERE key = 'schema_version'", (str(target),)
                    )
        return SCHEMA_VERSION

    def _read_version(self, tx: Transaction, tables: set[str]) -> int:
        """The stored schema version (0: no ledger tables); refuses a foreign or newer database."""
        if "dpopt_ledger_meta" not in tables:
            return 0
        meta = dict(tx.query("SELECT key, value FROM dpopt_ledger_meta"))
        where = self._backend.display_url
        if meta.get("format") != FORMAT:
            raise LedgerSchemaError(f"{where} is not a dpopt ledger (its format marker is missing)")
        try:
            version = int(meta.get("schema_version", ""))
        except ValueError:
            raise LedgerSchemaError(f"{where}: a damaged dpopt ledger (unreadable schema version)") from None
        if version > SCHEMA_VERSION:
            raise LedgerSchemaError(
                f"{where} was written by a newer dpopt (ledger schema {version}; this dpopt reads up to "
                f"{SCHEMA_VERSION}); upgrade dpopt to use it"
            )
        if version < 1:
            raise LedgerSchemaError(f"{where}: a damaged dpopt ledger (schema version {version})")
        return version

    # --- datasets ---------------------------------------------------------------------------------
    def add_dataset(
        self,
        name: str,
        *,
        budget: Budget,
        neighbouring: Neighbouring = "add_remove",
        accountant: str = "pld",
        description: str = "",
    ) -> Dataset:
        """Register a dataset with its total ``budget``; refused if the name is taken.

        Parameters
        ----------
        name : str
            Letters, digits and ``_ . : @ + / -`` (at most 100 characters).
        budget : Budget
            The total (ε, δ) all releases on the dataset may spend together.
        neighbouring : {"add_remove", "replace_one"}, default "add_remove"
            The relation the releases' sensitivities are declared under (a release analysed under
            the other relation is refused).
        accountant : {"pld", "rdp", "basic", "advanced"}, default "pld"
            How the releases compose.
        description : str
            Free text (at most 1000 characters).
        """
        _check_name(name)
        if not isinstance(budget, Budget):
            raise InvalidParameterError("budget: expected a dpopt.accounting.Budget, e.g. Budget(1.0, 1e-6)")
        rel = check_neighbouring(neighbouring)
        kind = {"paper": "basic", "tight": "pld"}.get(accountant, accountant)
        if kind not in available_accountants():
            raise InvalidParameterError(f"accountant: must be one of {available_accountants()}")
        if not isinstance(description, str) or len(description) > 1000:
            raise InvalidParameterError("description: expected text of at most 1000 characters")
        be = self._backend
        with be.transaction(write=True) as tx:
            if be.lock_dataset(tx, name) is not None:
                raise LedgerError(f"dataset {name!r} already exists in the ledger {be.display_url}")
            tx.run(
                f"INSERT INTO dpopt_datasets ({_DATASET_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (name, budget.epsilon, budget.delta, rel, kind, description, now(), default_actor(), 0),
            )
        return self.dataset(name)

    def dataset(self, name: str) -> Dataset:
        """The registered dataset ``name``."""
        with self._backend.transaction(write=False) as tx:
            rows = tx.query(f"SELECT {_DATASET_COLUMNS} FROM dpopt_datasets WHERE name = ?", (name,))
        if not rows:
            raise self._unknown(name)
        return Dataset._from_row(rows[0])

    def datasets(self) -> tuple[Dataset, ...]:
        """All registered datasets, by name."""
        with self._backend.transaction(write=False) as tx:
            rows = tx.query(f"SELECT {_DATASET_COLUMNS} FROM dpopt_datasets ORDER BY name")
        return tuple(Dataset._from_row(r) for r in rows)

    def _unknown(self, name: str) -> UnknownDatasetError:
        with self._backend.transaction(write=False) as tx:
            names = [r[0] for r in tx.query("SELECT name FROM dpopt_datasets ORDER BY name LIMIT 20")]
        known = ", ".join(names) if names else "none yet; add one with 'dpopt ledger add-dataset'"
        return UnknownDatasetError(
            f"no dataset {str(name)[:100]!r} in the ledger {self._backend.display_url} (datasets: {known})"
        )

    # --- history and spend ------------------------------------------------------------------------
    def history(self, name: str, *, since: int = 0) -> tuple[Release, ...]:
        """The releases recorded on dataset ``name`` (those with ``seq > since``), in order."""
        self.dataset(name)  # unknown names are an error, not an empty history
        with self._backend.transaction(write=False) as tx:
            rows = tx.query(
                f"SELECT {RELEASE_COLUMNS} FROM dpopt_releases WHERE dataset = ? AND seq > ? ORDER BY seq",
                (name, int(since)),
            )
        out = []
        for r in rows:
            try:
                out.append(Release._from_row(r))
            except (DPOptError, ValueError, TypeError) as exc:
                raise LedgerSchemaError(
                    f"dataset {name!r}: release {r[1]} is unreadable ({exc}); the ledger database was "
                    "altered or written by a newer dpopt"
                ) from None
        return tuple(out)

    def spent(self, name: str, delta: float | None = None) -> PrivacySpent:
        """What all releases on ``name`` spend together at ``delta`` (default: the dataset's δ),
        recomputed from the stored events with the dataset's accountant."""
        ds = self.dataset(name)
        acct = make_accountant(ds.accountant, neighbouring=ds.neighbouring)
        with warnings.catch_warnings():  # warned when each release was recorded
            warnings.simplefilter("ignore", PrivacyClaimWarning)
            for r in self.history(name):
                acct.compose(r.event, r.count, label=r.label)
        return acct.spent(ds.budget.delta if delta is None else delta)

    def remaining(self, name: str) -> float:
        """The ε still available on ``name`` at its δ (budget ε minus what was spent; >= 0)."""
        ds = self.dataset(name)
        return max(0.0, ds.budget.epsilon - self.spent(name).epsilon)

    def accountant(self, name: str, *, note: str = "") -> LedgerAccountant:
        """An :class:`~dpopt.accounting.Accountant` for dataset ``name`` that records every charge here.

        Pass it wherever dpopt takes ``accountant=`` (:func:`dpopt.minimize`, the estimators,
        :func:`dpopt.answer`, mechanisms' ``release``, :class:`dpopt.PrivateADMM`); ``note`` is
        stored with each release it records.

        Privacy
        -------
        Each charge is checked against the dataset's *total* budget, counting every release
        recorded by any process, and recorded before the caller draws noise.
        """
        from dpopt.ledger.accountant import LedgerAccountant

        return LedgerAccountant(self, self.dataset(name), note=note)

    # --- export -----------------------------------------------------------------------------------
    def export(self, name: str | None = None) -> dict[str, Any]:
        """The ledger (or one dataset) as JSON-ready data: datasets, their spend and their history."""
        from dpopt.ledger.serialize import event_to_data

        datasets = (self.dataset(name),) if name is not None else self.datasets()
        out: dict[str, Any] = {
            "format": FORMAT,
            "schema_version": self.schema_version,
            "ledger": self.url,
            "exported_at": now(),
            "datasets": [],
        }
        for ds in datasets:
            spent = self.spent(ds.name)
            out["datasets"].append(
                {
                    "name": ds.name,
                    "budget": {"epsilon": ds.budget.epsilon, "delta": ds.budget.delta},
                    "neighbouring": ds.neighbouring,
                    "accountant": ds.accountant,
                    "description": ds.description,
                    "created_at": _iso(ds.created_at),
                    "created_by": ds.created_by,
                    "spent": {
                        "epsilon": _num(spent.epsilon),
                        "delta": spent.delta,
                        "n_events": spent.n_events,
                    },
                    "releases": [
                        {
                            "seq": r.seq,
                            "recorded_at": _iso(r.recorded_at),
                            "actor": r.actor,
                            "label": r.label,
                            "note": r.note,
                            "event": event_to_data(r.event),
                            "count": r.count,
                            "epsilon_spent": _num(r.epsilon_spent),
                            "epsilon_total": _num(r.epsilon_total),
                        }
                        for r in self.history(ds.name)
                    ],
                }
            )
        json.dumps(out, allow_nan=False)  # standard JSON, checked
        return out

    # --- lifetime ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection (it is reopened if the ledger is used again)."""
        self._backend.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self.url!r}, schema={self.schema_version})"


def _iso(t: _dt.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _num(x: float) -> float | str:
    return x if math.isfinite(x) else "inf"


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidParameterError(
            "dataset name: use 1-100 letters, digits and _ . : @ + / - (starting with a letter or digit)"
        )
    return name
