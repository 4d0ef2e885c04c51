"""``state-sqlite``, ``store-sqlite``, ``offload-sqlite``: one database file shared by processes.

The contract every backend keeps (``store_contract.py``), and what only a file can do: its
permissions, WAL mode, a symbolic link in its place, a full disk, a write lock another process
holds too long, and the schema's migration path.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from progressive_compactor import CompactionTier, ProgressiveCompactor, Session
from progressive_compactor.errors import StorageError
from progressive_compactor.models import SessionState
from progressive_compactor.stores import sqlite as sqlite_backend
from progressive_compactor.testing import build_history, problems, window_for
from store_contract import Backend, StoreContract, turns_at_once, warn_history
from timeouts import forked_answer, forked_while_held, no_hang


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[Backend]:
    found = Backend("sqlite", {}, tmp_path)
    yield found
    found.close()


class TestSqliteContract(StoreContract):
    pass


def test_the_database_is_one_owner_only_file_in_wal_mode(backend):
    history = warn_history()
    backend.compactor(context_window=window_for(history, 0.65)).compact_with_record(history, "s")
    files = sorted(p.name for p in backend.tmp_path.glob("compactor.sqlite3*"))
    assert files == ["compactor.sqlite3", "compactor.sqlite3-shm", "compactor.sqlite3-wal"]
    for name in files:
        assert stat.S_IMODE(os.stat(backend.tmp_path / name).st_mode) == 0o600, name
    with sqlite3.connect(backend.tmp_path / "compactor.sqlite3") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == sqlite_backend.SCHEMA_VERSION
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_symbolic_link_in_place_of_the_file_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere.db"
    elsewhere.write_bytes(b"")
    (tmp_path / "compactor.sqlite3").symlink_to(elsewhere)
    history = warn_history()
    compactor = ProgressiveCompactor(
        "classic", context_window=window_for(history, 0.85), **Backend("sqlite", {}, tmp_path).overrides()
    )
    view, record = compactor.compact_with_record(history, "s")
    assert problems(view) == [] and record.tier is CompactionTier.FULL
    assert any("loading session state failed" in e and "cannot open" in e for e in record.errors)
    assert elsewhere.read_bytes() == b""


def test_a_symbolic_link_planted_as_a_folder_on_the_way_to_the_file_is_refused(tmp_path):
    """As the other plugins' folders: a folder under the data folder, on the way to the database
    file, is never followed if it is a link."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    (data / "db").symlink_to(elsewhere)
    history = warn_history()
    backend = Backend("sqlite", {"path": "{data_dir}/db/compactor.sqlite3"}, data)
    compactor = backend.compactor(context_window=window_for(history, 0.85))
    view, record = compactor.compact_with_record(history, "s")
    compactor.close()
    assert problems(view) == [] and record.tier is CompactionTier.FULL
    assert any("loading session state failed" in e and "symbolic link" in e for e in record.errors)
    assert list(elsewhere.iterdir()) == []


def test_an_existing_database_readable_by_others_is_made_owner_only(backend):
    """SQLite gives the ``-wal`` and ``-shm`` files it makes the database file's mode: a file made
    before (by ``touch``, a copy) readable by others would have every new write readable too."""
    path = backend.tmp_path / "compactor.sqlite3"
    path.write_bytes(b"")
    os.chmod(path, 0o644)
    history = warn_history()
    view, record = backend.compactor(context_window=window_for(history, 0.65)).compact_with_record(history, "s")
    assert record.offloaded and record.errors == ()
    files = sorted(p.name for p in backend.tmp_path.glob("compactor.sqlite3*"))
    assert files == ["compactor.sqlite3", "compactor.sqlite3-shm", "compactor.sqlite3-wal"]
    assert {name: stat.S_IMODE(os.stat(backend.tmp_path / name).st_mode) for name in files} == dict.fromkeys(
        files, 0o600
    )


