"""OpenAI chat messages: reading, writing, checking and repairing them.

A history is ``[system?, m1, ..., mN]`` of dicts in the OpenAI chat shape. Unknown keys are kept
and given back untouched; a message whose role, content and tool calls are unchanged is given back
as the very dict it was read from.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from .errors import InvalidMessagesError
from .models import Message, ToolCall

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_KNOWN_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})
_TOOL_CALL_KEYS = frozenset({"id", "type", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments"})
MISSING_RESULT = "[no result: this tool call was not answered]"


def message_from_dict(data: Mapping[str, Any], index: int | None = None) -> Message:
    """Read one chat message; raise :class:`InvalidMessagesError` naming what is wrong."""
    if type(data) is not dict and not isinstance(data, Mapping):
        raise InvalidMessagesError(
            f"message {index}: expected an object with a 'role', got {type(data).__name__}", index, data
        )
    role = data.get("role")
    if type(role) is not str or role not in ROLES:
        raise InvalidMessagesError(
            f"message {index}: role {role!r} is not one of {', '.join(sorted(ROLES))}", index, data
        )
    content = data.get("content")
    if type(content) is str or content is None:
        pass
    elif isinstance(content, list):
        content = tuple(content)
    elif not isinstance(content, str):
        raise InvalidMessagesError(
            f"message {index}: content must be a string, null or a list of parts, got {type(content).__name__}",
            index,
            data,
        )
    tool_calls: tuple[ToolCall, ...] = ()
    raw_calls = data.get("tool_calls")
    if raw_calls:
        if not isinstance(raw_calls, list):
            raise InvalidMessagesError(f"message {index}: tool_calls must be a list", index, data)
        tool_calls = tuple([_tool_call_from_dict(c, index) for c in raw_calls])
    tool_call_id = data.get("tool_call_id")
    if role == "tool" and not isinstance(tool_call_id, str):
        raise InvalidMessagesError(f"message {index}: a tool message needs a tool_call_id", index, data)
    name = data.get("name")
    if name is not None and type(name) is not str:
        raise InvalidMessagesError(f"message {index}: name must be a string, got {type(name).__name__}", index, data)
    extra = {} if data.keys() <= _KNOWN_KEYS else {k: v for k, v in data.items() if k not in _KNOWN_KEYS}
    return Message(
        role=role,
        content=content,
        tool_calls=tool_calls,
        tool_call_id=tool_call_id,
        name=name,
        extra=extra,
        raw=data,
    )


def _tool_call_from_dict(data: Any, index: int | None) -> ToolCall:
    function = data.get("function") if type(data) is dict or isinstance(data, Mapping) else None
    if not (type(function) is dict or isinstance(function, Mapping)) or not isinstance(data.get("id"), str):
        raise InvalidMessagesError(
            f"message {index}: each tool call needs an 'id' and a 'function' object", index, data
        )
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    extra = {} if data.keys() <= _TOOL_CALL_KEYS else {k: v for k, v in data.items() if k not in _TOOL_CALL_KEYS}
    if not function.keys() <= _FUNCTION_KEYS:
        extra["function"] = {k: v for k, v in function.items() if k not in _FUNCTION_KEYS}
    return ToolCall(
        id=data["id"],
        name=str(function.get("name", "")),
        arguments=arguments,
        type=data.get("type", "function"),
        extra=extra,
    )


def message_to_dict(message: Message) -> dict[str, Any]:
    """Write one message as a chat dict; the original dict when nothing that matters changed (a
    mapping that is no dict is written anew: the view is a list of dicts, as JSON encoders take)."""
    raw = message.raw
    if isinstance(raw, dict) and _raw_matches(message, raw):
        return raw
    data: dict[str, Any] = {"role": message.role}
    data["content"] = list(message.content) if isinstance(message.content, tuple) else message.content
    if message.tool_calls:
        data["tool_calls"] = [_tool_call_to_dict(c) for c in message.tool_calls]
    if message.tool_call_id is not None:
        data["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        data["name"] = message.name
    for key, value in message.extra.items():
        data.setdefault(key, value)
    return data


def _raw_matches(message: Message, raw: Mapping[str, Any]) -> bool:
    content = raw.get("content")
    if content is not message.content and not (isinstance(content, list) and tuple(content) == message.content):
        return False
    return (
        raw.get("role") == message.role
        and raw.get("tool_call_id") == message.tool_call_id
        and len(raw.get("tool_calls") or ()) == len(message.tool_calls)
    )


def _tool_call_to_dict(call: ToolCall) -> dict[str, Any]:
    extra = dict(call.extra)
    function = {"name": call.name, "arguments": call.arguments, **extra.pop("function", {})}
    return {"id": call.id, "type": call.type, "function": function, **extra}


def messages_from_dicts(items: Iterable[Mapping[str, Any]]) -> list[Message]:
    return [message_from_dict(item, i) for i, item in enumerate(items)]


def replace_content(message: Message, content: str) -> Message:
    """A copy of ``message`` with new content, no longer tied to its original dict."""
    return attrs.evolve(message, content=content, raw=None)


IMAGE_TYPES = frozenset({"image_url", "image", "input_image"})
"""The ``type`` of an image part (OpenAI's chat and Responses formats, a placeholder of one)."""
DOCUMENT_TYPES = frozenset({"document", "file", "input_file"})
"""The ``type`` of a document or file part."""


def text_of(message: Message) -> str:
    """The message's text: the content string, or its text and refusal parts joined by newlines."""
    content = message.content
    if isinstance(content, str):
        return content
    if not content:
        return ""
    parts = []
    for part in content:
        if isinstance(part, Mapping):
            text = part.get("text")
            if isinstance(text, str):
                parts.append(text)
            elif part.get("type") in IMAGE_TYPES:
                parts.append("[image]")
            elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                parts.append(part["refusal"])
    return "\n".join(parts)


IMAGE_CHARS = 3000
"""An image part counts as this many characters (about 750 tokens at four characters a token)."""

AUDIO_DATA_CHARS = 64
"""An audio part counts one character for this many characters of its base64 data. A model hears
about 10 to 17 tokens a second of audio; the most compact audio the chat API takes (MP3 at
32 kbit/s) is 5,333 characters of base64 a second, which counts as 83 characters (21 tokens): never
under what a second costs, and a WAV (about 10 times larger) is only counted early."""

_OPAQUE_KEYS = frozenset({"data", "signature", "file_data", "base64"})
_AUDIO_TYPES = frozenset({"input_audio", "audio"})
"""OpenAI's audio part, and LangChain's standard audio block (its data under ``base64``)."""


def part_sizes(value: Any, audio: bool = False) -> Iterator[str | int | None]:
    """What a content part or block (or a list or object of them) sends, for an estimate: each of
    its texts as a string, ``None`` for an image, and opaque data as the characters it counts as.

    An image counts as one, whatever its data (its cost grows with its pixels, not its bytes). The
    encrypted data of redacted thinking and a thinking block's signature are sent and billed but
    are no text a tokenizer reads: they count as many characters as they have. So does the base64
    data of a document or file (a PDF), plus an image (its pages are also shown to the model as
    images): a PDF is billed by its pages (some 1,500 to 4,500 tokens each), which only reading it
    would tell; its size is the cheap measure that grows with them, where one image's worth would
    count a 20-page PDF as 750 tokens. A typical PDF of tens of kilobytes a page is counted some
    2 to 4 times what it costs (compacted early), a very compact one of a few kilobytes a page
    under it. Audio (an ``input_audio`` part, LangChain's standard ``audio`` block) counts by
    :data:`AUDIO_DATA_CHARS`. Every other string (the text of a thinking block, a refusal, a
    document's title) is text; ``type`` keys and non-strings count nothing.
    """
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        kind = value.get("type")
        audio = audio or kind in _AUDIO_TYPES
        if kind in IMAGE_TYPES:
            yield None
            return
        if kind in DOCUMENT_TYPES:
            yield None
        for key, item in value.items():
            if key == "type":
                continue
            if key in _OPAQUE_KEYS and isinstance(item, str):
                yield len(item) // AUDIO_DATA_CHARS if audio else len(item)
            else:
                yield from part_sizes(item, audio)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from part_sizes(item, audio)


def _chars(value: Any) -> int:
    n = 0
    for size in part_sizes(value):
        n += len(size) if isinstance(size, str) else IMAGE_CHARS if size is None else size
    return n


def char_count(message: Message) -> int:
    """Characters the default estimate counts: content, tool-call names and arguments, the
    message's name, and whatever else the message sends back to the provider in keys of its own
    (``reasoning_content``, ``refusal``, the blocks :data:`ANTHROPIC_KEY` carries); a part or
    block that is not text as :func:`part_sizes` reads it."""
    content = message.content
    if isinstance(content, str):
        n = len(content)
    elif content:
        n = 0
        for part in content:
            text = part.get("text") if isinstance(part, Mapping) else None
            n += len(text) if isinstance(text, str) else _chars(part)
    else:
        n = 0
    for call in message.tool_calls:
        n += len(call.name) + len(call.arguments)
    if message.name:
        n += len(message.name)
    if message.extra:
        n += _chars(sent_extras(message))
    return n


COUNTED_KEY = "__counted__"
"""An integration's private key (never sent) that holds what the framework sends with the message
in a shape of its own, to be counted: a built-in tool's call and results, say."""


def sent_extras(message: Message) -> list[Any]:
    """The values of the message's keys of its own that go back to the provider with it, so the
    provider counts them (``reasoning_content``, ``refusal``, the blocks :data:`ANTHROPIC_KEY`
    carries, an integration's :data:`COUNTED_KEY`): every key but an integration's other private
    ones (``__name__``), which hold the framework's own copy of the message."""
    return [value for key, value in message.extra.items() if key == COUNTED_KEY or not is_private(key)]


def as_sent(data: dict[str, Any]) -> dict[str, Any]:
    """A view dict as a provider gets it: without an integration's private keys (``__name__``,
    no JSON as a rule); ``data`` itself when it has none."""
    if not any(map(is_private, data)):
        return data
    return {key: value for key, value in data.items() if not is_private(key)}


def is_private(key: str) -> bool:
    """Whether a message's key is an integration's own (``__name__``): never sent, and never
    counted but for :data:`COUNTED_KEY`."""
    return key.startswith("__")


def fingerprint(message: Message) -> str:
    """A short stable hash of what a message says, to recognise it across processes."""
    h = hashlib.blake2b(digest_size=12)
    h.update(message.role.encode())
    h.update(b"\0")
    h.update(text_of(message).encode("utf-8", "surrogatepass"))
    for call in message.tool_calls:
        h.update(
            b"\0" + call.id.encode("utf-8", "surrogatepass") + b"\0" + call.arguments.encode("utf-8", "surrogatepass")
        )
    if message.tool_call_id:
        h.update(b"\0" + message.tool_call_id.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


# --- structure --------------------------------------------------------------------------------


def view_problems(messages: Sequence[Message]) -> list[str]:
    """Why a message list would be rejected by the OpenAI chat API; empty when it is valid.

    Valid means: a system message only first; every tool message answers a tool call of the
    assistant message before the run of tool messages it belongs to; every tool call is answered
    before the next non-tool message; no tool call id answered twice.
    """
    problems = []
    pending: set[str] = set()
    for i, m in enumerate(messages):
        if m.role == "system" and i != 0:
            problems.append(f"message {i}: system message not first")
        if m.role == "tool":
            if m.tool_call_id not in pending:
                problems.append(f"message {i}: tool result {m.tool_call_id!r} answers no open call")
            pending.discard(m.tool_call_id or "")
            continue
        if pending:
            problems.append(f"message {i}: tool calls {sorted(pending)} have no result")
            pending = set()
        if m.role == "assistant" and m.tool_calls:
            pending = {c.id for c in m.tool_calls}
            if len(pending) < len(m.tool_calls):
                problems.append(f"message {i}: a tool call id appears twice among its calls")
    if pending:
        problems.append(f"end: tool calls {sorted(pending)} have no result")
    return problems


_LATE_RESULT = re.compile(r"\[Tool result for call (.*?), which arrived apart from its call\]\n", re.DOTALL)
"""How a tool result that answers no call of its run starts once the repair made it a user message."""


def _late_result(m: Message) -> Message:
    return Message(
        role="user",
        content=f"[Tool result for call {m.tool_call_id}, which arrived apart from its call]\n{text_of(m)}",
    )


SYSTEM_NOTE = "[System message]"
"""How a system message that is not first starts once the repair made it a user message: the model
(and the facts, which take it for no instruction of the user's) can tell it from the user's words."""


def _late_system(m: Message) -> Message:
    content = m.content
    if isinstance(content, (list, tuple)):
        return attrs.evolve(m, role="user", content=({"type": "text", "text": SYSTEM_NOTE}, *content), raw=None)
    return attrs.evolve(m, role="user", content=f"{SYSTEM_NOTE}\n{content}" if content else SYSTEM_NOTE, raw=None)


def carried_result(m: Message) -> Message | None:
    """The tool result ``m`` holds: ``m`` itself, a tool message with a call id; a tool message
    with the call id and the text of a result that arrived apart from its call, which the repair
    made a user message (it is offloaded and its facts are read like any result); else None."""
    if m.role == "tool":
        return m if m.tool_call_id else None
    content = m.content
    if m.role != "user" or type(content) is not str or not content.startswith("[Tool result for call "):
        return None
    match = _LATE_RESULT.match(content)
    if match is None:
        return None
    return Message(role="tool", content=content[match.end() :], tool_call_id=match.group(1))


def with_result_text(m: Message, text: str) -> Message:
    """``m``, a message :func:`carried_result` gives a result of, with ``text`` as that result's.
    Parts of a result that are not text (a screenshot) stay after it: an offloaded result's file
    holds its text alone."""
    content = m.content
    if isinstance(content, tuple):
        return with_text(m, text, split_text(m)[1])
    match = _LATE_RESULT.match(content) if m.role == "user" and isinstance(content, str) else None
    return replace_content(m, text if match is None else match.group() + text)


def split_text(m: Message) -> tuple[str, tuple[Mapping[str, Any], ...]]:
    """``m``'s text (as :func:`text_of` reads it, without the placeholders of its other parts)
    and the parts of its content that are not text: images, files, audio."""
    parts = m.content if isinstance(m.content, tuple) else ()
    others = tuple(p for p in parts if not _is_text(p))
    if not others:
        return text_of(m), ()
    return text_of(attrs.evolve(m, content=tuple(p for p in parts if _is_text(p)))), others


def _is_text(part: Any) -> bool:
    return isinstance(part, Mapping) and (isinstance(part.get("text"), str) or part.get("type") == "refusal")


def with_text(m: Message, text: str, others: Sequence[Mapping[str, Any]] = ()) -> Message:
    """``m`` with ``text`` as its text, ``others`` (the parts :func:`split_text` gives) after it;
    a text alone when there are none. No longer tied to its original dict."""
    if not others:
        return replace_content(m, text)
    return attrs.evolve(m, content=({"type": "text", "text": text}, *others), raw=None)


def repair_tool_pairs(messages: Sequence[Message], *, at_start: bool = True) -> tuple[list[Message], int]:
    """Make a message list structurally valid: repair orphaned tool calls and results.

    The rule is local, so repairing a history piece by piece gives what repairing it whole gives:
    an assistant message's tool calls are answered by the run of tool messages right after it; a
    call with no result there gets a short synthetic result saying so; a tool message that answers
    no call of its run (or answers one twice) becomes a user message that keeps its text, so no
    result is lost; a system message that is not first becomes a user message that starts with
    :data:`SYSTEM_NOTE`. Returns the repaired list and how many repairs were made (0, and an
    equal list, when it was valid).
    ``at_start=False`` says the list continues a view, so even its first message is not first.
    """
    out: list[Message] = []
    repairs = 0
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        i += 1
        if m.role == "tool":
            out.append(_late_result(m))
            repairs += 1
            continue
        if m.role == "system" and (i > 1 or not at_start):
            m = _late_system(m)
            repairs += 1
        if m.role != "assistant" or not m.tool_calls:
            out.append(m)
            continue
        m, renamed = _distinct_call_ids(m)
        out.append(m)
        repairs += sum(len(names) - 1 for names in renamed.values())
        unused = {call_id: iter(names) for call_id, names in renamed.items()}  # each name once, in order
        ids = {c.id for c in m.tool_calls}
        answered: set[str] = set()
        stray: list[Message] = []
        while i < n and messages[i].role == "tool":
            result = messages[i]
            i += 1
            names = unused.get(result.tool_call_id or "")
            name = next(names, None) if names is not None else None
            if name is not None:  # the k-th result of a repeated id answers its k-th call
                result = attrs.evolve(result, tool_call_id=name, raw=None)
            if result.tool_call_id in ids and result.tool_call_id not in answered:
                answered.add(result.tool_call_id or "")
                out.append(result)
            else:
                stray.append(_late_result(result))
        for call in m.tool_calls:
            if call.id not in answered:
                answered.add(call.id)
                out.append(Message(role="tool", content=MISSING_RESULT, tool_call_id=call.id))
                repairs += 1
        out.extend(stray)
        repairs += len(stray)
    return out, repairs


def _distinct_call_ids(message: Message) -> tuple[Message, dict[str, list[str]]]:
    """``message`` with a repeated tool call id made distinct (``id~2``, ``id~3``..., skipping a name
    another of its calls has), and for each repeated id the names its calls now have, in order
    (empty when nothing repeats)."""
    ids = [c.id for c in message.tool_calls]
    used = set(ids)
    if len(used) == len(ids):
        return message, {}
    names: dict[str, list[str]] = {}
    calls = []
    for call in message.tool_calls:
        taken = names.setdefault(call.id, [])
        name, number = call.id, len(taken) + 1
        while taken and name in used:
            name, number = f"{call.id}~{number}", number + 1
        used.add(name)
        taken.append(name)
        calls.append(call if name == call.id else attrs.evolve(call, id=name))
    repeated = {k: v for k, v in names.items() if len(v) > 1}
    return attrs.evolve(message, tool_calls=tuple(calls), raw=None), repeated


def is_split_point(messages: Sequence[Message], index: int) -> bool:
    """True when cutting before ``messages[index]`` separates no tool call from its results."""
    return index >= len(messages) or messages[index].role != "tool"


def group_start(messages: Sequence[Message], index: int) -> int:
    """The nearest split point at or before ``index``."""
    while index > 0 and not is_split_point(messages, index):
        index -= 1
    return index


# --- Anthropic Messages format ----------------------------------------------------------------


ANTHROPIC_KEY = "anthropic"
"""The message key that carries what OpenAI chat messages have no field for, given back by
:func:`to_anthropic`: ``blocks``, the Anthropic blocks that are not text, an image with its
data or URL, a tool call or a tool result (``thinking``, ``redacted_thinking``, ``document``...),
as ``[position, block]`` pairs; ``fields``, the other fields of the text, image and
``tool_use`` blocks it has parts or tool calls for (``cache_control``, ``citations``...), as
``[position, fields]`` pairs; and on a tool message ``tool_result``, the other fields of its
``tool_result`` block (``is_error``...). The compactor keeps it, like any unknown key."""

_BLOCK_KEYS = {"text": ("type", "text"), "image": ("type", "source"), "tool_use": ("type", "id", "name", "input")}
"""The keys of the blocks OpenAI messages have a part or a tool call for; their other keys are
carried as ``fields``."""

_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)


def to_anthropic(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Convert OpenAI chat dicts to Anthropic's ``(system, messages)``.

    Text and ``image_url`` parts become text and image blocks (no text block of white space
    alone: the Messages API refuses it), tool calls ``tool_use`` blocks (arguments that are not a
    JSON object as ``{"_raw_arguments": text}``), tool results ``tool_result`` blocks in a user
    message; the blocks :data:`ANTHROPIC_KEY` carries go back in their places. Consecutive
    messages of the same role are merged, as the Messages API requires alternation.
    """
    system: str | None = None
    out: list[dict[str, Any]] = []
    for i, data in enumerate(messages):
        m = message_from_dict(data, i)
        if m.role in ("system", "developer"):
            text = text_of(m)
            system = text if system is None else system + "\n\n" + text
            continue
        carried = m.extra.get(ANTHROPIC_KEY) or {}
        if not isinstance(carried, Mapping):
            raise InvalidMessagesError(f"message {i}: {ANTHROPIC_KEY!r} must be an object, as from_anthropic writes it")
        blocks = _blocks_of(m)
        for position, block in carried.get("blocks", ()):
            blocks.insert(position, block)
        fields = carried.get("fields", ())
        for position, more in fields:
            if position < len(blocks) and blocks[position].get("type") in _BLOCK_KEYS:  # as the content is now
                blocks[position] = {**blocks[position], **more}
        if m.role == "tool":
            role = "user"
            content: Any = blocks if fields or any(b.get("type") != "text" for b in blocks) else text_of(m)
            blocks = [{"type": "tool_result", "tool_use_id": m.tool_call_id, "content": content}]
            blocks[0].update(carried.get("tool_result", {}))
        else:
            role = "assistant" if m.role == "assistant" else "user"
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return system, out


def _blocks_of(m: Message) -> list[dict[str, Any]]:
    """The Anthropic blocks of ``m``'s content and tool calls, in order."""
    content = m.content
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or ()
    blocks: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        image = part.get("image_url") if part.get("type") == "image_url" else None
        url = image.get("url") if isinstance(image, Mapping) else image
        text = part.get("text")
        if not isinstance(text, str):  # as text_of reads it
            text = "[image]" if part.get("type") in IMAGE_TYPES else ""
            if part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                text = part["refusal"]
        if isinstance(url, str):
            blocks.append({"type": "image", "source": _image_source(url)})
        elif text.strip():  # the Messages API refuses a text block of white space alone
            blocks.append({"type": "text", "text": text})
    for call in m.tool_calls:
        try:
            arguments = json.loads(call.arguments) if call.arguments else {}
        except json.JSONDecodeError:
            arguments = None
        if not isinstance(arguments, dict):  # the Messages API takes an object as input, nothing else
            arguments = {"_raw_arguments": call.arguments}
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
    return blocks


def _image_source(url: str) -> dict[str, str]:
    """The Anthropic image source for an ``image_url`` URL: its data when it is a data URL."""
    match = _DATA_URL.fullmatch(url)
    if match is None:
        return {"type": "url", "url": url}
    return {"type": "base64", "media_type": match[1], "data": match[2]}


def from_anthropic(messages: Sequence[Mapping[str, Any]], system: str | None = None) -> list[dict[str, Any]]:
    """Convert Anthropic Messages to OpenAI chat dicts, losing nothing :func:`to_anthropic` gives back.

    Text blocks become the content (a string when every block is text, else a list of parts),
    images with their data or URL ``image_url`` parts (data URLs), ``tool_use`` blocks tool calls
    and ``tool_result`` blocks tool messages; any other block (``thinking``, ``document``...) and a
    result's other fields (``is_error``...) are carried under :data:`ANTHROPIC_KEY`.
    """
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for i, m in enumerate(messages):
        role = m.get("role")
        content = m.get("content")
        if role not in ("user", "assistant"):
            raise InvalidMessagesError(f"message {i}: Anthropic role must be user or assistant", i, m)
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        calls: list[dict[str, Any]] = []
        rest: list[Any] = []
        fields: list[list[Any]] = []  # of tool_use blocks
        for block in content or ():
            kind = block.get("type")
            if kind == "tool_use":
                if block.keys() - _BLOCK_KEYS["tool_use"]:
                    fields.append([len(rest), _fields_of(block)])
                calls.append(
                    {
                        "id": block["id"],
                        "type": "function",
                        "function": {"name": block["name"], "arguments": json.dumps(block.get("input", {}))},
                    }
                )
                rest.append(None)  # it keeps its place among the blocks
            elif kind == "tool_result":
                out.append(_tool_message(block))
            else:
                rest.append(block)
        message = _with_content({"role": role}, rest, fields)
        if calls:
            message["tool_calls"] = calls
        if message["content"] is not None or len(message) > 2:  # tool calls or carried blocks
            out.append(message)
    return out


def _tool_message(block: Mapping[str, Any]) -> dict[str, Any]:
    """The tool message for a ``tool_result`` block."""
    message: dict[str, Any] = {"role": "tool", "tool_call_id": block["tool_use_id"]}
    result = block.get("content")
    if isinstance(result, list):
        _with_content(message, result)
    if not message.get("content"):  # a tool message has text, if only empty
        message["content"] = result if isinstance(result, str) else ""
    fields = {k: v for k, v in block.items() if k not in ("type", "tool_use_id", "content")}
    if fields:
        message.setdefault(ANTHROPIC_KEY, {})["tool_result"] = fields
    return message


def _with_content(message: dict[str, Any], blocks: Sequence[Any], fields: Sequence[list[Any]] = ()) -> dict[str, Any]:
    """``message`` with the content for ``blocks`` (``None`` stands for a tool call, which only
    takes a place, its block's other fields in ``fields``) and, under :data:`ANTHROPIC_KEY`, the
    blocks it cannot hold and the other fields of those it can."""
    parts: list[dict[str, Any]] = []
    kept: list[list[Any]] = []
    found = list(fields)
    for position, block in enumerate(blocks):
        if block is None:
            continue
        part = _part_of(block)
        if part is None:
            kept.append([position, block])
            continue
        parts.append(part)
        if block.keys() - _BLOCK_KEYS[block["type"]]:
            found.append([position, _fields_of(block)])
    if not parts:
        message["content"] = None
    elif kept or found or any(p["type"] != "text" for p in parts):
        message["content"] = parts
    else:  # text alone: a string, as OpenAI clients write it
        message["content"] = "\n".join(p["text"] for p in parts)
    if kept:
        message.setdefault(ANTHROPIC_KEY, {})["blocks"] = kept
    if found:
        message.setdefault(ANTHROPIC_KEY, {})["fields"] = sorted(found, key=lambda pair: pair[0])
    return message


def _fields_of(block: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a text, image or ``tool_use`` block that its part or tool call has no room for."""
    keys = _BLOCK_KEYS[block["type"]]
    return {k: v for k, v in block.items() if k not in keys}


def _part_of(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """The OpenAI content part for a text block or an image with its data or URL; else None."""
    if block.get("type") == "text":
        return {"type": "text", "text": block.get("text", "")}
    source = block.get("source") if block.get("type") == "image" else None
    if not isinstance(source, Mapping):
        return None
    media_type, data, url = source.get("media_type"), source.get("data"), source.get("url")
    if source.get("type") == "base64" and isinstance(media_type, str) and isinstance(data, str):
        url = f"data:{media_type};base64,{data}"
    elif source.get("type") != "url" or not isinstance(url, str):  # a file of the Files API...
        return None
    return {"type": "image_url", "image_url": {"url": url}}
