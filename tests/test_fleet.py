"""A fleet of worker processes behaves as one process, with each database store.

* The fleet test: 4 worker processes serve every turn of 20 corpus sessions (sessions side by
  side, each turn on a random idle worker), state, records and results in PostgreSQL, then Redis,
  then SQLite. Every view equals what one process with its state in memory produces, every record
  is stored exactly once, and every offloaded result reads back byte-identical from every worker.
* Duplicate delivery: the same turn sent to two workers at once gives both the one view.
* The kill test: workers are killed with SIGKILL at random points of 50 turns (in the middle of
  loading, offloading, saving, storing a record, or just after); nothing is left torn, and the
  next turn of that session, on another worker, succeeds.

The summarizer is the offline extractive one, so that views are deterministic.
"""

from __future__ import annotations

import logging
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fleet_workers import KILL_POINTS, Fleet, load_session, reference, text_hash, turn_points
from progressive_compactor import ProgressiveCompactor
from progressive_compactor.errors import ConfigError
from store_contract import Backend

WINDOW = 16_000
SESSIONS = 20


@pytest.fixture(params=["postgres", "redis", "sqlite"])
def backend(request, tmp_path, unique_name):
    kind = request.param
    if kind == "postgres":
        server = request.getfixturevalue("postgres_server")
        dsn = request.getfixturevalue("postgres_dsn")
        found = Backend(kind, {"dsn": dsn, "schema": unique_name}, tmp_path, server, server.password)
    elif kind == "redis":
        server = request.getfixturevalue("redis_server")
        url = request.getfixturevalue("redis_url")
        found = Backend(kind, {"url": url, "prefix": f"{unique_name}:"}, tmp_path, server, server.password)
    else:
        found = Backend(kind, {}, tmp_path)
    yield found
    found.close()


def fleet_overrides(backend: Backend, window: int = WINDOW) -> dict[str, Any]:
    return {"context_window": window, **backend.overrides(record_none=True)}


def alone_overrides(tmp_path: Path, window: int = WINDOW) -> dict[str, Any]:
    """One process: state in memory, results in files, every record in a JSONL file."""
    return {
        "context_window": window,
        "data_dir": str(tmp_path / "alone"),
        "config": {"store-jsonl": {"record_none": True}},
    }


def corpus_turns(corpus_dir: Path, count: int) -> dict[str, list[int]]:
    files = sorted(corpus_dir.glob("*.jsonl"))[:count]
    return {f.stem: turn_points(load_session(f)) for f in files}


@pytest.mark.corpus
def test_a_fleet_of_four_workers_behaves_as_one_process(backend, corpus_dir, tmp_path):
    turns = corpus_turns(corpus_dir, SESSIONS)
    assert len(turns) == SESSIONS
    expected = reference(alone_overrides(tmp_path), corpus_dir, turns)
    with Fleet(4, fleet_overrides(backend), corpus_dir, seed=11) as fleet:
        got, _ = fleet.serve(turns)
        assert sorted(got) == sorted(expected)
        assert [k for k in expected if got[k]["view"] != expected[k]["view"]] == []
        assert [k for k in expected if got[k]["errors"] != expected[k]["errors"]] == []
        assert [k for k in got if got[k]["problems"]] == []
        assert len({r["pid"] for r in got.values()}) == 4
        assert all(len({got[(sid, u)]["pid"] for u in points}) >= 2 for sid, points in turns.items())
        compactions = sum(1 for r in expected.values() if r["tier"])
        assert compactions > 100  # the window makes these sessions compact, all tiers included
        assert {r["tier"] for r in expected.values()} == {0, 1, 2, 3, 4}

        for sid, points in turns.items():  # every record stored exactly once
            stored = fleet.workers[len(sid) % 4].call("records", sid)
            assert sorted(stored) == sorted(got[(sid, u)]["record"] for u in points), sid

        offloaded = {h: s for r in got.values() for h, s in r["offloaded"]}
        texts = {h: s for r in expected.values() for h, s in r["texts"].items()}
        assert len(offloaded) > 50 and offloaded == texts  # same handles, same texts
        for reads in fleet.read_everywhere(sorted(offloaded)):
            assert reads == offloaded  # byte-identical from every worker


