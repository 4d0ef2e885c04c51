"""Every hook of progressive-compactor, grouped by when the compactor calls it in a turn.

A plugin implements any of these with ``@hookimpl`` and may leave out arguments it does not
need. Three kinds of hook:

- **firstresult**: the core wants one answer; implementations are called until one returns
  something other than ``None``. Built-in defaults are registered with ``trylast=True``, so any
  other plugin that answers wins.
- **role**: called only on the plugin the config selects for a role (``apply_tier``: the plugin
  of ``tier_warn`` at Warn, and so on), so the YAML role is the contract.
- **broadcast**: every implementation is called, and the compactor keeps going when one of them
  raises (fail-open): one failing store must not stop the others.

One turn::

    compact_with_record(history)
      load_state ─► estimate_tokens ─► determine_tier ─► apply_tier ─► (offload, extract_memory,
      summarize, parse_anchors, todo_context | fallback_compact) ─► save_state ─► persist_record

Commands and tools read what plugins keep through ``read_offloaded``, ``read_records``,
``list_sessions`` and ``tier_thresholds``; ``on_delete_session`` cleans a session up everywhere,
``remove_leftovers`` what crashed writers left.
"""

from __future__ import annotations

from typing import Awaitable, Callable, Mapping, Sequence

import pluggy

from .models import (
    CompactionRecord,
    CompactionTier,
    Message,
    OffloadEntry,
    ParsedSummary,
    SessionInfo,
    SessionState,
    SummaryRequest,
    SummaryResult,
    TierInput,
    TierPlan,
    TurnContext,
)

PROJECT = "progressive_compactor"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --- measuring and deciding ------------------------------------------------------------------


@hookspec(firstresult=True)
def estimate_tokens(messages: Sequence[Message]) -> Sequence[int] | None:
    """Return the token count of each message (same length, same order).

    Called by the compactor once for every message it has not seen before (counts are cached), in
    batches. Every tier decision, budget and record uses these counts. The default,
    ``tokens-chars``, counts characters ÷ 4.
    Stops at the first non-None result; ``None`` means "not mine, ask the next plugin".

    :param messages: the messages to count; a message's count must depend on it alone.
    """


@hookspec(firstresult=True)
def determine_tier(ratio: float, tokens: int, context_window: int, turn: TurnContext) -> CompactionTier | None:
    """Return the tier for a view of ``tokens`` tokens, ``ratio`` of the window.

    Called once per turn on the view that would be sent (the system message, the user's request
    pinned once a summary covers it, the compaction message and every message the summary does
    not cover), and again after a Soft or Full compaction (``turn.after_compaction``), where
    anything at Soft or above makes the loop guard escalate: a policy that compacts below the
    thresholds for another reason than the window's share must not say so then, or a compaction
    with nothing to fold escalates to truncation. The default, ``policy-thresholds``, applies
    60/70/80/95 %.
    Stops at the first non-None result; ``None`` means "no opinion" (tier None if nobody answers).

    :param ratio: ``tokens / context_window``.
    :param tokens: estimated tokens of the view.
    :param context_window: the model's window in tokens.
    :param turn: the session id, the session's state and the sizes of view and history.
    """


@hookspec
def apply_tier(tier_input: TierInput, turn: TurnContext) -> TierPlan | None:
    """Return what to do at ``tier_input.tier`` as a :class:`TierPlan`; the core carries it out.

    A role hook: called only on the plugin the config selects for the tier's role (``tier_warn``,
    ``tier_soft``, ``tier_full``, ``tier_emergency``), once per turn whose tier is not None, and
    again when the loop guard escalates. ``None`` means "do nothing at this tier" (at Emergency
    the core then truncates as ``tier-emergency`` does).

    :param tier_input: the tier, the head (uncovered messages before the protected tail), the
        tail, the view's tokens and the window.
    :param turn: the session id and the session's state.
    """


# --- what a tier does ------------------------------------------------------------------------


@hookspec(firstresult=True)
def offload(message: Message, session_id: str, threshold: int) -> OffloadEntry | None:
    """Move one large tool result out of the context; return where it went.

    Called for each tool message of the part a tier offloads, and by ``offload_tool_result`` when
    a result arrives. Return ``None`` to skip it (no tool_call_id, not over ``threshold``
    characters, already a placeholder). Raise :class:`~progressive_compactor.errors.OffloadError`
    when writing fails: the compactor keeps the original text and records the error.
    Stops at the first non-None result.

    :param message: a tool message, with its full text.
    :param session_id: the session it belongs to.
    :param threshold: offload only a text longer than this many characters.
    """


@hookspec(firstresult=True)
def read_offloaded(handle: str) -> str | None:
    """Return the full text of the offloaded tool result named by ``handle``.

    Called by ``compactor show``, the read tool and the replay's retention probes.
    Stops at the first non-None result; ``None`` means "not my handle".

    :param handle: the handle the placeholder names (``session/call_id`` for ``offload-files``).
    """


@hookspec
def extract_memory(messages: Sequence[Message], session_id: str) -> None:
    """Take long-term memory from messages that are about to be summarized.

    Called before summarization with exactly the messages that will be folded into the summary.
    Broadcast, fail-open: an exception is logged and skipped.

    :param messages: the messages about to leave the view.
    :param session_id: the session they belong to.
    """


@hookspec(firstresult=True)
def summarize(request: SummaryRequest) -> SummaryResult | None:
    """Return the new summary text for ``request``: the previous summary and anchors, and only
    the messages not yet covered. The text should carry the five anchors in the format
    ``parse_anchors`` reads.

    Called by the synchronous API at Soft and Full. Raise
    :class:`~progressive_compactor.errors.SummarizerError` on failure: the compactor falls back to
    truncation and records the cause. Stops at the first non-None result.

    :param request: what to summarize, the facts the core extracted, and the size limits.
    """


