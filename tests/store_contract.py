"""What every database backend must do, written once and run against each real one.

``tests/test_store_sqlite.py``, ``test_store_postgres.py`` and ``test_store_redis.py`` each
subclass :class:`StoreContract` with a ``backend`` fixture (a :class:`Backend`: which plugins, the
connection settings, and a raw dump of everything stored), and add the faults of their own kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import socket
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from click.testing import CliRunner

from progressive_compactor import CompactionTier, ProgressiveCompactor
from progressive_compactor.cli.app import cli
from progressive_compactor.errors import ConfigError, StorageError
from progressive_compactor.models import Message, SessionState
from progressive_compactor.testing import build_history, problems, window_for
from timeouts import forked_answer

SECRET = "sk-contract-secret-7f3a9c1e5b"
"""An API key that reaches tool results and the summary: it must never be stored."""


class Backend:
    """One kind of store (``sqlite``, ``postgres``, ``redis``) and where this test keeps its data."""

    def __init__(self, kind: str, block: dict[str, Any], tmp_path: Path, server: Any = None, password: str = ""):
        self.kind, self.block, self.tmp_path, self.server, self.password = kind, block, tmp_path, server, password
        self.built: list[ProgressiveCompactor] = []

    def close(self) -> None:
        """Close every compactor built here (their pools and connections)."""
        for compactor in self.built:
            compactor.close()

    @property
    def plugins(self) -> dict[str, Any]:
        return {"state": f"state-{self.kind}", "offload": f"offload-{self.kind}", "stores": [f"store-{self.kind}"]}

    def config(self, record_none: bool = True, **blocks: Any) -> dict[str, Any]:
        """The ``config:`` section: the connection block for each of the three plugins."""
        return {
            f"state-{self.kind}": {**self.block, **blocks},
            f"store-{self.kind}": {**self.block, "record_none": record_none, **blocks},
            f"offload-{self.kind}": {**self.block, **blocks},
        }

    def overrides(self, record_none: bool = True, **blocks: Any) -> dict[str, Any]:
        return {
            "data_dir": str(self.tmp_path),
            "plugins": self.plugins,
            "config": self.config(record_none, **blocks),
        }

    def compactor(self, **overrides: Any) -> ProgressiveCompactor:
        merged = self.overrides()
        for key, value in overrides.items():
            merged[key] = {**merged[key], **value} if isinstance(value, dict) and key in merged else value
        compactor = ProgressiveCompactor("classic", **merged)
        self.built.append(compactor)
        return compactor

    def config_file(self, **extra: Any) -> Path:
        path = self.tmp_path / "fleet.yaml"
        data = {"context_window": 8000, **self.overrides(), **extra}
        path.write_text(yaml.safe_dump(data), "utf-8")
        return path

    def set_schema_version(self, version: int) -> None:
        """Pretend a newer release migrated the stored schema."""
        if self.kind == "sqlite":
            import sqlite3

            with sqlite3.connect(self.tmp_path / "compactor.sqlite3") as conn:
                conn.execute(f"PRAGMA user_version = {version}")
        elif self.kind == "postgres":
            import psycopg

            with psycopg.connect(self.block["dsn"], autocommit=True) as conn:
                conn.execute(f'UPDATE "{self.block["schema"]}".compactor_schema SET version = %s', (version,))
        else:
            client = self.server.client()
            client.set(self.block["prefix"] + "schema", version)
            client.close()

    def make_old(self, session_id: str, seconds: float) -> None:
        """Pretend every write for ``session_id`` happened ``seconds`` earlier."""
        if self.kind == "sqlite":
            import sqlite3

            with sqlite3.connect(self.tmp_path / "compactor.sqlite3") as conn:
                conn.execute(
                    "UPDATE compactor_state SET updated = updated - ? WHERE session_id = ?", (seconds, session_id)
                )
                for table in ("compactor_records", "compactor_offloads"):
                    conn.execute(
                        f"UPDATE {table} SET created = created - ? WHERE session_id = ?", (seconds, session_id)
                    )
        elif self.kind == "postgres":
            import psycopg

            schema = self.block["schema"]
            with psycopg.connect(self.block["dsn"], autocommit=True) as conn:
                ago = f"{seconds} seconds"
                conn.execute(
                    f'UPDATE "{schema}".compactor_state SET updated = updated - %s::interval WHERE session_id = %s',
                    (ago, session_id),
                )
                for table in ("compactor_records", "compactor_offloads"):
                    conn.execute(
                        f'UPDATE "{schema}".{table} SET created = created - %s::interval WHERE session_id = %s',
                        (ago, session_id),
                    )
        else:
            client = self.server.client()
            for kind in ("state", "records", "offloads"):
                key = f"{self.block['prefix']}sessions:{kind}"
                score = client.zscore(key, session_id)
                if score is not None:
                    client.zadd(key, {session_id: score - seconds})
            client.close()

    def raw(self) -> str:
        """Everything the backend stores, as text (binary values decoded), to look for secrets."""
        if self.kind == "sqlite":
            files = sorted(self.tmp_path.glob("compactor.sqlite3*"))
            return "".join(f.read_bytes().decode("utf-8", "replace") for f in files)
        if self.kind == "postgres":
            import psycopg

            schema = self.block["schema"]
            out = []
            with psycopg.connect(self.block["dsn"], autocommit=True) as conn:
                tables = conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
                ).fetchall()
                for (table,) in tables:
                    for row in conn.execute(f'SELECT * FROM "{schema}"."{table}"').fetchall():
                        out += [
                            bytes(v).decode("utf-8", "replace") if isinstance(v, (bytes, memoryview)) else str(v)
                            for v in row
                        ]
            return "\n".join(out)
        client = self.server.client()
        out = []
        for key in client.scan_iter(match=self.block["prefix"].encode() + b"*"):
            kind = client.type(key).decode()
            value: Any = {
                "string": client.get,
                "hash": client.hgetall,
                "list": lambda k: client.lrange(k, 0, -1),
                "set": client.smembers,
                "zset": lambda k: client.zrange(k, 0, -1),
            }[kind](key)
            out.append(key.decode("utf-8", "replace") + " " + repr(value))
            if isinstance(value, dict):
                out += [v.decode("utf-8", "replace") for v in value.values()]
        client.close()
        return "\n".join(out)


def runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2 mixes stderr into output by default
    except TypeError:
        return CliRunner()


def warn_history(calls: int = 10, size: int = 6000) -> list[dict[str, Any]]:
    return build_history([size] * calls)


def assert_changed_nothing_is_kept_only_when_asked(make) -> None:
    """A store keeps the record of a call that changed nothing (tier None, or a Warn with no
    result worth offloading) only with ``record_none``; a Warn that offloaded, always.
    ``make(record_none, **overrides)`` builds a compactor on the store (classic thresholds)."""
    quiet, busy = warn_history(10, 100), warn_history(10, 6000)
    for record_none in (False, True):
        none = make(record_none).compact_with_record(quiet, "none")[1]
        warned = make(record_none, context_window=window_for(quiet, 0.65))
        idle = warned.compact_with_record(quiet, "idle")[1]
        offloaded = make(record_none, context_window=window_for(busy, 0.65)).compact_with_record(busy, "busy")[1]
        assert none.tier is CompactionTier.NONE and not none.errors
        assert idle.tier is CompactionTier.WARN and not idle.offloaded and idle.tokens_after == idle.tokens_before
        assert offloaded.tier is CompactionTier.WARN and offloaded.offloaded
        kept = {sid: [r.id for r in warned.records(sid) or ()] for sid in ("none", "idle", "busy")}
        expected = [none.id], [idle.id], [offloaded.id]
        assert tuple(kept.values()) == (expected if record_none else ([], [], [offloaded.id]))
        for sid in kept:
            warned.delete_session(sid)


# --- the faults of a database server (PostgreSQL and Redis) -----------------------------------


def run_turns(worker: ProgressiveCompactor, reference: ProgressiveCompactor, history, session="s", before_turn=None):
    """Every second prefix of ``history`` on ``worker`` and on ``reference`` (one process, state in
    memory); returns the worker's (view, record) pairs and whether view and errors matched."""
    out = []
    for n, upto in enumerate(range(4, len(history) + 1, 2)):
        if before_turn is not None:
            before_turn(n)
        expected, expected_record = reference.compact_with_record(history[:upto], session)
        view, record = worker.compact_with_record(history[:upto], session)
        out.append((view, record, view == expected, record.errors == expected_record.errors))
    return out


