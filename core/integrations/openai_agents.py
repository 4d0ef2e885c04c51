"""OpenAI Agents SDK: a ``call_model_input_filter`` (extra ``[openai-agents]``).

```python
from agents import Agent, RunConfig, Runner
from progressive_compactor.integrations.openai_agents import call_model_input_filter, read_tool_result_tool

compactor = ProgressiveCompactor("default", context_window=128_000)
compaction = call_model_input_filter(compactor, session_id="ticket-42")
agent = Agent(name="coder", instructions="...", tools=[..., read_tool_result_tool(compactor)])
result = await Runner.run(agent, items, run_config=RunConfig(call_model_input_filter=compaction),
                          hooks=compaction.hooks)
```

Before every model call the filter converts the Responses-API input items to chat messages,
compacts them and converts the view back: user, system and developer messages; an assistant turn
(its reasoning items, its output message and its ``function_call`` items) becomes one assistant
message with tool calls; each ``function_call_output`` a tool result. A hosted tool's call
(``apply_patch_call``, ``computer_call``, ``mcp_call``, ...) is part of its turn, and so is its
output, wherever it comes; both are counted (a screenshot as one image), and so is every
reasoning item, whatever its turn (``integrations.common`` says why). The view keeps every
call next to its output: a call the input leaves unanswered gets a ``function_call_output``
saying so, an output without its call becomes a user message. Items the compaction did not
change are handed back as the very items of the input (reasoning items, ids and hosted-tool
items included); a changed one is a copy with the new text. The agent's ``instructions`` are the
view's system message while compacting (they are counted), and go back to the SDK unchanged.

``compaction.hooks`` (a ``RunHooks``) reports each response's ``usage.input_tokens``, which
anchors the session's token counts; pass it as ``Runner.run(..., hooks=...)`` (or call
``compaction.observe(input_tokens)`` yourself). Each record goes to the stores, to ``on_record``,
to the ``progressive_compactor.integrations`` logger and, inside a run, to the SDK's trace as a
custom span ``progressive_compactor`` with the notice and the record's main fields. A failing
compactor never breaks the run (the model gets the uncompacted input; the record says why); a
view that cannot fit raises :class:`ContextWindowExceededError`.

The session id is ``session_id=`` (a string, or a function of the ``CallModelData``), else the
compactor's default session.
"""

from __future__ import annotations

import contextvars
import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agents import FunctionTool, RunHooks

try:
    from agents.run_config import CallModelData, ModelInputData
except ImportError:  # before the run configuration had a module of its own
    from agents.run import CallModelData, ModelInputData  # type: ignore[no-redef,attr-defined,unused-ignore]

from ..compactor import ProgressiveCompactor
from ..messages import COUNTED_KEY
from ..notice import notice
from .common import (
    READ_TOOL_DESCRIPTION,
    READ_TOOL_NAME,
    SESSION,
    SOURCE,
    Adapter,
    ContextWindowExceededError,
    OnRecord,
    Outcome,
    is_compaction_message,
    log,
    read_tool_result,
)

SessionId = str | Callable[[Any], str] | None
INSTRUCTIONS = "__instructions__"


# --- items both ways --------------------------------------------------------------------------


def as_dict(item: Any) -> dict[str, Any]:
    """An input item as a plain dict (the SDK passes dicts, sometimes pydantic models)."""
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    return dict(dump(exclude_unset=True)) if callable(dump) else {"type": "unknown"}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for part in content or []:
        part = as_dict(part)
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "".join(texts)


def _output_content(output: Any) -> Any:
    """A function's list output as chat content: its text, then its images and files (sized:
    they are sent too), or its text alone when it has nothing else."""
    others = [part for part in _content(output) if part.get("type") != "text"]
    return [{"type": "text", "text": _text(output)}, *others] if others else _text(output)


def _content(content: Any) -> Any:
    """Message content as chat content: a string, or a list of parts (text kept, others sized)."""
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        part = as_dict(part)
        if isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        else:
            parts.append({"type": str(part.get("type", "file"))})
    return parts


