"""Pydantic AI: a history processor, for 1.x and 2.x (extra ``[pydantic-ai]``).

```python
from pydantic_ai import Agent
from progressive_compactor.integrations.pydantic_ai import capability, history_processor, read_tool_result_tool

compactor = ProgressiveCompactor("default", context_window=128_000)
agent = Agent(model, capabilities=[capability(compactor)], tools=[read_tool_result_tool(compactor)])  # 2.x
agent = Agent(model, history_processors=[history_processor(compactor)], tools=[...])                # 1.x
```

:func:`history_processor` returns a processor (``async_history_processor`` its async form)
that converts ``ModelRequest`` / ``ModelResponse`` parts (system and user prompts, tool calls,
tool returns, retry prompts and feedback; a response's thinking, whatever its turn, and a
built-in tool's calls and results are counted with their response) to chat dicts, compacts them
and converts the view back. A request's leading system prompts are one system message while
compacting (each is handed back as it was), and the agent's ``instructions``, which Pydantic AI
sends with every request, join it: they are counted, and left to Pydantic AI. A message the
compaction did not change is handed back as the very object it was; a changed one is a copy
of the original with the new content (its other parts, ``instructions`` and metadata kept); the
compaction message is a ``UserPromptPart`` (``compaction_role="system"``: a
``SystemPromptPart``). Before the view is handed over it is checked: every tool call answered by
a return in the next request, no return without its call. Pydantic AI 2.x invents a return for a
call it finds unanswered, which would hide a broken view; a view that fails the check is not
sent, the uncompacted history is, and the record says why.

**The full history.** Pydantic AI 1.x keeps the run's messages as they are and hands the whole
history to the processor on every request. 2.x (``ProcessHistory``) replaces the run's messages
with what the processor returns: the run, and ``result.all_messages()``, then hold the compacted
view, not the history. The processor keeps the full history on its side: when the messages it
gets start with the view it returned last, it puts the history it had in their place, so the
compactor always sees the whole, append-only history (its summaries stay incremental) and
``processor.full_history(session_id, result.all_messages())`` returns it with what the run
added after the last request (in this process). Store that, not ``result.all_messages()``, to
keep the whole conversation on 2.x.

The session id is ``session_id=`` (a string, or a function of the ``RunContext``), else the run's
``conversation_id`` (2.x), else the compactor's default session. The usage Pydantic AI reports
for a model response (``usage.input_tokens``) anchors the session's token counts on the next
request. Records go to the stores, to ``on_record`` and to the ``progressive_compactor.
integrations`` logger. A failing compactor never breaks the run; a view that cannot fit raises
:class:`ContextWindowExceededError`.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic_ai import RunContext, Tool
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ..compactor import ProgressiveCompactor
from ..forks import renew_lock_after_fork
from ..messages import COUNTED_KEY
from .common import (
    READ_TOOL_DESCRIPTION,
    READ_TOOL_NAME,
    SOURCE,
    Adapter,
    ContextWindowExceededError,
    OnRecord,
    Outcome,
    is_compaction_message,
    read_tool_result,
)

SessionId = str | Callable[[Any], str] | None
Processor = Callable[[RunContext[Any], list[ModelMessage]], list[ModelMessage]]
AsyncProcessor = Callable[[RunContext[Any], list[ModelMessage]], Awaitable[list[ModelMessage]]]

# --- messages both ways -----------------------------------------------------------------------


def _user_content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    parts = []
    for item in content:
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif getattr(item, "kind", None) == "image-url" or getattr(item, "is_image", False):
            parts.append({"type": "image"})  # counted as an image
        else:
            parts.append({"type": "file"})  # a document, audio or video: counted as a file
    return parts


def request_part_dict(message: ModelRequest, index: int) -> dict[str, Any]:
    part = message.parts[index]
    data: dict[str, Any]
    if isinstance(part, SystemPromptPart):
        data = {"role": "system", "content": part.content}
    elif isinstance(part, UserPromptPart):
        data = {"role": "user", "content": _user_content(part.content)}
    elif isinstance(part, ToolReturnPart):  # the files a tool returned beside its text (2.x) are sent too
        files = getattr(part, "files", None) or []
        text = part.model_response_str()
        content: Any = [{"type": "text", "text": text}, *_user_content(files)] if files else text
        data = {"role": "tool", "tool_call_id": part.tool_call_id, "content": content}
    elif isinstance(part, RetryPromptPart) and part.tool_name is not None:
        data = {"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response()}
    elif isinstance(part, RetryPromptPart):
        data = {"role": "user", "content": part.model_response()}
    else:  # another part (2.x: the framework's retry feedback, an application's summary): its text
        content = getattr(part, "content", None)
        text = content if isinstance(content, str) else "" if content is None else json.dumps(content, default=str)
        data = {"role": "user", "content": text}
    data[SOURCE] = (message, index)
    return data


def response_dict(message: ModelResponse) -> dict[str, Any]:
    text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
    data: dict[str, Any] = {"role": "assistant", "content": text}
    calls = [
        {"id": p.tool_call_id, "type": "function", "function": {"name": p.tool_name, "arguments": p.args_as_json_str()}}
        for p in message.parts
        if isinstance(p, ToolCallPart)
    ]
    if calls:
        data["tool_calls"] = calls
    besides = _sent_besides(message)
    if besides:
        data[COUNTED_KEY] = besides
    data[SOURCE] = (message, None)
    return data


def _sent_besides(message: ModelResponse) -> list[Any]:
    """What a response sends back besides its text and function calls, to be counted: its
    thinking, whatever the turn (``integrations.common`` says why; a redacted thinking's data is
    its signature), a built-in tool's call and results (a web search's, sent with every request),
    a provider's readable compaction summary, an image the model made."""
    out: list[Any] = []
    part: Any  # parts of kinds that vary with the Pydantic AI version: read by their methods
    for part in message.parts:
        if isinstance(part, (TextPart, ToolCallPart)):
            continue
        content = getattr(part, "content", None)
        if getattr(part, "part_kind", None) == "thinking":
            out.append({"type": "thinking", "thinking": content or "", "signature": part.signature or ""})
        elif hasattr(part, "args_as_json_str"):
            out.append(part.tool_name + part.args_as_json_str())
        elif hasattr(part, "model_response_str"):
            out.append(part.model_response_str())
        elif isinstance(content, str):
            out.append(content)
        elif getattr(content, "is_image", False):
            out.append({"type": "image"})
    return out


