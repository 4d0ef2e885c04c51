"""``state-files``: session state as one JSON file per session, shared by worker processes.

The summary, anchors, covered boundary and offload entries of a session live here, so that its
turns can be served by different processes on one host (or on a shared folder). A save is a
compare-and-set under an exclusive lock on the session's lock file: it succeeds only over the
version it replaces, so two workers that compacted the same turn cannot both win. Files are
owner-only and replaced atomically. A file that cannot be read (truncated, not JSON, wrong types)
is moved aside as ``*.corrupt-<time>`` with a warning and the session starts over from its
history. A file that has not changed since it was last read is not parsed again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Iterator

import attrs

from progressive_compactor.plugin import (
    PluginContext,
    SessionInfo,
    SessionState,
    StorageError,
    hookimpl,
    private_dir,
    read_private,
    remove,
    safe_name,
    state_from_json,
    state_to_json,
    write_private,
)

log = logging.getLogger("progressive_compactor")

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; saves are still atomic, not compare-and-set
    fcntl = None  # type: ignore[assignment]


class FileState:
    @attrs.frozen
    class Config:
        directory: str = "{data_dir}/state"

    def __init__(self, config: Config | None = None, context: PluginContext | None = None):
        self.config = config or self.Config()
        self.context = context or PluginContext()
        self.directory = Path(self.context.path(self.config.directory))
        self._read: dict[str, tuple[tuple[int, int, int], SessionState]] = {}
        """session -> (the file's inode, size and mtime when read, the state it held)."""

    def path_for(self, session_id: str) -> Path:
        return self.directory / f"{safe_name(session_id)}.json"

    def _stat_key(self, path: Path) -> tuple[int, int, int] | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _load(self, session_id: str) -> SessionState | None:
        path = self.path_for(session_id)
        key = self._stat_key(path)
        if key is None:
            self._read.pop(session_id, None)
            return None
        cached = self._read.get(session_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        data = read_private(path, self.directory)
        if data is None:
            return None
        try:
            state = state_from_json(data.decode("utf-8", "surrogatepass"))
        except Exception as exc:  # noqa: BLE001 - any unreadable file: set aside, start over
            aside = path.with_name(f"{path.name}.corrupt-{time.time_ns()}")
            log.warning(
                "session state %s is unreadable (%s); moved to %s, starting over", path, type(exc).__name__, aside
            )
            with contextlib.suppress(OSError):
                os.replace(path, aside)
            self._read.pop(session_id, None)
            return None
        self._read[session_id] = (key, state)
        return state

    @contextlib.contextmanager
    def _locked(self, session_id: str) -> Iterator[None]:
        if fcntl is None:
            yield
            return
        private_dir(self.directory, self.directory)
        lock = self.directory / f"{safe_name(session_id)}.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @hookimpl(trylast=True)
    def load_state(self, session_id: str) -> SessionState | None:
        return self._load(session_id)

    @hookimpl(trylast=True)
    def save_state(self, session_id: str, state: SessionState) -> bool:
        with self._locked(session_id):
            current = self._load(session_id)
            if (current.version if current is not None else 0) != state.version - 1:
                return False
            data = json.loads(state_to_json(state))
            data["session_id"] = session_id
            path = self.path_for(session_id)
            text = self.context.secrets.redact(json.dumps(data, ensure_ascii=False))
            write_private(path, text.encode("utf-8", "surrogatepass"), self.directory)
            key = self._stat_key(path)
            if key is not None:
                self._read[session_id] = (key, state)
        return True

    @hookimpl
    def list_sessions(self) -> list[SessionInfo]:
        if not self.directory.is_dir():
            return []
        found = []
        for path in sorted(self.directory.glob("*.json")):
            if path.is_symlink():
                continue
            try:
                session_id = json.loads(read_private(path, self.directory) or b"{}").get("session_id") or path.stem
            except (ValueError, AttributeError, StorageError):
                session_id = path.stem
            found.append(SessionInfo(session_id, os.lstat(path).st_mtime, "state-files", str(path)))
        return found

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        self._read.pop(session_id, None)
        remove(self.path_for(session_id), self.directory)
        remove(self.directory / f"{safe_name(session_id)}.lock", self.directory)
