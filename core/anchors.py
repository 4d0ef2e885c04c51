"""Anchors: reading them from summary text, merging them across turns, writing the compaction
message that stands for everything a summary covers.

Summary text carries one Markdown section per anchor, then the prose::

    ## User Intent
    ...
    ## Execution Progress
    ...
    ## Key Decisions
    ## Tried Solutions
    ## Next Steps
    ## Summary
    free prose
"""

from __future__ import annotations

import functools
import json
import re
from typing import Collection, Iterable, Sequence

from .models import ANCHOR_TITLES, NOT_AVAILABLE, Anchor, AnchorType, Facts, ParsedSummary

COMPACTION_MARKER = "[Context Compaction]"
PROSE_TITLE = "Summary"
MAX_ANCHOR_LINES = 40
"""An anchor keeps at most this many lines across merges (the newest), so summaries stay bounded."""

_ALIASES = {
    "user intent": AnchorType.USER_INTENT,
    "user_intent": AnchorType.USER_INTENT,
    "intent": AnchorType.USER_INTENT,
    "execution progress": AnchorType.EXECUTION_PROGRESS,
    "execution_progress": AnchorType.EXECUTION_PROGRESS,
    "progress": AnchorType.EXECUTION_PROGRESS,
    "key decisions": AnchorType.KEY_DECISION,
    "key decision": AnchorType.KEY_DECISION,
    "key_decision": AnchorType.KEY_DECISION,
    "decisions": AnchorType.KEY_DECISION,
    "tried solutions": AnchorType.TRIED_SOLUTION,
    "tried solution": AnchorType.TRIED_SOLUTION,
    "tried_solution": AnchorType.TRIED_SOLUTION,
    "next steps": AnchorType.NEXT_STEP,
    "next step": AnchorType.NEXT_STEP,
    "next_step": AnchorType.NEXT_STEP,
}
_HEADING = re.compile(r"^\s{0,3}#{1,6}(.+)$|^\s*\*\*(.+?)\*\*:?\s*$")
"""A Markdown heading (its closing ``#`` are taken off by :func:`_title`) or a line in bold."""


def _title(heading: re.Match[str]) -> str:
    """The title of a heading line, in lower case, without a closing ``:``, its number or its
    bold (``## 2. **Key Decisions**:`` is ``key decisions``). The closing ``#``
    and white space are stripped, not matched: a pattern with three runs that may each take the
    same spaces costs the cube of their number."""
    if heading.group(1) is None:
        return _NUMBER.sub("", heading.group(2).strip()).rstrip(":").lower()
    text = heading.group(1).lstrip()
    title = _NUMBER.sub("", (text.rstrip().rstrip("#").rstrip() or text[:1]).strip())
    return title.rstrip(":").strip().strip("*_").strip().rstrip(":").lower()


_NUMBER = re.compile(r"^\d{1,2}[.)]\s+")
"""A section's number, as a model may write it (``## 1. User Intent``)."""


def empty_anchors() -> tuple[Anchor, ...]:
    return tuple(Anchor(t) for t in AnchorType)