@dataclasses.dataclass(frozen=True)
class SystemBlock:
    """The source of one system dict made of several parts: a request's leading system prompts
    (``count`` of them; Pydantic AI sends each, and a system message other than the first would
    be made a user message), and maybe the agent's ``instructions`` (Pydantic AI sends them
    itself, with every request: they never go back into the view). ``message`` is None for the
    instructions alone."""

    message: ModelRequest | None
    count: int


def _system_block(message: ModelRequest) -> dict[str, Any] | None:
    """One system dict for the request's leading system prompts, when it has several."""
    count = next(
        (i for i, part in enumerate(message.parts) if not isinstance(part, SystemPromptPart)), len(message.parts)
    )
    if count < 2:
        return None
    text = "\n\n".join(part.content for part in message.parts[:count] if isinstance(part, SystemPromptPart))
    return {"role": "system", "content": text, SOURCE: SystemBlock(message, count)}


def to_dicts(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            block = _system_block(message)
            start = block[SOURCE].count if block is not None else 0
            out += [block] if block is not None else []
            out += [request_part_dict(message, i) for i in range(start, len(message.parts))]
        else:
            out.append(response_dict(message))
    return out


class Converter:
    """Dicts for the messages of one session, the same dict objects while the messages are. The
    instructions the latest request carries (``ModelRequest.instructions``, which Pydantic AI
    sends with every request) join the first system message, or are one of their own before
    the history: they are counted, and never handed back."""

    def __init__(self) -> None:
        self._dicts: dict[int, tuple[ModelMessage, list[dict[str, Any]]]] = {}
        self._head: tuple[dict[str, Any] | None, str, dict[str, Any]] | None = None

    def dicts(self, messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        kept: dict[int, tuple[ModelMessage, list[dict[str, Any]]]] = {}
        for message in messages:
            cached = self._dicts.get(id(message))
            if cached is None or cached[0] is not message:
                cached = (message, to_dicts([message]))
            kept[id(message)] = cached
            out += cached[1]
        self._dicts = kept
        request = next((m for m in reversed(messages) if isinstance(m, ModelRequest)), None)
        instructions = getattr(request, "instructions", None)
        if isinstance(instructions, str) and instructions:
            system = out[0] if out and out[0].get("role") == "system" else None
            head = self._head
            if head is None or head[0] is not system or head[1] != instructions:
                head = self._head = (system, instructions, _with_instructions(system, instructions))
            out[: 1 if system is not None else 0] = [head[2]]
        return out


def _with_instructions(system: dict[str, Any] | None, instructions: str) -> dict[str, Any]:
    if system is None:
        return {"role": "system", "content": instructions, SOURCE: SystemBlock(None, 0)}
    source = system[SOURCE]  # a block, or one system prompt: (message, 0)
    block = source if isinstance(source, SystemBlock) else SystemBlock(source[0], 1)
    return {"role": "system", "content": f"{system['content']}\n\n{instructions}", SOURCE: block}


def from_view(view: Sequence[dict[str, Any]], ours: set[int], compaction_role: str = "user") -> list[ModelMessage]:
    """The view as Pydantic AI messages. ``ours`` holds the ids of the dicts made from the
    history: those the compaction left alone give back their original message or part."""
    names = {
        call["id"]: call["function"]["name"]
        for d in view
        if d.get("role") == "assistant"
        for call in d.get("tool_calls") or []
    }
    out: list[ModelMessage] = []
    group: list[dict[str, Any]] = []

    def flush() -> None:
        if not group:
            return
        sources = [d.get(SOURCE) for d in group if not _instructions_alone(d.get(SOURCE))]
        messages = [_message_of(s) for s in sources]
        first = messages[0] if messages else None
        if (
            all(id(d) in ours for d in group)
            and first is not None
            and all(m is first for m in messages)
            and [i for s in sources for i in _indices(s)] == list(range(len(first.parts)))
        ):
            out.append(first)  # the original request, untouched
        else:
            base = next((m for m in reversed(messages) if m is not None), None)
            parts = [p for d in group for p in request_parts(d, id(d) in ours, names, compaction_role)]
            if parts:
                out.append(dataclasses.replace(base, parts=parts) if base is not None else ModelRequest(parts=parts))
        group.clear()

    for d in view:
        if d.get("role") == "assistant":
            flush()
            out.append(response(d, id(d) in ours))
        else:
            group.append(d)
    flush()
    return out


def _instructions_alone(source: Any) -> bool:
    return isinstance(source, SystemBlock) and source.message is None


def _message_of(source: Any) -> ModelRequest | None:
    if isinstance(source, SystemBlock):
        return source.message
    return source[0] if isinstance(source, tuple) else None


def _indices(source: Any) -> list[int]:
    if isinstance(source, SystemBlock):
        return list(range(source.count))
    return [source[1]] if isinstance(source, tuple) else []


def request_parts(data: dict[str, Any], unchanged: bool, names: dict[str, str], compaction_role: str) -> list[Any]:
    """The parts a view dict stands for: one, or a system block's (the instructions left to
    Pydantic AI; a block the fallback cut is one system prompt of the text it kept)."""
    source = data.get(SOURCE)
    if not isinstance(source, SystemBlock):
        return [request_part(data, unchanged, names, compaction_role)]
    if source.message is None:
        return []
    if unchanged:
        return list(source.message.parts[: source.count])
    first = source.message.parts[0]
    text = str(data.get("content") or "")
    return [dataclasses.replace(first, content=text) if isinstance(first, SystemPromptPart) else SystemPromptPart(text)]


def request_part(data: dict[str, Any], unchanged: bool, names: dict[str, str], compaction_role: str) -> Any:
    source = data.get(SOURCE)
    content = data.get("content")
    text = (
        content
        if isinstance(content, str)
        else "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
    )
    if isinstance(source, tuple):
        part = source[0].parts[source[1]]
        if unchanged:
            return part
        # the view's call id: a repeated one is told apart there (``call_0~2``)
        call_id = str(data.get("tool_call_id") or getattr(part, "tool_call_id", None) or "")
        if isinstance(part, ToolReturnPart):  # the files the tool returned (2.x) stay: only the text was offloaded
            files = getattr(part, "files", None) or []
            return dataclasses.replace(part, content=[text, *files] if files else text, tool_call_id=call_id)
        if isinstance(part, RetryPromptPart):
            if data.get("role") == "tool":
                return ToolReturnPart(tool_name=part.tool_name or "", content=text, tool_call_id=call_id)
            return UserPromptPart(content=text)
        if isinstance(part, SystemPromptPart) and data.get("role") == "system":
            return dataclasses.replace(part, content=text)
        if isinstance(part, UserPromptPart):
            return dataclasses.replace(part, content=_user_prompt(part.content, content, text))
        if not isinstance(part, SystemPromptPart):  # it stays that part: retry feedback is not the user's
            return dataclasses.replace(part, content=text) if hasattr(part, "content") else part
    role = data.get("role")
    if role == "tool":
        call_id = data.get("tool_call_id") or ""
        return ToolReturnPart(tool_name=names.get(call_id, ""), content=text, tool_call_id=call_id)
    if role == "system" or (compaction_role == "system" and is_compaction_message(data)):
        return SystemPromptPart(content=text)
    return UserPromptPart(content=text)


def _user_prompt(original: Any, content: Any, text: str) -> Any:
    """A changed user prompt's new content. When the view kept its parts (the pinned request, its
    text masked), the original's files and images stay, each in its place; else the text."""
    if isinstance(original, str) or not isinstance(content, (list, tuple)) or len(content) != len(original):
        return text
    return [
        (part.get("text", "") if isinstance(part, dict) else str(part)) if isinstance(item, str) else item
        for item, part in zip(original, content, strict=True)
    ]


def response(data: dict[str, Any], unchanged: bool) -> ModelResponse:
    source = data.get(SOURCE)
    original = source[0] if isinstance(source, tuple) else None
    if unchanged and isinstance(original, ModelResponse):
        return original
    calls = {c["id"]: c["function"] for c in data.get("tool_calls") or []}
    content = data.get("content")
    text = (
        content
        if isinstance(content, str)
        else "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
    )
    parts: list[Any] = []
    if isinstance(original, ModelResponse):
        placed = False
        for part in original.parts:
            if isinstance(part, TextPart):
                if not placed and text:
                    parts.append(dataclasses.replace(part, content=text))
                placed = True
            elif isinstance(part, ToolCallPart):
                if part.tool_call_id in calls:
                    parts.append(dataclasses.replace(part, args=calls.pop(part.tool_call_id)["arguments"]))
            else:
                parts.append(part)
        if not placed and text:
            parts.insert(0, TextPart(content=text))
    elif text:
        parts.append(TextPart(content=text))
    parts += [ToolCallPart(tool_name=f["name"], args=f["arguments"], tool_call_id=i) for i, f in calls.items()]
    return (
        dataclasses.replace(original, parts=parts)
        if isinstance(original, ModelResponse)
        else ModelResponse(parts=parts)
    )


def problems(messages: Sequence[ModelMessage]) -> list[str]:
    """Why a provider would refuse ``messages``: a tool call not answered by a return in the next
    request, a return that answers no call of the response before it, no request at the end."""
    found: list[str] = []
    pending: set[str] = set()
    for i, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            if pending:
                found.append(f"message {i}: tool calls {sorted(pending)} are not answered")
            pending = {p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)}
            continue
        answers = {
            p.tool_call_id
            for p in message.parts
            if isinstance(p, ToolReturnPart) or (isinstance(p, RetryPromptPart) and p.tool_name is not None)
        }
        if answers - pending:
            found.append(f"message {i}: returns {sorted(answers - pending)} answer no call")
        if pending - answers:
            found.append(f"message {i}: tool calls {sorted(pending - answers)} are not answered")
        pending = set()
    if not messages or not isinstance(messages[-1], ModelRequest):
        found.append("the history does not end with a request")
    return found


# --- the processor ----------------------------------------------------------------------------


class _Session:
    def __init__(self) -> None:
        self.full: list[ModelMessage] = []
        self.view: list[ModelMessage] = []
        self.converter = Converter()
        self.outcome: Outcome | None = None
        self.reported: int | None = None


def _starts_with(messages: Sequence[Any], prefix: Sequence[Any]) -> bool:
    return bool(prefix) and len(messages) >= len(prefix) and all(a is b for a, b in zip(messages, prefix, strict=False))


class HistoryCompactor(Adapter):
    """The state behind :func:`history_processor`: the full history and the last view of each
    session, and how the two are told apart on 2.x."""

    def __init__(
        self,
        compactor: ProgressiveCompactor,
        *,
        session_id: SessionId = None,
        compaction_role: str = "user",
        on_record: OnRecord | None = None,
    ):
        super().__init__(compactor, session_id=session_id, compaction_role=compaction_role, on_record=on_record)
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        renew_lock_after_fork(self)

    def full_history(
        self, session_id: str | None = None, run_messages: Sequence[ModelMessage] | None = None
    ) -> list[ModelMessage]:
        """The whole history of a session (not compacted): what the processor saw at the last
        model request it answered, and, given the run's messages (``result.all_messages()``, or those of
        ``capture_run_messages()`` after a failure), what came after it (the last response)."""
        session = self._sessions.get(session_id or self.compactor.session_id)
        if session is None:
            return list(run_messages or [])
        full = list(session.full)
        if run_messages is not None:
            if _starts_with(run_messages, session.view):
                full += run_messages[len(session.view) :]
            elif _starts_with(run_messages, session.full):
                full += run_messages[len(session.full) :]
        return full

    def forget(self, session_id: str | None = None) -> None:
        """Drop what the processor keeps of a session (its full history and last view), once the
        conversation is over and :meth:`full_history` stored: a long-running process serving
        many conversations holds only the live ones. A later request of the session starts anew
        from the messages it brings."""
        with self._lock:
            self._sessions.pop(session_id or self.compactor.session_id, None)

    def session_of(self, ctx: Any, messages: Sequence[ModelMessage]) -> str:
        return self.chosen_session(ctx) or _conversation(ctx, messages, self.compactor.session_id)

    def _prepare(
        self, ctx: Any, messages: list[ModelMessage]
    ) -> tuple[str, _Session, list[ModelMessage], list[dict[str, Any]]]:
        """The session, its full history with ``messages`` and that history as dicts. The session
        takes the new full history in :meth:`_finish`, with the view: a call that raises or is
        cancelled before (a summary timed out) leaves it paired with the view it last returned."""
        sid = self.session_of(ctx, messages)
        with self._lock:
            session = self._sessions.setdefault(sid, _Session())
        if _starts_with(messages, session.view):  # 2.x: the run holds our last view; put the history back
            full = session.full + messages[len(session.view) :]
        else:  # 1.x (the run keeps the history) or a new conversation
            full = list(messages)
        self._report_usage(session, full)
        return sid, session, full, session.converter.dicts(full)

    def _report_usage(self, session: _Session, full: list[ModelMessage]) -> None:
        """The response to the last view carries the provider's count of it: anchor with it."""
        if session.outcome is None:
            return
        latest = next((m for m in reversed(full) if isinstance(m, ModelResponse)), None)
        if latest is None or id(latest) == session.reported or any(latest is m for m in session.view):
            return
        session.reported = id(latest)
        usage = getattr(latest, "usage", None)
        self.compaction.observe(session.outcome, getattr(usage, "input_tokens", None))

    def _finish(
        self, session: _Session, full: list[ModelMessage], history: list[dict[str, Any]], outcome: Outcome
    ) -> list[ModelMessage]:
        session.full = full
        session.outcome = outcome
        if outcome.failed:
            session.view = list(session.full)
            return list(session.full)
        view = from_view(outcome.view, {id(d) for d in history}, self.compaction_role)
        found = problems(view)
        if found:  # never hand Pydantic AI a broken view: it would paper over it
            why = f"the view converted for Pydantic AI is invalid: {found[0]}"
            session.outcome = self.compaction.refused(history, outcome.session_id, why)
            view = list(session.full)
        session.view = view
        return list(view)

    def process(self, ctx: Any, messages: list[ModelMessage]) -> list[ModelMessage]:
        sid, session, full, history = self._prepare(ctx, messages)
        return self._finish(session, full, history, self.compaction.compact(history, sid))

    async def aprocess(self, ctx: Any, messages: list[ModelMessage]) -> list[ModelMessage]:
        sid, session, full, history = self._prepare(ctx, messages)
        return self._finish(session, full, history, await self.compaction.acompact(history, sid))


def _conversation(ctx: Any, messages: Sequence[Any], default: str) -> str:
    """The session a run is, when none was chosen: its ``conversation_id`` (the run's, else its
    newest message's), else ``default``."""
    conversation = getattr(ctx, "conversation_id", None)
    if not conversation:
        conversation = next(
            (m.conversation_id for m in reversed(messages) if getattr(m, "conversation_id", None)), None
        )
    return str(conversation) if conversation else default


def history_processor(compactor: ProgressiveCompactor, **options: Any) -> Processor:
    """A synchronous history processor (for ``Agent(history_processors=[...])`` on 1.x, or
    ``ProcessHistory(...)`` on 2.x). ``options``: ``session_id``, ``compaction_role``,
    ``on_record``. Its ``full_history(session_id)`` returns a session's whole history, and
    ``forget(session_id)`` drops what it keeps of a finished one."""
    state = HistoryCompactor(compactor, **options)

    def compact_history(ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        return state.process(ctx, messages)

    compact_history.full_history = state.full_history  # type: ignore[attr-defined]
    compact_history.forget = state.forget  # type: ignore[attr-defined]
    compact_history.state = state  # type: ignore[attr-defined]
    return compact_history


def async_history_processor(compactor: ProgressiveCompactor, **options: Any) -> AsyncProcessor:
    """The asynchronous form of :func:`history_processor` (summaries awaited with ``asummarize``)."""
    state = HistoryCompactor(compactor, **options)

    async def compact_history(ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        return await state.aprocess(ctx, messages)

    compact_history.full_history = state.full_history  # type: ignore[attr-defined]
    compact_history.forget = state.forget  # type: ignore[attr-defined]
    compact_history.state = state  # type: ignore[attr-defined]
    return compact_history


def capability(compactor: ProgressiveCompactor, **options: Any) -> Any:
    """For Pydantic AI 2.x: ``Agent(capabilities=[capability(compactor)])``, the async
    processor in a ``ProcessHistory`` capability (its ``processor.full_history`` is there)."""
    try:
        from pydantic_ai.capabilities import ProcessHistory
    except ImportError as exc:  # 1.x has no capabilities
        raise ImportError(
            "this Pydantic AI has no capabilities (1.x): use Agent(history_processors=[history_processor(compactor)])"
        ) from exc
    return ProcessHistory(async_history_processor(compactor, **options))


def read_tool_result_tool(
    compactor: ProgressiveCompactor, session_id: str | Callable[[Any], str] | None = None
) -> Tool[Any]:
    """The ``read_tool_result`` tool as a Pydantic AI ``Tool``, answered by ``compactor``: the
    results of ``session_id`` only (a string, or a function of the ``RunContext``: pass what the
    history processor was given). None reads the session the processor names by default: the
    run's ``conversation_id`` (or its messages'), else the compactor's default session (never
    another conversation's results, whatever handle the model writes)."""

    def read_result(
        ctx: RunContext[Any], handle: str, start_line: int | None = None, end_line: int | None = None
    ) -> str:
        if callable(session_id):
            sid = str(session_id(ctx))
        else:  # as the processor names the run's session
            sid = session_id or _conversation(ctx, getattr(ctx, "messages", None) or (), compactor.session_id)
        return read_tool_result(compactor, handle, start_line, end_line, sid)

    return Tool(read_result, name=READ_TOOL_NAME, description=READ_TOOL_DESCRIPTION, takes_ctx=True)


__all__ = [
    "ContextWindowExceededError",
    "HistoryCompactor",
    "async_history_processor",
    "capability",
    "from_view",
    "history_processor",
    "problems",
    "read_tool_result_tool",
    "to_dicts",
]
