"""``state-files``: session state as one JSON file per session, shared by worker processes.

The summary, anchors, covered boundary and offload entries of a session live here, so that its
turns can be served by different processes on one host (or on a shared folder). A save is a
compare-and-set under an exclusive lock on the session's lock file: it succeeds only over the
version it replaces, so two workers that compacted the same turn cannot both win. The lock is
waited for ``timeout`` seconds at most: a worker stopped while it holds it makes the others' saves
of that session fail (their turns fail open), not hang. Files are
owner-only and replaced atomically. A file that cannot be read (truncated, not JSON, wrong types)
is moved aside as ``*.corrupt-<time>`` with a warning (and deleted with the session) and the
session starts over from its history. A file that has not changed since it was last read is not
parsed again. When the folder is in the data folder, neither it nor any folder between them is
followed if it is a symbolic link; ``list_sessions`` reports only the files this plugin could
have made, and ``remove_leftovers`` deletes the temporary files of saves that a killed process
never renamed, and a deleted session's lock file or unreadable copies that no listing shows.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import stat
import time
from pathlib import Path
from typing import Iterator

import attrs

from progressive_compactor.plugin import (
    PluginContext,
    RecentlyUsed,
    SessionInfo,
    SessionState,
    StorageError,
    hookimpl,
    list_folder,
    listed_id,
    lost_its_id,
    made_by_safe_name,
    open_private,
    read_private,
    remove,
    remove_leftovers,
    rename,
    root_for,
    session_name,
    setting_check,
    state_from_json,
    state_to_json,
    write_private,
)

log = logging.getLogger("progressive_compactor")
_ORPHAN = re.compile(r"(.+)(?:\.lock|\.json\.corrupt-[0-9]+)")
"""A session's lock file, or one of its unreadable states set aside: ``(stem)``."""
CACHED_STATES = 10_000
"""Parsed states kept, one per session (the most recently read or saved), to skip parsing a file
this worker has read or written already."""

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; saves are still atomic, not compare-and-set
    fcntl = None  # type: ignore[assignment]


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


