"""``state-postgres``, ``store-postgres``, ``offload-postgres`` on a real PostgreSQL server.

The contract every backend keeps (``store_contract.py``), then the faults: the server restarts
between turns (cleanly and as a crash), is down for a turn, drops connections (a proxy on
127.0.0.1 that closes them, sometimes after the server did the work and before the answer), is
slow (every answer held back), and holds a lock longer than the statement timeout. Each turn
completes with its state saved, or fails open; the password never shows.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
import time
import warnings

import psycopg
import pytest

from progressive_compactor import CompactionTier, ProgressiveCompactor
from progressive_compactor.errors import ConfigError, StorageError
from progressive_compactor.stores import postgres as pg_backend
from progressive_compactor.stores.common import MAX_TIMEOUT
from progressive_compactor.testing import build_history, problems, window_for
from servers import TcpProxy
from store_contract import (
    Backend,
    StoreContract,
    alone,
    check_a_fork_while_a_thread_connects_does_not_hang_the_child,
    check_a_malformed_connection_string_is_a_config_error,
    check_a_reply_that_trickles_in_fails_open_within_the_timeout,
    check_a_server_down_fails_open,
    check_restarts_go_unnoticed,
    check_threads_wait_for_a_silent_server_once,
    connect_all,
    run_turns,
    sha,
    silent_host,
    tool,
    warn_history,
)
from timeouts import child_exit_code, forked_while_held


@pytest.fixture
def backend(postgres_server, postgres_dsn, unique_name, tmp_path):
    block = {"dsn": postgres_dsn, "schema": unique_name}
    found = Backend("postgres", block, tmp_path, postgres_server, postgres_server.password)
    yield found
    found.close()


class TestPostgresContract(StoreContract):
    pass


@pytest.fixture
def proxy(postgres_server):
    found = TcpProxy(postgres_server.port)
    yield found
    found.close()


def test_the_schema_is_versioned_in_its_own_namespace(backend):
    backend.compactor().state("s")
    with psycopg.connect(backend.block["dsn"], autocommit=True) as conn:
        rows = conn.execute(f'SELECT component, version FROM "{backend.block["schema"]}".compactor_schema').fetchall()
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (backend.block["schema"],)
            )
        }
    assert rows == [("progressive-compactor", pg_backend.SCHEMA_VERSION)]
    assert tables == {
        "compactor_schema",
        "compactor_state",
        "compactor_records",
        "compactor_texts",
        "compactor_offloads",
    }


def test_workers_that_start_together_migrate_the_schema_once(backend, monkeypatch):
    backend.compactor().state("s")  # version 1
    step = ("ALTER TABLE {s}.compactor_records ADD COLUMN note text",)
    monkeypatch.setattr(pg_backend, "MIGRATIONS", (*pg_backend.MIGRATIONS, step))
    monkeypatch.setattr(pg_backend, "SCHEMA_VERSION", 2)
    history = build_history([3000] * 6)
    workers = [backend.compactor(context_window=window_for(history, 0.85)) for _ in range(4)]
    gate = threading.Barrier(4)
    records = []

    def turn(worker, n):
        gate.wait()
        records.append(worker.compact_with_record(history, f"s{n}")[1])

    threads = [threading.Thread(target=turn, args=(w, n)) for n, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.errors for r in records] == [()] * 4
    with psycopg.connect(backend.block["dsn"], autocommit=True) as conn:
        schema = backend.block["schema"]
        assert conn.execute(f'SELECT version FROM "{schema}".compactor_schema').fetchone() == (2,)
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = 'compactor_records'",
            (schema,),
        ).fetchall()
        assert [c for (c,) in columns].count("note") == 1


def test_the_connection_string_comes_from_the_environment_and_its_password_never_shows(
    postgres_server, unique_name, tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("FLEET_DSN", postgres_server.dsn)
    history = warn_history()
    blocks = {"dsn_env": "FLEET_DSN", "schema": unique_name}
    compactor = ProgressiveCompactor(
        "classic",
        context_window=window_for(history, 0.65),
        data_dir=str(tmp_path),
        plugins={"state": "state-postgres", "offload": "offload-postgres", "stores": ["store-postgres"]},
        config={"state-postgres": blocks, "offload-postgres": blocks, "store-postgres": blocks},
    )
    view, record = compactor.compact_with_record(history, "env")
    assert record.errors == () and record.offloaded
    assert compactor.secrets.redact(f"x{postgres_server.password}x") == "x[REDACTED]x"
    for info in compactor.sessions():
        assert ":***@" in info.where and postgres_server.password not in info.where
    compactor.close()
    monkeypatch.delenv("FLEET_DSN")
    with pytest.raises(ConfigError, match="no PostgreSQL connection string: set dsn .* FLEET_DSN"):
        ProgressiveCompactor("classic", plugins={"state": "state-postgres"}, config={"state-postgres": blocks})


def test_a_wrong_password_fails_open_and_is_never_written(postgres_server, unique_name, tmp_path, caplog, request):
    wrong = postgres_server.dsn.replace(postgres_server.password, "not-the-password-4c1d")
    history = warn_history()
    backend = Backend("postgres", {"dsn": wrong, "schema": unique_name, "timeout": 2}, tmp_path)
    request.addfinalizer(backend.close)
    compactor = backend.compactor(context_window=window_for(history, 0.85))
    with caplog.at_level(logging.WARNING):
        view, record = compactor.compact_with_record(history, "s")
    assert problems(view) == [] and record.tier is CompactionTier.FULL
    assert any("loading session state failed" in e and "password authentication failed" in e for e in record.errors)
    text = "\n".join(record.errors) + caplog.text
    assert "not-the-password-4c1d" not in text and ":***@127.0.0.1" in text


WRONG = "S3cret-Passw0rd-91ab"
"""The password of the malformed connection strings below: it must show nowhere."""


@pytest.mark.parametrize(
    ("dsn", "reason"),
    [
        (
            f"postgresql+psycopg://agents:{WRONG}@db:5432/agents",
            "'postgresql+psycopg:'; libpq reads only postgresql://",
        ),
        ("http://db.internal:5432/agents", "starts with 'http:'; libpq reads only postgresql:// and postgres://"),
        (f"postgresql//agents:{WRONG}@db:5432/agents", 'missing "=" after "postgresql//agents:***@db:5432/agents"'),
        (
            f"postgresql://agents:{WRONG}@db:99999/agents",
            "a port is not a number from 1 to 65535 in 'postgresql://agents:***@db:99999/agents'",
        ),
        (
            f"host=db port=5432,70000 password={WRONG}",
            "a port is not a number from 1 to 65535 in 'host=db port=5432,70000 password=***'",
        ),
        (
            f"postgresql://agents:{WRONG}/x@db:5432/agents",
            "a port is not a number from 1 to 65535 in 'postgresql://agents:***@db:5432/agents'",
        ),
        (f"host=db dbname=agents pasword={WRONG}", 'invalid connection option "pasword"'),
        (f"postgresql://agents:{WRONG} x@db:5432/agents", 'unexpected spaces found in "***"'),
    ],
)
def test_a_dsn_libpq_cannot_read_is_a_config_error_naming_the_setting(dsn, reason, tmp_path, monkeypatch, caplog):
    check_a_malformed_connection_string_is_a_config_error("postgres", dsn, reason, WRONG, tmp_path, monkeypatch, caplog)


def test_a_sqlalchemy_url_is_refused_with_the_fix(tmp_path):
    with pytest.raises(ConfigError) as raised:
        ProgressiveCompactor(
            "classic",
            plugins={"state": "state-postgres"},
            config={"state-postgres": {"dsn": f"postgresql+psycopg://agents:{WRONG}@db:5432/agents"}},
        )
    assert raised.value.problems == [
        "dsn is not a libpq connection string: 'postgresql+psycopg://agents:***@db:5432/agents' starts with"
        " 'postgresql+psycopg:'; libpq reads only postgresql:// and postgres:// (an SQLAlchemy URL: drop its"
        " +driver); write it as postgresql://user:password@host:5432/dbname, or host=... port=5432 dbname=..."
        " user=... @ $.config.state-postgres.dsn"
    ]


def test_what_psycopg_logs_never_holds_the_password(postgres_server, unique_name, tmp_path, caplog, monkeypatch):
    """Should a connection string that libpq cannot read reach the driver after all, what it says
    (which repeats it whole) is masked, as is anything psycopg and its pool log while a pool is open."""
    monkeypatch.setattr(
        pg_backend, "_UNREACHABLE", pg_backend.Pauses("unreachable")
    )  # the server is not marked down for the next tests
    loggers = [logging.getLogger("psycopg.pool"), logging.getLogger("psycopg")]
    before = [list(logger.filters) for logger in loggers]  # pools other tests left open keep their filter
    backend = Backend("postgres", {"dsn": postgres_server.dsn, "schema": unique_name, "timeout": 1}, tmp_path)
    compactor = backend.compactor()
    try:
        database = compactor.pm.get_plugin("state-postgres").db
        database.dsn = postgres_server.dsn.replace("postgresql://", "postgresql+psycopg://")  # never checked
        with caplog.at_level(logging.DEBUG):
            view, record = compactor.compact_with_record(warn_history(), "s")
            logging.getLogger("psycopg.pool").warning("conninfo: password=%s", postgres_server.password)
            logging.getLogger("psycopg").warning("raw: %s", postgres_server.password)
            logging.getLogger("psycopg").warning("failed", exc_info=ValueError(f"no: {postgres_server.dsn}"))
        assert any("loading session state failed" in e for e in record.errors), record.errors
        assert "postgresql+psycopg://compactor:***@" in "\n".join(record.errors) + caplog.text
        text = caplog.text + "\n".join(r.getMessage() for r in caplog.records) + "\n".join(record.errors)
        assert postgres_server.password not in text
    finally:
        backend.close()
    assert [list(logger.filters) for logger in loggers] == before  # as it was once its pools are closed


def test_a_restart_between_turns_goes_unnoticed(backend, postgres_server, tmp_path):
    check_restarts_go_unnoticed(backend, postgres_server, tmp_path)


def test_a_server_that_is_down_fails_open_and_the_next_turn_recovers(backend, postgres_server, caplog):
    check_a_server_down_fails_open(backend, postgres_server, caplog)


def test_a_pool_still_waiting_to_reconnect_does_not_fail_a_server_that_is_back(backend, monkeypatch):
    # After failed connects the pool waits longer and longer before it tries again: a server that
    # is back meanwhile is used over a connection of its own, not reported unreachable.
    from psycopg_pool import PoolTimeout

    worker = backend.compactor(config=backend.config(timeout=1))
    worker.compact_with_record(warn_history(3, 100), "s")
    saved = worker.state("s")
    pool = worker.pm.get_plugin("state-postgres").db._ready()

    def waiting(*args, **kwargs):
        raise PoolTimeout("couldn't get a connection after 1.00 sec")

    monkeypatch.setattr(pool, "connection", waiting)
    assert worker.state("s") == saved
    view, record = worker.compact_with_record(warn_history(4, 100), "s")
    assert record.errors == () and problems(view) == []
    monkeypatch.undo()
    assert worker.state("s").version == saved.version
    assert record.id in [r.id for r in worker.records("s")]


def test_dropped_connections_lose_nothing_and_store_nothing_twice(backend, postgres_server, proxy, tmp_path):
    history = warn_history(20, 5000)
    window = window_for(history, 0.8)
    backend.block["dsn"] = postgres_server.dsn_via(proxy.port)
    worker, reference = backend.compactor(context_window=window), alone(tmp_path, window)
    connect_all(worker, "postgres")
    proxy.lose_every = 3  # every third answer never arrives: the server did the work

    def drop(n):
        if n % 3 == 1:
            proxy.drop()  # and every connection is closed now and then

    turns = run_turns(worker, reference, history, before_turn=drop)
    proxy.lose_every = 0
    assert proxy.lost >= 3
    assert all(same for _, _, same, _ in turns)  # every view as in one process with state in memory
    # One retry hides a lost answer. The pool's own connection checks also take answers, so now and
    # then a statement and its retry both lose theirs: that turn says so and starts from the history
    # (the same view); nothing else may differ.
    unlucky = [record for _, record, _, errors in turns if not errors]
    assert len(unlucky) <= 2
    assert all("server closed the connection" in e for record in unlucky for e in record.errors)
    stored = [r.id for r in worker.records("s")]
    assert sorted(stored) == sorted(t[1].id for t in turns)  # every record once
    offloaded = [entry for _, record, _, _ in turns for entry in record.offloaded]
    assert offloaded
    for entry in offloaded:
        assert sha(worker.read_tool_result(entry.handle)) == entry.sha256


def test_a_slow_server_slows_turns_down_and_changes_nothing(backend, postgres_server, proxy, tmp_path):
    history = warn_history(12, 5000)
    window = window_for(history, 0.8)
    backend.block["dsn"] = postgres_server.dsn_via(proxy.port)
    worker, reference = backend.compactor(context_window=window), alone(tmp_path, window)
    proxy.delay = 0.02  # every answer 20 ms late
    turns = run_turns(worker, reference, history)
    assert [(same, errors) for _, _, same, errors in turns] == [(True, True)] * len(turns)
    assert proxy.round_trips > len(turns)


def test_a_statement_past_the_timeout_fails_open_and_the_next_turn_recovers(backend, tmp_path):
    history = warn_history()
    window = window_for(history, 0.85)
    worker = backend.compactor(context_window=window, config=backend.config(timeout=0.5))
    assert worker.state("s").version == 0  # the tables exist
    schema = backend.block["schema"]
    with psycopg.connect(backend.block["dsn"]) as blocker:  # writes wait for it; reads do not
        blocker.execute(f'LOCK TABLE "{schema}".compactor_state IN EXCLUSIVE MODE')
        view, record = worker.compact_with_record(history, "s")
        blocker.rollback()
    assert problems(view) == [] and record.tier is CompactionTier.FULL
    assert any("saving session state failed" in e and "statement timeout" in e for e in record.errors), record.errors
    assert worker.state("s").version == 0
    view_again, again = worker.compact_with_record(history, "s")
    assert again.errors == () and worker.state("s").version == 1
    assert view_again == view == alone(tmp_path, window).compact(history, "s")


def test_a_turn_that_changes_nothing_costs_one_round_trip(backend, postgres_server, proxy):
    history = warn_history()
    backend.block["dsn"] = postgres_server.dsn_via(proxy.port)
    worker = backend.compactor(context_window=window_for(history, 0.65), config=backend.config(record_none=False))
    worker.compact_with_record(history, "s")  # Warn: offloads and saves
    more = [*history, {"role": "user", "content": "and now?"}]
    for n in range(5):
        before = proxy.round_trips
        view, record = worker.compact_with_record([*more, {"role": "user", "content": f"turn {n}"}], "s")
        assert record.tier is CompactionTier.NONE
        assert proxy.round_trips - before == 1


def test_the_bundled_fleet_config_runs(postgres_server, tmp_path, monkeypatch):
    monkeypatch.setenv("COMPACTOR_POSTGRES_DSN", postgres_server.dsn)
    history = warn_history()
    compactor = ProgressiveCompactor("fleet-postgres", context_window=window_for(history, 0.65), data_dir=str(tmp_path))
    sid = f"bundled-{tmp_path.name}"
    view, record = compactor.compact_with_record(history, sid)
    assert record.offloaded and record.errors == ()
    assert compactor.state(sid).version == 1 and [r.id for r in compactor.records(sid)] == [record.id]
    assert compactor.delete_session(sid) == []
    assert sid not in {i.session_id for i in compactor.sessions()}
    compactor.close()


def test_a_large_text_is_stored_once_however_many_handles_name_it(backend):
    from progressive_compactor.models import Message

    plugin = backend.compactor().pm.get_plugin("offload-postgres")
    text = "a large result\n" * 20_000
    handles = {
        plugin.offload(Message(role="tool", content=text, tool_call_id=c), s, 100).handle
        for c in ("c1", "c2")
        for s in ("s1", "s2")
    }
    assert handles == {"s1/c1", "s1/c2", "s2/c1", "s2/c2"}
    schema = backend.block["schema"]
    with psycopg.connect(backend.block["dsn"], autocommit=True) as conn:
        assert conn.execute(f'SELECT count(*) FROM "{schema}".compactor_texts').fetchone() == (1,)
        assert conn.execute(f'SELECT count(*) FROM "{schema}".compactor_offloads').fetchone() == (4,)
    plugin.on_delete_session("s1")
    assert plugin.read_offloaded("s2/c1") == text
    plugin.on_delete_session("s2")
    with psycopg.connect(backend.block["dsn"], autocommit=True) as conn:
        assert conn.execute(f'SELECT count(*) FROM "{schema}".compactor_texts').fetchone() == (0,)


def test_a_server_that_stops_answering_fails_open_and_the_next_turn_recovers(backend, postgres_server, proxy, tmp_path):
    history = warn_history()
    window = window_for(history, 0.85)
    backend.block["dsn"] = postgres_server.dsn_via(proxy.port)
    worker = backend.compactor(context_window=window, config=backend.config(timeout=0.5))
    connect_all(worker, "postgres")
    proxy.delay = 30  # the answers stop coming (a frozen server, a network that lost the way back)
    started = time.monotonic()
    view, record = worker.compact_with_record(history, "s")
    took = time.monotonic() - started
    proxy.delay = 0
    assert problems(view) == [] and record.tier is CompactionTier.FULL
    assert took < 5, took  # the statement's connection is given up soon after the timeout
    assert any("loading session state failed" in e and "no answer" in e for e in record.errors), record.errors
    assert postgres_server.password not in " ".join(record.errors)
    time.sleep(0.5)  # the pause after an unreachable server (at most the 0.5 s timeout) is over
    view_again, again = worker.compact_with_record(history, "s")
    assert again.errors == () and worker.state("s").version == 1
    assert view_again == alone(tmp_path, window).compact(history, "s")


def test_a_lost_connection_with_the_others_frozen_fails_open_within_the_timeout(backend, postgres_server, proxy):
    # One pooled connection is lost mid-statement while the server stops answering the others
    # (a network that fails in parts). The retry replaces the idle connections without talking
    # to them: checking each one would wait for answers that never come.
    backend.block["dsn"] = postgres_server.dsn_via(proxy.port)
    worker = backend.compactor(config=backend.config(timeout=0.5))
    worker.compact_with_record(warn_history(3, 100), "s")
    pool = worker.pm.get_plugin("state-postgres").db._ready()
    with pool.connection(), pool.connection(), pool.connection():
        pass  # three connections idle in the pool now
    assert pool.get_stats()["pool_available"] >= 2
    proxy.spare, proxy.lose_every, proxy.delay = 0, 1, 30  # the next answer lost, every later one late
    started = time.monotonic()
    view, record = worker.compact_with_record(warn_history(4, 100), "s")
    took = time.monotonic() - started
    proxy.lose_every, proxy.delay = 0, 0
    assert proxy.lost >= 1
    assert problems(view) == []
    assert took < 10, took
    assert record.errors and all(postgres_server.password not in e for e in record.errors)


def test_a_worker_forked_while_the_watchdog_holds_its_lock_does_not_hang(backend):
    worker = backend.compactor()
    assert worker.state("s").version == 0  # the watchdog's thread runs
    held, forked = threading.Event(), threading.Event()

    def hold() -> None:  # as the watchdog's thread holds it for an instant now and then
        with pg_backend.WATCHDOG._lock:
            held.set()
            forked.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if worker.state("s").version == 0 else 2
        finally:
            os._exit(code)
    forked.set()
    holder.join()
    assert child_exit_code(pid, what="the forked worker hung") == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_worker_forked_while_a_thread_masks_the_driver_logs_connects(backend):
    """Forked while another thread attaches (or detaches) the masking of psycopg's logs, which
    the child's first connection attaches too."""
    worker = backend.compactor()  # not connected yet
    assert forked_while_held(pg_backend.DRIVER_LOGS._lock, lambda: worker.state("s").version) == 0


