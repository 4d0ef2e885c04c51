"""LangChain v1: ``create_agent`` with :class:`CompactionMiddleware`, its own agent loop, a scripted
chat model replaying corpus sessions and tools returning the recorded results."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langchain.agents", reason="the [langchain] extra is not installed")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.messages.utils import convert_to_openai_messages  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import BaseTool, InjectedToolCallId  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from pydantic import BaseModel, ConfigDict  # noqa: E402

from integration_replay import (  # noqa: E402
    FINAL_ANSWER,
    RESUME,
    SESSIONS,
    WINDOWS,
    Script,
    ToolCrashed,
    assert_tiers,
    check_request,
    run_example_offline,
)
from progressive_compactor import CompactionTier, ProgressiveCompactor  # noqa: E402
from progressive_compactor.anchors import COMPACTION_MARKER  # noqa: E402
from progressive_compactor.integrations.common import Adapter  # noqa: E402
from progressive_compactor.integrations.langchain import (  # noqa: E402
    CompactionMiddleware,
    ContextWindowExceededError,
    from_dict,
    to_dict,
)
from progressive_compactor.testing import ListStore, build_history, estimate, problems  # noqa: E402

pytestmark = pytest.mark.corpus


class ScriptedModel(BaseChatModel):
    """Answers each request with the script's next assistant message; keeps every request."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    script: Any = None
    requests: list = []
    usage_factor: float = 1.0
    replies: list = []
    tools_bound: list = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools, **kwargs):
        self.tools_bound = [getattr(t, "name", None) or t.get("name") for t in tools]
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        view = convert_to_openai_messages(messages)  # LangChain's own conversion, not ours
        self.requests.append(view)
        usage = {"input_tokens": round(self.usage_factor * estimate(view)), "output_tokens": 10, "total_tokens": 0}
        turn = self.script.next_turn() if self.script is not None else None
        if turn is None and self.replies:
            turn = self.replies.pop(0)
        if turn is None:
            message = AIMessage(content=FINAL_ANSWER, usage_metadata=usage)
        else:
            calls = [
                {"name": c["function"]["name"], "args": Script.arguments(c), "id": c["id"], "type": "tool_call"}
                for c in turn.get("tool_calls") or []
            ]
            message = AIMessage(content=turn.get("content") or "", tool_calls=calls, usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])


class RecordedArgs(BaseModel):
    model_config = ConfigDict(extra="allow")
    tool_call_id: Annotated[str, InjectedToolCallId]


class RecordedTool(BaseTool):
    """A corpus tool: returns the recorded result of the call; crashes on a call never answered."""

    description: str = "A tool of the recorded session."
    args_schema: type[BaseModel] = RecordedArgs
    script: Any = None

    def _run(self, tool_call_id: str, **kwargs: Any) -> str:
        return self.script.result(tool_call_id)


