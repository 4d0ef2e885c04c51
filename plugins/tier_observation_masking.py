"""``tier-observation-masking``: all but the most recent tool results replaced by a placeholder.

The observation-masking baseline of "The Complexity Trap" (Lindenbauer et al., arXiv 2508.21433):
no summaries and no offloading; the agent keeps its own reasoning and actions, and only the
``keep_recent`` newest tool results (observations) keep their text. Masked text is gone: the
placeholder names no handle. A result shorter than its placeholder is left as it is. It answers the Warn tier, which ``policy-single-threshold`` with
``threshold: 0.0, tier: warn`` selects on every turn; the rewrite is recomputed each turn from the
history, so nothing of it is stored.
"""

from __future__ import annotations

from typing import Sequence

import attrs

from progressive_compactor.hookspecs import hookimpl
from progressive_compactor.messages import replace_content, text_of
from progressive_compactor.models import CompactionTier, Message, TierInput, TierPlan


class ObservationMaskingTier:
    @attrs.frozen
    class Config:
        keep_recent: int = 10
        placeholder: str = "[Old tool output omitted for brevity: {lines} lines]"
        """``{lines}`` and ``{chars}`` are replaced by the size of the masked output."""

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()
        if self.config.keep_recent < 0:
            from progressive_compactor.errors import ConfigError

            raise ConfigError(["keep_recent must be 0 or more @ $.config.tier-observation-masking.keep_recent"])

    def mask(self, messages: Sequence[Message]) -> list[Message]:
        """``messages`` with every tool result but the ``keep_recent`` newest masked."""
        tool_positions = [i for i, m in enumerate(messages) if m.role == "tool"]
        keep = self.config.keep_recent
        masked = set(tool_positions[: len(tool_positions) - keep] if keep else tool_positions)
        out = []
        for i, m in enumerate(messages):
            if i in masked:
                text = text_of(m)
                note = self.config.placeholder.format(lines=text.count("\n") + 1, chars=len(text))
                if len(note) < len(text):
                    m = replace_content(m, note)
            out.append(m)
        return out

    @hookimpl(trylast=True)
    def apply_tier(self, tier_input: TierInput) -> TierPlan | None:
        if tier_input.tier is not CompactionTier.WARN:
            return None
        return TierPlan(rewrite=self.mask)
