"""The two-line notice of a compaction, for a terminal or a log::

⚡ Context compressed [Full] 45.2K->8.1K tokens (82% compression ratio)
   5 anchors | 3 offload(42KB) | 28 summarized | tail: 6 preserved
"""

from __future__ import annotations

from .models import CompactionRecord


def human_tokens(n: int) -> str:
    """``45213`` -> ``45.2K``; ``1_500_000`` -> ``1.5M``; small numbers as they are."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 1000:
        return f"{n / 1000:.1f}K"
    return str(n)


def human_bytes(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}MB"
    if n >= 1000:
        return f"{round(n / 1000)}KB"
    return f"{n}B"


def notice(record: CompactionRecord) -> str:
    """The two lines for one record (an empty string for tier NONE: nothing to announce)."""
    if record.tier == 0:
        return ""
    ratio = round(record.compression_ratio * 100)
    first = (
        f"⚡ Context compressed [{record.tier.label}] {human_tokens(record.tokens_before)}->"
        f"{human_tokens(record.tokens_after)} tokens ({ratio}% compression ratio)"
    )
    offloaded = sum(e.chars for e in record.offloaded)
    second = (
        f"   {len(record.anchors)} anchors | {len(record.offloaded)} offload({human_bytes(offloaded)}) | "
        f"{record.summarized} summarized | tail: {record.preserved_tail} preserved"
    )
    return f"{first}\n{second}"