def to_dicts(items: Sequence[Any], instructions: str | None = None) -> list[dict[str, Any]]:
    """Input items as chat dicts, each remembering its items (``SOURCE``)."""
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions, SOURCE: [INSTRUCTIONS]})
    turn: dict[str, Any] | None = None  # the assistant turn being gathered
    holders: dict[str, dict[str, Any]] = {}  # a hosted tool call's id -> the turn that holds the call

    def assistant() -> dict[str, Any]:
        nonlocal turn
        if turn is None:
            turn = {"role": "assistant", "content": "", SOURCE: []}
            out.append(turn)
        return turn

    for item in items:
        data = as_dict(item)
        kind = data.get("type")
        role = data.get("role")
        if kind == "function_call":
            current = assistant()
            call = {
                "id": data.get("call_id") or "",
                "type": "function",
                "function": {"name": data.get("name") or "", "arguments": data.get("arguments") or ""},
            }
            current.setdefault("tool_calls", []).append(call)
            current[SOURCE].append(item)
        elif kind == "function_call_output":
            turn = None
            output = data.get("output")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": data.get("call_id") or "",
                    "content": output if isinstance(output, str) else _output_content(output),
                    SOURCE: [item],
                }
            )
        elif role == "assistant":
            current = assistant()
            if current.get("tool_calls"):  # a message after calls starts another turn
                turn = None
                current = assistant()
            current["content"] = (current["content"] or "") + _text(data.get("content"))
            current[SOURCE].append(item)
        elif role in ("user", "system", "developer"):
            turn = None
            out.append(
                {
                    "role": "user" if role == "user" else "system",
                    "content": _content(data.get("content")),
                    SOURCE: [item],
                }
            )
        else:  # reasoning, hosted tool calls and anything else: part of the assistant turn
            call_id = data.get("call_id")
            holder = holders.get(call_id) if _is_output(kind) and isinstance(call_id, str) else None
            if holder is not None:  # with its call, whatever came between (a function's output)
                holder[SOURCE].append(item)
                _count_hosted(holder, data)
                continue
            current = assistant()
            current[SOURCE].append(item)
            _count_hosted(current, data)
            if isinstance(call_id, str) and call_id and isinstance(kind, str) and kind.endswith("_call"):
                holders[call_id] = current
    return out


_NOT_COUNTED = frozenset({"compaction"})
"""Items that are opaque (a compaction's encrypted summary). Reasoning items are counted, their
summary and encrypted content, whatever their turn (``integrations.common`` says why)."""
_IMAGE_ITEMS = frozenset({"computer_call_output", "image_generation_call"})


def _count_hosted(turn: dict[str, Any], data: dict[str, Any]) -> None:
    """Count with ``turn`` what a hosted tool's or a reasoning item sends back: its texts (a
    shell's or an MCP server's output, a search's results, the code it ran, the reasoning's
    summary and encrypted content), one image for a screenshot or a generated image; ids and
    statuses are not text."""
    kind = data.get("type")
    if kind in _NOT_COUNTED:
        return
    counted = {"type": "image"} if kind in _IMAGE_ITEMS else {k: v for k, v in data.items() if k not in _NOT_TEXT}
    turn.setdefault(COUNTED_KEY, []).append(counted)


_NOT_TEXT = frozenset({"id", "call_id", "status"})


def _is_output(kind: Any) -> bool:
    """Whether an item of type ``kind`` answers a call (``apply_patch_call_output``, ...)."""
    return isinstance(kind, str) and kind.endswith("_call_output")


def _copy(item: Any, **changes: Any) -> Any:
    if isinstance(item, Mapping):
        return {**item, **changes}
    return item.model_copy(update=changes) if hasattr(item, "model_copy") else copy.copy(item)


