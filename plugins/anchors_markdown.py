"""``anchors-markdown``: reads the five anchors from ``## Title`` sections (seed 4.4)."""

from __future__ import annotations

from progressive_compactor.anchors import parse_markdown
from progressive_compactor.hookspecs import hookimpl
from progressive_compactor.models import ParsedSummary


class MarkdownAnchors:
    @hookimpl(trylast=True)
    def parse_anchors(self, text: str) -> ParsedSummary:
        return parse_markdown(text)
