"""``store-jsonl``: one JSONL file of CompactionRecords per session.

Path: ``{directory}/{session}.jsonl``, by default ``{data_dir}/records``. Append-only, one record
per line, owner-only permissions, secrets masked. The records of calls that changed nothing and
reported no error (tier None, a Warn with no result worth offloading) are skipped unless
``record_none`` is set. A torn last line (a crash mid-write) is skipped with a warning when read,
and the next append starts on a fresh line.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from progressive_compactor.plugin import (
    CompactionRecord,
    PluginContext,
    SessionInfo,
    append_line,
    changed_view,
    hookimpl,
    read_records_file,
    record_to_json,
    remove,
    safe_name,
)


class JsonlStore:
    @attrs.frozen
    class Config:
        directory: str = "{data_dir}/records"
        record_none: bool = False
        """Also store the records of calls that changed nothing (for cost over every call)."""

    def __init__(self, config: Config | None = None, context: PluginContext | None = None):
        self.config = config or self.Config()
        self.context = context or PluginContext()
        self.directory = Path(self.context.path(self.config.directory))

    def path_for(self, session_id: str) -> Path:
        return self.directory / f"{safe_name(session_id)}.jsonl"

    @hookimpl
    def persist_record(self, record: CompactionRecord) -> None:
        if not (self.config.record_none or changed_view(record)):
            return
        line = self.context.secrets.redact(record_to_json(record))
        append_line(self.path_for(record.session_id), line, self.directory)

    @hookimpl(trylast=True)
    def read_records(self, session_id: str) -> list[CompactionRecord] | None:
        path = self.path_for(session_id)
        return list(read_records_file(path)) if path.is_file() and not path.is_symlink() else None

    @hookimpl
    def list_sessions(self) -> list[SessionInfo]:
        if not self.directory.is_dir():
            return []
        found = []
        for path in sorted(self.directory.glob("*.jsonl")):
            if path.is_symlink():
                continue
            first = next(read_records_file(path), None)
            session_id = first.session_id if first is not None else path.stem
            found.append(SessionInfo(session_id, os.lstat(path).st_mtime, "store-jsonl", str(path)))
        return found

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        remove(self.path_for(session_id), self.directory)