def from_dict(data: dict[str, Any], compaction_role: str = "user") -> list[Any]:
    """Items for a view dict that the compaction made or changed."""
    sources = [s for s in data.get(SOURCE) or [] if s is not INSTRUCTIONS]
    role = data.get("role")
    content = data.get("content")
    text = content if isinstance(content, str) else _text(content)
    if role == "assistant":
        calls = {c["id"]: c["function"] for c in data.get("tool_calls") or []}
        items: list[Any] = []
        placed = False
        for item in sources:
            item_data = as_dict(item)
            if item_data.get("type") == "function_call":
                call = calls.pop(item_data.get("call_id"), None)
                if call is not None:
                    items.append(_copy(item, arguments=call["arguments"]))
            elif item_data.get("role") == "assistant":
                if not placed and text:
                    items.append(_copy(item, content=[{"type": "output_text", "text": text, "annotations": []}]))
                placed = True
            else:
                items.append(item)
        if not placed and text:
            items.insert(0, {"role": "assistant", "content": text})
        items += [
            {"type": "function_call", "call_id": i, "name": f["name"], "arguments": f["arguments"]}
            for i, f in calls.items()
        ]
        return items
    if role == "tool":
        if sources and as_dict(sources[0]).get("type") == "function_call_output":
            original = as_dict(sources[0])
            call_id = data.get("tool_call_id") or original.get("call_id")  # a repeated id told apart (~2)
            return [_copy(sources[0], output=_output(original.get("output"), text), call_id=call_id)]
        return [{"type": "function_call_output", "call_id": data.get("tool_call_id") or "", "output": text}]
    if sources and role in ("user", "system") and as_dict(sources[0]).get("role") in ("user", "system", "developer"):
        return [_copy(sources[0], content=_message_content(as_dict(sources[0]).get("content"), content, text))]
    if role == "system" or (compaction_role == "system" and is_compaction_message(data)):
        return [{"role": "system", "content": text}]
    return [{"role": "user", "content": text}]


def _output(original: Any, text: str) -> Any:
    """A changed function output: the new text, and the images and files the function returned
    beside its text (a list output) after it; only the text was offloaded."""
    if isinstance(original, str) or not original:
        return text
    files = [part for part in map(as_dict, original) if not isinstance(part.get("text"), str)]
    return [{"type": "input_text", "text": text}, *files] if files else text


def _message_content(original: Any, content: Any, text: str) -> Any:
    """A changed message's new content. When the view kept its parts (the pinned request, its
    text masked), the original's images and files stay, each in its place; else the text."""
    if isinstance(original, str) or not isinstance(content, (list, tuple)) or len(content) != len(original or ()):
        return text
    kept = []
    for item, part in zip(original, content, strict=True):
        item = as_dict(item)
        if isinstance(item.get("text"), str) and isinstance(part, Mapping):
            item = {**item, "text": part.get("text", "")}
        kept.append(item)
    return kept


def from_view(view: Sequence[dict[str, Any]], ours: set[int], compaction_role: str = "user") -> tuple[list[Any], bool]:
    """The view as input items, and whether it kept the instructions as its first message."""
    items: list[Any] = []
    kept_instructions = False
    for data in view:
        sources = data.get(SOURCE) or []
        if sources[:1] == [INSTRUCTIONS]:
            kept_instructions = id(data) in ours
            if not kept_instructions:  # the instructions were changed: send the new text as a message
                items.append({"role": "system", "content": data.get("content")})
            continue
        items += list(sources) if id(data) in ours else from_dict(data, compaction_role)
    return items, kept_instructions


def problems(items: Sequence[Any]) -> list[str]:
    """Why the Responses API would refuse ``items``: a function call with no output, an output
    (of a function or a hosted tool call) with no call before it."""
    found = []
    functions: set[str] = set()
    calls: set[str] = set()
    outputs: set[str] = set()
    for item in items:
        data = as_dict(item)
        kind = data.get("type")
        if isinstance(kind, str) and kind.endswith("_call"):
            calls.add(data.get("call_id") or "")
            if kind == "function_call":
                functions.add(data.get("call_id") or "")
        elif _is_output(kind):
            if data.get("call_id") not in calls:
                found.append(f"output {data.get('call_id')} answers no call before it")
            outputs.add(data.get("call_id") or "")
    found += [f"call {c} has no output" for c in sorted(functions - outputs)]
    return found


