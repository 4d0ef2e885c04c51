"""Every hook of progressive-compactor, grouped by when the compactor calls it in a turn.

A plugin implements any of these with ``@hookimpl``. "firstresult" hooks stop at the first
implementation that returns something other than ``None``; built-in defaults are registered with
``trylast=True``, so any other plugin that answers wins. Broadcast hooks call every implementation,
and the compactor keeps going when one of them raises (fail-open): one failing store must not stop
the others. See CONTRIBUTING.md for a worked example of each hook.

One turn::

    compact_with_record(history)
      estimate_tokens ─► determine_tier ─► apply_tier ─► (offload, extract_memory, summarize,
      parse_anchors, todo_context | fallback_compact) ─► persist_record ─► save_state
"""

from __future__ import annotations

from typing import Awaitable, Callable, Sequence

import pluggy

from .models import (
    CompactionRecord,
    CompactionTier,
    Message,
    OffloadEntry,
    ParsedSummary,
    SessionState,
    SummaryRequest,
    SummaryResult,
    TierInput,
    TierPlan,
)

PROJECT = "progressive_compactor"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --- measuring and deciding ------------------------------------------------------------------


@hookspec(firstresult=True)
def estimate_tokens(messages: Sequence[Message]) -> Sequence[int] | None:
    """Return the token count of each message in ``messages`` (same length, same order).

    Called by the compactor once for every message it has not seen before (counts are cached), in
    batches. The default, ``tokens-chars``, is the seed's estimate: characters ÷ 4.
    Stops at the first non-None result; ``None`` means "not mine, ask the next plugin".
    """


@hookspec(firstresult=True)
def determine_tier(ratio: float, tokens: int, context_window: int) -> CompactionTier | None:
    """Return the tier for a view of ``tokens`` tokens, ``ratio`` of the window.

    Called once per turn on the view that would be sent (DESIGN.md: decided on the view, not the
    full history). The default, ``policy-thresholds``, applies 60/70/80/95 %.
    Stops at the first non-None result; ``None`` means "no opinion".
    """


@hookspec(firstresult=True)
def apply_tier(tier_input: TierInput) -> TierPlan | None:
    """Return what to do at ``tier_input.tier`` as a :class:`TierPlan`; the core carries it out.

    Called once per turn whose tier is not NONE, and again when the loop guard escalates. Each
    built-in tier plugin (``tier-warn``, ``tier-soft``, ``tier-full``, ``tier-emergency``) answers
    its own tier and returns ``None`` for the others.
    Stops at the first non-None result; ``None`` means "not my tier".
    """


# --- what a tier does ------------------------------------------------------------------------


@hookspec(firstresult=True)
def offload(message: Message, session_id: str, threshold: int) -> OffloadEntry | None:
    """Move one large tool result out of the context; return where it went.

    Called for each tool message of the part a tier offloads. Return ``None`` to skip it (no
    tool_call_id, shorter than ``threshold`` characters, already a placeholder). Raise
    :class:`~progressive_compactor.errors.OffloadError` when writing fails: the compactor keeps
    the original text and appends the error to the record (seed section 6.1).
    Stops at the first non-None result.
    """


@hookspec(firstresult=True)
def read_offloaded(handle: str) -> str | None:
    """Return the full text of the offloaded tool result named by ``handle``.

    Called by ``compactor show`` and the read tool. ``None`` means "not my handle".
    Stops at the first non-None result.
    """


@hookspec
def extract_memory(messages: Sequence[Message], session_id: str) -> None:
    """Take long-term memory from messages that are about to be summarized.

    Called before summarization with exactly the messages that will be folded into the summary.
    Broadcast, fail-open: an exception is logged and skipped silently (seed section 6.1).
    """


@hookspec(firstresult=True)
def summarize(request: SummaryRequest) -> SummaryResult | None:
    """Return the new summary text for ``request`` (the previous summary and anchors, plus only
    the messages not yet covered). The text should carry the five anchors in the format
    ``parse_anchors`` reads.

    Called by the synchronous API at Soft and Full. Raise
    :class:`~progressive_compactor.errors.SummarizerError` on failure: the compactor falls back to
    truncation and records the cause. Stops at the first non-None result.
    """


@hookspec(firstresult=True)
def asummarize(request: SummaryRequest) -> Awaitable[SummaryResult] | None:
    """Return an awaitable of the summary, for the asynchronous API.

    Called by ``acompact*``. A summarizer that does no I/O need not implement it: the async API
    then runs ``summarize`` in a worker thread. Stops at the first non-None result.
    """


@hookspec(firstresult=True)
def parse_anchors(text: str) -> ParsedSummary | None:
    """Read the five anchors and the prose from summary text.

    Called on every summary. Missing anchors come back in ``missing``; the core fills them with
    ``N/A`` and appends a note to the record's error (seed section 4.4).
    Stops at the first non-None result.
    """


@hookspec
def todo_context(session_id: str) -> str | None:
    """Return text to carry in the compaction message (the seed's todo injector), or ``None``.

    Called whenever a compaction message is written. Broadcast; every non-None answer is kept.
    """


@hookspec(firstresult=True)
def fallback_compact(
    messages: Sequence[Message],
    pinned: int,
    budget: int,
    estimate: Callable[[Sequence[Message]], list[int]],
) -> list[Message] | None:
    """Truncate ``messages`` to at most ``budget`` tokens without any LLM call.

    ``messages[:pinned]`` (the system and compaction messages) must be kept. ``estimate`` gives
    the token count of each message as the core counts them. Keep the messages you keep as the
    same objects (the core matches what was dropped by position from the end); shorten a message's
    content only when nothing else fits. The result must be a valid chat history: no tool call
    separated from its results. Called at Emergency, when the summarizer fails, and by
    ``compact_force``. Essential: the default ``fallback-token-budget`` cannot be disabled.
    Stops at the first non-None result.
    """


# --- after the turn --------------------------------------------------------------------------


@hookspec
def persist_record(record: CompactionRecord) -> None:
    """Store one CompactionRecord. Called once per turn, tier NONE included (a store may skip
    those). Broadcast, fail-open: an exception is logged as a warning and the turn goes on."""


@hookspec(firstresult=True)
def load_state(session_id: str) -> SessionState | None:
    """Return the session's saved state, or ``None`` when there is none (a new session).
    Called at the start of every turn. Stops at the first non-None result."""


@hookspec(firstresult=True)
def save_state(session_id: str, state: SessionState) -> bool | None:
    """Save the session's state after a turn that changed it. Return True when saved.
    Stops at the first non-None result."""


@hookspec
def on_delete_session(session_id: str) -> None:
    """Delete everything kept for ``session_id`` (offloaded files, records, state): the cascade
    clean-up of seed section 5.5. Broadcast, fail-open."""
