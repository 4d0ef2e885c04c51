"""SQLite: session state, records and offloaded results in one database file (the standard
library's ``sqlite3``; no server, no extra).

The file is shared by every process on one host (and by the three plugins): WAL mode, so readers
never wait for a writer; a writer waits up to ``timeout`` seconds for another's write lock
(``busy_timeout``). Every write is one statement or one ``BEGIN IMMEDIATE`` transaction, so a
process killed in the middle of one leaves the database as it was before it. The file and its
``-wal``/``-shm`` companions are owner-only: SQLite gives the companions the file's mode, so a file
made before (by ``touch``, a copy) that others may read is made owner-only when this user owns it,
as a file the other stores rewrite is, and a warning is logged when another user does. A symbolic
link in its place is refused, and so is one planted as a folder between the data folder and it. A
full disk (or a file-size limit) makes a write fail with ``database or disk is full``; nothing is
left half-written, and the plugins fail open.

Schema (version :data:`SCHEMA_VERSION`, in ``PRAGMA user_version``)::

    compactor_state    (session_id TEXT PRIMARY KEY, version, stamp, data BLOB, updated REAL)
    compactor_records  (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE, session_id, created, data TEXT)
    compactor_texts    (sha256 TEXT PRIMARY KEY, data BLOB)           -- each text stored once
    compactor_offloads (handle TEXT PRIMARY KEY, session_id, tool_call_id, sha256, chars, created)

The schema is created on first use and upgraded by :data:`MIGRATIONS` (step *n* takes version
*n* to *n + 1*) inside one write transaction, so two processes never both migrate; a file whose
version is newer than this release knows is refused, never changed.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import attrs

from ..converters import setting_check
from ..errors import ConfigError, StorageError
from ..forks import INHERITED, renew_lock_after_fork
from ..storage import private_dir
from .common import (
    TIMEOUT_RULE,
    Pauses,
    fail,
    is_storable,
    storable_id,
    storable_text,
    usable_timeout,
)

if TYPE_CHECKING:
    import sqlite3

    from ..plugin_manager import PluginContext

T = TypeVar("T")
SCHEMA_VERSION = 1
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE compactor_state (session_id TEXT PRIMARY KEY, version INTEGER NOT NULL,"
        " stamp TEXT NOT NULL, data BLOB NOT NULL, updated REAL NOT NULL)",
        "CREATE TABLE compactor_records (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,"
        " session_id TEXT NOT NULL, created REAL NOT NULL, data TEXT NOT NULL)",
        "CREATE INDEX compactor_records_session ON compactor_records (session_id, seq)",
        "CREATE TABLE compactor_texts (sha256 TEXT PRIMARY KEY, data BLOB NOT NULL)",
        "CREATE TABLE compactor_offloads (handle TEXT PRIMARY KEY, session_id TEXT NOT NULL,"
        " tool_call_id TEXT NOT NULL, sha256 TEXT NOT NULL, chars INTEGER NOT NULL, created REAL NOT NULL)",
        "CREATE INDEX compactor_offloads_session ON compactor_offloads (session_id)",
        "CREATE INDEX compactor_offloads_sha256 ON compactor_offloads (sha256)",
    ),
)
"""Step *n* takes the schema from version *n* to *n + 1*; append a step to change it."""
TABLES = {"state": "compactor_state", "records": "compactor_records", "offloads": "compactor_offloads"}
_SESSIONS = {
    "state": "SELECT session_id, updated FROM compactor_state ORDER BY session_id",
    "records": "SELECT session_id, MAX(created) FROM compactor_records GROUP BY session_id ORDER BY session_id",
    "offloads": "SELECT session_id, MAX(created) FROM compactor_offloads GROUP BY session_id ORDER BY session_id",
}
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_COMPANION = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
log = logging.getLogger("progressive_compactor")
_LOCKED = Pauses("locked")
"""Database files whose write lock a write of this process waited for in vain lately."""


@attrs.frozen
class SqliteSettings:
    """Where the database file is, and how long a write waits for another process's."""

    path: str = attrs.field(
        default="{data_dir}/compactor.sqlite3",
        validator=setting_check(
            lambda v: v.strip() != "", "path must name the database file, such as {{data_dir}}/compactor.sqlite3"
        ),
    )
    """The database file; the three SQLite plugins share it when they name the same one."""
    timeout: float = attrs.field(default=10.0, validator=setting_check(usable_timeout, TIMEOUT_RULE))
    """Seconds a write waits for another process's write to finish before it fails (SQLite's busy
    timeout, a 32-bit number of milliseconds: a longer one would be no wait at all)."""


