"""``summarize-extractive``: the offline default summarizer. Deterministic, no network.

It writes the five anchors from the facts the core extracted: the user's request verbatim (bounded)
and later instructions, the files created, edited and read, the decisions the agent stated, the
commands that failed with their error line, and the last stated next step. The prose keeps the
previous summary and adds one paragraph per compaction: the tools the agent ran and what it said,
in short.

With ``delta`` it writes what an LLM summarizer in delta mode is asked for: only what the new
messages add beyond the facts (which the core adds to the summary itself), so one paragraph; the
anchors are N/A.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import attrs

from progressive_compactor.plugin import (
    Message,
    SummaryRequest,
    SummaryResult,
    bound_text,
    empty_anchors,
    facts_as_anchors,
    format_summary,
    hookimpl,
    merge_anchors,
    one_line,
    setting_check,
    text_of,
)


class ExtractiveSummarizer:
    @attrs.frozen
    class Config:
        max_prose_chars: int = attrs.field(
            default=6000,
            validator=setting_check(lambda v: v >= 200, "max_prose_chars must be 200 or more, got {value}"),
        )
        delta: bool = False
        """Write only what the new messages add beyond the facts (one paragraph), for the core to
        merge into the previous summary with the facts: a shorter summary to write, as an LLM
        summarizer in delta mode is asked for, and nothing of the previous one to read."""

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()

    @hookimpl(trylast=True)
    def summarize(self, request: SummaryRequest) -> SummaryResult:
        if self.config.delta:  # the facts are the core's to add: not copied, not billed twice
            return SummaryResult(
                text=format_summary(empty_anchors(), self._paragraph(request)), model="extractive", delta=True
            )
        merged = merge_anchors(request.previous_anchors, facts_as_anchors(request.facts))
        prose = self._prose(request)
        text = format_summary(merged, prose)
        limit = request.max_summary_tokens * 4
        if len(text) > limit:  # keep the anchors whole, shorten the prose
            room = max(limit - len(format_summary(merged, "")), 200)
            text = format_summary(merged, bound_text(prose, room))
        return SummaryResult(text=text, model="extractive")

    @staticmethod
    def _tool_counts(messages: Sequence[Message]) -> list[tuple[str, int]]:
        counts: Counter[str] = Counter()
        for m in messages:
            for call in m.tool_calls:
                counts[call.name] += 1
        return counts.most_common(8)

    def _prose(self, request: SummaryRequest) -> str:
        paragraph = self._paragraph(request)
        previous = (request.previous_summary or "").strip()
        prose = f"{previous}\n\n{paragraph}" if previous and previous != "N/A" else paragraph
        if len(prose) > self.config.max_prose_chars:
            prose = "..." + prose[-self.config.max_prose_chars :]
        return prose

    def _paragraph(self, request: SummaryRequest) -> str:
        """One paragraph on the new messages: the tools the agent ran and what it said, in short."""
        roles = Counter(m.role for m in request.messages)
        said = [one_line(text_of(m), 200) for m in request.messages if m.role == "assistant" and text_of(m).strip()]
        paragraph = (
            f"Compacted {len(request.messages)} messages ({roles['user']} from the user, "
            f"{roles['assistant']} from the assistant, {roles['tool']} tool results)."
        )
        counts = self._tool_counts(request.messages)
        if counts:
            paragraph += " Tool calls: " + ", ".join(f"{name} x{n}" for name, n in counts) + "."
        if said:
            paragraph += " The assistant said, among other things: " + " | ".join(said[-4:])
        return paragraph