def test_companions_left_readable_by_others_are_made_owner_only(backend):
    path = backend.tmp_path / "compactor.sqlite3"
    earlier = sqlite3.connect(path, isolation_level=None)  # another program, with the usual umask
    try:
        earlier.execute("PRAGMA journal_mode=WAL")
        earlier.execute("CREATE TABLE other (x)")
        for name in ("compactor.sqlite3", "compactor.sqlite3-wal", "compactor.sqlite3-shm"):
            os.chmod(backend.tmp_path / name, 0o644)
        assert backend.compactor().state("s").version == 0
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in backend.tmp_path.glob("compactor.sqlite3*")}
        assert modes == {"compactor.sqlite3": 0o600, "compactor.sqlite3-wal": 0o600, "compactor.sqlite3-shm": 0o600}
    finally:
        earlier.close()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file away needs root")
def test_another_users_database_keeps_its_mode_with_a_warning(backend, caplog):
    path = backend.tmp_path / "compactor.sqlite3"
    path.write_bytes(b"")
    os.chmod(path, 0o640)
    os.chown(path, 4242, -1)  # a group shares it on purpose, say
    assert backend.compactor().state("s").version == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert f"{path} can be read by others (mode 640) and stays so: owned by another user" in caplog.text


def test_a_folder_that_cannot_be_made_is_a_storage_error(backend):
    """The folder of the database is made on first use: when a file stands where it should be,
    the store raises its own error, and the read tool answers the model with it as text."""
    compactor = backend.compactor(config=backend.config(path=str(backend.tmp_path / "db" / "compactor.sqlite3")))
    (backend.tmp_path / "db").write_bytes(b"not a folder")
    database = compactor.pm.get_plugin("store-sqlite").db
    with pytest.raises(StorageError, match="db"):
        database.read_records("s")
    answer = Session(compactor, "s").read_tool_call({"handle": "s/call-1"})
    assert answer.startswith("error: ") and "db" in answer