def replay(corpus_dir: Path, tmp_path: Path, name: str, window: int, make_compactor, *, use_async: bool = False):
    script = Script(corpus_dir, name)
    store = ListStore()
    compactor = make_compactor(context_window=window, extra_plugins=[("list-store", store)])
    model = ScriptedModel(script=script, requests=[])
    tools = [RecordedTool(name=tool, script=script) for tool in script.tool_names]
    agent = create_agent(
        model,
        tools=tools,
        system_prompt=script.system,
        middleware=[CompactionMiddleware(compactor)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": f"lc-{window}"}, "recursion_limit": 10_000}

    def run(message: str):
        if use_async:
            return asyncio.run(agent.ainvoke({"messages": [HumanMessage(message)]}, config))
        return agent.invoke({"messages": [HumanMessage(message)]}, config)

    if script.unanswered:
        with pytest.raises(ToolCrashed):
            run(script.request)
        state = agent.get_state(config).values["messages"]
        dangling = [c["id"] for m in state if isinstance(m, AIMessage) for c in m.tool_calls]
        answered = {m.tool_call_id for m in state if isinstance(m, ToolMessage)}
        assert script.unanswered[0] in dangling and script.unanswered[0] not in answered
        result = run(RESUME)
    else:
        result = run(script.request)
    assert result["messages"][-1].content == FINAL_ANSWER
    return script, store, model, result, agent, config


@pytest.mark.parametrize("window", WINDOWS, ids=[f"{w // 1000}k" for w in WINDOWS])
@pytest.mark.parametrize("name", SESSIONS)
def test_the_agent_loop_replays_corpus_sessions(corpus_dir, tmp_path, make_compactor, name, window):
    script, store, model, result, agent, config = replay(corpus_dir, tmp_path, name, window, make_compactor)
    assert "read_tool_result" in model.tools_bound  # the middleware's tool, in LangChain's tool form
    assert len(model.requests) == len(script.turns) + 1  # the recorded turns, then the final answer
    for i, view in enumerate(model.requests):
        check_request(view, window, script.request, f"{name} at {window}, request {i}")
    assert_tiers(store.records, window, len(model.requests), script)
    # the graph state keeps the whole history: every recorded result, none replaced by a placeholder
    state = result["messages"]
    results = {m.tool_call_id: m.content for m in state if isinstance(m, ToolMessage)}
    assert all(results[call_id] == text for call_id, text in script.results.items())
    assert sum(isinstance(m, AIMessage) for m in state) == len(model.requests)
    if script.unanswered:  # the resumed request answered the dangling call in the view only
        resumed = model.requests[-1]
        answer = next(m for m in resumed if m.get("tool_call_id") == script.unanswered[0])
        assert "no result" in answer["content"].lower() or "never" in answer["content"].lower()
        assert script.unanswered[0] not in results


def test_the_async_loop(corpus_dir, tmp_path, make_compactor):
    name = SESSIONS[2]
    script, store, model, *_ = replay(corpus_dir, tmp_path, name, 8_000, make_compactor, use_async=True)
    for i, view in enumerate(model.requests):
        check_request(view, 8_000, script.request, f"async request {i}")
    assert_tiers(store.records, 8_000, len(model.requests), script)


def test_messages_convert_both_ways_without_loss():
    ai = AIMessage(
        content=[{"type": "text", "text": "calling"}, "a bare string"],
        tool_calls=[{"name": "bash", "args": {"command": "ls"}, "id": "c1", "type": "tool_call"}],
        additional_kwargs={"reasoning": "x"},
        response_metadata={"model_name": "m"},
        id="ai-1",
    )
    tool = ToolMessage(content="out", tool_call_id="c1", name="bash", artifact={"raw": 1}, status="success")
    data = to_dict(ai)
    assert data["tool_calls"][0]["id"] == "c1" and data["content"][1] == {"type": "text", "text": "a bare string"}
    changed = dict(to_dict(tool), content="[offloaded] preview")
    back = from_dict(changed)
    assert isinstance(back, ToolMessage)
    assert (back.tool_call_id, back.name, back.artifact, back.status) == ("c1", "bash", {"raw": 1}, "success")
    assert back.content == "[offloaded] preview"
    shortened = dict(
        data,
        content="calling",
        tool_calls=[
            dict(data["tool_calls"][0], function={"name": "bash", "arguments": '{"truncated_arguments": "l"}'})
        ],
    )
    back_ai = from_dict(shortened)
    assert back_ai.additional_kwargs == {"reasoning": "x"} and back_ai.id == "ai-1"
    assert back_ai.tool_calls[0]["args"] == {"truncated_arguments": "l"} and back_ai.tool_calls[0]["id"] == "c1"
    compaction = {"role": "user", "content": "[Context Compaction]\nsummary"}
    assert isinstance(from_dict(compaction), HumanMessage)
    assert isinstance(from_dict(compaction, "system"), SystemMessage)


def small_agent(compactor, model, **middleware):
    return create_agent(model, tools=[], middleware=[CompactionMiddleware(compactor, **middleware)])


def test_unchanged_messages_are_the_states_own_objects(make_compactor):
    compactor = make_compactor(context_window=100_000)
    seen = []

    class Spy(ScriptedModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            seen.append(list(messages))
            return super()._generate(messages, stop, run_manager, **kwargs)

    history = [HumanMessage("hello", id="h1"), AIMessage("hi", id="a1"), HumanMessage("again", id="h2")]
    small_agent(compactor, Spy(requests=[])).invoke({"messages": history})
    assert [m.id for m in seen[0]] == ["h1", "a1", "h2"]
    assert seen[0][0].id == "h1" and seen[0][0].content == "hello"


def test_a_message_replaced_in_the_thread_reaches_the_model(make_compactor):
    """LangGraph replaces a thread's message that has the same id (``update_state``, a user
    correcting their request): the next model call gets the new text, as without the middleware."""

    def last_request(middleware: list) -> list:
        model = ScriptedModel(requests=[])
        agent = create_agent(model, tools=[], middleware=middleware, checkpointer=InMemorySaver(), system_prompt="sys")
        config = {"configurable": {"thread_id": "edited"}}
        agent.invoke({"messages": [HumanMessage("Deploy to STAGING", id="u1")]}, config)
        agent.invoke({"messages": [HumanMessage("go", id="u2")]}, config)
        agent.update_state(config, {"messages": [HumanMessage("Deploy to PRODUCTION", id="u1")]})
        agent.invoke({"messages": [HumanMessage("go again", id="u3")]}, config)
        return model.requests[-1]

    compacted = last_request([CompactionMiddleware(make_compactor(context_window=100_000))])
    assert compacted == last_request([])
    assert compacted[1]["content"] == "Deploy to PRODUCTION"


def test_the_read_tool_reads_the_threads_own_results(make_compactor):
    """Another session's handle, which a model (or a prompt injection) may write, reads nothing."""
    compactor = make_compactor(context_window=100_000)
    for owner in ("alice", "t1"):
        message = {"role": "tool", "tool_call_id": "call_1", "content": f"{owner} payroll\n" + "row\n" * 4000}
        compactor.offload_tool_result(message, owner)
    reads = [
        {"name": "read_tool_result", "args": {"handle": f"{owner}/call_1", "end_line": 1}, "id": f"r{i}"}
        for i, owner in enumerate(("alice", "t1"))
    ]

    class Reader(ScriptedModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            if not self.requests:
                self.requests.append(messages)
                calls = [{**r, "type": "tool_call"} for r in reads]
                return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=calls))])
            return super()._generate(messages, stop, run_manager, **kwargs)

    reader = Reader(requests=[])
    agent = create_agent(reader, tools=[], middleware=[CompactionMiddleware(compactor)], checkpointer=InMemorySaver())
    result = agent.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "t1"}})
    answers = {m.tool_call_id: m.content for m in result["messages"] if isinstance(m, ToolMessage)}
    assert answers == {
        "r0": "error: the handle 'alice/call_1' does not name a result of this session",
        "r1": "t1 payroll",
    }


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_the_read_tool_reads_the_own_results_of_sessions_named_by_a_function(make_compactor, use_async):
    """Sessions named by a function of the model request (here the user in the run's context):
    the middleware's read tool reads the results of the session whose model made the call, not
    those of any session."""
    compactor = make_compactor(context_window=100_000)
    for owner in ("alice", "bob"):
        message = {"role": "tool", "tool_call_id": "call_1", "content": f"{owner} payroll\n" + "row\n" * 4000}
        compactor.offload_tool_result(message, owner)

    class Reader(ScriptedModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            if len(messages) == 1:
                calls = [
                    {"name": "read_tool_result", "args": {"handle": f"{o}/call_1", "end_line": 1}, "id": o}
                    for o in ("alice", "bob")
                ]
                return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=calls))])
            return super()._generate(messages, stop, run_manager, **kwargs)

    middleware = CompactionMiddleware(compactor, session_id=lambda request: request.runtime.context["user"])
    agent = create_agent(Reader(requests=[]), tools=[], middleware=[middleware], context_schema=dict)
    inputs = {"messages": [HumanMessage("hi")]}
    if use_async:
        result = asyncio.run(agent.ainvoke(inputs, context={"user": "bob"}))
    else:
        result = agent.invoke(inputs, context={"user": "bob"})
    answers = {m.tool_call_id: m.content for m in result["messages"] if isinstance(m, ToolMessage)}
    assert answers == {
        "alice": "error: the handle 'alice/call_1' does not name a result of this session",
        "bob": "bob payroll",
    }


