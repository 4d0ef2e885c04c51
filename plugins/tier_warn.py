"""``tier-warn``: offload large tool results in the head; no LLM call (seed 2.3, TierWarn)."""

from __future__ import annotations

from progressive_compactor.hookspecs import hookimpl
from progressive_compactor.models import CompactionTier, TierInput, TierPlan


class WarnTier:
    @hookimpl(trylast=True)
    def apply_tier(self, tier_input: TierInput) -> TierPlan | None:
        if tier_input.tier is not CompactionTier.WARN:
            return None
        return TierPlan(offload=True)
