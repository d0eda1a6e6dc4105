"""SQLite ledger backend (stdlib :mod:`sqlite3`): one file, the embedded default.

A release takes the database's write lock with ``BEGIN IMMEDIATE`` before reading the history,
so concurrent processes serialise their check-and-record; a waiting writer gives up after the
timeout with :class:`~dpopt.ledger.errors.LedgerConnectionError`.  The default rollback journal
with ``synchronous=FULL`` makes a committed release durable before any noise is drawn.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any
from urllib.parse import parse_qs, quote

from dpopt.exceptions import Hint, InvalidParameterError
from dpopt.ledger.backend import Backend, Transaction
from dpopt.ledger.errors import (
    CREATE_HINT,
    LedgerConnectionError,
    LedgerError,
    LedgerReadOnlyError,
    LedgerSchemaError,
)
from dpopt.ledger.schema import DATASET_SELECT

__all__ = ["SqliteBackend", "sqlite_path"]


def sqlite_path(url: str) -> tuple[str, bool]:
    """(file path, read-only?) of an SQLite URL.

    ``sqlite:///ledger.db`` is relative to the working directory, ``sqlite:////srv/ledger.db``
    absolute (SQLAlchemy's convention); a plain path is accepted too.  ``?mode=ro`` opens read-only.
    """
    path, _, query = url.partition("?")
    if path.lower().startswith("sqlite://"):
        path = path[len("sqlite://") :]
        if not path.startswith("/"):
            raise InvalidParameterError(
                "ledger: an SQLite URL is 'sqlite:///relative/path.db' or 'sqlite:////absolute/path.db'"
            )
        path = path[1:]
    if not path or path == ":memory:":
        raise InvalidParameterError(
            "ledger: the SQLite URL must name a file (e.g. 'sqlite:///ledger.db'); an in-memory ledger "
            "would not outlive the process (use make_accountant for that)"
        )
    opts = parse_qs(query)
    unknown = set(opts) - {"mode"}
    if unknown:
        raise InvalidParameterError(f"ledger: unknown SQLite URL option(s) {sorted(unknown)}; only mode=ro")
    mode = opts.get("mode", ["rw"])[-1]
    if mode not in ("ro", "rw"):
        raise InvalidParameterError("ledger: the SQLite URL option mode must be 'ro' or 'rw'")
    return path, mode == "ro"


class SqliteBackend(Backend):
    """A ledger in one SQLite file."""

    name = "SQLite"

    def __init__(self, url: str, *, timeout: float, create: bool) -> None:
        super().__init__(url, timeout=timeout, create=create)
        self.path, self.readonly = sqlite_path(url)
        self.display_url = self.path

    def _connect(self) -> Any:
        exists = os.path.exists(self.path)
        if not exists and not self.create:
            raise LedgerError(
                f"no ledger at {self.path}",
                hint=Hint(f"create one with 'dpopt ledger init --ledger {self.path}'", more=CREATE_HINT),
            )
        if os.path.isdir(self.path):
            raise LedgerError(f"the ledger {self.path} is a directory; give a file name such as ledger.db")
        mode = "ro" if self.readonly else ("rwc" if self.create else "rw")
        conn = sqlite3.connect(
            f"file:{quote(os.path.abspath(self.path))}?mode={mode}",
            uri=True,
            timeout=self.timeout,
            isolation_level=None,  # transactions are explicit (BEGIN IMMEDIATE for a release)
            check_same_thread=False,  # the backend serialises threads on it
        )
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _begin(self, conn: Any, write: bool) -> Any:
        if write and self.readonly:
            raise LedgerReadOnlyError(
                f"the ledger {self.path} was opened read-only (mode=ro): nothing was recorded"
            )
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        return conn.cursor()

    def _end(self, conn: Any, cursor: Any, ok: bool) -> None:
        if conn.in_transaction:
            conn.execute("COMMIT" if ok else "ROLLBACK")

    def translate(self, exc: BaseException, *, writing: bool) -> LedgerError | None:
        if not isinstance(exc, sqlite3.Error):
            return None
        code = getattr(exc, "sqlite_errorcode", None)  # SQLite's result code (its low byte: the primary one)
        primary = code & 0xFF if isinstance(code, int) else None
        where = self.path
        if primary == sqlite3.SQLITE_READONLY:
            return LedgerReadOnlyError(
                f"the ledger {where} is read-only (file or directory permissions, or mode=ro): "
                "nothing was recorded"
            )
        if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return LedgerConnectionError(
                f"the ledger {where} stayed locked by another process for more than {self.timeout:g} s; "
                "nothing was recorded: try again"
            )
        if primary in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
            return LedgerSchemaError(f"{where} is not a dpopt ledger (not an SQLite database, or corrupt)")
        if primary == sqlite3.SQLITE_CANTOPEN:
            return LedgerConnectionError(
                f"cannot open the ledger {where} (does its directory exist and is it writable?)"
            )
        if isinstance(exc, sqlite3.IntegrityError):
            return LedgerError(
                f"the ledger {where} refused an inconsistent write (another writer at the same time?); "
                "nothing was recorded: try again"
            )
        return LedgerError(f"SQLite error on the ledger {where}: {exc}")

    def table_names(self, tx: Transaction) -> set[str]:
        return {r[0] for r in tx.query("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def lock_dataset(self, tx: Transaction, name: str) -> tuple[Any, ...] | None:
        # BEGIN IMMEDIATE already holds the database's write lock
        rows = tx.query(DATASET_SELECT + " WHERE name = ?", (name,))
        return rows[0] if rows else None
