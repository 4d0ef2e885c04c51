"""OpenAI Agents SDK: ``Runner`` with the compacting ``call_model_input_filter``, the SDK's own
agent loop, a ``Model`` implementation replaying corpus sessions and a tool returning the
recorded results."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("agents", reason="the [openai-agents] extra is not installed")

from agents import Agent, FunctionTool, ModelResponse, RunConfig, Runner, Usage  # noqa: E402
from agents.exceptions import AgentsException  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.tracing import set_tracing_disabled  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

from integration_replay import (  # noqa: E402
    FINAL_ANSWER,
    RESUME,
    SESSIONS,
    WINDOWS,
    Script,
    ToolCrashed,
    assert_tiers,
    request_in,
    run_example_offline,
)
from progressive_compactor import CompactionTier, ProgressiveCompactor  # noqa: E402
from progressive_compactor.anchors import COMPACTION_MARKER  # noqa: E402
from progressive_compactor.integrations.openai_agents import (  # noqa: E402
    ContextWindowExceededError,
    call_model_input_filter,
    from_view,
    read_tool_result_tool,
    to_dicts,
)
from progressive_compactor.integrations.openai_agents import problems as item_problems  # noqa: E402
from progressive_compactor.testing import ListStore, problems  # noqa: E402

pytestmark = pytest.mark.corpus
set_tracing_disabled(True)  # no exporter: the tests run offline


def item(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else x.model_dump(exclude_unset=True)


def chat_view(instructions: str | None, items: list[Any]) -> list[dict[str, Any]]:
    """The request as chat messages, converted here independently of the integration: each
    function_call joins the assistant message before it, each output is a tool message."""
    view: list[dict[str, Any]] = [{"role": "system", "content": instructions}] if instructions else []
    for x in map(item, items):
        kind = x.get("type")
        if kind == "function_call":
            if not (view and view[-1]["role"] == "assistant"):
                view.append({"role": "assistant", "content": ""})
            view[-1].setdefault("tool_calls", []).append(
                {"id": x["call_id"], "type": "function", "function": {"name": x["name"], "arguments": x["arguments"]}}
            )
        elif kind == "function_call_output":
            view.append({"role": "tool", "tool_call_id": x["call_id"], "content": x["output"]})
        elif x.get("role") in ("user", "system", "developer", "assistant"):
            content = x.get("content")
            text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [])
            role = "system" if x["role"] == "developer" else x["role"]
            if role == "assistant" and view and view[-1]["role"] == "assistant" and not view[-1].get("tool_calls"):
                view[-1]["content"] += text
            else:
                view.append({"role": role, "content": text})
    return view


class ReplayModel(Model):
    """Answers each request with the script's next assistant message; keeps every request."""

    def __init__(self, script: Script | None, usage_factor: float = 1.0):
        self.script = script
        self.usage_factor = usage_factor
        self.requests: list[list[dict[str, Any]]] = []
        self.tools: list[list[str]] = []
        self.outputs: list[list[Any]] = []

    async def get_response(
        self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **kwargs
    ):
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        view = chat_view(system_instructions, items)
        self.requests.append(view)
        self.tools.append([t.name for t in tools])
        from progressive_compactor.testing import estimate

        usage = Usage(
            requests=1, input_tokens=round(self.usage_factor * estimate(view)), output_tokens=10, total_tokens=0
        )
        turn = self.script.next_turn() if self.script is not None else None
        n = len(self.requests)
        if turn is None:
            output: list[Any] = [
                ResponseOutputMessage(
                    id=f"msg_{n}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(text=FINAL_ANSWER, type="output_text", annotations=[])],
                )
            ]
        else:
            output = []
            if turn.get("content"):
                output.append(
                    ResponseOutputMessage(
                        id=f"msg_{n}",
                        type="message",
                        role="assistant",
                        status="completed",
                        content=[ResponseOutputText(text=turn["content"], type="output_text", annotations=[])],
                    )
                )
            output += [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=c["id"],
                    name=c["function"]["name"],
                    arguments=c["function"]["arguments"],
                    id=f"fc_{c['id']}",
                )
                for c in turn.get("tool_calls") or []
            ]
        self.outputs.append(output)
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def recorded_tool(script: Script, name: str) -> FunctionTool:
    async def invoke(ctx, arguments: str) -> str:
        return script.result(ctx.tool_call_id)

    return FunctionTool(
        name=name,
        description="A tool of the recorded session.",
        params_json_schema={
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "additionalProperties": True,
        },
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )


