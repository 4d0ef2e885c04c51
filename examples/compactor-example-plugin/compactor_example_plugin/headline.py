"""``example-headline``: a summarizer that writes each anchor as one headline.

It shows the ``summarize`` hook: the request carries only the messages not yet covered, the
previous summary and anchors, and the facts the core extracted from the messages. The text it
returns uses the ``## Title`` sections that the default ``anchors-markdown`` plugin reads, so the
five anchors come out of it without a parser of its own. Like every plugin, it imports from
``progressive_compactor.plugin`` only: the declared plugin API.
"""

from __future__ import annotations

import attrs

from progressive_compactor.plugin import Anchor, AnchorType, SummaryRequest, SummaryResult, format_summary, hookimpl

MARKER = "Headline summary"
"""The prose starts with this, so a test (or a reader) sees which summarizer wrote it."""


def headline(text: str | None, limit: int) -> str:
    """The first line of ``text``, cut to ``limit`` characters; ``N/A`` when there is none."""
    lines = (text or "").strip().splitlines()
    line = lines[0].strip() if lines else ""
    if not line:
        return "N/A"
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


class HeadlineSummarizer:
    """Five one-line anchors and a one-line prose: the shortest summary that keeps the anchors."""

    @attrs.frozen
    class Config:
        max_chars: int = 160
        """Longest headline, in characters."""

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()

    @hookimpl
    def summarize(self, request: SummaryRequest) -> SummaryResult:
        facts = request.facts
        previous = {a.type: a.content for a in request.previous_anchors}
        files = [*facts.files_created, *facts.files_edited]
        limit = self.config.max_chars
        anchors = [
            Anchor(AnchorType.USER_INTENT, headline(facts.user_request or previous.get(AnchorType.USER_INTENT), limit)),
            Anchor(
                AnchorType.EXECUTION_PROGRESS,
                headline(
                    f"Changed {', '.join(files)}" if files else previous.get(AnchorType.EXECUTION_PROGRESS), limit
                ),
            ),
            Anchor(AnchorType.KEY_DECISION, headline(facts.decisions[-1] if facts.decisions else None, limit)),
            Anchor(
                AnchorType.TRIED_SOLUTION,
                headline(facts.failed_commands[-1] if facts.failed_commands else None, limit),
            ),
            Anchor(AnchorType.NEXT_STEP, headline(facts.next_step, limit)),
        ]
        prose = f"{MARKER}: {len(request.messages)} messages folded in"
        if request.previous_summary:
            prose += " on top of the previous summary"
        text = format_summary(anchors, prose + ".")
        return SummaryResult(text=text, tokens_in=request.replaced_tokens, tokens_out=len(text) // 4, model="headline")