def test_a_text_offloaded_while_another_session_naming_it_is_deleted_fails_neither(backend):
    plugins = [backend.compactor().pm.get_plugin("offload-postgres") for _ in range(2)]  # two workers
    text = "the same file, read in two sessions\n" * 200
    errors: list[str] = []

    def serve(plugin, session: str) -> None:
        for n in range(150):
            try:
                entry = plugin.offload(tool(f"call_{n}", text), session, 100)
                assert plugin.read_offloaded(entry.handle) == text
                plugin.on_delete_session(session)
            except Exception as exc:  # noqa: BLE001 - each is a failure of the test
                errors.append(f"{session}: {type(exc).__name__}: {exc}")

    workers = [threading.Thread(target=serve, args=(plugin, s)) for plugin, s in zip(plugins, "AB", strict=True)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    assert "the same file" not in backend.raw()  # the text went with the last session naming it


@pytest.mark.parametrize(
    "timeout, statement, idle", [(0.5, "500ms", "3s"), (10, "10s", "22s"), (MAX_TIMEOUT, "2147483s", "2147483647ms")]
)
def test_every_connection_bounds_its_statements_and_its_idle_transactions(backend, timeout, statement, idle):
    worker = backend.compactor(config=backend.config(timeout=timeout))
    pool = worker.pm.get_plugin("state-postgres").db._ready()
    with pool.connection() as conn:
        shown = (
            conn.execute("SHOW statement_timeout").fetchone()[0],
            conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()[0],
        )
    assert shown == (statement, idle)  # 2 x (timeout + 1 s), at most PostgreSQL's 32-bit limit


def test_a_worker_stopped_inside_a_transaction_blocks_the_others_for_a_bounded_time(backend):
    # A worker stopped (SIGSTOP, a debugger, a frozen VM, a network lost without a reset) inside
    # an offload's transaction holds the text's row lock, and no watchdog of its own runs to give
    # it up: the server ends a session idle in a transaction for 2 x (timeout + 1 s), its locks
    # with it, and the other workers' offloads and deletes of that text go through again.
    timeout = 0.5
    config = backend.config(timeout=timeout)
    text = "the same file, read by two workers\n" * 200
    other = backend.compactor(config=config).pm.get_plugin("offload-postgres")
    other.offload(tool("call_0", text), "kept", 100)  # stored: a delete of "kept" must lock it too
    stopped = backend.compactor(config=config).pm.get_plugin("offload-postgres")
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with a thread running
        pid = os.fork()
    if pid == 0:  # the child: a worker that stops once its offload's transaction holds the lock
        try:
            execute = psycopg.Connection.execute

            def stop_once_locked(conn, query, *args, **kwargs):
                cursor = execute(conn, query, *args, **kwargs)
                if str(query).startswith("INSERT INTO") and "compactor_texts" in str(query):
                    os.write(write, b"locked")
                    os.kill(os.getpid(), signal.SIGSTOP)
                return cursor

            psycopg.Connection.execute = stop_once_locked
            stopped.offload(tool("call_1", text), "stopped", 100)
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert select.select([read], [], [], 20)[0], "the worker never took the lock"
        locked = time.monotonic()
        failures = []
        for work in (
            lambda: other.offload(tool("call_2", text), "other", 100),
            lambda: other.on_delete_session("kept"),
        ):
            with pytest.raises(StorageError) as failed:
                work()
            failures.append(str(failed.value))
        assert all("statement timeout" in f for f in failures), failures  # both wait for the lock
        bound = 2 * (timeout + pg_backend.ANSWER_GRACE) + timeout + 2  # the server's limit, a wait, slack
        while True:
            try:
                entry = other.offload(tool("call_2", text), "other", 100)
                break
            except StorageError as exc:
                assert time.monotonic() - locked < bound, f"still locked after {bound:g} s: {exc}"
        took = time.monotonic() - locked
        assert entry.handle == "other/call_2" and took < bound, took
        other.on_delete_session("kept")  # at once: nothing holds the lock any more
        assert other.read_offloaded("kept/call_0") is None and other.read_offloaded("other/call_2") == text
        assert other.read_offloaded("stopped/call_1") is None  # the stopped worker's transaction ended, rolled back
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)


