"""``state-postgres``: session state in a PostgreSQL server that every worker reaches (``dsn``, else the environment variable ``dsn_env`` names, default ``COMPACTOR_POSTGRES_DSN``), through a connection pool; tables created on first use and versioned. Needs the ``[postgres]`` extra.

The summary, anchors, covered boundary and offload entries of each session, so that any worker
can serve its next turn. A save is compare-and-set on the state's version in one atomic
statement: two workers that compacted the same turn cannot both win (the loser starts its turn
over from the stored state). A turn that changes nothing reads the state once; a state this
process already parsed is not parsed again. Secrets are masked before anything is written.
"""

from __future__ import annotations

from progressive_compactor.plugin import DatabaseState, PostgresDatabase, PostgresSettings


class PostgresState(DatabaseState):
    name = "state-postgres"
    backend = PostgresDatabase
    Config = PostgresSettings