def parse_markdown(text: str) -> ParsedSummary:
    """Read anchors from ``## Title`` sections (or ``**Title**``, a qualified title such as
    ``## Key Decisions (and why)``, or a bold label with its text after it, ``1. **Next Steps**:
    run the tests``); text outside them is the prose, but for the compaction message's marker and
    its ``## Offloaded Tool Results`` section, which a model may echo and the core writes itself.
    Lines inside a code fence are content.

    All five anchors always come back, in AnchorType order; the missing ones are ``N/A`` and
    listed in ``missing``.
    """
    sections: dict[AnchorType, list[str]] = {}
    prose: list[str] = []
    current: list[str] | None = prose
    lines = text.splitlines()
    fenced = _fenced(lines)[0] if "```" in text or "~~~" in text else frozenset()
    for i, line in enumerate(lines):
        m = _HEADING.match(line) if i not in fenced else None  # a fence holds code, not sections
        if m:
            title = _title(m)
            anchor = _anchor_of(title)
            if anchor is not None:
                current = sections.setdefault(anchor, [])
                continue
            if _prose_title(title):
                current = prose
                continue
            if title == OFFLOADED_TITLE:  # the core's own section, echoed by a model: the core lists them
                current = None
                continue
            if current is None:
                current = prose
        labelled = _label(line) if "**" in line and i not in fenced else None
        if labelled is not None:  # "1. **Next Steps**: run the tests": the section and its first line
            current = sections.setdefault(labelled[0], [])
            if labelled[1]:
                current.append(labelled[1])
            continue
        if current is None or line.strip() == COMPACTION_MARKER:
            continue
        if line.startswith("\\") and (_structural(rest := line.lstrip("\\")) or _FENCE.match(rest)):
            line = line[1:]  # a line of content that reads as structure, as format_summary escaped it
        current.append(line)
    anchors = []
    missing = []
    for t in AnchorType:
        content = "\n".join(sections.get(t, [])).strip()
        if not content:
            missing.append(t)
            content = NOT_AVAILABLE
        anchors.append(Anchor(t, content))
    return ParsedSummary(tuple(anchors), "\n".join(prose).strip(), tuple(missing))


_QUALIFIERS = ("(", "[", " - ", " – ", " — ")


def _unqualified(title: str) -> str:
    """A heading's title without what qualifies it: ``key decisions`` of ``key decisions (and
    why)`` or ``summary - so far``; the title itself when nothing does."""
    cut = min((i for q in _QUALIFIERS if (i := title.find(q)) > 0), default=0)
    return title[:cut].strip() if cut else title


def _anchor_of(title: str) -> AnchorType | None:
    """The anchor a heading's title names, maybe qualified (``key decisions (and why)``)."""
    anchor = _ALIASES.get(title)
    return anchor if anchor is not None else _ALIASES.get(_unqualified(title))


def _prose_title(title: str) -> bool:
    """Whether a heading's title starts the prose (``## Summary``, ``## Summary (so far)``)."""
    return title in _PROSE_TITLES or _unqualified(title) in _PROSE_TITLES


_LABEL = re.compile(r"^ {0,3}(?:[-*+] +|\d{1,2}[.)] +)?\*\*([^*]{1,60})\*\*(.*)$")
"""A line that starts with a title in bold, maybe as a list item: ``1. **User Intent**: text``."""


def _label(line: str) -> tuple[AnchorType, str] | None:
    """The anchor a line's bold label names and the text after the label (``- **Next Steps:**
    run the tests``, ``**Progress** - done``), or None when it names none or is no label."""
    m = _LABEL.match(line)
    if m is None:
        return None
    title, rest = m.group(1).strip(), m.group(2).strip()
    if title.endswith(":"):
        title = title[:-1]
    elif rest[:1] == ":" or (rest[:1] in "-–—" and rest[1:2] in ("", " ")):
        rest = rest[1:].strip()
    elif rest:  # "**Progress**ive" is no label
        return None
    anchor = _anchor_of(_NUMBER.sub("", title).strip().lower())
    return None if anchor is None else (anchor, rest)


_PROSE_TITLES = ("summary", "prose", "context", "context compaction")
OFFLOADED_TITLE = "offloaded tool results"
"""The compaction message's list of handles (:func:`compaction_message`): a summary that echoes
it loses nothing when it is dropped, the core lists the handles itself."""


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
"""A line that opens a code fence (``` ```python ``` or ``~~~``), or closes one with nothing after."""


def _closing_fence(line: str) -> str:
    """The fence ``line`` may close (``` ``` ``` or ``~~~~``), or nothing."""
    m = _FENCE.match(line)
    return m.group(1) if m and not m.group(2).strip() else ""