def test_a_connection_whose_rollback_failed_is_closed(backend):
    """A transaction that could not be rolled back holds the write lock for as long as its
    connection is open: it is closed, and the next call opens another."""
    plugin = backend.compactor().pm.get_plugin("offload-sqlite")
    database = plugin.db
    assert database.sessions("offloads") == []  # the connection is open
    conn = database._conn
    conn.set_authorizer(  # SQLite refuses every ROLLBACK on this connection
        lambda action, name, *_: (
            sqlite3.SQLITE_DENY if (action, name) == (sqlite3.SQLITE_TRANSACTION, "ROLLBACK") else sqlite3.SQLITE_OK
        )
    )
    with pytest.raises(StorageError) as failed:
        database.offload("s", "call-1", ("s/call-1",), "0" * 64, object(), 1)  # no value SQLite can store
    assert "not supported" in str(failed.value) and "not authorized" not in str(failed.value)  # the cause, said
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        conn.execute("SELECT 1")
    other = sqlite3.connect(backend.tmp_path / "compactor.sqlite3", timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # the write lock is free
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert database.offload("s", "call-1", ("s/call-1",), "0" * 64, b"text", 4) == "s/call-1"


def test_a_migration_that_cannot_roll_back_says_why_it_failed(backend, monkeypatch):
    """A database of a newer schema is refused with that reason, even where SQLite refuses to roll
    back the migration's transaction: the rollback's failure does not take the reason's place."""
    path = backend.tmp_path / "compactor.sqlite3"
    newer = sqlite3.connect(path)
    newer.execute(f"PRAGMA user_version = {sqlite_backend.SCHEMA_VERSION + 1}")
    newer.close()
    database = backend.compactor().pm.get_plugin("offload-sqlite").db
    connect = sqlite3.connect

    def refusing_rollback(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_authorizer(
            lambda action, name, *_: (
                sqlite3.SQLITE_DENY if (action, name) == (sqlite3.SQLITE_TRANSACTION, "ROLLBACK") else sqlite3.SQLITE_OK
            )
        )
        return conn

    monkeypatch.setattr(sqlite3, "connect", refusing_rollback)
    with pytest.raises(StorageError, match="newer than this release knows"):
        database.sessions("offloads")


def test_a_write_lock_held_too_long_fails_open_and_the_next_turn_recovers(backend):
    history = warn_history(14, 5000)
    compactor = backend.compactor(context_window=window_for(history, 0.8), config=backend.config(timeout=0.2))
    compactor.compact_with_record(history[:6], "s")
    blocker = sqlite3.connect(backend.tmp_path / "compactor.sqlite3", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process in a long write
    try:
        view, record = compactor.compact_with_record(history, "s")
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert problems(view) == [] and record.tier is not CompactionTier.NONE
    assert any("saving session state failed" in e and "database is locked" in e for e in record.errors)
    assert any("locked, not tried again" in e for e in record.errors)  # waited for once, not per write
    time.sleep(0.2)  # the pause after a lock waited for in vain (at most the 0.2 s timeout) is over
    before = compactor.state("s").version
    view_again, again = compactor.compact_with_record(history, "s")
    assert again.errors == () and compactor.state("s").version == before + 1
    alone = ProgressiveCompactor(
        "classic", context_window=window_for(history, 0.8), data_dir=str(backend.tmp_path / "m")
    )
    alone.compact(history[:6], "s")
    assert view_again == alone.compact(history, "s")


def test_threads_queued_behind_a_write_waiting_for_the_lock_do_not_each_wait_the_timeout(backend):
    """A worker's threads serve turns of eight sessions while another process holds the write lock
    too long: the lock is waited for once, and the writes queued behind that wait fail at once
    (they waited in turn, the timeout each: eight times the timeout for the last turn)."""
    history = warn_history(14, 5000)
    compactor = backend.compactor(context_window=window_for(history, 0.8), config=backend.config(timeout=0.5))
    compactor.compact_with_record(history[:6], "s")  # the schema exists
    blocker = sqlite3.connect(backend.tmp_path / "compactor.sqlite3", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process in a long write
    try:
        turns = turns_at_once(compactor, history)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert len(turns) == 8 and all(found == [] for _, found, _ in turns.values())
    assert all(
        any("database is locked" in e or "locked, not tried again" in e for e in errors)
        for *_, errors in turns.values()
    )
    slowest = max(took for took, _, _ in turns.values())
    assert slowest < 1.5, f"a turn took {slowest:.1f} s with a 0.5 s timeout"


FULL_DISK = r"""
import json, os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
from pathlib import Path
from typing import Any, Iterator
from progressive_compactor import ProgressiveCompactor
from progressive_compactor.testing import build_history, window_for, problems
data_dir = Path(sys.argv[1])
history = build_history([6000] * 40)
compactor = ProgressiveCompactor("classic", context_window=window_for(history[:24], 0.65), data_dir=str(data_dir),
    plugins={"state": "state-sqlite", "offload": "offload-sqlite", "stores": ["store-sqlite"]},
    config={"store-sqlite": {"record_none": True}})
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
compactor.compact_with_record(history[:12], "s")
biggest = max(p.stat().st_size for p in data_dir.glob("compactor.sqlite3*"))
resource.setrlimit(resource.RLIMIT_FSIZE, (biggest + 4096, hard))  # the disk is full from here
for upto in range(14, 41, 2):
    view, record = compactor.compact_with_record(history[:upto], "s")
    print(json.dumps({"phase": "full", "tier": int(record.tier), "errors": list(record.errors),
                      "problems": problems(view), "offloaded": len(record.offloaded)}))
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again
view, record = compactor.compact_with_record(history, "s")
print(json.dumps({"phase": "after", "tier": int(record.tier), "errors": list(record.errors),
                  "problems": problems(view), "version": compactor.state("s").version,
                  "records": len(compactor.records("s")), "id": record.id,
                  "ids": [r.id for r in compactor.records("s")]}))
"""


def test_a_full_disk_fails_open_and_nothing_is_half_written(tmp_path):
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    turns = [json.loads(line) for line in done.stdout.splitlines()]
    full, after = turns[:-1], turns[-1]
    assert all(t["problems"] == [] for t in turns)
    # a write past RLIMIT_FSIZE fails with EFBIG, which SQLite reports as "disk I/O error"
    # (a disk with no space left, ENOSPC, as "database or disk is full"): either way it fails open
    failed = [e for t in full for e in t["errors"] if "disk I/O error" in e]
    assert any(e.startswith("saving session state failed") for e in failed), full
    assert any(e.startswith("offload of") for e in failed), full
    assert "persist_record of plugin store-sqlite failed" in done.stderr  # records that could not be stored, logged
    assert [e for e in after["errors"] if "SQLite" in e] == [] and after["problems"] == []
    assert after["version"] == 1  # nothing was saved while the disk was full; now it is
    assert after["id"] in after["ids"] and len(set(after["ids"])) == len(after["ids"])
    with sqlite3.connect(tmp_path / "compactor.sqlite3") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        states = conn.execute("SELECT data FROM compactor_state").fetchall()
        assert len(states) == 1 and json.loads(states[0][0])["version"] == after["version"]
        for (text,) in conn.execute("SELECT data FROM compactor_records"):
            json.loads(text)  # every stored record is whole
        orphans = conn.execute(
            "SELECT count(*) FROM compactor_offloads o LEFT JOIN compactor_texts t USING (sha256) WHERE t.sha256 IS NULL"
        ).fetchone()[0]
        assert orphans == 0


def test_the_schema_is_migrated_once_by_processes_that_start_together(tmp_path, monkeypatch):
    Backend("sqlite", {}, tmp_path).compactor().state("s")  # version 1
    step = ("ALTER TABLE compactor_records ADD COLUMN note TEXT",)
    monkeypatch.setattr(sqlite_backend, "MIGRATIONS", (*sqlite_backend.MIGRATIONS, step))
    monkeypatch.setattr(sqlite_backend, "SCHEMA_VERSION", 2)
    history = build_history([3000] * 6)
    compactors = [Backend("sqlite", {}, tmp_path).compactor(context_window=window_for(history, 0.85)) for _ in range(4)]
    gate = threading.Barrier(4)
    records = []

    def turn(compactor: ProgressiveCompactor, n: int) -> None:
        gate.wait()
        records.append(compactor.compact_with_record(history, f"s{n}")[1])

    threads = [threading.Thread(target=turn, args=(c, n)) for n, c in enumerate(compactors)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.errors == () for r in records)
    with sqlite3.connect(tmp_path / "compactor.sqlite3") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
        columns = [row[1] for row in conn.execute("PRAGMA table_info(compactor_records)")]
        assert columns.count("note") == 1


def test_the_bundled_fleet_config_runs(tmp_path):
    history = warn_history()
    compactor = ProgressiveCompactor("fleet-sqlite", context_window=window_for(history, 0.65), data_dir=str(tmp_path))
    view, record = compactor.compact_with_record(history, "s")
    assert record.offloaded and record.errors == ()
    assert compactor.state("s").version == 1 and compactor.records("s")[0].id == record.id
    assert (tmp_path / "compactor.sqlite3").is_file()


def test_a_large_text_is_stored_once_however_many_handles_name_it(backend):
    from progressive_compactor.models import Message

    plugin = backend.compactor().pm.get_plugin("offload-sqlite")
    text = "a large result\n" * 20_000
    handles = {
        plugin.offload(Message(role="tool", content=text, tool_call_id=c), s, 100).handle
        for c in ("c1", "c2")
        for s in ("s1", "s2")
    }
    assert handles == {"s1/c1", "s1/c2", "s2/c1", "s2/c2"}
    with sqlite3.connect(backend.tmp_path / "compactor.sqlite3") as conn:
        assert conn.execute("SELECT count(*) FROM compactor_texts").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM compactor_offloads").fetchone() == (4,)
    plugin.on_delete_session("s1")
    assert plugin.read_offloaded("s2/c1") == text
    plugin.on_delete_session("s2")
    with sqlite3.connect(backend.tmp_path / "compactor.sqlite3") as conn:
        assert conn.execute("SELECT count(*) FROM compactor_texts").fetchone() == (0,)


def test_a_fork_while_another_thread_waits_for_the_write_lock_does_not_hang_the_child(backend):
    """A worker forked while one of the parent's threads is inside a write (waiting for another
    process's write lock) serves its turns: the lock that thread held is not the child's."""

    store = backend.compactor(config=backend.config(timeout=5.0)).pm.get_plugin("store-sqlite")
    store.db.add_record("r0", "s", "{}")
    blocker = sqlite3.connect(backend.tmp_path / "compactor.sqlite3", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process in a long write
    waiting = threading.Thread(target=store.db.add_record, args=("r1", "s", "{}"))  # stored once the lock is free
    waiting.start()
    while store.db._lock.acquire(blocking=False):  # until the thread holds the database
        store.db._lock.release()
        time.sleep(0.01)
    time.sleep(0.2)  # in SQLite's wait for the lock, no longer taking it
    try:  # the child reads the records the parent kept
        found = forked_answer(
            lambda: store.db.read_records("s"), 4.0, "the forked child hung on the lock of its parent's thread"
        )
        assert found == ["{}"]
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        waiting.join()
    assert store.db.read_records("s") == ["{}", "{}"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_fork_while_a_thread_keeps_a_parsed_state_does_not_hang_the_child(backend):
    """The state plugin's cache of parsed states (every database plugin's) is the child's own."""
    state = backend.compactor().pm.get_plugin("state-sqlite")

    def child_turn() -> list[object]:
        saved = state.save_state("s", SessionState(summary="child", version=1))
        return [saved, state.load_state("s").summary]

    assert forked_while_held(state._lock, child_turn) == [True, "child"]


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("", "path must name the database file"),
        ("{data_dir}", "is a folder"),
        ("{data_dir}/folder", "is a folder"),
        ("{data_dir}/a-file/compactor.sqlite3", "is not a folder"),
    ],
)
def test_a_path_that_cannot_be_a_database_file_is_a_config_error_naming_the_setting(tmp_path, path, said):
    from progressive_compactor.errors import ConfigError

    (tmp_path / "folder").mkdir()
    (tmp_path / "a-file").write_text("notes")
    backend = Backend("sqlite", {}, tmp_path)
    with pytest.raises(ConfigError) as caught:
        backend.compactor(config={"state-sqlite": {"path": path}})
    (problem,) = caught.value.problems
    assert said in problem and problem.endswith("@ $.config.state-sqlite.path")
    assert "compactor.sqlite3" in problem  # the fix: a file name
    assert (tmp_path / "a-file").read_text() == "notes"


@pytest.mark.parametrize("timeout", [1e7, float("inf")])
def test_a_timeout_sqlite_cannot_wait_is_a_config_error_not_no_wait_at_all(tmp_path, timeout):
    """SQLite's busy timeout is a 32-bit number of milliseconds: a longer one (``.inf``, meant as
    "wait as long as it takes") wrapped to 0, and every write failed at once on a lock."""
    from progressive_compactor.errors import ConfigError

    backend = Backend("sqlite", {}, tmp_path)
    with pytest.raises(ConfigError) as caught:
        backend.compactor(config={"store-sqlite": {"timeout": timeout}})
    assert any("timeout must be" in p and p.endswith("@ $.config.store-sqlite.timeout") for p in caught.value.problems)
    longest = backend.compactor(config={"store-sqlite": {"timeout": 2_147_483}}).pm.get_plugin("store-sqlite")
    assert longest.db._run(lambda c: c.execute("PRAGMA busy_timeout").fetchone()[0]) == 2_147_483_000
    backend.close()


def test_a_database_that_never_switches_to_wal_fails_within_the_timeout(backend):
    # SQLite answers `PRAGMA journal_mode=WAL` with the mode it kept when it cannot switch (an
    # in-memory or a special file system's database), without an error: the switch is given up at
    # the deadline, with the mode it kept named, not tried again for ever. A stand-in connection:
    # no real file system at hand keeps a file out of WAL without an error.
    history = warn_history()
    compactor = backend.compactor(context_window=window_for(history, 0.65))
    compactor.compact_with_record(history, "s")
    db = compactor.pm.get_plugin("state-sqlite").db
    db.timeout = 0.2

    class KeepsItsMode:
        def __init__(self) -> None:
            self.switches = 0

        def execute(self, sql: str) -> Any:
            self.switches += sql == "PRAGMA journal_mode=WAL"
            return self

        def fetchone(self) -> tuple[str]:
            return ("delete",)

    conn = KeepsItsMode()
    started = time.monotonic()
    with no_hang(3.0), pytest.raises(StorageError, match="WAL mode.*'delete'"):
        db._wal(conn)
    assert time.monotonic() - started < 1.5 and 1 <= conn.switches < 100
