"""``tier-soft``: offload and summarize the oldest half of the head (seed 2.3, TierSoft)."""

from __future__ import annotations

from progressive_compactor.hookspecs import hookimpl
from progressive_compactor.models import CompactionTier, TierInput, TierPlan


class SoftTier:
    @hookimpl(trylast=True)
    def apply_tier(self, tier_input: TierInput) -> TierPlan | None:
        if tier_input.tier is not CompactionTier.SOFT:
            return None
        return TierPlan(offload=True, summarize=len(tier_input.head) // 2)