@pytest.mark.corpus
def test_a_turn_delivered_to_two_workers_at_once_gives_one_view(backend, corpus_dir, tmp_path):
    turns = {sid: points[:25] for sid, points in corpus_turns(corpus_dir, 3).items()}
    expected = reference(alone_overrides(tmp_path, 8000), corpus_dir, turns)
    with Fleet(2, fleet_overrides(backend, 8000), corpus_dir) as fleet:
        first, second = fleet.workers
        for sid, points in turns.items():
            for upto in points:
                for worker in (first, second):
                    worker.conn.send(("turn", sid, upto, None))
                a, b = first.conn.recv(), second.conn.recv()
                want = expected[(sid, upto)]
                assert a["view"] == b["view"] == want["view"], (sid, upto)
                assert [e for e in a["errors"] + b["errors"] if "failed" in e] == []
                stored = first.call("records", sid)
                assert a["record"] in stored and b["record"] in stored
        compacted = sum(1 for (sid, upto), r in expected.items() if r["tier"])
        assert compacted >= 10


@pytest.mark.corpus
def test_workers_killed_at_random_points_leave_nothing_torn(backend, corpus_dir, tmp_path, caplog):
    rng = random.Random(20240611)
    sessions = corpus_turns(corpus_dir, 4)
    picked = sorted(sessions, key=lambda s: -len(sessions[s]))[:2]
    order = [
        (sid, upto)
        for pair in zip(*(sessions[s][:25] for s in picked), strict=True)
        for sid, upto in zip(picked, pair, strict=True)
    ]
    assert len(order) == 50
    overrides = fleet_overrides(backend, 6000)  # a small window: most turns offload, summarize or truncate
    kills, after_kill, completed = 0, 0, []
    with Fleet(3, overrides, corpus_dir) as fleet:
        last_killed: Any = None
        pending_check: set[str] = set()
        for sid, upto in order:
            alive = [w for w in fleet.workers if w.process.is_alive()]
            for dead in [w for w in fleet.workers if not w.process.is_alive()]:
                fleet.replace(dead)  # died just after its last answer (its timer fired late)
                kills += 1
            worker = rng.choice([w for w in alive if w is not last_killed] or alive)
            kill = (rng.choice(KILL_POINTS), rng.uniform(0, 0.003)) if rng.random() < 0.5 else None
            worker.wait_ready()
            try:
                worker.conn.send(("turn", sid, upto, kill))
                result = worker.conn.recv()
            except (EOFError, OSError):  # killed in the middle of the turn (or just before it)
                kills += 1
                last_killed = fleet.replace(worker)
                pending_check.add(sid)
                continue
            completed.append((sid, result))
            assert result["problems"] == []
            assert [e for e in result["errors"] if "failed" in e or "did not match" in e] == [], result["errors"]
            if sid in pending_check:  # the next turn of a session whose worker was killed
                pending_check.discard(sid)
                after_kill += 1
        assert kills >= 8 and after_kill >= 5
        spawned = fleet.spawned
    assert spawned == 3 + kills

    checker = ProgressiveCompactor("default", **overrides)
    with caplog.at_level(logging.WARNING, logger="progressive_compactor"):
        for sid in picked:
            state = checker.state(sid)
            assert state.version >= 1
            for entry in state.offloaded.values():
                assert text_hash(checker.read_tool_result(entry.handle)) == entry.sha256
            records = checker.records(sid) or []
            ids = [r.id for r in records]
            assert len(ids) == len(set(ids))
            assert {r["record"] for s, r in completed if s == sid} <= set(ids)  # every answered turn's record
            for record in records:
                for entry in record.offloaded:
                    assert text_hash(checker.read_tool_result(entry.handle)) == entry.sha256
    assert "unreadable" not in caplog.text
    checker.close()
    if backend.kind == "sqlite":
        with sqlite3.connect(tmp_path / "compactor.sqlite3") as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# --- configs, connection strings, and tests that need a server --------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "redis"])
