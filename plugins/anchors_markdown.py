"""``anchors-markdown``: reads the five anchors from ``## Title`` sections of summary text."""

from __future__ import annotations

from progressive_compactor.plugin import ParsedSummary, hookimpl, parse_markdown


class MarkdownAnchors:
    @hookimpl(trylast=True)
    def parse_anchors(self, text: str) -> ParsedSummary:
        return parse_markdown(text)