def connect_all(worker: ProgressiveCompactor, kind: str) -> None:
    """Connect each plugin of ``kind`` and check its schema or key layout, as a worker's first
    turns do."""
    for role in ("state", "store", "offload"):
        worker.pm.get_plugin(f"{role}-{kind}").db.read_records("warm-up")


def alone(tmp_path: Path, window: int) -> ProgressiveCompactor:
    """The reference: one process, state in memory."""
    return ProgressiveCompactor("classic", context_window=window, data_dir=str(tmp_path / "alone"))


def check_restarts_go_unnoticed(backend: Backend, server: Any, tmp_path: Path) -> None:
    """A clean restart before the third turn, a crash before the sixth (Redis runs with
    ``appendfsync always``, PostgreSQL with its write-ahead log: no acknowledged write is lost):
    every view, error list, the state and the records as in one process."""
    history = warn_history(16, 5000)
    window = window_for(history, 0.8)
    worker, reference = backend.compactor(context_window=window), alone(tmp_path, window)

    def restart(n: int) -> None:
        if n in (2, 5):
            server.restart(immediate=n == 5)

    turns = run_turns(worker, reference, history, before_turn=restart)
    assert [(same, errors) for _, _, same, errors in turns] == [(True, True)] * len(turns)
    ours, theirs = worker.state("s"), reference.state("s")
    assert (ours.summary, ours.anchors, ours.covered, ours.version) == (
        theirs.summary,
        theirs.anchors,
        theirs.covered,
        theirs.version,
    )
    assert sorted(r.id for r in worker.records("s")) == sorted(t[1].id for t in turns)


