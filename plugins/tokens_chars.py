"""``tokens-chars``: the seed's token estimate, characters ÷ 4 (seed section 2.2)."""

from __future__ import annotations

from typing import Sequence

import attrs

from progressive_compactor.hookspecs import hookimpl
from progressive_compactor.messages import char_count
from progressive_compactor.models import Message

MESSAGE_OVERHEAD = 0
"""Tokens added per message for role and separators; 0 keeps the seed's plain characters ÷ 4."""


class CharTokens:
    @attrs.frozen
    class Config:
        chars_per_token: float = 4.0
        message_overhead: int = MESSAGE_OVERHEAD

    def __init__(self, config: Config | None = None):
        self.config = config or self.Config()
        if self.config.chars_per_token <= 0:
            from progressive_compactor.errors import ConfigError

            raise ConfigError(["chars_per_token must be positive @ $.config.tokens-chars.chars_per_token"])

    @hookimpl(trylast=True)
    def estimate_tokens(self, messages: Sequence[Message]) -> list[int]:
        per = self.config.chars_per_token
        extra = self.config.message_overhead
        return [int(char_count(m) / per + 0.999) + extra for m in messages]
