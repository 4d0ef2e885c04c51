"""What the framework integration tests share: corpus sessions replayed as scripts, and the
checks every request a model receives must pass.

A script is a corpus session's assistant messages in order; the framework's own agent loop runs
it with a scripted model (it answers each request with the next recorded assistant message) and
tools that return the recorded results. A session whose last tool call was never answered ends
with a tool that crashes: the run stops there, as a crashed agent would, and the test resumes the
conversation from what the framework kept, with the dangling call in it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from progressive_compactor import CompactionTier
from progressive_compactor.testing import estimate, problems

SESSIONS = (
    "msa__django__django-11564__deepseek-chat-test-1-100.jsonl",  # 156k characters; its last call is never answered
    "msa__sqlfluff__sqlfluff-1517__deepseek-reasoner-dev.jsonl",  # 130k; every call answered, empty assistant texts
    "sweagent__marshmallow-1867__demo.jsonl",  # 35k; its last call is never answered
)
WINDOWS = (8_000, 32_000)
FINAL_ANSWER = "Done: the fix is in place and the tests pass."
RESUME = "The last command crashed the sandbox. Tell me where things stand."
_OMITTED = re.compile(r"\n\[\.\.\. \d+ characters omitted \.\.\.\]\n")


class ToolCrashed(RuntimeError):
    """A tool call the recording never answered: the agent's process died there."""


class Script:
    def __init__(self, corpus_dir: Path, name: str):
        self.name = name
        self.messages = [
            json.loads(line) for line in (corpus_dir / name).read_text("utf-8").splitlines() if line.strip()
        ]
        self.system = next((m["content"] for m in self.messages if m["role"] == "system"), None)
        self.request = next(m["content"] for m in self.messages if m["role"] == "user")
        self.results = {m["tool_call_id"]: m["content"] for m in self.messages if m["role"] == "tool"}
        self.turns = [m for m in self.messages if m["role"] == "assistant"]
        self.calls = [c for m in self.turns for c in m.get("tool_calls") or []]
        self.unanswered = [c["id"] for c in self.calls if c["id"] not in self.results]
        self.tool_names = sorted({c["function"]["name"] for c in self.calls})
        self.position = 0

    def next_turn(self) -> dict[str, Any] | None:
        """The next recorded assistant message (None when the recording is over)."""
        if self.position >= len(self.turns):
            return None
        turn = self.turns[self.position]
        self.position += 1
        return turn

    def result(self, call_id: str) -> str:
        if call_id not in self.results:
            raise ToolCrashed(f"the recording has no result for {call_id}")
        return self.results[call_id]

    @staticmethod
    def arguments(call: dict[str, Any]) -> dict[str, Any]:
        try:
            args = json.loads(call["function"]["arguments"] or "{}")
        except ValueError:
            return {"arguments": call["function"]["arguments"]}
        return args if isinstance(args, dict) else {"arguments": args}


def request_in(request: str, view: list[dict[str, Any]]) -> bool:
    """The first user request (or both ends of the bounded one) inside one message of the view."""
    parts = [p for p in _OMITTED.split(request) if p]
    return any(isinstance(m.get("content"), str) and all(p in m["content"] for p in parts) for m in view)


def check_request(view: list[dict[str, Any]], window: int, request: str, where: str) -> None:
    """What every request a model receives must be: valid for the provider (each call answered,
    no orphan, the system message first), inside the window, carrying the first user request."""
    assert problems(view) == [], f"{where}: {problems(view)}"
    tokens = estimate(view)
    assert tokens <= window, f"{where}: {tokens} tokens in a window of {window}"
    assert request_in(request, view), f"{where}: the first user request is missing"


def assert_tiers(records, window: int, calls: int, script: Script) -> None:
    """The records show one compaction per model call, none failed, and the tiers fired that the
    session's size calls for: a summary or truncation when it is over twice the window, at least
    an offload when it passes the Warn share."""
    assert len(records) == calls
    assert all(not any(e.startswith("compaction failed") for e in r.errors) for r in records)
    tiers = {r.tier for r in records}
    size = estimate(script.messages)
    if size > 2 * window:
        assert tiers & {CompactionTier.SOFT, CompactionTier.FULL, CompactionTier.EMERGENCY}, tiers
    if size > 0.6 * window:
        assert tiers - {CompactionTier.NONE}, tiers
    else:
        assert tiers == {CompactionTier.NONE}


def run_example_offline(name: str) -> None:
    """Run ``examples/<name>`` as a user would, with the offline config: it must compact and end
    with the scripted model's final answer."""
    example = Path(__file__).resolve().parents[1] / "examples" / name
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=300, check=True)
    assert "Context compressed" in out.stdout + out.stderr
    assert "final answer: Fixed: the tests pass." in out.stdout
