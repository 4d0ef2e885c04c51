"""CompactionRecords: the JSONL store, fail-open persistence, the notification,
reading records of an older schema version."""

from __future__ import annotations

import json
import logging
import os
import stat

import attrs
import pytest

from progressive_compactor import (
    EMERGENCY_ERROR,
    CompactionRecord,
    CompactionTier,
    CompactorConfig,
    SummaryResult,
    hookimpl,
)
from progressive_compactor.converters import compact_json, record_from_dict, record_to_dict, record_to_json
from progressive_compactor.converters import read_records_file as read_records
from progressive_compactor.errors import StorageError
from progressive_compactor.models import SCHEMA_VERSION
from progressive_compactor.notice import human_bytes, human_tokens
from progressive_compactor.notice import notice as notification
from progressive_compactor.plugin_manager import PluginContext
from progressive_compactor.plugins.store_jsonl import JsonlStore
from progressive_compactor.record_stamp import new_record_id, record_timestamp
from progressive_compactor.storage import append_line
from progressive_compactor.testing import (
    FixedPolicy,
    ListStore,
    build_history,
    compaction_message,
    tool_turn,
    window_for,
)
from store_contract import assert_changed_nothing_is_kept_only_when_asked

BASE_FIELDS = (
    "id session_id timestamp tier tokens_before tokens_after msgs_before msgs_after anchors offloaded "
    "summarized preserved_tail summary_text compression_ratio duration_ms errors"
).split()
"""The fields every record had; their one ``error`` string is ``errors`` (one entry per cause) since schema 2."""
ADDED_FIELDS = (
    "schema_version variant plugins token_method repaired_tool_pairs cache_stable_prefix_tokens "
    "summarizer_tokens_in summarizer_tokens_out fallback escalations"
).split()


@pytest.fixture
def full_run(make_compactor, tmp_path):
    history = build_history([5000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.85))
    view, record = compactor.compact_with_record(history)
    return compactor, history, record, tmp_path / "records" / "test-session.jsonl"


def lines_of(path):
    return path.read_text("utf-8").splitlines()


def test_each_record_is_one_json_line_in_the_sessions_file(full_run):
    compactor, history, record, path = full_run
    assert record.tier is CompactionTier.FULL
    (line,) = lines_of(path)
    data = json.loads(line)
    assert set(BASE_FIELDS + ADDED_FIELDS) <= set(data)
    assert "error" not in data  # schema 1's field
    assert data["schema_version"] == SCHEMA_VERSION == 2
    assert (data["errors"], data["fallback"], data["escalations"]) == ([], False, [])
    assert data["tier"] == "full"
    assert data["id"] == record.id
    assert record_from_dict(data) == record


def test_the_file_is_append_only(full_run):
    compactor, history, first, path = full_run
    before = path.read_bytes()
    compactor.compact_force(history)
    assert path.read_bytes().startswith(before)
    records = list(read_records(path))
    assert [r.tier for r in records] == [CompactionTier.FULL, CompactionTier.EMERGENCY]
    assert records[0] == first


def test_tier_none_is_skipped_unless_asked_for(make_compactor, tmp_path):
    history = build_history([100] * 3)
    compactor = make_compactor()
    compactor.compact_with_record(history)
    assert not (tmp_path / "records").exists()
    compactor = make_compactor(config={"store-jsonl": {"record_none": True}})
    _, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.NONE
    assert [r.id for r in read_records(tmp_path / "records" / "test-session.jsonl")] == [record.id]


class UnreadableState:
    @hookimpl(tryfirst=True)
    def load_state(self, session_id):
        raise OSError("the state's disk is gone")


def test_a_call_of_tier_none_that_reports_an_error_is_stored(make_compactor, tmp_path):
    compactor = make_compactor(extra_plugins=[("unreadable", UnreadableState())])
    _, record = compactor.compact_with_record(build_history([100] * 3))
    assert record.tier is CompactionTier.NONE
    assert record.errors[0].startswith("loading session state failed: OSError: the state's disk is gone")
    assert [r.id for r in read_records(tmp_path / "records" / "test-session.jsonl")] == [record.id]


