"""``state-redis``, ``store-redis``, ``offload-redis`` on a real Redis server.

The contract every backend keeps (``store_contract.py``), the TTL, then the faults: the server
restarts between turns (cleanly and killed), is down for a turn, drops connections (a proxy on
127.0.0.1 that closes them, sometimes after the server did the work and before the answer), is
slow (every answer held back), and stops answering (``DEBUG SLEEP``) for longer than the
timeout. Each turn completes with its state saved, or fails open; the password never shows.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any, Callable

import pytest

from progressive_compactor import CompactionTier, ProgressiveCompactor
from progressive_compactor.errors import ConfigError
from progressive_compactor.models import SessionState
from progressive_compactor.testing import problems, window_for
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


@pytest.fixture
def backend(redis_server, redis_url, unique_name, tmp_path):
    block = {"url": redis_url, "prefix": f"{unique_name}:"}
    found = Backend("redis", block, tmp_path, redis_server, redis_server.password)
    yield found
    found.close()


class TestRedisContract(StoreContract):
    pass


@pytest.fixture
def proxy(redis_server):
    found = TcpProxy(redis_server.port)
    yield found
    found.close()


def test_keys_expire_after_the_ttl_and_a_load_keeps_the_state_and_the_results_alive(backend):
    history = warn_history()
    worker = backend.compactor(context_window=window_for(history, 0.65), config=backend.config(ttl=0.6))
    view, record = worker.compact_with_record(history, "s")
    assert record.offloaded and worker.state("s").version == 1
    state = worker.pm.get_plugin("state-redis")
    for _ in range(4):  # 1.2 s of turns that only read the state: each load renews its TTL
        time.sleep(0.3)
        assert state.load_state("s").version == 1
    assert worker.records("s") is None  # records were not read: they expired
    for entry in record.offloaded:  # the session's results live as long as it is active
        assert sha(worker.read_tool_result(entry.handle)) == entry.sha256
    time.sleep(1.3)  # idle for more than twice the ttl: the state and the results expired
    assert state.load_state("s") is None
    with pytest.raises(Exception, match="no offloaded tool result"):
        worker.read_tool_result(record.offloaded[0].handle)
    assert worker.sessions() == []


@pytest.mark.parametrize(
    "state",
    [
        {"plugins": {"state": "state-files"}},  # nothing renews the results
        {"config": {"state-redis": {"ttl": 0}}},  # loads renew nothing without a ttl
        {"config": {"state-redis": {"prefix": "elsewhere:"}}},  # another prefix: other keys
    ],
)
def test_a_ttl_on_results_that_nothing_renews_is_a_config_error(state):
    """Only state-redis's loads (same server and prefix, with a ttl) keep an active session's
    results alive; any other setup would let them expire while the view names them."""
    from progressive_compactor.config import deep_merge

    url = "redis://127.0.0.1:1/0"  # never reached: the check comes first
    blocks = {name: {"url": url, "ttl": 60} for name in ("state-redis", "offload-redis")}
    renewed = {"plugins": {"state": "state-redis", "offload": "offload-redis"}, "config": blocks}
    data = deep_merge(renewed, state)
    with pytest.raises(ConfigError) as caught:
        ProgressiveCompactor(data)
    assert "@ $.config.offload-redis.ttl" in str(caught.value) and "state-redis" in str(caught.value)
    ProgressiveCompactor(deep_merge(data, {"config": {"offload-redis": {"ttl": 0}}})).close()  # kept until deleted
    ProgressiveCompactor(renewed).close()  # renewed: fine


def test_the_results_of_an_active_session_outlive_the_ttl_and_expire_once_it_is_idle(backend):
    history = warn_history()
    worker = backend.compactor(context_window=window_for(history, 0.65), config=backend.config(ttl=1))
    view, record = worker.compact_with_record(history, "s")
    assert record.tier is CompactionTier.WARN and record.offloaded
    offloader = worker.pm.get_plugin("offload-redis")
    more = [*history, {"role": "user", "content": "and now?"}]
    late = None
    for n in range(8):  # 2.4 s of turns, one every 0.3 s; a result offloaded among them
        time.sleep(0.3)
        again = worker.compact_with_record([*more, {"role": "user", "content": f"turn {n}"}], "s")[1]
        assert again.tier is CompactionTier.NONE and again.errors == ()
        if n == 2:  # 0.9 s in: the session's handles were written (or renewed) 0.9 s ago
            late = offloader.offload(tool("call_late", "late " * 1000), "s", 100)
        for entry in record.offloaded:  # every handle in the view can still be read back
            assert sha(worker.read_tool_result(entry.handle)) == entry.sha256, (n, entry.handle)
        if late is not None:
            assert sha(worker.read_tool_result(late.handle)) == late.sha256, n
    assert worker.state("s").version == 1
    time.sleep(2.1)  # idle for more than twice the ttl: nothing is kept
    assert worker.state("s").version == 0
    for entry in [*record.offloaded, late]:
        assert offloader.read_offloaded(entry.handle) is None
    client = backend.server.client()
    assert client.keys(backend.block["prefix"] + "offload*") == []
    client.close()
    assert worker.sessions() == []


def test_the_index_of_sessions_forgets_expired_sessions_though_nobody_lists_them(backend):
    worker = backend.compactor(config=backend.config(ttl=0.3))
    state, store = worker.pm.get_plugin("state-redis"), worker.pm.get_plugin("store-redis")
    offloader = worker.pm.get_plugin("offload-redis")

    def write(sid, n):
        assert state.db.save_state(sid, n, f"stamp-{n}", b"{}")
        assert store.db.add_record(f"{sid}-{n}", sid, "{}")
        assert offloader.offload(tool(f"call_{n}", f"result {n} " * 500), sid, 100) is not None

    for sid in ("a", "b", "c"):
        write(sid, 1)
    time.sleep(0.8)  # every key of a, b and c expired (results: within twice the ttl)
    for n in range(1, 13):  # the writes of another session, one every 0.05 s
        write("live", n)
        time.sleep(0.05)
    client = backend.server.client()
    for kind in ("state", "records", "offloads"):
        assert client.zrange(f"{backend.block['prefix']}sessions:{kind}", 0, -1) == [b"live"], kind
    client.close()


def test_the_connection_string_comes_from_the_environment_and_its_password_never_shows(
    redis_server, unique_name, tmp_path, monkeypatch
):
    monkeypatch.setenv("FLEET_URL", redis_server.url)
    history = warn_history()
    blocks = {"url_env": "FLEET_URL", "prefix": f"{unique_name}:"}
    compactor = ProgressiveCompactor(
        "classic",
        context_window=window_for(history, 0.65),
        data_dir=str(tmp_path),
        plugins={"state": "state-redis", "offload": "offload-redis", "stores": ["store-redis"]},
        config={"state-redis": blocks, "offload-redis": blocks, "store-redis": blocks},
    )
    view, record = compactor.compact_with_record(history, "env")
    assert record.errors == () and record.offloaded
    assert compactor.secrets.redact(f"x{redis_server.password}x") == "x[REDACTED]x"
    for info in compactor.sessions():
        assert ":***@" in info.where and redis_server.password not in info.where
    compactor.close()
    monkeypatch.delenv("FLEET_URL")
    with pytest.raises(ConfigError, match="no Redis connection string: set url .* FLEET_URL"):
        ProgressiveCompactor("classic", plugins={"state": "state-redis"}, config={"state-redis": blocks})


def test_a_wrong_password_fails_open_and_is_never_written(redis_server, unique_name, tmp_path, caplog, request):
    wrong = redis_server.url.replace(redis_server.password, "not-the-password-4c1d")
    history = warn_history()
    backend = Backend("redis", {"url": wrong, "prefix": f"{unique_name}:", "timeout": 2}, tmp_path)
    request.addfinalizer(backend.close)
    compactor = backend.compactor(context_window=window_for(history, 0.85))
    with caplog.at_level(logging.WARNING):
        view, record = compactor.compact_with_record(history, "s")
    assert problems(view) == [] and record.tier is CompactionTier.FULL
    assert any("loading session state failed" in e and "AuthenticationError" in e for e in record.errors), record.errors
    text = "\n".join(record.errors) + caplog.text
    assert "not-the-password-4c1d" not in text and ":***@127.0.0.1" in text


WRONG = "S3cret-Passw0rd-91ab"
"""The password of the malformed URLs below: it must show nowhere."""


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("redis//127.0.0.1:6379/0", "must specify one of the following schemes (redis://, rediss://, unix://)"),
        (f"redis//:{WRONG}@cache:6379/0", "schemes (redis://, rediss://, unix://) in 'redis//:***@cache:6379/0'"),
        (f"http://:{WRONG}@cache:6379/0", "must specify one of the following schemes"),
        (f"redis://:{WRONG}@cache:99999/0", "Port out of range 0-65535 in 'redis://:***@cache:99999/0'"),
        (f"redis://:{WRONG}@cache:6379x/0", "Port could not be cast to integer value as '...' in 'redis://:***@cache"),
        (f"redis://:{WRONG}/x@cache:6379/0", "Port could not be cast to integer value as '...'"),  # the password
        (f"redis://:{WRONG} x@cache:99999/0", "Port out of range 0-65535 in 'redis://:***@cache:99999/0'"),
    ],
)
def test_a_url_redis_cannot_read_is_a_config_error_naming_the_setting(url, reason, tmp_path, monkeypatch, caplog):
    check_a_malformed_connection_string_is_a_config_error("redis", url, reason, WRONG, tmp_path, monkeypatch, caplog)


def test_a_url_without_its_scheme_is_refused_with_the_fix(tmp_path):
    with pytest.raises(ConfigError) as raised:
        ProgressiveCompactor("classic", plugins={"state": "state-redis"}, config={"state-redis": {"url": "cache:6379"}})
    assert raised.value.problems == [
        "url is not a Redis URL: Redis URL must specify one of the following schemes (redis://, rediss://, unix://)"
        " in 'cache:6379'; write it as redis://[[user]:password@]host:6379/0, rediss://... for TLS, or"
        " unix:///path/to/redis.sock @ $.config.state-redis.url"
    ]


def test_a_restart_between_turns_goes_unnoticed(backend, redis_server, tmp_path):
    check_restarts_go_unnoticed(backend, redis_server, tmp_path)


def test_a_server_that_is_down_fails_open_and_the_next_turn_recovers(backend, redis_server, caplog):
    check_a_server_down_fails_open(backend, redis_server, caplog)


def test_dropped_connections_lose_nothing_and_store_nothing_twice(backend, redis_server, proxy, tmp_path):
    history = warn_history(24, 5000)
    window = window_for(history, 0.8)
    backend.block["url"] = redis_server.url_via(proxy.port)
    worker, reference = backend.compactor(context_window=window), alone(tmp_path, window)
    connect_all(worker, "redis")
    proxy.spare, proxy.rest = 4, 6  # a login (AUTH, two CLIENT SETINFO); a retry after a loss
    proxy.lose_every = 1  # an answer never arrives (the server did the work), then a few do

    def drop(n):
        if n % 3 == 1:
            proxy.drop()  # and every connection is closed now and then

    turns = run_turns(worker, reference, history, before_turn=drop)
    proxy.lose_every = 0
    assert proxy.lost >= 3
    assert [(same, errors) for _, _, same, errors in turns] == [(True, True)] * len(turns)
    assert sorted(r.id for r in worker.records("s")) == sorted(t[1].id for t in turns)  # every record once
    offloaded = [entry for _, record, _, _ in turns for entry in record.offloaded]
    assert offloaded
    for entry in offloaded:
        assert sha(worker.read_tool_result(entry.handle)) == entry.sha256


def test_a_slow_server_slows_turns_down_and_changes_nothing(backend, redis_server, proxy, tmp_path):
    history = warn_history(12, 5000)
    window = window_for(history, 0.8)
    backend.block["url"] = redis_server.url_via(proxy.port)
    worker, reference = backend.compactor(context_window=window), alone(tmp_path, window)
    proxy.delay = 0.02  # every answer 20 ms late
    turns = run_turns(worker, reference, history)
    assert [(same, errors) for _, _, same, errors in turns] == [(True, True)] * len(turns)
    assert proxy.round_trips > len(turns)


def test_a_server_that_stops_answering_fails_open_and_the_next_turn_recovers(backend, redis_server, tmp_path):
    history = warn_history()
    window = window_for(history, 0.85)
    worker = backend.compactor(context_window=window, config=backend.config(timeout=0.3))
    connect_all(worker, "redis")
    busy = redis_server.client()
    sleeper = threading.Thread(target=busy.execute_command, args=("DEBUG", "SLEEP", "1.5"))
    sleeper.start()  # the server answers nobody for 1.5 s
    time.sleep(0.1)
    view, record = worker.compact_with_record(history, "s")
    sleeper.join()
    busy.close()
    assert problems(view) == [] and record.tier is CompactionTier.FULL
    assert any("loading session state failed" in e and "Timeout" in e for e in record.errors), record.errors
    time.sleep(0.3)  # the pause after an unreachable server (at most the 0.3 s timeout) is over
    assert worker.state("s") == SessionState()
    view_again, again = worker.compact_with_record(history, "s")
    assert again.errors == () and worker.state("s").version == 1
    assert view_again == alone(tmp_path, window).compact(history, "s")


def test_a_turn_that_changes_nothing_costs_one_round_trip(backend, redis_server, proxy):
    history = warn_history()
    backend.block["url"] = redis_server.url_via(proxy.port)
    worker = backend.compactor(context_window=window_for(history, 0.65), config=backend.config(record_none=False))
    worker.compact_with_record(history, "s")  # Warn: offloads and saves
    more = [*history, {"role": "user", "content": "and now?"}]
    for n in range(5):
        before = proxy.round_trips
        view, record = worker.compact_with_record([*more, {"role": "user", "content": f"turn {n}"}], "s")
        assert record.tier is CompactionTier.NONE
        assert proxy.round_trips - before == 1


def test_the_bundled_fleet_config_runs(redis_server, tmp_path, monkeypatch):
    monkeypatch.setenv("COMPACTOR_REDIS_URL", redis_server.url)
    history = warn_history()
    compactor = ProgressiveCompactor("fleet-redis", context_window=window_for(history, 0.65), data_dir=str(tmp_path))
    sid = f"bundled-{tmp_path.name}"
    view, record = compactor.compact_with_record(history, sid)
    assert record.offloaded and record.errors == ()
    assert compactor.state(sid).version == 1 and [r.id for r in compactor.records(sid)] == [record.id]
    client = redis_server.client()
    assert 0 < client.pttl(f"compactor:state:{sid}") <= 604_800_000
    client.close()
    assert compactor.delete_session(sid) == []
    assert sid not in {i.session_id for i in compactor.sessions()}
    compactor.close()


def delete_while(worker: Any, proxy: Any, write: Callable[[], Any]) -> tuple[bool, float, list[str] | None, list[Any]]:
    """Delete session ``s`` through ``worker`` while another thread keeps calling ``write``, the
    worker's answers 20 ms late (through ``proxy``) so that the writes land between its commands:
    whether the delete returned within 5 s, how long it took, what it returned (None: it did not),
    and what the writes returned."""
    stop, written = threading.Event(), []

    def keep_writing() -> None:
        while not stop.is_set():
            written.append(write())

    proxy.delay = 0.02
    changing = threading.Thread(target=keep_writing)
    changing.start()
    while not any(written):  # the writes are going on
        time.sleep(0.001)
    errors: list[list[str]] = []
    deleter = threading.Thread(target=lambda: errors.append(worker.delete_session("s")))
    started = time.monotonic()
    deleter.start()
    try:
        deleter.join(5)
        took = time.monotonic() - started
        done = not deleter.is_alive()
    finally:
        stop.set()
        changing.join()
        deleter.join()
        proxy.delay = 0
    return done, took, errors[0] if done else None, written


def test_a_delete_of_a_session_whose_results_keep_changing_goes_through(backend, redis_server, proxy):
    # The handles are read and deleted by one script: another worker offloading into the session
    # all the while never makes the delete start over (a WATCH of the set did, for as long as the
    # writes went on). A result added after the delete is listed, so the next delete finds it.
    backend.block["url"] = redis_server.url_via(proxy.port)
    worker = backend.compactor()
    deleting = worker.pm.get_plugin("offload-redis")
    first = deleting.offload(tool("call_0", "first " * 1000), "s", 100)
    writing = Backend("redis", {**backend.block, "url": redis_server.url}, backend.tmp_path, redis_server)
    writer = writing.compactor().pm.get_plugin("offload-redis")  # another worker, straight to the server
    numbers = itertools.count(1)
    done, took, errors, wrote = delete_while(
        worker, proxy, lambda: writer.offload(tool(f"call_{next(numbers)}", "more " * 1000), "s", 100)
    )
    writing.close()
    assert done, f"the delete still started over after {took:.1f} s of writes ({len(wrote)} of them)"
    assert errors == [] and deleting.read_offloaded(first.handle) is None
    kept = [e for e in wrote if deleting.read_offloaded(e.handle) is not None]
    assert len(kept) < len(wrote)  # those written before the delete went with it
    assert not kept or "s" in {info.session_id for info in deleting.list_sessions()}
    assert worker.delete_session("s") == []
    assert all(deleting.read_offloaded(e.handle) is None for e in wrote)


@pytest.mark.parametrize("kind", ["state", "records"])
def test_a_delete_of_a_state_or_records_that_keep_changing_goes_through(backend, redis_server, proxy, kind):
    # Nothing is read before a session's state or records are deleted: the delete is one MULTI/EXEC,
    # without a WATCH that another client's write (here a TTL renewed, as every turn's load renews
    # the state's) would make start over, for ever while the writes go on.
    history = warn_history()
    backend.block["url"] = redis_server.url_via(proxy.port)
    worker = backend.compactor(context_window=window_for(history, 0.65))
    worker.compact_with_record(history, "s")
    changer = redis_server.client()
    done, took, errors, renewed = delete_while(
        worker, proxy, lambda: changer.pexpire(f"{backend.block['prefix']}{kind}:s", 60_000)
    )
    changer.close()
    assert done, f"the delete still started over after {took:.1f} s ({renewed.count(True)} renewals)"
    assert errors == []
    assert worker.records("s") is None and worker.state("s") == SessionState()


def test_when_a_session_was_written_is_the_servers_time_not_a_skewed_workers(backend, monkeypatch):
    """Workers on several hosts disagree on the time: a worker whose clock is a day behind must
    not make an active session look a day old (``gc --older-than`` would delete it) nor one
    whose clock is ahead make an idle one look new."""
    worker = backend.compactor()
    state, store = worker.pm.get_plugin("state-redis"), worker.pm.get_plugin("store-redis")
    offloader = worker.pm.get_plugin("offload-redis")
    client = backend.server.client()
    seconds, micros = client.time()
    client.close()
    server_now = seconds + micros / 1_000_000
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 86_400)  # this worker's clock is a day behind
    assert state.db.save_state("s", 1, "stamp-1", b"{}")
    assert store.db.add_record("r1", "s", "{}")
    assert offloader.offload(tool("call_0", "result " * 500), "s", 100) is not None
    monkeypatch.undo()
    for plugin in (state, store, offloader):
        (info,) = plugin.list_sessions()
        assert abs(info.updated - server_now) < 60, plugin.name


def test_threads_wait_for_a_server_that_never_answers_once_not_once_each(unique_name, tmp_path, request):
    with silent_host() as port:
        backend = Backend(
            "redis", {"url": f"redis://:pw@127.0.0.1:{port}/0", "prefix": f"{unique_name}:", "timeout": 1}, tmp_path
        )
        request.addfinalizer(backend.close)
        check_threads_wait_for_a_silent_server_once(backend, bound=2)


def test_a_reply_that_trickles_in_fails_open_within_the_timeout(backend, redis_server, proxy):
    check_a_reply_that_trickles_in_fails_open_within_the_timeout(backend, redis_server, proxy)


def test_a_fork_while_a_thread_connects_does_not_hang_the_child(unique_name, tmp_path, request):
    with silent_host() as port:
        backend = Backend(
            "redis", {"url": f"redis://:pw@127.0.0.1:{port}/0", "prefix": f"{unique_name}:", "timeout": 2}, tmp_path
        )
        request.addfinalizer(backend.close)
        check_a_fork_while_a_thread_connects_does_not_hang_the_child(backend)
