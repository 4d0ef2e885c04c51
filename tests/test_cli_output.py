"""What the command line prints, as a user reads it: every table at 80 and 120 columns, what a
compaction did (anchors, summary, offloads, facts left out), where files are found from any
folder, and the global options after the command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli_helpers import NOTICE, synthetic_history, write_jsonl
from progressive_compactor.cli.app import cli as main
from progressive_compactor.cli.app import global_options_first, json_text
from progressive_compactor.cli.render import elide
from progressive_compactor.converters import read_records_file, record_to_json
from progressive_compactor.models import Anchor, AnchorType, CompactionRecord, CompactionTier, OffloadEntry
from progressive_compactor.plugin_manager import BUILTIN_PLUGINS

WIDTHS = (80, 120)
LONG = "msa__django__django-11049__deepseek-chat-test-1-100"
"""A session name as long as the corpus's."""
COMMAND = re.compile(r"^\s*compactor \S")
"""A command to copy: printed unbroken, whatever the width (the terminal wraps it on screen)."""


def runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2 mixes stderr into output by default
    except TypeError:
        return CliRunner()


def run(*args: Any, width: int = 120, **env: str) -> Any:
    result = runner().invoke(main, [str(a) for a in args], env={"COLUMNS": str(width), **env})
    assert result.exit_code == 0, (result.output, result.stderr)
    return result


def assert_fits(text: str, width: int) -> None:
    """No line is wider than ``width`` (commands to copy aside), and no column was squeezed into a
    letter per line: three or more lines in a row with a lone letter at the same position."""
    lines = text.splitlines()
    for line in lines:
        if not COMMAND.match(line):
            assert len(line) <= width, f"{len(line)} > {width}: {line!r}"
    lone: dict[int, int] = {}
    for number, line in enumerate(lines):
        padded = f" {line} "
        here = {
            i
            for i in range(1, len(padded) - 1)
            if padded[i].isalpha() and not padded[i - 1].isalnum() and not padded[i + 1].isalnum()
        }
        lone = {i: lone.get(i, 0) + 1 for i in here}
        assert all(n < 3 for n in lone.values()), f"a letter per line around line {number}:\n{text}"


def record(n: int, **changes: Any) -> CompactionRecord:
    fields: dict[str, Any] = dict(
        id=f"r{n}",
        session_id=LONG,
        timestamp=f"2025-03-01T10:{n:02d}:00.000+00:00",
        tier=CompactionTier.WARN,
        tokens_before=10_100 + n,
        tokens_after=10_100 + n,
        msgs_before=40 + n,
        msgs_after=40 + n,
        preserved_tail=6,
        context_window=16_000,
        duration_ms=0.4,
    )
    fields.update(changes)
    return CompactionRecord(**fields)


def rich_records() -> list[CompactionRecord]:
    """Every kind of row: unchanged Warn, offloads, a summary, an escalation with a long error."""
    entry = OffloadEntry(
        tool_call_id="call_00_5BjvvKdusBfVFk9OtW09EhDx",
        handle=f"{LONG}/call_00_5BjvvKdusBfVFk9OtW09EhDx",
        path="",
        chars=14_877,
        lines=301,
        sha256="",
        placeholder="[Tool result offloaded: 14877 characters, 301 lines.]\nfirst line",
    )
    anchors = tuple(Anchor(t, f"{t.heading}: " + "a long line of text " * 12) for t in AnchorType)
    return [
        *(record(n) for n in range(1, 40)),
        record(40, tokens_after=9_200, offloaded=(entry,), compression_ratio=0.09),
        record(
            41,
            tier=CompactionTier.SOFT,
            tokens_after=6_400,
            msgs_after=22,
            summarized=26,
            preserved_tail=32,
            anchors=anchors,
            summary_text="Compacted 26 messages. " * 40,
            compression_ratio=0.37,
            summarizer_calls=1,
        ),
        record(
            42,
            tier=CompactionTier.EMERGENCY,
            requested_tier=CompactionTier.FULL,
            tokens_before=145_213,
            tokens_after=7_900,
            msgs_after=9,
            summarized=60,
            fallback=True,
            errors=(
                "summarizer failed: summarize-openai: HTTP 503 Service Unavailable (gave up after 4 attempts) "
                "while summarizing 60 messages of session " + LONG,
                "emergency fallback: forced truncation",
            ),
            escalations=("loop guard: Full left the view at 83% of the window; escalating",),
            variant="aggressive-summaries",
            duration_ms=1234.5,
        ),
    ]


