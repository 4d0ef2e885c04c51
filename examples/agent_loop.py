"""An agent loop with progressive-compactor, runnable as it is: ``python examples/agent_loop.py``.

The model and the tools are stand-ins (a scripted model that reads a few files, runs the tests,
reads an offloaded result back and answers; tools that print long outputs), so the example runs
offline; the loop between the two markers is the one the README shows, and the one to copy. At a
window of 8,000 tokens the session compacts: each compaction prints its notice. Offloaded results
go to the data folder (``COMPACTOR_DATA_DIR``, else the per-user data folder).
"""

from __future__ import annotations

import json
import re
from typing import Any

from progressive_compactor import READ_TOOL_RESULT_TOOL, ProgressiveCompactor, Session

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}
my_tools = [BASH_TOOL]


def run_tool(call: dict[str, Any]) -> str:
    """Stands in for the real tools: a command's output, long as real outputs are."""
    command = json.loads(call["function"]["arguments"])["command"]
    lines = 420 if command.startswith("pytest") else 160
    return "\n".join(f"{command}: output line {i}" for i in range(1, lines + 1))


class ScriptedModel:
    """Stands in for the LLM: reads files, runs the tests, reads the tests' output back through
    its handle (it was offloaded as it arrived), reads more files, then answers."""

    STEPS = [
        "cat src/app.py",
        "cat src/db.py",
        "pytest -q",
        "read the test output back",
        "cat src/util.py",
        "grep -rn TODO src",
        "cat src/models.py",
        "cat tests/test_db.py",
        "git log -5",
    ]

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, view: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        if self.calls > len(self.STEPS):
            return {"role": "assistant", "content": "Fixed: the failing test passes now."}
        step = self.STEPS[self.calls - 1]
        if step.startswith("read"):
            handle = re.search(r"Handle: (\S+?)\]", str(view[-1].get("content")))
            assert handle, "the test output was offloaded: its placeholder names a handle"
            arguments = {"handle": handle.group(1), "start_line": 1, "end_line": 5}
            return self._call("read_tool_result", arguments, "The test output was offloaded; let me read its start.")
        return self._call("bash", {"command": step}, f"Let me run {step}.")

    def _call(self, name: str, arguments: dict[str, Any], content: str) -> dict[str, Any]:
        call = {
            "id": f"call_{self.calls}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        return {"role": "assistant", "content": content, "tool_calls": [call]}


llm = ScriptedModel()

# --- the loop ---
compactor = ProgressiveCompactor("default", context_window=8_000)  # or a YAML path, or a dict of one
session = Session(compactor, "ticket-42")
session.append(
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test in tests/test_db.py"},
)
while True:
    view = session.view()  # the compacted view: send this to the LLM
    record = session.last_record  # the record of that call
    if record and record.tier:  # this call compacted: say what it did
        print(record.summary())
    reply = llm(view, tools=[*my_tools, READ_TOOL_RESULT_TOOL])
    session.append(reply)  # the history keeps everything
    if not reply.get("tool_calls"):
        break
    for call in reply["tool_calls"]:
        if call["function"]["name"] == READ_TOOL_RESULT_TOOL["function"]["name"]:
            result = session.read_tool_call(call["function"]["arguments"])  # an offloaded result
        else:
            result = run_tool(call)
        session.add_tool_result(call["id"], result)  # over 10,000 characters: offloaded at once
print(reply["content"])
# --- end ---
compactor.close()
