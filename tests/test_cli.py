"""The ``compactor`` command, run for real: click's runner in-process, and a few real subprocesses.

Every file root points at ``tmp_path`` through a temporary config YAML (tests/cli_helpers.py).
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from cli_helpers import (
    ANSI,
    NOTICE,
    SECRET,
    corpus_file,
    fake_plugins,
    leaked,
    synthetic_history,
    write_config,
    write_jsonl,
)
from progressive_compactor import ProgressiveCompactor, Session
from progressive_compactor.cli import app as cli_mod
from progressive_compactor.cli.app import cli as main
from progressive_compactor.cli.gc import parse_duration
from progressive_compactor.cli.records import parse_line_range
from progressive_compactor.converters import read_records_file as read_records
from progressive_compactor.lab.probes import CATEGORIES
from progressive_compactor.lab.report import changed_view
from progressive_compactor.messages import messages_from_dicts, view_problems
from progressive_compactor.models import Anchor, AnchorType, CompactionRecord, CompactionTier, OffloadEntry
from progressive_compactor.notice import notice as notification
from progressive_compactor.plugin_manager import BUILTIN_PLUGINS, PluginInfo


def runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2 mixes stderr into output by default
    except TypeError:
        return CliRunner()


def run(*args: Any, input: str | None = None, env: dict[str, str] | None = None) -> Any:
    return runner().invoke(main, [str(a) for a in args], input=input, env=env)


def one_error_line(result: Any) -> str:
    """The command failed with exactly one ``error: ...`` line on stderr and no traceback."""
    assert result.exit_code != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


def subprocess_run(*args: Any, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("compactor")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "progressive_compactor.cli"]
    full_env = {**os.environ, **(env or {})}
    full_env.pop("FORCE_COLOR", None)
    return subprocess.run(
        command + [str(a) for a in args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120
    )


def stored_records(tmp_path: Path, sid: str) -> list[CompactionRecord]:
    return list(read_records(tmp_path / "records" / f"{sid}.jsonl"))


# --- conventions ------------------------------------------------------------------------------


def _all_commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        out.append(path + (name,))
        if isinstance(command, click.Group):
            out += _all_commands(command, path + (name,))
    return out


def test_every_command_has_help_with_an_example() -> None:
    commands = _all_commands(main)
    assert {
        ("compact",),
        ("replay",),
        ("records",),
        ("show",),
        ("plugins",),
        ("config", "check"),
        ("config", "show"),
        ("gc",),
        ("report",),
    } <= set(commands)
    for path in [(), *commands]:
        result = run(*path, "--help")
        assert result.exit_code == 0, (path, result.output)
        assert "Example: compactor" in result.stdout, path


def test_version() -> None:
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("compactor, version ")


def test_the_console_script_is_a_plain_function(capsys: pytest.CaptureFixture[str]) -> None:
    from progressive_compactor.cli import main as console_script

    assert not isinstance(console_script, click.Command)
    assert console_script(["--version"], standalone_mode=False) == 0
    assert capsys.readouterr().out.startswith("compactor, version ")


def test_unknown_command_and_option_are_one_line_usage_errors() -> None:
    assert "No such command 'nope'" in one_error_line(run("nope"))
    result = run("replay", "--frobnicate")
    assert result.exit_code == 2
    assert "--frobnicate" in one_error_line(result)


def _record(**changes: Any) -> CompactionRecord:
    entries = tuple(
        OffloadEntry(tool_call_id=f"c{i}", handle=f"s/c{i}", path="", chars=14_000, lines=1, sha256="")
        for i in range(3)
    )
    fields: dict[str, Any] = dict(
        id="r",
        session_id="s",
        timestamp="",
        tier=CompactionTier.FULL,
        tokens_before=45_213,
        tokens_after=8_100,
        msgs_before=40,
        msgs_after=8,
        anchors=tuple(Anchor(t) for t in AnchorType),
        offloaded=entries,
        summarized=28,
        preserved_tail=6,
        compression_ratio=0.8209,
        context_window=128_000,
    )
    fields.update(changes)
    return CompactionRecord(**fields)


def test_the_notice_format_exactly() -> None:
    """The documented notice, reproduced from a record with the same numbers."""
    record = _record()
    assert notification(record) == (
        "⚡ Context compressed [Full] 45.2K->8.1K tokens (82% smaller, 6% of window)\n"
        "   5 anchors | 3 offload(42KB) | 28 summarized | tail: 6 preserved"
    )
    assert NOTICE.fullmatch(notification(record))
    assert record.summary() == str(record) == notification(record)


def test_the_notice_names_an_escalation_and_errors() -> None:
    record = _record(
        tier=CompactionTier.EMERGENCY,
        requested_tier=CompactionTier.FULL,
        errors=("emergency fallback: forced truncation",),
        escalations=("loop guard: Full left the view at 83% of the window; escalating",),
    )
    first, second = notification(record).splitlines()
    assert first == "⚡ Context compressed [Emergency ← Full] 45.2K->8.1K tokens (82% smaller, 6% of window)"
    assert second.endswith("tail: 6 preserved | 1 error")
    assert "loop guard" not in notification(record)  # an escalation is said by the tier, not as an error
    assert NOTICE.fullmatch(notification(record))


def test_a_call_that_changed_nothing_is_never_a_zero_compression() -> None:
    unchanged = _record(
        tier=CompactionTier.WARN, tokens_after=45_213, offloaded=(), summarized=0, anchors=(), compression_ratio=0.0
    )
    text = notification(unchanged)
    assert text == "⚡ Context at 35% of window [Warn]: nothing to offload, view unchanged (45.2K tokens)"
    assert "0%" not in text and "->" not in text and not NOTICE.search(text)
    old = _record(context_window=0)  # a version 1 record does not carry the window
    assert notification(old).splitlines()[0] == "⚡ Context compressed [Full] 45.2K->8.1K tokens (82% smaller)"
    none = _record(tier=CompactionTier.NONE, tokens_after=45_213, offloaded=(), summarized=0, anchors=())
    assert notification(none) == ""
    assert none.summary() == str(none) == "⚡ No compaction needed [None]: view 45.2K tokens, 35% of window"


# --- compact ----------------------------------------------------------------------------------


def test_compact_writes_a_valid_view_and_the_exact_notice(tmp_path: Path, cfg: Path, session: Path) -> None:
    result = run("compact", session, "-c", cfg)
    assert result.exit_code == 0, result.output
    view = [json.loads(line) for line in result.stdout.splitlines()]
    assert view[0]["role"] == "system" and len(view) < len(synthetic_history())
    assert view_problems(messages_from_dicts(view)) == []
    (record,) = stored_records(tmp_path, "sess")
    assert result.stderr == notification(record) + "\n"
    assert NOTICE.fullmatch(result.stderr.rstrip("\n"))


def test_compact_reads_json_array_and_stdin_alike(tmp_path: Path, cfg: Path, session: Path) -> None:
    history = synthetic_history()
    array = tmp_path / "array.json"
    array.write_text(json.dumps(history, indent=2), "utf-8")
    from_jsonl = run("compact", session, "-c", cfg, "-s", "a")
    from_array = run("compact", array, "-c", cfg, "-s", "b")
    from_stdin = run("compact", "-", "-c", cfg, "-s", "c", input=session.read_text("utf-8"))
    assert from_jsonl.exit_code == from_array.exit_code == from_stdin.exit_code == 0
    views = [re.sub(r"\b[abc]/call_", "s/call_", r.stdout) for r in (from_jsonl, from_array, from_stdin)]
    assert views[0] == views[1] == views[2]  # the same view, handles aside (they name the session)


def test_stdin_that_is_not_utf8_is_refused_as_a_file_is(tmp_path: Path, cfg: Path) -> None:
    latin1 = json.dumps({"role": "user", "content": "café"}, ensure_ascii=False).encode("latin-1") + b"\n"
    (tmp_path / "latin1.jsonl").write_bytes(latin1)
    from_file = one_error_line(run("compact", tmp_path / "latin1.jsonl", "-c", cfg))
    assert from_file == f"error: {tmp_path / 'latin1.jsonl'}: not UTF-8 text (byte 32)"
    from_stdin = runner().invoke(main, ["compact", "-", "-c", str(cfg)], input=latin1)
    assert one_error_line(from_stdin) == "error: -: not UTF-8 text (byte 32)"
    crlf = runner().invoke(main, ["compact", "-", "-c", str(cfg)], input=latin1.decode("latin-1").encode() + b"\r\n")
    assert crlf.exit_code == 0 and json.loads(crlf.stdout)["content"] == "café"


def test_compact_json_and_output_file(tmp_path: Path, cfg: Path, session: Path) -> None:
    out = tmp_path / "view.json"
    result = run("compact", session, "-c", cfg, "--json", "-o", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text("utf-8"))
    assert set(data) == {"view", "record"}
    assert data["record"]["tier"] in ("warn", "soft", "full", "emergency")
    assert data["record"]["tokens_after"] < data["record"]["tokens_before"]


def test_an_output_file_that_is_the_input_is_refused_and_the_input_kept(
    tmp_path: Path, cfg: Path, session: Path
) -> None:
    before = session.read_bytes()
    result = run("compact", session, "-c", cfg, "-o", session)
    message = f"error: --output {session} is the input file {session}; write to another file (see '"
    assert one_error_line(result).startswith(message)
    assert result.exit_code == 2 and session.read_bytes() == before
    link = tmp_path / "link.jsonl"
    link.symlink_to(session)  # the same file by another name
    assert run("compact", link, "-c", cfg, "-o", session).exit_code == 2
    assert session.read_bytes() == before


def test_compact_says_what_failed_on_stderr_and_still_writes_the_whole_view(tmp_path: Path, session: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "tool_results").write_text("", "utf-8")  # offloads cannot be written: a file where their folder goes
    cfg = write_config(data, tool_result_threshold=500, offload_threshold=2000)  # every result: more than 5 errors
    result = run("compact", session, "-c", cfg, "-o", tmp_path / "view.jsonl")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings[0].startswith("warning: offload of call_0 failed: OffloadError: cannot write in ")
    (record,) = stored_records(data, "sess")
    errors = [e for e in record.errors if e != "emergency fallback: forced truncation"]  # the notice says it
    assert len(errors) > 5 and [w.removeprefix("warning: ") for w in warnings[:5]] == errors[:5]
    assert warnings[5:] == [f"warning: ... and {len(errors) - 5} more (--json gives the record with all of them)"]
    view = [json.loads(line) for line in (tmp_path / "view.jsonl").read_text("utf-8").splitlines()]
    assert view_problems(messages_from_dicts(view)) == []
    (tmp_path / "ok").mkdir()
    clean = run("compact", session, "-c", write_config(tmp_path / "ok", tool_result_threshold=500))
    assert clean.exit_code == 0 and "warning:" not in clean.stderr


def test_compact_output_dash_is_stdout_and_a_link_is_written_through(
    tmp_path: Path, cfg: Path, session: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = run("compact", session, "-c", cfg, "-o", "-")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["role"] for line in result.stdout.splitlines()][0] == "system"
    assert NOTICE.fullmatch(result.stderr.rstrip("\n"))  # the notice on stderr, the view alone on stdout
    assert not (tmp_path / "-").exists()
    page = run("report", session, "-c", cfg, "-o", "-")
    assert page.exit_code == 0, page.output
    assert page.stdout.startswith("<!doctype html>") and page.stderr.startswith("wrote - (")
    (tmp_path / "real.jsonl").write_text("", "utf-8")
    (tmp_path / "link.jsonl").symlink_to("real.jsonl")
    assert run("compact", session, "-c", cfg, "-s", "b", "-o", tmp_path / "link.jsonl").exit_code == 0
    assert (tmp_path / "link.jsonl").is_symlink()
    assert json.loads((tmp_path / "real.jsonl").read_text("utf-8").splitlines()[0])["role"] == "system"


def test_compact_masks_secrets_before_json_escapes_them(tmp_path: Path, secret_cfg: Path, secret_session: Path) -> None:
    out = tmp_path / "view.jsonl"
    assert run("compact", secret_session, "-c", secret_cfg, "-o", out).exit_code == 0
    view = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    tail = [m["content"] for m in view if m["role"] == "user" and m["content"].startswith("Connect")]
    assert tail == ["Connect with the password [REDACTED] please."]  # the later instruction, in the tail
    assert not leaked(out.read_text("utf-8"))
    result = run("compact", secret_session, "-c", secret_cfg, "--json", "-s", "other")
    assert result.exit_code == 0 and "password [REDACTED] please" in result.stdout
    assert not leaked(result.stdout)


def test_records_masks_secrets_a_record_was_written_with(
    tmp_path: Path, secret_cfg: Path, secret_session: Path
) -> None:
    # written while the secret was not known (its variable unset): the record holds it
    assert run("compact", secret_session, "-c", secret_cfg, env={"TEST_DB_PASSWORD": ""}).exit_code == 0
    assert leaked((tmp_path / "records" / "sess.jsonl").read_text("utf-8"))
    for options in (["--json"], ["--full"]):
        for source in ("sess", tmp_path / "records" / "sess.jsonl"):
            result = run("records", source, "-c", secret_cfg, *options)
            assert result.exit_code == 0 and "[REDACTED]" in result.stdout, (source, options)
            assert not leaked(result.output), (source, options)


def test_missing_file(cfg: Path) -> None:
    assert one_error_line(run("compact", "nope.jsonl", "-c", cfg)) == "error: nope.jsonl: no such file"


def test_invalid_json_names_the_line(tmp_path: Path, cfg: Path) -> None:
    lines = [json.dumps(m) for m in synthetic_history()[:4]]
    lines[2] = lines[2][:-5]  # a line cut short
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", "utf-8")
    line = one_error_line(run("compact", bad, "-c", cfg))
    assert line.startswith(f"error: {bad}: invalid JSON on line 3, column ")


def test_wrong_role_names_line_and_message(tmp_path: Path, cfg: Path) -> None:
    messages = synthetic_history()[:3]
    messages[1] = {"role": "bot", "content": "hi"}
    bad = write_jsonl(tmp_path / "roles.jsonl", messages)
    (tmp_path / "blank-first.jsonl").write_text("\n" + bad.read_text("utf-8"), "utf-8")
    line = one_error_line(run("compact", bad, "-c", cfg))
    assert line.startswith(f"error: {bad}: line 2 (message 1): role 'bot' is not one of")
    shifted = one_error_line(run("compact", tmp_path / "blank-first.jsonl", "-c", cfg))
    assert ": line 3 (message 1): role 'bot'" in shifted


def test_tool_message_without_id_and_empty_file(tmp_path: Path, cfg: Path) -> None:
    bad = write_jsonl(tmp_path / "tool.jsonl", [{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}])
    assert "line 2 (message 1): a tool message needs a tool_call_id" in one_error_line(run("compact", bad, "-c", cfg))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", "utf-8")
    assert one_error_line(run("compact", empty, "-c", cfg)) == f"error: {empty}: no messages"


@pytest.mark.parametrize(
    "make_config, expected",
    [
        (lambda d: d, "cannot read config file: Is a directory"),
        (
            lambda d: (d / "bin.yaml", (d / "bin.yaml").write_bytes(b"\xff\xfe\x00"))[0],
            "cannot read config file: 'utf-8' codec",
        ),
        (lambda d: d / "missing.yaml", "cannot read config file: No such file or directory"),
        (lambda d: (d / "y.yaml", (d / "y.yaml").write_text("a: [1\n"))[0], "invalid YAML at line 2"),
    ],
    ids=["directory", "not-utf8", "missing", "bad-yaml"],
)
def test_unreadable_config(tmp_path: Path, session: Path, make_config: Any, expected: str) -> None:
    config = make_config(tmp_path)
    line = one_error_line(run("replay", session, "-c", config))
    assert expected in line and str(config) in line


def test_debug_shows_the_traceback(cfg: Path) -> None:
    plain = run("show", "nobody/nothing", "-c", cfg)
    one_error_line(plain)
    debug = run("--debug", "show", "nobody/nothing", "-c", cfg)
    assert debug.exit_code == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.rstrip().splitlines()[-1] == "error: no offloaded tool result has the handle 'nobody/nothing'"


# --- replay -----------------------------------------------------------------------------------


def test_replay_prints_each_compaction_and_a_summary(tmp_path: Path, cfg: Path, session: Path) -> None:
    keep = tmp_path / "kept"
    result = run("replay", session, "-c", cfg, "--keep", keep)
    assert result.exit_code == 0, result.output
    assert not ANSI.search(result.stdout)  # not a terminal: no escape codes at all
    records = list(read_records(keep / "records" / "sess.jsonl"))
    changed = [r for r in records if changed_view(r)]
    assert changed, "the synthetic session must compact at 8,000 tokens"
    notices = [m.group(0) for m in NOTICE.finditer(result.stdout)]
    assert notices == [notification(r) for r in changed]
    calls = sum(1 for i, m in enumerate(synthetic_history()) if i and m["role"] == "assistant")
    table = result.stdout[result.stdout.index("Replay of sess") :]
    assert re.search(rf"^LLM calls +{calls}$", table, re.M)
    for label in (
        "calls at tier Soft",
        "compactions changing the view",
        "peak view, share of window",
        "input tokens sent",
        "overflows (view > window)",
        "offloads",
        "summarizer calls",
        "facts kept: request",
    ):
        assert re.search(rf"^{re.escape(label)} +\S", table, re.M), label
    assert f"kept in {keep}: tool_results/, records/, replay/" in result.stdout
    assert f"read the records with:\ncompactor records sess --data-dir {keep}\n" in result.stdout
    # a replay never writes where the config's own stores keep data (here: tmp_path)
    assert not any((tmp_path / name).exists() for name in ("records", "tool_results", "state"))


def test_a_kept_replay_folder_and_its_missing_parents_are_owner_only(tmp_path: Path, cfg: Path, session: Path) -> None:
    old = os.umask(0o022)  # the usual one: folders made by default would be 0755
    try:
        keep = tmp_path / "new" / "kept"
        assert run("replay", session, "-c", cfg, "--keep", keep).exit_code == 0
        report = tmp_path / "other" / "report-kept"
        assert run("report", session, "-c", cfg, "--keep", report, "-o", tmp_path / "r.html").exit_code == 0
    finally:
        os.umask(old)
    for folder in (keep, keep.parent, report, report.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_what_a_replay_kept_is_read_with_data_dir(tmp_path: Path, cfg: Path, session: Path) -> None:
    keep = tmp_path / "kept"
    assert run("replay", session, "-c", cfg, "--keep", keep).exit_code == 0
    kept = list(read_records(keep / "records" / "sess.jsonl"))
    listed = run("records", "sess", "-c", cfg, "--data-dir", keep, "--json")
    assert listed.exit_code == 0, listed.output
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [r.id for r in kept]
    entry = next(e for r in kept for e in r.offloaded)
    original = next(m["content"] for m in synthetic_history() if m.get("tool_call_id") == entry.tool_call_id)
    shown = run("show", entry.handle, "-c", cfg, "--data-dir", keep)
    assert shown.exit_code == 0 and shown.stdout == original + "\n"
    assert not (keep / "state").exists()  # state lives in memory during a replay
    missing = run("records", "sess", "-c", cfg)  # the config's own folder holds nothing
    assert "no records for session 'sess'" in one_error_line(missing)


def test_the_facts_a_replay_kept_and_records_prints_have_secrets_masked(
    tmp_path: Path, secret_cfg: Path, secret_session: Path
) -> None:
    keep = tmp_path / "kept"
    assert run("replay", secret_session, "-c", secret_cfg, "--keep", keep).exit_code == 0
    facts = (keep / "replay" / "sess.facts.jsonl").read_text("utf-8")
    assert "Connect with the password [REDACTED] please." in facts  # the instruction is a lost fact, masked
    assert not any(leaked(p.read_text("utf-8")) for p in keep.rglob("*") if p.is_file())
    shown = run("records", "sess", "-c", secret_cfg, "--data-dir", keep, "--full")
    assert shown.exit_code == 0 and "password [REDACTED] please" in shown.stdout
    assert not leaked(shown.output)
    # a facts file written before the secret was known (or by an older version) is masked when printed
    record = json.loads(facts.splitlines()[0])["record"]
    old = {"record": record, "call": 1, "message": 1, "lost": {"instructions": [f"Use {SECRET} now."]}}
    (keep / "replay" / "sess.facts.jsonl").write_text(json.dumps(old) + "\n", "utf-8")
    shown = run("records", "sess", "-c", secret_cfg, "--data-dir", keep, "--full")
    assert shown.exit_code == 0 and "Use [REDACTED] now." in shown.stdout
    assert not leaked(shown.output)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_records_never_follows_a_link_nor_waits_on_a_pipe_planted_for_the_replay_facts(
    tmp_path: Path, cfg: Path, session: Path
) -> None:
    """The facts ``replay --keep`` left beside the records are under the data folder: a link
    planted there is never followed, a named pipe never waited on (the other files are not)."""
    from timeouts import no_hang

    keep = tmp_path / "kept"
    assert run("replay", session, "-c", cfg, "--keep", keep).exit_code == 0
    facts = keep / "replay" / "sess.facts.jsonl"
    record = json.loads(facts.read_text("utf-8").splitlines()[0])["record"]
    outside = tmp_path / "outside.jsonl"
    outside.write_text(json.dumps({"record": record, "lost": {"instructions": ["read from outside"]}}) + "\n")
    facts.unlink()
    facts.symlink_to(outside)
    linked = run("records", "sess", "-c", cfg, "--data-dir", keep, "--full")
    assert linked.exit_code == 0, linked.output
    assert "read from outside" not in linked.output
    facts.unlink()
    os.mkfifo(facts, 0o600)
    with no_hang(5.0):
        piped = run("records", "sess", "-c", cfg, "--data-dir", keep, "--full")
    assert piped.exit_code == 0, piped.output
    assert "Summary" in piped.stdout  # the records are shown all the same, without facts
    records_file = keep / "records" / "sess.jsonl"  # a records file named on the command line: likewise
    with no_hang(5.0):
        named = run("records", records_file, "-c", cfg, "--full")
    assert named.exit_code == 0, named.output


def test_replay_json_one_object_per_session(tmp_path: Path, cfg: Path, session: Path) -> None:
    other = write_jsonl(tmp_path / "other.jsonl", synthetic_history(rounds=3))
    result = run("replay", session, other, "-c", cfg, "--json", "--details")
    assert result.exit_code == 0, result.output
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert [o["session"] for o in objects] == ["sess", "other"]
    big, small = objects
    assert big["calls"] == sum(big["tiers"].values()) == 13
    assert big["compactions"] == big["calls"] - big["tiers"]["none"] > 0
    log = big["compaction_log"]
    history = synthetic_history()
    assert all(history[c["message"]]["role"] == "assistant" for c in log)  # the message the view was made for
    assert [c["call"] for c in log] == sorted({c["call"] for c in log}) and all(1 <= c["call"] <= 13 for c in log)
    assert all(set(c["facts_lost"]) <= set(CATEGORIES) for c in log if c["changed_view"])
    assert big["peak_view_tokens"] <= big["context_window"] == 8000
    assert big["total_input_tokens"] > big["peak_view_tokens"]
    assert small["compactions"] == 0 and small["offloads"] == 0
    assert set(big["retention"]) == set(CATEGORIES)
    assert all(r is None or 0 <= r <= 1 for r in big["retention"].values())
    assert "⚡" not in result.stdout


def test_sessions_of_the_same_file_name_get_names_no_other_file_has(tmp_path: Path, cfg: Path, session: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_jsonl(tmp_path / "a" / "x.jsonl", synthetic_history())
    second = write_jsonl(tmp_path / "b" / "x.jsonl", synthetic_history(rounds=13))
    third = write_jsonl(tmp_path / "x-2.jsonl", synthetic_history(rounds=14))
    keep = tmp_path / "keep"
    result = run("replay", first, second, third, "-c", cfg, "--json", "--keep", keep)
    assert result.exit_code == 0, result.output
    names = [json.loads(line)["session"] for line in result.stdout.splitlines()]
    assert len(set(names)) == 3 and names[0] == "x" and names[2] == "x-2"  # each file's name stands
    # each kept its own records: a second x named x-2 would have replaced the file x-2's
    assert sorted(p.name for p in (keep / "records").iterdir()) == sorted(f"{n}.jsonl" for n in names)


def test_a_keep_folder_where_the_replay_would_write_over_an_input_is_refused(tmp_path: Path, cfg: Path) -> None:
    keep = tmp_path / "keep"
    (keep / "records").mkdir(parents=True)
    session = write_jsonl(keep / "records" / "sess.jsonl", synthetic_history())  # where its records would go
    before = session.read_bytes()
    for command in (["replay", "--json"], ["report", "-o", "-"]):
        result = run(*command, session, "-c", cfg, "--keep", keep)
        assert result.exit_code == 2, result.output
        assert f"--keep {keep}: {session} is in its records folder" in result.stderr
        assert session.read_bytes() == before
    # the sessions' own folder is fine: the replay writes in subfolders of it
    assert run("replay", session, "-c", cfg, "--keep", keep / "records").exit_code == 0


def test_replay_leaves_nothing_behind_without_keep(tmp_path: Path, session: Path) -> None:
    """The default config writes offloads under the working folder; a replay uses a temporary one."""
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess_run("replay", session, "-w", "8000", "--json", cwd=work, env={"HOME": str(tmp_path / "home")})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["offloads"] > 0
    assert list(work.iterdir()) == [] and not (tmp_path / "home").exists()


def test_a_closed_output_pipe_ends_every_command_alike_silently(tmp_path: Path, cfg: Path, session: Path) -> None:
    """``compactor ... | head -1``: the reader is gone before the command writes; each command
    stops, exit status 0, nothing on stderr."""
    assert run("compact", session, "-c", cfg).exit_code == 0  # records for 'records'
    exe = Path(sys.executable).with_name("compactor")
    env = {k: v for k, v in os.environ.items() if k != "FORCE_COLOR"}
    for args in (
        ["replay", session, "-c", cfg],
        ["records", "sess", "-c", cfg],
        ["plugins", "-c", cfg],
        ["compact", session, "-c", cfg, "-s", "other"],
        ["config", "show", cfg],
    ):
        read, write = os.pipe()
        os.close(read)  # the reader is gone
        done = subprocess.run(
            [str(exe), *map(str, args)], stdout=write, stderr=subprocess.PIPE, text=True, env=env, timeout=120
        )
        os.close(write)
        assert (done.returncode, done.stderr) == (0, ""), args


@pytest.mark.corpus
def test_replay_corpus_subprocess(tmp_path: Path, cfg: Path) -> None:
    source = corpus_file()
    messages = [json.loads(line) for line in source.read_text("utf-8").splitlines() if line.strip()]
    result = subprocess_run("replay", source, "-c", cfg, "-w", "16000", cwd=tmp_path, env={"NO_COLOR": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no progress bar when stderr is not a terminal
    assert not ANSI.search(result.stdout)
    assert NOTICE.search(result.stdout)
    calls = sum(1 for i, m in enumerate(messages) if i and m["role"] == "assistant")
    assert re.search(rf"^LLM calls +{calls}$", result.stdout, re.M)
    as_json = subprocess_run("replay", source, "-c", cfg, "-w", "16000", "--json", cwd=tmp_path)
    data = json.loads(as_json.stdout)
    assert data["calls"] == calls and data["overflows"] == 0 and data["invalid_views"] == 0
    assert len(NOTICE.findall(result.stdout)) == data["view_changing_compactions"]


def test_compact_subprocess_error_is_one_line(tmp_path: Path) -> None:
    result = subprocess_run("compact", "missing.jsonl", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == "error: missing.jsonl: no such file\n" and result.stdout == ""


# --- colour -----------------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty, no_color, coloured", [(True, False, True), (True, True, False), (False, False, False)])
def test_colour_follows_no_color_and_tty(
    monkeypatch: pytest.MonkeyPatch, tty: bool, no_color: bool, coloured: bool
) -> None:
    from progressive_compactor.cli.render import make_console

    monkeypatch.setenv("FORCE_COLOR", "1")  # must not colour a pipe
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)
    stream = _Tty() if tty else io.StringIO()
    make_console(stream).print("[red]alert[/red]")
    assert ("\x1b[31m" in stream.getvalue()) is coloured
    if not tty:
        assert not ANSI.search(stream.getvalue())


# --- records, show ----------------------------------------------------------------------------


def test_records_by_session_id_and_by_file(tmp_path: Path, cfg: Path, session: Path) -> None:
    assert run("compact", session, "-c", cfg).exit_code == 0
    by_id = run("records", "sess", "-c", cfg)
    assert by_id.exit_code == 0, by_id.output
    assert "1 records in" in by_id.stdout and "Emergency" in by_id.stdout
    path = tmp_path / "records" / "sess.jsonl"
    raw = run("records", path, "--json")
    assert [json.loads(line)["session_id"] for line in raw.stdout.splitlines()] == ["sess"]


def test_records_skips_a_torn_last_line_with_a_warning(tmp_path: Path, cfg: Path, session: Path) -> None:
    assert run("compact", session, "-c", cfg).exit_code == 0
    path = tmp_path / "records" / "sess.jsonl"
    whole = path.read_text("utf-8")
    path.write_text(whole + whole[: len(whole) // 2], "utf-8")  # a crash mid-write
    result = run("records", path, "--json")
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 1
    assert "warning:" in result.stderr and "torn last line" in result.stderr


@pytest.mark.parametrize("field", ["timestamp", "session_id", "summary_text"])
def test_records_skips_a_record_with_null_text_as_one_missing_it(
    tmp_path: Path, cfg: Path, session: Path, field: str
) -> None:
    assert run("compact", session, "-c", cfg).exit_code == 0
    path = tmp_path / "records" / "sess.jsonl"
    good = json.loads(path.read_text("utf-8"))
    path.write_text(json.dumps({**good, field: None}) + "\n")
    alone = run("records", path)
    assert (
        alone.exit_code == 1 and "None" not in alone.stdout and "no line of it is a compaction record" in alone.stderr
    )
    path.write_text(json.dumps({**good, "id": "hand-edited", field: None}) + "\n" + json.dumps(good) + "\n")
    for args in (["records", path], ["records", "sess", "-c", cfg], ["records", path, "--json"]):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert "None" not in result.stdout and "hand-edited" not in result.stdout
        assert f"warning: {path}:1: skipped unreadable line: {field}: null where text belongs" in result.stderr
    assert "1 records in" in run("records", path).stdout
    report = run("report", path, "-o", tmp_path / "report.md")
    assert report.exit_code == 0, report.output
    text = (tmp_path / "report.md").read_text("utf-8")
    assert "(None)" not in text and "None / " not in text and "record 1 (20" in text


def test_records_errors(tmp_path: Path, cfg: Path) -> None:
    line = one_error_line(run("records", "no-such-session", "-c", cfg))
    assert line == (
        f"error: no records for session 'no-such-session': no store of config '{cfg}' (stores: store-jsonl) "
        "holds any; pass a records JSONL path instead"
    )
    assert one_error_line(run("records", tmp_path / "x.jsonl", "-c", cfg)) == (
        f"error: {tmp_path / 'x.jsonl'}: no such file, and no store of config '{cfg}' (stores: store-jsonl)"
        f" holds a session of that name"
    )
    none = tmp_path / "none.yaml"
    none.write_text(f"data_dir: '{tmp_path}'\nplugins: {{stores: []}}\n", "utf-8")
    line = one_error_line(run("records", "sess", "-c", none))
    assert line.startswith("error: no records for session 'sess': no store of config") and "(stores: none)" in line


def test_records_of_a_session_whose_id_looks_like_a_path(tmp_path: Path, cfg: Path, session: Path) -> None:
    for sid in ("team/t42", "t43.jsonl"):
        assert run("compact", session, "-c", cfg, "-s", sid).exit_code == 0
        result = run("records", sid, "-c", cfg)
        assert result.exit_code == 0, result.output
        assert f"1 records in session {sid}" in result.stdout


def test_records_of_a_file_that_is_not_a_records_file_is_an_error(tmp_path: Path, cfg: Path, session: Path) -> None:
    line = one_error_line(run("records", session, "-c", cfg))
    assert (
        line
        == f"error: {session}: not a records file (it holds chat messages; to replay it: compactor replay {session})"
    )
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not json at all\n", "utf-8")
    result = run("records", garbage, "-c", cfg)
    assert result.exit_code == 1
    assert (
        result.stderr.splitlines()[-1] == f"error: {garbage}: not a records file: no line of it is a compaction record"
    )
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", "utf-8")
    assert run("records", empty, "-c", cfg).exit_code == 0  # a store that has written nothing yet


def test_show_whole_and_line_range(tmp_path: Path, cfg: Path, session: Path) -> None:
    assert run("compact", session, "-c", cfg).exit_code == 0
    (record,) = stored_records(tmp_path, "sess")
    entry = record.offloaded[0]
    original = next(m["content"] for m in synthetic_history() if m.get("tool_call_id") == entry.tool_call_id)
    whole = run("show", entry.handle, "-c", cfg)
    assert whole.exit_code == 0 and whole.stdout == original + "\n"
    part = run("show", entry.handle, "-c", cfg, "--lines", "2:4")
    assert part.stdout.splitlines() == original.splitlines()[1:4]
    as_json = json.loads(run("show", entry.handle, "-c", cfg, "--lines", "3:", "--json").stdout)
    assert as_json["text"].splitlines() == original.splitlines()[2:] and as_json["lines"] == [3, None]
    assert run("show", entry.handle, "-c", cfg, "--lines", "9:2").exit_code == 2


@pytest.mark.parametrize(
    "text, expected", [("2:4", (2, 4)), ("7", (7, 7)), (":3", (1, 3)), ("5:", (5, sys.maxsize)), (None, None)]
)
def test_parse_line_range(text: str | None, expected: Any) -> None:
    assert parse_line_range(text) == expected


@pytest.mark.parametrize("text", ["a:b", ":", "0:3", "4:2", "1:2:3"])
def test_parse_line_range_rejects(text: str) -> None:
    with pytest.raises(click.BadParameter):
        parse_line_range(text)


# --- plugins ----------------------------------------------------------------------------------


def test_plugins_lists_hooks_and_selection(cfg: Path) -> None:
    result = run("plugins", "-c", cfg, "--json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert set(BUILTIN_PLUGINS) <= set(rows)
    assert rows["tier-soft"]["hooks"] == ["apply_tier"]
    assert {"offload", "read_offloaded", "on_delete_session"} <= set(rows["offload-files"]["hooks"])
    assert rows["summarize-extractive"]["selected"] == ["summarizer"]
    assert rows["state-files"]["selected"] == ["state"] and rows["state-memory"]["selected"] == []
    assert rows["store-jsonl"]["selected"] == ["stores"]
    assert rows["tokens-chars"]["distribution"] == "progressive-compactor"
    table = run("plugins", "-c", cfg)
    assert "summarize-extractive" in table.stdout and "summarizer" in table.stdout


def test_a_broken_plugin_shows_its_error(monkeypatch: pytest.MonkeyPatch, cfg: Path) -> None:
    from progressive_compactor import plugin_manager

    real = plugin_manager.installed_plugins()
    broken = PluginInfo(
        name="broken-thing", distribution="broken-dist", version="9.9", value="no_such_module_xyz:Plugin"
    )
    monkeypatch.setattr(plugin_manager, "installed_plugins", lambda: {**real, "broken-thing": broken})
    result = run("plugins", "-c", cfg, "--json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert "failed to import" in rows["broken-thing"]["error"] and "no_such_module_xyz" in rows["broken-thing"]["error"]
    assert rows["tier-full"]["error"] is None


CLOSE_RAISES = """
from progressive_compactor.plugin import hookimpl