def test_a_bundled_fleet_config_is_three_plugins_of_one_backend(kind):
    from progressive_compactor import load_config

    selection = load_config(f"fleet-{kind}").plugins
    assert (selection.state, selection.offload, selection.stores) == (
        f"state-{kind}",
        f"offload-{kind}",
        (f"store-{kind}",),
    )


@pytest.mark.parametrize(
    ("dsn", "password", "shown"),
    [
        ("postgresql://app:s3cr3t-pw@db:5432/agents", "s3cr3t-pw", "postgresql://app:***@db:5432/agents"),
        ("host=db password=s3cr3t-pw user=app", "s3cr3t-pw", "host=db password=*** user=app"),
        ("host=db password='s3 cr3t' user=app", "s3 cr3t", "host=db password=*** user=app"),
        ("redis://:s3cr3t-pw@cache:6379/0", "s3cr3t-pw", "redis://:***@cache:6379/0"),
        ("redis://cache:6379/0?password=s3cr3t-pw", "s3cr3t-pw", "redis://cache:6379/0?password=***"),
        ("postgresql://app:p%40ss-word@db/agents", "p@ss-word", "postgresql://app:***@db/agents"),
    ],
)
def test_connection_string_passwords_are_found_and_masked(dsn, password, shown):
    from progressive_compactor.plugin import connection_passwords, mask_passwords

    assert password in connection_passwords(dsn)
    assert mask_passwords(dsn) == shown


def test_config_show_masks_a_libpq_password(tmp_path):
    from click.testing import CliRunner

    from progressive_compactor.cli.app import cli

    path = tmp_path / "fleet.yaml"
    block = '{dsn: "host=db password=s3cr3t-pw dbname=agents"}'
    path.write_text(
        "plugins: {state: state-postgres, offload: offload-postgres, stores: [store-postgres]}\n"
        f"config: {{state-postgres: {block}, offload-postgres: {block}, store-postgres: {block}}}\n"
    )
    shown = CliRunner().invoke(cli, ["config", "show", str(path), "--json"])
    assert shown.exit_code == 0, shown.output
    assert "s3cr3t-pw" not in shown.output and "password=***" in shown.output


SKIPPED = """
def test_needs_redis(redis_server):
    pass
"""


@pytest.mark.parametrize(("require", "outcome", "status"), [("", "1 skipped", 0), ("1", "1 error", 1)])
def test_a_missing_server_skips_on_a_developer_machine_and_fails_in_ci(tmp_path, require, outcome, status):
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "test_needs.py").write_text(SKIPPED)
    described = tmp_path / "servers.json"
    described.write_text(json.dumps({"base": str(tmp_path)}))  # describes no server at all
    env = {**os.environ, "COMPACTOR_TEST_SERVERS": str(described), "COMPACTOR_REQUIRE_SERVERS": require}
    tests = Path(__file__).resolve().parent
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "servers", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(tests)},
        cwd=tmp_path,
    )
    assert outcome in done.stdout and done.returncode == status, done.stdout
    assert f"COMPACTOR_TEST_SERVERS={described} describes no redis server" in done.stdout


@pytest.mark.parametrize(
    "kind, block", [("postgres", {"dsn": "postgresql://u:pw@db/x"}), ("redis", {"url": "redis://db/0"})]
)
@pytest.mark.parametrize("timeout", [3e6, float("inf"), float("nan")])
def test_a_timeout_the_driver_cannot_use_is_a_config_error_naming_it(kind, block, timeout):
    pytest.importorskip("psycopg" if kind == "postgres" else "redis")
    with pytest.raises(ConfigError) as caught:
        ProgressiveCompactor(
            "classic", plugins={"state": f"state-{kind}"}, config={f"state-{kind}": {**block, "timeout": timeout}}
        )
    assert f"$.config.state-{kind}.timeout" in str(caught.value)
    assert "at most 2147483 seconds" in str(caught.value)
