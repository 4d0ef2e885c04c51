"""The notice of a compaction, for a terminal or a log: two lines when the view changed::

    ⚡ Context compressed [Full] 45.2K->8.1K tokens (82% smaller, 6% of window)
       5 anchors | 3 offload(42KB) | 28 summarized | tail: 6 preserved

The tier is the one carried out; when the loop guard escalated past the tier the policy asked
for, both are named, the one carried out first: ``[Emergency ← Full]``. "6% of window" is the
share of the context window the view sent now takes (left out for records that do not carry the
window). A call whose tier changed nothing (a Warn with nothing to offload) gets one line that
says so instead of a "compression" of 0 %; a tier None call gets no notice at all.
"""

from __future__ import annotations

from .models import CompactionRecord, CompactionTier


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


def tier_label(record: CompactionRecord) -> str:
    """``Full``, or ``Emergency ← Full`` when the loop guard escalated past the policy's tier."""
    requested = record.requested_tier
    if requested is not None and requested != record.tier:
        return f"{record.tier.label} ← {requested.label}"
    return record.tier.label


def window_share(record: CompactionRecord) -> str | None:
    """``6% of window`` for the view sent, or None when the record does not carry the window."""
    if not record.context_window:
        return None
    return f"{record.tokens_after / record.context_window:.0%} of window"


def changed_view(record: CompactionRecord) -> bool:
    """Whether a call changed what the model sees (or went wrong): a Warn with nothing to offload
    does not. Such calls are counted per tier but neither announced nor charted."""
    return bool(
        record.offloaded
        or record.summarized
        or record.errors
        or record.fallback
        or record.tokens_after != record.tokens_before
    )


def notice(record: CompactionRecord) -> str:
    """The notice of one record: two lines when the view changed, one line when the tier changed
    nothing, and an empty string for tier None (nothing to announce)."""
    if record.tier is CompactionTier.NONE:
        return ""
    share = window_share(record)
    label = tier_label(record)
    if not changed_view(record):
        what = "nothing to offload" if record.tier is CompactionTier.WARN else "nothing compressed"
        where = f"at {share}" if share else "unchanged"
        return f"⚡ Context {where} [{label}]: {what}, view unchanged ({human_tokens(record.tokens_after)} tokens)"
    before, after = record.tokens_before, record.tokens_after
    smaller = f"{round((1 - after / before) * 100)}% smaller" if before and after < before else "not smaller"
    first = (
        f"⚡ Context compressed [{label}] {human_tokens(before)}->{human_tokens(after)} tokens "
        f"({smaller}{', ' + share if share else ''})"
    )
    offloaded = sum(e.chars for e in record.offloaded)
    second = (
        f"   {len(record.anchors)} anchors | {len(record.offloaded)} offload({human_bytes(offloaded)}) | "
        f"{record.summarized} summarized | tail: {record.preserved_tail} preserved"
    )
    if record.errors:
        second += f" | {len(record.errors)} error{'s' if len(record.errors) > 1 else ''}"
    return f"{first}\n{second}"


def describe(record: CompactionRecord) -> str:
    """The notice, or for a tier None call one line saying that nothing was needed: what
    ``CompactionRecord.summary()`` and ``str(record)`` give."""
    if record.tier is not CompactionTier.NONE:
        return notice(record)
    share = window_share(record)
    return f"⚡ No compaction needed [None]: view {human_tokens(record.tokens_after)} tokens{', ' + share if share else ''}"


__all__ = ["changed_view", "describe", "human_bytes", "human_tokens", "notice", "tier_label", "window_share"]
