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

from progressive_compactor import CompactionTier, ProgressiveCompactor
from progressive_compactor.plugins.offload_files import PLACEHOLDER_PREFIX
from progressive_compactor.testing import FixedPolicy, build_history, filler, problems, tool_call

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