def _not_a_file(path: Path) -> str:
    """Why ``path`` can never be a database file (a folder is there, or a file where a folder of
    it should be), with the fix; empty when it can be."""
    if path.is_dir():
        return f"{path} is a folder; name a file in it, such as {path / 'compactor.sqlite3'}"
    for folder in path.parents:
        if os.path.lexists(folder):
            if folder.is_dir():
                return ""
            return f"{folder} is not a folder; name a file in a folder, such as {{data_dir}}/compactor.sqlite3"
    return ""


def _owner_only(fd: int, path: Path) -> None:
    """Make the open file ``path`` owner-only (0600) if others may read or write it, when this
    user owns it; else (another user's file is not ours to change) a warning."""
    if not hasattr(os, "geteuid"):  # pragma: no cover - no owner and mode bits to speak of
        return
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o077:
        return
    if st.st_uid == os.geteuid():
        try:
            os.fchmod(fd, 0o600)
            return
        except OSError as exc:  # a file system without modes: said, not fatal
            why = exc.strerror or str(exc)
    else:
        why = "owned by another user"
    log.warning("%s can be read by others (mode %o) and stays so: %s", path, stat.S_IMODE(st.st_mode), why)


class SqliteDatabase:
    """One SQLite file: a connection per process (opened on first use, opened again after a
    fork), shared by the threads of the process under a lock."""

    def __init__(self, settings: SqliteSettings, context: PluginContext, plugin: str):
        self.path = Path(context.path(settings.path))
        top, folder = Path(context.data_dir), self.path.parent
        self.top = top if folder == top or top in folder.parents else folder
        """Where no link is followed from on the way to the file's folder: the data folder when the
        file is in it (the folders the user named are the user's choice)."""
        problem = _not_a_file(self.path)
        if problem:
            raise ConfigError([f"path {settings.path!r}: {problem} @ $.config.{plugin}.path"])
        self.timeout = settings.timeout
        self.secrets = context.secrets
        self.plugin = plugin
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._lock = threading.RLock()
        renew_lock_after_fork(self, threading.RLock)

    def where(self, kind: str) -> str:
        return f"{self.path} ({TABLES[kind]})"

    # --- the connection and the schema ------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        import sqlite3

        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        if self._conn is not None:  # inherited through fork: never used, nor closed, here
            INHERITED.append(self._conn)
        self._conn = None
        folder = self.path.parent
        try:
            private_dir(folder, self.top)
        except OSError as exc:  # a file where the folder should be, no permission to make it...
            raise StorageError(f"cannot make the folder {folder}: {exc.strerror or exc}", path=str(folder)) from exc
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
            try:
                _owner_only(fd, self.path)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StorageError(f"cannot open {self.path}: {exc.strerror or exc}", path=str(self.path)) from exc
        for suffix in ("-wal", "-shm"):  # left by an earlier run with the file's old mode
            companion = self.path.with_name(self.path.name + suffix)
            try:
                fd = os.open(companion, _COMPANION)
            except OSError:  # none yet (SQLite makes it with the file's mode), or SQLite will say
                continue
            try:
                _owner_only(fd, companion)
            finally:
                os.close(fd)
        conn = sqlite3.connect(
            str(self.path), timeout=self.timeout, isolation_level=None, check_same_thread=False, cached_statements=64
        )
        try:
            self._wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _wal(self, conn: sqlite3.Connection) -> None:
        """WAL mode (kept in the file): switching needs the file to itself, and SQLite does not
        wait for that, so processes that open a new file together take turns here."""
        import sqlite3

        deadline = time.monotonic() + self.timeout
        while (mode := conn.execute("PRAGMA journal_mode").fetchone()[0]) != "wal":
            if time.monotonic() > deadline:  # SQLite keeps a mode it cannot leave without an error
                raise StorageError(
                    f"{self.path}: cannot switch to WAL mode, the journal mode stays {mode!r}", path=str(self.path)
                )
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            except sqlite3.OperationalError:
                if time.monotonic() > deadline:
                    raise
            if mode != "wal":
                time.sleep(0.01)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StorageError(
                    f"{self.path} has schema version {version}, newer than this release knows ({SCHEMA_VERSION}):"
                    " upgrade progressive-compactor",
                    path=str(self.path),
                )
            for step in MIGRATIONS[version:]:
                for statement in step:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            self._roll_back(conn)  # the error said is the one that made it roll back
            raise

    def _run(self, work: Callable[[sqlite3.Connection], T], transaction: bool = False, writes: bool = False) -> T:
        """``work(conn)`` under the process's lock; with ``transaction``, in one ``BEGIN
        IMMEDIATE`` transaction (committed when it returns, rolled back when it raises). A write
        that waited ``timeout`` for another process's write lock in vain makes every write fail at
        once for a few seconds (:class:`.common.Pauses`)."""
        import sqlite3

        where = f"SQLite database {self.path}"
        writes = writes or transaction
        if writes:
            self._not_locked(where)
        with self._lock:
            if writes:  # again: the write this one waited behind may have waited for the lock in vain
                self._not_locked(where)
            try:
                conn = self._connect()
                if not transaction:
                    return work(conn)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = work(conn)
                except BaseException:
                    self._roll_back(conn)  # the error said is the one that made it roll back
                    raise
                conn.execute("COMMIT")
                return result
            except sqlite3.Error as exc:
                if self._conn is not None:
                    self._roll_back(self._conn)
                if writes and isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                    _LOCKED.start(str(self.path), self.timeout, str(exc))
                fail(where, exc, self.secrets)

    def _not_locked(self, where: str) -> None:
        _LOCKED.check(str(self.path), where, path=str(self.path))

    def _roll_back(self, conn: sqlite3.Connection) -> None:
        """Roll back ``conn``'s transaction, if it is in one; when that fails, drop this process's
        connection (SQLite rolls back, and its write lock goes with it; the next call opens
        another). A connection still being opened is not yet it: :meth:`_connect` closes that one."""
        import sqlite3

        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                self._drop()

    def _drop(self) -> None:
        """Close this process's connection (a transaction it holds is rolled back by SQLite)."""
        import sqlite3

        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                try:
                    self._conn.close()
                except sqlite3.Error:  # pragma: no cover - dropped all the same
                    pass
            self._conn = None

    def close(self) -> None:
        self._drop()

    # --- state -------------------------------------------------------------------------------

    def load_state(self, session_id: str, stamp: str | None) -> tuple[int, str, bytes | None] | None:
        sid = storable_id(session_id)
        row = self._run(
            lambda c: c.execute(
                "SELECT version, stamp, CASE WHEN stamp = ? THEN NULL ELSE data END FROM compactor_state"
                " WHERE session_id = ?",
                (stamp, sid),
            ).fetchone()
        )
        return None if row is None else (int(row[0]), str(row[1]), row[2])

    def save_state(self, session_id: str, version: int, stamp: str, data: bytes) -> bool:
        sid = storable_id(session_id)
        now = time.time()
        # The same save again (its stamp: a retry whose first reply was lost) is no conflict.
        if version == 1:
            sql = (
                "INSERT INTO compactor_state (session_id, version, stamp, data, updated) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (session_id) DO UPDATE SET updated = excluded.updated"
                " WHERE version = excluded.version AND stamp = excluded.stamp"
            )
            params: tuple[Any, ...] = (sid, version, stamp, data, now)
        else:
            sql = (
                "UPDATE compactor_state SET version = ?, stamp = ?, data = ?, updated = ?"
                " WHERE session_id = ? AND (version = ? OR (version = ? AND stamp = ?))"
            )
            params = (version, stamp, data, now, sid, version - 1, version, stamp)
        return bool(self._run(lambda c: c.execute(sql, params).rowcount, writes=True))

    # --- records -----------------------------------------------------------------------------

    def add_record(self, record_id: str, session_id: str, text: str) -> bool:
        sid = storable_id(session_id)
        sql = (
            "INSERT INTO compactor_records (id, session_id, created, data) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (id) DO NOTHING"
        )
        return bool(self._run(lambda c: c.execute(sql, (record_id, sid, time.time(), text)).rowcount, writes=True))

    def read_records(self, session_id: str) -> list[str]:
        sid = storable_id(session_id)
        sql = "SELECT data FROM compactor_records WHERE session_id = ? ORDER BY seq"
        return [row[0] for row in self._run(lambda c: c.execute(sql, (sid,)).fetchall())]

    # --- offloaded results -------------------------------------------------------------------

    def offload(
        self, session_id: str, tool_call_id: str, handles: tuple[str, ...], sha: str, data: bytes, chars: int
    ) -> str | None:
        """The handle that holds ``data``: the first of ``handles`` that is free (now taken) or
        already holds this very text; None when each holds another text."""
        sid = storable_id(session_id)
        call = storable_text(tool_call_id)  # the handle names it already (a safe name)

        def store(c: sqlite3.Connection) -> str | None:
            for handle in handles:
                row = c.execute("SELECT sha256 FROM compactor_offloads WHERE handle = ?", (handle,)).fetchone()
                if row is not None:
                    if row[0] == sha:
                        return handle
                    continue
                c.execute(
                    "INSERT INTO compactor_texts (sha256, data) VALUES (?, ?) ON CONFLICT DO NOTHING", (sha, data)
                )
                c.execute(
                    "INSERT INTO compactor_offloads (handle, session_id, tool_call_id, sha256, chars, created)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (handle, sid, call, sha, chars, time.time()),
                )
                return handle
            return None

        return self._run(store, transaction=True)

    def read_offloaded(self, handle: str) -> bytes | None:
        if not is_storable(handle):  # no handle holds it
            return None
        sql = "SELECT t.data FROM compactor_offloads o JOIN compactor_texts t ON t.sha256 = o.sha256 WHERE o.handle = ?"
        row = self._run(lambda c: c.execute(sql, (handle,)).fetchone())
        return None if row is None else bytes(row[0])

    # --- sessions ----------------------------------------------------------------------------

    def sessions(self, kind: str) -> list[tuple[str, float]]:
        return [
            (str(sid), float(updated)) for sid, updated in self._run(lambda c: c.execute(_SESSIONS[kind]).fetchall())
        ]

    def delete(self, kind: str, session_id: str) -> None:
        sid = storable_id(session_id)

        def delete(c: sqlite3.Connection) -> None:
            if kind == "offloads":  # texts no other session's result shares go with it
                c.execute(
                    "DELETE FROM compactor_texts WHERE sha256 IN"
                    " (SELECT sha256 FROM compactor_offloads WHERE session_id = ?) AND NOT EXISTS"
                    " (SELECT 1 FROM compactor_offloads o WHERE o.sha256 = compactor_texts.sha256"
                    " AND o.session_id <> ?)",
                    (sid, sid),
                )
            c.execute(f"DELETE FROM {TABLES[kind]} WHERE session_id = ?", (sid,))  # noqa: S608 - a fixed name

        self._run(delete, transaction=True)
