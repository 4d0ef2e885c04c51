"""LangChain v1: a middleware for ``langchain.agents.create_agent`` (extra ``[langchain]``).

```python
from langchain.agents import create_agent
from progressive_compactor import ProgressiveCompactor
from progressive_compactor.integrations.langchain import CompactionMiddleware

compactor = ProgressiveCompactor("default", context_window=128_000)
agent = create_agent(model, tools=[...], middleware=[CompactionMiddleware(compactor)])
agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "ticket-42"}})
```

:class:`CompactionMiddleware` compacts the messages of each model call (``wrap_model_call`` and
``awrap_model_call``) and leaves the graph state untouched: the state keeps the whole history,
the model sees the view. The session id is the run's ``thread_id`` (or ``session_id=``, a string
or a function of the ``ModelRequest``). The system message (``request.system_message``) is the
view's first message. The middleware registers the ``read_tool_result`` tool (a LangChain
``StructuredTool``), so the agent can read back what was offloaded (the results of the session
whose model call asked for it, never another's); ``read_tool=False`` leaves it out.

Messages convert both ways without loss: a message the compaction did not change is handed back
as the very object of the state (tool call ids, ``additional_kwargs``, ``response_metadata``,
content blocks and ids intact); a changed one is a copy of the original with the new content
(and, after an emergency truncation, the shortened tool-call arguments: a cut AI message keeps
its thinking blocks, signatures intact, and its call blocks in place). The thinking blocks and
reasoning blocks of every AI message the view keeps are counted, apart from its text, whatever
the compaction did to the text (``integrations.common`` says why); a system message that is
not first, which the compactor makes a user message, is a ``HumanMessage``. The compaction message is
a ``HumanMessage`` (``compaction_role="system"`` makes it a ``SystemMessage``, for providers that
take several system messages). A call the history leaves unanswered gets a ``ToolMessage`` saying
so, in the view only.

After the model answers, its ``usage_metadata["input_tokens"]`` anchors the session's token
counts (``observe_usage``). Each record goes to the compactor's stores, to ``on_record``, to the
``progressive_compactor.integrations`` logger (the two-line notice) and, when the graph is
streamed with ``stream_mode="custom"``, to the stream as
``{"progressive_compactor": {"record": {...}, "notice": "..."}}``. A failing compactor never
breaks the run: the model gets the uncompacted messages and the record says why; a view that
cannot fit the window raises :class:`ContextWindowExceededError`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Annotated, Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import InjectedToolCallId, StructuredTool

from ..compactor import ProgressiveCompactor
from ..converters import record_to_dict
from ..messages import COUNTED_KEY
from ..notice import notice
from ..session_memory import RecentlyUsed
from .common import (
    READ_TOOL_DESCRIPTION,
    READ_TOOL_NAME,
    SOURCE,
    THINKING,
    Adapter,
    ContextWindowExceededError,
    OnRecord,
    Outcome,
    is_compaction_message,
    log,
    read_tool_result,
)

SessionId = str | Callable[[ModelRequest], str] | None
READ_CALLS_KEPT = 10_000
"""Read tool calls whose session the middleware remembers (those of the latest model answers)."""


# --- messages both ways -----------------------------------------------------------------------


def _content(content: Any) -> Any:
    """LangChain content as chat content: a string, or a list of parts (bare strings as text)."""
    if isinstance(content, list):
        return [{"type": "text", "text": part} if isinstance(part, str) else part for part in content]
    return content


CALL_BLOCKS = frozenset({"tool_use", "tool_call", "function_call", "custom_tool_call"})
"""Content blocks that repeat a tool call of ``tool_calls``: ChatAnthropic's ``tool_use``, the
standard ``tool_call`` (``output_version="v1"``), the Responses API's ``function_call`` and
``custom_tool_call`` items (by ``call_id``). The providers' clients make them again from
``tool_calls`` when they are missing."""


def _is_call_block(part: Any, ids: Collection[Any]) -> bool:
    if not isinstance(part, dict) or part.get("type") not in CALL_BLOCKS:
        return False
    return (part.get("call_id") if "call_id" in part else part.get("id")) in ids


def to_dict(message: BaseMessage) -> dict[str, Any]:
    """One LangChain message as an OpenAI chat dict that remembers the message (``SOURCE``)."""
    content = _content(message.content)
    data: dict[str, Any]
    if isinstance(message, SystemMessage):
        data = {"role": "system", "content": content}
    elif isinstance(message, HumanMessage):
        data = {"role": "user", "content": content}
    elif isinstance(message, AIMessage):
        ids = {call.get("id") for call in message.tool_calls}
        thinking = [p for p in content if _is_thinking(p)] if isinstance(content, list) else []
        if isinstance(content, list):  # the tool calls again, as blocks of the content; the thinking
            content = [p for p in content if not _is_call_block(p, ids) and not _is_thinking(p)]
        data = {"role": "assistant", "content": content}
        if thinking:  # counted apart from the text, which a compaction may cut
            data[COUNTED_KEY] = thinking
        calls = [
            {
                "id": call.get("id") or "",
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call.get("args") or {}, ensure_ascii=False)},
            }
            for call in message.tool_calls
        ]
        calls += [  # sent as calls too, and answered by create_agent with an error result
            {
                "id": call.get("id") or "",
                "type": "function",
                "function": {"name": call.get("name") or "", "arguments": call.get("args") or ""},
            }
            for call in message.invalid_tool_calls
            if call.get("id")
        ]
        if calls:
            data["tool_calls"] = calls
    elif isinstance(message, ToolMessage):
        data = {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
    else:
        role = getattr(message, "role", "user")
        data = {"role": role if role in ("system", "user", "assistant") else "user", "content": content}
    data[SOURCE] = message
    return data


class Converter:
    """Dicts for the messages of one session, kept while the messages are: an unchanged message
    gives the same dict on every call, so the compactor reads only what is new."""

    def __init__(self) -> None:
        self._dicts: dict[int, tuple[BaseMessage, dict[str, Any]]] = {}

    def dicts(self, messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
        out = []
        kept: dict[int, tuple[BaseMessage, dict[str, Any]]] = {}
        for message in messages:
            cached = self._dicts.get(id(message))
            if cached is None or cached[0] is not message:
                cached = (message, to_dict(message))
            kept[id(message)] = cached
            out.append(cached[1])
        self._dicts = kept
        return out


def _tool_calls(data: dict[str, Any], original: AIMessage | None) -> tuple[list[Any], list[Any]]:
    """The tool calls of an assistant dict as LangChain's ``tool_calls`` and ``invalid_tool_calls``
    (those of the original that were invalid stay so, with their arguments as the dict has them)."""
    invalid = {call.get("id"): call for call in original.invalid_tool_calls} if original is not None else {}
    calls: list[Any] = []
    bad: list[Any] = []
    for call in data.get("tool_calls") or []:
        function = call.get("function") or {}
        if call.get("id") in invalid:
            bad.append({**invalid[call.get("id")], "args": function.get("arguments")})
            continue
        try:
            args = json.loads(function.get("arguments") or "{}")
        except ValueError:
            args = {"arguments": function.get("arguments")}
        if not isinstance(args, dict):
            args = {"arguments": args}
        calls.append({"name": function.get("name", ""), "args": args, "id": call.get("id"), "type": "tool_call"})
    return calls, bad


def _is_thinking(part: Any) -> bool:
    """Whether a content block carries the model's thinking (:data:`THINKING`): kept whatever the
    message's text became, and counted apart from it. Anthropic wants the thinking of the turn's
    tool calls back, signature intact; the Responses API wants the reasoning item before the calls
    it led to."""
    return isinstance(part, dict) and part.get("type") in THINKING


def _ai_content(original: list[Any], content: Any, before: Any, args: dict[Any, dict[str, Any]]) -> list[Any]:
    """The content of a changed AI message whose original content is a list of blocks, the blocks
    in place. ``before``: the content its dict had. The same (the compaction changed only the
    calls): every block, each that repeats a tool call with the call's arguments as they are now
    (``args``). Else the thinking (counted apart from the text) and the call blocks, cut, and what
    the compaction left in place of the rest: a string (the text, in place of the text blocks, or
    these when the text is theirs) or the parts of a list (in place of the first block that is
    neither thinking nor a call); not the rest (a server tool's results), which the compaction
    took out."""
    if content == before:
        return [_with_args(p, args) for p in original]
    if isinstance(content, str):
        texts = [p if isinstance(p, str) else p.get("text") for p in original if _is_text(p)]
        same = content == "\n".join(t for t in texts if isinstance(t, str))
        new = [] if same else [{"type": "text", "text": content}] if content else []
        takes = _is_text
    else:
        same, new = False, list(content)
        ids = args.keys()

        def takes(part: Any) -> bool:
            return not _is_thinking(part) and not _is_call_block(part, ids)

    out: list[Any] = []
    for part in original:
        if _is_call_block(part, args.keys()) or _is_thinking(part):
            out.append(_with_args(part, args))
        elif takes(part):
            out += [part] if same else new  # what the compaction left in place of the first such block
            new = []
    return out + new  # no block to put it in place of: after the others


def _is_text(part: Any) -> bool:
    return isinstance(part, str) or (isinstance(part, dict) and part.get("type") == "text")


def _with_args(part: Any, args: dict[Any, dict[str, Any]]) -> Any:
    """A content block that repeats a tool call, with the call's arguments ``args`` gives."""
    if not _is_call_block(part, args.keys()):
        return part
    new = args[part.get("call_id") if "call_id" in part else part.get("id")]
    if part["type"] == "function_call":
        return {**part, "arguments": json.dumps(new, ensure_ascii=False)}
    if part["type"] == "custom_tool_call":
        text = new.get("__arg1") if list(new) == ["__arg1"] else None
        return {**part, "input": text if isinstance(text, str) else json.dumps(new, ensure_ascii=False)}
    return {**part, "input" if part["type"] == "tool_use" else "args": new}


def _with_files(original: Any, text: str) -> Any:
    """A tool result's new text, and the images and files the tool returned beside its text (list
    content) after it: only the text was offloaded."""
    if not isinstance(original, list):
        return text
    files = [part for part in original if isinstance(part, dict) and part.get("type") not in (None, "text")]
    return [{"type": "text", "text": text}, *files] if files else text


def from_dict(data: dict[str, Any], compaction_role: str = "human") -> BaseMessage:
    """A view dict that the compaction made or changed as a LangChain message: a copy of the
    original with the new content, or a new message."""
    original = data.get(SOURCE)
    content = data.get("content")
    if content is None:
        content = ""
    if isinstance(original, BaseMessage) and data.get("role") == "user" and to_dict(original)["role"] != "user":
        return HumanMessage(content=content, id=original.id)  # a system message not first, made a user's
    if isinstance(original, BaseMessage):
        if isinstance(original, ToolMessage) and isinstance(content, str):
            content = _with_files(original.content, content)
        update: dict[str, Any] = {"content": content}
        if isinstance(original, ToolMessage):  # a call id its reply repeated is told apart (``call_0~2``)
            update["tool_call_id"] = data.get("tool_call_id") or original.tool_call_id
        if isinstance(original, AIMessage):
            update["tool_calls"], update["invalid_tool_calls"] = _tool_calls(data, original)
            if isinstance(original.content, list):
                args = {call["id"]: call["args"] for call in update["tool_calls"]}
                update["content"] = _ai_content(original.content, content, to_dict(original)["content"], args)
        return original.model_copy(update=update)
    role = data.get("role")
    if role == "system":
        return SystemMessage(content=content)
    if role == "tool":
        return ToolMessage(content=content, tool_call_id=data.get("tool_call_id") or "")
    if role == "assistant":
        return AIMessage(content=content, tool_calls=_tool_calls(data, None)[0])
    if is_compaction_message(data) and compaction_role == "system":
        return SystemMessage(content=content)
    return HumanMessage(content=content)


def _thread_id() -> Any:
    """The running graph's ``thread_id``, if any."""
    try:
        from langgraph.config import get_config

        return (get_config().get("configurable") or {}).get("thread_id")
    except (RuntimeError, ImportError):
        return None


# --- the read tool ----------------------------------------------------------------------------


def read_tool_result_tool(
    compactor: ProgressiveCompactor, session_id: str | Callable[[], str | None] | None = None
) -> StructuredTool:
    """The ``read_tool_result`` tool as a LangChain tool, answered by ``compactor``: the results
    of ``session_id`` only (a string, or a function asked at each call), of any session if None.
    The middleware's own tool reads the session it compacts for."""

    def read(handle: str, start_line: int | None = None, end_line: int | None = None) -> str:
        sid = session_id() if callable(session_id) else session_id
        return read_tool_result(compactor, handle, start_line, end_line, sid)

    return StructuredTool.from_function(read, name=READ_TOOL_NAME, description=READ_TOOL_DESCRIPTION)


def _call_read_tool(compactor: ProgressiveCompactor, session_of_call: Callable[[str], str | None]) -> StructuredTool:
    """The read tool that reads the session ``session_of_call`` names for the tool call's id."""

    def read(
        handle: str,
        tool_call_id: Annotated[str, InjectedToolCallId],
        start_line: int | None = None,
        end_line: int | None = None,
    ) -> str:
        return read_tool_result(compactor, handle, start_line, end_line, session_of_call(tool_call_id))

    return StructuredTool.from_function(read, name=READ_TOOL_NAME, description=READ_TOOL_DESCRIPTION)


# --- the middleware ---------------------------------------------------------------------------


class CompactionMiddleware(Adapter, AgentMiddleware):
    """Compacts the messages of every model call; see the module docstring."""

    ROLES = ("human", "system")

    def __init__(
        self,
        compactor: ProgressiveCompactor,
        *,
        session_id: SessionId = None,
        compaction_role: str = "human",
        read_tool: bool = True,
        on_record: OnRecord | None = None,
    ):
        super().__init__(compactor, session_id=session_id, compaction_role=compaction_role, on_record=on_record)
        self.tools = [_call_read_tool(compactor, self._tool_session)] if read_tool else []
        self._converters: RecentlyUsed[Converter] = RecentlyUsed(compactor.config.cached_sessions)
        """The threads' converters, for as many threads as the compactor keeps sessions of."""
        self._read_calls: RecentlyUsed[str] = RecentlyUsed(READ_CALLS_KEPT)
        """The session of each read tool call the model answers asked for, by thread and call id."""

    def session_of(self, request: ModelRequest) -> str:
        chosen = self.chosen_session(request)
        if chosen:
            return chosen
        info = getattr(request.runtime, "execution_info", None)
        thread = getattr(info, "thread_id", None) or _thread_id()
        return str(thread) if thread else self.compactor.session_id

    def _tool_session(self, call_id: str) -> str | None:
        """The session a read tool call reads: that of the model call whose answer asked for it;
        for a call this middleware did not see, as :meth:`session_of` names it, or None (any) when
        sessions are named by a function of the model request, which a tool call has not."""
        asked = self._read_calls.get(f"{_thread_id()}\0{call_id}")
        if asked is not None:
            return asked
        if callable(self.session_id):
            return None
        thread = self.session_id or _thread_id()
        return str(thread) if thread else self.compactor.session_id

    def _remember_reads(self, sid: str, response: Any) -> None:
        """Remember the session of the read tool calls in the model's answer, for the tool."""
        thread = _thread_id()  # as the tool sees it
        messages = response.result if isinstance(response, ModelResponse) else [response]
        for message in messages:
            for call in getattr(message, "tool_calls", None) or []:
                if call.get("name") == READ_TOOL_NAME and call.get("id"):
                    self._read_calls.put(f"{thread}\0{call['id']}", sid)

    def _history(self, request: ModelRequest, sid: str) -> list[dict[str, Any]]:
        messages = [request.system_message, *request.messages] if request.system_message else list(request.messages)
        converter = self._converters.get(sid)
        if converter is None:
            converter = Converter()
            self._converters.put(sid, converter)
        return converter.dicts(messages)

    def _request(self, request: ModelRequest, history: list[dict[str, Any]], outcome: Outcome) -> ModelRequest:
        if outcome.failed:
            return request
        ours = {id(d) for d in history}  # the compactor hands unchanged messages back as our own dicts
        messages: list[Any] = [d[SOURCE] if id(d) in ours else from_dict(d, self.compaction_role) for d in outcome.view]
        system: SystemMessage | None = None
        if messages and isinstance(messages[0], SystemMessage) and outcome.view[0].get("role") == "system":
            system = messages.pop(0)
        return request.override(system_message=system, messages=messages)

    def _publish(self, request: ModelRequest, outcome: Outcome) -> None:
        writer = getattr(request.runtime, "stream_writer", None)
        if writer is None:
            return
        try:
            writer(
                {"progressive_compactor": {"record": record_to_dict(outcome.record), "notice": notice(outcome.record)}}
            )
        except Exception as exc:  # noqa: BLE001 - outside a streamed run there is nobody to tell
            log.debug("no stream to write the record to: %s", exc)

    def _usage(self, outcome: Outcome, response: Any) -> None:
        messages = response.result if isinstance(response, ModelResponse) else [response]
        for message in messages:
            usage = getattr(message, "usage_metadata", None)
            if usage and usage.get("input_tokens"):
                self.compaction.observe(outcome, usage["input_tokens"])
                return

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> ModelResponse:
        sid = self.session_of(request)
        history = self._history(request, sid)
        outcome = self.compaction.compact(history, sid)
        self._publish(request, outcome)
        response = handler(self._request(request, history, outcome))
        self._usage(outcome, response)
        self._remember_reads(sid, response)
        return response

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        sid = self.session_of(request)
        history = self._history(request, sid)
        outcome = await self.compaction.acompact(history, sid)
        self._publish(request, outcome)
        response = await handler(self._request(request, history, outcome))
        self._usage(outcome, response)
        self._remember_reads(sid, response)
        return response


__all__ = [
    "CompactionMiddleware",
    "ContextWindowExceededError",
    "from_dict",
    "read_tool_result_tool",
    "to_dict",
]
