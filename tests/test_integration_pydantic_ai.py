"""Pydantic AI: an ``Agent`` with the compacting history processor, its own agent loop, a
``FunctionModel`` replaying corpus sessions and tools returning the recorded results.

On Pydantic AI 2.x the processor goes in as a ``ProcessHistory`` capability; on 1.x as
``history_processors=[...]``. The tests run with whichever major is installed.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest

pydantic_ai = pytest.importorskip("pydantic_ai", reason="the [pydantic-ai] extra is not installed")

from pydantic_ai import Agent, RunContext, capture_run_messages  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.usage import RequestUsage  # noqa: E402

from integration_replay import (  # noqa: E402
    FINAL_ANSWER,
    RESUME,
    SESSIONS,
    WINDOWS,
    Script,
    ToolCrashed,
    assert_tiers,
    run_example_offline,
)
from progressive_compactor import CompactionTier, ProgressiveCompactor  # noqa: E402
from progressive_compactor.anchors import COMPACTION_MARKER  # noqa: E402
from progressive_compactor.integrations.pydantic_ai import (  # noqa: E402
    ContextWindowExceededError,
    async_history_processor,
    capability,
    from_view,
    history_processor,
    problems,
    read_tool_result_tool,
    to_dicts,
)
from progressive_compactor.testing import ListStore  # noqa: E402
from timeouts import forked_while_held  # noqa: E402

pytestmark = pytest.mark.corpus
MAJOR = int(pydantic_ai.__version__.split(".")[0])


def agent_with(model, processor, **kwargs) -> Agent:
    if MAJOR >= 2:
        from pydantic_ai.capabilities import ProcessHistory

        return Agent(model, capabilities=[ProcessHistory(processor)], **kwargs)
    return Agent(model, history_processors=[processor], **kwargs)


def tool_rounds(count: int) -> list[Any]:
    """``count`` rounds of a bash call and its 3,000-character result, as Pydantic AI messages."""
    from progressive_compactor.testing import build_history

    rounds: list[Any] = []
    for m in build_history([3000] * count, system=None)[1:]:
        if m["role"] == "assistant":
            c = m["tool_calls"][0]
            rounds.append(ModelResponse(parts=[ToolCallPart("bash", c["function"]["arguments"], tool_call_id=c["id"])]))
        else:
            rounds.append(ModelRequest(parts=[ToolReturnPart("bash", m["content"], tool_call_id=m["tool_call_id"])]))
    return rounds


def text_of(part) -> str:
    if isinstance(part, (SystemPromptPart, TextPart)):
        return part.content
    if isinstance(part, UserPromptPart):
        return part.content if isinstance(part.content, str) else " ".join(str(c) for c in part.content)
    if isinstance(part, ToolReturnPart):
        return part.model_response_str()
    if isinstance(part, RetryPromptPart) or type(part).__name__ == "RetryFeedbackPart":
        return part.model_response()
    if isinstance(part, ToolCallPart):
        return part.tool_name + part.args_as_json_str()
    return ""


def check(messages, info: AgentInfo, window: int, request: str, where: str) -> None:
    """What a provider needs of the messages, checked on Pydantic AI's own structures: each tool
    call answered in the next request, no return without its call, inside the window (characters
    ÷ 4, instructions included), the first user request in one part."""
    pending: set[str] = set()
    for i, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            assert not pending, f"{where}: calls {pending} unanswered before message {i}"
            pending = {p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)}
        else:
            answers = {
                p.tool_call_id
                for p in message.parts
                if isinstance(p, (ToolReturnPart, RetryPromptPart)) and p.tool_name
            }
            assert answers == pending, f"{where}: message {i} answers {answers}, the calls were {pending}"
            pending = set()
    assert isinstance(messages[-1], ModelRequest), where
    texts = [text_of(p) for m in messages for p in m.parts]
    chars = sum(len(t) for t in texts) + len(info.instructions or "")
    assert chars / 4 <= window, f"{where}: about {chars // 4} tokens in a window of {window}"
    parts = [p for p in request.split("\n[... ") if p][:1]
    assert any(all(p[:2000] in t for p in parts) for t in texts), f"{where}: the first user request is missing"


class Replayer:
    """The FunctionModel's function: the next recorded assistant message, every request kept."""

    __name__ = "replayer"  # FunctionModel names its model after the function

    def __init__(self, script: Script | None, window: int, usage_factor: float = 1.0):
        self.script = script
        self.window = window
        self.usage_factor = usage_factor
        self.requests: list[list[Any]] = []
        self.infos: list[AgentInfo] = []

    def __call__(self, messages, info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        self.infos.append(info)
        chars = sum(len(text_of(p)) for m in messages for p in m.parts)
        usage = RequestUsage(input_tokens=round(self.usage_factor * chars / 4), output_tokens=10)
        turn = self.script.next_turn() if self.script is not None else None
        if turn is None:
            return ModelResponse(parts=[TextPart(FINAL_ANSWER)], usage=usage)
        parts: list[Any] = [TextPart(turn["content"])] if turn.get("content") else []
        parts += [
            ToolCallPart(tool_name=c["function"]["name"], args=c["function"]["arguments"], tool_call_id=c["id"])
            for c in turn.get("tool_calls") or []
        ]
        return ModelResponse(parts=parts, usage=usage)


def replay(corpus_dir, name, window, make_compactor, *, use_async=False):
    script = Script(corpus_dir, name)
    store = ListStore()
    compactor = make_compactor(context_window=window, extra_plugins=[("list-store", store)])
    replayer = Replayer(script, window)
    make = async_history_processor if use_async else history_processor
    processor = make(compactor, session_id="pai")

    def bash(ctx: RunContext[Any], command: str) -> str:
        """Run a shell command."""
        return script.result(ctx.tool_call_id)

    agent = agent_with(
        FunctionModel(replayer),
        processor,
        system_prompt=script.system or "",
        tools=[bash, read_tool_result_tool(compactor, "pai")],
    )

    from pydantic_ai.usage import UsageLimits

    limits = UsageLimits(request_limit=None)

    def run(prompt, history=None):
        if use_async:
            return asyncio.run(agent.run(prompt, message_history=history, usage_limits=limits))
        return agent.run_sync(prompt, message_history=history, usage_limits=limits)

    if script.unanswered:
        with capture_run_messages() as kept, pytest.raises(ToolCrashed):
            run(script.request)
        calls = [
            p.tool_call_id for m in kept if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)
        ]
        assert script.unanswered[0] in calls
        full = processor.full_history("pai", kept)  # what the agent stores: the whole history up to the crash
        last = next(m for m in reversed(full) if isinstance(m, ModelResponse))
        assert last.parts[-1].tool_call_id == script.unanswered[0]  # the call the crash left unanswered
        # the conversation goes on from the stored history: the dangling call, then a new request
        # (Pydantic AI 1.x refuses a new prompt right after unprocessed calls, so it is a message)
        stored = [m for m in full if not (isinstance(m, ModelRequest) and not m.parts)]
        result = run(None, [*stored, ModelRequest(parts=[UserPromptPart(RESUME)])])
    else:
        result = run(script.request)
    assert result.output == FINAL_ANSWER
    return script, store, replayer, result, processor


