"""``tier-soft``: offload, then summarize the oldest half of the head.

The newer half of the head stays as original text, which keeps the conversation's recent
context while the oldest part is folded into the summary.
"""

from __future__ import annotations

from progressive_compactor.plugin import TierInput, TierPlan, hookimpl


class SoftTier:
    @hookimpl(trylast=True)
    def apply_tier(self, tier_input: TierInput) -> TierPlan:
        return TierPlan(offload=True, summarize=len(tier_input.head) // 2)