def test_a_call_that_changed_nothing_is_stored_only_when_asked(make_compactor):
    # A Warn that found no result worth offloading changed nothing, as a call of tier None: its
    # record is returned, and stored only with record_none (one file append a call saved).
    def make(record_none, **overrides):
        return make_compactor(config={"store-jsonl": {"record_none": record_none}}, **overrides)

    assert_changed_nothing_is_kept_only_when_asked(make)


def test_records_are_private(full_run):
    *_, path = full_run
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


def test_folders_the_store_creates_are_private(tmp_path):
    os.chmod(tmp_path, 0o755)
    store = JsonlStore(JsonlStore.Config(directory=str(tmp_path / "new" / "records")))
    store.persist_record(
        CompactionRecord(
            id="r1",
            session_id="s1",
            timestamp="2026-01-01T00:00:00+00:00",
            tier=CompactionTier.FULL,
            tokens_before=10,
            tokens_after=5,
            msgs_before=4,
            msgs_after=2,
        )
    )
    for folder in (tmp_path / "new", tmp_path / "new" / "records"):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o755  # a folder that existed is left alone


def test_the_directory_is_configurable_and_the_default_is_in_the_data_dir(tmp_path, monkeypatch):
    assert JsonlStore.Config().directory == "{data_dir}/records"
    store = JsonlStore(context=PluginContext(CompactorConfig(data_dir=str(tmp_path))))
    assert store.path_for("s1") == tmp_path / "records" / "s1.jsonl"
    monkeypatch.setenv("COMPACTOR_DATA_DIR", str(tmp_path / "from-env"))
    assert JsonlStore().path_for("s1") == tmp_path / "from-env" / "records" / "s1.jsonl"
    store = JsonlStore(JsonlStore.Config(directory="/somewhere/else"))
    assert str(store.path_for("s1")) == "/somewhere/else/s1.jsonl"
    assert store.path_for("../../etc/passwd").parent == store.directory


def test_record_round_trip_through_json(full_run):
    *_, record, _ = full_run
    assert record_from_dict(json.loads(record_to_json(record))) == record
    assert record_to_dict(record)["anchors"][0]["type"] == "user_intent"


# --- schema version 1 --------------------------------------------------------------------------


def version_1(record, error):
    """``record`` as schema version 1 wrote it: one ``error`` string, no errors/fallback/escalations."""
    data = record_to_dict(record)
    for key in ("errors", "fallback", "escalations"):
        del data[key]
    return {**data, "schema_version": 1, "error": error}


def test_a_version_1_record_is_upgraded(full_run):
    *_, record, _ = full_run
    old = record_from_dict(version_1(record, "summarizer failed: x; emergency fallback: forced truncation"))
    assert old.errors == ("summarizer failed: x", "emergency fallback: forced truncation")
    assert old.errors[-1] == EMERGENCY_ERROR
    assert old.fallback is True
    assert old.escalations == ()
    assert (old.id, old.tier, old.anchors, old.summary_text) == (
        record.id,
        record.tier,
        record.anchors,
        record.summary_text,
    )


def test_a_version_1_loop_guard_note_goes_to_escalations(full_run):
    *_, record, _ = full_run
    error = (
        "loop guard: Soft left the view at 85% of the window; escalating; "
        "loop guard: the summary (900 tokens) is larger than what it replaces (300 tokens); "
        "emergency fallback: forced truncation"
    )
    old = record_from_dict(version_1(record, error))
    assert old.escalations == (
        "loop guard: Soft left the view at 85% of the window; escalating",
        "loop guard: the summary (900 tokens) is larger than what it replaces (300 tokens)",
    )
    assert old.errors == (EMERGENCY_ERROR,)
    assert old.fallback is True


def test_a_version_1_record_without_an_error(full_run):
    *_, record, _ = full_run
    old = record_from_dict(version_1(record, ""))
    assert (old.errors, old.fallback, old.escalations) == ((), False, ())
    assert attrs.evolve(old, schema_version=SCHEMA_VERSION) == record


def test_a_records_file_may_mix_versions(full_run, caplog):
    *_, record, path = full_run
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(version_1(record, "anchor parsing incomplete: next_step set to N/A")) + "\n")
    with caplog.at_level(logging.WARNING, logger="progressive_compactor"):
        new, old = read_records(path)
    assert new == record
    assert old.errors == ("anchor parsing incomplete: next_step set to N/A",) and not old.fallback
    assert "skipped" not in caplog.text


