"""What the ledger needs from a database: connections, transactions and a row lock.

:class:`Backend` keeps one connection per process (re-opened after a ``fork`` and after a lost
connection, never shared across processes) and serialises the threads of a process on it.  SQL is
written with ``?`` placeholders; a backend translates them.  Driver errors are translated to
:mod:`dpopt.ledger.errors` inside :meth:`Backend.transaction`, which rolls back on any error, so a
failed call leaves nothing half-written.
"""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dpopt.ledger.errors import LedgerError

__all__ = ["Backend", "Transaction", "redact_url"]

#: connections inherited through ``fork``: never used, closed or finalized by the child
_INHERITED: list[Any] = []


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (safe to print)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


class Transaction:
    """An open transaction: :meth:`query` returns rows, :meth:`run` executes a statement."""

    def __init__(self, cursor: Any, placeholder: str) -> None:
        self._cursor = cursor
        self._placeholder = placeholder

    def _sql(self, sql: str) -> str:
        return sql if self._placeholder == "?" else sql.replace("?", self._placeholder)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a ``SELECT``."""
        self._cursor.execute(self._sql(sql), tuple(params))
        return [tuple(r) for r in self._cursor.fetchall()]

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute a statement; return the number of rows it changed."""
        self._cursor.execute(self._sql(sql), tuple(params))
        return int(self._cursor.rowcount)


class Backend(ABC):
    """One ledger database (subclasses: SQLite, PostgreSQL)."""

    #: short name used in messages ("SQLite", "PostgreSQL")
    name = ""
    placeholder = "?"

    def __init__(self, url: str, *, timeout: float, create: bool) -> None:
        self.url = url
        self.display_url = redact_url(url)
        self.timeout = float(timeout)
        self.create = create
        self._conn: Any = None
        self._pid = os.getpid()
        self._lock = threading.RLock()

    # --- to implement -----------------------------------------------------------------------------
    @abstractmethod
    def _connect(self) -> Any:
        """A new driver connection (in autocommit mode: transactions are explicit)."""

    @abstractmethod
    def _begin(self, conn: Any, write: bool) -> Any:
        """Start a transaction (taking the write lock when ``write``); return a cursor."""

    @abstractmethod
    def _end(self, conn: Any, cursor: Any, ok: bool) -> None:
        """Commit (``ok``) or roll back."""

    @abstractmethod
    def translate(self, exc: BaseException, *, writing: bool) -> LedgerError | None:
        """The ledger error for a driver exception (None: not a driver error)."""

    @abstractmethod
    def table_names(self, tx: Transaction) -> set[str]:
        """Names of the tables in the database (the current schema)."""

    def lock_schema(self, tx: Transaction) -> None:
        """Serialise creating or migrating the tables (a no-op where the write transaction already
        locks the whole database)."""
        return None

    @abstractmethod
    def lock_dataset(self, tx: Transaction, name: str) -> tuple[Any, ...] | None:
        """The dataset's row, locked until the end of the (write) transaction; None if absent."""

    # --- shared -----------------------------------------------------------------------------------
    def _connection(self) -> Any:
        if self._pid != os.getpid():  # forked: the parent's connection is not ours to use or close
            self._connection_reset_after_fork()  # (kept referenced: finalizing it would end the parent's session)
        if self._conn is None:
            try:
                self._conn = self._connect()
            except LedgerError:
                raise
            except Exception as exc:
                err = self.translate(exc, writing=False)
                if err is None:
                    raise
                raise err from None
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # already broken
                pass

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[Transaction]:
        """A transaction; ``write`` takes the database's write lock at the start (SQLite ``BEGIN
        IMMEDIATE``; PostgreSQL locks rows with :meth:`lock_dataset`).  Rolled back on any error."""
        with self._lock:
            conn = self._connection()
            try:
                cursor = self._begin(conn, write)
            except Exception as exc:
                self._raise_translated(exc, write)
                raise
            try:
                yield Transaction(cursor, self.placeholder)
            except BaseException as exc:
                try:
                    self._end(conn, cursor, ok=False)
                except Exception:
                    self._drop()
                self._raise_translated(exc, write)
                raise
            try:
                self._end(conn, cursor, ok=True)
            except Exception as exc:
                self._raise_translated(exc, write, committing=True)
                raise

    def _raise_translated(self, exc: BaseException, write: bool, committing: bool = False) -> None:
        err = self.translate(exc, writing=write)
        if err is None:
            return
        if self._broken():
            self._drop()
        if committing:
            err = type(err)(
                f"{err} (while committing: if the server committed before the failure the release is "
                "recorded; check 'dpopt ledger history'; no noise was drawn)"
            )
        raise err from None

    def _broken(self) -> bool:
        return False

    def close(self) -> None:
        """Close this process's connection (reopened on next use)."""
        if self._pid != os.getpid():
            self._connection_reset_after_fork()
            return
        with self._lock:
            self._drop()

    def _connection_reset_after_fork(self) -> None:
        if self._conn is not None:
            _INHERITED.append(self._conn)
        self._conn, self._pid = None, os.getpid()
        self._lock = threading.RLock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_conn"] = None
        state["_lock"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()
        self._pid = os.getpid()
