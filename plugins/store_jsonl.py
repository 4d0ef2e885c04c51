"""``store-jsonl``: one JSONL file of CompactionRecords per session.

Path: ``{directory}/{session}.jsonl``, by default ``{data_dir}/records``. Append-only, one record
per line, owner-only permissions, secrets masked. The records of calls that changed nothing and
reported no error (tier None, a Warn with no result worth offloading) are skipped unless
``record_none`` is set. A torn last line (a crash mid-write) is skipped with a warning when read,
and the next append starts on a fresh line. When the folder is in the data folder, neither it nor
any folder between them is followed if it is a symbolic link; ``list_sessions`` reports only the
files this plugin could have made.
"""

from __future__ import annotations

import stat
from pathlib import Path

import attrs

from progressive_compactor.plugin import (
    CompactionRecord,
    PluginContext,
    SessionInfo,
    StorageError,
    append_line,
    changed_view,
    hookimpl,
    list_folder,
    listed_id,
    lost_its_id,
    made_by_safe_name,
    parse_records,
    read_private,
    record_to_json,
    remove,
    root_for,
    session_name,
)

HEAD_BYTES = 1 << 20
"""How much of a records file is read to find the session it belongs to."""


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
        self.top = root_for(self.directory, self.context.data_dir)
        """Where no link is followed from: the data folder, or the folder above ``directory``."""

    def path_for(self, session_id: str) -> Path:
        return self.directory / f"{session_name(session_id)}.jsonl"

    @hookimpl
    def persist_record(self, record: CompactionRecord) -> None:
        if not (self.config.record_none or changed_view(record)):
            return
        line = self.context.secrets.redact_registered(record_to_json(record))  # the core masked its texts
        append_line(self.path_for(record.session_id), line, self.top)

    @hookimpl(trylast=True)
    def read_records(self, session_id: str) -> list[CompactionRecord] | None:
        path = self.path_for(session_id)
        try:
            data = read_private(path, self.top)
        except StorageError:  # a link or a named pipe is never read as records
            return None
        return None if data is None else list(parse_records(data, path))

    def _session_of(self, stem: str) -> str:
        """The session whose file ``{stem}.jsonl`` is: the id of its first record (looked for in
        the file's first :data:`HEAD_BYTES` only: a session's records run to megabytes), or, when
        there is none (or it names another file), the name, under which it is listed and deleted."""
        path = self.directory / f"{stem}.jsonl"
        try:
            head = read_private(path, self.top, limit=HEAD_BYTES) or b""
        except StorageError:
            head = b""
        if len(head) == HEAD_BYTES:  # cut: its whole lines only
            head = head[: head.rfind(b"\n") + 1]
        first = next(parse_records(head, path), None)
        return listed_id(stem, first.session_id if first is not None else None)

    @hookimpl
    def list_sessions(self) -> list[SessionInfo]:
        found = []
        for name, st in list_folder(self.directory, self.top).items():
            stem = name.removesuffix(".jsonl")
            if name.endswith(".jsonl") and stat.S_ISREG(st.st_mode) and made_by_safe_name(stem):
                found.append(
                    SessionInfo(self._session_of(stem), st.st_mtime, "store-jsonl", str(self.directory / name))
                )
        return found

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        remove(self.path_for(session_id), self.top)
        if lost_its_id(session_id, self._session_of):
            remove(self.directory / f"{session_id}.jsonl", self.top)