@pytest.mark.parametrize("window", WINDOWS, ids=[f"{w // 1000}k" for w in WINDOWS])
@pytest.mark.parametrize("name", SESSIONS)
def test_the_agent_loop_replays_corpus_sessions(corpus_dir, make_compactor, name, window):
    script, store, replayer, result, processor = replay(corpus_dir, name, window, make_compactor)
    assert len(replayer.requests) == len(script.turns) + 1
    assert "read_tool_result" in [t.name for t in replayer.infos[0].function_tools]  # in Pydantic AI's tool form
    for i, (messages, info) in enumerate(zip(replayer.requests, replayer.infos)):
        check(messages, info, window, script.request, f"{name} at {window}, request {i}")
    assert_tiers(store.records, window, len(replayer.requests), script)
    # the processor keeps the whole history whatever the run keeps: every recorded result is in it
    full = processor.full_history("pai", result.all_messages())
    assert full[-1] is result.all_messages()[-1]
    returns = {
        p.tool_call_id: p.content
        for m in full
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }
    assert all(returns[call_id] == text for call_id, text in script.results.items())
    if MAJOR >= 2 and any(r.tier is not CompactionTier.NONE for r in store.records[:-1]):
        # 2.x: the run holds the compacted view, not the history (what the docs say plainly)
        assert len(result.all_messages()) < len(full) + 1
    if script.unanswered:
        resumed = replayer.requests[-1]
        answer = [
            p
            for m in resumed
            if isinstance(m, ModelRequest)
            for p in m.parts
            if getattr(p, "tool_call_id", None) == script.unanswered[0]
        ]
        assert len(answer) == 1


def test_the_async_processor(corpus_dir, make_compactor):
    name = SESSIONS[2]
    script, store, replayer, *_ = replay(corpus_dir, name, 8_000, make_compactor, use_async=True)
    for i, (messages, info) in enumerate(zip(replayer.requests, replayer.infos)):
        check(messages, info, 8_000, script.request, f"async request {i}")
    assert_tiers(store.records, 8_000, len(replayer.requests), script)


