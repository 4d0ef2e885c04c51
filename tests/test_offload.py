"""Offload: one file per tool result, the three skip conditions, the idempotency
cache, fail-open writes, path safety, offloading a result as it arrives, and reading results back."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from progressive_compactor import CompactionTier, CompactorError, Session, hookimpl, tools
from progressive_compactor.messages import message_from_dict
from progressive_compactor.models import Message
from progressive_compactor.plugin import PLACEHOLDER_PREFIX
from progressive_compactor.plugins import offload_files
from progressive_compactor.plugins.offload_files import FileOffloader
from progressive_compactor.storage import safe_name
from progressive_compactor.testing import (
    build_history,
    compaction_message,
    filler,
    problems,
    tool_call,
    tool_turn,
    window_for,
)
from progressive_compactor.tools import READ_TOOL_RESULT_TOOL, handle_read_tool_call, line_count

TAIL = 6


@pytest.fixture
def write_count(monkeypatch):
    """How many times the offloader wrote a file, per file name (``.session_id`` included)."""
    counts: dict[str, int] = {}

    def counting(real, wrote=lambda result: True):
        def write(path, data, root):
            result = real(path, data, root)
            if wrote(result):
                counts[Path(path).name] = counts.get(Path(path).name, 0) + 1
            return result

        return write

    monkeypatch.setattr(offload_files, "write_private", counting(offload_files.write_private))
    # keep_private writes only when it creates the file (True); else it found the file there
    monkeypatch.setattr(offload_files, "keep_private", counting(offload_files.keep_private, lambda kept: kept is True))
    return counts


def tool_message(call_id: str, chars: int) -> Message:
    return Message(role="tool", tool_call_id=call_id, content=filler(chars, call_id))


class SpyOffloader:
    """Sees every offload request before the default plugin and lets it through."""

    def __init__(self):
        self.seen: list[str | None] = []

    @hookimpl(tryfirst=True)
    def offload(self, message, session_id, threshold):
        self.seen.append(message.tool_call_id)
        return None


# --- the plugin itself -------------------------------------------------------------------------


def test_one_file_per_result_with_a_preview_placeholder(tmp_path):
    offloader = FileOffloader(FileOffloader.Config(root=str(tmp_path / "root")))
    message = tool_message("call_7", 6000)
    entry = offloader.offload(message, "session-1", 4000)
    path = tmp_path / "root" / "session-1" / "call_7.txt"
    assert Path(entry.path) == path
    assert path.read_bytes() == message.content.encode()
    assert entry.handle == "session-1/call_7"
    assert entry.chars == 6000 and entry.lines == len(message.content.splitlines())
    lines = message.content.splitlines()
    assert entry.placeholder.startswith(f"{PLACEHOLDER_PREFIX}: 6000 characters")
    assert "\n".join(lines[:10]) in entry.placeholder  # a ten-line preview
    assert lines[10] not in entry.placeholder
    assert entry.handle in entry.placeholder and "read_tool_result" in entry.placeholder
    assert offloader.read_offloaded(entry.handle) == message.content


@pytest.mark.parametrize(
    "text",
    ["", "a", "a\n", "\n\n", "a\r\nb", "\r\r\n\r", "a\x0bb\x0cc\x1cd\x1de\x1ef", "é\x85x\u2028y\u2029", "a\n\x1e"],
)
@pytest.mark.parametrize("split_chars", [0, tools.SPLIT_CHARS], ids=["counted", "split"])
def test_a_placeholder_counts_the_lines_read_tool_result_counts(text, split_chars, monkeypatch):
    """Every line break ``str.splitlines`` knows, the rare ones included, counts a line, whether
    the text is long enough to be counted without splitting it or not."""
    monkeypatch.setattr(tools, "SPLIT_CHARS", split_chars)
    assert line_count(text) == len(text.splitlines())


def test_preview_lines_come_from_config(make_compactor):
    history = build_history([5000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.65), config={"offload-files": {"preview_lines": 3}})
    view, record = compactor.compact_with_record(history)
    original = history[3]["content"].splitlines()
    assert "\n".join(original[:3]) in view[3]["content"]
    assert original[3] not in view[3]["content"]


def test_default_root_is_under_the_data_dir(tmp_path):
    from progressive_compactor import CompactorConfig
    from progressive_compactor.plugin_manager import PluginContext

    assert FileOffloader.Config().root == "{data_dir}/tool_results"
    offloader = FileOffloader(context=PluginContext(CompactorConfig(data_dir=str(tmp_path))))
    entry = offloader.offload(tool_message("c1", 5000), "s", 4000)
    assert Path(entry.path) == tmp_path / "tool_results" / "s" / "c1.txt"


def test_each_session_folder_names_its_session(tmp_path):
    offloader = FileOffloader(FileOffloader.Config(root=str(tmp_path / "root")))
    plain = offloader.offload(tool_message("c1", 5000), "ticket-7", 4000)
    odd = offloader.offload(tool_message("c1", 5000), "team/ticket 8", 4000)
    assert not (Path(plain.path).parent / ".session_id").exists()  # the folder's name is the id
    assert Path(odd.path).parent.name.startswith("_")  # not a plain name: hashed
    assert (Path(odd.path).parent / ".session_id").read_text() == "team/ticket 8"
    found = {info.session_id: info for info in offloader.list_sessions()}
    assert set(found) == {"ticket-7", "team/ticket 8"}
    assert found["team/ticket 8"].where == str(Path(odd.path).parent)
    assert found["ticket-7"].plugin == "offload-files" and found["ticket-7"].updated > 0
    offloader.on_delete_session("team/ticket 8")
    assert [info.session_id for info in offloader.list_sessions()] == ["ticket-7"]


def test_a_session_folder_made_again_by_another_process_names_its_session_again(tmp_path):
    worker = FileOffloader(FileOffloader.Config(root=str(tmp_path / "root")))
    first = worker.offload(tool_message("c1", 5000), "team/ticket 8", 4000)
    FileOffloader(FileOffloader.Config(root=str(tmp_path / "root"))).on_delete_session("team/ticket 8")
    assert not Path(first.path).parent.exists()  # another process deleted the session
    again = worker.offload(tool_message("c2", 5000), "team/ticket 8", 4000)
    assert (Path(again.path).parent / ".session_id").read_text() == "team/ticket 8"
    assert [info.session_id for info in worker.list_sessions()] == ["team/ticket 8"]


def test_only_folders_the_offloader_could_have_made_are_sessions(tmp_path):
    offloader = FileOffloader(FileOffloader.Config(root=str(tmp_path / "root")))
    kept = offloader.offload(tool_message("c1", 5000), "team/ticket 8", 4000)
    for planted in (".ssh", "My Documents", "_not-a-hash", "a..b"):
        (tmp_path / "root" / planted).mkdir()
        (tmp_path / "root" / planted / "precious.txt").write_text("mine")
    (tmp_path / "root" / "a-file").write_text("not a folder")
    orphan = tmp_path / "root" / ("_" + "0" * 40)  # a hashed folder whose .session_id is gone
    orphan.mkdir()
    (orphan / "c1.txt").write_text("result")
    assert [info.session_id for info in offloader.list_sessions()] == ["_" + "0" * 40, "team/ticket 8"]
    offloader.on_delete_session("_" + "0" * 40)  # deleted under the name it is listed under
    assert not orphan.exists() and Path(kept.path).exists()
    assert [info.session_id for info in offloader.list_sessions()] == ["team/ticket 8"]
    (Path(kept.path).parent / ".session_id").unlink()
    offloader.on_delete_session(Path(kept.path).parent.name)
    assert not Path(kept.path).parent.exists()
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == [
        ".ssh",
        "My Documents",
        "_not-a-hash",
        "a-file",
        "a..b",
    ]


# --- the three skip conditions -------------------------------------------------------------------


def test_a_result_without_tool_call_id_is_not_offloaded(make_compactor):
    history = build_history([5000] * 10)
    history[2]["tool_calls"][0]["id"] = ""
    history[3]["tool_call_id"] = ""
    assert problems(history) == []
    spy = SpyOffloader()
    compactor = make_compactor(context_window=window_for(history, 0.65), extra_plugins=[("spy", spy)])
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.WARN
    assert "" not in spy.seen and "call_1" in spy.seen
    assert view[3] == history[3]
    assert "" not in {e.tool_call_id for e in record.offloaded}
    assert FileOffloader().offload(Message(role="tool", tool_call_id="", content="x" * 9000), "s", 10) is None


@pytest.mark.parametrize("chars, offloaded", [(3999, False), (4000, False), (4001, True)])
def test_results_at_or_below_the_threshold_stay(make_compactor, chars, offloaded):
    history = build_history([chars] + [100] * 9)
    compactor = make_compactor(context_window=window_for(history, 0.65))
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.WARN
    assert bool(record.offloaded) is offloaded
    assert view[3]["content"].startswith(PLACEHOLDER_PREFIX) is offloaded


def test_a_result_already_offloaded_by_the_offload_hook_is_skipped(make_compactor, tmp_path, write_count):
    compactor = make_compactor(offload_threshold=100)
    history = build_history([200] * 9)
    history += tool_turn("big", 0)[:1]
    history.append(compactor.offload_tool_result({"role": "tool", "tool_call_id": "big", "content": filler(12_000)}))
    history += tool_turn("after1", 200) + tool_turn("after2", 200) + tool_turn("after3", 200)
    assert history[-7]["content"].startswith(PLACEHOLDER_PREFIX)
    assert len(history[-7]["content"]) > 100  # above this compactor's offload threshold
    assert write_count == {"big.txt": 1}
    compactor = make_compactor(context_window=window_for(history, 0.65), offload_threshold=100)
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.WARN
    assert "big" not in {e.tool_call_id for e in record.offloaded}
    assert view[-7] == history[-7]
    assert write_count["big.txt"] == 1


# --- idempotency -------------------------------------------------------------------------------


def test_a_second_turn_does_not_rewrite_the_files(make_compactor, tmp_path, write_count):
    history = build_history([5000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.65))
    first_view, first = compactor.compact_with_record(history)
    assert len(first.offloaded) == 7
    folder = tmp_path / "tool_results" / "test-session"
    mtimes = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    history.append({"role": "user", "content": "and one more thing"})
    view, second = compactor.compact_with_record(history)
    assert second.tier is CompactionTier.NONE  # decided on the view, which keeps the placeholders
    assert view[:-1] == first_view
    for i in range(10):  # grow until the view reaches Warn again
        history += tool_turn(f"more_{i}", 5000)
        view, third = compactor.compact_with_record(history)
        if third.tier is CompactionTier.WARN:
            break
    assert third.tier is CompactionTier.WARN
    assert third.offloaded and not {e.tool_call_id for e in third.offloaded} & {e.tool_call_id for e in first.offloaded}
    assert view[: len(first_view) - TAIL] == first_view[: len(first_view) - TAIL]
    assert {name: (folder / name).stat().st_mtime_ns for name in mtimes} == mtimes
    assert set(write_count.values()) == {1}


def test_the_plugin_cache_and_an_existing_identical_file_skip_the_write(tmp_path, write_count):
    config = FileOffloader.Config(root=str(tmp_path))
    message = tool_message("c1", 5000)
    one = FileOffloader(config)
    first = one.offload(message, "s", 4000)
    again = one.offload(message, "s", 4000)
    other_process = FileOffloader(config).offload(message, "s", 4000)
    assert first == again == other_process
    assert write_count == {"c1.txt": 1}


def test_the_same_id_with_other_text_gets_its_own_file(tmp_path):
    offloader = FileOffloader(FileOffloader.Config(root=str(tmp_path)))
    a = offloader.offload(Message(role="tool", tool_call_id="dup", content="a" * 5000), "s", 4000)
    b = offloader.offload(Message(role="tool", tool_call_id="dup", content="b" * 5000), "s", 4000)
    assert a.path != b.path
    assert offloader.read_offloaded(a.handle) == "a" * 5000
    assert offloader.read_offloaded(b.handle) == "b" * 5000


# --- path safety -------------------------------------------------------------------------------

HOSTILE_IDS = ["../../etc/passwd", "/etc/passwd", "a/b", "x\x00y", "..", ".", "~root", "C:\\evil", "-rf", "a" * 300, ""]


@pytest.mark.parametrize("session_id", ["plain", "../../escape", "/abs", "s/\x00/.."], ids=repr)
@pytest.mark.parametrize("call_id", HOSTILE_IDS[:-1], ids=lambda v: repr(v)[:20])
def test_no_id_escapes_the_root(tmp_path, session_id, call_id):
    root = tmp_path / "root"
    offloader = FileOffloader(FileOffloader.Config(root=str(root)))
    message = Message(role="tool", tool_call_id=call_id, content="secret " * 1000)
    entry = offloader.offload(message, session_id, 4000)
    path = Path(entry.path)
    assert path.resolve().is_relative_to(root.resolve())
    assert path.parent.parent == root
    assert offloader.read_offloaded(entry.handle) == message.content
    id_file = path.parent / ".session_id"  # only where the folder's name is not the id
    files = [path, id_file] if path.parent.name != session_id else [path]
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == sorted(files)
    assert offloader.list_sessions()[0].session_id == session_id


def test_a_link_planted_under_the_root_is_not_followed(tmp_path):
    from progressive_compactor.errors import OffloadError

    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "s").symlink_to(outside)  # an agent with a shell planted it
    offloader = FileOffloader(FileOffloader.Config(root=str(root)))
    with pytest.raises(OffloadError, match="symbolic link"):
        offloader.offload(tool_message("c1", 5000), "s", 4000)
    assert list(outside.iterdir()) == []
    (outside / "c1.txt").write_text("not for the agent")
    with pytest.raises(CompactorError, match="symbolic link"):
        offloader.read_offloaded("s/c1")


@pytest.mark.parametrize("handle", ["../root/s/c1", "s/../../x", "/etc/passwd", "s/c1/../../x", "", "s"])
def test_a_hostile_handle_reads_nothing(tmp_path, handle):
    (tmp_path / "x.txt").write_text("outside")
    offloader = FileOffloader(FileOffloader.Config(root=str(tmp_path / "root")))
    offloader.offload(tool_message("c1", 5000), "s", 4000)
    assert offloader.read_offloaded(handle) is None


def test_files_are_private(tmp_path):
    offloader = FileOffloader(FileOffloader.Config(root=str(tmp_path / "root")))
    entry = offloader.offload(tool_message("c1", 5000), "s", 4000)
    assert stat.S_IMODE(os.stat(entry.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(Path(entry.path).parent).st_mode) == 0o700
    assert not [p for p in Path(entry.path).parent.iterdir() if p.name.startswith(".tmp")]


# --- fail-open ---------------------------------------------------------------------------------


def compact_with_an_unwritable_root(make_compactor, tmp_path, ratio):
    """One compaction of a history of large results whose offload root is a file, not a folder."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the offload root should be")
    history = build_history([5000] * 10)
    compactor = make_compactor(
        context_window=window_for(history, ratio), config={"offload-files": {"root": str(blocker)}}
    )
    return history, *compactor.compact_with_record(history)