class Plugin:
    @hookimpl
    def persist_record(self, record):
        pass

    def close(self):
        raise RuntimeError("close boom")
"""


def test_a_plugin_whose_close_raises_loses_no_view_and_is_a_config_problem(
    tmp_path: Path, session: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_plugins(monkeypatch, tmp_path, CLOSE_RAISES, close_raise="Plugin")
    config = write_config(tmp_path, plugins={"extra": ["close-raise"]})
    result = run("compact", session, "-c", config)
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["role"] for line in result.stdout.splitlines()][0] == "system"
    assert "warning: close of plugin close-raise failed: RuntimeError: close boom\n" in result.stderr
    checked = run("config", "check", config)
    assert checked.exit_code == 1
    assert f"{config}: plugin 'close-raise' failed to close: RuntimeError: close boom @ $.config.close-raise" in (
        checked.stdout
    )


def test_a_plugin_that_exits_at_import_takes_no_command_down(
    tmp_path: Path, cfg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_plugins(monkeypatch, tmp_path, "import sys\nsys.exit('plugin exits at import')\n", exit_import="Plugin")
    result = run("plugins", "-c", cfg, "--json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["exit-import"]["error"] == "failed to import: SystemExit: plugin exits at import"
    config = write_config(tmp_path, plugins={"extra": ["exit-import"]})
    checked = run("config", "check", config)
    assert checked.exit_code == 1
    assert checked.stdout == (
        f"{config}: plugin 'exit-import' from distribution fake-dist failed to import: SystemExit: plugin exits"
        " at import @ $.plugins\n"
    )


# --- config -----------------------------------------------------------------------------------


def test_config_check_ok(cfg: Path) -> None:
    result = run("config", "check", cfg)
    assert result.exit_code == 0 and result.stdout == f"{cfg}: OK\n"
    assert run("config", "check", "default").exit_code == 0


def test_config_check_reports_every_problem_with_its_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "plugins: {summarizer: summarize-nope}\n"
        "config:\n"
        "  offload-files: {rooot: x, preview_lines: ten}\n"
        "  policy-cost: {warn: 0.9, soft: 0.5}\n"
        "  store-jsonl: {directory: 5}\n"
        "  state-files: {}\n",
        "utf-8",
    )
    result = run("config", "check", bad)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert all(line.startswith(f"{bad}: ") and " @ $" in line for line in lines)
    paths = {line.rsplit(" @ ", 1)[1].split(";")[0] for line in lines}
    # state-files is installed but not selected (state: state-memory): its block is kept unused
    assert paths == {
        "$.plugins.summarizer",
        "$.config.policy-cost",
        "$.config.offload-files.preview_lines",
        "$.config.offload-files",
        "$.config.store-jsonl.directory",
    }
    assert any("unknown plugin 'summarize-nope'; did you mean 'summarize-openai'?" in line for line in lines)
    assert any("unknown setting 'rooot'; did you mean 'root'?" in line for line in lines)
    assert any("0 < warn <= soft <= full <= emergency" in line for line in lines)  # not hidden by the others
    assert result.stderr == f"error: 5 problems in {bad}\n"
    as_json = json.loads(run("config", "check", bad, "--json").stdout)
    assert as_json["ok"] is False and len(as_json["problems"]) == 5


def test_a_data_folder_that_is_a_file_is_refused_before_anything_is_compacted(tmp_path: Path, session: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("", "utf-8")
    config = tmp_path / "dd.yaml"
    config.write_text(f"data_dir: {afile}\n", "utf-8")
    checked = run("config", "check", config)
    assert checked.exit_code == 1
    assert (
        checked.stdout
        == f"{config}: data_dir {str(afile)!r} is not a folder: {str(afile)!r} is a file; name a folder (created if missing) @ $.data_dir\n"
    )
    result = run("compact", session, env={"COMPACTOR_DATA_DIR": str(afile)})
    assert "the environment variable COMPACTOR_DATA_DIR" in one_error_line(result) and result.stdout == ""


def test_config_check_duplicate_keys_and_a_block_for_a_plugin_nobody_installed(tmp_path: Path) -> None:
    bad = tmp_path / "typo.yaml"
    bad.write_text("config:\n  store-jsnl: {record_none: true}\ncontext_window: 1000\ncontext_window: 2000\n", "utf-8")
    assert run("config", "check", bad).stdout.splitlines() == [
        f"{bad}: invalid YAML at line 4, column 1: duplicate key 'context_window' (first on line 3); "
        "each key may appear once"
    ]
    bad.write_text("config:\n  store-jsnl: {record_none: true}\n", "utf-8")
    assert run("config", "check", bad).stdout.splitlines() == [
        f"{bad}: settings for plugin 'store-jsnl', which is not installed; did you mean 'store-jsonl'? "
        "@ $.config.store-jsnl"
    ]


def test_config_check_unreadable(tmp_path: Path) -> None:
    result = run("config", "check", tmp_path)
    assert result.exit_code == 1 and "cannot read config file" in result.stdout


def test_config_show_fills_defaults(cfg: Path) -> None:
    import yaml

    data = yaml.safe_load(run("config", "show", cfg).stdout)
    assert data["context_window"] == 8000 and data["min_tail_messages"] == 6
    assert data["data_dir"] == str(cfg.parent)
    assert data["config"]["offload-files"]["root"] == "{data_dir}/tool_results"
    assert data["config"]["offload-files"]["preview_chars"] == 1500  # a plugin default, not in the file
    assert data["config"]["policy-cost"]["soft"] == 0.7 and data["config"]["policy-cost"]["keep_share"] == 0.03
    assert data["pricing"]["input"] > 0
    assert json.loads(run("config", "show", cfg, "--json").stdout) == data


def test_config_show_never_prints_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-value-1234")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-value-5678")
    for name in ("openai", "anthropic"):
        result = run("config", "show", name)
        if result.exit_code != 0 and "cannot read" in result.stderr:
            continue  # bundled config not shipped yet
        assert result.exit_code == 0, result.output
        assert "secret-value" not in result.stdout
        assert "_API_KEY" in result.stdout  # the variable's name is shown, never its value
    from progressive_compactor.cli.config import masked as mask

    masked = mask(
        {
            "api_key": "sk-1",
            "api_key_env": "OPENAI_API_KEY",
            "max_tokens": 5,
            "tokens": "tokens-chars",
            "nested": [{"password": "p"}],
        }
    )
    assert masked == {
        "api_key": "***",
        "api_key_env": "OPENAI_API_KEY",
        "max_tokens": 5,
        "tokens": "tokens-chars",
        "nested": [{"password": "***"}],
    }
    assert mask({"dsn": "postgresql://me:hunter2@db/records"}) == {"dsn": "postgresql://me:***@db/records"}
    # every header of extra_headers may carry a key, whatever its name (they are registered as secrets)
    headers = {"extra_headers": {"api-key": "k1", "Helicone-Auth": "Bearer k2"}}
    assert mask(headers) == {"extra_headers": {"api-key": "***", "Helicone-Auth": "***"}}


# --- gc ---------------------------------------------------------------------------------------


def _session_paths(tmp_path: Path, sid: str) -> list[Path]:
    return [
        tmp_path / "tool_results" / sid,
        tmp_path / "records" / f"{sid}.jsonl",
        tmp_path / "state" / f"{sid}.json",
        tmp_path / "state" / f"{sid}.lock",
    ]


def test_gc_session_cascades(tmp_path: Path, cfg: Path, session: Path) -> None:
    assert run("compact", session, "-c", cfg).exit_code == 0
    paths = _session_paths(tmp_path, "sess")
    assert all(p.exists() for p in paths)
    result = run("gc", "sess", "-c", cfg)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "removed session sess"
    assert not any(p.exists() for p in paths)
    assert all(str(p) in result.stdout for p in paths if p.suffix != ".lock")
    again = run("gc", "sess", "-c", cfg)
    assert again.exit_code == 0 and "session sess: nothing stored" in again.stderr


def test_commands_take_a_data_dir(tmp_path: Path, session: Path) -> None:
    data = tmp_path / "data"
    compacted = run("compact", session, "-w", "8000", "--data-dir", data, "--json")
    assert compacted.exit_code == 0, compacted.output
    record = json.loads(compacted.stdout)["record"]
    handle = record["offloaded"][0]["handle"]
    assert (data / "records" / "sess.jsonl").is_file() and (data / "tool_results" / "sess").is_dir()
    listed = run("records", "sess", "--data-dir", data, "--json")
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [record["id"]]
    assert run("show", handle, "--data-dir", data).exit_code == 0
    assert "no offloaded tool result" in one_error_line(run("show", handle, "--data-dir", tmp_path / "empty"))
    removed = run("gc", "sess", "--data-dir", data, "--json")
    assert removed.exit_code == 0, removed.output
    assert {w["plugin"] for w in json.loads(removed.stdout)["removed"][0]["where"]} == {"store-jsonl", "offload-files"}
    assert not (data / "records" / "sess.jsonl").exists() and not (data / "tool_results" / "sess").exists()


def _age(paths: list[Path], seconds: float) -> None:
    when = time.time() - seconds
    for path in paths:
        for p in [path, *(path.rglob("*") if path.is_dir() else [])]:
            os.utime(p, (when, when))


def test_gc_older_than(tmp_path: Path, cfg: Path, session: Path) -> None:
    for sid in ("old", "new"):
        assert run("compact", session, "-c", cfg, "-s", sid).exit_code == 0
    _age(_session_paths(tmp_path, "old"), 8 * 86400)
    _age(_session_paths(tmp_path, "new"), 8 * 86400)
    os.utime(tmp_path / "records" / "new.jsonl")  # one recent file keeps the whole session
    dry = run("gc", "--older-than", "7d", "-c", cfg, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] is True and [r["session"] for r in plan["removed"]] == ["old"]
    assert all(p.exists() for p in _session_paths(tmp_path, "old"))
    real = run("gc", "--older-than", "7d", "-c", cfg)
    assert real.exit_code == 0 and "removed session old" in real.stdout
    assert not any(p.exists() for p in _session_paths(tmp_path, "old"))
    assert all(p.exists() for p in _session_paths(tmp_path, "new"))


def test_gc_never_deletes_through_a_linked_results_folder(tmp_path: Path) -> None:
    data, home = tmp_path / "data", tmp_path / "home"
    data.mkdir()
    for name in ("Documents", "photos", "project_1"):
        (home / name).mkdir(parents=True)
        (home / name / "precious.txt").write_text("do not delete")
    _age([home], 30 * 86400)
    (data / "tool_results").symlink_to(home)  # planted in the data folder
    result = run("gc", "--older-than", "7d", "--data-dir", data)
    assert result.exit_code == 1 and "removed session" not in result.stdout
    assert f"refusing {data / 'tool_results'}: a symbolic link under {data}" in result.stderr
    assert all((home / name / "precious.txt").exists() for name in ("Documents", "photos", "project_1"))


def test_gc_removes_a_session_folder_whose_id_file_is_gone(tmp_path: Path) -> None:
    compactor = ProgressiveCompactor("classic", data_dir=str(tmp_path))
    compactor.offload_tool_result({"role": "tool", "tool_call_id": "c1", "content": "x\n" * 6000}, "a@example.com")
    folder = next((tmp_path / "tool_results").iterdir())
    (folder / ".session_id").unlink()  # a crash between the result and the id, or an older version
    _age([folder], 8 * 86400)
    result = run("gc", "--older-than", "7d", "--data-dir", tmp_path)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"removed session {folder.name}"
    assert not folder.exists()


def test_gc_keeps_a_session_written_recently_under_its_hashed_name(tmp_path: Path) -> None:
    compactor = ProgressiveCompactor("classic", data_dir=str(tmp_path), config={"store-jsonl": {"record_none": True}})
    session = Session(compactor, "a@example.com")
    session.extend(synthetic_history()[:3])
    session.view()
    _age([tmp_path / "records"], 8 * 86400)  # its records are old ...
    compactor.offload_tool_result({"role": "tool", "tool_call_id": "c1", "content": "x\n" * 6000}, "a@example.com")
    folder = next((tmp_path / "tool_results").iterdir())
    (folder / ".session_id").unlink()  # ... its results, written now, are listed under the hashed name
    records = next((tmp_path / "records").iterdir())
    result = run("gc", "--older-than", "7d", "--data-dir", tmp_path)
    assert result.exit_code == 0, result.output
    assert "removed session" not in result.stdout
    assert records.exists() and (folder / "c1.txt").exists()


def test_gc_says_removed_only_for_what_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from progressive_compactor.plugins.offload_files import FileOffloader

    compactor = ProgressiveCompactor("classic", data_dir=str(tmp_path))
    compactor.offload_tool_result({"role": "tool", "tool_call_id": "c1", "content": "x\n" * 6000}, "s1")
    monkeypatch.setattr(FileOffloader, "on_delete_session", lambda self, session_id: None)  # deletes nothing
    result = run("gc", "s1", "--data-dir", tmp_path)
    assert result.exit_code == 1 and "removed session" not in result.stdout
    assert (
        f"warning: session s1: still stored after removal: offload-files: {tmp_path / 'tool_results' / 's1'} "
        "(remove it by hand)"
    ) in result.stderr
    assert (tmp_path / "tool_results" / "s1" / "c1.txt").exists()


def test_gc_removes_the_facts_a_kept_replay_wrote_for_the_session(tmp_path: Path, cfg: Path, session: Path) -> None:
    keep = tmp_path / "kept"
    assert run("replay", session, "-c", cfg, "--keep", keep).exit_code == 0
    facts = keep / "replay" / "sess.facts.jsonl"
    assert facts.is_file()  # what each compaction left out: the transcript's facts
    dry = run("gc", "sess", "--data-dir", keep, "--dry-run")
    assert dry.exit_code == 0 and f"replay --keep: {facts}" in dry.stdout and facts.is_file()
    result = run("gc", "sess", "--data-dir", keep)
    assert result.exit_code == 0, result.output
    assert f"replay --keep: {facts}" in result.stdout
    assert not facts.exists() and not (keep / "records" / "sess.jsonl").exists()


def test_gc_removes_what_writers_killed_before_their_rename_left(tmp_path: Path, cfg: Path, session: Path) -> None:
    assert run("compact", session, "-c", cfg).exit_code == 0
    keep = tmp_path / "kept"
    assert run("replay", session, "-c", cfg, "--keep", keep).exit_code == 0
    results, state, replayed = tmp_path / "tool_results" / "sess", tmp_path / "state", keep / "replay"
    old = [results / ".tmp-0123456789abcdef", state / ".tmp-fedcba9876543210"]
    fresh = [results / ".tmp-00000000aaaaaaaa", state / ".tmp-11111111bbbbbbbb"]
    others = [state / "notes.tmp-0123456789abcdef", state / ".tmp-mine", results / "c1.txt.tmp"]
    for path in old + fresh + others:
        path.write_text("half a write")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / ".tmp-2222222222222222").write_text("not ours")
    (state / ".tmp-3333333333333333").symlink_to(outside / ".tmp-2222222222222222")
    _age([*old, *others, outside], 2 * 3600)
    _age([fresh[1]], 50 * 60)  # not an hour yet: a stalled writer may still rename it
    dry = run("gc", "sess-that-is-not-there", "-c", cfg, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert sorted(json.loads(dry.stdout)["leftovers"]) == sorted(map(str, old))
    assert all(p.exists() for p in old)
    result = run("gc", "sess-that-is-not-there", "-c", cfg)
    assert result.exit_code == 0, result.output
    assert f"removed leftover of an interrupted write or a deleted session: {old[1]}" in result.stdout
    assert not any(p.exists() for p in old)
    assert all(p.exists() for p in fresh + others) and (outside / ".tmp-2222222222222222").exists()
    assert (state / ".tmp-3333333333333333").is_symlink() and any(results.glob("*.txt"))
    # --older-than less than an hour: what was not written to for that long goes too
    assert run("gc", "--older-than", "40m", "-c", cfg).exit_code == 0
    assert not fresh[1].exists() and fresh[0].exists()
    # the facts file replay --keep writes through a temporary file of its own
    facts_tmp = replayed / ".sess.facts.jsonl.tmp-ab12cd_9"
    facts_tmp.write_text("[")
    _age([facts_tmp], 2 * 3600)
    kept = run("gc", "--older-than", "7d", "--data-dir", keep, "--json")
    assert kept.exit_code == 0, kept.output
    assert json.loads(kept.stdout)["leftovers"] == [str(facts_tmp)] and not facts_tmp.exists()
    assert (replayed / "sess.facts.jsonl").exists()


def test_gc_follows_no_link_to_find_leftovers(tmp_path: Path) -> None:
    data, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    (elsewhere / "s1").mkdir(parents=True)
    (elsewhere / "s1" / ".tmp-0123456789abcdef").write_text("someone else's")
    _age([elsewhere], 2 * 3600)
    data.mkdir()
    (data / "state").symlink_to(elsewhere / "s1")
    (data / "replay").symlink_to(elsewhere / "s1")
    result = run("gc", "--older-than", "7d", "-c", write_config(data))  # state in files
    assert result.exit_code == 1 and "removed leftover" not in result.stdout
    for name in ("state", "replay"):
        assert f"refusing {data / name}: a symbolic link under {data}" in result.stderr
    assert (elsewhere / "s1" / ".tmp-0123456789abcdef").exists()


def test_gc_removes_the_state_files_set_aside_as_unreadable_with_their_session(
    tmp_path: Path, cfg: Path, session: Path
) -> None:
    for sid in ("sess", "other"):
        assert run("compact", session, "-c", cfg, "-s", sid).exit_code == 0
    for sid in ("sess", "other"):
        (tmp_path / "state" / f"{sid}.json").write_text('{"summary": "the secret pla', "utf-8")  # torn
        assert run("compact", session, "-c", cfg, "-s", sid).exit_code == 0  # set aside, started over
    (aside,) = (tmp_path / "state").glob("sess.json.corrupt-*")
    result = run("gc", "sess", "-c", cfg)
    assert result.exit_code == 0, result.output
    assert not aside.exists() and not (tmp_path / "state" / "sess.json").exists()
    assert [p.name.split(".")[0] for p in (tmp_path / "state").glob("*.corrupt-*")] == ["other"]
    _age([tmp_path], 8 * 86400)
    assert run("gc", "--older-than", "7d", "-c", cfg).exit_code == 0
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == []


def test_gc_arguments(cfg: Path) -> None:
    assert "either SESSION or --older-than" in one_error_line(run("gc", "-c", cfg))
    # M is a month to many (systemd, ISO 8601): never read as a minute, which would delete live sessions
    assert "ambiguous" in one_error_line(run("gc", "--older-than", "1M", "-c", cfg, "--dry-run"))
    assert run("gc", "--older-than", "1D", "-c", cfg, "--dry-run").exit_code == 0
    assert run("gc", "s", "--older-than", "1d", "-c", cfg).exit_code == 2
    assert "expected a duration" in one_error_line(run("gc", "--older-than", "soon", "-c", cfg))


@pytest.mark.parametrize(
    "text, seconds",
    [("7d", 7 * 86400), ("12h", 43200), ("30m", 1800), ("2w", 14 * 86400), ("1d12h", 129600), ("45s", 45)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


# --- commands of other packages (the ab group is one) -------------------------------------------


def test_the_ab_group_is_added_through_the_cli_entry_point_group() -> None:
    assert "ab" in main.commands
    assert {"replay", "report"} <= set(main.commands["ab"].commands)
    assert "\n  ab " in run("--help").stdout


def test_packages_add_commands_and_a_broken_one_does_not_take_the_cli_down(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from importlib import metadata

    from progressive_compactor.cli.hookspecs import GROUP as CLI_GROUP

    (tmp_path / "fake_cli_ok.py").write_text(
        "import click\n"
        "from progressive_compactor import hookimpl\n"
        "@click.command()\n"
        "def hello():\n"
        "    '''Say hello.\n\n    Example: compactor hello\n    '''\n"
        "    click.echo('hello ran')\n"
        "@hookimpl\n"
        "def register_commands(cli):\n"
        "    cli.add_command(hello)\n",
        "utf-8",
    )
    (tmp_path / "fake_cli_broken.py").write_text("raise RuntimeError('boom at import')\n", "utf-8")
    (tmp_path / "fake_cli_exits.py").write_text("import sys\nsys.exit('no licence found')\n", "utf-8")
    (tmp_path / "fake_cli_raises.py").write_text(
        "from progressive_compactor import hookimpl\n"
        "@hookimpl\n"
        "def register_commands(cli):\n"
        "    raise ValueError('no room')\n",
        "utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [metadata.EntryPoint(n, f"fake_cli_{n}", CLI_GROUP) for n in ("ok", "broken", "raises", "exits")]
    monkeypatch.setattr(cli_mod.metadata, "entry_points", lambda group: eps if group == CLI_GROUP else [])
    group = cli_mod.CompactorGroup("compactor", context_settings=cli_mod.CONTEXT)
    monkeypatch.setattr(cli_mod, "cli", group)
    cli_mod._add_plugin_commands()
    assert set(group.commands) == {"hello", "broken", "raises", "exits"}
    assert runner().invoke(group, ["hello"]).stdout == "hello ran\n"
    broken = runner().invoke(group, ["broken"])
    assert one_error_line(broken) == "error: the 'broken' command failed to load: RuntimeError: boom at import"
    raises = runner().invoke(group, ["raises"])
    assert one_error_line(raises) == "error: the 'raises' command failed to load: ValueError: no room"
    exits = runner().invoke(group, ["exits"])
    assert one_error_line(exits) == "error: the 'exits' command failed to load: SystemExit: no licence found"


def test_replay_many_sessions_one_row_each_with_totals(tmp_path: Path, cfg: Path, session: Path) -> None:
    small = [write_jsonl(tmp_path / f"s{i}.jsonl", synthetic_history(rounds=2 + i)) for i in range(2)]
    as_json = [json.loads(line) for line in run("replay", session, *small, "-c", cfg, "--json").stdout.splitlines()]
    result = run("replay", session, *small, "-c", cfg)
    assert result.exit_code == 0, result.output
    totals = next(line for line in result.stdout.splitlines() if "3 sessions" in line).split()
    assert totals[2] == f"{sum(o['calls'] for o in as_json):,}"
    assert totals[3] == "/".join(
        str(sum(o["tiers"][t] for o in as_json)) for t in ("warn", "soft", "full", "emergency")
    )


def test_replay_keep_never_writes_the_facts_through_a_link_planted_in_the_folder(
    tmp_path: Path, cfg: Path, session: Path
) -> None:
    keep, precious = tmp_path / "kept", tmp_path / "home" / ".bashrc"
    precious.parent.mkdir()
    precious.write_text("export PATH=...\n")
    (keep / "replay").mkdir(parents=True)
    (keep / "replay" / "sess.facts.jsonl").symlink_to(precious)  # planted by an agent with a shell
    result = run("replay", session, "-c", cfg, "--keep", keep)
    assert result.exit_code == 0, result.output
    assert precious.read_text() == "export PATH=...\n"
    facts = keep / "replay" / "sess.facts.jsonl"
    assert not facts.is_symlink() and facts.is_file() and stat.S_IMODE(facts.stat().st_mode) == 0o600


def test_replay_again_into_the_same_keep_folder_starts_afresh(tmp_path: Path, cfg: Path, session: Path) -> None:
    keep = tmp_path / "kept"
    first = json.loads(run("replay", session, "-c", cfg, "--keep", keep, "--json").stdout)
    second = json.loads(run("replay", session, "-c", cfg, "--keep", keep, "--json").stdout)
    for run_result in (first, second):
        del run_result["compactor_seconds"]  # wall time differs; everything else must not
        for entry in run_result["compaction_log"]:
            del entry["record"]  # a record's id is unique to it
    assert first == second  # no state or records carried over from the first run
    assert len(list(read_records(keep / "records" / "sess.jsonl"))) == first["compactions"]