def test_parts_convert_both_ways_without_loss():
    call = ToolCallPart(tool_name="bash", args={"command": "ls"}, tool_call_id="c1")
    history = [
        ModelRequest(parts=[SystemPromptPart("sys"), UserPromptPart("fix it")], instructions="be brief"),
        ModelResponse(parts=[TextPart("looking"), call], model_name="m1"),
        ModelRequest(
            parts=[ToolReturnPart(tool_name="bash", content="out " * 50, tool_call_id="c1", metadata={"k": 1})]
        ),
    ]
    dicts = to_dicts(history)
    assert [d["role"] for d in dicts] == ["system", "user", "assistant", "tool"]
    assert json.loads(dicts[2]["tool_calls"][0]["function"]["arguments"]) == {"command": "ls"}
    same = from_view(dicts, {id(d) for d in dicts})
    assert all(a is b for a, b in zip(same, history))
    changed = [*dicts[:3], dict(dicts[3], content="[offloaded] preview")]
    back = from_view(changed, {id(d) for d in dicts[:3]})
    assert back[0] is history[0] and back[1] is history[1]
    part = back[2].parts[0]
    assert (part.tool_name, part.tool_call_id, part.metadata, part.content) == (
        "bash",
        "c1",
        {"k": 1},
        "[offloaded] preview",
    )
    compacted = [dicts[0], {"role": "user", "content": "[Context Compaction]\nsummary"}, *dicts[2:]]
    back = from_view(compacted, {id(d) for d in dicts})
    assert isinstance(back[0].parts[1], UserPromptPart) and back[0].instructions == "be brief"
    back = from_view(compacted, {id(d) for d in dicts}, "system")
    assert isinstance(back[0].parts[1], SystemPromptPart)
    dangling = [
        *dicts[:3],
        {"role": "tool", "tool_call_id": "c1", "content": "[no result]"},
        {"role": "user", "content": "go on"},
    ]
    back = from_view(dangling, {id(d) for d in dicts[:3]})
    assert isinstance(back[2].parts[0], ToolReturnPart) and back[2].parts[0].tool_name == "bash"


def test_a_failing_compactor_never_breaks_the_run(make_compactor):
    store = ListStore()
    compactor = make_compactor(context_window=8_000, extra_plugins=[("list-store", store)])

    class Broken:
        from progressive_compactor.plugin import hookimpl

        @hookimpl(tryfirst=True)
        def load_state(self, session_id):
            raise RuntimeError("state store down")

        @hookimpl(tryfirst=True)
        def estimate_tokens(self, messages):
            raise RuntimeError("tokenizer exploded")

    compactor.pm.register(Broken(), "broken")
    replayer = Replayer(None, 8_000)
    result = agent_with(FunctionModel(replayer), history_processor(compactor)).run_sync("fix the bug")
    assert result.output == FINAL_ANSWER
    assert text_of(replayer.requests[0][-1].parts[-1]) == "fix the bug"
    assert any(e.startswith("compaction failed, sent the uncompacted input") for e in store.records[-1].errors)


def test_a_view_that_cannot_fit_raises_a_clear_error(make_compactor):
    class KeepsEverything:
        from progressive_compactor.plugin import hookimpl

        @hookimpl(tryfirst=True)
        def fallback_compact(self, messages):
            return list(messages)

    compactor = make_compactor(context_window=1_000)
    compactor.pm.register(KeepsEverything(), "keeps-everything")
    replayer = Replayer(None, 1_000)
    with pytest.raises(ContextWindowExceededError, match="over the context window of 1000"):
        agent_with(FunctionModel(replayer), history_processor(compactor)).run_sync("x" * 20_000)
    assert replayer.requests == []


def test_a_call_whose_compaction_was_cancelled_leaves_the_full_history_whole(make_compactor):
    """The run is timed out while the async processor waits for a summary: the processor still
    pairs the full history with the view it last returned, so ``full_history`` of the captured
    messages (the recovery after a failure) has every message once, no tool call twice."""
    from progressive_compactor.plugin import hookimpl

    class Hangs:
        hang = False

        @hookimpl(tryfirst=True)
        def asummarize(self, request):
            async def answer():
                if self.hang:
                    await asyncio.sleep(30)
                return None  # the offline summarizer answers

            return answer()

    hangs = Hangs()
    compactor = make_compactor(context_window=2_000, extra_plugins=[("hangs", hangs)])
    processor = async_history_processor(compactor, session_id="u")
    calls: list[str] = []

    def model(messages, info):
        n = len(calls)
        if n < 12:
            return ModelResponse(parts=[ToolCallPart("bash", {"cmd": f"step {n}"}, tool_call_id=f"c{n}")])
        return ModelResponse(parts=[TextPart(FINAL_ANSWER)])

    agent = agent_with(FunctionModel(model), processor)

    @agent.tool_plain
    def bash(cmd: str) -> str:
        calls.append(cmd)
        hangs.hang = len(calls) >= 6  # the next summary the view needs never comes
        return f"{cmd} output line\n" * 40

    async def main():
        with capture_run_messages() as captured:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(agent.run("fix the bug"), 0.5)
        return captured

    captured = asyncio.run(main())
    assert hangs.hang and len(calls) < 12  # the run was cut off while a summary was awaited
    full = processor.full_history("u", captured)
    ids = [p.tool_call_id for m in full for p in m.parts if isinstance(p, (ToolCallPart, ToolReturnPart))]
    assert ids == [i for n in range(len(calls)) for i in (f"c{n}", f"c{n}")]
    assert problems(full) == []


