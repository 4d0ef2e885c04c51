"""``store-sqlite``: CompactionRecords in one database file (``path``, default ``{data_dir}/compactor.sqlite3``) that every process on the host shares: WAL mode, a write waits up to ``timeout`` seconds for another process's.

One entry per record, keyed by its id: a record is stored once however often its write is
retried, and read back oldest first by ``compactor records``, ``ProgressiveCompactor.records()``
and the other readers of ``read_records``. Records of tier None are skipped unless
``record_none`` is set. Secrets are masked before anything is written.
"""

from __future__ import annotations

import attrs

from progressive_compactor.plugin import DatabaseRecords, SqliteDatabase, SqliteSettings


class SqliteStore(DatabaseRecords):
    name = "store-sqlite"
    backend = SqliteDatabase

    @attrs.frozen
    class Config(SqliteSettings):
        record_none: bool = False
        """Also store the records of turns that compacted nothing (for cost over every turn)."""