def test_a_server_that_never_answers_a_login_is_waited_for_once_per_turn(unique_name, tmp_path, request):
    """A host that accepts connections and never answers (frozen, or a firewall that swallows the
    login): the first turn waits ``timeout`` once, not once for the pool and again to learn why."""
    import socket

    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)  # the kernel accepts; nobody ever answers
    request.addfinalizer(hole.close)
    dsn = f"postgresql://agents:pw@127.0.0.1:{hole.getsockname()[1]}/agents"
    backend = Backend("postgres", {"dsn": dsn, "schema": unique_name, "timeout": 2}, tmp_path)
    request.addfinalizer(backend.close)
    history = warn_history()
    worker = backend.compactor(context_window=window_for(history, 0.85))
    started = time.monotonic()
    view, record = worker.compact_with_record(history, "s")
    waited = time.monotonic() - started
    assert problems(view) == [] and any("loading session state failed" in e for e in record.errors)
    assert any("timeout" in e for e in record.errors), record.errors  # why, said
    assert waited < 2 + 0.9, waited


def test_threads_wait_for_a_server_that_never_answers_once_not_once_each(unique_name, tmp_path, request):
    with silent_host() as port:
        dsn = f"postgresql://agents:pw@127.0.0.1:{port}/agents"
        backend = Backend("postgres", {"dsn": dsn, "schema": unique_name, "timeout": 2}, tmp_path)
        request.addfinalizer(backend.close)
        check_threads_wait_for_a_silent_server_once(backend, bound=4)