def test_usage_anchors_the_session(make_compactor):
    from progressive_compactor.testing import build_history

    records = []
    compactor = make_compactor(context_window=16_000)
    replayer = Replayer(None, 16_000, usage_factor=1.3)
    processor = history_processor(compactor, on_record=records.append, session_id="u")
    agent = agent_with(FunctionModel(replayer), processor)
    history: list[Any] = [ModelRequest(parts=[UserPromptPart(build_history([1], system=None)[0]["content"])])]
    history += tool_rounds(12)
    first = agent.run_sync("go on", message_history=history)
    agent.run_sync("and now?", message_history=processor.full_history("u", first.all_messages()))
    assert (records[0].token_correction, records[0].token_offset) == (1.0, 0)
    assert records[-1].token_correction > 1.1 and records[-1].token_offset > 0  # one report: part offset, part scale
    assert records[-1].tier is not CompactionTier.NONE  # 1.3 × the estimate passes the Warn share


def test_a_tool_call_id_repeated_in_one_response_is_answered_once_per_call(make_compactor):
    """A response that repeats a tool call id (some providers answer ``call_0`` for every call)
    gets its calls told apart by the compactor (``call_0~2``): the second return follows its call
    to the new id, so the view is valid and sent compacted (not refused for an unanswered call)."""
    records = []
    seen = []

    def model(messages, info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart(FINAL_ANSWER)])

    calls = [ToolCallPart("bash", {"command": c}, tool_call_id="call_0") for c in ("ls", "pwd")]
    returns = [ToolReturnPart("bash", text, tool_call_id="call_0") for text in ("a.py", "/work")]
    history = [
        ModelRequest(parts=[UserPromptPart("list the files")]),
        ModelResponse(parts=calls),
        ModelRequest(parts=returns),
        ModelResponse(parts=[TextPart("Listed.")]),
    ]
    processor = history_processor(make_compactor(context_window=100_000), session_id="u", on_record=records.append)
    agent_with(FunctionModel(model), processor).run_sync("go on", message_history=history)
    assert [r.errors for r in records] == [()]
    assert problems(seen[0]) == []
    answers = [(p.tool_call_id, p.content) for p in seen[0][2].parts]
    assert answers == [("call_0", "a.py"), ("call_0~2", "/work")]


def test_a_finished_conversation_is_forgotten_and_its_next_run_starts_anew(make_compactor):
    compactor = make_compactor(context_window=16_000)
    processor = history_processor(compactor, session_id="u")
    agent = agent_with(FunctionModel(Replayer(None, 16_000)), processor)
    first = agent.run_sync("hello")
    assert len(processor.full_history("u")) == len(first.all_messages()) - 1  # up to the last request
    processor.forget("u")
    assert processor.state._sessions == {} and processor.full_history("u") == []
    again = agent.run_sync("hello again", message_history=first.all_messages())
    assert processor.full_history("u", again.all_messages()) == again.all_messages()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_worker_forked_while_a_thread_takes_a_session_runs(make_compactor):
    """Forked while another thread's run takes or drops its session (holding the processor's lock
    for an instant): the child's runs go on."""
    compactor = make_compactor(context_window=16_000)
    processor = history_processor(compactor, session_id="u")
    agent = agent_with(FunctionModel(Replayer(None, 16_000)), processor)

    def child_run() -> bool:
        result = agent.run_sync("hello")
        return len(processor.full_history("u")) == len(result.all_messages()) - 1

    assert forked_while_held(processor.state._lock, child_run) is True


def has_capabilities() -> bool:
    try:
        from pydantic_ai.capabilities import ProcessHistory  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not has_capabilities(), reason="this Pydantic AI has no ProcessHistory capability (early 1.x)")
def test_the_capability_helper(make_compactor):
    compactor = make_compactor(context_window=100_000)
    replayer = Replayer(None, 100_000)
    result = Agent(FunctionModel(replayer), capabilities=[capability(compactor)]).run_sync("hello")
    assert result.output == FINAL_ANSWER


