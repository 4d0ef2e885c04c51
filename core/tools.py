"""A ready-made tool for the agent's own tool list: read an offloaded tool result back; and the
placeholder that stands for an offloaded result in the view and tells the agent to call it.

```python
tools = [*my_tools, READ_TOOL_RESULT_TOOL]
...
if call["function"]["name"] == "read_tool_result":
    content = handle_read_tool_call(compactor, call["function"]["arguments"])
```
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

import attrs

from .errors import CompactorError
from .messages import text_of
from .models import Message, OffloadEntry
from .storage import safe_name, session_name

PLACEHOLDER_PREFIX = "[Tool result offloaded"
_LINE_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")

READ_TOOL_RESULT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "read_tool_result",
        "description": (
            "Read the full text of an earlier tool result that was moved out of the context to save "
            "space. Its placeholder names the handle. Give start_line and end_line (1-based, "
            "inclusive) to read part of a long result."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "handle": {"type": "string", "description": "The handle named in the placeholder."},
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1},
            },
            "required": ["handle"],
            "additionalProperties": False,
        },
    },
}


def read_result(compactor: Any, handle: str, lines: tuple[int, int] | None, session_id: str | None) -> str:
    """What :meth:`ProgressiveCompactor.read_tool_result` answers (see there)."""
    prefix, slash, rest = handle.strip().partition("/")
    if session_id is not None and prefix != session_name(session_id):
        raise CompactorError(f"the handle {handle!r} does not name a result of this session")
    if slash and not rest:
        if session_id is None:
            raise CompactorError("listing a session's results needs its session id (the read tool of its session)")
        state = compactor.state(session_id)
        handles = [*state.dropped_handles, *(e.handle for e in state.offloaded.values())]
        return "\n".join(handles) if handles else "no offloaded results are kept for this session"
    text = compactor.hooks.read_offloaded(handle)
    if text is None:
        raise CompactorError(f"no offloaded tool result has the handle {handle!r}")
    if lines is None:
        return text
    start, end = lines
    return "\n".join(text.splitlines()[max(start, 1) - 1 : end])


def handle_read_tool_call(compactor: Any, arguments: str | dict[str, Any], session_id: str | None = None) -> str:
    """Answer a ``read_tool_result`` call; errors come back as text the model can read. With
    ``session_id`` (the session whose model made the call), only that session's results are read."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        handle = args["handle"]
        start, end = args.get("start_line"), args.get("end_line")
        lines = (int(start or 1), int(end or 10**9)) if start or end else None
        return compactor.read_tool_result(str(handle), lines, session_id=session_id)
    except (ValueError, KeyError, TypeError) as exc:
        return f"error: invalid arguments for read_tool_result: {exc}"
    except CompactorError as exc:
        return f"error: {exc}"


def head_lines(text: str, count: int) -> list[str]:
    """The first ``count`` lines of ``text``, as ``text.splitlines()[:count]`` gives them, without
    splitting all of it (a tool result may be tens of megabytes)."""
    lines: list[str] = []
    start = 0
    for match in _LINE_BREAK.finditer(text):
        if len(lines) == count:
            return lines
        lines.append(text[start : match.start()])
        start = match.end()
    if len(lines) < count and start < len(text):
        lines.append(text[start:])
    return lines


SPLIT_CHARS = 1 << 20
"""Up to this many characters, a text's lines are counted by splitting it."""
_RARE_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def line_count(text: str) -> int:
    """How many lines ``text.splitlines()`` gives, the lines ``read_tool_result``'s
    ``start_line`` and ``end_line`` count (``\r`` ends a line too: a progress bar's output):
    split when it is at most :data:`SPLIT_CHARS` long (faster), else counted without splitting a
    text that may be tens of megabytes (a count per break character: a regular expression's scan
    for the rare ones cost fifty times more)."""
    if len(text) <= SPLIT_CHARS:
        return len(text.splitlines())
    breaks = text.count("\n") + text.count("\r") - text.count("\r\n")
    breaks += sum(text.count(c) for c in _RARE_BREAKS)
    return breaks + (not _LINE_BREAK.match(text[-1:])) if text else 0


def placeholder(entry: OffloadEntry, text: str, preview_lines: int, preview_chars: int) -> str:
    """What stands for an offloaded result in the view: its size, its handle, its first lines.

    Every built-in offloader (files, SQLite, PostgreSQL, Redis) writes this same text, so a view
    does not depend on where the results are kept."""
    lines = head_lines(text, preview_lines)
    preview = "\n".join(lines)
    if len(preview) > preview_chars:
        preview = preview[:preview_chars] + " ..."
    return (
        f"{PLACEHOLDER_PREFIX}: {entry.chars} characters, {entry.lines} lines. Handle: {entry.handle}]\n"
        f"First {len(lines)} lines:\n{preview}\n"
        f'[Full text: call read_tool_result with {{"handle": "{entry.handle}"}}, '
        "optionally with start_line and end_line.]"
    )


_PLACEHOLDER_HANDLE = re.compile(re.escape(PLACEHOLDER_PREFIX) + r": [^\n]*? Handle: ([^\]\n]+)\]")


def placeholder_handle(text: str) -> str | None:
    """The handle a placeholder (:func:`placeholder`) names, or None when ``text`` is none."""
    if not text.startswith(PLACEHOLDER_PREFIX):
        return None
    match = _PLACEHOLDER_HANDLE.match(text)
    return match.group(1) if match else None


@attrs.frozen
class OffloadText:
    """A tool result an offloader is to keep, as every built-in offloader reads it: the text with
    secrets masked, its UTF-8 bytes and their sha256, and the length of the original (what leaves
    the context; the core matches the entry to its message by it)."""

    tool_call_id: str
    text: str
    data: bytes
    sha256: str
    chars: int

    def entry(self, handle: str, path: str, preview_lines: int, preview_chars: int) -> OffloadEntry:
        """The entry for this text kept under ``handle`` at ``path``, with its placeholder."""
        entry = OffloadEntry(
            tool_call_id=self.tool_call_id,
            handle=handle,
            path=path,
            chars=self.chars,
            lines=line_count(self.text),
            sha256=self.sha256,
        )
        return attrs.evolve(entry, placeholder=placeholder(entry, self.text, preview_lines, preview_chars))


def offload_text(message: Message, threshold: int, redact: Callable[[str], str]) -> OffloadText | None:
    """What to keep of ``message``, or None when it is not a tool result longer than
    ``threshold`` characters (or is a placeholder already)."""
    tool_call_id = message.tool_call_id
    if message.role != "tool" or not tool_call_id:
        return None
    text = text_of(message)
    if len(text) <= threshold or text.startswith(PLACEHOLDER_PREFIX):
        return None
    masked = redact(text)
    data = masked.encode("utf-8", "surrogatepass")
    return OffloadText(tool_call_id, masked, data, hashlib.sha256(data).hexdigest(), len(text))


def offload_handles(session_id: str, tool_call_id: str, sha256: str) -> tuple[str, str]:
    """The handles an offloader tries for a result, in order: ``{session}/{call}``, then
    ``{session}/{call}.{first 12 hex digits of the text's sha256}`` when the plain one already
    holds another text (a provider that reuses ``call_0``). The first writer of a handle keeps it;
    a handle is never rewritten with other text. Ids that are not plain names are replaced by
    :func:`~progressive_compactor.storage.safe_name`, so every offloader (and every worker) gives
    one result the same handle."""
    base = f"{session_name(session_id)}/{safe_name(tool_call_id)}"
    return base, f"{base}.{sha256[:12]}"