def _fenced(lines: Sequence[str]) -> tuple[set[int], set[int]]:
    """The lines inside a code fence that closes, and the fence lines that open or close one. A
    fence that never closes (a summary cut off) holds nothing: what follows it is read as usual."""
    longest: list[dict[str, int]] = [{}] * (len(lines) + 1)  # the longest closing fence after a line
    for i in range(len(lines) - 1, -1, -1):
        longest[i] = longest[i + 1]
        if (fence := _closing_fence(lines[i])) and len(fence) > longest[i].get(fence[0], 0):
            longest[i] = {**longest[i], fence[0]: len(fence)}
    inside: set[int] = set()
    marks: set[int] = set()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None or (m.group(1)[0] == "`" and "`" in m.group(2)):  # ``` `code` ``` is inline code
            i += 1
            continue
        fence = m.group(1)
        if longest[i + 1].get(fence[0], 0) < len(fence):  # never closed
            i += 1
            continue
        end = i + 1
        while not ((close := _closing_fence(lines[end])) and close[0] == fence[0] and len(close) >= len(fence)):
            end += 1
        inside.update(range(i + 1, end))
        marks.update((i, end))
        i = end + 1
    return inside, marks


def _structural(line: str) -> bool:
    """Whether :func:`parse_markdown` reads ``line`` as structure rather than content: a heading
    that starts a section (``## Next Steps``, ``**Summary**``), a bold label that does
    (``1. **Next Steps**: ...``) or the compaction marker."""
    start = line.lstrip()[:1]
    if start not in ("#", "*", "[", "-", "+") and not start.isdigit():  # what structure starts with
        return False
    m = _HEADING.match(line)
    if m is not None and (_prose_title(title := _title(m)) or title == OFFLOADED_TITLE or _anchor_of(title)):
        return True
    return line.strip() == COMPACTION_MARKER or ("**" in line and _label(line) is not None)


def _escaped(content: str) -> str:
    """``content`` with a backslash before each line that :func:`parse_markdown` would read as
    structure (a user's request with its own ``## Context`` section, a prose line ``**Summary**``),
    or that is such a line escaped already: the text reads back as it was written."""
    if (
        "#" not in content
        and "**" not in content
        and COMPACTION_MARKER not in content
        and "```" not in content
        and "~~~" not in content
    ):
        return content  # no line of it can read as structure: most anchors, in a few scans
    return _escaped_lines(content)


@functools.lru_cache(maxsize=256)  # an anchor is formatted several times a compaction (its length measured)
def _escaped_lines(content: str) -> str:
    lines = content.splitlines()  # as parse_markdown splits them
    # A fence line that no fence of the text holds or pairs is escaped: left open, it would pair
    # with a fence of a later section and hide the headings between them.
    inside, marks = _fenced(lines)
    marked = [
        _structural(rest := line.lstrip("\\"))
        or (_FENCE.match(rest) is not None and (rest != line or (i not in marks and i not in inside)))
        for i, line in enumerate(lines)
    ]
    if not any(marked):
        return content
    return "\n".join("\\" + line if structural else line for line, structural in zip(lines, marked, strict=True))


_ORDER = tuple(AnchorType)


def complete(anchors: Iterable[Anchor]) -> tuple[Anchor, ...]:
    """All five anchors in order; absent ones ``N/A`` (anchors that are so already come back as
    they are)."""
    if type(anchors) is tuple and tuple(a.type for a in anchors) == _ORDER:
        return anchors
    by_type = {a.type: a for a in anchors}
    return tuple(by_type.get(t) or Anchor(t) for t in _ORDER)


def _lines(content: str) -> list[str]:
    return [line.rstrip() for line in content.strip().splitlines() if line.strip()]


_BULLET = re.compile(r"^\s*(?:(?:[-*•+]|\d{1,3}[.)])\s+)*")
"""A line's bullets and list numbers (``- ``, ``2. ``), not a number it starts with (``3 of 10``)."""


@functools.lru_cache(maxsize=4096)
def _norm(line: str) -> str:
    """A line without its bullet, in lower case, to compare lines (the same lines come back at
    every merge: cached)."""
    return _BULLET.sub("", line).strip().lower()


