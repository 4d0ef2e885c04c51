"""``tier-observation-masking``: all but the most recent tool results replaced by a placeholder.

The observation-masking baseline of "The Complexity Trap" (Lindenbauer et al., arXiv 2508.21433):
no summaries and no offloading; the agent keeps its own reasoning and actions, and only the
``keep_recent`` newest tool results (observations) keep their text. Masked text is gone: the
placeholder names no handle. A result shorter than its placeholder is left as it is. Select it for
the tier ``policy-single-threshold`` chooses (``threshold: 0.0, tier: warn`` runs it on every
turn); the rewrite is recomputed each turn from the history, so nothing of it is stored.
"""

from __future__ import annotations

import re
import string
from typing import Sequence

import attrs

from progressive_compactor.plugin import Message, TierInput, TierPlan, hookimpl, replace_content, setting_check, text_of


def _fills(placeholder: str) -> bool:
    """Whether ``placeholder`` can be filled with the size of a masked output: it names ``lines``
    and ``chars`` alone (no index, no attribute), with no width of thousands of characters nor
    one taken from the other (``{lines:{chars}}``: a masked output's size of spaces)."""
    try:
        for _, name, spec, _ in string.Formatter().parse(placeholder):
            if name not in (None, "lines", "chars") or "{" in (spec or "") or re.search(r"\d{4}", spec or ""):
                return False
        placeholder.format(lines=1, chars=1)
    except Exception:  # noqa: BLE001 - any format string that does not fill is refused alike
        return False
    return True


class ObservationMaskingTier:
    @attrs.frozen
    class Config:
        keep_recent: int = attrs.field(
            default=10, validator=setting_check(lambda v: v >= 0, "keep_recent must be 0 or more, got {value}")
        )
        placeholder: str = attrs.field(
            default="[Old tool output omitted for brevity: {lines} lines]",
            validator=setting_check(
                _fills,
                "placeholder may name only {{lines}} and {{chars}} (write {{{{ and }}}} for a brace), got {value!r}",
            ),
        )
        """``{lines}`` and ``{chars}`` are replaced by the size of the masked output."""

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()

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
    def apply_tier(self, tier_input: TierInput) -> TierPlan:
        return TierPlan(rewrite=self.mask)
