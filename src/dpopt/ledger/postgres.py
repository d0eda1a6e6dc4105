"""PostgreSQL ledger backend (psycopg 3; ``pip install 'dpopt[postgres]'``): a team's shared ledger.

A release locks its dataset's row with ``SELECT ... FOR UPDATE`` before reading the history, so
concurrent writers on one dataset serialise (other datasets are not blocked).  Every wait is
bounded: ``connect_timeout``, ``lock_timeout`` and ``statement_timeout`` are set from the ledger's
timeout.  A lost connection rolls the transaction back on the server and is reported as
:class:`~dpopt.ledger.errors.LedgerConnectionError`; the next call reconnects.
"""

from __future__ import annotations

import math
from typing import Any

from dpopt.ledger.backend import Backend, Transaction
from dpopt.ledger.errors import (
    LedgerConnectionError,
    LedgerError,
    LedgerReadOnlyError,
    LedgerSchemaError,
)
from dpopt.ledger.schema import DATASET_SELECT

__all__ = ["PostgresBackend"]

_SCHEMA_LOCK = 0x64706F70  # advisory lock key ("dpop") held while creating or migrating the tables


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise LedgerError("a PostgreSQL ledger needs psycopg 3: pip install 'dpopt[postgres]'") from None
    return psycopg


class PostgresBackend(Backend):
    """A ledger in a PostgreSQL database (the tables live in the connection's current schema)."""

    name = "PostgreSQL"
    placeholder = "%s"

    def _connect(self) -> Any:
        psycopg = _psycopg()
        conn = psycopg.connect(self.url, autocommit=False, connect_timeout=max(1, math.ceil(self.timeout)))
        ms = max(1, int(self.timeout * 1000))
        conn.execute(f"SET lock_timeout = {ms}")
        conn.execute(f"SET statement_timeout = {ms}")
        conn.execute(f"SET idle_in_transaction_session_timeout = {ms}")
        conn.commit()
        return conn

    def _begin(self, conn: Any, write: bool) -> Any:
        return conn.cursor()  # psycopg opens the transaction with the first statement

    def _end(self, conn: Any, cursor: Any, ok: bool) -> None:
        if ok:
            conn.commit()
        else:
            conn.rollback()

    def _broken(self) -> bool:
        conn = self._conn
        return conn is not None and bool(conn.closed or conn.broken)

    def translate(self, exc: BaseException, *, writing: bool) -> LedgerError | None:
        psycopg = _psycopg()
        if not isinstance(exc, psycopg.Error):
            return None
        errors = psycopg.errors
        where = self.display_url
        if isinstance(exc, errors.LockNotAvailable | errors.QueryCanceled):
            return LedgerConnectionError(
                f"the ledger {where} stayed locked (or a statement ran) for more than {self.timeout:g} s; "
                "nothing was recorded: try again"
            )
        if isinstance(exc, psycopg.OperationalError):
            return LedgerConnectionError(
                f"the connection to the ledger {where} failed or was lost ({type(exc).__name__}); "
                "nothing was recorded by this call and no noise was drawn"
            )
        if isinstance(exc, errors.ReadOnlySqlTransaction | errors.InsufficientPrivilege):
            return LedgerReadOnlyError(
                f"the ledger {where} cannot be written with these credentials ({type(exc).__name__}): "
                "nothing was recorded"
            )
        if isinstance(exc, errors.UndefinedTable | errors.UndefinedColumn):
            return LedgerSchemaError(f"{where} is not a dpopt ledger (its tables are missing or altered)")
        if isinstance(exc, psycopg.IntegrityError):
            return LedgerError(
                f"the ledger {where} refused an inconsistent write (another writer at the same time?); "
                "nothing was recorded: try again"
            )
        primary = getattr(getattr(exc, "diag", None), "message_primary", None) or type(exc).__name__
        return LedgerError(f"PostgreSQL error on the ledger {where}: {primary}")

    def table_names(self, tx: Transaction) -> set[str]:
        rows = tx.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
        return {r[0] for r in rows}

    def lock_schema(self, tx: Transaction) -> None:
        tx.query("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))

    def lock_dataset(self, tx: Transaction, name: str) -> tuple[Any, ...] | None:
        rows = tx.query(DATASET_SELECT + " WHERE name = ? FOR UPDATE", (name,))
        return rows[0] if rows else None
