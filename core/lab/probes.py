"""Retention probes: what a compacted view must still hold, built deterministically from the
transcript and checked against the final view of a replay.

A probe is a set of *needles* (short strings); it counts as **kept** when every needle occurs in
the view's text or in the text of an offloaded tool result whose handle the view names. Text is
compared after normalisation: case-folded and every run of whitespace collapsed to one space. The
view's text is each message's content plus, for tool calls, the tool name and the decoded string
values of its JSON arguments (strings only; so a command appears as the agent typed it, not JSON-escaped).
A handle is "named" when it appears after ``Handle:`` in a placeholder, as a ``- session/id``
line of the compaction message's "Offloaded Tool Results" list, or (for handles the replay saw
offloaded) anywhere in the view's text.

The probes, by category (built from the history the final view was computed from):

``request``
    The user's original request: the first user message that is a request (not a reminder or
    a slash-command echo; :func:`progressive_compactor.facts.first_user_request`). Lines that
    are only an XML-like tag (``<pr_description>``) are dropped, the rest is split into sentences
    (at ``.``, ``!`` or ``?`` followed by space, and at newlines). Key sentences are the first
    three that read as prose: at least 20 characters, at least 4 words, and at least 60 % letters
    among their non-space characters. One probe per key sentence, its needle the sentence's first
    200 characters. A request with no such sentence gives one probe: its first 200 characters.
``instructions``
    The user's later instructions: every later user message that is a request, as
    :func:`progressive_compactor.facts.extract_facts` finds them (not a reminder, a command echo, a
    bracketed note like ``[Request interrupted by user]``, or the first request again). One probe
    per instruction, its needle the first 120 characters of the message on one line.
``artifacts``
    The artifact trail: every file path the agent created, edited or viewed, found by
    :func:`progressive_compactor.facts.extract_facts` run on each assistant message together with
    its tool results (so the core's 30-item cap does not apply). One probe per distinct path,
    its needle the path.
``errors``
    Error signatures of failed tool calls: each tool result that
    :func:`progressive_compactor.facts.is_failure` flags (non-zero return code, traceback,
    ``command not found``, ...). Needles: what was tried, the first 80 characters of the first line
    of the call's decoded arguments (for a shell tool, the command; else the first argument
    value; the tool name when there are none), and what failed, the first 120 characters of the
    error line (:func:`~progressive_compactor.facts.error_line`). Repeats are counted once.
``next_step``
    The last stated next step: the last sentence of an assistant message that states an intention
    (``extract_facts(...).next_step``); its needle the first 150 characters. At most one probe.

The same fact extraction feeds the core's anchors, so a policy that keeps the anchors tends to
keep the artifact and error probes; that is what the anchors are for. The probes do not reward
that blindly: the request needles are sentences the anchors keep only while the request fits
``intent_max_chars``, and an anchor keeps at most its newest 40 lines.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs

from ..facts import describe_call, error_line, extract_facts, first_user_request, is_failure
from ..messages import message_from_dict, text_of
from ..models import Message

SHORT_NAMES = {"request": "req.", "instructions": "instr.", "artifacts": "files", "errors": "err.", "next_step": "next"}
"""Each category, in order, with its name where a table is narrow."""
CATEGORIES = tuple(SHORT_NAMES)
KEY_SENTENCES = 3
_TAG_LINE = re.compile(r"^\s*</?[\w-]+>\s*$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_HANDLE_AFTER = re.compile(r"Handle:\s*([^\]\s]+)")
_HANDLE_LINE = re.compile(r"^- ([A-Za-z0-9_][A-Za-z0-9_.-]*/[A-Za-z0-9_][A-Za-z0-9_.-]*)\s*$", re.M)
_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    """Case-folded, whitespace collapsed: how probe needles and view text are compared."""
    return _SPACE.sub(" ", text).strip().casefold()


@attrs.frozen
class Probe:
    category: str
    label: str
    """What is reported when the probe is lost."""
    needles: tuple[str, ...]
    """Normalised strings that must all occur for the probe to count as kept."""


@attrs.frozen
class CategoryRetention:
    kept: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return len(self.kept) + len(self.lost)

    @property
    def ratio(self) -> float | None:
        """Share of probes kept; None when the transcript gave no probe of this category."""
        return len(self.kept) / self.total if self.total else None


@attrs.frozen
class Retention:
    categories: Mapping[str, CategoryRetention]

    def ratio(self, category: str) -> float | None:
        found = self.categories.get(category)
        return found.ratio if found is not None else None

    def ratios(self) -> dict[str, float | None]:
        return {c: self.ratio(c) for c in CATEGORIES}


def _as_messages(messages: Sequence[Mapping[str, Any] | Message]) -> list[Message]:
    return [m if isinstance(m, Message) else message_from_dict(m, i) for i, m in enumerate(messages)]


def key_sentences(request: str, limit: int = KEY_SENTENCES) -> list[str]:
    """The request's key sentences, as the module docstring defines them."""
    lines = [line for line in request.splitlines() if not _TAG_LINE.match(line)]
    sentences = [s.strip() for s in _SENTENCE.split("\n".join(lines)) if s and s.strip()]
    chosen = []
    for s in sentences:
        visible = s.replace(" ", "")
        letters = sum(ch.isalpha() for ch in visible)
        if len(s) >= 20 and len(s.split()) >= 4 and visible and letters / len(visible) >= 0.6:
            chosen.append(s)
        if len(chosen) == limit:
            break
    return chosen


