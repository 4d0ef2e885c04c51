"""Tiers by share of the window: what the threshold policies have in common."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import attrs

from .errors import ConfigError
from .models import CompactionTier

THRESHOLD_NAMES = ("warn", "soft", "full", "emergency")


def check_thresholds(config: Any, block: str) -> None:
    """Raise :class:`ConfigError` unless ``config``'s ``warn``, ``soft``, ``full`` and
    ``emergency`` are shares of the window in that order (``block`` names the config block).
    Called from a plugin's ``Config.__attrs_post_init__``, so that every way of loading a config
    rejects them, an experiment's variants included: 50/60/75/90 would mean "never compact"."""
    values = {name: getattr(config, name) for name in THRESHOLD_NAMES}
    if any(v > 1 for v in values.values()):
        raise ConfigError(
            [
                f"thresholds are shares of the window (0.70 for 70 %), got {v}"
                + (f"; did you mean {v / 100:g}? " if math.isfinite(v) else " ")
                + f"@ $.config.{block}.{name}"
                for name, v in values.items()
                if v > 1
            ]
        )
    warn, soft, full, emergency = values.values()
    if not 0 < warn <= soft <= full <= emergency:
        raise ConfigError(
            [
                "thresholds must satisfy 0 < warn <= soft <= full <= emergency <= 1, got "
                f"{warn}/{soft}/{full}/{emergency} @ $.config.{block}"
            ]
        )


_HIGHEST_FIRST = (
    ("emergency", CompactionTier.EMERGENCY),
    ("full", CompactionTier.FULL),
    ("soft", CompactionTier.SOFT),
    ("warn", CompactionTier.WARN),
)


def tier_for_share(ratio: float, config: Any) -> CompactionTier:
    """The tier whose threshold ``ratio`` (the view's share of the window) has reached."""
    for name, tier in _HIGHEST_FIRST:
        if ratio >= getattr(config, name):
            return tier
    return CompactionTier.NONE


def thresholds_of(config: Any) -> dict[str, float]:
    """``tier_thresholds`` for a policy whose config has the four thresholds."""
    return {name: getattr(config, name) for name in THRESHOLD_NAMES}


@attrs.frozen
class Thresholds:
    """The four thresholds, as a threshold policy's ``Config`` inherits them: shares of the window,
    checked when the config is built (:func:`check_thresholds`, naming the block ``BLOCK``)."""

    BLOCK: ClassVar[str] = "policy"
    warn: float = 0.60
    soft: float = 0.70
    full: float = 0.80
    emergency: float = 0.95

    def __attrs_post_init__(self) -> None:
        check_thresholds(self, self.BLOCK)
