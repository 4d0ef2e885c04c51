"""The data the compactor works on and produces.

Every model is a frozen attrs class with no (de)serialization code: converting from and to the
OpenAI chat dicts lives in :mod:`progressive_compactor.messages`, and records and config go through
the cattrs converters in :mod:`progressive_compactor.converters`.
"""

from __future__ import annotations

import enum
from typing import Any, Mapping

import attrs

SCHEMA_VERSION = 2
"""Version of the CompactionRecord layout; bumped whenever a field changes meaning.

Version 2 replaced the one ``error`` string of version 1 by ``errors`` (a list of causes),
``fallback`` and ``escalations``; version 1 records are still read (see ``docs/records.md``)."""

NOT_AVAILABLE = "N/A"
MAX_DROPPED_HANDLES = 200
"""A session's state keeps the handles of this many of the results that left the view."""


@attrs.frozen
class ToolCall:
    """One entry of an assistant message's ``tool_calls``."""

    id: str
    name: str
    arguments: str = ""
    type: str = "function"
    extra: Mapping[str, Any] = attrs.field(factory=dict, repr=False)
    """Keys we do not know, kept to give back unchanged."""


@attrs.frozen
class Message:
    """One OpenAI chat message.

    ``content`` is a string, ``None`` or a tuple of content parts (dicts). Keys the chat format
    does not define are kept in ``extra`` and given back unchanged. ``raw`` is the dict the message
    was read from: while role, content and tool calls are unchanged the compactor hands that very
    dict back, so unchanged messages cost nothing to return.
    """

    role: str
    content: str | tuple[Mapping[str, Any], ...] | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    extra: Mapping[str, Any] = attrs.field(factory=dict, repr=False)
    raw: Mapping[str, Any] | None = attrs.field(default=None, eq=False, repr=False)


class CompactionTier(enum.IntEnum):
    """How hard a turn compresses: the higher, the more is removed from the view."""

    NONE = 0
    WARN = 1
    SOFT = 2
    FULL = 3
    EMERGENCY = 4

    @property
    def label(self) -> str:
        return self.name.capitalize()


class AnchorType(str, enum.Enum):
    """The five anchors every summary carries, so that what matters can be checked by a program."""

    USER_INTENT = "user_intent"
    EXECUTION_PROGRESS = "execution_progress"
    KEY_DECISION = "key_decision"
    TRIED_SOLUTION = "tried_solution"
    NEXT_STEP = "next_step"

    @property
    def heading(self) -> str:
        """The Markdown heading of this anchor in summary text (``User Intent``)."""
        return ANCHOR_TITLES[self]


ANCHOR_TITLES = {
    AnchorType.USER_INTENT: "User Intent",
    AnchorType.EXECUTION_PROGRESS: "Execution Progress",
    AnchorType.KEY_DECISION: "Key Decisions",
    AnchorType.TRIED_SOLUTION: "Tried Solutions",
    AnchorType.NEXT_STEP: "Next Steps",
}


@attrs.frozen
class Anchor:
    type: AnchorType
    content: str = NOT_AVAILABLE

    @property
    def is_empty(self) -> bool:
        return self.content.strip() in ("", NOT_AVAILABLE)


@attrs.frozen
class OffloadEntry:
    """A tool result moved out of the context (into a file, a database row, ...)."""

    tool_call_id: str
    handle: str
    """What ``compactor show`` and the read tool take to read the full text back."""
    path: str
    chars: int
    """Characters of the tool result as it was in the history."""
    lines: int
    sha256: str
    """Of the text as written (secrets masked)."""
    placeholder: str = attrs.field(default="", repr=False)
    """The text that stands for the result in the view: a preview and the handle."""
    position: int = -1
    """Index of the message in the session's history after the system message (-1: offloaded
    as it arrived, outside a turn). With ``fingerprint`` it names one occurrence: a tool call id
    that a provider reuses (``call_0`` in every reply) never gets another result's placeholder."""
    fingerprint: str = ""
    """Hash of the original message, so a different message at the same position never matches."""


