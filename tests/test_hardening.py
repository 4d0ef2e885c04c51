"""What adversarial use found: reused tool-call ids, secrets in state, symbolic links, overlapping
turns, the newest exchange at Emergency, corrupt and growing state files, lone surrogates, output
files, and bad input. Each test here failed before its fix."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from progressive_compactor import CompactionTier, CompactorError, ProgressiveCompactor, hookimpl
from progressive_compactor.plugin import PLACEHOLDER_PREFIX
from progressive_compactor.testing import FixedPolicy, build_history, filler, problems, tool_call, tool_turn, window_for
from timeouts import no_hang

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


@pytest.mark.parametrize("length", [8, 116, 128])
def test_a_reused_long_call_id_reads_back(make_compactor, length):
    """The second result of a reused id gets its hash after the name: a handle part up to the
    longest plain name plus that suffix must read back (a 128-character id included)."""
    call_id = ("c" * length)[:length]
    compactor, _ = warn_compactor(make_compactor)
    history = [{"role": "user", "content": "Fix the tests."}, call(call_id), result(call_id, PASSED)]
    history += filler_turns("x")
    compactor.compact_with_record(history)
    history += [call(call_id), result(call_id, FAILED)] + filler_turns("y")
    view, _ = compactor.compact_with_record(history)
    shown = [m["content"] for m in view if m.get("tool_call_id") == call_id]
    handles = [text.split("Handle: ")[1].split("]")[0] for text in shown]
    assert len(set(handles)) == 2
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
        fake.push(Behaviour("ok", echo_key=True))
        compactor = ProgressiveCompactor(str(config))
        seen = []
        for cut in range(6, len(history) + 1, 2):
            view, record = compactor.compact_with_record(history[:cut], "leaky")
            seen.append(record)
        fake.push(Behaviour("status", status=500, echo_key=True))
        failed = compactor.compact_with_record(history[:12], "failing")[1]  # a Full, with a summary
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


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_key_in_a_session_id_reaches_no_log_line(make_compactor, tmp_path, monkeypatch, caplog):
    """Session ids are the caller's: a secret one holds is masked in the warnings that name the
    session, as in its records (an integration that failed open, an experiment whose state store
    failed)."""
    import logging
    import textwrap

    from progressive_compactor.integrations.common import Compaction
    from progressive_compactor.lab.experiment import ExperimentCompactor
    from progressive_compactor.storage import session_name

    caplog.set_level(logging.INFO)
    monkeypatch.setenv("LEAK_KEY", KEY)
    sid = f"user {KEY}"
    compactor = make_compactor(context_window=4000, config={"state-postgres": {"dsn_env": "LEAK_KEY"}})
    outcome = Compaction(compactor).compact([{"role": "nobody", "content": "hi"}], sid)  # refused: fails open
    assert outcome.failed
    assert Compaction(compactor).compact(build_history([1500] * 8), sid).changed  # its notice is logged
    path = tmp_path / "trial.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            data_dir: {tmp_path}
            plugins: {{state: state-files}}
            config:
              state-postgres: {{dsn_env: LEAK_KEY}}
            experiment:
              name: trial
              variants: {{a: {{weight: 1}}, b: {{weight: 1}}}}
            """
        ),
        "utf-8",
    )
    (tmp_path / "state").mkdir()
    os.mkfifo(tmp_path / "state" / f"{session_name(sid)}.json", 0o600)  # its state cannot be read
    with ExperimentCompactor(path) as experiment:
        experiment.compact_with_record([{"role": "user", "content": "hi"}], sid)
    assert "compaction failed" in caplog.text and "experiment: loading the state" in caplog.text
    assert "Context compressed" in caplog.text
    assert leaks(caplog.text) == []


