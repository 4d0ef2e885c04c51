"""``tokens-chars``: the token estimate from characters, 4 to a token by default.

Characters ÷ 4 is the usual approximation for English text and code (about ±10 %); it counts
message content, tool-call names and arguments, an image part as a fixed size, and any other part
or carried Anthropic block (a thinking block, a PDF) by its size (``char_count``).
"""

from __future__ import annotations

from typing import Sequence

import attrs

from progressive_compactor.plugin import Message, char_count, hookimpl, setting_check


class CharTokens:
    @attrs.frozen
    class Config:
        chars_per_token: float = attrs.field(
            default=4.0, validator=setting_check(lambda v: v > 0, "chars_per_token must be more than 0, got {value}")
        )
        message_overhead: int = attrs.field(
            default=0, validator=setting_check(lambda v: v >= 0, "message_overhead must be 0 or more, got {value}")
        )
        """Tokens added per message for role and separators; 0 counts characters alone."""

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()

    @hookimpl(trylast=True)
    def estimate_tokens(self, messages: Sequence[Message]) -> list[int]:
        per = self.config.chars_per_token
        extra = self.config.message_overhead
        return [int(char_count(m) / per + 0.999) + extra for m in messages]
