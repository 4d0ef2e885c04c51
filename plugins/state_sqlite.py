"""``state-sqlite``: session state in one database file (``path``, default ``{data_dir}/compactor.sqlite3``) that every process on the host shares: WAL mode, a write waits up to ``timeout`` seconds for another process's.

The summary, anchors, covered boundary and offload entries of each session, so that any worker
can serve its next turn. A save is compare-and-set on the state's version in one atomic
statement: two workers that compacted the same turn cannot both win (the loser starts its turn
over from the stored state). A turn that changes nothing reads the state once; a state this
process already parsed is not parsed again. Secrets are masked before anything is written.
"""

from __future__ import annotations

from progressive_compactor.plugin import DatabaseState, SqliteDatabase, SqliteSettings


class SqliteState(DatabaseState):
    name = "state-sqlite"
    backend = SqliteDatabase
    Config = SqliteSettings