def test_a_failed_write_keeps_the_original_and_appends_the_error(make_compactor, tmp_path):
    history, view, record = compact_with_an_unwritable_root(make_compactor, tmp_path, 0.65)
    assert record.tier is CompactionTier.WARN
    assert view == history
    assert record.offloaded == ()
    assert len(record.errors) == 7 and not record.fallback
    assert [e.split(" failed: ")[0] for e in record.errors] == [f"offload of call_{i}" for i in range(7)]
    assert record.errors[0] == (
        f"offload of call_0 failed: OffloadError: cannot write in {tmp_path / 'not-a-dir'}/test-session: "
        "Not a directory"
    )
    assert all(e.endswith(": Not a directory") for e in record.errors)


def test_a_failed_write_does_not_stop_the_summary(make_compactor, tmp_path):
    _, view, record = compact_with_an_unwritable_root(make_compactor, tmp_path, 0.85)
    assert record.tier is CompactionTier.FULL
    assert record.summarized == 15
    assert record.errors[0].startswith("offload of call_0 failed: OffloadError: cannot write ")
    assert all(e.startswith("offload of call_") for e in record.errors) and not record.fallback
    assert problems(view) == []


def test_the_offload_hook_is_fail_open_too(make_compactor, tmp_path, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    compactor = make_compactor(config={"offload-files": {"root": str(blocker)}})
    message = {"role": "tool", "tool_call_id": "c1", "content": "x" * 20_000, "custom": 1}
    assert compactor.offload_tool_result(message) == message
    assert "offloading a tool result failed: c1: " in caplog.text
    key = "hunter2-registered-secret"  # an id comes from outside: even one holding a key is masked
    compactor.secrets.add(key)
    leaky = {**message, "tool_call_id": f"call_{key}"}
    assert compactor.offload_tool_result(leaky) == leaky
    assert key not in caplog.text and "offloading a tool result failed: call_[REDACTED]" in caplog.text


# --- offload as a result arrives ---------------------------------------------------------------


@pytest.mark.parametrize("chars, offloaded", [(10_000, False), (10_001, True)])
def test_the_offload_hook_threshold_is_ten_thousand(make_compactor, chars, offloaded):
    compactor = make_compactor()
    message = {"role": "tool", "tool_call_id": "c1", "content": filler(chars), "name": "bash"}
    out = compactor.offload_tool_result(message)
    assert out["content"].startswith(PLACEHOLDER_PREFIX) is offloaded
    assert out["tool_call_id"] == "c1" and out["name"] == "bash"
    if offloaded:
        assert compactor.read_tool_result("test-session/c1") == message["content"]
    else:
        assert out == message


def test_session_add_tool_result_offloads_before_the_result_enters_the_history(make_compactor):
    session = Session(make_compactor(), "s1")
    session.append({"role": "user", "content": "go"}, tool_turn("c1", 0)[0])
    stored = session.add_tool_result("c1", "y" * 50_000)
    assert session.history[-1] is not None and session.history[-1]["content"] == stored["content"]
    assert stored["content"].startswith(PLACEHOLDER_PREFIX)
    assert len(stored["content"]) < 3000
    assert session.compactor.read_tool_result("s1/c1") == "y" * 50_000


# --- reading back ------------------------------------------------------------------------------


def test_results_offloaded_as_they_arrived_stay_listed_once_summarized(make_compactor):
    """A result ``Session.add_tool_result`` offloaded is a placeholder in the history itself: once
    the summary covers it, the compaction message and the listing still name its handle."""
    session = Session(make_compactor(context_window=6000), "s")
    session.append({"role": "user", "content": "Fix the bug in parser.py please"})
    for i in range(16):
        session.append(tool_turn(f"call_{i}", 0)[0])
        session.add_tool_result(f"call_{i}", filler(12_000 if i % 2 == 0 else 3000, f"r{i}"))
        view = session.view()
    covered = session.compactor.state("s").covered
    offloaded = [m["tool_call_id"] for m in session.history[:covered] if m["content"].startswith(PLACEHOLDER_PREFIX)]
    assert len(offloaded) >= 3
    listed = session.read_tool_call({"handle": "s/"}).splitlines()
    assert listed == [f"s/{call_id}" for call_id in offloaded]
    assert all(f"- {handle}" in compaction_message(view)["content"] for handle in listed)


def test_handles_in_the_compaction_message_read_back_the_original(make_compactor):
    history = build_history([5000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.85))
    view, record = compactor.compact_with_record(history)
    for entry in record.offloaded:
        assert f"- {entry.handle}" in compaction_message(view)["content"]
        original = next(m["content"] for m in history if m.get("tool_call_id") == entry.tool_call_id)
        assert compactor.read_tool_result(entry.handle) == original
        assert Path(entry.path).read_bytes() == original.encode()


def test_the_lines_a_placeholder_counts_are_the_lines_a_read_addresses(make_compactor):
    """Progress output ends its lines with a carriage return: the count the placeholder gives and
    the line numbers ``read_tool_result`` takes follow one rule."""
    compactor = make_compactor()
    text = "Build OK\r\nDownloading 0%\rDownloading 50%\rDownloading 100%\n" + "log line\n" * 1200 + "FAILED: test_save"
    stored = compactor.offload_tool_result({"role": "tool", "tool_call_id": "c1", "content": text})
    count = int(stored["content"].split(" lines.")[0].rsplit(" ", 1)[1])
    assert compactor.read_tool_result("test-session/c1", (count, count)) == "FAILED: test_save"
    assert compactor.read_tool_result("test-session/c1", (2, 2)) == "Downloading 0%"


def test_read_tool_result_by_lines_and_errors(make_compactor):
    compactor = make_compactor()
    text = "\n".join(f"row {i}" for i in range(1, 3001))
    compactor.offload_tool_result({"role": "tool", "tool_call_id": "c9", "content": text})
    assert compactor.read_tool_result("test-session/c9", (2, 4)) == "row 2\nrow 3\nrow 4"
    with pytest.raises(CompactorError, match="no offloaded tool result"):
        compactor.read_tool_result("test-session/nope")
    args = json.dumps({"handle": "test-session/c9", "start_line": 3000})
    assert handle_read_tool_call(compactor, args) == "row 3000"
    assert handle_read_tool_call(compactor, {"handle": "x/y"}).startswith("error: no offloaded")
    assert handle_read_tool_call(compactor, "{not json").startswith("error: invalid arguments")
    assert READ_TOOL_RESULT_TOOL["function"]["name"] == "read_tool_result"


@pytest.mark.parametrize("session", ["alice", "alice@example.com", "../alice"])
def test_a_session_reads_its_own_results_only(make_compactor, session):
    """One compactor serving several users: with the session named, a handle of another
    session's result is refused, however it is written (a model can write any handle)."""
    compactor = make_compactor()
    for owner in (session, "mallory"):
        message = {"role": "tool", "tool_call_id": "call_1", "content": f"{owner}'s payroll\n" + "row\n" * 4000}
        compactor.offload_tool_result(message, owner)
    alice, mallory = (f"{safe_name(owner)}/call_1" for owner in (session, "mallory"))
    assert compactor.read_tool_result(alice, (1, 1), session_id=session) == f"{session}'s payroll"
    for handle in (mallory, f" {mallory}", f"{safe_name(session)}/../{mallory}"):
        with pytest.raises(CompactorError):
            compactor.read_tool_result(handle, session_id=session)
        assert handle_read_tool_call(compactor, {"handle": handle}, session_id=session).startswith("error:")
    assert "mallory's payroll" in compactor.read_tool_result(mallory)  # no session named: any (the CLI's view)
    answer = Session(compactor, session).read_tool_call(json.dumps({"handle": mallory}))
    assert answer == f"error: the handle {mallory!r} does not name a result of this session"


def test_handles_beyond_the_newest_listed_are_listed_on_demand(make_compactor):
    """The compaction message names the newest 20 handles and how to list the older ones; the
    session's read tool lists them all, and each reads back."""
    history = build_history([5000] * 40)
    compactor = make_compactor(context_window=window_for(history, 0.85))
    session = Session(compactor, compactor.session_id)
    session.extend(history)
    text = compaction_message(session.view())["content"]
    kept = compactor.state().dropped_handles
    assert len(kept) > 20 and all(h in text for h in kept[-20:]) and kept[0] not in text
    assert (
        f'- and {len(kept) - 20} older ones: read_tool_result with {{"handle": "test-session/"}} lists them all' in text
    )
    listed = session.read_tool_call({"handle": "test-session/"}).splitlines()
    assert listed[: len(kept)] == list(kept)
    assert session.read_tool_call({"handle": kept[0]}) == history[3]["content"]
    assert handle_read_tool_call(compactor, {"handle": "test-session/"}).startswith("error: listing")


def test_emergency_offloads_the_tail_too_so_nothing_is_lost(make_compactor):
    history = build_history([5000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.97))
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.EMERGENCY
    assert {e.tool_call_id for e in record.offloaded} == {f"call_{i}" for i in range(10)}
    for m in history:
        if m["role"] == "tool":
            assert compactor.read_tool_result(f"test-session/{m['tool_call_id']}") == m["content"]


def test_delete_session_removes_only_that_sessions_folder(make_compactor, tmp_path):
    compactor = make_compactor()
    big = {"role": "tool", "tool_call_id": "c1", "content": "z" * 20_000}
    compactor.offload_tool_result(big, "a")
    compactor.offload_tool_result(big, "b")
    assert compactor.delete_session("a") == []
    assert not (tmp_path / "tool_results" / "a").exists()
    assert (tmp_path / "tool_results" / "b" / "c1.txt").exists()
    # the cache forgot session a: offloading again writes the file again
    compactor.offload_tool_result(big, "a")
    assert (tmp_path / "tool_results" / "a" / "c1.txt").exists()


def test_message_from_dict_rejects_a_tool_message_without_id():
    with pytest.raises(CompactorError, match="needs a tool_call_id"):
        message_from_dict({"role": "tool", "content": "x"}, 3)


def test_a_reused_tool_call_id_does_not_get_the_earlier_results_placeholder(make_compactor):
    history = build_history([5000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.65))
    assert len(compactor.compact_with_record(history)[1].offloaded) == 7
    history += tool_turn("call_0", 0)[:1] + [{"role": "tool", "tool_call_id": "call_0", "content": "second answer"}]
    for i in range(10):
        history += tool_turn(f"later_{i}", 100)
        view = compactor.compact(history)
    contents = [m["content"] for m in view if m.get("tool_call_id") == "call_0"]
    assert contents[0].startswith(PLACEHOLDER_PREFIX)
    assert contents[1] == "second answer"


def readable(compactor, view, text):
    """Whether ``text`` is in ``view`` or read back whole by a handle the session knows of."""
    state = compactor.state()
    handles = {*state.dropped_handles, *(e.handle for e in state.offloaded.values())}
    return any(text == m.get("content") for m in view) or any(compactor.read_tool_result(h) == text for h in handles)


def test_a_result_edited_after_its_offload_is_offloaded_again_before_it_is_folded(make_compactor):
    """A retried tool call, or a result edited by the caller, at a position whose earlier text was
    offloaded: the new text gets its own handle, and the compaction message lists that one."""
    first, second = filler(9000, "FIRST"), filler(9000, "SECOND")
    history = build_history([9000, 300, 300] + [2500] * 6)
    history[3]["content"] = first
    compactor = make_compactor(context_window=window_for(history, 0.65))
    assert [e.tool_call_id for e in compactor.compact_with_record(history)[1].offloaded][0] == "call_0"
    edited = [dict(m) for m in history] + tool_turn("more_0", 2500) + tool_turn("more_1", 2500)
    edited[3]["content"] = second
    view, record = compactor.compact_with_record(edited)
    assert record.tier >= CompactionTier.SOFT and problems(view) == []
    assert readable(compactor, view, second)
    listed = [
        line[2:] for line in compaction_message(view)["content"].splitlines() if line.startswith("- test-session/")
    ]
    assert listed and all(compactor.read_tool_result(h) != first for h in listed)


LATE = [
    {"role": "user", "content": "Fix the bug in parser.py"},
    {"role": "assistant", "content": "run it", "tool_calls": [tool_call("call_A", "pytest -x")]},
    {"role": "assistant", "content": "meanwhile read it", "tool_calls": [tool_call("call_B", "cat parser.py")]},
    {"role": "tool", "tool_call_id": "call_B", "content": "def parse(): pass"},
]
"""A history whose call_A is answered late: after call_B's turn (the next message)."""


@pytest.mark.parametrize("share", [0.75, 0.97], ids=["summary", "truncation"])
def test_a_result_that_arrives_late_is_offloaded_before_it_leaves_the_view(make_compactor, share):
    big = filler(20_000, "BIGRESULT")
    history = [*LATE, {"role": "tool", "tool_call_id": "call_A", "content": big}]
    for i in range(12):
        history += tool_turn(f"c{i}", 1500)
    compactor = make_compactor(context_window=window_for(history, share))
    view, record = compactor.compact_with_record(history)
    assert record.tier >= CompactionTier.SOFT and problems(view) == []
    assert "call_A" in [e.tool_call_id for e in record.offloaded]
    entry = next(e for e in record.offloaded if e.tool_call_id == "call_A")
    assert compactor.read_tool_result(entry.handle) == big


def test_an_offloaded_result_keeps_its_images_in_the_view(make_compactor):
    """A tool result of text and a screenshot: offloading it put the placeholder in place of the
    whole content, and the file holds the text alone, so the image was lost for good."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBO" * 500}}
    history = build_history([6000] * 10)
    history[3] = {**history[3], "content": [{"type": "text", "text": filler(6000, "page")}, image]}
    compactor = make_compactor(context_window=window_for(history, 0.65))
    for turn in range(2):  # offloaded now, then from the session's state
        view, record = compactor.compact_with_record(history)
        assert problems(view) == [] and view[3]["tool_call_id"] == "call_0"
        placeholder, *rest = view[3]["content"]
        assert placeholder["text"].startswith("[Tool result offloaded") and rest == [image]
    assert compactor.read_tool_result("test-session/call_0").startswith(filler(6000, "page"))
    arrived = compactor.offload_tool_result({"role": "tool", "tool_call_id": "new", "content": history[3]["content"]})
    assert arrived["content"][1:] == [image]


def test_sessions_whose_ids_differ_only_in_letter_case_never_share_a_file(make_compactor, tmp_path):
    """On a case-insensitive file system (macOS's and Windows' defaults) ``Alice`` and ``alice``
    would name one folder, one state file and one records file: each session would read the
    other's results (through its own read tool), records and state. Their names differ in more
    than letter case, so no two of their files are one file there."""
    history = build_history([5000] * 12)
    compactor = make_compactor(context_window=window_for(history, 0.85), plugins={"state": "state-files"})
    owners = ("Alice", "alice", "ALICE")
    handles = {}
    for owner in owners:
        message = {"role": "tool", "tool_call_id": "call_1", "content": f"{owner}'s payroll\n" + "row\n" * 4000}
        handles[owner] = re.search(r"Handle: (\S+)\]", compactor.offload_tool_result(message, owner)["content"])[1]
        compactor.compact_with_record(history, owner)
    names = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.name != "config.yaml"]
    assert len({n.lower() for n in names}) == len(names), sorted(names)
    for owner in owners:
        assert compactor.read_tool_result(handles[owner], (1, 1), session_id=owner) == f"{owner}'s payroll"
        for other in owners:
            if other != owner:  # the other's handle, as a case-insensitive file system reads it
                for handle in (handles[other], handles[other].lower(), handles[other].upper()):
                    with pytest.raises(CompactorError):
                        compactor.read_tool_result(handle, session_id=owner)
    assert {s.session_id for s in compactor.sessions()} >= {"Alice", "alice", "ALICE"}
