"""``tier-full``: offload, then summarize the whole head; only the protected tail stays."""

from __future__ import annotations

from progressive_compactor.plugin import TierInput, TierPlan, hookimpl


class FullTier:
    @hookimpl(trylast=True)
    def apply_tier(self, tier_input: TierInput) -> TierPlan:
        return TierPlan(offload=True, summarize=len(tier_input.head))