def merge_anchors(old: Sequence[Anchor], new: Sequence[Anchor]) -> tuple[Anchor, ...]:
    """Union of old and new, so that nothing old is lost to an ``N/A`` or to a summarizer's omission.

    Per anchor: an ``N/A`` side gives way to the other; otherwise the lines of both are kept, old
    first, without repeats, bounded to the newest :data:`MAX_ANCHOR_LINES`. The user's intent is
    not bounded here: its first lines are the request, which :func:`ensure_facts` keeps whole before
    the newest of the other lines. The next step is the newest one alone: a stale next step is
    worse than none.
    """
    old_by, new_by = {a.type: a for a in complete(old)}, {a.type: a for a in complete(new)}
    merged = []
    for t in AnchorType:
        a, b = old_by[t], new_by[t]
        if b.is_empty:
            merged.append(a)
            continue
        if a.is_empty or t is AnchorType.NEXT_STEP:
            merged.append(b)
            continue
        lines = _lines(a.content)
        seen = {_norm(x) for x in lines}
        for line in _lines(b.content):
            key = _norm(line)
            if key not in seen:
                seen.add(key)
                lines.append(line)
        lines = merge_file_lines(lines)
        if len(lines) > MAX_ANCHOR_LINES and t is not AnchorType.USER_INTENT:
            lines = lines[-MAX_ANCHOR_LINES:]
        merged.append(Anchor(t, "\n".join(lines)))
    return tuple(merged)


_FILE_LINE = re.compile(r"^- Files (created|edited|read): (.+)$")


def merge_file_lines(lines: list[str]) -> list[str]:
    """One ``- Files edited: a, b`` line per kind, however many merges added such lines: the
    artifact trail stays one short list instead of a line per compaction."""
    paths: dict[str, list[str]] = {}
    out: list[str] = []
    for line in lines:
        match = _FILE_LINE.match(line.strip())
        if match is None:
            out.append(line)
            continue
        kind = match.group(1)
        if kind not in paths:
            paths[kind] = []
            out.append(f"\0{kind}")
        for path in match.group(2).split(", "):
            if path and path not in paths[kind]:
                paths[kind].append(path)
    if not paths:
        return lines
    done = {p for kind in ("created", "edited") for p in paths.get(kind, ())}
    if "read" in paths:
        paths["read"] = [p for p in paths["read"] if p not in done]
    result = []
    for line in out:
        if line.startswith("\0"):
            kind = line[1:]
            if paths[kind]:
                result.append(f"- Files {kind}: " + ", ".join(paths[kind][-MAX_FILES:]))
        else:
            result.append(line)
    return result


MAX_FILES = 60
"""A file list keeps at most this many paths (the most recent)."""


LATER_INSTRUCTION = "- Later instruction: "
"""How the intent lists each of the user's later instructions, after the request."""


def facts_as_anchors(facts: Facts) -> tuple[Anchor, ...]:
    """The anchors the core can vouch for by itself, from deterministic facts."""
    progress = []
    if facts.files_created:
        progress.append("- Files created: " + ", ".join(facts.files_created))
    if facts.files_edited:
        progress.append("- Files edited: " + ", ".join(facts.files_edited))
    if facts.files_read:
        progress.append("- Files read: " + ", ".join(facts.files_read))
    intent = [facts.user_request] if facts.user_request else []
    intent += [f"{LATER_INSTRUCTION}{i}" for i in facts.instructions]
    tried = [f"- Failed: {c}" for c in facts.failed_commands]
    decisions = [f"- {d}" for d in facts.decisions]
    return complete(
        [
            Anchor(AnchorType.USER_INTENT, "\n".join(intent) or NOT_AVAILABLE),
            Anchor(AnchorType.EXECUTION_PROGRESS, "\n".join(progress) or NOT_AVAILABLE),
            Anchor(AnchorType.KEY_DECISION, "\n".join(decisions) or NOT_AVAILABLE),
            Anchor(AnchorType.TRIED_SOLUTION, "\n".join(tried) or NOT_AVAILABLE),
            Anchor(AnchorType.NEXT_STEP, facts.next_step or NOT_AVAILABLE),
        ]
    )