# --- the filter -------------------------------------------------------------------------------


_LAST: contextvars.ContextVar[Outcome | None] = contextvars.ContextVar("progressive_compactor_last", default=None)
"""The outcome of the run's last model call: each ``Runner.run`` is its own asyncio task, so runs
of several sessions through one filter never see each other's."""


class _UsageHooks(RunHooks):
    def __init__(self, owner: CompactionFilter):
        self.owner = owner

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        usage = getattr(response, "usage", None)
        self.owner.observe(getattr(usage, "input_tokens", None))


class CompactionFilter(Adapter):
    """The ``call_model_input_filter``; see the module docstring."""

    def __init__(
        self,
        compactor: ProgressiveCompactor,
        *,
        session_id: SessionId = None,
        compaction_role: str = "user",
        on_record: OnRecord | None = None,
    ):
        super().__init__(compactor, session_id=session_id, compaction_role=compaction_role, on_record=on_record)
        self.hooks = _UsageHooks(self)

    def session_of(self, data: CallModelData[Any]) -> str:
        return self.chosen_session(data) or self.compactor.session_id

    def observe(self, input_tokens: int | None) -> None:
        """The provider's input tokens for the last input this filter returned in this run."""
        last = _LAST.get()
        if last is not None:
            self.compaction.observe(last, input_tokens)

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        model_data = data.model_data
        history = to_dicts(model_data.input, model_data.instructions)
        sid = self.session_of(data)
        outcome = await self.compaction.acompact(history, sid)
        _LAST.set(outcome)
        self._trace(outcome)
        if outcome.failed:
            return model_data
        items, kept = from_view(outcome.view, {id(d) for d in history}, self.compaction_role)
        found = problems(items)
        if found:  # never send a call without its output
            self.compaction.refused(
                history, sid, f"the view converted for the OpenAI Agents SDK is invalid: {found[0]}"
            )
            _LAST.set(None)
            return model_data
        return ModelInputData(input=items, instructions=model_data.instructions if kept else None)

    def _trace(self, outcome: Outcome) -> None:
        if not outcome.changed and not outcome.failed:
            return
        try:
            from agents.tracing import custom_span

            record = outcome.record
            with custom_span(
                "progressive_compactor",
                data={
                    "notice": notice(record),
                    "session_id": record.session_id,
                    "tier": record.tier.name.lower(),
                    "tokens_before": record.tokens_before,
                    "tokens_after": record.tokens_after,
                    "errors": list(record.errors),
                    "record_id": record.id,
                },
            ):
                pass
        except Exception as exc:  # noqa: BLE001 - tracing is a nicety
            log.debug("no trace for the record: %s", exc)


def call_model_input_filter(compactor: ProgressiveCompactor, **options: Any) -> CompactionFilter:
    """The filter for ``RunConfig(call_model_input_filter=...)``; ``options``: ``session_id``,
    ``compaction_role``, ``on_record``. Pass its ``hooks`` to ``Runner.run`` for usage anchoring."""
    return CompactionFilter(compactor, **options)


def read_tool_result_tool(compactor: ProgressiveCompactor) -> FunctionTool:
    """The ``read_tool_result`` tool as an Agents SDK ``FunctionTool``, answered by ``compactor``
    with the results of the run's session only (the session the filter compacted for)."""
    from agents import function_tool

    def read_tool_result_fn(handle: str, start_line: int | None = None, end_line: int | None = None) -> str:
        # The results of the session whose model call this run served last: the call's own.
        return read_tool_result(compactor, handle, start_line, end_line, SESSION.get())

    tool: FunctionTool = function_tool(
        read_tool_result_fn, name_override=READ_TOOL_NAME, description_override=READ_TOOL_DESCRIPTION
    )
    return tool


__all__ = [
    "CompactionFilter",
    "ContextWindowExceededError",
    "call_model_input_filter",
    "from_view",
    "problems",
    "read_tool_result_tool",
    "to_dicts",
]
