"""What adversarial use found: reused tool-call ids, secrets in state, symbolic links, overlapping
turns, the newest exchange at Emergency, corrupt and growing state files, lone surrogates, output
files, and bad input. Each test here failed before its fix."""

from __future__ import annotations

import json
import stat
import threading

import pytest

from progressive_compactor import CompactionTier, ProgressiveCompactor, hookimpl
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


def warn_compactor(make_compactor, extra_plugins=(), **overrides):
    policy = FixedPolicy(CompactionTier.WARN)
    compactor = make_compactor(offload_threshold=1000, extra_plugins=[("fixed", policy), *extra_plugins], **overrides)
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


# --- 3. symbolic links under the data folder are never followed ------------------------------


def test_a_linked_session_folder_gets_no_offload_and_its_target_is_untouched(make_compactor, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    (tmp_path / "tool_results").mkdir()
    (tmp_path / "tool_results" / "test-session").symlink_to(elsewhere)
    compactor, _ = warn_compactor(make_compactor)
    history = [{"role": "user", "content": "go"}, call("c0"), result("c0", PASSED)] + filler_turns("x")
    view, record = compactor.compact_with_record(history)
    assert record.offloaded == () and view[2]["content"] == PASSED  # the original is kept
    assert record.errors and "symbolic link" in record.errors[0]
    assert list(elsewhere.iterdir()) == []
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o755


def test_a_planted_link_is_never_read_back(make_compactor, tmp_path):
    from click.testing import CliRunner

    from progressive_compactor import CompactorError
    from progressive_compactor.cli.app import cli
    from progressive_compactor.tools import handle_read_tool_call

    secret = tmp_path / "secret.txt"
    secret.write_text("the launch codes")
    folder = tmp_path / "tool_results" / "test-session"
    folder.mkdir(parents=True)
    (folder / "c9.txt").symlink_to(secret)
    compactor = make_compactor()
    with pytest.raises(CompactorError, match="symbolic link"):
        compactor.read_tool_result("test-session/c9")
    answer = handle_read_tool_call(compactor, {"handle": "test-session/c9"})
    assert "launch codes" not in answer and "symbolic link" in answer
    out = CliRunner().invoke(cli, ["show", "test-session/c9", "--data-dir", str(tmp_path)])
    assert out.exit_code == 1 and "launch codes" not in out.output and "symbolic link" in out.output


def test_a_linked_state_file_is_neither_read_nor_written(make_compactor, tmp_path):
    outside = tmp_path / "bashrc"
    outside.write_text("export PATH=/usr/bin\n")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "test-session.json").symlink_to(outside)
    compactor, policy = warn_compactor(make_compactor, plugins={"state": "state-files"})
    history = [{"role": "user", "content": "go"}, call("c0"), result("c0", PASSED)] + filler_turns("x")
    view, record = compactor.compact_with_record(history)
    assert outside.read_text() == "export PATH=/usr/bin\n"
    assert any("symbolic link" in e for e in record.errors)
    assert problems(view) == []


# --- 4. overlapping turns of one session --------------------------------------------------------


def test_many_workers_on_one_state_folder_never_send_an_invalid_view(make_compactor):
    """Eight workers (each its own compactor, as processes would be) serve overlapping turns of one
    session on a shared state folder; every view they send is valid and fits, however they race."""
    import random

    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "Fix it."}]
    for i in range(40):
        history += [call(f"c{i}", "cat x"), result(f"c{i}", filler(2500 if i % 3 else 6000, f"r{i}"))]
    window = 9000
    workers = [make_compactor(context_window=window, plugins={"state": "state-files"}) for _ in range(8)]
    cuts = [i for i, m in enumerate(history) if m["role"] == "assistant" and i > 2]
    failures: list[str] = []

    def serve(worker, seed):
        rng = random.Random(seed)
        for cut in cuts:
            if rng.random() < 0.6:
                view, record = worker.compact_with_record(history[:cut], "shared")
                if problems(view):
                    failures.append(f"cut {cut}: {problems(view)[0]}")
                if record.tokens_after > window:
                    failures.append(f"cut {cut}: {record.tokens_after} tokens")

    threads = [threading.Thread(target=serve, args=(w, n)) for n, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


class NeverSaves:
    """A state store whose compare-and-set always loses (another worker always saved first)."""

    def __init__(self):
        self.attempts = 0

    @hookimpl
    def load_state(self, session_id):
        return None

    @hookimpl
    def save_state(self, session_id, state):
        self.attempts += 1
        return False


def test_a_turn_that_never_wins_its_save_still_sends_a_valid_view_and_says_so(make_compactor):
    from progressive_compactor.compactor import SAVE_ATTEMPTS

    store = NeverSaves()
    history = [{"role": "user", "content": "go"}] + filler_turns("x", 3)
    history += [call("big"), result("big", PASSED)] + filler_turns("y", 4)
    compactor, _ = warn_compactor(make_compactor, plugins={"state": "never"}, extra_plugins=[("never", store)])
    view, record = compactor.compact_with_record(history)
    assert store.attempts == SAVE_ATTEMPTS
    assert record.errors == ("saving session state failed: another turn of this session saved its state first",)
    assert problems(view) == [] and record.offloaded


def test_a_state_whose_boundary_would_start_the_view_with_a_tool_result_is_started_over(make_compactor):
    """A state from elsewhere (a store without compare-and-set, two writers) that covers a tool
    call but not its result would make the cached view start with an orphan result."""
    from progressive_compactor import SessionState
    from progressive_compactor.messages import fingerprint, message_from_dict

    history = [{"role": "user", "content": "go"}, call("c0"), result("c0", "done")] + filler_turns("x", 2)
    compactor = make_compactor()
    compactor.compact(history)
    forged = SessionState(
        summary="s", covered=2, covered_fingerprint=fingerprint(message_from_dict(history[1])), version=1
    )
    compactor.pm.get_plugin("state-memory").states["test-session"] = forged
    view, record = compactor.compact_with_record(history)
    assert problems(view) == []
    assert any("did not match this history" in e for e in record.errors)