def with_fresh_next_step(anchors: Sequence[Anchor], facts: Facts) -> tuple[Anchor, ...]:
    """The anchors a summary wrote for the new messages, with their own next step (from
    ``facts``) where the summary states none. Merged as N/A, the next step of the previous
    summary would stand, and a stale next step is worse than the one the agent stated last."""
    anchors = complete(anchors)
    position = _ORDER.index(AnchorType.NEXT_STEP)
    if not facts.next_step or not anchors[position].is_empty:
        return anchors
    return (*anchors[:position], Anchor(AnchorType.NEXT_STEP, facts.next_step), *anchors[position + 1 :])


def ensure_facts(anchors: Sequence[Anchor], facts: Facts) -> tuple[Anchor, ...]:
    """Add to ``anchors`` whatever deterministic fact they lack, so that what the anchors say of
    the request and later instructions, the files and the failures does not depend on the
    summarizer's diligence. A fact counts as present when its text already appears."""
    result = {a.type: a for a in complete(anchors)}
    everything = "\n".join(a.content for a in result.values()).lower()
    listed = {path for match in _LISTED.finditer("\n" + everything) for path in match.group(1).split(", ")}
    result[AnchorType.USER_INTENT] = _intent(result[AnchorType.USER_INTENT], facts, everything)
    for fact_anchor in facts_as_anchors(facts):
        if fact_anchor.is_empty or fact_anchor.type is AnchorType.USER_INTENT:
            continue
        current = result[fact_anchor.type]
        if fact_anchor.type is AnchorType.NEXT_STEP:
            if current.is_empty:
                result[fact_anchor.type] = fact_anchor
            continue
        missing = [line for line in _lines(fact_anchor.content) if not _covered(line, everything, listed)]
        if missing:
            lines = missing if current.is_empty else _lines(current.content) + missing
            result[fact_anchor.type] = Anchor(fact_anchor.type, "\n".join(merge_file_lines(lines)))
    return complete(result.values())


def _intent(current: Anchor, facts: Facts, everything: str) -> Anchor:
    """The intent: the user's request whole, then the other lines of ``current`` (later
    instructions, the summarizer's notes) with the later instructions of ``facts`` that
    ``everything`` lacks, the newest :data:`MAX_ANCHOR_LINES` of them."""
    lines = _beyond_request(current.content, facts.user_request)
    # The instructions of ``facts`` are newer than the lines before them: a line that states one
    # of them moves after those lines, in the order the user said them, the newest last.
    again = {i.lower() for i in facts.instructions}
    said = {key: line for line in lines if (key := _norm(line).removeprefix(_LATER)) in again}
    if said:
        lines = [line for line in lines if _norm(line).removeprefix(_LATER) not in said]
    stated = {_norm(line).removeprefix(_LATER) for line in lines}
    for i in facts.instructions:
        if i.lower() in said:
            lines.append(said[i.lower()])
        elif not _stated(i.lower(), stated, everything):
            lines.append(f"{LATER_INSTRUCTION}{i}")
    head = [facts.user_request] if facts.user_request else []
    return Anchor(AnchorType.USER_INTENT, "\n".join(head + lines[-MAX_ANCHOR_LINES:]) or NOT_AVAILABLE)


_LATER = _norm(LATER_INSTRUCTION) + " "
SHORT_INSTRUCTION = 40
"""An instruction shorter than this many characters ("use pytest") counts as stated only on a line
of its own: as a piece of another line it may be part of another instruction."""


def _stated(instruction: str, lines: Collection[str], everything: str) -> bool:
    """Whether ``instruction`` (in lower case) is stated already: a line of the intent (``lines``,
    normalised, without the later-instruction prefix), or, when it is long, anywhere."""
    return instruction in lines or (len(instruction) >= SHORT_INSTRUCTION and instruction in everything)


def _beyond_request(intent: str, request: str | None) -> list[str]:
    """The lines of ``intent`` that are not the request's (nor ``N/A``, nor the note that says
    where the pinned request is: the view's to write, which a summarizer shown it may copy)."""
    request_lines = _request_lines(request) if request else frozenset()
    return [line for line in _lines(intent) if line not in request_lines and line not in _NOT_INTENT]