@pytest.mark.parametrize("session_id", ["s1", lambda ctx: ctx.deps["user"]], ids=["string", "function"])
def test_the_read_tool_reads_the_sessions_own_results(make_compactor, session_id):
    """Another session's handle, which a model (or a prompt injection) may write, reads nothing."""
    compactor = make_compactor(context_window=100_000)
    answers: dict[str, Any] = {}
    reader = payroll_reader(compactor, ("alice", "s1"), answers)
    processor = history_processor(compactor, session_id=session_id)
    tool = read_tool_result_tool(compactor, session_id=session_id)
    agent_with(FunctionModel(reader), processor, tools=[tool], deps_type=dict).run_sync("hi", deps={"user": "s1"})
    assert answers == {
        "alice": "error: the handle 'alice/call_1' does not name a result of this session",
        "s1": "s1 payroll",
    }


def payroll_reader(compactor: ProgressiveCompactor, owners: tuple[str, ...], answers: dict[str, Any]) -> Any:
    """Offloads a payroll result of each owner's session; the model function that then reads
    every owner's handle (one tool call each, named by the owner) and puts the answers in ``answers``."""
    for owner in owners:
        message = {"role": "tool", "tool_call_id": "call_1", "content": f"{owner} payroll\n" + "row\n" * 4000}
        compactor.offload_tool_result(message, owner)

    def reader(messages: list, info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("read_tool_result", {"handle": f"{owner}/call_1", "end_line": 1}, tool_call_id=owner)
                    for owner in owners
                ]
            )
        answers.update((p.tool_call_id, p.content) for m in messages for p in m.parts if isinstance(p, ToolReturnPart))
        return ModelResponse(parts=[TextPart(FINAL_ANSWER)])

    return reader


def test_the_example_runs_offline():
    run_example_offline("pydantic_ai_agent.py")


def test_the_compaction_role_is_checked_and_applied(tmp_path):
    compactor = ProgressiveCompactor("default", data_dir=str(tmp_path))
    with pytest.raises(ValueError, match="compaction_role must be 'user' or 'system', got 'human'"):
        history_processor(compactor, compaction_role="human")
    compaction = {"role": "user", "content": COMPACTION_MARKER + "\nsummary"}
    (request,) = from_view([compaction], set(), "system")
    assert [type(p).__name__ for p in request.parts] == ["SystemPromptPart"]
    (request,) = from_view([compaction], set())
    assert [type(p).__name__ for p in request.parts] == ["UserPromptPart"]


@pytest.mark.skipif(MAJOR < 2, reason="Pydantic AI 1.x has no conversation_id")
def test_the_read_tool_given_no_session_reads_the_conversations_own_results(make_compactor):
    """Conversations named by the run's ``conversation_id`` (the default): the read tool given no
    session reads the results of the conversation its model serves, never another's."""
    compactor = make_compactor(context_window=100_000)
    answers: dict[str, Any] = {}
    reader = payroll_reader(compactor, ("alice", "bob"), answers)
    agent = agent_with(FunctionModel(reader), history_processor(compactor), tools=[read_tool_result_tool(compactor)])
    agent.run_sync("hi", conversation_id="bob")
    assert answers == {
        "alice": "error: the handle 'alice/call_1' does not name a result of this session",
        "bob": "bob payroll",
    }


def test_the_pinned_request_keeps_its_image(make_compactor):
    """The default config pins the user's request once a summary covers it: the request the model
    gets is still the user's own, its screenshot included, not its text alone."""
    from pydantic_ai import BinaryContent

    records: list[Any] = []
    compactor = make_compactor("default", context_window=16_000)
    replayer = Replayer(None, 16_000)
    processor = history_processor(compactor, session_id="u", on_record=records.append)
    image = BinaryContent(data=b"\x89PNG" + bytes(40), media_type="image/png")
    history: list[Any] = [ModelRequest(parts=[UserPromptPart(["Fix the parser bug in this screenshot.", image])])]
    history += tool_rounds(14)
    agent_with(FunctionModel(replayer), processor).run_sync("go on", message_history=history)
    assert records[-1].tier is not CompactionTier.NONE
    first = replayer.requests[-1][0].parts[0]
    assert isinstance(first, UserPromptPart) and first is not history[0].parts[0]  # the pinned copy
    assert first.content == ["Fix the parser bug in this screenshot.", image]


