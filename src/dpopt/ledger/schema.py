"""The ledger's tables, their version and the migrations between versions.

The same SQL serves SQLite and PostgreSQL (portable types only; times are ISO-8601 UTC text).
``dpopt_ledger_meta`` holds ``format = dpopt-ledger`` and ``schema_version``; a database whose
version is newer than :data:`SCHEMA_VERSION` is refused (it was written by a newer dpopt), an older
one is migrated in one transaction when opened for writing.

Tables (version 1)
------------------
``dpopt_datasets``
    One row per dataset: ``name`` (key), the total budget ``epsilon``/``delta``, ``neighbouring``,
    ``accountant`` (kind), ``description``, ``created_at``, ``created_by``, and ``n_releases``
    (the next release's ``seq`` minus one; bumped in the release's transaction).
``dpopt_releases``
    One row per release, append-only: ``dataset``, ``seq`` (1, 2, ... per dataset; the key with
    ``dataset``, so two writers can never record the same slot), ``recorded_at``, ``actor`` (who:
    user@host and process), ``label`` (what), ``note``, ``event`` (the privacy event as JSON,
    :mod:`dpopt.ledger.serialize`), ``count`` (copies of the event), ``epsilon_spent`` (what this
    release added, at the dataset's δ) and ``epsilon_total`` (the dataset's total after it).
"""

from __future__ import annotations

__all__ = ["DATASET_SELECT", "FORMAT", "MIGRATIONS", "SCHEMA_VERSION"]

#: Value of the ``format`` key in ``dpopt_ledger_meta``.
FORMAT = "dpopt-ledger"

#: version -> statements that bring a database from ``version - 1`` to ``version``.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE dpopt_ledger_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE dpopt_datasets (
            name TEXT PRIMARY KEY,
            epsilon DOUBLE PRECISION NOT NULL,
            delta DOUBLE PRECISION NOT NULL,
            neighbouring TEXT NOT NULL,
            accountant TEXT NOT NULL,
            description TEXT NOT NULL,
            created_at TEXT NOT NULL,
            created_by TEXT NOT NULL,
            n_releases BIGINT NOT NULL
        )""",
        """CREATE TABLE dpopt_releases (
            dataset TEXT NOT NULL REFERENCES dpopt_datasets (name),
            seq BIGINT NOT NULL,
            recorded_at TEXT NOT NULL,
            actor TEXT NOT NULL,
            label TEXT NOT NULL,
            note TEXT NOT NULL,
            event TEXT NOT NULL,
            count BIGINT NOT NULL,
            epsilon_spent DOUBLE PRECISION NOT NULL,
            epsilon_total DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (dataset, seq)
        )""",
    ),
}

#: The schema version this dpopt writes (the largest key of :data:`MIGRATIONS`).
SCHEMA_VERSION = max(MIGRATIONS)

#: The dataset row, in the order :class:`~dpopt.ledger.records.Dataset` reads it (backends append
#: their own ``WHERE`` and locking clauses).
DATASET_SELECT = (
    "SELECT name, epsilon, delta, neighbouring, accountant, description, created_at, created_by, n_releases "
    "FROM dpopt_datasets"
)