def test_a_middleware_serving_many_threads_keeps_what_its_recent_threads_need(make_compactor):
    """One agent serves every user: the middleware keeps the converted messages of as many threads
    as the compactor keeps sessions of, and a thread it dropped goes on as it would have."""
    compactor = make_compactor(context_window=100_000, cached_sessions=2)
    middleware = CompactionMiddleware(compactor)
    model = ScriptedModel(requests=[])
    agent = create_agent(model, tools=[], middleware=[middleware], checkpointer=InMemorySaver())
    threads = ("t1", "t2", "t3")
    for thread in threads:
        agent.invoke({"messages": [HumanMessage(f"hello from {thread}")]}, {"configurable": {"thread_id": thread}})
    assert len(middleware._converters) == 2 and middleware._converters.get("t1") is None
    agent.invoke({"messages": [HumanMessage("and again")]}, {"configurable": {"thread_id": "t1"}})
    assert [m["content"] for m in model.requests[-1]] == ["hello from t1", FINAL_ANSWER, "and again"]
    assert middleware._converters.get("t1") is not None and len(middleware._converters) == 2


def test_a_failing_compactor_never_breaks_the_run(make_compactor, caplog):
    store = ListStore()
    compactor = make_compactor(context_window=8_000, extra_plugins=[("list-store", store)])

    class Broken:
        from progressive_compactor.plugin import hookimpl

        @hookimpl(tryfirst=True)
        def estimate_tokens(self, messages):
            raise RuntimeError("tokenizer exploded")

    compactor.pm.register(Broken(), "broken")
    model = ScriptedModel(requests=[])
    with caplog.at_level(logging.WARNING, "progressive_compactor.integrations"):
        result = small_agent(compactor, model).invoke({"messages": [HumanMessage("fix the bug")]})
    assert result["messages"][-1].content == FINAL_ANSWER
    assert model.requests[0] == [{"role": "user", "content": "fix the bug"}]  # the uncompacted input
    record = store.records[-1]
    assert record.errors[0].startswith(
        "compaction failed, sent the uncompacted input: RuntimeError: tokenizer exploded"
    )
    assert "tokenizer exploded" in caplog.text