@pytest.mark.skipif(MAJOR < 2, reason="Pydantic AI 1.x moves a tool's files to a user prompt of their own")
def test_an_offloaded_tool_result_keeps_the_images_the_tool_returned(make_compactor):
    """Warn offloads the text of a tool's return; the screenshot it returned beside the text, which
    the offload does not store, still reaches the model."""
    from pydantic_ai import BinaryContent

    records: list[Any] = []
    image = BinaryContent(data=b"\x89PNG" + bytes(40), media_type="image/png")
    compactor = make_compactor(context_window=24_000)
    requests: list[Any] = []

    def model(messages: list, info: AgentInfo) -> ModelResponse:
        requests.append(list(messages))
        if len(requests) <= 5:
            return ModelResponse(parts=[ToolCallPart("page", {"n": len(requests)}, tool_call_id=f"p{len(requests)}")])
        return ModelResponse(parts=[TextPart(FINAL_ANSWER)])

    def page(n: int) -> list[Any]:
        """A page: its text and a screenshot."""
        return [f"page {n}\n" + "line of the page\n" * 800, image]

    processor = history_processor(compactor, session_id="u", on_record=records.append)
    agent_with(FunctionModel(model), processor, tools=[page]).run_sync("read the pages")
    assert CompactionTier.WARN in [r.tier for r in records]
    returns = [p for m in requests[-1] for p in m.parts if isinstance(p, ToolReturnPart)]
    offloaded = [p for p in returns if "Tool result offloaded" in p.model_response_str()]
    assert offloaded and len(returns) == 5
    assert all(p.files == [image] for p in returns)


def test_the_images_of_a_user_prompt_are_counted(make_compactor):
    """Each image of a prompt counts as an image (some 750 tokens), as in the other
    integrations, not as nothing."""
    from pydantic_ai import BinaryContent, ImageUrl

    records: list[Any] = []
    compactor = make_compactor(context_window=100_000)
    processor = history_processor(compactor, session_id="u", on_record=records.append)
    images = [ImageUrl(f"https://example.com/{i}.png") for i in range(5)]
    images += [BinaryContent(data=b"\x89PNG" + bytes(40), media_type="image/png") for _ in range(5)]
    agent_with(FunctionModel(Replayer(None, 100_000)), processor).run_sync(["What changed between these?", *images])
    assert records[0].tokens_before >= 10 * 700


def test_several_system_prompts_stay_system_prompts(make_compactor):
    """An agent with several system prompts (a static one and a decorated one, say) gets each
    back as the system prompt it is, the very part, never made a user message; across a
    compaction too."""

    records: list[Any] = []
    compactor = make_compactor("default", context_window=16_000)
    replayer = Replayer(None, 16_000)
    processor = history_processor(compactor, session_id="u", on_record=records.append)
    agent = agent_with(FunctionModel(replayer), processor, system_prompt=("You are a careful bot.", "Be terse."))
    first = agent.run_sync("hello")
    history = first.all_messages()
    history += tool_rounds(14)
    agent.run_sync("go on", message_history=history)
    assert records[0].tier is CompactionTier.NONE and records[-1].tier is not CompactionTier.NONE
    assert all(r.repaired_tool_pairs == 0 for r in records)
    for request in (replayer.requests[0], replayer.requests[-1]):
        system = request[0].parts[:2]
        assert system[0] is history[0].parts[0] and system[1] is history[0].parts[1]
        assert not any("[System message]" in text_of(p) for m in request for p in m.parts)


@pytest.mark.parametrize("system_prompt", [(), ("You are a careful bot.",), ("You are a careful bot.", "Be terse.")])
def test_the_agents_instructions_are_counted_and_sent_once(make_compactor, system_prompt):
    """Pydantic AI sends an agent's ``instructions`` with every request (no message part holds
    them): the compactor counts them, as a system prompt, and leaves them to Pydantic AI, with
    the agent's system prompts, if any, handed back as they were."""
    instructions = "Answer in the house style, citing the ticket. " * 200  # some 2,300 tokens
    records: dict[str, list[Any]] = {"with": [], "without": []}
    replayers = {}
    for name in records:
        compactor = make_compactor(context_window=100_000)
        replayers[name] = Replayer(None, 100_000)
        processor = history_processor(compactor, session_id="u", on_record=records[name].append)
        extra = {"instructions": instructions} if name == "with" else {}
        agent_with(FunctionModel(replayers[name]), processor, system_prompt=system_prompt, **extra).run_sync("hello")
    assert records["with"][0].tokens_before > records["without"][0].tokens_before + 2_000
    assert records["with"][0].repaired_tool_pairs == 0
    assert replayers["with"].infos[-1].instructions == instructions.strip()
    request = replayers["with"].requests[-1]
    assert not any(instructions.strip() in text_of(p) for m in request for p in m.parts)
    assert [p.content for p in request[0].parts if isinstance(p, SystemPromptPart)] == list(system_prompt)


