"""``tier-full``: offload and summarize the whole head (seed 2.3, TierFull)."""

from __future__ import annotations

from progressive_compactor.hookspecs import hookimpl
from progressive_compactor.models import CompactionTier, TierInput, TierPlan


class FullTier:
    @hookimpl(trylast=True)
    def apply_tier(self, tier_input: TierInput) -> TierPlan | None:
        if tier_input.tier is not CompactionTier.FULL:
            return None
        return TierPlan(offload=True, summarize=len(tier_input.head))
