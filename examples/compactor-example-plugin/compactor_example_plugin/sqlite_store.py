"""``example-sqlite-store``: CompactionRecords in one SQLite file.

It shows a stateful plugin with its own config block and the core's context: ``Config`` is the
attrs class the core structures the YAML block into (unknown keys rejected), ``context`` gives the
work directory and the secrets to keep out of what it writes. ``persist_record`` and
``on_delete_session`` are broadcast hooks: if this store fails, the compactor logs a warning and
the other stores still run.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import attrs

from progressive_compactor import CompactionRecord, CompactionTier, hookimpl
from progressive_compactor.converters import record_from_dict, record_to_json
from progressive_compactor.plugin_manager import PluginContext

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    timestamp TEXT NOT NULL,
    tier TEXT NOT NULL,
    record TEXT NOT NULL
)
"""


class SqliteStore:
    @attrs.frozen
    class Config:
        path: str = "{work_dir}/.compactor/records.sqlite3"
        record_none: bool = False
        """Also keep records of turns that needed no compaction."""

    def __init__(self, config: Config | None = None, context: PluginContext | None = None):
        self.config = config or self.Config()
        self.context = context or PluginContext()
        self.path = Path(self.config.path.replace("{work_dir}", self.context.work_dir)).expanduser()
        self._connection: Any = None
        self._lock = threading.Lock()  # the async API may call from a worker thread

    def _db(self) -> Any:
        import sqlite3  # opened on first use: building a compactor stays cheap

        if self._connection is None:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._connection = sqlite3.connect(self.path, check_same_thread=False)
            self._connection.execute(SCHEMA)
        return self._connection

    @hookimpl
    def persist_record(self, record: CompactionRecord) -> None:
        if record.tier is CompactionTier.NONE and not self.config.record_none:
            return
        data = record_to_json(record)
        if self.context.secrets is not None:
            data = self.context.secrets.redact(data)
        with self._lock, self._db() as db:
            db.execute(
                "INSERT INTO records (id, session_id, timestamp, tier, record) VALUES (?, ?, ?, ?, ?)",
                (record.id, record.session_id, record.timestamp, record.tier.name.lower(), data),
            )

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        with self._lock, self._db() as db:
            db.execute("DELETE FROM records WHERE session_id = ?", (session_id,))

    def records(self, session_id: str) -> list[CompactionRecord]:
        """The session's records, oldest first."""
        import json

        with self._lock:
            rows = self._db().execute(
                "SELECT record FROM records WHERE session_id = ? ORDER BY timestamp, rowid", (session_id,)
            ).fetchall()
        return [record_from_dict(json.loads(row[0])) for row in rows]

    def close(self) -> None:
        """Called by ``ProgressiveCompactor.close()``."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