def check_a_server_down_fails_open(backend: Backend, server: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The server stops for one turn: a valid view, the failures said (the password never), no
    half-written state; the next turn saves and stores again."""
    history = warn_history(14, 5000)
    window = window_for(history, 0.8)
    worker = backend.compactor(context_window=window, config=backend.config(timeout=1))
    worker.compact_with_record(history[:8], "s")
    saved = worker.state("s")
    server.stop()
    try:
        with caplog.at_level(logging.WARNING):
            view, record = worker.compact_with_record(history, "s")
    finally:
        server.start()
    assert problems(view) == []
    assert any(e.startswith("loading session state failed") for e in record.errors)
    # waited for once: the writes after it failed at once
    assert any("unreachable, not tried again" in e for e in record.errors), record.errors
    assert server.password not in "\n".join(record.errors) + caplog.text
    assert f"store-{backend.kind} failed" in caplog.text  # the record could not be stored: said, not hidden
    time.sleep(1.0)  # the pause after an unreachable server (at most the 1 s timeout) is over
    assert worker.state("s") == saved  # nothing half-written
    view, record = worker.compact_with_record(history, "s")
    assert [e for e in record.errors if "failed" in e and "emergency" not in e] == []
    assert worker.state("s").version == saved.version + 1
    assert record.id in [r.id for r in worker.records("s")]


@contextlib.contextmanager
def silent_host() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never answers (a frozen host, or a
    firewall that swallows the login): the kernel accepts, nobody reads."""
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)
    try:
        yield int(hole.getsockname()[1])
    finally:
        hole.close()


