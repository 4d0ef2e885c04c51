"""Facts the core extracts by itself, deterministically, whatever the summarizer writes.

The user's original request and later instructions, the files the agent created, edited or read,
the commands that failed with their error line, stated decisions and the last stated next step.
The same functions serve the offline summarizer, the anchors' safety net and the retention probes.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, Iterable, Iterator, Sequence

import orjson

from .anchors import MAX_ANCHOR_LINES
from .messages import SYSTEM_NOTE, carried_result, text_of
from .models import Facts, Message
from .redaction import mask_credentials

MAX_ITEMS = 30
ERROR_SCAN_CHARS = 100_000
_NOT_A_REQUEST = re.compile(
    r"^\s*(<system-reminder>|<command-name>|<command-message>|<local-command|<task-notification>|"
    r"Caveat: The messages below|" + re.escape(SYSTEM_NOTE) + ")",
)
_FILE_TOKEN = re.compile(r"^(?:[\w.@~+-]*/)*[\w@+-][\w.@+-]*\.[A-Za-z0-9]{1,10}$|^(?:[\w.@~+-]+/)+[\w.@+-]+$")
_PATH_KEYS = ("file_path", "path", "filename", "file", "notebook_path", "target_file")
_READ_TOOLS = re.compile(r"read|view|open|cat|show", re.I)
_WRITE_TOOLS = re.compile(r"write|create|new", re.I)
_EDIT_TOOLS = re.compile(r"edit|replace|patch|insert|update|modify", re.I)
_SKIP_TOOLS = re.compile(r"grep|glob|search|find|list|ls", re.I)
# What marks a failed tool result (see is_failure). Results run to megabytes and a regex
# alternation tries every position, so plain substrings are looked for first and a pattern only
# runs where its literal is.
_RETURN_CODE = re.compile(r"<returncode>\s*[1-9]\d*\s*</returncode>")
_EXIT_CODE = re.compile(r"\bExit code:? [1-9]")
_EXIT_STATUS = re.compile(r"\bexit status [1-9]")
_FAILURE_LINE_WORDS = ("Error", "ERROR", "error", "fatal", "FAILED")
_FAILURE_WORDS = "|".join(_FAILURE_LINE_WORDS)
_FAILURE_LINE_START = re.compile(rf"\n(?:{_FAILURE_WORDS})")
"""A line that starts with one of the words: one scan, where five ``in`` tests took five."""
_FAILURE_LINE = re.compile(rf"^(?:{_FAILURE_WORDS})\b[:\s]", re.M)
_ERROR_LINE = re.compile(r"(Error|Exception|error:|FAILED|failed|fatal|not found|No such file|denied|Traceback)", re.I)
_NAMED_ERROR = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b|\berror:|\bfatal:")


class _Phrases:
    """Phrases (a pattern written in lower case, which must end with ``\\b``) searched as
    ``\\b`` + the pattern, case-insensitive. Text is searched lowered where that finds the same
    (:func:`_lowered`), by the pattern without its leading ``\\b``, whose boundary is checked where
    it matches: a pattern that starts with letters is only tried where one of them is. The same
    matches, five times faster."""

    def __init__(self, pattern: str):
        self.lowered = re.compile(pattern)
        self.any = re.compile(r"\b" + pattern, re.I)

    def find(self, lowered: str, pos: int = 0) -> int:
        """Where the first match at or after ``pos`` starts in ``lowered`` (a text as
        :func:`_lowered` gives it), or -1."""
        while (match := self.lowered.search(lowered, pos)) is not None:
            start = match.start()
            if start == 0 or not (lowered[start - 1].isalnum() or lowered[start - 1] == "_"):
                return start
            pos = start + 1
        return -1

    def search(self, text: str) -> bool:
        lowered = _lowered(text)
        if lowered is not None:
            return self.find(lowered) >= 0
        return self.any.search(text) is not None


_FOLDS_TO_ASCII = re.compile("[\u0130\u0131\u017f\u212a]")
"""The characters that a case-insensitive pattern matches to an ASCII letter though their lower
case is another character (İ, ı, ſ and the Kelvin sign): the only ones, checked over all of
Unicode."""


def _lowered(text: str) -> str | None:
    """``text`` in lower case, where a search of it for ASCII phrases finds what a case-insensitive
    search of ``text`` finds (the same positions, the same letters), else None. Text with a
    character or two beyond ASCII (a dash, an arrow) qualifies too: it was a fifth of the time."""
    lowered = text.lower()
    if text.isascii() or (len(lowered) == len(text) and _FOLDS_TO_ASCII.search(text) is None):
        return lowered
    return None


_DECISION = _Phrases(
    r"(?:i(?:'ll| will) (?:use|implement|change|modify|switch|go with)|deci(?:ded|sion)|instead of|"
    r"the (?:fix|(?:root )?cause|issue|problem|bug) is|approach|chose|better to)\b"
)
_NEXT = _Phrases(
    r"(?:next(?:,? i| step)|now i(?:'ll| will| need| should)|let me|i(?:'ll| will| need to| should)|then i|"
    r"todo|remaining)\b"
)
_SENTENCE_STOP = re.compile(r"[.!?\n](?:(?<=\n)\n*|\s+)")
"""Where a sentence ends: new lines, or white space after ``.``, ``!`` or ``?`` (matched with that
character, which stays with its sentence; a pattern that starts with one set of characters is
only tried where one of them is: three times faster than a lookbehind)."""


CUT_MARGIN = 300
"""How far past a cut a credential is looked for (the formats are at most a few hundred long)."""


def cut_head(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text``; a credential of a well-known format that the
    cut would split is masked first (its start alone no longer matches its format)."""
    return text if len(text) <= limit else mask_credentials(text[: limit + CUT_MARGIN])[:limit]


