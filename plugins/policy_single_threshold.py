"""``policy-single-threshold``: one tier at one threshold, nothing below it.

The baselines of the replay benchmark are this policy with different tiers:

- ``tier: none`` never compacts (no compaction; overflows are counted, not hidden);
- ``tier: emergency`` at 0.80 truncates to the token budget (truncation only);
- ``tier: full`` at 0.80 summarizes the whole head and keeps the tail (one threshold, as Claude
  Code and Goose compact);
- ``tier: warn`` at 0.0 runs the Warn tier on every turn (observation masking, with
  ``tier-observation-masking`` selected for ``tier_warn``).
"""

from __future__ import annotations

import math

import attrs

from progressive_compactor.plugin import CompactionTier, ConfigError, hookimpl

_TIERS = {t.name.lower(): t for t in CompactionTier}


class SingleThresholdPolicy:
    @attrs.frozen
    class Config:
        threshold: float = 0.80
        """Share of the context window (0 to 1) at which ``tier`` applies."""
        tier: str = "full"
        """``none``, ``warn``, ``soft``, ``full`` or ``emergency``."""

        def __attrs_post_init__(self) -> None:
            # Checked with the block, so that every way of loading a config rejects it.
            problems = []
            if self.tier not in _TIERS:
                problems.append(
                    f"unknown tier {self.tier!r}; use one of {', '.join(_TIERS)} @ $.config.policy-single-threshold.tier"
                )
            if not 0 <= self.threshold <= 1:
                hint = f"; did you mean {self.threshold / 100:g}?" if 1 < self.threshold < math.inf else ""
                problems.append(
                    f"threshold is a share of the window between 0 and 1, got {self.threshold}{hint} "
                    "@ $.config.policy-single-threshold.threshold"
                )
            if problems:
                raise ConfigError(problems)

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()
        self.tier = _TIERS[self.config.tier]

    @hookimpl(trylast=True)
    def determine_tier(self, ratio: float) -> CompactionTier:
        return self.tier if ratio >= self.config.threshold else CompactionTier.NONE

    @hookimpl(trylast=True)
    def tier_thresholds(self) -> dict[str, float]:
        return {} if self.tier is CompactionTier.NONE else {self.config.tier: self.config.threshold}