class KeepsEverything:
    """A truncation fallback that cannot shorten anything (as when the newest message alone is
    over the window and may not be cut): the view stays over the window."""

    from progressive_compactor.plugin import hookimpl

    @hookimpl(tryfirst=True)
    def fallback_compact(self, messages):
        return list(messages)


def test_a_view_that_cannot_fit_raises_a_clear_error(make_compactor):
    compactor = make_compactor(context_window=1_000)
    compactor.pm.register(KeepsEverything(), "keeps-everything")
    model = ScriptedModel(requests=[])
    with pytest.raises(ContextWindowExceededError, match="over the context window of 1000"):
        small_agent(compactor, model).invoke({"messages": [HumanMessage("x" * 20_000)]})
    assert model.requests == []


def test_usage_anchors_the_session_and_records_reach_the_stream(make_compactor):
    history = build_history([3000] * 14)
    compactor = make_compactor(context_window=16_000)
    records = []
    model = ScriptedModel(requests=[], usage_factor=1.3)
    agent = small_agent(compactor, model, on_record=records.append, session_id="fixed")
    messages = [SystemMessage(history[0]["content"]), HumanMessage(history[1]["content"])]
    for m in history[2:]:
        if m["role"] == "assistant":
            messages.append(
                AIMessage(
                    m["content"], tool_calls=[{"name": "bash", "args": {}, "id": c["id"]} for c in m["tool_calls"]]
                )
            )
        else:
            messages.append(ToolMessage(m["content"], tool_call_id=m["tool_call_id"]))
    messages.append(HumanMessage("go on"))
    chunks = list(agent.stream({"messages": messages}, stream_mode="custom"))
    messages += [AIMessage("still working"), HumanMessage("and now?")]
    chunks += list(agent.stream({"messages": messages}, stream_mode="custom"))
    assert [c["progressive_compactor"]["record"]["id"] for c in chunks] == [r.id for r in records]
    assert (records[0].token_correction, records[0].token_offset) == (1.0, 0)
    assert records[1].token_correction > 1.1 and records[1].token_offset > 0  # one report: part offset, part scale
    assert records[1].tier is not CompactionTier.NONE  # 1.3 × the estimate passes the Warn share
    assert all(r.session_id == "fixed" for r in records)


def test_the_example_runs_offline():
    run_example_offline("langchain_agent.py")


def test_the_compaction_role_is_checked_and_applied_and_a_function_may_name_sessions(tmp_path):
    compactor = ProgressiveCompactor("default", data_dir=str(tmp_path))
    with pytest.raises(ValueError, match="compaction_role must be 'human' or 'system', got 'user'"):
        CompactionMiddleware(compactor, compaction_role="user")
    compaction = {"role": "user", "content": COMPACTION_MARKER + "\nsummary"}
    assert isinstance(from_dict(compaction, "system"), SystemMessage)
    assert isinstance(from_dict(compaction), HumanMessage)
    named = CompactionMiddleware(compactor, session_id=lambda request: f"ticket-{request}")
    assert named.session_of(7) == "ticket-7"