@pytest.mark.parametrize("mask", [True, False], ids=["masked", "mask_credentials-false"])
def test_credentials_nobody_registered_reach_no_file_unless_the_setting_is_off(make_compactor, tmp_path, mask):
    from credentials import CREDENTIALS, DUMP, leaked

    history = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Deploy it."}]
    for i in range(8):
        text = DUMP + filler(1500, "env") if i == 1 else DUMP if i == 3 else filler(1500, f"r{i}")
        history += [call(f"c{i}", "env"), result(f"c{i}", text)]
    push = f"Push with {CREDENTIALS['GitHub token']} and SMTP_PASSWORD={CREDENTIALS['password setting']} now."
    history += [{"role": "user", "content": push}, *filler_turns("z")]
    compactor = make_compactor(
        context_window=window_for(history, 0.85),
        offload_threshold=1000,
        mask_credentials=mask,
        plugins={"state": "state-files"},
    )
    view, record = compactor.compact_with_record(history, "s1")
    assert record.tier is CompactionTier.FULL and record.offloaded and record.summarized
    files = {str(p.relative_to(tmp_path)): p.read_text("utf-8") for p in tmp_path.rglob("*") if p.is_file()}
    assert {name.split("/")[0] for name in files} >= {"tool_results", "records", "state"}
    dump = next(e for e in record.offloaded if e.tool_call_id == "c1")
    offloaded = files[str(Path(dump.path).relative_to(tmp_path))]
    if not mask:  # the documented opt-out: the agent reads its results back as they were
        assert leaked(offloaded) == list(CREDENTIALS)
        return
    for name, text in files.items():
        assert leaked(text) == [], f"{name} holds {leaked(text)}"
    assert "AWS_SECRET_ACCESS_KEY=[REDACTED]" in offloaded and "postgresql://app:[REDACTED]@db.internal" in offloaded
    assert "-----BEGIN RSA PRIVATE KEY-----[REDACTED]-----END RSA PRIVATE KEY-----" in offloaded
    assert "HOME=/home/dev" in offloaded  # the rest of the dump is kept
    assert leaked(compactor.read_tool_result(dump.handle)) == []
    assert leaked(json.dumps(view[:3])) == []  # the compaction message: the later instruction is a fact of it


def test_a_credential_the_facts_cut_in_two_is_masked_before_the_cut(make_compactor, tmp_path):
    """An error line keeps 240 characters: a token across the cut is masked whole, since its
    start alone no longer matches its format."""
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    start = "Error: push rejected, credentials "
    line = start + "x" * (205 - len(start)) + " " + token + " were refused"
    history = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Push it."}]
    history += [call("c0", "git push"), result("c0", line)]
    for i in range(1, 8):
        history += [call(f"c{i}", "ls"), result(f"c{i}", filler(1500, f"r{i}"))]
    compactor = make_compactor(context_window=window_for(history, 0.85), plugins={"state": "state-files"})
    view, record = compactor.compact_with_record(history, "s1")
    assert record.tier is CompactionTier.FULL and "credentials" in str(view)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert token[:20] not in path.read_text("utf-8", "replace"), path


def test_a_state_saved_without_masking_by_format_is_masked_when_it_is_read(make_compactor, tmp_path):
    """A state saved by an earlier version, or with ``mask_credentials: false``, may hold a
    credential: the next compactor masks it as it reads the state, so no new file holds it."""
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    history = build_history([5000] * 10, request=f"Push the fix with my token {token} to the fork.")
    window = window_for(history, 0.85)
    make_compactor(context_window=window, mask_credentials=False, plugins={"state": "state-files"}).compact(history)
    (state_file,) = (tmp_path / "state").glob("*.json")
    assert token in state_file.read_text("utf-8")
    for records in (tmp_path / "records").glob("*"):
        records.unlink()
    longer = history + [m for i in range(8) for m in tool_turn(f"next{i}", 5000)]
    compactor = make_compactor(context_window=window, plugins={"state": "state-files"})
    assert compactor.compact_with_record(longer)[1].tier is not CompactionTier.NONE
    for path in [state_file, *(tmp_path / "records").glob("*")]:
        assert token not in path.read_text("utf-8"), path


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


