"""``policy-cost``: compact when it pays for itself, inside the window's safety thresholds.

A view that stays large is re-read on every call, cached or not. Compacting costs a summary
(its input and output) and one full-price re-read of the new, smaller view (the prompt cache
breaks). With a view growing by ``g`` tokens a turn, compacting whenever it has grown by ``D``
tokens over what a compaction leaves (``L``: the compaction message, the kept head and the tail)
costs, per turn, on average::

    (L + D/2) × p_cached                      re-reading the view
    + g × p_summary_in                         every token is summarized once
    + g × (S × p_summary_out + R × p_summary_in + L × (p_in − p_cached)) / D
                                               one summary and one cache break per D/g turns

The first term grows with ``D``, the last shrinks: the cheapest ``D`` is
``sqrt(2 g (S p_summary_out + R p_summary_in + L (p_in − p_cached)) / p_cached)``. With the
default prices ($3 input, $0.30 cached, $15 output per million) and what the corpus shows (``g`` ≈
550 tokens a turn, a summary written as a delta of ``S`` ≈ 400 tokens, ``R`` ≈ 600 tokens of
request besides the messages, ``L`` ≈ 2,500 to 6,000) that is about 7,300 to 9,400 tokens:
compacting at 10,000 to 15,000 tokens costs less than waiting for 70 % of a 128k window.
Without a prompt cache (``cached_input`` equal to ``input``) the break costs nothing and ``D``
comes out smaller still.
With re-reads free (``cached_input`` 0, as for a local model priced at 0) a smaller view saves
nothing: the cost trigger never fires, and only the thresholds compact.

The plugin keeps nothing in memory: ``g`` and ``L`` come from the session's state, which the core
updates at each compaction (``landed_tokens``, ``landed_messages``): ``g`` is what the view grew
since then per call (about two messages), with ``growth_tokens`` as a prior; ``L`` is at least
where the last compaction really landed, so that a large protected tail does not make it
compact again at once. Every worker of a fleet decides the same.

The thresholds stay the safety limits: at ``soft``, ``full`` and ``emergency`` of the window the
tier is Soft, Full and Emergency whatever the arithmetic says; Warn offloads from ``warn`` on.
Below them, the cost trigger asks for Soft (see ``docs/cost.md`` for the arithmetic).
"""

from __future__ import annotations

import functools
import math

import attrs

from progressive_compactor.plugin import (
    CompactionTier,
    PluginContext,
    SessionState,
    Thresholds,
    TurnContext,
    hookimpl,
    setting_check,
    thresholds_of,
    tier_for_share,
)

MESSAGES_PER_CALL = 2
"""An agent's call adds about two messages to the history: its reply and a tool result."""
PRIOR_CALLS = 4
"""How many calls' worth ``growth_tokens`` counts for, against what the session shows."""
SETTLE_CALLS = 5
"""After a compaction, the next waits at least this many calls' growth past where it landed."""


@attrs.frozen
class Cycle:
    """What the cost model decided for one view: where compacting starts to pay, and why."""

    growth: float
    landing: float
    interval: float
    trigger: float