def replay(corpus_dir, name, window, make_compactor):
    script = Script(corpus_dir, name)
    store = ListStore()
    compactor = make_compactor(context_window=window, extra_plugins=[("list-store", store)])
    model = ReplayModel(script)
    compaction = call_model_input_filter(compactor, session_id="oa")
    agent = Agent(
        name="replay",
        instructions=script.system,
        model=model,
        tools=[*(recorded_tool(script, t) for t in script.tool_names), read_tool_result_tool(compactor)],
    )
    config = RunConfig(call_model_input_filter=compaction, tracing_disabled=True)

    def run(items):
        return asyncio.run(Runner.run(agent, items, run_config=config, hooks=compaction.hooks, max_turns=10_000))

    first = [{"role": "user", "content": script.request}]
    if script.unanswered:
        with pytest.raises((ToolCrashed, AgentsException)) as crash:
            run(first)
        data = crash.value.run_data  # what the SDK had when the tool crashed
        kept = [{"role": "user", "content": data.input}] if isinstance(data.input, str) else list(data.input)
        kept += [x.to_input_item() for x in data.new_items]
        # the SDK keeps no record of the response whose tool crashed; the app has it from the model
        assert len(data.raw_responses) == len(model.outputs) - 1
        kept += [o.model_dump(exclude_unset=True) for o in model.outputs[-1]]
        assert any(item(x).get("call_id") == script.unanswered[0] for x in kept)
        result = run([*kept, {"role": "user", "content": RESUME}])
    else:
        result = run(first)
    assert result.final_output == FINAL_ANSWER
    return script, store, model, result