@pytest.fixture
def records_file(tmp_path: Path) -> Path:
    path = tmp_path / "records" / f"{LONG}.jsonl"
    path.parent.mkdir()
    (tmp_path / "tool_results").mkdir()  # a data folder: the show commands name it
    path.write_text("".join(record_to_json(r) + "\n" for r in rich_records()), "utf-8")
    return path


# --- every table at 80 and 120 columns -------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_records_fit(width: int, records_file: Path) -> None:
    out = run("records", records_file, width=width).stdout
    assert_fits(out, width)
    rows = [line for line in out.splitlines() if re.match(r"^\s*\d+ +(\d\d:\d\d:\d\d +)?(Warn|Soft|Emergency)", line)]
    assert [int(row.split()[0]) for row in rows] == list(range(1, 43))  # one line per record, whole numbers
    assert re.search(r"^42 .*Emergency ← Full .*error, guard$", out, re.M)
    # the long texts are below the table, whole, and loop guard is not an error
    assert "#42 error: summarizer failed: summarize-openai: HTTP 503" in " ".join(out.split())
    assert "#42 loop guard: Full left the view at 83% of the window; escalating" in " ".join(out.split())
    assert "#42 error: loop guard" not in out
    assert re.search(r"^compactor records \S+ --compaction N$", out, re.M)


@pytest.mark.parametrize("width", WIDTHS)
def test_one_compaction_in_detail_fits(width: int, records_file: Path) -> None:
    out = run("records", records_file, "--compaction", 41, width=width).stdout
    assert_fits(out, width)
    assert "#41 Soft" in out and "⚡ Context compressed [Soft] 10.1K->6.4K tokens (37% smaller, 40% of window)" in out
    for anchor in AnchorType:
        assert re.search(rf"^  {anchor.heading} ", out, re.M), anchor
    assert "Summary (first" not in out or "--full" in out
    offloaded = run("records", records_file, "-n", 40, width=width).stdout
    command = f"compactor show {LONG}/call_00_5BjvvKdusBfVFk9OtW09EhDx --data-dir {records_file.parent.parent}"
    assert f"  {command}   # 14,877 characters, 301 lines" in offloaded.splitlines()


@pytest.mark.parametrize("width", WIDTHS)
def test_replay_of_one_session_fits(width: int, tmp_path: Path, cfg: Path) -> None:
    source = write_jsonl(tmp_path / f"{LONG}.jsonl", synthetic_history())
    out = run("replay", source, "-c", cfg, width=width).stdout
    assert_fits(out, width)
    assert out.count("⚡") == len(NOTICE.findall(out)) > 0  # every notice whole
    assert f"Replay of {LONG}" in out and re.search(r"^billed cost +\$\d", out, re.M)