def test_linked_plugin_folders_in_the_data_folder_are_never_followed(make_compactor, tmp_path):
    data, outside = tmp_path / "data", tmp_path / "outside"
    data.mkdir()
    for name in ("tool_results", "records", "state"):
        (outside / name).mkdir(parents=True)
        (data / name).symlink_to(outside / name)
    (outside / "tool_results" / "test-session").mkdir()
    (outside / "tool_results" / "test-session" / "c9.txt").write_text("the launch codes")
    compactor, _ = warn_compactor(make_compactor, data_dir=str(data), plugins={"state": "state-files"})
    history = [{"role": "user", "content": "go"}, call("c0"), result("c0", PASSED)] + filler_turns("x")
    view, record = compactor.compact_with_record(history)
    assert view[2]["content"] == PASSED and problems(view) == []  # the original is kept
    assert any("tool_results: a symbolic link" in e for e in record.errors)
    written = sorted(str(p.relative_to(outside)) for p in outside.rglob("*") if p.is_file())
    assert written == ["tool_results/test-session/c9.txt"]
    with pytest.raises(CompactorError, match="symbolic link"):
        compactor.read_tool_result("test-session/c9")
    assert compactor.sessions() == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_planted_in_the_data_folder_hangs_nothing(make_compactor, tmp_path):
    for planted in ("tool_results/test-session/c0.txt", "state/test-session.json", "records/x.jsonl"):
        (tmp_path / planted).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(tmp_path / planted, 0o600)
    compactor, _ = warn_compactor(make_compactor, plugins={"state": "state-files"})
    history = [{"role": "user", "content": "go"}, call("c0"), result("c0", PASSED)] + filler_turns("x")
    with no_hang():
        view, record = compactor.compact_with_record(history)
        assert view[2]["content"] == PASSED and problems(view) == []
        assert any("c0.txt: a named pipe, not a regular file" in e for e in record.errors)
        assert all(info.session_id != "x" for info in compactor.sessions())


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


def hold_the_lock(path: Path):
    """A process that takes the exclusive lock of ``path`` and stops (SIGSTOP: a worker paused by a
    debugger or a frozen container), holding it until it is killed."""
    import subprocess
    import sys

    code = (
        "import fcntl, os, signal, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGSTOP)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fcntl locks are POSIX")
def test_a_stopped_worker_holding_a_sessions_lock_makes_a_save_fail_open_within_the_timeout(make_compactor, tmp_path):
    import time

    (tmp_path / "state").mkdir()
    holder = hold_the_lock(tmp_path / "state" / "test-session.lock")
    try:
        compactor, _ = warn_compactor(
            make_compactor, plugins={"state": "state-files"}, config={"state-files": {"timeout": 0.5}}
        )
        started = time.monotonic()
        with no_hang(5):
            view, record = compactor.compact_with_record(with_a_big_result())
        took = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    assert problems(view) == [] and record.offloaded  # the offloaded result stays in its file
    assert any("saving session state failed" in e and "locked by another worker" in e for e in record.errors)
    assert took < 2, took
    again, second = compactor.compact_with_record(with_a_big_result())  # the holder is gone: saved now
    assert second.errors == () and compactor.state().version == 1 and again == view


@pytest.mark.parametrize("timeout", [0, -1, float("inf"), float("nan")])
def test_a_state_files_timeout_that_bounds_nothing_is_a_config_error(timeout):
    with pytest.raises(CompactorError, match=r"timeout must be more than 0 seconds.*state-files.timeout"):
        ProgressiveCompactor("classic", plugins={"state": "state-files"}, config={"state-files": {"timeout": timeout}})