def items_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A corpus chat message as Responses-API input items (what an app stores)."""
    if message["role"] == "tool":
        return [{"type": "function_call_output", "call_id": message["tool_call_id"], "output": message["content"]}]
    if message["role"] == "assistant":
        out: list[dict[str, Any]] = (
            [{"role": "assistant", "content": message["content"]}] if message.get("content") else []
        )
        return out + [
            {
                "type": "function_call",
                "call_id": c["id"],
                "name": c["function"]["name"],
                "arguments": c["function"]["arguments"],
            }
            for c in message.get("tool_calls") or []
        ]
    return [{"role": message["role"], "content": message["content"]}]


@pytest.mark.parametrize("window", WINDOWS, ids=[f"{w // 1000}k" for w in WINDOWS])
@pytest.mark.parametrize("name", SESSIONS)
def test_the_agent_loop_replays_corpus_sessions(corpus_dir, make_compactor, name, window):
    script, store, model, result = replay(corpus_dir, name, window, make_compactor)
    assert "read_tool_result" in model.tools[0]  # the read tool, as an Agents SDK FunctionTool
    assert len(model.requests) == len(script.turns) + 1
    for i, view in enumerate(model.requests):
        where = f"{name} at {window}, request {i}"
        assert problems(view) == [], where
        from progressive_compactor.testing import estimate

        assert estimate(view) <= window, where
        assert request_in(script.request, view), where
    assert_tiers(store.records, window, len(model.requests), script)
    if script.unanswered:
        resumed = model.requests[-1]
        assert [m for m in resumed if m.get("tool_call_id") == script.unanswered[0]]


def test_items_convert_both_ways_without_loss():
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "think"}],
        "encrypted_content": "opaque",
    }
    items = [
        {"role": "user", "content": "fix it"},
        reasoning,
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "content": [{"type": "output_text", "text": "looking", "annotations": []}],
        },
        {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": '{"command": "ls"}', "id": "fc_1"},
        {"type": "function_call_output", "call_id": "c1", "output": "out " * 40},
    ]
    dicts = to_dicts(items, "be brief")
    assert [d["role"] for d in dicts] == ["system", "user", "assistant", "tool"]
    assert dicts[2]["tool_calls"][0]["id"] == "c1" and dicts[2]["content"] == "looking"
    same, kept = from_view(dicts, {id(d) for d in dicts})
    assert kept and all(a is b for a, b in zip(same, items, strict=True))
    changed = [*dicts[:3], dict(dicts[3], content="[offloaded] preview")]
    back, _ = from_view(changed, {id(d) for d in dicts[:3]})
    assert back[:4] == items[:4] and back[1] is reasoning  # the reasoning item stays with its call
    assert back[4] == {"type": "function_call_output", "call_id": "c1", "output": "[offloaded] preview"}
    dangling = [*dicts[:3], {"role": "tool", "tool_call_id": "c1", "content": "[no result]"}]
    back, _ = from_view(dangling, {id(d) for d in dicts[:3]})
    assert back[-1] == {"type": "function_call_output", "call_id": "c1", "output": "[no result]"}


class RecordingModel(Model):
    """Calls ``ls`` first, then answers; keeps each call's instructions and input items as given."""

    def __init__(self):
        self.calls: list[tuple[str | None, list[dict[str, Any]]]] = []

    async def get_response(
        self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **kwargs
    ):
        self.calls.append((system_instructions, [item(x) for x in input]))
        if len(self.calls) == 1:
            output: list[Any] = [
                ResponseFunctionToolCall(type="function_call", call_id="c1", name="ls", arguments="{}", id="fc1")
            ]
        else:
            text = ResponseOutputText(text=FINAL_ANSWER, type="output_text", annotations=[])
            output = [
                ResponseOutputMessage(id="m2", type="message", role="assistant", status="completed", content=[text])
            ]
        return ModelResponse(
            output=output, usage=Usage(requests=1, input_tokens=50, output_tokens=5, total_tokens=55), response_id=None
        )

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def test_every_model_call_gets_the_items_and_instructions_as_given(make_compactor):
    """The SDK converts its items on every call; from the second call on, an image part of the
    user's message and the agent's instructions still reach the model as they were given."""

    async def ls(ctx, args):
        return "a.txt b.txt"

    tool = FunctionTool(
        name="ls", description="ls", params_json_schema={"type": "object", "properties": {}}, on_invoke_tool=ls
    )
    user = {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "What is in this picture?"},
            {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"},
        ],
    }
    compactor = make_compactor(context_window=100_000)
    model = RecordingModel()
    agent = Agent(name="a", instructions="You are helpful.", model=model, tools=[tool])
    run_filter = call_model_input_filter(compactor, session_id="images")
    config = RunConfig(call_model_input_filter=run_filter, tracing_disabled=True)
    asyncio.run(Runner.run(agent, [user], run_config=config, hooks=run_filter.hooks))
    assert len(model.calls) == 2
    for instructions, items in model.calls:
        assert instructions == "You are helpful." and items[0] == user
    assert [x.get("type") for x in model.calls[1][1][1:]] == ["function_call", "function_call_output"]


