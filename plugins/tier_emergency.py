"""``tier-emergency``: offload everything large, then truncate to the token budget; no LLM call.

The last line of defence near the window's limit, where a summary request could not even be
afforded. What truncation drops stays readable through the handles of its offloaded results, and
its facts are kept in a mechanical compaction message.
"""

from __future__ import annotations

from progressive_compactor.plugin import TierInput, TierPlan, hookimpl


class EmergencyTier:
    @hookimpl(trylast=True)
    def apply_tier(self, tier_input: TierInput) -> TierPlan:
        return TierPlan(offload=True, offload_tail=True, fallback=True)
