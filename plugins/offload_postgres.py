"""``offload-postgres``: large tool results kept in a PostgreSQL server that every worker reaches (``dsn``, else the environment variable ``dsn_env`` names, default ``COMPACTOR_POSTGRES_DSN``), through a connection pool; tables created on first use and versioned. Needs the ``[postgres]`` extra.

The handle is ``{session}/{call}`` and the placeholder the same as ``offload-files`` writes, so
a view does not depend on where results are kept. The first writer of a handle keeps it: a tool
call id that comes back with other text gets ``{call}.{sha12}``, and a handle is never rewritten,
so every worker reads back the same bytes. Secrets are masked before anything is written.
"""

from __future__ import annotations

import attrs

from progressive_compactor.plugin import DatabaseOffloader, PostgresDatabase, PostgresSettings, setting_check


class PostgresOffloader(DatabaseOffloader):
    name = "offload-postgres"
    backend = PostgresDatabase

    @attrs.frozen
    class Config(PostgresSettings):
        preview_lines: int = attrs.field(
            default=10, validator=setting_check(lambda v: v >= 0, "preview_lines must be 0 or more, got {value}")
        )
        preview_chars: int = attrs.field(
            default=1500, validator=setting_check(lambda v: v >= 0, "preview_chars must be 0 or more, got {value}")
        )
