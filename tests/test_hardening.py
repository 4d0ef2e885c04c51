"""What adversarial use found: reused tool-call ids, secrets in state, symbolic links, overlapping
turns, the newest exchange at Emergency, corrupt and growing state files, lone surrogates, output
files, and bad input. Each test here failed before its fix."""

from __future__ import annotations

import json

from progressive_compactor import CompactionTier, ProgressiveCompactor
from progressive_compactor.plugins.offload_files import PLACEHOLDER_PREFIX
from progressive_compactor.testing import FixedPolicy, filler, problems, tool_call

PASSED = "all 120 tests passed\n" + filler(5000, "a")
FAILED = ("3 tests FAILED\n" + filler(6000, "b"))[: len(PASSED)]


def call(call_id: str, command: str = "pytest") -> dict:
    return {"role": "assistant", "content": "Running it.", "tool_calls": [tool_call(call_id, command)]}


def result(call_id: str, text: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def filler_turns(prefix: str, n: int = 4) -> list[dict]:
    out = []
    for i in range(n):
        out += [call(f"{prefix}{i}", "ls"), result(f"{prefix}{i}", "ok")]
    return out


def warn_compactor(make_compactor, **overrides):
    policy = FixedPolicy(CompactionTier.WARN)
    compactor = make_compactor(offload_threshold=1000, extra_plugins=[("fixed", policy)], **overrides)
    return compactor, policy


# --- 1. a reused tool-call id ---------------------------------------------------------------


def test_a_reused_call_id_of_the_same_length_never_shows_the_earlier_result(make_compactor):
    assert len(PASSED) == len(FAILED) and PASSED != FAILED
    compactor, _ = warn_compactor(make_compactor)
    history = [{"role": "user", "content": "Fix the tests."}, call("call_0"), result("call_0", PASSED)]
    history += filler_turns("x")
    first, record = compactor.compact_with_record(history)
    assert [e.tool_call_id for e in record.offloaded] == ["call_0"]
    history += [call("call_0"), result("call_0", FAILED)] + filler_turns("y")
    view, record = compactor.compact_with_record(history)
    assert problems(view) == []
    results = [m["content"] for m in view if m.get("tool_call_id") == "call_0"]
    assert len(results) == 2
    assert "all 120 tests passed" in results[0] and "3 tests FAILED" not in results[0]
    assert "3 tests FAILED" in results[1] and "all 120 tests passed" not in results[1]
    (second,) = record.offloaded
    assert second.tool_call_id == "call_0" and second.handle != first[2]["content"].split("Handle: ")[1].split("]")[0]
    assert compactor.read_tool_result(second.handle) == FAILED
    handles = [m.split("Handle: ")[1].split("]")[0] for m in results]
    assert [compactor.read_tool_result(h) for h in handles] == [PASSED, FAILED]


def test_two_processes_sharing_state_keep_both_results_of_a_reused_id(make_compactor, tmp_path):
    """Two compactors (two worker processes) on one state folder: the second result of a reused
    id is offloaded under its own handle, and both read back from either worker."""
    other = FAILED + "\nmore"  # another length this time
    history = [{"role": "user", "content": "Fix the tests."}, call("call_0"), result("call_0", PASSED)]
    history += filler_turns("x")
    one, _ = warn_compactor(make_compactor, plugins={"state": "state-files"})
    one.compact_with_record(history, "s")
    history += [call("call_0"), result("call_0", other)] + filler_turns("y")
    two, _ = warn_compactor(make_compactor, plugins={"state": "state-files"})
    view, record = two.compact_with_record(history, "s")
    assert [e.tool_call_id for e in record.offloaded] == ["call_0"]
    shown = [m["content"] for m in view if m.get("tool_call_id") == "call_0"]
    assert all(text.startswith(PLACEHOLDER_PREFIX) for text in shown)
    handles = [text.split("Handle: ")[1].split("]")[0] for text in shown]
    assert len(set(handles)) == 2
    for worker in (one, two):
        assert [worker.read_tool_result(h) for h in handles] == [PASSED, other]


# --- 2. secrets never reach a file --------------------------------------------------------------

KEY = "sk-Secr3tKeyForLeakTests-9f8e7d6c5b4a"


def leaks(text: str) -> list[str]:
    """Every piece of the key of 10 characters or more found in ``text``, in any letter case."""
    lowered, key = text.lower(), KEY.lower()
    pieces = {key[i : i + 10] for i in range(len(key) - 9)}
    return sorted(p for p in pieces if p in lowered)


def test_a_key_planted_everywhere_reaches_no_file_the_compactor_or_the_cli_writes(tmp_path, monkeypatch, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    from click.testing import CliRunner

    from fake_provider import Behaviour, FakeProvider
    from progressive_compactor.cli.app import cli

    monkeypatch.setenv("LEAK_KEY", KEY)
    # The agent printed its environment twice: once in a large result (offloaded), once in a small one.
    env_dump = f"HOME=/root\nLEAK_KEY={KEY}\n" + "PATH=/usr/bin\n" * 400
    history = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the tests; the key is in the environment."},
    ]
    for i in range(10):
        text = env_dump if i == 2 else f"LEAK_KEY={KEY.upper()}" if i == 4 else filler(1500, f"r{i}")
        history += [call(f"c{i}", "env"), result(f"c{i}", text)]
    with FakeProvider() as fake:
        config = tmp_path / "leak.yaml"
        config.write_text(
            f"context_window: 3000\ndata_dir: {tmp_path / 'data'}\n"
            "plugins: {summarizer: summarize-openai, state: state-files}\n"
            "config:\n"
            f"  summarize-openai: {{base_url: '{fake.base_url}', api_key_env: LEAK_KEY, max_attempts: 1}}\n"
            "  store-jsonl: {record_none: true}\n"
        )
        # A 200 reply that echoes the key (upper-cased, then cut by a truncation) becomes the
        # summary; an error reply that quotes it back becomes a record's error and a log line.
        fake.push(Behaviour("ok"), Behaviour("ok", echo_key=True), Behaviour("status", status=500, echo_key=True))
        compactor = ProgressiveCompactor(str(config))
        seen = []
        for cut in range(6, len(history) + 1, 2):
            view, record = compactor.compact_with_record(history[:cut], "leaky")
            seen.append(record)
        failed = compactor.compact_with_record(history[:8], "failing")[1]
        compactor.close()
        assert any(r.offloaded for r in seen)
        echoed = [r for r in seen if r.summarizer_calls and not r.fallback]
        assert echoed and "(echoed)" in echoed[0].summary_text  # the echoing summary was used
        assert failed.fallback and "HTTP 500" in failed.errors[0] and "[REDACTED]" in failed.errors[0]
        runner = CliRunner()
        session = tmp_path / "session.jsonl"
        session.write_text("".join(json.dumps(m) + "\n" for m in history))
        fake.push(Behaviour("ok", echo_key=True))
        outputs = {
            "compact": runner.invoke(
                cli, ["compact", str(session), "-c", str(config), "-o", str(tmp_path / "view.jsonl")]
            ),
            "compact --json": runner.invoke(cli, ["compact", str(session), "-c", str(config), "--json", "-s", "other"]),
            "records": runner.invoke(cli, ["records", "leaky", "-c", str(config), "--json"]),
            "show": runner.invoke(
                cli,
                [
                    "show",
                    seen[-1].offloaded[0].handle
                    if seen[-1].offloaded
                    else next(e.handle for r in seen for e in r.offloaded),
                    "-c",
                    str(config),
                ],
            ),
        }
    assert fake.requests and fake.requests[0].headers["authorization"] == f"Bearer {KEY}"  # it was sent
    for name, out in outputs.items():
        assert out.exit_code == 0, (name, out.output)
        assert leaks(out.output) == [], f"the key leaked into the output of {name}"
    assert leaks(caplog.text) == []
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p not in (config, session)]
    assert any("state" in str(p) for p in files) and any("tool_results" in str(p) for p in files)
    for path in files:
        assert leaks(path.read_text("utf-8", "replace")) == [], f"the key leaked into {path}"
