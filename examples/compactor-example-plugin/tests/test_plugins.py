"""Tests of the example plugins, written as a plugin author writes them: with the fixture that
progressive-compactor ships, and with the plugins selected by their entry-point names."""

from __future__ import annotations

import sqlite3

from compactor_example_plugin.headline import MARKER
from compactor_example_plugin.sqlite_store import SqliteStore
from progressive_compactor import CompactionTier
from progressive_compactor.testing import build_history, compaction_message, window_for


def test_headline_summarizer_writes_one_line_anchors(compactor_factory):
    history = build_history([3000] * 12)
    compactor = compactor_factory(
        context_window=window_for(history, 0.85),
        plugins={"summarizer": "example-headline"},
        config={"example-headline": {"max_chars": 60}},
    )
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.FULL
    assert record.plugins["summarizer"] == "example-headline"
    assert record.summary_text.startswith(MARKER)
    assert MARKER in compaction_message(view)["content"]
    assert all("\n" not in a.content for a in record.anchors[1:])
    assert record.anchors[0].content.startswith(history[1]["content"][:50])


def test_sqlite_store_keeps_and_deletes_records(compactor_factory, tmp_path):
    history = build_history([3000] * 12)
    compactor = compactor_factory(
        context_window=window_for(history, 0.85),
        plugins={"stores": ["example-sqlite-store"]},
        config={"example-sqlite-store": {"path": str(tmp_path / "r.sqlite3")}},
    )
    _, record = compactor.compact_with_record(history)
    store = compactor.pm.get_plugin("example-sqlite-store")
    assert isinstance(store, SqliteStore)
    assert store.records("test-session") == [record]
    compactor.delete_session()
    assert store.records("test-session") == []


def test_the_database_is_in_the_data_folder_by_default(compactor_factory, tmp_path):
    history = build_history([3000] * 12)
    compactor = compactor_factory(
        context_window=window_for(history, 0.85), plugins={"stores": ["example-sqlite-store"]}
    )
    _, record = compactor.compact_with_record(history)
    assert compactor.pm.get_plugin("example-sqlite-store").path == tmp_path / "records.sqlite3"
    rows = sqlite3.connect(tmp_path / "records.sqlite3").execute("SELECT id, tier FROM records").fetchall()
    assert rows == [(record.id, "full")]


def test_the_compactor_reads_records_and_sessions_back_through_the_store(compactor_factory):
    history = build_history([3000] * 12)
    compactor = compactor_factory(
        context_window=window_for(history, 0.85), plugins={"stores": ["example-sqlite-store"]}
    )
    _, first = compactor.compact_with_record(history, "one")
    _, second = compactor.compact_with_record(history, "two")
    assert compactor.records("one") == [first] and compactor.records("two") == [second]
    assert compactor.records("three") is None  # not ours: another store may answer
    found = {(info.session_id, info.plugin) for info in compactor.sessions()}
    assert {("one", "example-sqlite-store"), ("two", "example-sqlite-store")} <= found
    compactor.delete_session("one")
    assert compactor.records("one") is None
    assert "one" not in {info.session_id for info in compactor.sessions() if info.plugin == "example-sqlite-store"}


def test_secrets_never_reach_the_database(compactor_factory, tmp_path):
    history = build_history([3000] * 12)
    history[1]["content"] = "Use the key sk-EXAMPLE-SECRET-123 and fix the bug."
    compactor = compactor_factory(
        context_window=window_for(history, 0.85), plugins={"stores": ["example-sqlite-store"]}
    )
    compactor.secrets.add("sk-EXAMPLE-SECRET-123")
    compactor.compact_with_record(history)
    compactor.close()
    assert b"sk-EXAMPLE-SECRET-123" not in (tmp_path / "records.sqlite3").read_bytes()