def cut_tail(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text``, as :func:`cut_head` cuts."""
    if len(text) <= limit:
        return text
    return mask_credentials(text[-(limit + CUT_MARGIN) :])[-limit:] if limit else ""


def bound_text(text: str, limit: int, *, masked: bool = False) -> str:
    """``text`` when it fits in ``limit`` characters, else its head and tail with a marker;
    ``masked``: cut as :func:`cut_head` and :func:`cut_tail` cut (for a fact that is kept)."""
    if len(text) <= limit:
        return text
    first = limit * 3 // 4
    last = max(limit - first - 60, 0)
    omitted = len(text) - first - last
    start, end = (
        (cut_head(text, first), cut_tail(text, last)) if masked else (text[:first], text[-last:] if last else "")
    )
    return f"{start}\n[... {omitted} characters omitted ...]\n{end}"


_TAGGED_BLOCK = re.compile(
    r"\s*<(system-reminder|command-name|command-message|command-args|local-command-\w+|task-notification)>.*?</\1>",
    re.S,
)
"""A reminder or a command echo, closed, that a client may put before the user's words."""


def _words(text: str) -> str:
    """``text`` without the reminders and command echoes before the user's words, stripped."""
    while (match := _TAGGED_BLOCK.match(text)) is not None:
        text = text[match.end() :]
    return text.strip()


def is_request(text: str) -> bool:
    """Whether a user message's ``text`` says something of the user's: not empty, nor reminders
    or slash-command echoes alone (a reminder before the user's words is passed over)."""
    words = _words(text)
    return bool(words) and not _NOT_A_REQUEST.match(words)


def request_index(messages: Sequence[Message]) -> int | None:
    """Where the first user message that is a request (not a reminder or a slash-command echo) is."""
    for i, m in enumerate(messages):
        if m.role == "user" and is_request(text_of(m)):
            return i
    return None


def first_user_request(messages: Sequence[Message], limit: int) -> str | None:
    """The text of the first user message that is a request, bounded to ``limit`` characters."""
    index = request_index(messages)
    return None if index is None else bound_text(text_of(messages[index]).strip(), limit, masked=True)


INSTRUCTION_CHARS = 300
"""A later instruction is kept on one line of at most this many characters."""
_NOTE = re.compile(r"^\[[^\]\n]*\]$")
"""A message that is one bracketed note ("[Request interrupted by user]"), written by a tool."""


def one_line(text: str, limit: int) -> str:
    """``text`` with every run of white space made one space, cut to ``limit`` characters (the
    last three an ellipsis when it is cut)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else cut_head(text, limit - 3) + "..."


def instruction(text: str, request: str | None, limit: int) -> str | None:
    """``text`` (a user message's) as a later instruction: on one line, cut to
    :data:`INSTRUCTION_CHARS`; None when it is no request (a reminder, a command echo, a bracketed
    note) or the session's first ``request`` again (as bounded to ``limit``)."""
    text = text.strip()
    words = _words(text)  # a reminder before the user's words is no part of the instruction
    if not words or _NOT_A_REQUEST.match(words) or words.startswith("<") or _NOTE.match(words):
        return None
    if request is not None and bound_text(text, limit, masked=True) == request:
        return None
    return one_line(words, INSTRUCTION_CHARS)


def _arguments(call_arguments: str) -> dict[str, Any]:
    """A tool call's arguments as a dict (empty when they are not a JSON object). Read by orjson,
    three times faster than the standard library; what orjson refuses (NaN, a lone surrogate) by
    the standard library. Only names and text are looked at: a number's type does not matter."""
    if not call_arguments:
        return {}
    try:
        value = orjson.loads(call_arguments)
    except ValueError:
        try:
            value = json.loads(call_arguments)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _command_of(args: dict[str, Any]) -> str | None:
    for key in ("command", "cmd", "script", "action"):
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _clean_path(token: str) -> str | None:
    token = token.strip().strip("'\"`,;()")
    if not token or token.startswith("-") or token.startswith("/dev/") or token in ("&1", "&2"):
        return None
    return token if _FILE_TOKEN.match(token) else None


# (a literal the command must contain, the pattern that finds the file): the literal spares a
# regex scan of the many commands that cannot match.
_CREATE_PATTERNS = (
    ("cat", re.compile(r"\bcat\s*(?:<<-?\s*['\"]?\w+['\"]?\s*)?>\s*([^\s;&|>]+)")),
    ("touch", re.compile(r"\btouch\s+([^\s;&|]+)")),
)
_EDIT_PATTERNS = (
    ("sed", re.compile(r"\bsed\s+-i\S*\s+(?:-e\s+)?(?:'[^']*'|\"[^\"]*\"|\S+)\s+([^\s;&|]+)")),
    (">", re.compile(r"(?<![0-9&])>>?\s*([^\s;&|>]+)")),
    ("tee", re.compile(r"\btee\s+(?:-a\s+)?([^\s;&|]+)")),
    ("open(", re.compile(r"open\(\s*['\"]([^'\"]+)['\"]\s*,\s*['\"][wa]")),
    ("patch", re.compile(r"\bpatch\s+(?:-p\d\s+)?([^\s;&|<]+)")),
)
_READ_COMMANDS = {"cat", "head", "tail", "less", "more", "nl", "view", "open", "bat"}


def _matches(literal: str, pattern: re.Pattern[str], text: str) -> Iterator[str]:
    """``pattern.findall(text)`` for a pattern that starts with ``literal``: tried only where the
    literal is (a command may carry a whole file in a heredoc; a scan of every position is slow)."""
    index = text.find(literal)
    while index >= 0:
        match = pattern.match(text, index)
        if match is None:
            index = text.find(literal, index + 1)
        else:
            yield match.group(1)
            index = text.find(literal, match.end())


def _paths(patterns: Sequence[tuple[str, re.Pattern[str]]], command: str) -> list[str]:
    found = []
    for literal, pattern in patterns:
        if literal in command:
            found += [p for p in map(_clean_path, _matches(literal, pattern, command)) if p]
    return found


_READ_WORDS = "|".join(sorted({*_READ_COMMANDS, "sed"}))
_READ_SEGMENT = re.compile(rf"\n([^\S\n]*(?:{_READ_WORDS})(?!\S)[^\n]*)")
"""A segment of a command (a line once ``&&``, ``|`` and ``;`` are new lines, after a new line
put first) whose first word is a read command or ``sed`` (``sed -n`` prints a file): a pattern
that starts with one character is only tried where it is."""


def _read_segments(command: str) -> Iterator[str]:
    """The segments of ``command`` split at ``&&``, ``||``, ``;``, ``|`` and new lines that start
    with a read command or ``sed`` (leading white space kept)."""
    lines = "\n" + command.replace("&&", "\n").replace("|", "\n").replace(";", "\n")
    return (match.group(1) for match in _READ_SEGMENT.finditer(lines))


_SHELL_WORD = re.compile(r"""(?:[^ \t\r\n'"]+|'[^']*'|"[^"]*")+""")
_QUOTE = re.compile(r"['\"]")
_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"")


def shell_words(text: str) -> list[str]:
    """``shlex.split(text)``, several times faster where ``text`` has no backslash (the only
    escape character; quotes then just group); ValueError for an unclosed quote, as shlex."""
    if "\\" in text:
        return shlex.split(text)
    end = 0
    while (quote := _QUOTE.search(text, end)) is not None:  # each quote closed by the next same one
        end = text.find(quote.group(), quote.end()) + 1
        if end == 0:
            raise ValueError("No closing quotation")
    return [_QUOTED.sub(_unquoted, w) if "'" in w or '"' in w else w for w in _SHELL_WORD.findall(text)]


def _unquoted(match: re.Match[str]) -> str:
    """What a quoted piece says (a function: a template, ``\\1\\2``, is expanded in Python)."""
    single = match.group(1)
    return single if single is not None else match.group(2)


def _files_in_command(command: str) -> tuple[list[str], list[str], list[str]]:
    created = _paths(_CREATE_PATTERNS, command)
    edited = _paths(_EDIT_PATTERNS, command)
    if created and edited:
        made = set(created)
        edited = [p for p in edited if p not in made]
    read: list[str] = []
    for segment in _read_segments(command):
        words = segment.split()
        if "'" in segment or '"' in segment:
            try:
                words = shell_words(segment)
            except ValueError:
                pass
        if not words:
            continue
        if words[0] in _READ_COMMANDS or (words[0] == "sed" and "-n" in words):
            read += [p for p in (_clean_path(w) for w in words[1:]) if p]
    return created, edited, read


def _add(target: dict[str, None], items: Iterable[str]) -> None:
    """Add ``items`` to an ordered set (a dict: a list's ``in`` made a thousand paths cost a
    million comparisons)."""
    target.update(dict.fromkeys(items))


_TAG_LINE = re.compile(r"</?\w+>|<returncode>.*</returncode>")
"""A line that is a tag of the tool's output format, not what it says."""


def error_line(text: str) -> str:
    """The line of a failed tool result that best says what went wrong (looked for in its first
    and last :data:`ERROR_SCAN_CHARS` characters: a result may be tens of megabytes)."""
    if len(text) > 2 * ERROR_SCAN_CHARS:
        text = text[:ERROR_SCAN_CHARS] + "\n" + text[-ERROR_SCAN_CHARS:]
    lines = [line for line in map(str.strip, text.splitlines()) if line and not _TAG_LINE.fullmatch(line)]
    for pattern in (_NAMED_ERROR, _ERROR_LINE):  # "ValueError: ..." says more than "1 failed"
        for line in reversed(lines):
            if pattern.search(line):
                return cut_head(line, 240)
    return cut_head(lines[-1], 240) if lines else ""


def is_failure(text: str) -> bool:
    """Whether a tool result says its command failed: a non-zero exit code, a traceback, a
    missing command or file, or a line that starts with ``Error``/``fatal``/``FAILED``."""
    if (  # written out: a loop over the literals cost an eighth more
        "command not found" in text
        or "Traceback (most recent call last)" in text
        or "<tool_use_error>" in text
        or "No such file or directory" in text
        or ("<returncode>" in text and _RETURN_CODE.search(text) is not None)
        or ("Exit code" in text and _EXIT_CODE.search(text) is not None)
        or ("exit status " in text and _EXIT_STATUS.search(text) is not None)
    ):
        return True
    starts = text.startswith(_FAILURE_LINE_WORDS) or _FAILURE_LINE_START.search(text) is not None
    return starts and _FAILURE_LINE.search(text) is not None


def describe_call(name: str, arguments: str) -> str:
    args = _arguments(arguments)
    command = _command_of(args)
    if command is not None:
        first = command.strip().splitlines()[0]
        return cut_head(first, 200) + (" ..." if len(first) > 200 or "\n" in command.strip() else "")
    return f"{name}({cut_head(arguments, 150)})"


def _sentences(text: str) -> list[str]:
    pieces, start = [], 0
    for end in _SENTENCE_STOP.finditer(text):
        pieces.append(text[start : end.start() + (text[end.start()] != "\n")])
        start = end.end()
    pieces.append(text[start:])
    return [s for s in map(str.strip, pieces) if len(s) > 12]


_LIST_MARK = re.compile(r"^(?:[-*+\u2022]|\d+[.)])\s+")
"""A list item's marker, which the anchor's own ``- `` replaces."""


def _stated_decisions(text: str) -> list[str]:
    """The decisions ``text`` states, each without a list marker and cut to 240 characters."""
    return [cut_head(_LIST_MARK.sub("", s, count=1), 240) for s in _decisions(text) if _states_a_decision(s)]


_HEDGE = re.compile(r"\b(?:maybe|perhaps|might|possibly|probably|i wonder|not sure|hmm+|could be|may be)\b", re.I)
"""A word that makes a sentence a guess ("Maybe the fix is ...", "the issue might be ...")."""


def _states_a_decision(sentence: str) -> bool:
    """False for a sentence that names a decision without stating one: a question ("Should we use
    this approach?"), the lead-in of a list ("The fix is:"), a table row, or a guess ("Maybe the
    issue is ...": the agent has not decided)."""
    end = sentence.rstrip("*` ")
    return not (end.endswith(("?", ":")) or sentence.startswith("|") or _HEDGE.search(sentence))


def _decisions(text: str) -> list[str]:
    """The sentences of ``text`` that state a decision, in order. A text that can be (see
    :func:`_lowered`) is searched lowered, from one decision to the end of its sentence, the next;
    no phrase crosses a sentence end, so these are the sentences that a search of each would find."""
    lowered = _lowered(text)
    if lowered is None:
        return [s for s in _sentences(text) if _DECISION.any.search(s)] if _DECISION.any.search(text) else []
    match = _DECISION.find(lowered)
    found: list[str] = []
    piece = 0
    ends = _SENTENCE_STOP.finditer(text)
    while match >= 0:
        for end in ends:  # the sentence end after the match; the sentence starts after the one before
            stop = end.start() + (text[end.start()] != "\n")  # a "." stays with its sentence
            if stop > match:
                break
            piece = end.end()
        else:
            stop, end = len(text), None
        sentence = text[piece:stop].strip()
        if len(sentence) > 12:
            found.append(sentence)
        if end is None:
            break
        piece = end.end()
        match = _DECISION.find(lowered, piece)
    return found


def _next_step(messages: Sequence[Message]) -> str | None:
    """The last sentence that states a next step, in the newest assistant text that has one."""
    for m in reversed(messages):
        if m.role == "assistant":
            text = text_of(m)
            stated = next((s for s in reversed(_sentences(text)) if _NEXT.search(s)), None) if text else None
            if stated is not None:
                return cut_head(stated, 300)
    return None


def extract_facts(messages: Sequence[Message], *, intent_limit: int = 8000, request: str | None = None) -> Facts:
    """Every fact of the module's list found in ``messages``, in order of appearance.

    ``request`` is the session's first request, when ``messages`` may not hold it (a later part of
    the session): every other user message that is a request is a later instruction. Without it,
    the first request in ``messages`` is the user's request."""
    if request is None:
        request = first_user_request(messages, intent_limit)
    instructions: dict[str, None] = {}
    created: dict[str, None] = {}
    edited: dict[str, None] = {}
    read: dict[str, None] = {}
    failed: dict[str, None] = {}
    decisions: dict[str, None] = {}
    tools: dict[str, None] = {}
    calls: dict[str, tuple[str, str]] = {}
    for m in messages:
        if m.role == "user" and (carried := carried_result(m)) is not None:
            m = carried  # a result that arrived apart from its call: a result, not an instruction
        if m.role == "assistant":
            for call in m.tool_calls:
                calls[call.id] = (call.name, call.arguments)
                tools[call.name] = None
                args = _arguments(call.arguments)
                command = _command_of(args)
                path = None
                for key in _PATH_KEYS:
                    if isinstance(args.get(key), str):
                        path = args[key]
                        break
                if path and not _SKIP_TOOLS.fullmatch(call.name or ""):
                    sub = str(args.get("command", "")) if command else ""
                    kind = f"{call.name} {sub}"
                    if _WRITE_TOOLS.search(kind) and "view" not in sub:
                        created[path] = None
                    elif _EDIT_TOOLS.search(kind):
                        edited[path] = None
                    elif _READ_TOOLS.search(kind):
                        read[path] = None
                if command is not None:
                    c, e, r = _files_in_command(command)
                    _add(created, c)
                    _add(edited, [p for p in e if p not in created])
                    _add(read, r)
            text = text_of(m)
            if text:
                _add(decisions, _stated_decisions(text))
        elif m.role == "user":
            note = instruction(text_of(m), request, intent_limit)
            if note is not None:  # one said again is the newest: it moves last
                instructions.pop(note, None)
                instructions[note] = None
        elif m.role == "tool":
            text = text_of(m)
            line = error_line(text) if text and is_failure(text) else ""
            if line:  # a search that found nothing "fails" with no output: nothing to learn from it
                name, arguments = calls.get(m.tool_call_id or "", (m.name or "tool", ""))
                failed[f"`{describe_call(name, arguments)}` -> {line}"] = None
    only_read = [p for p in read if p not in created and p not in edited]
    return Facts(
        user_request=request,
        instructions=tuple(list(instructions)[-MAX_ANCHOR_LINES:]),  # as many as the intent keeps
        files_created=tuple(list(created)[-MAX_ITEMS:]),
        files_edited=tuple(list(edited)[-MAX_ITEMS:]),
        files_read=tuple(only_read[-MAX_ITEMS:]),
        failed_commands=tuple(list(failed)[-MAX_ITEMS:]),
        decisions=tuple(list(decisions)[-8:]),
        next_step=_next_step(messages),
        tools_used=tuple(tools),
    )
