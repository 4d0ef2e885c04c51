"""``fallback-token-budget``: truncation to a token budget, no LLM call.

Keeps the pinned messages (system and compaction message), then the newest exchange, then whole
groups (a message with the tool results that answer it) from the newest back while they fit the
budget. The newest exchange is what the model must answer, so it stays whenever it fits the
window: shortened if need be (its results, then its tool-call arguments, head and tail kept, with
a marker) to the budget's room or half of what the window has left, whichever is more, and
further only if the window demands it; when even its bare structure is over the window, no older
exchange is kept in its place. The budget is a target, the window the limit: when the
pinned messages alone are over the budget they are shortened, but only as far as the window
demands once the newest exchange has twice its size beside them, and never below the budget. The
user's pinned request and the compaction message share what the system message leaves of that
room (the shorter stays whole, the longer are cut to the same size), then the compaction message
is cut first, the system message last, but each of the two keeps an eighth of the room (or all of
itself) while the system message can be cut instead: a long system prompt at a small window never
takes the user's request out of the view. A line that names an offloaded result's handle, and a
bracketed first line such as ``[Context Compaction]``, is never cut. The result never separates a
tool call from its results.
"""

from __future__ import annotations

import json
from typing import Callable, Sequence

import attrs

from progressive_compactor.plugin import (
    Message,
    carried_result,
    hookimpl,
    is_split_point,
    replace_content,
    split_text,
    text_of,
    with_text,
)

Estimate = Callable[[Sequence[Message]], list[int]]
MARKER = "\n[... truncated to fit the context window ...]\n"
PINNED_SHARE = 8
"""The user's pinned request and the compaction message each keep ``1/PINNED_SHARE`` of the
pinned messages' room (or all of themselves, when shorter) while the system message can be cut
instead."""


def groups(messages: Sequence[Message]) -> list[list[Message]]:
    """Messages cut at split points: each tool message stays with the message before it, and so
    does a result that arrived apart from its call (the repair made it a user message): the
    message it followed is what the model must answer with it, the user's request say."""
    out: list[list[Message]] = []
    for i, m in enumerate(messages):
        if out and (not is_split_point(messages, i) or (m.role == "user" and carried_result(m) is not None)):
            out[-1].append(m)
        else:
            out.append([m])
    return out


def _protected(text: str) -> tuple[str, str, str]:
    """``(first, body, last)``: the first and last lines when they name a handle (an offload
    placeholder's), or the first line when it is a bracketed header (``[Context Compaction]``),
    which a cut must keep whole, and what lies between."""
    first = last = ""
    body = text
    end = body.find("\n")
    header = body[:end].strip() if end != -1 else ""
    if "Handle:" in header or (header.startswith("[") and header.endswith("]") and len(header) <= 80):
        first, body = body[: end + 1], body[end + 1 :]
    start = body.rfind("\n")
    if start != -1 and "handle" in body[start:]:
        body, last = body[:start], body[start:]
    return first, body, last


