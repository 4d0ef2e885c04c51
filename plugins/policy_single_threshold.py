"""``policy-single-threshold``: one tier at one threshold, nothing below it.

The baselines of the replay benchmark are this policy with different tiers:

- ``tier: none`` never compacts (no compaction; overflows are counted, not hidden);
- ``tier: emergency`` at 0.80 truncates to the token budget (truncation only);
- ``tier: full`` at 0.80 summarizes the whole head and keeps the tail (one threshold, as Claude
  Code and Goose compact);
- ``tier: warn`` at 0.0 runs the Warn tier on every turn (observation masking, with
  ``tier-observation-masking``).
"""

from __future__ import annotations

import attrs

from progressive_compactor.errors import ConfigError
from progressive_compactor.hookspecs import hookimpl
from progressive_compactor.models import CompactionTier

_TIERS = {t.name.lower(): t for t in CompactionTier}


class SingleThresholdPolicy:
    @attrs.frozen
    class Config:
        threshold: float = 0.80
        """Share of the context window at which ``tier`` applies."""
        tier: str = "full"
        """``none``, ``warn``, ``soft``, ``full`` or ``emergency``."""

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()
        problems = []
        if self.config.tier not in _TIERS:
            problems.append(
                f"unknown tier {self.config.tier!r}; use one of {', '.join(_TIERS)} "
                "@ $.config.policy-single-threshold.tier"
            )
        if self.config.threshold < 0:
            problems.append("threshold must be 0 or more @ $.config.policy-single-threshold.threshold")
        if problems:
            raise ConfigError(problems)
        self.tier = _TIERS[self.config.tier]

    @hookimpl(trylast=True)
    def determine_tier(self, ratio: float, tokens: int, context_window: int) -> CompactionTier:
        return self.tier if ratio >= self.config.threshold else CompactionTier.NONE
