"""``tier-warn``: offload large tool results of the head; no LLM call.

The lightest compaction: the message structure is unchanged and every tool call keeps its
result, only large results are replaced by a preview and a handle. With
``offload_break_factor`` it is prompt-cache aware: a result is offloaded only when the tokens
after it (which a provider's cache must then read again at full price) are at most that many
times what it saves; older results wait for the summary, which changes the view anyway.
"""

from __future__ import annotations

import attrs

from progressive_compactor.plugin import TierInput, TierPlan, hookimpl, setting_check


class WarnTier:
    @attrs.frozen
    class Config:
        offload_break_factor: float | None = attrs.field(
            default=None,
            validator=attrs.validators.optional(
                setting_check(lambda v: v > 0, "offload_break_factor must be more than 0, got {value}")
            ),
        )
        """None: offload every large result of the head."""

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()

    @hookimpl(trylast=True)
    def apply_tier(self, tier_input: TierInput) -> TierPlan:
        return TierPlan(offload=True, offload_break_factor=self.config.offload_break_factor)
