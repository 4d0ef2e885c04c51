"""``store-jsonl``: one JSONL file of CompactionRecords per session (seed section 5.2).

Path: ``{directory}/{session_id}.jsonl``, by default ``~/.compactor/compaction_records``.
Append-only, one record per line, owner-only permissions. Records of tier NONE are skipped unless
``record_none`` is set. A torn last line (a crash mid-write) is skipped with a warning when read,
and the next append starts on a fresh line.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Iterator

import attrs

from progressive_compactor.converters import record_from_dict, record_to_json
from progressive_compactor.hookspecs import hookimpl
from progressive_compactor.models import CompactionRecord, CompactionTier
from progressive_compactor.plugin_manager import PluginContext

from .offload_files import private_dir, safe_name

log = logging.getLogger("progressive_compactor")


def append_line(path: Path, line: str) -> None:
    """Append one line, owner-only, starting a fresh line if the file ends in a torn one."""
    private_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        size = os.fstat(fd).st_size
        prefix = b""
        if size and os.pread(fd, 1, size - 1) != b"\n":
            prefix = b"\n"
        os.write(fd, prefix + line.encode("utf-8") + b"\n")
    finally:
        os.close(fd)


def read_records(path: str | os.PathLike[str]) -> Iterator[CompactionRecord]:
    """Every record in a JSONL file; lines that do not parse are skipped with a warning."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    last = len(lines) - 1
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield record_from_dict(json.loads(line))
        except (ValueError, TypeError, KeyError, Exception) as exc:  # noqa: B014 - cattrs errors vary
            what = "torn last line (interrupted write)" if number - 1 == last else "unreadable line"
            log.warning("%s:%d: skipped %s: %s", path, number, what, type(exc).__name__)


class JsonlStore:
    @attrs.frozen
    class Config:
        directory: str = "~/.compactor/compaction_records"
        record_none: bool = False

    def __init__(self, config: Config | None = None, context: PluginContext | None = None):
        self.config = config or self.Config()
        self.context = context or PluginContext()
        directory = self.config.directory.replace("{work_dir}", self.context.work_dir)
        self.directory = Path(directory).expanduser().absolute()

    def path_for(self, session_id: str) -> Path:
        return self.directory / f"{safe_name(session_id)}.jsonl"

    @hookimpl
    def persist_record(self, record: CompactionRecord) -> None:
        if record.tier is CompactionTier.NONE and not self.config.record_none:
            return
        line = record_to_json(record)
        if self.context.secrets is not None:
            line = self.context.secrets.redact(line)
        append_line(self.path_for(record.session_id), line)

    def records(self, session_id: str) -> list[CompactionRecord]:
        path = self.path_for(session_id)
        return list(read_records(path)) if path.exists() else []

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        self.path_for(session_id).unlink(missing_ok=True)