def with_a_big_result() -> list[dict]:
    """A short history with one result large enough for Warn to offload."""
    return [
        {"role": "user", "content": "go"},
        *filler_turns("x", 3),
        call("big"),
        result("big", PASSED),
        *filler_turns("y", 4),
    ]


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
    history = with_a_big_result()
    compactor, _ = warn_compactor(make_compactor, plugins={"state": "never"}, extra_plugins=[("never", store)])
    view, record = compactor.compact_with_record(history)
    assert store.attempts == SAVE_ATTEMPTS
    assert record.errors == ("saving session state failed: another turn of this session saved its state first",)
    assert problems(view) == [] and record.offloaded


class LosesTheFirstAnswer:
    """A state store whose first save is done but answered as lost (a connection dropped after
    the server wrote it): the turn starts over and finds its own state."""

    def __init__(self):
        self.states = {}
        self.saves = 0

    @hookimpl
    def load_state(self, session_id):
        return self.states.get(session_id)

    @hookimpl
    def save_state(self, session_id, state):
        self.saves += 1
        self.states[session_id] = state
        return self.saves > 1


def test_a_turn_whose_save_was_done_but_answered_as_lost_records_what_it_offloaded(make_compactor):
    store = LosesTheFirstAnswer()
    history = with_a_big_result()
    compactor, _ = warn_compactor(make_compactor, plugins={"state": "lossy"}, extra_plugins=[("lossy", store)])
    view, record = compactor.compact_with_record(history)
    offloaded = [entry.handle for entry in store.states["test-session"].offloaded.values()]
    assert offloaded and [entry.handle for entry in record.offloaded] == offloaded
    assert problems(view) == [] and record.errors == ()
    assert compactor.records()[-1].id == record.id  # the record of a call that changed the view is kept


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


# --- 7. a long session's state file stays small and is not parsed again ---------------------------


def test_a_long_session_keeps_a_small_state_file_read_only_when_it_changed(make_compactor, tmp_path, monkeypatch):
    from progressive_compactor.plugins import state_files

    parses = []
    real = state_files.state_from_json
    monkeypatch.setattr(state_files, "state_from_json", lambda text: parses.append(1) or real(text))
    compactor = make_compactor(context_window=12_000, plugins={"state": "state-files"})
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "Keep going."}]
    sizes = []
    for i in range(400):
        history += [call(f"c{i}", "cat x"), result(f"c{i}", filler(5000 if i % 2 else 300, f"r{i}"))]
        compactor.compact_with_record(history, "long")
        path = tmp_path / "state" / "long.json"
        sizes.append(path.stat().st_size if path.exists() else 0)
    state = compactor.state("long")
    uncovered_results = sum(1 for m in history[1 + state.covered :] if m["role"] == "tool")
    assert state.covered > 600 and len(state.offloaded) <= uncovered_results
    assert max(sizes[200:]) < 2 * max(sizes[:200])  # bounded, not growing with the session
    assert parses == []  # every load found the file as this worker wrote it
    make_compactor(context_window=12_000, plugins={"state": "state-files"}).compact_with_record(history, "long")
    assert len(parses) == 1  # a worker that has not read it yet parses it, once


# --- 8. lone surrogates ---------------------------------------------------------------------------


def test_lone_surrogates_are_kept_in_records_state_offloads_and_cli_output(make_compactor, tmp_path):
    from click.testing import CliRunner

    from progressive_compactor.cli.app import cli

    odd = "bad \ud800 half " + filler(5000, "s")
    history = [{"role": "user", "content": "fix \udfff it"}, call("c0"), result("c0", odd)] + filler_turns("x")
    compactor, _ = warn_compactor(
        make_compactor, plugins={"state": "state-files"}, config={"store-jsonl": {"record_none": True}}
    )
    view, record = compactor.compact_with_record(history)
    (entry,) = record.offloaded
    assert compactor.read_tool_result(entry.handle) == odd
    assert compactor.records()[-1].id == record.id
    assert compactor.state().offloaded
    session = tmp_path / "s.json"
    session.write_text(json.dumps(history))  # escaped: valid JSON
    out = tmp_path / "view.jsonl"
    out.write_text("the previous view\n")
    result_ = CliRunner().invoke(cli, ["compact", str(session), "-o", str(out), "--data-dir", str(tmp_path)])
    assert result_.exit_code == 0, result_.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["content"] == "fix \udfff it"
    stdout = CliRunner().invoke(cli, ["compact", str(session), "--data-dir", str(tmp_path)])
    assert stdout.exit_code == 0 and json.loads(stdout.stdout.splitlines()[0])["content"] == "fix \udfff it"