@pytest.mark.parametrize("width", WIDTHS)
def test_replay_of_several_sessions_fits(width: int, tmp_path: Path, cfg: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    names = [f"{LONG}-{n}" for n in range(3)] + ["claudecode__entire-cli__5504c1f4266f-0"]
    for n, name in enumerate(names):
        write_jsonl(folder / f"{name}.jsonl", synthetic_history(rounds=6 + 3 * n))
    out = run("replay", folder, "-c", cfg, width=width).stdout  # a folder stands for its sessions
    assert_fits(out, width)
    rows = [line for line in out.splitlines() if re.match(r"^ ?\d +\S", line)]
    assert [row.split()[0] for row in rows] == ["1", "2", "3", "4"]  # one line per session
    assert "USD" in out.split("Replay summary")[1].splitlines()[1]  # the cost is never left out
    for name in names:  # shortened names are listed in full below the table
        assert re.search(rf"^ +\d {re.escape(name)}$", out, re.M)
    dropped = re.search(r"left out at this width: ([^(]+)\(", " ".join(out.split()))
    if width == 120:
        assert dropped is None
    else:
        assert dropped is not None  # said, not silent


@pytest.mark.parametrize("width", WIDTHS)
def test_plugins_fit(width: int, cfg: Path) -> None:
    out = run("plugins", "-c", cfg, width=width).stdout
    assert_fits(out, width)
    for name in BUILTIN_PLUGINS:
        assert re.search(rf"^{re.escape(name)} ", out, re.M), name  # each plugin starts a row, whole
    row = out[out.index("\npolicy-thresholds ") :]
    assert "The tier from the share of the context window" in " ".join(row.split()[:30])
    assert "hooks: determine_tier, tier_thresholds" in " ".join(row.split()[:40])


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("config", ["default", "openai", "ab-example"])
def test_config_show_fits(width: int, config: str, tmp_path: Path) -> None:
    out = run("config", "show", config, width=width, COMPACTOR_DATA_DIR="/srv/compactor").stdout
    assert_fits(out, width)
    import yaml

    assert yaml.safe_load(out)["data_dir"] == "/srv/compactor"


def test_elide_keeps_both_ends() -> None:
    assert elide(LONG, 20) == LONG[:10] + "…" + LONG[-9:]
    assert len(elide(LONG, 20)) == 20 and elide("short", 20) == "short"


# --- what a compaction did -------------------------------------------------------------------


def test_replay_details_show_anchors_summary_offloads_and_facts(tmp_path: Path, cfg: Path, session: Path) -> None:
    out = run("replay", session, "-c", cfg, "--details").stdout
    assert re.search(r"^─* ?call \d+ \(message \d+\) ─", out, re.M)
    assert "Anchors" in out and "  User Intent " in out and "Fix the failing test in app/models.py" in out
    assert "Summary" in out
    assert "Offloaded tool results (1), in a temporary folder (--keep DIR keeps them)" in out
    assert "Facts of the probe set" in out


def failing_history(rounds: int) -> list[dict[str, Any]]:
    """A session of failed commands, each with its own error: more than an anchor keeps (its newest
    40 lines), so compaction leaves the oldest errors out of the view."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test in app/models.py"},
    ]
    for i in range(rounds):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"python check_{i}.py"})},
        }
        messages.append({"role": "assistant", "content": f"Running check {i}", "tool_calls": [call]})
        output = "\n".join(f"output line {j} of check {i}" for j in range(60))
        error = f"Traceback (most recent call last):\nModuleNotFoundError: No module named 'mod{i}'"
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"{output}\n{error}"})
    messages.append({"role": "assistant", "content": "Done."})
    return messages


def test_replay_keep_then_records_show_the_facts_a_compaction_left_out(tmp_path: Path, cfg: Path) -> None:
    source = write_jsonl(tmp_path / "failing.jsonl", failing_history(50))
    keep = tmp_path / "kept"
    replayed = json.loads(run("replay", source, "-c", cfg, "--keep", keep, "--json").stdout)
    lost = [c for c in replayed["compaction_log"] if c.get("facts_lost")]
    assert lost and all(set(c["facts_lost"]) == {"errors"} for c in lost)
    first = lost[0]
    assert "python check_0.py -> ModuleNotFoundError: No module named 'mod0'" in first["facts_lost"]["errors"]
    records = list(read_records_file(keep / "records" / "failing.jsonl"))
    number = next(n for n, r in enumerate(records, 1) if r.id == first["record"])
    detail = run("records", "failing", "-c", cfg, "--data-dir", keep, "-n", number).stdout
    assert f"Facts of the probe set no longer in the view ({len(first['facts_lost']['errors'])})" in detail
    assert "errors: python check_0.py -> ModuleNotFoundError: No module named 'mod0'" in detail
    replay_details = run("replay", source, "-c", cfg, "--details").stdout
    assert f"call {first['call']} (message {first['message']})" in replay_details
    assert "errors: python check_0.py -> ModuleNotFoundError" in replay_details


def test_records_full_prints_every_compaction(records_file: Path) -> None:
    out = run("records", records_file, "--full").stdout
    assert [int(n) for n in re.findall(r"^#(\d+) (?:Warn|Soft|Full|Emergency) · ", out, re.M)] == [40, 41, 42]
    assert " ".join(out.split()).count("a long line of text") == 5 * 12  # every anchor whole
    assert "Loop guard (normal escalation, not an error)" in out


def test_records_compaction_number_out_of_range(records_file: Path) -> None:
    result = runner().invoke(main, ["records", str(records_file), "-n", "99"])
    assert result.exit_code == 1 and "there is no record 99" in result.stderr


def test_text_of_a_record_is_printed_as_it_is_never_read_as_markup(tmp_path: Path) -> None:
    """Brackets in what a record holds (a variant, a session name) are text, not rich markup: no
    crash on ``[/]``, no text swallowed as a style."""
    path = tmp_path / "records.jsonl"
    records = [record(1, variant="[/]ab[bold]"), record(2, variant="[red]x", tokens_after=9_000)]
    path.write_text("".join(record_to_json(r) + "\n" for r in records), "utf-8")
    out = run("records", path).stdout
    assert "[/]ab[bold]" in out and "[red]x" in out


def test_replay_of_sessions_whose_names_hold_brackets(tmp_path: Path, cfg: Path) -> None:
    names = ["a[green]", "b[bold]", "c"]
    for name in names:
        write_jsonl(tmp_path / f"{name}.jsonl", synthetic_history(4))
    out = run("replay", *(tmp_path / f"{n}.jsonl" for n in names), "-c", cfg).stdout
    assert re.search(r"^1 +a\[green\] ", out, re.M) and re.search(r"^2 +b\[bold\] ", out, re.M)  # a row each
    two = run("replay", *(tmp_path / f"{n}.jsonl" for n in names[:2]), "-c", cfg).stdout
    assert re.search(r"^ +a\[green\] +b\[bold\]$", two, re.M)  # a column each
    hostile = "d\x1b[2J"  # a file name that would clear the screen
    write_jsonl(tmp_path / f"{hostile}.jsonl", synthetic_history(4))
    headed = run("replay", tmp_path / f"{hostile}.jsonl", tmp_path / "c.jsonl", "-c", cfg).stdout
    assert "\x1b" not in headed and "── d\\x1b[2J" in headed and "── c" in headed


def test_escape_sequences_in_a_record_never_reach_the_terminal(tmp_path: Path) -> None:
    """A summary, an anchor, an error or a fact may quote a tool's output: its escape sequences
    (clear the screen, set the window title, colours) are shown, not sent to the terminal."""
    esc = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\x9b1m"
    anchors = tuple(Anchor(t, f"{t.heading} {esc}") for t in AnchorType)
    entry = OffloadEntry(tool_call_id="c1", handle="s/c1", path="", chars=10, lines=1, sha256="")
    hostile = record(
        1,
        tier=CompactionTier.SOFT,
        tokens_after=6_000,
        summarized=4,
        anchors=anchors,
        summary_text=f"The summary {esc}",
        offloaded=(entry,),
        errors=(f"summarizer failed: {esc}",),
        escalations=(f"loop guard: {esc}",),
        variant=f"v{esc}",
    )
    path = tmp_path / "records.jsonl"
    path.write_text(record_to_json(hostile) + "\n", "utf-8")
    for args in ([], ["--full"], ["-n", "1"]):
        out = run("records", path, *args).stdout
        assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out, args
        assert "\\x1b[2J" in out


# --- files found from any folder --------------------------------------------------------------


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COMPACTOR_DATA_DIR", "FORCE_COLOR")}
    env.update(HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "xdg"), COLUMNS="200")
    return env


def _compactor(*args: Any, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("compactor")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "progressive_compactor.cli"]
    return subprocess.run(
        command + [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _original(handle: str) -> str:
    call = handle.split("/")[-1]
    return next(m["content"] for m in synthetic_history() if m.get("tool_call_id") == call)


def test_show_reads_what_compact_wrote_from_any_folder(tmp_path: Path) -> None:
    env = _env(tmp_path)
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir(), elsewhere.mkdir()
    write_jsonl(here / "ticket.jsonl", synthetic_history())
    compacted = _compactor("compact", "ticket.jsonl", "-w", "8000", "--json", cwd=here, env=env)
    assert compacted.returncode == 0, compacted.stderr
    handle = json.loads(compacted.stdout)["record"]["offloaded"][0]["handle"]
    shown = _compactor("show", handle, cwd=elsewhere, env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == _original(handle) + "\n"
    assert sorted(p.name for p in here.iterdir()) == ["ticket.jsonl"]  # nothing in the working folder
    assert (tmp_path / "xdg" / "progressive-compactor" / "tool_results" / "ticket").is_dir()


def test_show_reads_what_the_library_wrote_from_any_folder(tmp_path: Path) -> None:
    env = _env(tmp_path)
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir(), elsewhere.mkdir()
    script = (
        "import json, sys\n"
        "from progressive_compactor import ProgressiveCompactor\n"
        "history = json.load(sys.stdin)\n"
        "with ProgressiveCompactor('default', context_window=8000) as c:\n"
        "    view, record = c.compact_with_record(history, 'lib-session')\n"
        "print(record.offloaded[0].handle)\n"
    )
    made = subprocess.run(
        [sys.executable, "-c", script],
        cwd=here,
        env=env,
        input=json.dumps(synthetic_history()),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    handle = made.stdout.strip()
    shown = _compactor("show", handle, cwd=elsewhere, env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == _original(handle) + "\n"
    assert list(here.iterdir()) == []


def test_show_reads_what_replay_kept_from_any_folder(tmp_path: Path) -> None:
    env = _env(tmp_path)
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir(), elsewhere.mkdir()
    write_jsonl(here / "ticket.jsonl", synthetic_history())
    replayed = _compactor("replay", "ticket.jsonl", "-w", "8000", "--keep", "kept", cwd=here, env=env)
    assert replayed.returncode == 0, replayed.stderr
    lines = replayed.stdout.splitlines()
    command = lines[lines.index("read the records with:") + 1]
    assert command == f"compactor records ticket --data-dir {here / 'kept'}"  # absolute: works anywhere
    listed = _compactor(*command.split()[1:], "--json", cwd=elsewhere, env=env)
    assert listed.returncode == 0, listed.stderr
    handle = next(e["handle"] for line in listed.stdout.splitlines() for e in json.loads(line)["offloaded"])
    shown = _compactor("show", handle, "--data-dir", here / "kept", cwd=elsewhere, env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == _original(handle) + "\n"
    # and the records command prints the show command that does it
    detail = _compactor(*command.split()[1:], "--full", cwd=elsewhere, env=env)
    assert f"compactor show {handle} --data-dir {here / 'kept'}" in detail.stdout


def test_show_of_a_session_says_where_its_compactions_are(tmp_path: Path, cfg: Path, session: Path) -> None:
    assert runner().invoke(main, ["compact", str(session), "-c", str(cfg)]).exit_code == 0
    result = runner().invoke(main, ["show", "sess", "-c", str(cfg)])
    assert result.exit_code == 1
    assert result.stderr == (
        "error: no offloaded tool result has the handle 'sess'; 'sess' is a session: what its compactions did "
        f"is printed by compactor records sess -c {cfg} --full\n"
    )


# --- options ----------------------------------------------------------------------------------


def test_debug_after_the_command(cfg: Path) -> None:
    result = runner().invoke(main, ["show", "nobody/nothing", "-c", str(cfg), "--debug"])
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1] == "error: no offloaded tool result has the handle 'nobody/nothing'"


@pytest.mark.parametrize(
    "args, expected",
    [
        (["replay", "x", "--debug"], ["--debug", "replay", "x"]),
        (["--debug", "replay", "x"], ["--debug", "replay", "x"]),
        (["show", "--", "--debug"], ["show", "--", "--debug"]),
        (["records", "s"], ["records", "s"]),
    ],
)
def test_global_options_first(args: list[str], expected: list[str]) -> None:
    assert global_options_first(args) == expected


def test_json_output_is_strict_json_even_of_a_number_that_is_not_finite() -> None:
    data = {"cost": {"input": float("inf"), "output": float("nan"), "total": 1.5}, "turns": [float("-inf")]}
    text = json_text(data)
    assert json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in {text}")) == {
        "cost": {"input": None, "output": None, "total": 1.5},
        "turns": [None],
    }
