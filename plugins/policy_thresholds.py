"""``policy-thresholds``: the tier from the share of the window in use (seed section 2.2)."""

from __future__ import annotations

import attrs

from progressive_compactor.errors import ConfigError
from progressive_compactor.hookspecs import hookimpl
from progressive_compactor.models import CompactionTier


class ThresholdPolicy:
    @attrs.frozen
    class Config:
        warn: float = 0.60
        soft: float = 0.70
        full: float = 0.80
        emergency: float = 0.95

    def __init__(self, config: Config | None = None):
        self.config = c = config or self.Config()
        if not 0 < c.warn <= c.soft <= c.full <= c.emergency:
            raise ConfigError(
                [
                    "thresholds must satisfy 0 < warn <= soft <= full <= emergency, got "
                    f"{c.warn}/{c.soft}/{c.full}/{c.emergency} @ $.config.policy-thresholds"
                ]
            )

    @hookimpl(trylast=True)
    def determine_tier(self, ratio: float, tokens: int, context_window: int) -> CompactionTier:
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
