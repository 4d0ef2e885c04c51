"""The data the compactor works on and produces.

Every model is a frozen attrs class with no (de)serialization code: converting from and to the
OpenAI chat dicts lives in :mod:`progressive_compactor.messages`, and records and config go through
the cattrs converters in :mod:`progressive_compactor.converters`.
"""

from __future__ import annotations

import enum
from typing import Any, Mapping

import attrs

SCHEMA_VERSION = 1
"""Version of the CompactionRecord layout; bumped whenever a field changes meaning."""

NOT_AVAILABLE = "N/A"


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
    """How hard a turn compresses (seed section 2.1)."""

    NONE = 0
    WARN = 1
    SOFT = 2
    FULL = 3
    EMERGENCY = 4

    @property
    def label(self) -> str:
        return self.name.capitalize()


class AnchorType(str, enum.Enum):
    """The five anchors every summary carries (seed section 4.3)."""

    USER_INTENT = "user_intent"
    EXECUTION_PROGRESS = "execution_progress"
    KEY_DECISION = "key_decision"
    TRIED_SOLUTION = "tried_solution"
    NEXT_STEP = "next_step"

    @property
    def title(self) -> str:
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
    """A tool result moved out of the context into a file (seed section 3.3)."""

    tool_call_id: str
    handle: str
    """What ``compactor show`` and the read tool take to read the full text back."""
    path: str
    chars: int
    """Characters of the tool result as it was in the history (the core matches an entry to its
    message by tool call id and this length)."""
    lines: int
    sha256: str
    placeholder: str = attrs.field(default="", repr=False)
    """The text that stands for the result in the view: a preview and the handle."""


@attrs.frozen
class Facts:
    """What the core extracts from messages by itself, whatever the summarizer writes."""

    user_request: str | None = None
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


@attrs.frozen
class SummaryResult:
    text: str
    tokens_in: int | None = None
    """Input tokens the provider reported (None when offline or not reported)."""
    tokens_out: int | None = None
    model: str | None = None


@attrs.frozen
class ParsedSummary:
    """Anchors and prose read from summary text (seed section 4.4)."""

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


@attrs.frozen
class TierInput:
    """What a tier plugin sees when it decides."""

    tier: CompactionTier
    head: tuple[Message, ...]
    """Uncovered messages before the protected tail."""
    tail: tuple[Message, ...]
    view_tokens: int
    context_window: int


@attrs.frozen
class SessionState:
    """What a session carries from turn to turn (seed section 4.6), kept behind a state store."""

    summary: str | None = None
    anchors: tuple[Anchor, ...] = ()
    covered: int = 0
    """How many messages after the system message the summary already covers."""
    covered_fingerprint: str | None = None
    """Hash of the last covered message, to notice a caller that passes a different history."""
    offloaded: Mapping[str, OffloadEntry] = attrs.field(factory=dict)
    dropped_handles: tuple[str, ...] = ()
    """Handles of offloaded results whose placeholders were folded into the summary."""
    version: int = 0


@attrs.frozen
class CompactionRecord:
    """One compaction, as seed section 5.1 lists it, plus the DESIGN.md additions."""

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
    error: str = ""
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
    summarizer_calls: int = 0
    context_window: int = 0