class AnsweringModel(Model):
    """Answers at once; keeps each call's input items as given."""

    def __init__(self):
        self.inputs: list[list[dict[str, Any]]] = []

    async def get_response(
        self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **kwargs
    ):
        self.inputs.append([item(x) for x in input])
        text = ResponseOutputText(text=FINAL_ANSWER, type="output_text", annotations=[])
        output = [ResponseOutputMessage(id="m", type="message", role="assistant", status="completed", content=[text])]
        return ModelResponse(
            output=output, usage=Usage(requests=1, input_tokens=50, output_tokens=5, total_tokens=55), response_id=None
        )

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def test_the_output_of_a_hosted_tool_call_never_reaches_the_model_without_its_call(make_compactor):
    """A coding agent's turns call a function and apply a patch at once; the function's output
    comes first, then the patch's. The patch's output must stay with its call: a view that keeps
    the output of a call it summarized away is refused by the Responses API."""

    def words(count: int, seed: int) -> str:
        return " ".join(f"w{(seed * 7919 + i * 31) % 100_000}" for i in range(count))

    items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the bug. " + words(50, 0)}]
    for t in range(8):
        patch = {"type": "update_file", "path": "a.py", "diff": words(40, t)}
        items += [
            {"type": "function_call", "call_id": f"f{t}", "name": "grep", "arguments": "{}"},
            {"type": "apply_patch_call", "call_id": f"p{t}", "status": "completed", "operation": patch},
            {"type": "function_call_output", "call_id": f"f{t}", "output": words(400, t + 100)},
            {"type": "apply_patch_call_output", "call_id": f"p{t}", "status": "completed", "output": "done"},
        ]
    items.append({"role": "user", "content": "Go on."})
    model = AnsweringModel()
    run_filter = call_model_input_filter(make_compactor(context_window=6_000), session_id="patches")
    config = RunConfig(call_model_input_filter=run_filter, tracing_disabled=True)
    result = asyncio.run(Runner.run(Agent(name="a", model=model), items, run_config=config))
    assert result.final_output == FINAL_ANSWER
    (sent,) = model.inputs
    assert len(sent) < len(items)  # compacted
    calls: set[str] = set()
    for x in sent:
        if str(x.get("type")).endswith("_call"):
            calls.add(x["call_id"])
        elif str(x.get("type")).endswith("_call_output"):
            assert x["call_id"] in calls, f"the output of {x['call_id']} is sent without its call"
    outputs = {x["call_id"] for x in sent if str(x.get("type")).endswith("_call_output")}
    assert calls == outputs


def test_a_failing_compactor_never_breaks_the_run(make_compactor):
    store = ListStore()
    compactor = make_compactor(context_window=8_000, extra_plugins=[("list-store", store)])

    class Broken:
        from progressive_compactor.plugin import hookimpl

        @hookimpl(tryfirst=True)
        def estimate_tokens(self, messages):
            raise RuntimeError("tokenizer exploded")

    compactor.pm.register(Broken(), "broken")
    model = ReplayModel(None)
    agent = Agent(name="a", instructions="be brief", model=model)
    config = RunConfig(call_model_input_filter=call_model_input_filter(compactor), tracing_disabled=True)
    result = asyncio.run(Runner.run(agent, "fix the bug", run_config=config))
    assert result.final_output == FINAL_ANSWER
    assert model.requests[0] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "fix the bug"}]
    assert store.records[-1].errors[0].startswith("compaction failed, sent the uncompacted input: RuntimeError")


def test_a_view_the_sdk_could_not_take_is_sent_uncompacted_with_a_record_that_says_so(make_compactor, monkeypatch):
    """Before it sends anything the filter checks the converted input; when that check refuses
    it, the uncompacted input goes, and a record says why (it was only a log line)."""
    import progressive_compactor.integrations.openai_agents as module

    store = ListStore()
    records = []
    compactor = make_compactor(context_window=8_000, extra_plugins=[("list-store", store)])
    monkeypatch.setattr(module, "problems", lambda items: ["item 3: a call output without its call"])
    model = ReplayModel(None)
    agent = Agent(name="a", instructions="be brief", model=model)
    compaction = call_model_input_filter(compactor, on_record=records.append)
    result = asyncio.run(
        Runner.run(
            agent, "fix the bug", run_config=RunConfig(call_model_input_filter=compaction, tracing_disabled=True)
        )
    )
    assert result.final_output == FINAL_ANSWER
    assert model.requests[0] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "fix the bug"}]
    cause = (
        "compaction failed, sent the uncompacted input: the view converted for the OpenAI Agents SDK is invalid: "
        "item 3: a call output without its call"
    )
    assert store.records[-1].errors == (cause,) and records[-1].errors == (cause,)