def test_a_call_id_with_a_lone_surrogate_is_offloaded_and_read_back(make_compactor):
    """Call ids come from outside: one that is not valid UTF-8 crashed the turn (its fingerprint)."""
    odd_id = "\ud800call"
    history = [{"role": "user", "content": "fix it"}, call(odd_id), result(odd_id, filler(5000, "s"))]
    compactor, _ = warn_compactor(make_compactor)
    view, record = compactor.compact_with_record(history + filler_turns("x"))
    (entry,) = record.offloaded
    assert entry.tool_call_id == odd_id and problems(view) == []
    assert compactor.read_tool_result(entry.handle) == filler(5000, "s")


# --- 9. output files ------------------------------------------------------------------------------


def test_output_files_are_owner_only_and_never_left_half_written(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from progressive_compactor.cli.app import cli

    session = tmp_path / "s.jsonl"
    session.write_text("".join(json.dumps(m) + "\n" for m in [{"role": "user", "content": "hi"}]))
    out = tmp_path / "view.jsonl"
    ok = CliRunner().invoke(cli, ["compact", str(session), "-o", str(out), "--data-dir", str(tmp_path)])
    assert ok.exit_code == 0 and stat.S_IMODE(out.stat().st_mode) == 0o600
    out.write_text("the previous view\n")

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr("os.fsync", interrupted)
    CliRunner().invoke(cli, ["compact", str(session), "-o", str(out), "--data-dir", str(tmp_path)])
    assert out.read_text() == "the previous view\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".view")] == []


# --- 10. smaller things ---------------------------------------------------------------------------


def test_a_role_that_is_not_a_string_is_named(make_compactor):
    from progressive_compactor import InvalidMessagesError

    with pytest.raises(InvalidMessagesError, match=r"message 0: role \['user'\] is not one of"):
        make_compactor().compact([{"role": ["user"], "content": "x"}])


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"role": ["user"], "content": "x"}\n', "line 1 (message 0): role ['user'] is not one of"),
        ('{"role": "user", "content": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "line 1: JSON nested too deeply"),
    ],
    ids=["list-role", "deep-nesting"],
)
def test_bad_input_names_the_file_and_line(tmp_path, content, expected):
    from click.testing import CliRunner

    from progressive_compactor.cli.app import cli

    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    out = CliRunner().invoke(cli, ["compact", str(path), "--data-dir", str(tmp_path)])
    assert out.exit_code == 1 and "Traceback" not in out.output
    assert f"{path}: {expected}" in out.output


def test_records_that_are_not_utf8_are_skipped_with_their_file_and_line(tmp_path, make_compactor, caplog):
    from click.testing import CliRunner

    from progressive_compactor.cli.app import cli

    compactor = make_compactor(config={"store-jsonl": {"record_none": True}})
    compactor.compact([{"role": "user", "content": "hi"}], "s1")
    path = tmp_path / "records" / "s1.jsonl"
    path.write_bytes(path.read_bytes() + b"\xff\xfe not utf-8\n")
    out = CliRunner().invoke(cli, ["records", str(path), "--json"])
    assert out.exit_code == 0 and len(out.stdout.splitlines()) == 1
    assert f"{path}:2: skipped" in out.output