# --- reading records back through the hooks ------------------------------------------------------


def test_the_compactor_reads_its_records_back_through_the_store(full_run):
    compactor, history, record, _ = full_run
    compactor.compact_force(history)
    records = compactor.records()
    assert [r.tier for r in records] == [CompactionTier.FULL, CompactionTier.EMERGENCY]
    assert records[0] == record
    assert compactor.records("no-such-session") is None  # no store holds it


def test_the_store_lists_its_sessions(full_run):
    compactor, *_, path = full_run
    found = [info for info in compactor.sessions() if info.plugin == "store-jsonl"]
    assert [(i.session_id, i.where) for i in found] == [("test-session", str(path))]
    assert found[0].updated == os.stat(path).st_mtime
    compactor.delete_session()
    assert not path.exists()
    assert compactor.records() is None


def test_listing_a_session_reads_the_head_of_its_records_file_alone(full_run):
    import tracemalloc

    from progressive_compactor.plugins.store_jsonl import HEAD_BYTES

    compactor, *_, path = full_run
    line = path.read_bytes().splitlines(keepends=True)[0]
    with path.open("ab") as f:  # a long session: 32 MB of records
        f.write(line * (32 * HEAD_BYTES // len(line)))
    tracemalloc.start()
    try:
        found = [info.session_id for info in compactor.sessions() if info.plugin == "store-jsonl"]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found == ["test-session"]
    assert peak < 4 * HEAD_BYTES  # the whole file would be 32 MB, and as much again split in lines
    path.write_bytes(b"x" * (HEAD_BYTES + 10) + b"\n" + line)  # no whole line in the head: its name
    assert [i.session_id for i in compactor.sessions() if i.plugin == "store-jsonl"] == [path.stem]


def test_a_store_plugin_that_reads_records_is_asked_first(make_compactor, full_run):
    compactor, *_ = full_run

    class Remote:
        @hookimpl
        def read_records(self, session_id):
            return [] if session_id == "remote" else None

    other = make_compactor(extra_plugins=[("remote", Remote())])
    assert other.records("remote") == []
    assert [r.session_id for r in other.records("test-session")] == ["test-session"]


# --- torn last line ------------------------------------------------------------------------------


def test_a_torn_last_line_is_skipped_with_a_warning(full_run, caplog):
    compactor, history, record, path = full_run
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"id": "torn", "session_id": "test-sess')  # the process died mid-write
    with caplog.at_level(logging.WARNING, logger="progressive_compactor"):
        records = list(read_records(path))
    assert records == [record]
    assert "torn last line" in caplog.text


def test_the_next_append_after_a_torn_line_starts_a_new_line(full_run):
    compactor, history, record, path = full_run
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"id": "torn"')
    compactor.compact_force(history)
    lines = lines_of(path)
    assert lines[1] == '{"id": "torn"'
    assert json.loads(lines[2])["tier"] == "emergency"
    assert [r.tier for r in read_records(path)] == [CompactionTier.FULL, CompactionTier.EMERGENCY]


def test_an_unreadable_middle_line_is_skipped_too(tmp_path, caplog):
    path = tmp_path / "r.jsonl"
    append_line(path, "not json", tmp_path)
    append_line(path, "{}", tmp_path)
    assert list(read_records(path)) == []
    assert "unreadable line" in caplog.text


def test_appending_refuses_a_path_outside_its_root_or_through_a_link(tmp_path):
    root = tmp_path / "records"
    outside = tmp_path / "outside.jsonl"
    with pytest.raises(StorageError, match="not under"):
        append_line(outside, "{}", root)
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StorageError, match="symbolic link"):
        append_line(root / "linked" / "s.jsonl", "{}", root)
    assert not outside.exists() and list((tmp_path / "elsewhere").iterdir()) == []


def test_a_link_planted_as_a_sessions_records_file_is_not_followed(make_compactor, tmp_path, caplog):
    history = build_history([5000] * 10)
    (tmp_path / "records").mkdir()
    target = tmp_path / "target.txt"
    target.write_text("precious\n")
    (tmp_path / "records" / "test-session.jsonl").symlink_to(target)
    compactor = make_compactor(context_window=window_for(history, 0.85))
    with caplog.at_level(logging.WARNING, logger="progressive_compactor"):
        _, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.FULL
    assert target.read_text() == "precious\n"
    assert "persist_record of plugin store-jsonl failed" in caplog.text
    assert compactor.records() is None  # a link is never read as records


# --- fail-open persistence --------------------------------------------------------------------


class BrokenStore:
    def __init__(self):
        self.calls = 0

    @hookimpl
    def persist_record(self, record):
        self.calls += 1
        raise ConnectionError("database is down")


@pytest.mark.parametrize("broken_first", [True, False], ids=["broken-registered-first", "broken-registered-last"])
def test_a_failing_store_logs_a_warning_and_the_others_still_run(make_compactor, tmp_path, caplog, broken_first):
    broken, good = BrokenStore(), ListStore()
    plugins = [("broken", broken), ("good", good)]
    history = build_history([5000] * 10)
    compactor = make_compactor(
        context_window=window_for(history, 0.85), extra_plugins=plugins if broken_first else plugins[::-1]
    )
    with caplog.at_level(logging.WARNING, logger="progressive_compactor"):
        view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.FULL
    assert record.errors == () and not record.fallback  # a store's failure is logged, not recorded
    assert broken.calls == 1
    assert good.records == [record]
    assert len(list(read_records(tmp_path / "records" / "test-session.jsonl"))) == 1
    assert "persist_record of plugin broken failed: ConnectionError: database is down" in caplog.text


def test_an_unwritable_records_directory_does_not_stop_compaction(make_compactor, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    history = build_history([5000] * 10)
    compactor = make_compactor(
        context_window=window_for(history, 0.85), config={"store-jsonl": {"directory": str(blocker)}}
    )
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.FULL and record.summarized == 15
    assert "persist_record of plugin store-jsonl failed" in caplog.text


def test_stores_can_be_disabled(make_compactor, tmp_path):
    history = build_history([5000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.85), plugins={"stores": []})
    compactor.compact_with_record(history)
    assert not (tmp_path / "records").exists()


# --- the notice -------------------------------------------------------------------------------


def test_the_two_line_notification(full_run):
    *_, record, _ = full_run
    first, second = notification(record).splitlines()
    ratio = round(record.compression_ratio * 100)
    share = round(record.tokens_after / record.context_window * 100)
    assert first == (
        f"⚡ Context compressed [Full] {human_tokens(record.tokens_before)}->"
        f"{human_tokens(record.tokens_after)} tokens ({ratio}% smaller, {share}% of window)"
    )
    offloaded = human_bytes(sum(e.chars for e in record.offloaded))
    assert second == f"   5 anchors | 7 offload({offloaded}) | 15 summarized | tail: 6 preserved"


def test_no_notification_for_tier_none(make_compactor):
    _, record = make_compactor().compact_with_record(build_history([10]))
    assert notification(record) == ""


@pytest.mark.parametrize("n, text", [(999, "999"), (45_213, "45.2K"), (8100, "8.1K"), (1_500_000, "1.5M")])
def test_human_tokens(n, text):
    assert human_tokens(n) == text


GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5" * 4


class WritesSecretsInItsSummary:
    """A summarizer whose summary holds a token of a well-known format, and a word that becomes a
    secret only after the summary is kept."""

    @hookimpl(tryfirst=True)
    def summarize(self, request):
        return SummaryResult(text=f"## User Intent\nfix the bug\n## Summary\nUsed {GITHUB_TOKEN} and LATER-SECRET-42.")


def test_a_records_summary_masks_credentials_and_the_secrets_registered_since(make_compactor):
    history = build_history([3000] * 10)
    kept = ListStore()  # the records as the compactor made them (a store masks them again)
    plugins = [("writes-secrets", WritesSecretsInItsSummary()), ("keeps-records", kept)]
    compactor = make_compactor(context_window=window_for(history, 0.75), extra_plugins=plugins)
    _, first = compactor.compact_with_record(history)
    assert first.tier is CompactionTier.SOFT
    assert GITHUB_TOKEN not in first.summary_text and "LATER-SECRET-42" in first.summary_text
    compactor.secrets.add("LATER-SECRET-42")  # the kept summary holds it: the next record must not
    compactor.compact_force(history)
    forced = kept.records[-1]
    assert forced.tier is CompactionTier.EMERGENCY and "Used" in forced.summary_text
    assert "LATER-SECRET-42" not in forced.summary_text and GITHUB_TOKEN not in forced.summary_text


def test_secrets_never_reach_the_records(make_compactor, tmp_path):
    history = build_history([5000] * 10)
    history[1]["content"] = "Use the key sk-THE-SECRET-VALUE to call the API and fix the bug."
    compactor = make_compactor(context_window=window_for(history, 0.85))
    compactor.secrets.add("sk-THE-SECRET-VALUE")
    view, record = compactor.compact_with_record(history)
    assert "sk-THE-SECRET-VALUE" not in (tmp_path / "records" / "test-session.jsonl").read_text()
    assert "sk-THE-SECRET-VALUE" not in record.summary_text
    assert "[REDACTED]" in view[1]["content"]
    # The default config pins the request as a message of its own: masked there too.
    pinned = make_compactor("default", context_window=window_for(history, 0.85))
    pinned.secrets.add("sk-THE-SECRET-VALUE")
    view = pinned.compact(history)
    assert view[1]["content"] == history[1]["content"].replace("sk-THE-SECRET-VALUE", "[REDACTED]")
    assert "sk-THE-SECRET-VALUE" not in str(view[:3])
    # A later instruction is a fact of the summary: masked there as well.
    later = [*history[:4], {"role": "user", "content": "Rotate sk-THE-SECRET-VALUE when done."}, *history[4:]]
    view = pinned.compact(later, "later")
    assert "- Later instruction: Rotate [REDACTED] when done." in compaction_message(view)["content"]
    assert "sk-THE-SECRET-VALUE" not in str(view[:3])


@pytest.mark.parametrize("config", ["default", "classic"])
def test_a_secret_registered_after_the_request_was_read_never_reaches_the_records(make_compactor, tmp_path, config):
    """A key registered mid-session (a summarizer reading its key when first called) that the
    user's request holds: the request, masked once when it was first read, went into the next
    summary's intent and the record file unmasked."""
    history = build_history([3000] * 10, request="Call the API with sk-LATE-SECRET-VALUE and fix the bug.")
    compactor = make_compactor(config, extra_plugins=[("full", FixedPolicy(CompactionTier.FULL))])
    compactor.compact(history)
    records = tmp_path / "records" / "test-session.jsonl"
    records.unlink()  # written before the key was known
    compactor.secrets.add("sk-LATE-SECRET-VALUE")
    history += [m for k in range(4) for m in tool_turn(f"late_{k}", 3000)]
    view, record = compactor.compact_with_record(history)
    assert record.summarizer_calls == 1 and "[REDACTED]" in str(record.anchors[0])
    assert "sk-LATE-SECRET-VALUE" not in records.read_text()
    assert "sk-LATE-SECRET-VALUE" not in str(view[:3])


@pytest.mark.parametrize(
    "data",
    [{"tier": "soft", "ratio": 0.4321, "text": 'é\n\u2028\t"q"', "list": [1.5, None, True, 0]}, {"odd": "x\ud800y"}],
    ids=["plain", "lone surrogate"],
)
def test_compact_json_writes_what_the_standard_library_writes(data):
    # orjson for speed; the standard library where orjson refuses (a lone surrogate)
    assert compact_json(data) == json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    assert json.loads(compact_json(data)) == data


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_worker_draws_other_record_ids():
    # Record ids come from a generator seeded once per process: a forked worker (gunicorn, a
    # multiprocessing pool) is seeded again, or it would draw the very ids of its parent, and a
    # database store keyed on the id would keep one record of the two.
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, new_record_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    mine = new_record_id()
    assert len(mine) == len(child) == 32
    assert int(mine, 16) != int(child, 16)
    assert len({new_record_id() for _ in range(1000)}) == 1000


@pytest.mark.parametrize(
    "now", [0.0, 1.5, 1_764_600_000.0004, 1_764_600_000.9996, 1_764_600_059.999999, 4_102_444_799.25]
)
def test_a_timestamp_is_what_datetime_writes(monkeypatch, now):
    from datetime import datetime, timezone

    import progressive_compactor.record_stamp as stamp

    monkeypatch.setattr(stamp.time, "time", lambda: now)
    expected = datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="milliseconds")
    assert record_timestamp() == record_timestamp() == expected
