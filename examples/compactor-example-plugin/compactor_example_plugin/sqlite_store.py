"""``example-sqlite-store``: CompactionRecords in one SQLite file.

It shows a stateful plugin with its own config block and the core's context: ``Config`` is the
attrs class the core structures the YAML block into (unknown keys rejected); ``context`` gives the
data folder (``context.path("{data_dir}/...")``) and the secrets to keep out of what it writes.
It implements every hook of a record store:

- ``persist_record`` and ``on_delete_session`` (broadcast: if this store fails, the compactor
  logs a warning and the other stores still run);
- ``read_records`` (first result), so that ``compactor records SESSION`` reads the records back;
- ``list_sessions`` (broadcast), so that ``compactor gc --older-than AGE`` finds old sessions.

Like every plugin, it imports from ``progressive_compactor.plugin`` only: the declared plugin API.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs

from progressive_compactor.plugin import (
    CompactionRecord,
    PluginContext,
    SessionInfo,
    changed_view,
    hookimpl,
    record_from_dict,
    record_to_json,
)

PLUGIN = "example-sqlite-store"
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
        path: str = "{data_dir}/records.sqlite3"
        record_none: bool = False
        """Also keep the records of calls that changed nothing (tier None, a Warn with nothing to
        offload)."""

    def __init__(self, config: Config | None = None, context: PluginContext | None = None):
        self.config = config or self.Config()
        self.context = context or PluginContext()
        self.path = Path(self.context.path(self.config.path))
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
        if not (self.config.record_none or changed_view(record)):
            return
        data = self.context.secrets.redact(record_to_json(record))
        with self._lock, self._db() as db:
            db.execute(
                "INSERT INTO records (id, session_id, timestamp, tier, record) VALUES (?, ?, ?, ?, ?)",
                (record.id, record.session_id, record.timestamp, record.tier.name.lower(), data),
            )

    @hookimpl
    def read_records(self, session_id: str) -> list[CompactionRecord] | None:
        """The session's records; None when this store holds none, so that another store may answer."""
        return self.records(session_id) or None

    @hookimpl
    def list_sessions(self) -> list[SessionInfo]:
        if not self.path.is_file():
            return []
        with self._lock:
            rows = (
                self._db()
                .execute("SELECT session_id, MAX(timestamp) FROM records GROUP BY session_id ORDER BY session_id")
                .fetchall()
            )
        return [
            SessionInfo(sid, datetime.fromisoformat(newest).timestamp(), PLUGIN, str(self.path)) for sid, newest in rows
        ]

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        with self._lock, self._db() as db:
            db.execute("DELETE FROM records WHERE session_id = ?", (session_id,))

    def records(self, session_id: str) -> list[CompactionRecord]:
        """The session's records, oldest first (records of any schema version are read)."""
        with self._lock:
            rows = (
                self._db()
                .execute("SELECT record FROM records WHERE session_id = ? ORDER BY timestamp, rowid", (session_id,))
                .fetchall()
            )
        return [record_from_dict(json.loads(row[0])) for row in rows]

    def close(self) -> None:
        """Called by ``ProgressiveCompactor.close()``."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