def turns_at_once(worker: ProgressiveCompactor, history: list[dict[str, Any]], count: int = 8) -> dict[int, Any]:
    """Turns of ``count`` sessions (``s0``, ``s1``...), each in a thread of its own, all at once:
    each one's (seconds, view problems, record errors)."""
    turns: dict[int, tuple[float, list[str], tuple[str, ...]]] = {}

    def serve(n: int) -> None:
        started = time.monotonic()
        view, record = worker.compact_with_record(history, f"s{n}")
        turns[n] = (time.monotonic() - started, problems(view), record.errors)

    threads = [threading.Thread(target=serve, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return turns


def check_threads_wait_for_a_silent_server_once(backend: Backend, bound: float) -> None:
    """A worker's threads serve turns of eight sessions on a server that never answers: the first
    connection is waited for (``timeout``), and the threads queued behind that wait fail at once
    (each used to wait ``timeout`` in turn: eight times the timeout for the last turn)."""
    history = warn_history()
    turns = turns_at_once(backend.compactor(context_window=window_for(history, 0.85)), history)
    assert len(turns) == 8 and all(found == [] for _, found, _ in turns.values())
    assert all(any("loading session state failed" in e for e in errors) for *_, errors in turns.values())
    slowest = max(took for took, _, _ in turns.values())
    assert slowest < bound, f"a turn took {slowest:.1f} s"


def check_a_fork_while_a_thread_connects_does_not_hang_the_child(backend: Backend) -> None:
    """A worker forked while one of the parent's threads waits for a first connection (to a
    server that never answers), holding the plugin's connection lock: that thread does not run in
    the child, nor does anything release the lock there. The child's turn must fail open within
    the timeout, not wait for it forever."""

    history = warn_history()
    worker = backend.compactor(context_window=window_for(history, 0.85))
    db = worker.pm.get_plugin(f"state-{backend.kind}").db
    connecting = threading.Thread(target=worker.compact_with_record, args=(history, "parent"))
    connecting.start()
    while db._lock.acquire(blocking=False):  # until the thread holds it, connecting
        db._lock.release()
        time.sleep(0.01)

    def child_turn() -> list[Any]:  # the child: a turn of its own
        view, record = worker.compact_with_record(history, "child")
        return [problems(view), list(record.errors)]

    try:
        what = "the forked child hung on the connection lock of its parent's thread"
        found, errors = forked_answer(child_turn, 8.0, what)
        assert found == [] and any(e.startswith("loading session state failed") for e in errors), errors
    finally:
        connecting.join()


def check_a_reply_that_trickles_in_fails_open_within_the_timeout(backend: Backend, server: Any, proxy: Any) -> None:
    """The server's answers come a byte at a time (a network that loses most packets, a choking
    proxy): each read of the socket gets something, so no socket timeout fires, and the state's
    data would take minutes to arrive. The answer is given up soon after ``timeout``; the turn
    fails open, and the next one, once answers come whole again, continues from the saved state."""
    history = warn_history()
    window = window_for(history, 0.85)
    backend.block["url" if backend.kind == "redis" else "dsn"] = (
        server.url_via(proxy.port) if backend.kind == "redis" else server.dsn_via(proxy.port)
    )
    backend.compactor(context_window=window).compact_with_record(history, "s")  # a state to read
    saved = backend.compactor().state("s")
    worker = backend.compactor(context_window=window, config=backend.config(timeout=0.5))  # has read nothing yet
    connect_all(worker, backend.kind)
    proxy.trickle = 0.05  # 20 bytes a second
    started = time.monotonic()
    try:
        view, record = worker.compact_with_record(history, "s")
    finally:
        took = time.monotonic() - started
        proxy.trickle = 0
    assert problems(view) == []
    assert any(e.startswith("loading session state failed") for e in record.errors), record.errors
    assert server.password not in " ".join(record.errors)
    assert took < 4, f"the turn took {took:.1f} s with a 0.5 s timeout"
    time.sleep(0.5)  # the pause after an unreachable server (at most the 0.5 s timeout) is over
    assert worker.state("s") == saved  # nothing lost, nothing half-written


def check_a_malformed_connection_string_is_a_config_error(
    kind: str, value: str, reason: str, password: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    """A connection string the driver cannot read, in a block or in the environment: refused by
    ``compactor config check`` and by the constructor, without connecting, with the setting's
    path (or the variable), the reason and the fix; the password shows nowhere."""
    setting = "dsn" if kind == "postgres" else "url"
    fix = "write it as postgresql://user:password@host:5432/dbname" if kind == "postgres" else "write it as redis://"
    caplog.set_level(logging.DEBUG)
    backend = Backend(kind, {setting: value, "timeout": 1}, tmp_path)
    plugins = [f"state-{kind}", f"store-{kind}", f"offload-{kind}"]

    checked = runner().invoke(cli, ["config", "check", str(backend.config_file())])
    assert checked.exit_code == 1
    lines = checked.stdout.splitlines()
    assert [line.rsplit(" @ ", 1)[1] for line in lines] == sorted(f"$.config.{p}.{setting}" for p in plugins)
    assert all(reason in line and fix in line for line in lines), lines

    with pytest.raises(ConfigError) as raised:
        ProgressiveCompactor(str(backend.config_file()))
    assert sorted(p.rsplit(" @ ", 1)[1] for p in raised.value.problems) == sorted(
        f"$.config.{p}.{setting}" for p in plugins
    )
    texts = [checked.output, "".join(traceback.format_exception(raised.value))]

    monkeypatch.setenv("FLEET_CONNECTION", value)
    with pytest.raises(ConfigError) as raised:
        ProgressiveCompactor(
            "classic", plugins={"state": plugins[0]}, config={plugins[0]: {f"{setting}_env": "FLEET_CONNECTION"}}
        )
    (problem,) = raised.value.problems
    assert problem.startswith("the environment variable FLEET_CONNECTION is not a ")
    assert problem.endswith(f" @ $.config.{plugins[0]}.{setting}_env") and reason in problem and fix in problem
    texts.append("".join(traceback.format_exception(raised.value)))
    texts += [caplog.text, *(r.getMessage() for r in caplog.records)]
    assert not [t for t in texts if password in t], "the password was shown"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def tool(call_id: str, text: str) -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id)


class StoreContract:
    """The guarantees of a database backend; ``backend`` is each test module's fixture."""

    def test_a_turn_keeps_state_records_and_offloads_that_another_worker_reads(self, backend):
        history = warn_history()
        window = window_for(history, 0.65)
        first = backend.compactor(context_window=window)
        view, record = first.compact_with_record(history, "s1")
        assert record.tier is CompactionTier.WARN and record.offloaded and problems(view) == []
        assert record.errors == ()
        other = backend.compactor(context_window=window)  # a second worker: its own connections
        assert other.state("s1") == first.state("s1") and other.state("s1").version == 1
        assert [r.id for r in other.records("s1")] == [record.id]
        for entry in record.offloaded:
            assert entry.handle == f"s1/{entry.tool_call_id}"
            assert sha(other.read_tool_result(entry.handle)) == entry.sha256
        view_again, again = other.compact_with_record(history, "s1")
        assert again.tier is CompactionTier.NONE and view_again == view
        assert other.state("s1").version == 1  # a turn that changes nothing saves nothing
        first.close()
        other.close()

    def test_the_same_views_as_one_process_with_its_state_in_memory(self, backend, tmp_path):
        history = warn_history(14, 5000)
        window = window_for(history, 0.8)
        alone = ProgressiveCompactor("classic", context_window=window, data_dir=str(tmp_path / "alone"))
        workers = [backend.compactor(context_window=window) for _ in range(2)]
        for n, upto in enumerate(range(4, len(history) + 1, 2)):
            expected = alone.compact(history[:upto], "s")
            assert workers[n % 2].compact(history[:upto], "s") == expected, f"turn {n}"

    def test_a_save_is_compare_and_set_on_the_version(self, backend):
        plugin = backend.compactor().pm.get_plugin(f"state-{backend.kind}")
        assert plugin.load_state("cas") is None
        assert plugin.save_state("cas", SessionState(summary="one", version=1)) is True
        assert plugin.save_state("cas", SessionState(summary="other one", version=1)) is False
        assert plugin.save_state("cas", SessionState(summary="three", version=3)) is False
        assert plugin.save_state("cas", SessionState(summary="two", version=2)) is True
        loaded = plugin.load_state("cas")
        assert (loaded.summary, loaded.version) == ("two", 2)

    def test_the_same_save_run_again_is_not_a_conflict(self, backend):
        """A connection lost after the server committed a save, before its reply came back, is
        run again on a new connection with the same stamp: that is the save done, not another
        worker's (a conflict would make the turn start over from the state it had just saved)."""
        db = backend.compactor().pm.get_plugin(f"state-{backend.kind}").db
        for version in (1, 2):
            assert db.save_state("again", version, f"mine-{version}", b"{}") is True
            assert db.save_state("again", version, f"mine-{version}", b"{}") is True
            assert db.save_state("again", version, "another worker's", b"{}") is False
        assert db.load_state("again", None)[:2] == (2, "mine-2")

    def test_a_state_another_worker_saved_is_read_again(self, backend):
        one = backend.compactor().pm.get_plugin(f"state-{backend.kind}")
        two = backend.compactor().pm.get_plugin(f"state-{backend.kind}")
        assert one.save_state("x", SessionState(summary="first", version=1))
        assert two.load_state("x").summary == "first"
        assert one.save_state("x", SessionState(summary="second", version=2))
        assert two.load_state("x").summary == "second"  # not the parsed copy it kept
        one.on_delete_session("x")
        assert two.load_state("x") is None
        assert one.save_state("x", SessionState(summary="new first", version=1))
        assert two.load_state("x").summary == "new first"  # same version as before, another state

    def test_two_turns_of_one_session_at_once_leave_one_valid_history(self, backend):
        history = warn_history()
        window = window_for(history, 0.85)
        workers = [backend.compactor(context_window=window) for _ in range(2)]
        gate = threading.Barrier(2)
        out: list[Any] = [None, None]

        def turn(i: int) -> None:
            gate.wait()
            out[i] = workers[i].compact_with_record(history, "dup")

        threads = [threading.Thread(target=turn, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        (view_a, rec_a), (view_b, rec_b) = out
        assert view_a == view_b and problems(view_a) == []
        # whichever saved first compacted; the other found its state (or lost the save and
        # started over from it) and had nothing left to do
        assert sorted([rec_a.tier, rec_b.tier]) == [CompactionTier.NONE, CompactionTier.FULL]
        state = workers[0].state("dup")
        assert state.summary and state.version == 1  # one compaction won; the other built on it
        assert sorted(r.id for r in workers[1].records("dup")) == sorted([rec_a.id, rec_b.id])

    def test_concurrent_async_turns_of_one_compactor_are_served_one_at_a_time(self, backend):
        history = warn_history()
        compactor = backend.compactor(context_window=window_for(history, 0.85))

        async def both() -> list[Any]:
            return await asyncio.gather(
                compactor.acompact_with_record(history, "a"),
                compactor.acompact_with_record(history, "a"),
                compactor.acompact_with_record(history, "b"),
            )

        (va, ra), (va2, ra2), (vb, rb) = asyncio.run(both())
        assert ra.tier is CompactionTier.FULL and ra2.tier is CompactionTier.NONE and rb.tier is CompactionTier.FULL
        assert va == va2 and problems(vb) == []
        assert ra.errors == ra2.errors == rb.errors == ()
        assert compactor.state("a").version == 1

    def test_a_record_is_stored_once_however_often_it_is_written(self, backend):
        compactor = backend.compactor()
        view, record = compactor.compact_with_record(warn_history(3, 100), "once")
        store = compactor.pm.get_plugin(f"store-{backend.kind}")
        store.persist_record(record)
        store.persist_record(record)
        assert [r.id for r in compactor.records("once")] == [record.id]
        assert compactor.records("nothing-here") is None

    def test_records_of_calls_that_changed_nothing_are_kept_only_when_asked(self, backend):
        assert_changed_nothing_is_kept_only_when_asked(
            lambda record_none, **overrides: backend.compactor(config=backend.config(record_none), **overrides)
        )

    def test_a_reused_call_id_with_other_text_gets_its_own_handle(self, backend):
        plugin = backend.compactor().pm.get_plugin(f"offload-{backend.kind}")
        odd = "a\x00b \ud800 lone surrogate é\r\n" + "x" * 5000
        first = plugin.offload(tool("call_0", odd), "s/1", 100)
        second = plugin.offload(tool("call_0", "other text " * 600), "s/1", 100)
        again = plugin.offload(tool("call_0", odd), "s/1", 100)
        assert first.handle.endswith("/call_0") and first.handle.startswith("_")  # "s/1" is not a plain name
        assert second.handle == f"{first.handle}.{second.sha256[:12]}"
        assert again.handle == first.handle and again.placeholder == first.placeholder
        assert plugin.read_offloaded(first.handle) == odd
        assert plugin.read_offloaded(second.handle) == "other text " * 600
        assert plugin.read_offloaded("s/nothing") is None
        assert plugin.offload(tool("call_1", "short"), "s/1", 100) is None
        assert plugin.offload(tool("call_2", first.placeholder), "s/1", 10) is None

    def test_a_call_id_or_handle_no_text_column_holds_is_offloaded_and_read_like_any_other(self, backend):
        plugin = backend.compactor().pm.get_plugin(f"offload-{backend.kind}")
        for call in ("call\x00nul", "call\ud800lone"):  # tool-call ids come from the provider, as they are
            text = f"the result of {call}\n" + "x" * 5000
            entry = plugin.offload(tool(call, text), "s", 100)
            assert entry is not None and entry.tool_call_id == call
            assert plugin.read_offloaded(entry.handle) == text
        assert plugin.read_offloaded("s/\ud800") is None  # what a model writes as a handle

    def test_the_placeholder_is_the_one_offload_files_writes(self, backend, tmp_path):
        files = ProgressiveCompactor("classic", data_dir=str(tmp_path / "files")).pm.get_plugin("offload-files")
        plugin = backend.compactor().pm.get_plugin(f"offload-{backend.kind}")
        message = tool("call_9", "\n".join(f"line {i}" for i in range(900)))
        ours, theirs = plugin.offload(message, "s1", 100), files.offload(message, "s1", 100)
        assert (ours.handle, ours.placeholder, ours.sha256, ours.chars, ours.lines) == (
            theirs.handle,
            theirs.placeholder,
            theirs.sha256,
            theirs.chars,
            theirs.lines,
        )

    def test_secrets_are_never_stored(self, backend):
        history = build_history([6000] * 8, request=f"deploy with key {SECRET}")
        first_result = next(i for i, m in enumerate(history) if m["role"] == "tool")
        history[first_result] = {**history[first_result], "content": f"OPENAI_API_KEY={SECRET}\n" + "y" * 6000}
        compactor = backend.compactor(context_window=window_for(history, 0.85))
        compactor.secrets.add(SECRET)  # the registry every plugin of this compactor writes through
        view, record = compactor.compact_with_record(history, "secret")
        assert record.tier is CompactionTier.FULL and record.offloaded
        stored = backend.raw()
        assert "[REDACTED]" in stored
        assert SECRET not in stored and SECRET[:10] not in stored and SECRET[-10:] not in stored
        if backend.password:
            assert backend.password not in stored

    def test_credentials_nobody_registered_are_never_stored(self, backend):
        from credentials import CREDENTIALS, DUMP, leaked

        assert leaked(DUMP) == list(CREDENTIALS)

        history = build_history([6000] * 8, request=f"deploy with {CREDENTIALS['GitHub token']}")
        first_result = next(i for i, m in enumerate(history) if m["role"] == "tool")
        history[first_result] = {**history[first_result], "content": DUMP + "y" * 6000}
        compactor = backend.compactor(context_window=window_for(history, 0.85))
        view, record = compactor.compact_with_record(history, "credentials")
        assert record.tier is CompactionTier.FULL and record.offloaded
        stored = backend.raw()
        assert "AWS_SECRET_ACCESS_KEY=[REDACTED]" in stored
        assert leaked(stored) == []
        assert leaked(compactor.read_tool_result(record.offloaded[0].handle)) == []

    def test_sessions_are_listed_and_deleted_everywhere(self, backend):
        history = warn_history()
        compactor = backend.compactor(context_window=window_for(history, 0.65))
        _, rec_a = compactor.compact_with_record(history, "a")
        _, rec_b = compactor.compact_with_record(history, "b")  # the same texts, other handles
        found = {(i.session_id, i.plugin) for i in compactor.sessions()}
        assert found == {(s, f"{k}-{backend.kind}") for s in "ab" for k in ("state", "store", "offload")}
        if backend.password:
            assert all(backend.password not in i.where for i in compactor.sessions())
        assert compactor.delete_session("a") == []
        assert {i.session_id for i in compactor.sessions()} == {"b"}
        assert compactor.records("a") is None and compactor.state("a") == SessionState()
        with pytest.raises(Exception, match="no offloaded tool result"):
            compactor.read_tool_result(rec_a.offloaded[0].handle)
        for entry in rec_b.offloaded:  # texts shared with the deleted session are still there
            assert sha(compactor.read_tool_result(entry.handle)) == entry.sha256

    def test_an_unreadable_state_is_started_over_and_saved_over(self, backend, caplog):
        history = warn_history()
        compactor = backend.compactor(context_window=window_for(history, 0.85))
        plugin = compactor.pm.get_plugin(f"state-{backend.kind}")
        assert plugin.db.save_state("bad", 1, "stamp", b"{not json")
        with caplog.at_level(logging.WARNING, logger="progressive_compactor"):
            view, record = compactor.compact_with_record(history, "bad")
        assert "unreadable" in caplog.text
        assert record.tier is CompactionTier.FULL and record.errors == () and problems(view) == []
        assert compactor.state("bad").version == 2 and compactor.state("bad").summary

    def test_the_command_line_reads_through_the_stores(self, backend):
        history = warn_history()
        path = backend.config_file(context_window=window_for(history, 0.65))
        compactor = ProgressiveCompactor(str(path))
        _, record = compactor.compact_with_record(history, "cli")
        compactor.close()
        handle = record.offloaded[0].handle
        run = runner()
        listed = run.invoke(cli, ["records", "cli", "--config", str(path), "--json"])
        assert listed.exit_code == 0, listed.output
        assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [record.id]
        shown = run.invoke(cli, ["show", handle, "--config", str(path), "--lines", "1:2"])
        assert shown.exit_code == 0 and sha(compactor.read_tool_result(handle)) == record.offloaded[0].sha256
        assert shown.stdout.splitlines() == compactor.read_tool_result(handle).splitlines()[:2]
        exported = backend.tmp_path / "records.jsonl"
        exported.write_text(listed.stdout)
        report = run.invoke(
            cli, ["report", str(exported), "-o", str(backend.tmp_path / "r.html"), "--config", str(path)]
        )
        assert report.exit_code == 0, report.output
        dry = run.invoke(cli, ["gc", "--older-than", "1h", "--dry-run", "--config", str(path), "--json"])
        assert json.loads(dry.stdout)["removed"] == []
        gone = run.invoke(cli, ["gc", "cli", "--config", str(path), "--json"])
        assert gone.exit_code == 0, gone.output
        removed = json.loads(gone.stdout)["removed"]
        assert {w["plugin"] for w in removed[0]["where"]} == {
            f"{k}-{backend.kind}" for k in ("state", "store", "offload")
        }
        missing = run.invoke(cli, ["show", handle, "--config", str(path)])
        assert missing.exit_code == 1 and "no offloaded tool result" in missing.stderr
        for result in (listed, shown, report, dry, gone, missing):
            if backend.password:
                assert backend.password not in result.output + (result.stderr or "")

    def test_ab_report_compares_the_variants_through_the_stores(self, backend):
        # Live traffic of two variants, every turn recorded in the store; `ab report --config` reads
        # it there and compares as it does the same records exported to JSONL files.
        path = backend.config_file()
        sessions = {"a": ["a1", "a2", "a3"], "b": ["b1", "b2", "b3"]}
        for variant, ids in sessions.items():
            compactor = backend.compactor(variant=variant, context_window=8000)
            for i, sid in enumerate(ids):
                history = build_history([2500 + 300 * i] * 8, id_prefix=f"{sid}_")
                for end in range(3, len(history) + 1, 2):
                    compactor.compact_with_record(history[:end], sid)
        run = runner()
        through = run.invoke(cli, ["ab", "report", "--config", str(path), "--json"])
        assert through.exit_code == 0, through.output
        exported = backend.tmp_path / "exported"
        exported.mkdir()
        for sid in [*sessions["a"], *sessions["b"]]:
            listed = run.invoke(cli, ["records", sid, "--config", str(path), "--json"])
            (exported / f"{sid}.jsonl").write_text(listed.stdout, "utf-8")
        from_files = run.invoke(cli, ["ab", "report", str(exported), "--json"])
        assert from_files.exit_code == 0, from_files.output
        data, expected = json.loads(through.stdout), json.loads(from_files.stdout)
        assert data["sessions"] == {"a": 3, "b": 3} and data["paired"] is False
        assert data["records"] == expected["records"] > 6 and data["per_session"] == expected["per_session"]
        assert data["cost_covers_every_turn"] is True
        assert data["metrics"]["compactions"] == expected["metrics"]["compactions"]
        if backend.password:
            assert backend.password not in through.output + (through.stderr or "")

    def test_gc_deletes_the_sessions_older_than_an_age(self, backend):
        history = warn_history()
        path = backend.config_file(context_window=window_for(history, 0.65))
        compactor = ProgressiveCompactor(str(path))
        compactor.compact_with_record(history, "old")
        compactor.compact_with_record(history, "new")
        backend.make_old("old", 8 * 86400)
        done = runner().invoke(cli, ["gc", "--older-than", "7d", "--config", str(path), "--json"])
        assert done.exit_code == 0, done.output
        assert [r["session"] for r in json.loads(done.stdout)["removed"]] == ["old"]
        assert {i.session_id for i in compactor.sessions()} == {"new"}
        assert compactor.records("old") is None and compactor.state("new").version == 1
        compactor.close()

    def test_a_schema_newer_than_this_release_is_refused(self, backend):
        compactor = backend.compactor()
        assert compactor.state("s") == SessionState()  # creates the schema
        compactor.close()
        backend.set_schema_version(99)
        fresh = backend.compactor()
        with pytest.raises(StorageError, match="newer than this release"):
            fresh.pm.get_plugin(f"state-{backend.kind}").load_state("s")
        history = warn_history()
        view, record = backend.compactor(context_window=window_for(history, 0.85)).compact_with_record(history, "s")
        assert problems(view) == [] and any("newer than this release" in e for e in record.errors)

    def test_a_forked_worker_opens_its_own_connections(self, backend):
        history = warn_history()
        compactor = backend.compactor(context_window=window_for(history, 0.65))
        compactor.compact_with_record(history[:6], "parent")  # connected before the fork
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a worker forked from a parent that had connected
            try:
                _, record = compactor.compact_with_record(history, "child")
                os.write(write, json.dumps(list(record.errors)).encode())
            finally:
                os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        assert json.loads(os.read(read, 65536) or b'"no answer"') == []
        os.close(read)
        _, record = compactor.compact_with_record(history, "parent")  # the parent's connections still work
        assert record.errors == () and record.offloaded
        assert compactor.state("child").version == 1 and compactor.state("parent").version == 1