def cut(text: str, keep: int) -> str:
    """``text`` cut to about ``keep`` characters (two thirds head, one third tail, a marker
    between), lines that name a handle kept whole; ``text`` itself when the cut would not be
    shorter (a few words are never traded for the longer marker)."""
    if len(text) <= keep:
        return text
    first, body, last = _protected(text)
    room = max(keep - len(first) - len(last), 0)
    head, tail = body[: room * 2 // 3], body[len(body) - room // 3 :] if room // 3 else ""
    shortened = first + (head + MARKER + tail if room else MARKER.strip()) + last
    return shortened if len(shortened) < len(text) else text


def shorten(message: Message, tokens: int, estimate: Estimate) -> Message:
    """``message`` cut to at most ``tokens`` tokens, or as close as its handle lines allow: its
    text first (its images and files kept after it, unless they alone are over), then the
    arguments of its tool calls (kept as JSON)."""
    text, others = split_text(message)
    keep = len(text)
    candidate = message
    while keep > 0 and estimate([candidate])[0] > tokens:
        keep = keep * 3 // 4 if keep > 16 else 0
        candidate = with_text(message, cut(text, keep), others)
    if others and estimate([candidate])[0] > tokens:  # the images alone are over: the text alone
        return shorten(replace_content(message, text_of(message)), tokens, estimate)
    calls = list(candidate.tool_calls)
    size = max((len(c.arguments) for c in calls), default=0)
    while calls and estimate([candidate])[0] > tokens and size > 0:
        size = size * 3 // 4 if size > 16 else 0
        calls = [attrs.evolve(c, arguments=_cut_arguments(c.arguments, size)) for c in message.tool_calls]
        candidate = attrs.evolve(candidate, tool_calls=tuple(calls), raw=None)
    return candidate


def _cut_arguments(arguments: str, size: int) -> str:
    if len(arguments) <= size:
        return arguments
    return json.dumps({"truncated_arguments": cut(arguments, size)})


def fit_group(group: list[Message], budget: int, estimate: Estimate) -> list[Message] | None:
    """The group shortened to fit ``budget``, or None if even its bare structure does not."""
    counts = estimate(group)
    if sum(counts) <= budget:
        return group
    out = list(group)
    # Shorten the largest messages first, until the group fits.
    for i in sorted(range(len(out)), key=lambda j: -counts[j]):
        others = sum(counts) - counts[i]
        out[i] = shorten(out[i], max(budget - others, 0), estimate)
        counts[i] = estimate([out[i]])[0]
        if sum(counts) <= budget:
            return out
    return None


class TokenBudgetFallback:
    @hookimpl(trylast=True)
    def fallback_compact(
        self, messages: Sequence[Message], pinned: int, budget: int, estimate: Estimate, limit: int
    ) -> list[Message]:
        head = list(messages[:pinned])
        head_counts = estimate(head)
        older = groups(messages[pinned:])
        # The budget is a target, the window the limit: pinned messages over the budget are cut
        # only as far as the window demands once the newest exchange has its room (twice its
        # size: it may take half of what the window leaves), never below the budget.
        newest_tokens = sum(estimate(older[-1])) if older else 0
        target = max(budget, limit - 2 * newest_tokens)
        if sum(head_counts) > target:
            head = self._fit_pinned(head, head_counts, target, estimate)
        used = sum(estimate(head))
        kept: list[list[Message]] = []
        if older:
            newest = older.pop()
            # The newest exchange may take the budget's room, or half of what the window has
            # left if that is more; it is cut further only if the window demands it.
            room = max(budget - used, (limit - used) // 2)
            fitted = fit_group(newest, room, estimate) or fit_group(newest, limit - used, estimate)
            if fitted is None:  # older exchanges alone would pass for the newest: none is kept
                return head
            kept.append(fitted)
            used += sum(estimate(fitted))
        for group in reversed(older):
            size = sum(estimate(group))
            if used + size > budget:
                break
            kept.append(group)
            used += size
        return head + [m for group in reversed(kept) for m in group]

    @staticmethod
    def _fit_pinned(head: list[Message], counts: list[int], budget: int, estimate: Estimate) -> list[Message]:
        # The messages after the system message (the user's request pinned, the compaction message
        # with the later instructions) share what the system message leaves: the shorter stay
        # whole, the longer are cut to the same size. Cut one first, and a long request left no
        # room for the instructions that changed it.
        rest = [i for i, m in enumerate(head) if m.role not in ("system", "developer")]
        room = budget - sum(c for i, c in enumerate(counts) if i not in rest)
        if len(rest) > 1 and 0 < room < sum(counts[i] for i in rest):
            level = _level(sorted(counts[i] for i in rest), room)
            for i in rest:
                keep = max(level, min(counts[i], budget // PINNED_SHARE))  # its eighth, below (the system gives way)
                if counts[i] > keep:
                    head[i] = shorten(head[i], keep, estimate)
                    counts[i] = estimate([head[i]])[0]
        # Then the compaction message first, the system message last; but the request and the
        # compaction message (the user's goal, its later changes) keep an eighth of the budget
        # each while the system message can give way, and lose it only if it cannot.
        floors = [min(c, budget // PINNED_SHARE) if i in rest else 0 for i, c in enumerate(counts)]
        for floor in (floors, [0] * len(head)):
            for i in range(len(head) - 1, -1, -1):
                over = sum(counts) - budget
                if over <= 0:
                    return head
                head[i] = shorten(head[i], max(counts[i] - over, floor[i]), estimate)
                counts[i] = estimate([head[i]])[0]
        return head


def _level(sizes: Sequence[int], room: int) -> int:
    """The size to which the longest of ``sizes`` (ascending) are cut for all to fit ``room``."""
    left = room
    for k, size in enumerate(sizes):
        share = left // (len(sizes) - k)
        if size > share:
            return share
        left -= size
    return left + sizes[-1]