def test_the_adapter_lets_the_frameworks_base_class_initialise(tmp_path):
    class Framework:
        def __init__(self):
            self.ready = True

    class Middleware(Adapter, Framework):
        ROLES = ("human", "system")

    assert Middleware(ProgressiveCompactor("default", data_dir=str(tmp_path))).ready


def test_an_offloaded_tool_result_keeps_the_images_the_tool_returned(make_compactor):
    """Warn offloads the text of a tool's result; the screenshot it returned beside the text,
    which the offload does not store, still reaches the model."""
    from langchain_core.tools import tool

    image = {"type": "image_url", "image_url": {"url": "https://example.com/page.png"}}

    @tool
    def page(n: int) -> list:
        """A page: its text and a screenshot."""
        return [{"type": "text", "text": f"page {n}\n" + "line of the page\n" * 800}, image]

    calls = [{"name": "page", "arguments": json.dumps({"n": n})} for n in range(1, 6)]
    replies = [{"content": "", "tool_calls": [{"id": f"p{i}", "function": c}]} for i, c in enumerate(calls)]
    compactor = make_compactor(context_window=24_000)
    model = ScriptedModel(requests=[], replies=replies)
    agent = create_agent(model, tools=[page], middleware=[CompactionMiddleware(compactor, session_id="s")])
    agent.invoke({"messages": [HumanMessage("read the pages")]})
    results = [m["content"] for request in model.requests for m in request if m["role"] == "tool"]
    assert any("Tool result offloaded" in json.dumps(r) for r in results)
    assert all(isinstance(r, list) and image in r for r in results), results