def test_a_call_id_repeated_in_one_turn_is_answered_once_per_call(make_compactor):
    """A turn that repeats a call id (a model behind an OpenAI-compatible endpoint answering
    ``call_0`` for every call) gets its calls told apart by the compactor (``call_0~2``): the
    second output follows its call to the new id, so the input is sent compacted, not refused."""
    records = []
    calls = [
        {"type": "function_call", "call_id": "call_0", "name": "bash", "arguments": json.dumps({"command": c})}
        for c in ("ls", "pwd")
    ]
    outputs = [{"type": "function_call_output", "call_id": "call_0", "output": text} for text in ("a.py", "/work")]
    items = [{"role": "user", "content": "list the files"}, *calls, *outputs, {"role": "user", "content": "go on"}]
    model = AnsweringModel()
    agent = Agent(name="a", instructions="be brief", model=model)
    compaction = call_model_input_filter(make_compactor(context_window=100_000), on_record=records.append)
    asyncio.run(
        Runner.run(agent, items, run_config=RunConfig(call_model_input_filter=compaction, tracing_disabled=True))
    )
    assert [r.errors for r in records] == [()]
    sent = model.inputs[0]
    assert item_problems(sent) == []
    assert [(x["call_id"], x["output"]) for x in sent if x.get("type") == "function_call_output"] == [
        ("call_0", "a.py"),
        ("call_0~2", "/work"),
    ]


def test_a_view_that_cannot_fit_raises_a_clear_error(make_compactor):
    class KeepsEverything:
        from progressive_compactor.plugin import hookimpl

        @hookimpl(tryfirst=True)
        def fallback_compact(self, messages):
            return list(messages)

    compactor = make_compactor(context_window=1_000)
    compactor.pm.register(KeepsEverything(), "keeps-everything")
    model = ReplayModel(None)
    agent = Agent(name="a", model=model)
    config = RunConfig(call_model_input_filter=call_model_input_filter(compactor), tracing_disabled=True)
    with pytest.raises(ContextWindowExceededError, match="over the context window of 1000"):
        asyncio.run(Runner.run(agent, "x" * 20_000, run_config=config))
    assert model.requests == []


def test_usage_anchors_the_session(make_compactor):
    from progressive_compactor.testing import build_history

    records = []
    compactor = make_compactor(context_window=16_000)
    model = ReplayModel(None, usage_factor=1.3)
    compaction = call_model_input_filter(compactor, on_record=records.append, session_id="u")
    agent = Agent(name="a", instructions="You are a careful coding agent.", model=model)
    config = RunConfig(call_model_input_filter=compaction, tracing_disabled=True)
    items = [x for m in build_history([3000] * 12, system=None) for x in items_of(m)]
    first = asyncio.run(
        Runner.run(agent, [*items, {"role": "user", "content": "go on"}], run_config=config, hooks=compaction.hooks)
    )
    asyncio.run(
        Runner.run(
            agent,
            [*first.to_input_list(), {"role": "user", "content": "and now?"}],
            run_config=config,
            hooks=compaction.hooks,
        )
    )
    assert (records[0].token_correction, records[0].token_offset) == (1.0, 0)
    assert records[-1].token_correction > 1.1 and records[-1].token_offset > 0  # one report: part offset, part scale
    assert records[-1].tier is not CompactionTier.NONE
    assert json.dumps([r.session_id for r in records]) == json.dumps(["u", "u"])