def test_system_prompts_too_long_for_the_window_are_cut_as_one(make_compactor):
    """The fallback cuts a system message over its budget; several system prompts are cut as the
    one system message they are while compacting, and reach the model as one system prompt."""
    from progressive_compactor.plugins.fallback_token_budget import MARKER

    records: list[Any] = []
    compactor = make_compactor(context_window=8_000)
    replayer = Replayer(None, 8_000)
    processor = history_processor(compactor, session_id="u", on_record=records.append)
    prompts = ("You are a careful bot. " * 1200, "Be terse. " * 2500)
    agent_with(FunctionModel(replayer), processor, system_prompt=prompts).run_sync("hello")
    assert records[-1].tier is CompactionTier.EMERGENCY
    request = replayer.requests[-1]
    system = [p for m in request for p in m.parts if isinstance(p, SystemPromptPart)]
    assert len(system) == 1 and MARKER.strip() in system[0].content
    assert system[0].content.startswith("You are a careful bot.") and system[0].content.rstrip().endswith("Be terse.")
    assert not any("[System message]" in text_of(p) for m in request for p in m.parts)


@pytest.mark.skipif(MAJOR < 2, reason="Pydantic AI 1.x moves a tool's files to a user prompt of their own")
def test_the_files_a_tool_returned_are_counted():
    """A tool's return of text and a screenshot sends both (2.x keeps the screenshot on the
    return): it counts as an image, as a prompt's does, not as nothing."""
    from pydantic_ai import BinaryContent

    from progressive_compactor.messages import IMAGE_CHARS, char_count, message_from_dict

    image = BinaryContent(data=b"\x89PNG" + bytes(40), media_type="image/png")

    def model(messages: list, info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("page", {"n": 1}, tool_call_id="p1")])
        return ModelResponse(parts=[TextPart(FINAL_ANSWER)])

    def page(n: int) -> list[Any]:
        """A page: its text and a screenshot."""
        return [f"page {n}", image]

    result = Agent(FunctionModel(model), tools=[page]).run_sync("read the page")
    (returned,) = [d for d in to_dicts(result.all_messages()) if d["role"] == "tool"]
    assert char_count(message_from_dict(returned)) >= IMAGE_CHARS + len("page 1")


@pytest.mark.skipif(MAJOR < 2, reason="RetryFeedbackPart is new in Pydantic AI 2.x")
def test_retry_feedback_the_fallback_cut_stays_the_frameworks_feedback(make_compactor):
    """An output validator rejects an answer with a message too long for the window: the
    truncation cuts the feedback, which must still reach the model as Pydantic AI's own feedback
    (a ``RetryFeedbackPart``, fenced as the application's words), not as text the user wrote."""
    from pydantic_ai import ModelRetry
    from pydantic_ai.messages import RetryFeedbackPart

    from progressive_compactor.plugins.fallback_token_budget import MARKER

    records: list[Any] = []
    compactor = make_compactor(context_window=8_000)
    answers = iter(["draft", FINAL_ANSWER])

    def model(messages: list, info: AgentInfo) -> ModelResponse:
        replayer.requests.append(list(messages))
        return ModelResponse(parts=[TextPart(next(answers))])

    replayer = Replayer(None, 8_000)
    agent = agent_with(FunctionModel(model), history_processor(compactor, session_id="u", on_record=records.append))

    @agent.output_validator
    def check_output(output: str) -> str:
        if output == "draft":
            raise ModelRetry("The draft fails these checks:\n" + "check failed: line too long\n" * 3000)
        return output

    result = agent.run_sync("write the report")
    assert result.output == FINAL_ANSWER and records[-1].tier is CompactionTier.EMERGENCY
    (feedback,) = [p for m in result.all_messages() for p in getattr(m, "parts", []) if "check failed" in text_of(p)]
    assert isinstance(feedback, RetryFeedbackPart) and feedback.retry.cause == "model_retry"
    assert feedback.content.startswith("The draft fails these checks:") and MARKER.strip() in feedback.content
    (sent,) = [p for p in replayer.requests[-1][-1].parts if "check failed" in text_of(p)]  # as the model saw it
    assert "not a message from the user" in text_of(sent) and "<pyai:retry_feedback>" in text_of(sent)


