"""``tier-emergency``: forced truncation through the fallback, no LLM call (seed 2.3)."""

from __future__ import annotations

from progressive_compactor.hookspecs import hookimpl
from progressive_compactor.models import CompactionTier, TierInput, TierPlan


class EmergencyTier:
    @hookimpl(trylast=True)
    def apply_tier(self, tier_input: TierInput) -> TierPlan | None:
        if tier_input.tier is not CompactionTier.EMERGENCY:
            return None
        return TierPlan(offload=True, offload_tail=True, fallback=True)