def test_concurrent_runs_of_two_sessions_anchor_each_its_own(make_compactor):
    """One filter serving two sessions in runs that overlap: each provider's count anchors its
    own session (the second run's answer comes first)."""

    class Delayed(ReplayModel):
        def __init__(self, usage_factor: float, delay: float):
            super().__init__(None, usage_factor)
            self.delay = delay

        async def get_response(self, *args, **kwargs):
            await asyncio.sleep(self.delay)
            return await super().get_response(*args, **kwargs)

    records = []
    compactor = make_compactor(context_window=100_000)
    compaction = call_model_input_filter(compactor, session_id=lambda data: data.context, on_record=records.append)
    config = RunConfig(call_model_input_filter=compaction, tracing_disabled=True)

    async def both():
        slow = Agent(name="a", instructions="x", model=Delayed(usage_factor=3.0, delay=0.2))
        fast = Agent(name="b", instructions="x", model=Delayed(usage_factor=1.0, delay=0.0))
        first = asyncio.create_task(
            Runner.run(slow, "hello " * 200, context="A", run_config=config, hooks=compaction.hooks)
        )
        await asyncio.sleep(0.05)
        await Runner.run(fast, "hello " * 200, context="B", run_config=config, hooks=compaction.hooks)
        await first

    asyncio.run(both())
    assert sorted(r.session_id for r in records) == ["A", "B"]
    later = {sid: compactor.compact_with_record([{"role": "user", "content": "x"}], sid)[1] for sid in "AB"}
    # A's one report counted three times the estimate of its small view: taken for an offset
    assert later["A"].token_offset > 0
    assert (later["B"].token_correction, later["B"].token_offset) == (1.0, 0)


def test_the_read_tool_reads_the_runs_own_results(make_compactor):
    """Another session's handle, which a model (or a prompt injection) may write, reads nothing."""
    compactor = make_compactor(context_window=100_000)
    for owner in ("alice", "s1"):
        message = {"role": "tool", "tool_call_id": "call_1", "content": f"{owner} payroll\n" + "row\n" * 4000}
        compactor.offload_tool_result(message, owner)

    class Reader(RecordingModel):
        async def get_response(self, system_instructions, input, *args, **kwargs):
            if self.calls:
                return await super().get_response(system_instructions, input, *args, **kwargs)
            self.calls.append((system_instructions, [item(x) for x in input]))
            reads = [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"r{i}",
                    name="read_tool_result",
                    arguments=json.dumps({"handle": f"{owner}/call_1", "end_line": 1}),
                    id=f"f{i}",
                )
                for i, owner in enumerate(("alice", "s1"))
            ]
            usage = Usage(requests=1, input_tokens=50, output_tokens=5, total_tokens=55)
            return ModelResponse(output=reads, usage=usage, response_id=None)

    model = Reader()
    agent = Agent(name="a", instructions="x", model=model, tools=[read_tool_result_tool(compactor)])
    run_filter = call_model_input_filter(compactor, session_id="s1")
    asyncio.run(
        Runner.run(agent, "hi", run_config=RunConfig(call_model_input_filter=run_filter, tracing_disabled=True))
    )
    answers = {x["call_id"]: x["output"] for x in model.calls[1][1] if x.get("type") == "function_call_output"}
    assert answers == {
        "r0": "error: the handle 'alice/call_1' does not name a result of this session",
        "r1": "s1 payroll",
    }


def test_the_example_runs_offline():
    run_example_offline("openai_agents_agent.py")


def test_the_compaction_role_is_checked_and_applied_and_a_function_may_name_sessions(tmp_path):
    compactor = ProgressiveCompactor("default", data_dir=str(tmp_path))
    with pytest.raises(ValueError, match="compaction_role must be 'user' or 'system', got 'human'"):
        call_model_input_filter(compactor, compaction_role="human")
    compaction = {"role": "user", "content": COMPACTION_MARKER + "\nsummary"}
    assert from_view([compaction], set(), "system")[0] == [{**compaction, "role": "system"}]
    assert from_view([compaction], set())[0] == [compaction]
    named = call_model_input_filter(compactor, session_id=lambda data: f"ticket-{data}")
    assert named.session_of(7) == "ticket-7"
    assert call_model_input_filter(compactor).session_of(7) == compactor.session_id


