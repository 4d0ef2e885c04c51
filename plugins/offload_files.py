"""``offload-files``: large tool results written to files, one per result.

Path: ``{root}/{session}/{call}.txt``, root by default ``{data_dir}/tool_results``; the handle is
``{session}/{call}``. A tool call id that comes back with other text (some providers number calls
per reply: ``call_0`` again and again) gets ``{call}.{hash}``: the first writer keeps the plain
name, files are created exclusively, so two processes never overwrite each other's results. Session and tool-call ids come from outside: an id that is not a plain name
is replaced by ``_`` and a hash of it, so no id can name a path outside the root (so is a session
id with an upper-case letter: no two sessions share a folder where letter case is ignored), and nothing
under the root is followed if it is a symbolic link. Folders are owner-only (0700), files
owner-only (0600) and written atomically; secrets are masked before anything is written. A
session folder whose name is a hash (an id that is not a plain name) holds a ``.session_id`` file
with the id it belongs to, so that ``list_sessions`` reports real ids; a plain id is the folder's
name. ``list_sessions`` reports only folders this plugin could have made; a hashed folder whose
``.session_id`` is missing is reported (and deleted) under its own name. When the root is in the
data folder, neither it nor any folder between them is followed if it is a symbolic link.
``remove_leftovers`` deletes, in the session folders, the temporary files of writes that a killed
process never linked into place.
"""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path

import attrs

from progressive_compactor.plugin import (
    Message,
    OffloadEntry,
    OffloadError,
    PluginContext,
    SessionInfo,
    StorageError,
    hookimpl,
    keep_private,
    list_folder,
    listed_id,
    lost_its_id,
    made_by_safe_name,
    newest_mtime,
    offload_text,
    read_private,
    remove,
    remove_leftovers,
    root_for,
    safe_name,
    session_name,
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
        self.top = root_for(self.root, self.context.data_dir)
        """Where no link is followed from: the data folder, or the folder above ``root``."""

    def session_dir(self, session_id: str) -> Path:
        return self.root / session_name(session_id)

    def _store(self, session_id: str, tool_call_id: str, data: bytes, sha: str) -> tuple[Path, str]:
        """Where ``data`` is (or now is) kept: the plain name if it holds this text or is free,
        else the name with the text's hash. Nothing is written twice or over another text."""
        folder = self.session_dir(session_id)
        base = safe_name(tool_call_id)
        for name in (base, f"{base}.{sha[:12]}"):
            path = folder / f"{name}.txt"
            kept = keep_private(path, data, self.top)  # free, or holding this very text already
            if kept:
                self._mark(folder, session_id)
            if kept is not None:
                return path, f"{folder.name}/{name}"
        raise OffloadError(f"cannot keep the result of {tool_call_id!r}: {folder} holds other texts under its names")

    def _mark(self, folder: Path, session_id: str) -> None:
        """Write the session's id beside its results when the folder's name is not the id and the
        file is missing (looked for at every new result: another process may have deleted the
        session, folder and all, since this one last wrote it)."""
        if folder.name == session_id or os.path.lexists(folder / ID_FILE):
            return
        write_private(folder / ID_FILE, session_id.encode("utf-8", "surrogatepass"), self.top)

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
        data = read_private(self.root / match.group(1) / f"{match.group(2)}.txt", self.top)
        return None if data is None else data.decode("utf-8", "surrogatepass")

    def _session_of(self, name: str) -> str:
        """The session whose folder ``name`` is: the name itself when it is a plain id, else the
        id in its ``.session_id`` file; when that is missing (or names another folder), the
        folder's own name, under which it is listed and deleted."""
        if not name.startswith("_"):
            return name
        try:
            data = read_private(self.root / name / ID_FILE, self.top)
        except StorageError:
            data = None
        return listed_id(name, data.decode("utf-8", "surrogatepass") if data is not None else None)

    @hookimpl
    def list_sessions(self) -> list[SessionInfo]:
        found = []
        for name, st in list_folder(self.root, self.top).items():
            if stat.S_ISDIR(st.st_mode) and made_by_safe_name(name):
                folder = self.root / name
                found.append(
                    SessionInfo(self._session_of(name), newest_mtime(folder, self.top), "offload-files", str(folder))
                )
        return found

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        remove(self.session_dir(session_id), self.top)
        if lost_its_id(session_id, self._session_of):
            remove(self.root / session_id, self.top)

    @hookimpl
    def remove_leftovers(self, older_than: float, dry_run: bool) -> list[str]:
        """The temporary files of results and id files never linked into place, in every session
        folder (no link followed)."""
        before, found = time.time() - older_than, []
        for name, st in list_folder(self.root, self.top).items():
            if stat.S_ISDIR(st.st_mode) and made_by_safe_name(name):
                found += remove_leftovers(self.root / name, self.top, before, dry_run=dry_run)
        return [str(path) for path in found]
