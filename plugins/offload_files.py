"""``offload-files``: large tool results written to files, one per result (seed section 3.3).

Path: ``{root}/{session_id}/{tool_call_id}.txt``, root by default
``{work_dir}/.compactor/tool_results``. Session and tool-call ids come from outside: an id that is
not a plain name (letters, digits, ``_ . -``, at most 128 characters, starting with a letter or
digit) is replaced by ``_`` and a hash of it, so no id can name a path outside the root. Folders
are created owner-only (0700), files owner-only (0600), written atomically.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

import attrs

from progressive_compactor.errors import OffloadError
from progressive_compactor.hookspecs import hookimpl
from progressive_compactor.messages import text_of
from progressive_compactor.models import Message, OffloadEntry
from progressive_compactor.plugin_manager import PluginContext

PLACEHOLDER_PREFIX = "[Tool result offloaded"
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_HANDLE = re.compile(r"([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})/([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})")


def safe_name(value: str) -> str:
    """``value`` if it is a plain file name, else ``_`` and a hash of it (never a path)."""
    if _SAFE.fullmatch(value) and ".." not in value:
        return value
    return "_" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def placeholder(entry: OffloadEntry, text: str, preview_lines: int, preview_chars: int) -> str:
    lines = text.splitlines()
    preview = "\n".join(lines[:preview_lines])
    if len(preview) > preview_chars:
        preview = preview[:preview_chars] + " ..."
    return (
        f"{PLACEHOLDER_PREFIX}: {entry.chars} characters, {entry.lines} lines. Handle: {entry.handle}]\n"
        f"First {min(preview_lines, len(lines))} lines:\n{preview}\n"
        f'[Full text: call read_tool_result with {{"handle": "{entry.handle}"}}, '
        "optionally with start_line and end_line.]"
    )


def private_dir(path: Path) -> None:
    """Create ``path`` and any missing parent owner-only (0700); existing parents are left as
    they are (the work directory is the user's)."""
    for folder in [*reversed(path.parents), path]:
        if not folder.exists():
            folder.mkdir(mode=0o700, exist_ok=True)
            os.chmod(folder, 0o700)
    os.chmod(path, 0o700)


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, readable by the owner only."""
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")  # created 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class FileOffloader:
    @attrs.frozen
    class Config:
        root: str = "{work_dir}/.compactor/tool_results"
        preview_lines: int = 10
        preview_chars: int = 1500

    def __init__(self, config: Config | None = None, context: PluginContext | None = None):
        self.config = config or self.Config()
        self.context = context or PluginContext()
        root = self.config.root.replace("{work_dir}", self.context.work_dir)
        self.root = Path(root).expanduser().absolute()
        self._cache: dict[tuple[str, str], str] = {}
        """Offloaded (session, tool call) -> sha256: the idempotency cache of seed 3.3."""

    def session_dir(self, session_id: str) -> Path:
        return self.root / safe_name(session_id)

    def _target(self, session_id: str, tool_call_id: str, sha: str) -> tuple[Path, str]:
        folder = safe_name(session_id)
        name = safe_name(tool_call_id)
        known = self._cache.get((session_id, tool_call_id))
        if known is not None and known != sha:  # the same id answered twice with other text
            name = f"{name}.{sha[:12]}"
        path = self.root / folder / f"{name}.txt"
        if self.root not in path.parents:
            raise OffloadError(f"refusing to write outside {self.root}", f"{folder}/{name}")
        return path, f"{folder}/{name}"

    @hookimpl(trylast=True)
    def offload(self, message: Message, session_id: str, threshold: int) -> OffloadEntry | None:
        tool_call_id = message.tool_call_id
        if message.role != "tool" or not tool_call_id:
            return None
        text = text_of(message)
        if len(text) <= threshold or text.startswith(PLACEHOLDER_PREFIX):
            return None
        chars = len(text)  # what leaves the context; the core matches the entry to its message by it
        secrets = self.context.secrets
        if secrets is not None:
            text = secrets.redact(text)
        data = text.encode("utf-8", "surrogatepass")
        sha = hashlib.sha256(data).hexdigest()
        path, handle = self._target(session_id, tool_call_id, sha)
        key = (session_id, tool_call_id)
        if self._cache.get(key) != sha and not _same_file(path, data):
            try:
                write_private(path, data)
            except OSError as exc:
                raise OffloadError(f"cannot write {path}: {exc.strerror or exc}", handle) from exc
        self._cache.setdefault(key, sha)
        entry = OffloadEntry(
            tool_call_id=tool_call_id,
            handle=handle,
            path=str(path),
            chars=chars,
            lines=text.count("\n") + 1,
            sha256=sha,
        )
        return attrs.evolve(
            entry, placeholder=placeholder(entry, text, self.config.preview_lines, self.config.preview_chars)
        )

    @hookimpl(trylast=True)
    def read_offloaded(self, handle: str) -> str | None:
        match = _HANDLE.fullmatch(handle.strip())
        if match is None or ".." in handle:
            return None
        path = self.root / match.group(1) / f"{match.group(2)}.txt"
        try:
            return path.read_bytes().decode("utf-8", "surrogatepass")
        except FileNotFoundError:
            return None

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        folder = self.session_dir(session_id)
        self._cache = {k: v for k, v in self._cache.items() if k[0] != session_id}
        if folder.exists():
            shutil.rmtree(folder)


def _same_file(path: Path, data: bytes) -> bool:
    """Whether ``path`` already holds ``data`` (another process offloaded it): skip the write."""
    try:
        return path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False
