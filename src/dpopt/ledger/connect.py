"""Open the ledger's database by URL: the one place that knows every backend.

Kept apart from :mod:`dpopt.ledger.backend` (the interface every backend implements), so that the
backends import the interface and this module imports the backends, with no cycle.
"""

from __future__ import annotations

from dpopt.exceptions import InvalidParameterError
from dpopt.ledger.backend import Backend

__all__ = ["open_backend"]


def open_backend(url: str, *, timeout: float = 30.0, create: bool = False) -> Backend:
    """The backend for ``url``: ``sqlite:///relative.db``, ``sqlite:////absolute.db`` (a plain file
    path also means SQLite) or ``postgresql://user@host:port/dbname``."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidParameterError(
            "ledger: expected a URL such as 'sqlite:///ledger.db' or 'postgresql://...'"
        )
    if not (timeout > 0):
        raise InvalidParameterError("timeout: must be positive (seconds)")
    scheme = url.split(":", 1)[0].lower() if "://" in url else ""
    if scheme in ("postgresql", "postgres"):
        from dpopt.ledger.postgres import PostgresBackend

        return PostgresBackend(url, timeout=timeout, create=create)
    if scheme in ("sqlite", ""):
        from dpopt.ledger.sqlite import SqliteBackend

        return SqliteBackend(url, timeout=timeout, create=create)
    raise InvalidParameterError(
        f"ledger: unsupported URL scheme {scheme!r}; use 'sqlite:///path/ledger.db' or 'postgresql://...'"
    )