def test_a_built_in_tools_results_are_counted(make_compactor):
    """A built-in tool's results (a provider's web search) are sent back with every request inside
    the response that got them: they count, so a research agent's searches compact in time; and
    they stay the response's own parts, never sent as the compactor's copy."""
    import pydantic_ai.messages as pai_messages

    from progressive_compactor.messages import as_sent

    call_class = getattr(pai_messages, "NativeToolCallPart", None) or pai_messages.BuiltinToolCallPart
    return_class = getattr(pai_messages, "NativeToolReturnPart", None) or pai_messages.BuiltinToolReturnPart
    results = [
        {"type": "web_search_result", "title": f"result {i}", "page": "text of the page " * 60} for i in range(16)
    ]
    history: list[Any] = [ModelRequest(parts=[UserPromptPart("Research the parser bug.")])]
    for i in range(3):
        history.append(
            ModelResponse(
                parts=[
                    call_class("web_search", {"query": f"parser bug {i}"}, tool_call_id=f"s{i}"),
                    return_class("web_search", results, tool_call_id=f"s{i}"),
                    TextPart(f"searched {i}"),
                ]
            )
        )
        history.append(ModelRequest(parts=[UserPromptPart(f"go on {i}")]))
    response = to_dicts(history)[1]
    assert "text of the page" not in json.dumps(as_sent(response))
    records: list[Any] = []
    compactor = make_compactor(context_window=16_000)
    replayer = Replayer(None, 16_000)
    agent_with(
        FunctionModel(replayer), history_processor(compactor, session_id="u", on_record=records.append)
    ).run_sync("and now?", message_history=history)
    assert records[0].tokens_before >= 3 * len(json.dumps(results)) // 5  # the three searches' results
    assert records[0].tier is not CompactionTier.NONE
    kept = [p for m in replayer.requests[0] if isinstance(m, ModelResponse) for p in m.parts]
    assert any(isinstance(p, return_class) for p in kept)


def test_a_cache_friendly_summary_request_is_one_the_provider_takes(tmp_path):
    """``summary_requests: cache-friendly`` repeats the view in the summary request; behind the
    integration the view's image is the compactor's placeholder part (counted, no data), which
    Chat Completions refuses: the request must carry what the provider takes, or every summary
    fails and the session falls back to truncation."""
    from pydantic_ai import BinaryContent

    from fake_provider import FakeProvider, compactor_settings

    records: list[Any] = []
    image = BinaryContent(data=b"\x89PNG" + bytes(40), media_type="image/png")
    history: list[Any] = [ModelRequest(parts=[UserPromptPart(["Fix the parser bug in this screenshot.", image])])]
    history += tool_rounds(14)
    with FakeProvider() as fake:
        settings = compactor_settings(fake.base_url, "openai", tmp_path, context_window=16_000, model="m")
        compactor = ProgressiveCompactor("default", summary_requests="cache-friendly", **settings)
        processor = history_processor(compactor, session_id="u", on_record=records.append)
        agent_with(FunctionModel(Replayer(None, 16_000)), processor).run_sync("go on", message_history=history)
        compactor.close()
    assert sum(r.summarizer_calls for r in records) >= 1
    assert not any(r.fallback or r.errors for r in records), [r.errors for r in records]
    sent = fake.requests[-1].body["messages"]
    assert "[image]" in json.dumps(sent[0]) and "Fix the parser bug" in json.dumps(sent[0])


def test_the_thinking_a_view_sends_is_counted(make_compactor):
    """Every thinking part a view sends back is counted, whatever the turn: newer Claude models keep
    an earlier turn's thinking in context, and every model reads that of the current tool loop. A
    redacted thinking (its data in the signature) counts its data."""
    from pydantic_ai.messages import ThinkingPart

    thought = "Let me think about the parser. " * 300
    earlier = ModelResponse(parts=[ThinkingPart(thought, signature="c2ln" * 50), TextPart("It is the lexer.")])
    redacted = ModelResponse(
        parts=[ThinkingPart("", id="redacted_thinking", signature="RW5j" * 2000), TextPart("Fixed.")]
    )
    history: list[Any] = [
        ModelRequest(parts=[UserPromptPart("Where is the parser bug?")]),
        earlier,
        ModelRequest(parts=[UserPromptPart("Fix it.")]),
        redacted,
    ]
    replies = iter(range(3))

    def model(messages, info: AgentInfo) -> ModelResponse:
        requests.append(list(messages))
        i = next(replies, None)
        if i is None:
            return ModelResponse(parts=[TextPart(FINAL_ANSWER)])
        return ModelResponse(parts=[ThinkingPart(thought, signature="c2ln"), ToolCallPart("look", {"i": i}, f"l{i}")])

    def look(i: int) -> str:
        return f"file {i} is fine"

    requests: list[list[Any]] = []
    records: list[Any] = []
    compactor = make_compactor(context_window=100_000)
    agent = agent_with(FunctionModel(model), history_processor(compactor, session_id="t", on_record=records.append))
    agent.tool_plain(look)
    agent.run_sync("Look at the files.", message_history=history)
    assert len(requests) == len(records) == 4
    for messages, record in zip(requests, records, strict=True):
        parts = [p for m in messages for p in m.parts]
        sent = sum(len(text_of(p)) for p in parts)
        sent += sum(len(p.content) + len(p.signature or "") for p in parts if isinstance(p, ThinkingPart))
        assert sent // 4 <= record.tokens_after + 10, (sent // 4, record.tokens_after)
    assert records[-1].tokens_after >= (4 * len(thought) + 8_000) // 4  # four turns' thinking, the redacted data
