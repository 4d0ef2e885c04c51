"""``offload-files``: large tool results written to files, one per result.

Path: ``{root}/{session}/{call}.txt``, root by default ``{data_dir}/tool_results``; the handle is
``{session}/{call}``. A tool call id that comes back with other text (some providers number calls
per reply: ``call_0`` again and again) gets ``{call}.{hash}``: the first writer keeps the plain
name, files are created exclusively, so two processes never overwrite each other's results. Session and tool-call ids come from outside: an id that is not a plain name
is replaced by ``_`` and a hash of it, so no id can name a path outside the root, and nothing
under the root is followed if it is a symbolic link. Folders are owner-only (0700), files
owner-only (0600) and written atomically; secrets are masked before anything is written. A
session folder whose name is a hash (an id that is not a plain name) holds a ``.session_id`` file
with the id it belongs to, so that ``list_sessions`` reports real ids; a plain id is the folder's
name.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import attrs

from progressive_compactor.plugin import (
    Message,
    OffloadEntry,
    OffloadError,
    PluginContext,
    SessionInfo,
    StorageError,
    create_private,
    hookimpl,
    newest_mtime,
    offload_text,
    read_private,
    remove,
    safe_name,
    setting_check,
    write_private,
)

ID_FILE = ".session_id"
_HANDLE = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})/([A-Za-z0-9_][A-Za-z0-9_.-]{0,140})")
"""``{session}/{call}``: plain names of at most 128 characters, the call's followed by the text's
hash (13 more) when its id was reused with another text."""


class FileOffloader:
    @attrs.frozen
    class Config:
        root: str = "{data_dir}/tool_results"
        preview_lines: int = attrs.field(
            default=10, validator=setting_check(lambda v: v >= 0, "preview_lines must be 0 or more, got {value}")
        )
        preview_chars: int = attrs.field(
            default=1500, validator=setting_check(lambda v: v >= 0, "preview_chars must be 0 or more, got {value}")
        )

    def __init__(self, config: Config | None = None, context: PluginContext | None = None):
        self.config = config or self.Config()
        self.context = context or PluginContext()
        self.root = Path(self.context.path(self.config.root))
        self._marked: set[str] = set()

    def session_dir(self, session_id: str) -> Path:
        return self.root / safe_name(session_id)

    def _store(self, session_id: str, tool_call_id: str, data: bytes, sha: str) -> tuple[Path, str]:
        """Where ``data`` is (or now is) kept: the plain name if it holds this text or is free,
        else the name with the text's hash. Nothing is written twice or over another text."""
        folder = self.session_dir(session_id)
        base = safe_name(tool_call_id)
        for name in (base, f"{base}.{sha[:12]}"):
            path = folder / f"{name}.txt"
            for _ in range(2):  # free, or taken by this very text (another process, an earlier turn)
                existing = read_private(path, self.root)
                if existing == data:
                    return path, f"{folder.name}/{name}"
                if existing is not None:
                    break
                if create_private(path, data, self.root):
                    self._mark(folder, session_id)
                    return path, f"{folder.name}/{name}"
        raise OffloadError(f"cannot keep the result of {tool_call_id!r}: {folder} holds other texts under its names")

    def _mark(self, folder: Path, session_id: str) -> None:
        """Write the session's id beside its results when the folder's name is not the id, once
        (a folder this process marked is remembered until the session is deleted)."""
        if folder.name == session_id or folder.name in self._marked:
            return
        if not os.path.lexists(folder / ID_FILE):
            write_private(folder / ID_FILE, session_id.encode("utf-8", "surrogatepass"), self.root)
        self._marked.add(folder.name)

    @hookimpl(trylast=True)
    def offload(self, message: Message, session_id: str, threshold: int) -> OffloadEntry | None:
        kept = offload_text(message, threshold, self.context.secrets.redact)
        if kept is None:
            return None
        try:
            path, handle = self._store(session_id, kept.tool_call_id, kept.data, kept.sha256)
        except (OSError, StorageError) as exc:
            where = self.session_dir(session_id)
            raise OffloadError(
                f"cannot write in {where}: {getattr(exc, 'strerror', None) or exc}", path=str(where)
            ) from exc
        return kept.entry(handle, str(path), self.config.preview_lines, self.config.preview_chars)

    @hookimpl(trylast=True)
    def read_offloaded(self, handle: str) -> str | None:
        match = _HANDLE.fullmatch(handle.strip())
        if match is None or ".." in handle:
            return None
        data = read_private(self.root / match.group(1) / f"{match.group(2)}.txt", self.root)
        return None if data is None else data.decode("utf-8", "surrogatepass")

    @hookimpl
    def list_sessions(self) -> list[SessionInfo]:
        if not self.root.is_dir():
            return []
        found = []
        for folder in sorted(self.root.iterdir()):
            if folder.is_symlink() or not folder.is_dir():
                continue
            data = read_private(folder / ID_FILE, self.root)
            session_id = data.decode("utf-8", "surrogatepass") if data is not None else folder.name
            found.append(SessionInfo(session_id, newest_mtime(folder), "offload-files", str(folder)))
        return found

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        self._marked.discard(self.session_dir(session_id).name)
        remove(self.session_dir(session_id), self.root)