class FileState:
    @attrs.frozen
    class Config:
        directory: str = "{data_dir}/state"
        timeout: float = attrs.field(
            default=10.0,
            validator=setting_check(lambda v: 0 < v < math.inf, "timeout must be more than 0 seconds, got {value}"),
        )
        """Seconds a save (or a delete) waits for the session's lock, which another worker holds
        while it saves the same session, before it fails (the turn fails open)."""

    def __init__(self, config: Config | None = None, context: PluginContext | None = None):
        self.config = config or self.Config()
        self.context = context or PluginContext()
        self.directory = Path(self.context.path(self.config.directory))
        self.top = root_for(self.directory, self.context.data_dir)
        """Where no link is followed from: the data folder, or the folder above ``directory``."""
        self._read: RecentlyUsed[tuple[tuple[int, int, int], bytes, SessionState]] = RecentlyUsed(CACHED_STATES)
        """session -> (the file's inode, size and mtime when read, a hash of its bytes, the state
        it held), for the :data:`CACHED_STATES` sessions read or saved last."""

    def path_for(self, session_id: str) -> Path:
        return self.directory / f"{session_name(session_id)}.json"

    def _stat_key(self, path: Path) -> tuple[int, int, int] | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _load(self, session_id: str, exact: bool = False) -> SessionState | None:
        """The stored state, not parsed again while the file's inode, size and time are as
        when it was last read; ``exact``: while its bytes are (those can be the same after
        other saves, with a reused inode and a coarse clock; a compare-and-set needs the truth)."""
        path = self.path_for(session_id)
        key = self._stat_key(path)
        if key is None:
            self._read.pop(session_id)
            return None
        cached = self._read.get(session_id)
        if cached is not None and cached[0] == key and not exact:
            return cached[2]
        data = read_private(path, self.top)
        if data is None:
            return None
        digest = _digest(data)
        if cached is not None and cached[1] == digest:
            self._read.put(session_id, (key, digest, cached[2]))
            return cached[2]
        try:
            state = state_from_json(data.decode("utf-8", "surrogatepass"))
        except Exception as exc:  # noqa: BLE001 - any unreadable file: set aside, start over
            self._read.pop(session_id)
            if self._stat_key(path) != key:  # another worker saved since: read what it saved
                return self._load(session_id, exact)
            aside = path.with_name(f"{path.name}.corrupt-{time.time_ns()}")
            log.warning(
                "session state %s is unreadable (%s); moved to %s, starting over", path, type(exc).__name__, aside
            )
            with contextlib.suppress(OSError, StorageError):
                rename(path, aside.name, self.top)
            return None
        self._read.put(session_id, (key, digest, state))
        return state

    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        """The exclusive lock of the session whose files are named ``name``. Deleting a session
        removes its lock file while holding it: a worker that was waiting on that file then
        holds a lock nobody else will wait on, so it locks the file now in its place instead."""
        if fcntl is None:
            yield
            return
        path = self.directory / f"{name}.lock"
        deadline = time.monotonic() + self.config.timeout
        while True:
            fd = open_private(path, self.top)
            try:
                self._lock(fd, path, deadline)
                held = os.fstat(fd)
                try:
                    current = os.lstat(path)
                except FileNotFoundError:
                    current = None
                if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        try:
            yield
        finally:
            os.close(fd)

    def _lock(self, fd: int, path: Path, deadline: float) -> None:
        """Take the exclusive lock of ``fd`` by ``deadline``. A worker that holds it only while it
        saves, so one that holds it longer is stopped (a debugger, a frozen container) or stuck
        (a hung disk), and waiting for it would hang this turn, and with it every turn queued
        behind it."""
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StorageError(
                        f"{path}: locked by another worker for more than {self.config.timeout:g} s"
                        " (stopped or stuck while saving this session?)",
                        path=str(path),
                    ) from None
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.05)

    @hookimpl(trylast=True)
    def load_state(self, session_id: str) -> SessionState | None:
        return self._load(session_id)

    @hookimpl(trylast=True)
    def save_state(self, session_id: str, state: SessionState) -> bool:
        with self._locked(session_name(session_id)):
            current = self._load(session_id, exact=True)
            if (current.version if current is not None else 0) != state.version - 1:
                return False
            data = json.loads(state_to_json(state))
            data["session_id"] = session_id
            path = self.path_for(session_id)
            text = self.context.secrets.redact_registered(json.dumps(data, ensure_ascii=False))  # masked by the core
            encoded = text.encode("utf-8", "surrogatepass")
            write_private(path, encoded, self.top)
            key = self._stat_key(path)
            if key is not None:
                self._read.put(session_id, (key, _digest(encoded), state))
        return True

    def _session_of(self, stem: str) -> str:
        """The session whose file ``{stem}.json`` is: the id saved in it, or, when that is
        missing (or names another file), the name, under which it is listed and deleted."""
        try:
            session_id = json.loads(read_private(self.directory / f"{stem}.json", self.top) or b"{}").get("session_id")
        except (ValueError, AttributeError, StorageError):
            session_id = None
        return listed_id(stem, session_id)

    @hookimpl
    def list_sessions(self) -> list[SessionInfo]:
        found = []
        for name, st in list_folder(self.directory, self.top).items():
            stem = name.removesuffix(".json")
            if name.endswith(".json") and stat.S_ISREG(st.st_mode) and made_by_safe_name(stem):
                found.append(
                    SessionInfo(self._session_of(stem), st.st_mtime, "state-files", str(self.directory / name))
                )
        return found

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        self._read.pop(session_id)
        names = [session_name(session_id)]
        if lost_its_id(session_id, self._session_of):
            names.append(session_id)
        for name in names:
            with self._locked(name):  # not while a worker saves; the lock file goes while held
                remove(self.directory / f"{name}.json", self.top)
                set_aside = re.compile(re.escape(f"{name}.json.corrupt-") + r"[0-9]+")
                for found, st in list_folder(self.directory, self.top).items():
                    if set_aside.fullmatch(found) and stat.S_ISREG(st.st_mode):  # its unreadable states
                        remove(self.directory / found, self.top)
                remove(self.directory / f"{name}.lock", self.top)

    @hookimpl
    def remove_leftovers(self, older_than: float, dry_run: bool) -> list[str]:
        """The temporary files of saves never renamed into place; and the files of a session
        whose state is gone, which no listing shows: its lock file (a worker that waited on it
        while the session was deleted makes it again) and its unreadable states set aside (the
        session never saved again), each untouched for ``older_than`` seconds."""
        before = time.time() - older_than
        found = [str(path) for path in remove_leftovers(self.directory, self.top, before, dry_run=dry_run)]
        listing = list_folder(self.directory, self.top)
        for name, st in sorted(listing.items()):
            match = _ORPHAN.fullmatch(name)
            stem = match.group(1) if match else None
            if stem is None or f"{stem}.json" in listing or not made_by_safe_name(stem):
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_mtime >= before:
                continue
            if not dry_run:
                if name.endswith(".lock"):  # removed while held, as deleting a session does
                    with self._locked(stem):
                        if os.path.lexists(self.directory / f"{stem}.json"):  # saved meanwhile
                            continue
                        remove(self.directory / name, self.top)
                else:
                    remove(self.directory / name, self.top)
            found.append(str(self.directory / name))
        return found
