"""``tier-soft``: offload, then summarize the oldest part of the head.

By default the oldest half of the head (by messages), the newer half staying as original text:
it keeps the conversation's recent context while the oldest part is folded into the summary.
With ``keep_share``, the newest head messages that together take at most that share of the view
stay, and everything older is summarized: each compaction lands the view at a low-water mark,
so that the next one is many turns away. With ``offload_head``, every large result of the head is
offloaded, not only those of the part summarized: the summary changes the view's prefix anyway,
so the provider's prompt cache breaks once instead of on the next turns.
"""

from __future__ import annotations

import attrs

from progressive_compactor.plugin import TierInput, TierPlan, hookimpl, setting_check


class SoftTier:
    @attrs.frozen
    class Config:
        keep_share: float | None = attrs.field(
            default=None,
            validator=attrs.validators.optional(
                setting_check(lambda v: 0 <= v < 1, "keep_share must be at least 0 and below 1, got {value}")
            ),
        )
        """None: summarize the oldest half of the head. A share: keep the newest head messages
        that fit in it (of the view's tokens) and summarize the rest."""
        offload_head: bool = False

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()

    @hookimpl(trylast=True)
    def apply_tier(self, tier_input: TierInput) -> TierPlan:
        return TierPlan(offload=True, summarize=self.count(tier_input), offload_head=self.config.offload_head)

    def count(self, tier_input: TierInput) -> int:
        """How many of the oldest head messages to summarize."""
        head = len(tier_input.head)
        if self.config.keep_share is None or len(tier_input.head_tokens) != head:
            return head // 2
        room = self.config.keep_share * tier_input.view_tokens
        kept = 0
        for tokens in reversed(tier_input.head_tokens):
            if tokens > room:
                break
            room -= tokens
            kept += 1
        return head - kept
