"""Tests of the example plugins, written as a plugin author writes them: with the fixture that
progressive-compactor ships, and with the plugins selected by their entry-point names."""

from __future__ import annotations

from progressive_compactor import CompactionTier
from progressive_compactor.testing import build_history, window_for

from compactor_example_plugin.headline import MARKER
from compactor_example_plugin.sqlite_store import SqliteStore


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