@functools.lru_cache(maxsize=256)
def _request_lines(request: str) -> frozenset[str]:
    """The request's lines (a session's request is looked at on every compaction: cached)."""
    return frozenset(_lines(request))


def fit_summary(
    anchors: Sequence[Anchor], prose: str, budget_chars: int, prose_chars: int | None = None
) -> tuple[tuple[Anchor, ...], str]:
    """Anchors and prose cut to about ``budget_chars`` characters, the user's intent not counted.

    The intent is the user's request, bounded on its own (``intent_max_chars``), and is never
    cut here. The prose keeps its newest paragraphs within ``prose_chars`` (the anchors carry the
    facts; an old story would be re-read on every call), and within the budget it goes first.
    When the other four anchors alone are over the budget, the key decisions (sentences found by
    their phrasing, the least certain facts) keep at most half an equal share of the room; of the
    rest, an anchor shorter than an equal share stays whole and what it leaves is shared by the
    longer ones. Each cut anchor keeps its newest lines, file lists first.
    """
    anchors = complete(anchors)
    if prose_chars is not None:
        prose = _newest_paragraphs(prose, max(prose_chars, MIN_PROSE_CHARS))
    intent_chars = len(anchors[0].content)
    if len(format_summary(anchors, prose)) - intent_chars <= budget_chars:
        return anchors, prose
    room = budget_chars - (len(format_summary(anchors, "")) - intent_chars)
    if room >= MIN_PROSE_CHARS:
        return anchors, _newest_paragraphs(prose, room)
    four = budget_chars - MIN_PROSE_CHARS - 200  # the room of the four anchors
    decided = max(four // 8, 80)  # half an equal share: the least certain anchor yields first
    sizes = [min(len(a.content), decided) if a.type is AnchorType.KEY_DECISION else len(a.content) for a in anchors[1:]]
    shares = _shares(sizes, four)
    trimmed = [anchors[0]] + [
        a if len(a.content) <= share else Anchor(a.type, _newest_lines(a.content, share))
        for a, share in zip(anchors[1:], shares, strict=True)
    ]
    return tuple(trimmed), _newest_paragraphs(prose, MIN_PROSE_CHARS)


def _shares(sizes: Sequence[int], room: int, least: int = 80) -> list[int]:
    """Room for each of ``sizes``: the smallest get what they need, the rest share what is left
    equally (at least ``least`` each)."""
    shares = [0] * len(sizes)
    left, pending = max(room, 0), sorted(range(len(sizes)), key=lambda i: sizes[i])
    while pending:
        level = max(left // len(pending), least)
        i = pending.pop(0)
        shares[i] = min(sizes[i], level)
        left -= shares[i]
    return shares


MIN_PROSE_CHARS = 300


def _newest(text: str, limit: int) -> str:
    return text if len(text) <= limit else "..." + text[len(text) - limit + 3 :]


def _newest_paragraphs(text: str, limit: int) -> str:
    """The newest whole paragraphs of ``text`` within ``limit`` characters; the newest one's end
    when it alone is longer."""
    if len(text) <= limit:
        return text
    start = text.find("\n\n", len(text) - limit)
    rest = text[start + 2 :].strip() if start != -1 else ""
    return rest or _newest(text, limit)


def _newest_lines(content: str, limit: int) -> str:
    """The newest lines of ``content`` within ``limit`` characters; file lists first."""
    lines = _lines(content)
    files = [line for line in lines if _FILE_LINE.match(line.strip())]
    kept: list[str] = []
    used = 0
    for line in files + [line for line in reversed(lines) if line not in files]:
        if used + len(line) + 1 > limit:
            if not kept:
                kept.append(_newest(line, limit))
            continue
        kept.append(line)
        used += len(line) + 1
    order = {line: i for i, line in enumerate(lines)}
    return "\n".join(sorted(kept, key=lambda line: order.get(line, -1))) or NOT_AVAILABLE


_LISTED = re.compile(r"\n- files (?:created|edited|read): ([^\n]+)")
"""A file list in lower-case anchors (after a new line put first: a pattern that starts with one
character is only tried where it is)."""


def _covered(line: str, lowered: str, listed: Collection[str] = ()) -> bool:
    """Whether every file path or command of a fact line already appears in ``lowered`` (a text
    in lower case) or is one of the paths its file lists name (``listed``: found at once, where a
    search of the whole text for each of sixty paths is slow)."""
    norm = _norm(line)
    payload = norm.split(":", 1)[-1]
    if "files" not in norm[:14]:
        item = payload.strip()
        return bool(item) and item in lowered
    items = [x.strip() for x in payload.split(", ")]
    return all(item and (item in listed or _names(lowered, item)) for item in items)


_PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-./~")


def _names(text: str, path: str) -> bool:
    """Whether ``text`` names ``path`` as a whole: not as the end of another path or name
    (``parser.py`` in ``tests/test_parser.py``), nor as its start (``a.py`` in ``a.py.bak``)."""
    start = text.find(path)
    while start >= 0:
        end = start + len(path)
        before = text[start - 1] if start else " "
        after = text[end : end + 1]
        if after == ".":  # a full stop ends a sentence, a dot and a letter go on the name
            after = text[end + 1 : end + 2]
        if before not in _PATH_CHARS and (not after or after not in _PATH_CHARS):
            return True
        start = text.find(path, start + 1)
    return False


def format_summary(anchors: Sequence[Anchor], prose: str) -> str:
    """Summary text in the format :func:`parse_markdown` reads."""
    parts = []
    for a in complete(anchors):
        parts.append(f"## {ANCHOR_TITLES[a.type]}\n{_escaped(a.content.strip()) or NOT_AVAILABLE}")
    parts.append(f"## {PROSE_TITLE}\n{_escaped(prose.strip()) or NOT_AVAILABLE}")
    return "\n\n".join(parts)


PINNED_REQUEST_NOTE = "The user's request is the message before this summary, word for word."
_NOT_INTENT = frozenset((NOT_AVAILABLE, PINNED_REQUEST_NOTE))


def without_request(anchors: Sequence[Anchor], request: str) -> tuple[Anchor, ...]:
    """``anchors`` with the lines of the user's request taken out of the intent, which says where
    the request is instead: a message of its own before the compaction message, which never
    changes, so that a provider's prompt cache keeps it across compactions."""
    return tuple(
        Anchor(a.type, _intent_without(a.content, request)) if a.type is AnchorType.USER_INTENT else a
        for a in complete(anchors)
    )


@functools.lru_cache(maxsize=256)
def _intent_without(intent: str, request: str) -> str:
    """The intent's lines that are not the request's, after the note (the same texts on every
    turn of a session: cached)."""
    return "\n".join([PINNED_REQUEST_NOTE, *_beyond_request(intent, request)])


def compaction_message_text(
    anchors: Sequence[Anchor],
    prose: str,
    *,
    covered: int,
    handles: Sequence[str] = (),
    older_handles: int = 0,
    todo: Sequence[str] = (),
) -> str:
    """The ``[Context Compaction]`` message that stands for everything the summary covers;
    ``older_handles``: how many handles older than ``handles`` the session keeps (listed on demand)."""
    lines = [
        COMPACTION_MARKER,
        f"The first {covered} messages of this conversation were compacted into this summary. "
        "Continue the task from here; do not repeat completed work.",
        "",
        format_summary(anchors, prose),
    ]
    if handles:
        lines += [
            "",
            "## Offloaded Tool Results",
            "Full text of earlier tool results, readable with the read_tool_result tool:",
            *[f"- {h}" for h in handles],
        ]
        if older_handles:
            listing = json.dumps({"handle": handles[0].partition("/")[0] + "/"})
            lines.append(f"- and {older_handles} older ones: read_tool_result with {listing} lists them all")
    if todo:
        lines += ["", "## Todo", *todo]
    return "\n".join(lines)
