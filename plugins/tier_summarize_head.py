"""``tier-summarize-head``: summarize the whole head, without offloading first.

The one-threshold baseline (what Claude Code's auto-compact and Goose do): when the view crosses
the threshold, everything before the protected tail goes to the summarizer as it is, large tool
results included, and is replaced by one summary. Set ``offload: true`` to offload large results
before summarizing, as the progressive ``tier-full`` does.
"""

from __future__ import annotations

import attrs

from progressive_compactor.plugin import TierInput, TierPlan, hookimpl


class SummarizeHeadTier:
    @attrs.frozen
    class Config:
        offload: bool = False

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()

    @hookimpl(trylast=True)
    def apply_tier(self, tier_input: TierInput) -> TierPlan:
        return TierPlan(offload=self.config.offload, summarize=len(tier_input.head))