def test_the_pinned_request_keeps_its_image(make_compactor):
    """The default config pins the user's request once a summary covers it: the request the model
    gets is still the user's own item, its image included, not its text alone."""
    from progressive_compactor.testing import build_history

    records: list[Any] = []
    compactor = make_compactor("default", context_window=16_000)
    model = AnsweringModel()
    compaction = call_model_input_filter(compactor, on_record=records.append, session_id="u")
    agent = Agent(name="a", instructions="You are a careful coding agent.", model=model)
    user = {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Fix the parser bug in this screenshot."},
            {"type": "input_image", "image_url": "https://example.com/bug.png", "detail": "auto"},
        ],
    }
    items = [x for m in build_history([3000] * 14, system=None)[1:] for x in items_of(m)]
    config = RunConfig(call_model_input_filter=compaction, tracing_disabled=True)
    asyncio.run(Runner.run(agent, [user, *items, {"role": "user", "content": "go on"}], run_config=config))
    assert records[-1].tier is not CompactionTier.NONE
    assert model.inputs[-1][0] == user


def test_an_offloaded_tool_output_keeps_the_images_the_tool_returned(make_compactor):
    """Warn offloads the text of a function's output; the screenshot it returned beside the text,
    which the offload does not store, still reaches the model."""
    from agents import ToolOutputImage, ToolOutputText

    image = {"type": "input_image", "image_url": "https://example.com/page.png"}

    async def page(ctx, args):
        n = json.loads(args)["n"]
        return [
            ToolOutputText(text=f"page {n}\n" + "line of the page\n" * 800),
            ToolOutputImage(image_url=image["image_url"]),
        ]

    tool = FunctionTool(
        name="page",
        description="A page: its text and a screenshot.",
        params_json_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
        on_invoke_tool=page,
    )

    class Pager(AnsweringModel):
        async def get_response(self, system_instructions, input, *args, **kwargs):
            n = len(self.inputs) + 1
            if n > 5:
                return await super().get_response(system_instructions, input, *args, **kwargs)
            self.inputs.append([item(x) for x in input])
            call = ResponseFunctionToolCall(
                type="function_call", call_id=f"p{n}", name="page", arguments=json.dumps({"n": n}), id=f"f{n}"
            )
            usage = Usage(requests=1, input_tokens=0, output_tokens=5, total_tokens=5)
            return ModelResponse(output=[call], usage=usage, response_id=None)

    records: list[Any] = []
    compactor = make_compactor(context_window=32_000)
    model = Pager()
    compaction = call_model_input_filter(compactor, on_record=records.append, session_id="u")
    agent = Agent(name="a", instructions="Read what you are asked to.", model=model, tools=[tool])
    config = RunConfig(call_model_input_filter=compaction, tracing_disabled=True)
    asyncio.run(Runner.run(agent, "read the pages", run_config=config))
    outputs = [x["output"] for x in model.inputs[-1] if x.get("type") == "function_call_output"]
    assert len(outputs) == 5 and any("Tool result offloaded" in json.dumps(o) for o in outputs)
    assert all(isinstance(o, list) and image in o for o in outputs), outputs


def test_the_images_a_function_returned_are_counted():
    """A function's output of text and a screenshot sends both: the screenshot counts as an
    image, as a prompt's does, not as nothing."""
    from progressive_compactor.messages import IMAGE_CHARS, char_count, message_from_dict

    image = {"type": "input_image", "image_url": "https://example.com/page.png"}
    text = {"type": "input_text", "text": "page 1"}
    items = [
        {"role": "user", "content": "read the page"},
        {"type": "function_call", "call_id": "p1", "name": "page", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "p1", "output": [text, image]},
    ]
    result = to_dicts(items)[-1]
    assert result["role"] == "tool"
    assert char_count(message_from_dict(result)) == len("page 1") + IMAGE_CHARS
    plain = to_dicts([*items[:2], {**items[2], "output": [text]}])[-1]
    assert plain["content"] == "page 1"  # text alone stays a string


