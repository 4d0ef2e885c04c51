"""``policy-thresholds``: the tier from the share of the context window the view fills.

Warn at 60 %, Soft at 70 %, Full at 80 %, Emergency at 95 % by default; each configurable, as
shares of the window between 0 and 1 (``soft: 0.70``, not ``70``).
"""

from __future__ import annotations

import attrs

from progressive_compactor.plugin import CompactionTier, Thresholds, hookimpl, thresholds_of, tier_for_share


class ThresholdPolicy:
    @attrs.frozen
    class Config(Thresholds):
        BLOCK = "policy-thresholds"

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()

    @hookimpl(trylast=True)
    def determine_tier(self, ratio: float, context_window: int) -> CompactionTier:
        return tier_for_share(ratio, self.config) if context_window > 0 else CompactionTier.NONE

    @hookimpl(trylast=True)
    def tier_thresholds(self) -> dict[str, float]:
        return thresholds_of(self.config)
