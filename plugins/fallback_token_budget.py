"""``fallback-token-budget``: truncation to a token budget, no LLM call.

Keeps the pinned messages (system and compaction message), then whole groups (a message with the
tool results that answer it) from the newest back while they fit. When not even the newest group
fits, its content is shortened to fit, with a marker; when the pinned messages alone are over the
budget, they are shortened too (the compaction message first, the system message last). The
result always fits the budget and never separates a tool call from its result.
"""

from __future__ import annotations

from typing import Callable, Sequence

from progressive_compactor.plugin import Message, hookimpl, is_split_point, replace_content, text_of

Estimate = Callable[[Sequence[Message]], list[int]]
MARKER = "\n[... truncated to fit the context window ...]\n"


def groups(messages: Sequence[Message]) -> list[list[Message]]:
    """Messages cut at split points: each tool message stays with the message before it."""
    out: list[list[Message]] = []
    for i, m in enumerate(messages):
        if out and not is_split_point(messages, i):
            out[-1].append(m)
        else:
            out.append([m])
    return out


def shorten(message: Message, tokens: int, estimate: Estimate) -> Message:
    """``message`` with its text cut (head and tail kept) to at most ``tokens`` tokens."""
    text = text_of(message)
    keep = len(text)
    while keep > 0:
        keep = keep * 3 // 4 if keep > 16 else 0
        head, tail = text[: keep * 2 // 3], text[len(text) - keep // 3 :] if keep // 3 else ""
        candidate = replace_content(message, head + MARKER + tail if keep else MARKER.strip())
        if estimate([candidate])[0] <= tokens:
            return candidate
    return replace_content(message, "")


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
        self, messages: Sequence[Message], pinned: int, budget: int, estimate: Estimate
    ) -> list[Message]:
        head = list(messages[:pinned])
        head_counts = estimate(head)
        if sum(head_counts) > budget:
            head = self._fit_pinned(head, head_counts, budget, estimate)
        left = budget - sum(estimate(head))
        kept: list[list[Message]] = []
        for group in reversed(groups(messages[pinned:])):
            size = sum(estimate(group))
            if size <= left:
                kept.append(group)
                left -= size
                continue
            if not kept:  # nothing fits yet: keep the newest group, shortened
                fitted = fit_group(group, left, estimate)
                if fitted is not None:
                    kept.append(fitted)
            break
        return head + [m for group in reversed(kept) for m in group]

    @staticmethod
    def _fit_pinned(head: list[Message], counts: list[int], budget: int, estimate: Estimate) -> list[Message]:
        order = list(range(len(head) - 1, -1, -1))  # compaction message first, system last
        for i in order:
            over = sum(counts) - budget
            if over <= 0:
                break
            head[i] = shorten(head[i], max(counts[i] - over, 0), estimate)
            counts[i] = estimate([head[i]])[0]
        return head
