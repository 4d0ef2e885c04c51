"""``store-postgres``: CompactionRecords in a PostgreSQL server that every worker reaches (``dsn``, else the environment variable ``dsn_env`` names, default ``COMPACTOR_POSTGRES_DSN``), through a connection pool; tables created on first use and versioned. Needs the ``[postgres]`` extra.

One entry per record, keyed by its id: a record is stored once however often its write is
retried, and read back oldest first by ``compactor records``, ``ProgressiveCompactor.records()``
and the other readers of ``read_records``. Records of tier None are skipped unless
``record_none`` is set. Secrets are masked before anything is written.
"""

from __future__ import annotations

import attrs

from progressive_compactor.plugin import DatabaseRecords, PostgresDatabase, PostgresSettings


class PostgresStore(DatabaseRecords):
    name = "store-postgres"
    backend = PostgresDatabase

    @attrs.frozen
    class Config(PostgresSettings):
        record_none: bool = False
        """Also store the records of turns that compacted nothing (for cost over every turn)."""
