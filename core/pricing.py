"""Billed cost of an agent's LLM calls: a price table and the arithmetic.

A compaction policy is judged on what the provider bills, not only on how small the view is: every
change to an earlier message makes a provider with a prompt cache re-read everything after it at
full price. Every LLM call is billed as::

    (view_tokens - cached_tokens) × input
    + cached_tokens × cached_input
    + output_tokens × output
    + (summarizer_tokens_in - summarizer_tokens_in_cached) × summarizer_input
    + summarizer_tokens_in_cached × summarizer_cached_input
    + summarizer_tokens_out × summarizer_output

all prices in US dollars per million tokens. ``cached_tokens`` is the view's prefix that equals
the previous call's view (what a provider's prompt cache would serve); a cache-friendly summary
request reads the same prefix (``summarizer_tokens_in_cached``), billed at
``summarizer_cached_input`` (by default ``cached_input``: the same model's cache). Cache writes are billed as
plain input (OpenAI's rule; Anthropic bills them at 1.25 × input, set ``cache_write`` for that).

Defaults (``DEFAULT_PRICES``): input 3.00, cached input 0.30, output 15.00, and the summarizer
billed at the same 3.00 / 15.00, as when the agent's own model writes the summary (what Claude
Code and Goose do). These are the list prices of a mid-size frontier model in 2025; override them
in the ``pricing`` section of the YAML config (it is also what cost-aware policies decide with)::

    pricing: {input: 2.5, cached_input: 1.25, output: 10.0, summarizer_input: 0.15, summarizer_output: 0.6}
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from .converters import SettingError

PER = 1_000_000


def _not_negative(instance: Any, attribute: Any, value: float | None) -> None:
    if value is not None and not (value >= 0 and math.isfinite(value)):  # NaN fails both
        raise SettingError(
            f"a price must be a finite number, 0 or more (US dollars per million tokens), got {value}", attribute.name
        )


@attrs.frozen
class PriceTable:
    """US dollars per million tokens."""

    input: float = attrs.field(default=3.00, validator=_not_negative)
    cached_input: float = attrs.field(default=0.30, validator=_not_negative)
    output: float = attrs.field(default=15.00, validator=_not_negative)
    summarizer_input: float = attrs.field(default=3.00, validator=_not_negative)
    summarizer_output: float = attrs.field(default=15.00, validator=_not_negative)
    summarizer_cached_input: float | None = attrs.field(default=None, validator=_not_negative)
    """A summary request's input read from the prompt cache (None: ``cached_input``)."""
    cache_write: float | None = attrs.field(default=None, validator=_not_negative)
    """Price of the uncached part of a view when it differs from ``input`` (Anthropic: 1.25 ×)."""


DEFAULT_PRICES = PriceTable()


@attrs.frozen
class Cost:
    """A billed cost in US dollars, split by what it pays for."""

    input: float = 0.0
    cached_input: float = 0.0
    output: float = 0.0
    summarizer: float = 0.0

    @property
    def total(self) -> float:
        return self.input + self.cached_input + self.output + self.summarizer

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.input + other.input,
            self.cached_input + other.cached_input,
            self.output + other.output,
            self.summarizer + other.summarizer,
        )


def call_cost(
    prices: PriceTable,
    *,
    view_tokens: int,
    cached_tokens: int = 0,
    output_tokens: int = 0,
    summarizer_tokens_in: int = 0,
    summarizer_tokens_out: int = 0,
    summarizer_tokens_in_cached: int = 0,
) -> Cost:
    """The cost of one LLM call as the module docstring gives it.

    ``cached_tokens`` larger than ``view_tokens`` is clamped (it cannot be cached beyond what is
    sent); negative counts are an error in the caller and raise ``ValueError``.
    """
    counts = (
        view_tokens,
        cached_tokens,
        output_tokens,
        summarizer_tokens_in,
        summarizer_tokens_out,
        summarizer_tokens_in_cached,
    )
    if min(counts) < 0:
        raise ValueError(f"token counts must not be negative: {counts}")
    cached = min(cached_tokens, view_tokens)
    fresh_price = prices.input if prices.cache_write is None else prices.cache_write
    summary_cached = min(summarizer_tokens_in_cached, summarizer_tokens_in)
    summary_cached_price = (
        prices.cached_input if prices.summarizer_cached_input is None else prices.summarizer_cached_input
    )
    return Cost(
        input=(view_tokens - cached) * fresh_price / PER,
        cached_input=cached * prices.cached_input / PER,
        output=output_tokens * prices.output / PER,
        summarizer=(
            (summarizer_tokens_in - summary_cached) * prices.summarizer_input
            + summary_cached * summary_cached_price
            + summarizer_tokens_out * prices.summarizer_output
        )
        / PER,
    )


def prices_from_mapping(data: Mapping[str, Any] | None, path: str = "$.pricing") -> PriceTable:
    """A price table from a YAML mapping; unknown keys and negative prices are rejected."""
    from .converters import structure_config

    return structure_config(dict(data or {}), PriceTable, path=path)


__all__ = ["DEFAULT_PRICES", "Cost", "PriceTable", "call_cost", "prices_from_mapping"]
