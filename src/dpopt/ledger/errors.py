"""Errors of the persistent privacy ledger (all derive from :class:`dpopt.DPOptError`)."""

from __future__ import annotations

from dpopt.exceptions import DPOptError, Hint, Setting

__all__ = [
    "LedgerConnectionError",
    "LedgerError",
    "LedgerReadOnlyError",
    "LedgerSchemaError",
    "UnknownDatasetError",
]


#: The Python API's way to create a missing ledger (an aside after the command line's).
CREATE_HINT = Hint("(or {0})", Setting("create", True, owner="Ledger"))


class LedgerError(DPOptError):
    """The ledger database cannot be used as asked; nothing was recorded and no noise was drawn."""


class UnknownDatasetError(LedgerError):
    """No dataset of that name is registered in the ledger."""


class LedgerSchemaError(LedgerError):
    """The database is not a dpopt ledger, is corrupt, or was written by a newer dpopt."""


class LedgerReadOnlyError(LedgerError):
    """The ledger can be read but not written (file permissions, ``?mode=ro`` or database rights)."""


class LedgerConnectionError(LedgerError):
    """The ledger database could not be reached, was busy past the timeout, or the connection was lost."""