@attrs.frozen
class Facts:
    """What the core extracts from messages by itself, whatever the summarizer writes."""

    user_request: str | None = None
    instructions: tuple[str, ...] = ()
    """The user's later messages that are requests (instructions, constraints, changes of mind),
    each on one line and shortened: the user's goal as it changed after the first request."""
    files_created: tuple[str, ...] = ()
    files_edited: tuple[str, ...] = ()
    files_read: tuple[str, ...] = ()
    failed_commands: tuple[str, ...] = ()
    """``command -> error line``, one string each."""
    decisions: tuple[str, ...] = ()
    next_step: str | None = None
    tools_used: tuple[str, ...] = ()


@attrs.frozen
class SummaryRequest:
    """What a summarizer is asked to fold into the running summary."""

    messages: tuple[Message, ...]
    """Only the messages not yet covered; large tool results already replaced by placeholders."""
    previous_summary: str | None
    previous_anchors: tuple[Anchor, ...]
    facts: Facts
    session_id: str
    tier: CompactionTier
    max_summary_tokens: int
    """The summary should stay below this; a longer one is rejected by the loop guard."""
    replaced_tokens: int
    """Estimated tokens of ``messages``; a summary must be smaller than what it replaces."""
    view: tuple[Message, ...] = ()
    """With ``summary_requests: cache-friendly``: the view this turn would send without
    compacting (all but its newest messages is what the provider cached on the previous call),
    for a request that repeats it and asks for the summary after it. Empty otherwise."""


@attrs.frozen
class SummaryResult:
    text: str
    tokens_in: int | None = None
    """Input tokens the provider reported (None when offline or not reported)."""
    tokens_out: int | None = None
    model: str | None = None
    tokens_in_cached: int | None = None
    """Of ``tokens_in``, those the provider read from its prompt cache."""
    delta: bool = False
    """The text holds only what the new messages add (their anchors, a paragraph of prose); the
    core merges it into the previous summary. A whole summary (False) replaces the prose."""


@attrs.frozen
class ParsedSummary:
    """Anchors and prose read from summary text; all five anchors, missing ones ``N/A``."""

    anchors: tuple[Anchor, ...]
    prose: str
    missing: tuple[AnchorType, ...] = ()


@attrs.frozen
class TierPlan:
    """What a tier plugin decides to do with the view; the core carries it out.

    ``offload`` offloads large tool results in the head (or, with ``offload_tail``, in the whole
    uncovered region). ``summarize`` is how many of the oldest uncovered messages to fold into the
    summary (the core moves the split so that no tool call is separated from its results).
    ``fallback`` truncates to the token budget without any LLM call. ``rewrite`` is an optional pure
    function applied to the uncovered messages (for policies such as observation masking).
    """

    offload: bool = False
    offload_tail: bool = False
    summarize: int = 0
    fallback: bool = False
    rewrite: Any = None
    offload_head: bool = False
    """With ``offload`` and a summary of part of the head: offload the whole head, not only the
    part summarized (the summary changes the view's prefix anyway)."""
    offload_break_factor: float | None = None
    """With ``offload`` and no summary: offload a result only when the tokens after it (which a
    provider's prompt cache must then read again at full price) are at most this many times the
    tokens it saves. ``None`` offloads every large result."""


@attrs.frozen
class TierInput:
    """What a tier plugin sees when it decides."""

    tier: CompactionTier
    head: tuple[Message, ...]
    """Uncovered messages before the protected tail."""
    tail: tuple[Message, ...]
    view_tokens: int
    context_window: int
    head_tokens: tuple[int, ...] = ()
    """The token count of each message of ``head``."""
    tail_tokens: tuple[int, ...] = ()


@attrs.frozen
class SessionState:
    """What a session carries from turn to turn, kept behind a state store (the history itself
    is never changed, so the summary and what it covers live here)."""

    summary: str | None = None
    anchors: tuple[Anchor, ...] = ()
    covered: int = 0
    """How many messages after the system message the summary already covers."""
    covered_fingerprint: str | None = None
    """Hash of the covered messages, to notice a caller that passes a different history."""
    offloaded: Mapping[str, OffloadEntry] = attrs.field(factory=dict)
    """Offload entries of the messages not yet covered, keyed by their position (as a string)."""
    dropped_handles: tuple[str, ...] = ()
    """Handles of offloaded results whose placeholders were folded into the summary (the newest
    :data:`MAX_DROPPED_HANDLES`)."""
    version: int = 0
    """Bumped by every save; a state store saves only over the version before it."""
    variant: str | None = None
    """The A/B variant the session was assigned at its first turn (``ExperimentCompactor``); kept
    for the session's life, whatever later happens to the experiment's weights or name."""
    landed_tokens: int = 0
    """Estimated tokens of the view the last summarizing or emergency compaction left, corrected
    by the provider's usage as the turn's counts are (0: none yet). With ``landed_messages``,
    what a policy needs to know how fast the session grows and where its last compaction landed,
    whichever worker served it."""
    landed_messages: int = 0
    """Messages of the caller's history at that compaction."""
    summary_tokens_out: int = 0
    """What the summarizer wrote per summary in this session, in tokens (as it reported them,
    else estimated from its text): a running mean in which each new summary weighs half (0: no
    summary yet). A cost policy prices the next summary with it."""


