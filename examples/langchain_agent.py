"""A LangChain v1 agent whose model calls are compacted, runnable offline.

``create_agent`` runs its own loop; a scripted chat model replays the tool calls of
``examples/session.jsonl`` (an agent fixing a date-parsing bug) and the ``bash`` tool returns the
recorded outputs. ``CompactionMiddleware`` compacts each model call to a 16k-token window while
the graph state keeps the whole history; the two-line notices come through the logger.

    pip install -e '.[langchain]' && python examples/langchain_agent.py
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Annotated, Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import InjectedToolCallId, tool

from progressive_compactor import ProgressiveCompactor
from progressive_compactor.integrations.langchain import CompactionMiddleware

SESSION = [json.loads(line) for line in (Path(__file__).parent / "session.jsonl").read_text("utf-8").splitlines()]
RESULTS = {m["tool_call_id"]: m["content"] for m in SESSION if m["role"] == "tool"}
TURNS = [m for m in SESSION if m["role"] == "assistant" and m.get("tool_calls")]


class ScriptedModel(BaseChatModel):
    """Stands in for a provider: answers with the recorded assistant turns, in order."""

    turn: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        chars = sum(len(str(m.content)) for m in messages)
        usage = {"input_tokens": chars // 4, "output_tokens": 20, "total_tokens": chars // 4 + 20}
        if self.turn >= len(TURNS):
            return ChatResult(
                generations=[ChatGeneration(message=AIMessage("Fixed: the tests pass.", usage_metadata=usage))]
            )
        recorded = TURNS[self.turn]
        self.turn += 1
        calls = [
            {"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"]), "id": c["id"]}
            for c in recorded["tool_calls"]
        ]
        message = AIMessage(recorded["content"] or "", tool_calls=calls, usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])


@tool
def bash(command: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
    """Run a shell command."""
    return RESULTS[tool_call_id]


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    compactor = ProgressiveCompactor("default", context_window=16_000, data_dir=tempfile.mkdtemp())
    middleware = CompactionMiddleware(compactor)  # also offers the read_tool_result tool
    agent = create_agent(ScriptedModel(), tools=[bash], system_prompt=SESSION[0]["content"], middleware=[middleware])
    result = agent.invoke(
        {"messages": [HumanMessage(SESSION[1]["content"])]},
        {"configurable": {"thread_id": "date-bug"}, "recursion_limit": 500},
    )
    print(f"final answer: {result['messages'][-1].content}")
    print(f"the state keeps all {len(result['messages'])} messages; the model saw the compacted views")


if __name__ == "__main__":
    main()
