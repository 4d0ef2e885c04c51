"""A Pydantic AI agent whose history is compacted before every model request, runnable offline.

A ``FunctionModel`` replays the tool calls of ``examples/session.jsonl`` and the ``bash`` tool
returns the recorded outputs. On Pydantic AI 2.x the processor is a ``ProcessHistory``
capability, on 1.x a history processor; either way the whole history stays on our side
(``full_history``), the model sees views of a 16k-token window.

    pip install -e '.[pydantic-ai]' && python examples/pydantic_ai_agent.py
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import pydantic_ai
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from progressive_compactor import ProgressiveCompactor
from progressive_compactor.integrations.pydantic_ai import history_processor, read_tool_result_tool

SESSION = [json.loads(line) for line in (Path(__file__).parent / "session.jsonl").read_text("utf-8").splitlines()]
RESULTS = {m["tool_call_id"]: m["content"] for m in SESSION if m["role"] == "tool"}
TURNS = iter([m for m in SESSION if m["role"] == "assistant" and m.get("tool_calls")])


def scripted(messages: list[Any], info: AgentInfo) -> ModelResponse:
    """Stands in for a provider: answers with the recorded assistant turns, in order."""
    recorded = next(TURNS, None)
    if recorded is None:
        return ModelResponse(parts=[TextPart("Fixed: the tests pass.")])
    parts: list[Any] = [TextPart(recorded["content"])] if recorded["content"] else []
    parts += [
        ToolCallPart(c["function"]["name"], c["function"]["arguments"], tool_call_id=c["id"])
        for c in recorded["tool_calls"]
    ]
    return ModelResponse(parts=parts)


def bash(ctx: RunContext[Any], command: str) -> str:
    """Run a shell command."""
    return RESULTS[ctx.tool_call_id or ""]


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    compactor = ProgressiveCompactor("default", context_window=16_000, data_dir=tempfile.mkdtemp())
    processor = history_processor(compactor, session_id="date-bug")
    tools = [bash, read_tool_result_tool(compactor, "date-bug")]
    if int(pydantic_ai.__version__.split(".")[0]) >= 2:
        from pydantic_ai.capabilities import ProcessHistory

        agent = Agent(
            FunctionModel(scripted),
            system_prompt=SESSION[0]["content"],
            tools=tools,
            capabilities=[ProcessHistory(processor)],
        )
    else:
        agent = Agent(
            FunctionModel(scripted), system_prompt=SESSION[0]["content"], tools=tools, history_processors=[processor]
        )
    result = agent.run_sync(SESSION[1]["content"], usage_limits=UsageLimits(request_limit=None))
    full = processor.full_history("date-bug", result.all_messages())  # type: ignore[attr-defined]
    print(f"final answer: {result.output}")
    print(f"full history: {len(full)} messages; the run holds {len(result.all_messages())}")


if __name__ == "__main__":
    main()