@pytest.mark.parametrize(
    ("yaml", "expected"),
    [
        ("plugins: {tokens: none}", "the tokens role cannot be empty"),
        ("plugins: {state: none}", "the state role cannot be empty"),
        ("offload_threshold: -5", "offload_threshold must be more than 0, got -5"),
        ("async_threads: 0", "async_threads must be more than 0, got 0"),
        ("config: {offload-files: {preview_lines: -1}}", "preview_lines must be 0 or more, got -1"),
    ],
)
def test_config_check_rejects_empty_roles_and_negative_sizes(tmp_path, yaml, expected):
    from progressive_compactor.validation import config_file_problems

    path = tmp_path / "c.yaml"
    path.write_text(yaml + "\n")
    assert any(expected in p for p in config_file_problems(str(path)))


def test_gc_says_what_did_not_exist_and_quotes_odd_ids(tmp_path, make_compactor):
    from click.testing import CliRunner

    from progressive_compactor.cli.app import cli

    compactor = make_compactor(config={"store-jsonl": {"record_none": True}})
    compactor.compact([{"role": "user", "content": "hi"}], "two\nlines")
    runner = CliRunner()
    missing = runner.invoke(cli, ["gc", "nosuchsession", "--data-dir", str(tmp_path)])
    assert missing.exit_code == 0 and "removed" not in missing.output
    assert "session nosuchsession: nothing stored" in missing.output
    odd = runner.invoke(cli, ["gc", "--older-than", "0s", "--data-dir", str(tmp_path)])
    assert "removed session 'two\\nlines'" in odd.output
    assert compactor.records("two\nlines") is None


def test_an_empty_session_id_is_an_error(make_compactor):
    from progressive_compactor import CompactorError

    with pytest.raises(CompactorError, match="session_id must be a non-empty string"):
        make_compactor().compact([{"role": "user", "content": "hi"}], "")


def test_duplicate_call_ids_in_one_message_are_made_distinct_and_each_answered(make_compactor):
    twice = {"role": "assistant", "content": "", "tool_calls": [tool_call("dup", "ls a"), tool_call("dup", "ls b")]}
    history = [
        {"role": "user", "content": "go"},
        twice,
        result("dup", "A"),
        result("dup", "B"),
        call("z"),
        result("z", "z"),
    ]
    view, record = make_compactor().compact_with_record(history)
    assert problems(view) == []
    ids = [c["id"] for c in view[1]["tool_calls"]]
    assert ids == ["dup", "dup~2"]
    assert [(m["tool_call_id"], m["content"]) for m in view[2:4]] == [("dup", "A"), ("dup~2", "B")]
    assert record.repaired_tool_pairs == 1


def test_a_repeated_call_id_is_renamed_to_no_id_the_message_already_has(make_compactor):
    """The name given to a repeated id (``dup~2``) may be another call's id in the same message:
    the repair then sent two calls of one id, a view every provider refuses. Each call keeps a
    distinct id and its own result."""
    calls = [tool_call("dup", "ls a"), tool_call("dup", "ls b"), tool_call("dup~2", "ls c")]
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        result("dup", "A"),
        result("dup", "B"),
        result("dup~2", "C"),
        {"role": "assistant", "content": "Done."},
    ]
    view = make_compactor().compact(history)
    assert problems(view) == []
    ids = [c["id"] for c in view[1]["tool_calls"]]
    assert len(set(ids)) == 3 and ids[0] == "dup" and ids[2] == "dup~2"
    answers = {m["tool_call_id"]: m["content"] for m in view[2:5]}
    assert answers == {"dup": "A", ids[1]: "B", "dup~2": "C"}


def test_a_huge_tool_result_costs_a_few_times_its_size(make_compactor):
    import tracemalloc

    huge = "\n".join(f"line {i} " + "x" * 60 for i in range(800_000))  # 52 MB
    history = [{"role": "user", "content": "go"}, call("big"), result("big", huge + "\nError: it broke")]
    history += filler_turns("x")
    compactor, _ = warn_compactor(make_compactor)
    tracemalloc.start()
    view, record = compactor.compact_with_record(history)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert record.offloaded and view[2]["content"].startswith(PLACEHOLDER_PREFIX)
    assert peak < 4 * len(huge), f"{peak / len(huge):.1f} times the result"