def test_anthropic_tool_use_blocks_are_not_counted_twice(make_compactor):
    """ChatAnthropic's AI message carries each tool call twice, as a ``tool_use`` block of its
    content and in ``tool_calls``: a call that writes a large file counts once, as Anthropic bills
    it, in the agent's own loop as when converted alone."""
    from langchain_core.tools import tool

    from progressive_compactor.messages import char_count, message_from_dict

    body = "x = 1\n" * 3000

    class AnthropicStyle(ScriptedModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            result = super()._generate(messages, stop, run_manager, **kwargs)
            message = result.generations[0].message
            blocks = [
                {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["args"]} for c in message.tool_calls
            ]
            if blocks:
                message.content = [{"type": "text", "text": "Writing."}, *blocks]
            return result

    @tool
    def write(path: str, content: str) -> str:
        """Write a file."""
        return f"wrote {len(content)} characters to {path}"

    runs = {}
    for name, model_class in (("plain", ScriptedModel), ("anthropic", AnthropicStyle)):
        records: list[Any] = []
        reply = {
            "content": "Writing.",
            "tool_calls": [
                {"id": "w1", "function": {"name": "write", "arguments": json.dumps({"path": "a.py", "content": body})}}
            ],
        }
        model = model_class(requests=[], replies=[reply])
        middleware = CompactionMiddleware(
            make_compactor(context_window=200_000), session_id="s", on_record=records.append
        )
        create_agent(model, tools=[write], middleware=[middleware]).invoke({"messages": [HumanMessage("write a.py")]})
        runs[name] = records[-1].tokens_before
    assert abs(runs["anthropic"] - runs["plain"]) < 50, runs
    calls = [{"name": "write", "args": {"path": "a.py", "content": body}, "id": "w1", "type": "tool_call"}]
    content = [
        {"type": "text", "text": "Writing."},
        {"type": "tool_use", "id": "w1", "name": "write", "input": calls[0]["args"]},
    ]
    data = to_dict(AIMessage(content=content, tool_calls=calls))
    assert char_count(message_from_dict(data)) < len(json.dumps(body)) + 200  # the arguments once


def test_a_malformed_tool_call_keeps_its_error_result(make_compactor):
    """A tool call whose arguments are not JSON is an ``invalid_tool_call``, which the providers
    send back as a call and ``create_agent`` answers with an error ``ToolMessage``: the answer
    stays a tool result after its call, as without the middleware (a user message in its place
    leaves the call unanswered, which the provider refuses)."""
    bad = {"type": "invalid_tool_call", "name": "write", "args": '{"path": "a.py", "content": "x', "id": "bad1"}

    def last_request(middleware: list) -> list:
        seen = []

        class Truncating(ScriptedModel):
            def _generate(self, messages, stop=None, run_manager=None, **kwargs):
                seen.append(list(messages))
                if len(seen) == 1:
                    message = AIMessage(content="", invalid_tool_calls=[dict(bad, error="not JSON")])
                    return ChatResult(generations=[ChatGeneration(message=message)])
                return super()._generate(messages, stop, run_manager, **kwargs)

        agent = create_agent(Truncating(requests=[]), tools=[], middleware=middleware, checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t"}}
        agent.invoke({"messages": [HumanMessage("write a.py")]}, config)
        agent.invoke({"messages": [HumanMessage("try again")]}, config)
        return [(type(m).__name__, m.content, getattr(m, "tool_call_id", None)) for m in seen[-1]]

    compacted = last_request([CompactionMiddleware(make_compactor(context_window=100_000))])
    assert compacted == last_request([])
    assert compacted[2][0] == "ToolMessage" and compacted[2][2] == "bad1"
    changed = from_dict(dict(to_dict(AIMessage(content="", invalid_tool_calls=[bad])), content="shortened"))
    assert changed.tool_calls == [] and [c["id"] for c in changed.invalid_tool_calls] == ["bad1"]


def test_a_tool_call_id_repeated_in_one_reply_reaches_the_model_answered_once_per_call(make_compactor):
    """A reply that repeats a tool call id (some providers answer ``call_0`` for every call) gets
    its calls told apart by the compactor (``call_0~2``): the second result reaches the model
    under the new id too, so each call has its own result, as the provider needs."""
    calls = [{"name": "bash", "args": {"command": c}, "id": "call_0", "type": "tool_call"} for c in ("ls", "pwd")]
    history = [
        HumanMessage("list the files"),
        AIMessage(content="", tool_calls=calls),
        ToolMessage(content="a.py", tool_call_id="call_0"),
        ToolMessage(content="/work", tool_call_id="call_0"),
        HumanMessage("go on"),
    ]
    model = ScriptedModel(requests=[])
    small_agent(make_compactor(context_window=100_000), model).invoke({"messages": history})
    view = model.requests[0]
    assert problems(view) == []
    assert [(m["tool_call_id"], m["content"]) for m in view if m["role"] == "tool"] == [
        ("call_0", "a.py"),
        ("call_0~2", "/work"),
    ]


def _responses_blocks(message: AIMessage) -> list:
    """ChatOpenAI's Responses API content (``output_version="responses/v1"``, its default): a
    reasoning item, then each call as a ``function_call`` item."""
    calls = [
        {
            "type": "function_call",
            "name": c["name"],
            "arguments": json.dumps(c["args"]),
            "call_id": c["id"],
            "id": f"fc_{c['id']}",
            "status": "completed",
        }
        for c in message.tool_calls
    ]
    return [{"type": "reasoning", "id": "rs_1", "summary": []}, *calls]


def _v1_blocks(message: AIMessage) -> list:
    """LangChain's standard content (``output_version="v1"``): text, then each call as a
    ``tool_call`` block."""
    return [{"type": "text", "text": "Writing."}, *({**c, "type": "tool_call"} for c in message.tool_calls)]


@pytest.mark.parametrize("blocks", [_responses_blocks, _v1_blocks], ids=["responses", "v1"])
def test_tool_calls_in_content_blocks_are_not_counted_twice(make_compactor, blocks):
    """ChatOpenAI's Responses API and any model with ``output_version="v1"`` carry each tool call
    in the content too: a call that writes a large file counts once, as the provider bills it; and
    a truncation that cuts its arguments is not undone by a block that keeps them whole."""
    from langchain_core.tools import tool

    body = "x = 1\n" * 3000

    class InContent(ScriptedModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            result = super()._generate(messages, stop, run_manager, **kwargs)
            message = result.generations[0].message
            if message.tool_calls:
                message.content = blocks(message)
            return result

    @tool
    def write(path: str, content: str) -> str:
        """Write a file."""
        return f"wrote {len(content)} characters to {path}"

    runs = {}
    for name, model_class in (("plain", ScriptedModel), ("blocks", InContent)):
        records: list[Any] = []
        arguments = json.dumps({"path": "a.py", "content": body})
        reply = {
            "content": "Writing.",
            "tool_calls": [{"id": "w1", "function": {"name": "write", "arguments": arguments}}],
        }
        model = model_class(requests=[], replies=[reply])
        middleware = CompactionMiddleware(
            make_compactor(context_window=200_000), session_id="s", on_record=records.append
        )
        create_agent(model, tools=[write], middleware=[middleware]).invoke({"messages": [HumanMessage("write a.py")]})
        runs[name] = records[-1].tokens_before
    assert abs(runs["blocks"] - runs["plain"]) < 50, runs
    calls = [{"name": "write", "args": {"path": "a.py", "content": body}, "id": "w1", "type": "tool_call"}]
    data = to_dict(AIMessage(content=blocks(AIMessage(content="", tool_calls=calls)), tool_calls=calls))
    shortened = dict(
        data,
        tool_calls=[
            dict(data["tool_calls"][0], function={"name": "write", "arguments": '{"truncated_arguments": "x"}'})
        ],
    )
    back = from_dict(shortened)
    assert body not in json.dumps(back.content) and back.tool_calls[0]["args"] == {"truncated_arguments": "x"}
    assert [p["type"] for p in back.content] == [p["type"] for p in blocks(AIMessage(content="", tool_calls=calls))]
    assert "truncated_arguments" in json.dumps(back.content[-1])  # in place, its item id kept


def test_a_system_message_after_the_first_reaches_the_model_as_the_compactor_made_it(make_compactor):
    """A system message that is not first (a middleware's or an application's, after the agent's
    system prompt) is made a user message that says what it was, which every provider takes
    (ChatAnthropic refuses a system message after a user's): the model gets that, not a system
    message again with the note in its text."""
    seen = []

    class Spy(ScriptedModel):
        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            seen.append(list(messages))
            return super()._generate(messages, stop, run_manager, **kwargs)

    compactor = make_compactor(context_window=100_000)
    agent = create_agent(Spy(requests=[]), tools=[], system_prompt="sys", middleware=[CompactionMiddleware(compactor)])
    agent.invoke({"messages": [HumanMessage("hi"), SystemMessage("answer in French", id="late")]})
    assert [type(m).__name__ for m in seen[0]] == ["SystemMessage", "HumanMessage", "HumanMessage"]
    assert seen[0][2].content == "[System message]\nanswer in French" and seen[0][2].id == "late"


def thinking_model(thinking: dict[str, Any]) -> type[ScriptedModel]:
    """A :class:`ScriptedModel` whose replies with tool calls come as Anthropic's do with thinking
    on: ``thinking`` first, then the reply's text, then its calls as ``tool_use`` blocks. ``seen``
    keeps the messages of every request as LangChain passed them."""

    class Thinking(ScriptedModel):
        seen: list = []

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            self.seen.append(list(messages))
            result = super()._generate(messages, stop, run_manager, **kwargs)
            message = result.generations[0].message
            if message.tool_calls:
                uses = [
                    {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["args"]}
                    for c in message.tool_calls
                ]
                message.content = [thinking, {"type": "text", "text": message.content}, *uses]
            return result

    return Thinking


def test_a_truncated_ai_message_keeps_its_thinking_and_blocks(make_compactor):
    """Emergency truncation cuts the newest call's arguments (a file too large for the window):
    the cut message keeps its thinking block, signature intact, first (Anthropic refuses the
    turn's call without it when thinking is on), its text, and its call in place, cut."""
    from langchain_core.tools import tool

    body = "x = 1\n" * 3000
    thinking = {"type": "thinking", "thinking": "I should write it.", "signature": "c2lnbmF0dXJl"}
    Thinking = thinking_model(thinking)

    @tool
    def write(path: str, content: str) -> str:
        """Write a file."""
        return f"wrote {len(content)} characters to {path}"

    arguments = json.dumps({"path": "a.py", "content": body})
    reply = {"content": "Writing.", "tool_calls": [{"id": "w1", "function": {"name": "write", "arguments": arguments}}]}
    records: list[Any] = []
    middleware = CompactionMiddleware(make_compactor(context_window=4_000), session_id="s", on_record=records.append)
    model = Thinking(requests=[], replies=[reply], seen=[])
    create_agent(model, tools=[write], middleware=[middleware]).invoke({"messages": [HumanMessage("write a.py")]})
    assert records[-1].tier is CompactionTier.EMERGENCY
    ai = model.seen[-1][1]
    assert isinstance(ai, AIMessage) and "truncated_arguments" in ai.tool_calls[0]["args"]
    assert ai.content[:2] == [thinking, {"type": "text", "text": "Writing."}]
    assert [p["type"] for p in ai.content] == ["thinking", "text", "tool_use"]
    assert ai.content[2]["input"] == ai.tool_calls[0]["args"]
    # a web search's call and results go together (the truncation took them out); the new text
    # takes the place of the old
    search = [
        {"type": "server_tool_use", "id": "srv1", "name": "web_search", "input": {"query": "q"}},
        {"type": "web_search_tool_result", "tool_use_id": "srv1", "content": [{"type": "web_search_result"}]},
    ]
    original = AIMessage(content=[thinking, *search, *ai.content[1:]], tool_calls=ai.tool_calls)
    back = from_dict(dict(to_dict(original), content="Writ"))
    assert back.content == [thinking, {"type": "text", "text": "Writ"}, ai.content[2]]
    # a cut that keeps the message's other parts (a list): the thinking stays first, counted apart
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    original = AIMessage(content=[thinking, {"type": "text", "text": "Writing."}, image], tool_calls=[])
    data = to_dict(original)
    assert thinking not in data["content"] and data["__counted__"] == [thinking]
    back = from_dict(dict(data, content=[{"type": "text", "text": "Writ"}, image]))
    assert back.content == [thinking, {"type": "text", "text": "Writ"}, image]


def test_a_voice_message_counts_as_audio(make_compactor):
    """LangChain's standard audio block (``{"type": "audio", "base64": ...}``, what a voice
    agent's ``HumanMessage`` carries) counts as the audio it is, as the OpenAI ``input_audio``
    part does, not as many tokens as its base64 has characters: half a minute of WAV leaves a
    128k window alone instead of overflowing it."""
    clip = "UklGRiQAAABXQVZF" * 80_000  # 1.28 MB of base64: half a minute of 16 kHz WAV
    records: list[Any] = []
    middleware = CompactionMiddleware(make_compactor(context_window=128_000), on_record=records.append)
    model = ScriptedModel(requests=[])
    voice = HumanMessage(content=[{"type": "audio", "base64": clip, "mime_type": "audio/wav"}])
    create_agent(model, tools=[], middleware=[middleware]).invoke({"messages": [voice]})
    assert records[-1].tier is CompactionTier.NONE and records[-1].tokens_before < 10_000, records[-1]


def test_the_thinking_a_view_sends_is_counted(make_compactor):
    """Every thinking block a view sends is counted, whatever the turn: newer Claude models keep an
    earlier turn's thinking in context, and every model reads the thinking of the current tool loop.
    A thinking block too large for the window is not put back, uncounted, into a message whose
    text the emergency truncation cut: what the model gets fits the window."""
    from langchain_core.tools import tool

    thinking = {"type": "thinking", "thinking": "Let me think. " * 1500, "signature": "c2ln" * 50}
    Thinking = thinking_model(thinking)

    @tool
    def look(path: str) -> str:
        """Look at a file."""
        return f"{path} is fine"

    def reply(i: int) -> dict[str, Any]:
        return {
            "content": f"Looking at {i}.",
            "tool_calls": [{"id": f"l{i}", "function": {"name": "look", "arguments": json.dumps({"path": f"{i}.py"})}}],
        }

    records: list[Any] = []
    model = Thinking(requests=[], replies=[reply(i) for i in range(3)], seen=[])
    middleware = CompactionMiddleware(make_compactor(context_window=100_000), session_id="s", on_record=records.append)
    create_agent(model, tools=[look], middleware=[middleware]).invoke({"messages": [HumanMessage("look at them")]})
    assert len(model.requests) == 4
    for view, record in zip(model.requests, records, strict=True):
        assert estimate(view) <= record.tokens_after + 10, (estimate(view), record.tokens_after)
    assert records[-1].tokens_after >= 3 * len(thinking["thinking"]) // 4  # the three turns' thinking

    records = []
    model = Thinking(requests=[], replies=[reply(0)], seen=[])
    middleware = CompactionMiddleware(make_compactor(context_window=4_000), session_id="t", on_record=records.append)
    create_agent(model, tools=[look], middleware=[middleware]).invoke({"messages": [HumanMessage("look at it")]})
    assert records[-1].tier is CompactionTier.EMERGENCY
    for view, record in zip(model.requests, records, strict=True):
        assert estimate(view) <= min(record.tokens_after + 10, 4_000), (estimate(view), record.tokens_after)