def test_a_hosted_tools_items_are_counted():
    """A hosted tool's items go back to the model with every request: an MCP server's output, a
    shell's, count as their text; a screenshot or a generated image as one image, whatever the size
    of its data; reasoning as its summary; ids count nothing."""
    from progressive_compactor.messages import IMAGE_CHARS, char_count, message_from_dict

    output = "row of the table " * 500
    items = [
        {"role": "user", "content": "what is in the table?"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking " * 400}]},
        {"type": "mcp_call", "id": "mcp_1", "server_label": "db", "name": "query", "arguments": "{}", "output": output},
        {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "iVBORw0KGgo" * 100_000},
    ]
    (_, turn) = to_dicts(items)
    counted = char_count(message_from_dict(turn))
    thought = len("thinking " * 400)
    assert len(output) + IMAGE_CHARS + thought <= counted < len(output) + IMAGE_CHARS + thought + 100
    shell = [
        {"role": "user", "content": "run the tests"},
        {
            "type": "local_shell_call",
            "id": "ls_1",
            "call_id": "s1",
            "status": "completed",
            "action": {"command": ["pytest"]},
        },
        {"type": "local_shell_call_output", "id": "ls_2", "call_id": "s1", "output": "FAILED test_x\n" * 300},
    ]
    (_, turn) = to_dicts(shell)
    assert char_count(message_from_dict(turn)) >= len("FAILED test_x\n") * 300


def test_a_hosted_mcp_calls_output_makes_the_view_compact_in_time(make_compactor):
    """The Agents SDK's own loop with MCP outputs in its input: the compactor sees their size."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Summarise the tables."}]
    for t in range(4):
        items.append(
            {
                "type": "mcp_call",
                "id": f"mcp_{t}",
                "server_label": "db",
                "name": "query",
                "arguments": "{}",
                "output": f"table {t} row " * 1000,
            }
        )
        items.append({"role": "user", "content": f"and table {t + 1}?"})
    records: list[Any] = []
    model = AnsweringModel()
    run_filter = call_model_input_filter(
        make_compactor(context_window=16_000), session_id="mcp", on_record=records.append
    )
    config = RunConfig(call_model_input_filter=run_filter, tracing_disabled=True)
    result = asyncio.run(Runner.run(Agent(name="a", model=model), items, run_config=config))
    assert result.final_output == FINAL_ANSWER
    assert records[0].tokens_before >= 4 * len("table 0 row " * 1000) // 4
    assert records[0].tier is not CompactionTier.NONE


def test_the_reasoning_a_view_sends_is_counted(make_compactor):
    """Every reasoning item the input sends back is counted (its summary and its encrypted
    content), whatever the turn: newer models keep an earlier turn's reasoning in context, and every
    model reads that of the current tool loop."""

    def reasoning(n: int) -> dict[str, Any]:
        summary = [{"type": "summary_text", "text": f"Step {n}: " + "weigh the options. " * 400}]
        return {"type": "reasoning", "id": f"rs_{n}", "summary": summary, "encrypted_content": "ZW5j" * 1000}

    items: list[dict[str, Any]] = [
        {"role": "user", "content": "Where is the bug?"},
        reasoning(1),
        {"role": "assistant", "content": "In the lexer."},
        {"role": "user", "content": "Fix it."},
        reasoning(2),
        {"type": "function_call", "call_id": "f1", "name": "patch", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "f1", "output": "patched"},
    ]
    records: list[Any] = []
    model = AnsweringModel()
    run_filter = call_model_input_filter(
        make_compactor(context_window=100_000), session_id="reasoning", on_record=records.append
    )
    config = RunConfig(call_model_input_filter=run_filter, tracing_disabled=True)
    asyncio.run(Runner.run(Agent(name="a", model=model), items, run_config=config))
    (sent,) = model.inputs
    assert [x.get("id") for x in sent if x.get("type") == "reasoning"] == ["rs_1", "rs_2"]
    chars = sum(
        len(x["summary"][0]["text"]) + len(x["encrypted_content"]) for x in sent if x.get("type") == "reasoning"
    )
    assert records[0].tier is CompactionTier.NONE and records[0].tokens_after >= chars // 4