@hookspec(firstresult=True)
def asummarize(request: SummaryRequest) -> Awaitable[SummaryResult] | None:
    """Return an awaitable of the summary, for the asynchronous API.

    Called by ``acompact*``. A summarizer that does no I/O need not implement it: the async API
    then runs ``summarize`` in a worker thread. Stops at the first non-None result.

    :param request: as for ``summarize``.
    """


@hookspec(firstresult=True)
def parse_anchors(text: str) -> ParsedSummary | None:
    """Read the five anchors and the prose from summary text.

    Called on every summary. Missing anchors come back in ``missing``; the core fills them with
    ``N/A`` and records an error. Stops at the first non-None result.

    :param text: the summarizer's text.
    """


@hookspec
def todo_context(session_id: str) -> str | None:
    """Return text to carry in the compaction message (a todo list, a plan), or ``None``.

    Called whenever a compaction message is written. Broadcast; every non-None answer is kept.

    :param session_id: the session whose compaction message is written.
    """


@hookspec(firstresult=True)
def fallback_compact(
    messages: Sequence[Message],
    pinned: int,
    budget: int,
    estimate: Callable[[Sequence[Message]], list[int]],
    limit: int,
) -> list[Message] | None:
    """Truncate ``messages`` without any LLM call: to ``budget`` tokens where that is possible,
    never past ``limit`` (the window) where that is.

    Keep the newest exchange (the last message and the tool results that answer it) whenever it
    fits ``limit``, shortened if need be: it is what the model must answer; when it cannot fit,
    keep no older one in its place. Keep the messages you keep as the same objects (the core
    matches what was dropped by position from the end); shorten a message's content only when
    nothing else fits, and never cut a line that names an offloaded result's handle. The result
    must be a valid chat history: no tool call separated from its results. Called at Emergency,
    when the summarizer fails, and by ``compact_force``. Essential: the default
    ``fallback-token-budget`` cannot be disabled. Stops at the first non-None result.

    :param messages: the system and compaction messages, then every uncovered message.
    :param pinned: ``messages[:pinned]`` must be kept (shortened only if they alone are over the
        budget, and then only as far as ``limit`` demands).
    :param budget: tokens the result should take.
    :param estimate: the token count of each message, as the core counts them.
    :param limit: tokens the result may never exceed (the context window): the newest exchange
        may go past the budget up to it. Both leave out what the provider counts besides the
        messages, when its reports taught the compactor that (tool definitions).
    """


# --- state and records -----------------------------------------------------------------------


@hookspec(firstresult=True)
def load_state(session_id: str) -> SessionState | None:
    """Return the session's saved state, or ``None`` when there is none (a new session).

    Called at the start of every turn. Stops at the first non-None result.

    :param session_id: the session.
    """


@hookspec(firstresult=True)
def save_state(session_id: str, state: SessionState) -> bool | None:
    """Save the session's state after a turn that changed it, compare-and-set.

    Save only when the stored state's version is ``state.version - 1`` (no stored state counts as
    version 0), atomically; return True when saved, False when another writer saved first (the
    core then starts the turn over from the newer state). Stops at the first non-None result.

    :param session_id: the session.
    :param state: the new state; its ``version`` is one more than the version it replaces.
    """


@hookspec
def persist_record(record: CompactionRecord) -> None:
    """Store one CompactionRecord.

    Called once per turn, tier None included (a store may skip those). Broadcast, fail-open: an
    exception is logged as a warning and the turn goes on.

    :param record: what the turn did.
    """


@hookspec(firstresult=True)
def read_records(session_id: str) -> Sequence[CompactionRecord] | None:
    """Return the stored records of ``session_id``, oldest first, or ``None`` if not a store.

    Called by ``compactor records``, ``report`` and ``ab report``.
    Stops at the first non-None result.

    :param session_id: the session.
    """


@hookspec
def list_sessions() -> Sequence[SessionInfo] | None:
    """Return every session this plugin keeps something for, with when it last wrote.

    Called by ``compactor gc --older-than`` and ``compactor records`` (no session given).
    Broadcast; the answers of every plugin are merged.
    """


@hookspec
def on_delete_session(session_id: str) -> None:
    """Delete everything kept for ``session_id`` (offloaded results, records, state).

    Called by ``ProgressiveCompactor.delete_session`` and ``compactor gc``. Broadcast, fail-open.

    :param session_id: the session to forget.
    """


@hookspec
def remove_leftovers(older_than: float, dry_run: bool) -> Sequence[str] | None:
    """Delete what writers killed mid-write left behind (temporary files never renamed into
    place), and the files of a deleted session that no ``list_sessions`` shows (a lock file made
    again, a copy set aside), that nobody wrote to for ``older_than`` seconds; return where each
    was, or ``None`` if this plugin leaves none.

    Called by ``compactor gc``. Broadcast; the answers of every plugin are merged.

    :param older_than: seconds since a leftover was last written, never less than any live
        writer needs between writing its temporary file and renaming it.
    :param dry_run: only say what would be deleted.
    """


# --- display ---------------------------------------------------------------------------------


@hookspec(firstresult=True)
def tier_thresholds() -> Mapping[str, float] | None:
    """Return the share of the window at which each tier starts (``{"warn": 0.6, ...}``), for
    charts and notices. A policy that decides otherwise returns ``None``.

    Called by ``compactor report``. Stops at the first non-None result.
    """