def _groups(messages: Sequence[Message]) -> Iterable[list[Message]]:
    """Each assistant message with the tool results after it."""
    group: list[Message] = []
    for m in messages:
        if m.role == "tool" and group:
            group.append(m)
            continue
        if group:
            yield group
        group = [m] if m.role == "assistant" else []
    if group:
        yield group


def build_probes(messages: Sequence[Mapping[str, Any] | Message]) -> tuple[Probe, ...]:
    """Every probe of the transcript ``messages``, in category order."""
    msgs = _as_messages(messages)
    probes: list[Probe] = []
    request = first_user_request(msgs, 10**9)
    if request:
        sentences = key_sentences(request) or [request]
        for s in sentences:
            needle = normalize(s)[:200]
            probes.append(Probe("request", s[:200], (needle,)))
    whole = extract_facts(msgs)
    for instruction in whole.instructions:
        probes.append(Probe("instructions", instruction, (normalize(instruction)[:120],)))
    paths: list[str] = []
    for group in _groups(msgs):
        facts = extract_facts(group)
        for path in (*facts.files_created, *facts.files_edited, *facts.files_read):
            if path not in paths:
                paths.append(path)
    probes += [Probe("artifacts", p, (normalize(p),)) for p in paths]
    calls: dict[str, tuple[str, str]] = {}
    seen: set[tuple[str, ...]] = set()
    for m in msgs:
        for call in m.tool_calls:
            calls[call.id] = (call.name, call.arguments)
        if m.role != "tool":
            continue
        text = text_of(m)
        if not text or not is_failure(text):
            continue
        line = error_line(text)
        if not line:
            continue
        name, arguments = calls.get(m.tool_call_id or "", (m.name or "tool", ""))
        tried = describe_call(name, arguments)
        what = _call_text(arguments).strip()
        what = what.splitlines()[0] if what else name
        needles = tuple(n for n in (normalize(what)[:80], normalize(line)[:120]) if n)
        if needles in seen:
            continue
        seen.add(needles)
        probes.append(Probe("errors", f"{tried} -> {line}", needles))
    step = whole.next_step
    if step:
        probes.append(Probe("next_step", step, (normalize(step)[:150],)))
    return tuple(probes)


def _call_text(arguments: str) -> str:
    try:
        value = json.loads(arguments) if arguments else {}
    except (json.JSONDecodeError, ValueError):
        return arguments
    strings: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            strings.append(v)
        elif isinstance(v, Mapping):
            for item in v.values():
                walk(item)
        elif isinstance(v, list):
            for item in v:
                walk(item)

    walk(value)
    return "\n".join(strings)


def view_text(view: Sequence[Mapping[str, Any] | Message]) -> str:
    """The text of a view as probes see it (not normalised)."""
    parts = []
    for m in _as_messages(view):
        parts.append(text_of(m))
        for call in m.tool_calls:
            parts.append(call.name)
            parts.append(_call_text(call.arguments))
    return "\n".join(parts)


def named_handles(text: str, known_handles: Iterable[str] = ()) -> list[str]:
    """Handles of offloaded results that ``text`` names, in order of first mention."""
    found = _HANDLE_AFTER.findall(text) + _HANDLE_LINE.findall(text)
    found += [h for h in known_handles if h in text]
    return list(dict.fromkeys(found))


def check_probes(
    probes: Sequence[Probe],
    view: Sequence[Mapping[str, Any] | Message],
    read_handle: Callable[[str], str | None] | None = None,
    known_handles: Iterable[str] = (),
) -> Retention:
    """Which probes ``view`` keeps; offloaded text is read through ``read_handle``."""
    raw = view_text(view)
    haystack = [normalize(raw)]
    if read_handle is not None:
        for handle in named_handles(raw, known_handles):
            text = read_handle(handle)
            if text:
                haystack.append(normalize(text))
    corpus = "\n".join(haystack)
    kept: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    lost: dict[str, list[str]] = {c: [] for c in CATEGORIES}
    for probe in probes:
        target = kept if all(n in corpus for n in probe.needles) else lost
        target.setdefault(probe.category, []).append(probe.label)
    categories = {c: CategoryRetention(tuple(kept.get(c, ())), tuple(lost.get(c, ()))) for c in set(kept) | set(lost)}
    return Retention(categories)


__all__ = [
    "CATEGORIES",
    "CategoryRetention",
    "Probe",
    "Retention",
    "build_probes",
    "check_probes",
    "key_sentences",
    "named_handles",
    "normalize",
    "view_text",
]