def test_a_reply_that_trickles_in_fails_open_within_the_timeout(backend, postgres_server, proxy):
    check_a_reply_that_trickles_in_fails_open_within_the_timeout(backend, postgres_server, proxy)


def test_a_server_silent_after_the_login_fails_open_within_a_few_timeouts_and_leaves_no_thread(
    backend, postgres_server, proxy
):
    """A server that lets a new connection log in, then never answers its first statement (the
    pool's ``statement_timeout``, sent outside any turn's statement): the turn fails open within a
    few timeouts, and no pool thread is left waiting for the answer (it waited forever, and the
    pool's close waited 5 s for it)."""
    backend.block["dsn"] = postgres_server.dsn_via(proxy.port)
    running = set(threading.enumerate())  # another test's compactor may still have its pools open
    before = proxy.round_trips
    login = psycopg.connect(backend.block["dsn"])
    proxy.hold_after = proxy.round_trips - before  # each connection's answers after its login
    login.close()
    worker = backend.compactor(config=backend.config(timeout=0.5))
    started = time.monotonic()
    try:
        view, record = worker.compact_with_record(warn_history(4, 100), "s")
        took = time.monotonic() - started
        backend.close()
        waiting = time.monotonic() + 3
        while True:
            left = sorted(t.name for t in set(threading.enumerate()) - running if "-postgres-worker-" in t.name)
            if not left or time.monotonic() > waiting:
                break
            time.sleep(0.05)
    finally:
        proxy.hold_after = 0
    assert problems(view) == [] and any("loading session state failed" in e for e in record.errors)
    assert took < 5, f"the turn took {took:.1f} s with a 0.5 s timeout"
    assert left == []


def test_a_fork_while_a_thread_connects_does_not_hang_the_child(unique_name, tmp_path, request):
    with silent_host() as port:
        backend = Backend(
            "postgres",
            {"dsn": f"postgresql://agents:pw@127.0.0.1:{port}/agents", "schema": unique_name, "timeout": 2},
            tmp_path,
        )
        request.addfinalizer(backend.close)
        check_a_fork_while_a_thread_connects_does_not_hang_the_child(backend)
