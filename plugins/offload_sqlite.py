"""``offload-sqlite``: large tool results kept in one database file (``path``, default ``{data_dir}/compactor.sqlite3``) that every process on the host shares: WAL mode, a write waits up to ``timeout`` seconds for another process's.

The handle is ``{session}/{call}`` and the placeholder the same as ``offload-files`` writes, so
a view does not depend on where results are kept. The first writer of a handle keeps it: a tool
call id that comes back with other text gets ``{call}.{sha12}``, and a handle is never rewritten,
so every worker reads back the same bytes. Secrets are masked before anything is written.
"""

from __future__ import annotations

import attrs

from progressive_compactor.plugin import DatabaseOffloader, SqliteDatabase, SqliteSettings, setting_check


class SqliteOffloader(DatabaseOffloader):
    name = "offload-sqlite"
    backend = SqliteDatabase

    @attrs.frozen
    class Config(SqliteSettings):
        preview_lines: int = attrs.field(
            default=10, validator=setting_check(lambda v: v >= 0, "preview_lines must be 0 or more, got {value}")
        )
        preview_chars: int = attrs.field(
            default=1500, validator=setting_check(lambda v: v >= 0, "preview_chars must be 0 or more, got {value}")
        )
