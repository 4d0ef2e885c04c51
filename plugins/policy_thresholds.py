"""``policy-thresholds``: the tier from the share of the context window the view fills.

Warn at 60 %, Soft at 70 %, Full at 80 %, Emergency at 95 % by default; each configurable, as
shares of the window between 0 and 1 (``soft: 0.70``, not ``70``).
"""

from __future__ import annotations

import attrs

from progressive_compactor.plugin import CompactionTier, ConfigError, hookimpl

TIERS = ("warn", "soft", "full", "emergency")


class ThresholdPolicy:
    @attrs.frozen
    class Config:
        warn: float = 0.60
        soft: float = 0.70
        full: float = 0.80
        emergency: float = 0.95

        def __attrs_post_init__(self) -> None:
            # Checked with the block, so that every way of loading a config (a variant of an
            # experiment included) rejects it: 50/60/75/90 would mean "never compact".
            c = self
            values = [getattr(c, name) for name in TIERS]
            if any(v > 1 for v in values):
                raise ConfigError(
                    [
                        f"thresholds are shares of the window (0.70 for 70 %), got {getattr(c, n)}; did you mean "
                        f"{getattr(c, n) / 100:g}? @ $.config.policy-thresholds.{n}"
                        for n in TIERS
                        if getattr(c, n) > 1
                    ]
                )
            if not 0 < c.warn <= c.soft <= c.full <= c.emergency:
                raise ConfigError(
                    [
                        "thresholds must satisfy 0 < warn <= soft <= full <= emergency <= 1, got "
                        f"{c.warn}/{c.soft}/{c.full}/{c.emergency} @ $.config.policy-thresholds"
                    ]
                )

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()

    @hookimpl(trylast=True)
    def determine_tier(self, ratio: float, context_window: int) -> CompactionTier:
        c = self.config
        if context_window <= 0:
            return CompactionTier.NONE
        if ratio >= c.emergency:
            return CompactionTier.EMERGENCY
        if ratio >= c.full:
            return CompactionTier.FULL
        if ratio >= c.soft:
            return CompactionTier.SOFT
        if ratio >= c.warn:
            return CompactionTier.WARN
        return CompactionTier.NONE

    @hookimpl(trylast=True)
    def tier_thresholds(self) -> dict[str, float]:
        return {name: getattr(self.config, name) for name in TIERS}
