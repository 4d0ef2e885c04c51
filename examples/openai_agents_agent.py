"""An OpenAI Agents SDK agent whose model input is compacted before every call, runnable offline.

``Runner`` runs its own loop; a ``Model`` implementation replays the tool calls of
``examples/session.jsonl`` and the ``bash`` tool returns the recorded outputs. The
``call_model_input_filter`` compacts each input to a 16k-token window and its hooks report the
usage the model returns, which anchors the token counts.

    pip install -e '.[openai-agents]' && python examples/openai_agents_agent.py
"""

from __future__ import annotations

import asyncio
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, ModelResponse, RunConfig, Runner, Usage, function_tool, set_tracing_disabled
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from progressive_compactor import ProgressiveCompactor
from progressive_compactor.integrations.openai_agents import call_model_input_filter, read_tool_result_tool

SESSION = [json.loads(line) for line in (Path(__file__).parent / "session.jsonl").read_text("utf-8").splitlines()]
RESULTS = {m["tool_call_id"]: m["content"] for m in SESSION if m["role"] == "tool"}
TURNS = iter([m for m in SESSION if m["role"] == "assistant" and m.get("tool_calls")])


def text(message: str) -> ResponseOutputMessage:
    content = [ResponseOutputText(text=message, type="output_text", annotations=[])]
    return ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed", content=content)


class ScriptedModel(Model):
    """Stands in for a provider: answers with the recorded assistant turns, in order."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        chars = len(system_instructions or "") + len(json.dumps(input, default=str))
        usage = Usage(requests=1, input_tokens=chars // 4, output_tokens=20, total_tokens=chars // 4 + 20)
        recorded = next(TURNS, None)
        if recorded is None:
            return ModelResponse(output=[text("Fixed: the tests pass.")], usage=usage, response_id=None)
        output: list[Any] = [text(recorded["content"])] if recorded["content"] else []
        output += [
            ResponseFunctionToolCall(
                type="function_call", call_id=c["id"], name="bash", arguments=c["function"]["arguments"]
            )
            for c in recorded["tool_calls"]
        ]
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    set_tracing_disabled(True)
    compactor = ProgressiveCompactor("default", context_window=16_000, data_dir=tempfile.mkdtemp())
    compaction = call_model_input_filter(compactor, session_id="date-bug")
    calls = iter(RESULTS)

    @function_tool
    def bash(command: str) -> str:
        """Run a shell command."""
        return RESULTS[next(calls)]

    agent = Agent(
        name="coder",
        instructions=SESSION[0]["content"],
        model=ScriptedModel(),
        tools=[bash, read_tool_result_tool(compactor)],
    )
    config = RunConfig(call_model_input_filter=compaction)
    result = asyncio.run(
        Runner.run(agent, SESSION[1]["content"], run_config=config, hooks=compaction.hooks, max_turns=500)
    )
    print(f"final answer: {result.final_output}")
    print(f"the run's items: {len(result.to_input_list())}; the model saw the compacted inputs")


if __name__ == "__main__":
    main()