@attrs.frozen
class TurnContext:
    """What the decision hooks (``determine_tier``, ``apply_tier``) know of the turn."""

    session_id: str
    context_window: int
    view_tokens: int
    """Estimated tokens of the view that would be sent without compaction this turn."""
    view_messages: int
    history_messages: int
    """Messages of the caller's history (the view covers them with its compaction message)."""
    state: SessionState
    """The session's state as the turn found it (summary, anchors, what is covered, offloads)."""
    forced: bool = False
    """A manual compaction (``compact_force``): the tier is Emergency whatever the policy says."""
    system_tokens: int = 0
    """Estimated tokens of the system message, which no compaction makes smaller."""
    after_compaction: bool = False
    """The loop guard asks again after a Soft or Full compaction of this turn: the view is the
    compacted one, which may be no smaller (there was nothing to fold), and only the window's
    share should decide whether it escalates."""


@attrs.frozen
class SessionInfo:
    """One session a storage plugin holds, as ``list_sessions`` reports it."""

    session_id: str
    updated: float
    """When the plugin last wrote for this session (seconds since the epoch)."""
    plugin: str
    where: str = ""
    """Where it is kept, for people: a folder, a file, a table."""


@attrs.frozen
class CompactionRecord:
    """What one call of the compactor did; see ``docs/records.md`` for every field."""

    id: str
    session_id: str
    timestamp: str
    tier: CompactionTier
    tokens_before: int
    tokens_after: int
    msgs_before: int
    msgs_after: int
    anchors: tuple[Anchor, ...] = ()
    offloaded: tuple[OffloadEntry, ...] = ()
    summarized: int = 0
    preserved_tail: int = 0
    summary_text: str = ""
    compression_ratio: float = 0.0
    """Share of the view's tokens removed: ``1 - tokens_after / tokens_before``."""
    duration_ms: float = 0.0
    errors: tuple[str, ...] = ()
    """Every cause of something that went wrong, one entry each (empty when all went well)."""
    fallback: bool = False
    """The view was made by the truncation fallback (Emergency, or a failed summary)."""
    escalations: tuple[str, ...] = ()
    """Why the loop guard escalated the tier, one entry per step (normal behaviour, not an error)."""
    schema_version: int = SCHEMA_VERSION
    variant: str | None = None
    requested_tier: CompactionTier | None = None
    """The tier the policy chose, when the loop guard escalated past it."""
    plugins: Mapping[str, str] = attrs.field(factory=dict)
    token_method: str = ""
    repaired_tool_pairs: int = 0
    cache_stable_prefix_tokens: int = 0
    summarizer_tokens_in: int = 0
    summarizer_tokens_out: int = 0
    summarizer_tokens_in_cached: int = 0
    """Of ``summarizer_tokens_in``, those the provider read from its prompt cache."""
    summarizer_calls: int = 0
    context_window: int = 0
    token_correction: float = 1.0
    """The scale of the provider's count over the estimate that the session's reports gave
    (``observe_usage``), applied to every count of this call; 1.0 when no usage was reported."""
    token_offset: int = 0
    """The tokens the provider counts besides the messages (tool definitions), learnt from the
    session's reports and added once to every view's count of this call; 0 when none."""

    def summary(self) -> str:
        """What this call did, as the notice says it (one line for a call that needed nothing)::

        ⚡ Context compressed [Full] 45.2K->8.1K tokens (82% smaller, 6% of window)
           5 anchors | 3 offload(42KB) | 28 summarized | tail: 6 preserved
        """
        from .notice import describe

        return describe(self)

    def __str__(self) -> str:
        return self.summary()