class CostPolicy:
    @attrs.frozen
    class Config(Thresholds):
        BLOCK = "policy-cost"
        growth_tokens: int = attrs.field(
            default=550, validator=setting_check(lambda v: v > 0, "growth_tokens must be more than 0, got {value}")
        )
        """Tokens a turn adds to the view, assumed until the session shows its own."""
        summary_tokens: int = attrs.field(
            default=400, validator=setting_check(lambda v: v > 0, "summary_tokens must be more than 0, got {value}")
        )
        """Tokens a summarizer writes per compaction (the output it is billed for), assumed until
        the session's summaries show their own (``SessionState.summary_tokens_out``)."""
        request_tokens: int = attrs.field(
            default=600, validator=setting_check(lambda v: v >= 0, "request_tokens must be 0 or more, got {value}")
        )
        """Tokens of a summary request besides the messages it summarizes (instructions, facts)."""
        keep_share: float = attrs.field(
            default=0.03,
            validator=setting_check(lambda v: 0 <= v < 1, "keep_share must be at least 0 and below 1, got {value}"),
        )
        """Share of the view a compaction keeps as recent text besides the tail (``tier-soft``'s
        ``keep_share``); it raises the landing point ``L``."""
        min_trigger_tokens: int = attrs.field(
            default=4000,
            validator=setting_check(lambda v: v >= 0, "min_trigger_tokens must be 0 or more, got {value}"),
        )
        """Never compact for cost below this many tokens (a small view is cheap to re-read)."""

    def __init__(self, config: Config | None = None, context: PluginContext | None = None):
        self.config = config or self.Config()
        self.context = context or PluginContext()
        self._sized: tuple[SessionState, float, float] | None = None

    def cycle(self, tokens: int, turn: TurnContext) -> Cycle:
        """Where compacting this session's view starts to pay (see the module docstring)."""
        c, state = self.config, turn.state
        growth, landed = self.growth(tokens, turn), state.landed_tokens
        tail = tokens / max(turn.view_messages, 1) * self.context.config.min_tail_messages
        summary, pinned = self._sizes(state)
        landing = summary + tail + c.keep_share * tokens
        writing, asking, fresh, cached = self._prices
        summarizing = (state.summary_tokens_out or c.summary_tokens) * writing + asking
        # A pinned request stays in the provider's cache: the break re-reads the rest of the landing.
        one_off = summarizing + max(landing - pinned, 0.0) * fresh
        # Re-reading for free (a local model, a cache billed at 0): a smaller view saves nothing.
        interval = math.sqrt(2 * growth * one_off / cached) if cached > 0 else math.inf
        # Hysteresis: whatever the arithmetic says, the view grows for a few calls past where the
        # last compaction really landed (a large protected tail) before the next one.
        settle = landed + SETTLE_CALLS * growth if landed else 0.0
        return Cycle(growth, landing, interval, max(landing + interval, settle, c.min_trigger_tokens))

    @functools.cached_property
    def _prices(self) -> tuple[float, float, float, float]:
        """A written token's price; a summary request's, besides its messages; the price of a
        token re-read fresh over cached; a cached token's."""
        prices = self.context.config.pricing
        fresh = prices.cache_write if prices.cache_write is not None else prices.input
        asking = self.config.request_tokens * prices.summarizer_input
        return prices.summarizer_output, asking, max(fresh - prices.cached_input, 0.0), prices.cached_input

    def _sizes(self, state: SessionState) -> tuple[float, float]:
        """Tokens of the state's summary (its anchors and prose) and of the pinned request; the
        last state's again while it is the same object (every turn until the next compaction)."""
        sized = self._sized  # one read: another thread may serve another session
        if sized is not None and sized[0] is state:
            return sized[1], sized[2]
        summary = (
            len(state.summary or "") + sum(len(a.content) for a in state.anchors)
        ) / 4 or self.config.summary_tokens
        pinned = len(state.anchors[0].content) / 4 if state.anchors and self.context.config.pin_request else 0.0
        self._sized = (state, summary, pinned)
        return summary, pinned

    def growth(self, tokens: int, turn: TurnContext) -> float:
        """Tokens the view grows by a call: what it grew since the last compaction (from the
        session's state, so every worker of a fleet sees the same), or before the first one, all
        but the system message; ``growth_tokens`` weighs in as :data:`PRIOR_CALLS` calls' worth."""
        state, prior = turn.state, float(self.config.growth_tokens)
        since = turn.history_messages - state.landed_messages if state.landed_messages else turn.history_messages
        grown = tokens - state.landed_tokens if state.landed_messages else tokens - turn.system_tokens
        calls = max(since, 0) / MESSAGES_PER_CALL
        return (prior * PRIOR_CALLS + max(grown, 0)) / (PRIOR_CALLS + calls)

    @hookimpl(trylast=True)
    def determine_tier(self, ratio: float, tokens: int, context_window: int, turn: TurnContext) -> CompactionTier:
        if context_window <= 0:
            return CompactionTier.NONE
        tier = tier_for_share(ratio, self.config)
        if tier >= CompactionTier.SOFT:
            return tier
        # The cost trigger judges the view a turn starts with; after a compaction in the same
        # turn the loop guard asks again, and only the thresholds decide that: the view may be
        # no smaller (all of it in the protected tail), and asking the trigger again would
        # escalate to an Emergency truncation far below the window's limits.
        if not turn.after_compaction and tokens >= turn.view_tokens and tokens >= self.cycle(tokens, turn).trigger:
            return CompactionTier.SOFT
        return tier

    @hookimpl(trylast=True)
    def tier_thresholds(self) -> dict[str, float]:
        return thresholds_of(self.config)
