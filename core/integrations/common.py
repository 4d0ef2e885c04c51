"""What the framework integrations share: one compaction per model call, failing open.

Every integration turns the framework's messages into OpenAI chat dicts, asks the compactor for
the view, and turns the view back into the framework's messages. This module does the middle:

- :class:`Compaction` runs the compactor (sync or async) on the dicts. Any error of the compactor
  is caught: the model call goes on with the uncompacted input, a record saying why is handed to
  the record stores (``errors``: ``compaction failed, sent the uncompacted input: ...``) and
  logged. A view that is still larger than the window raises
  :class:`ContextWindowExceededError` (sending it would fail at the provider anyway).
- Each record is logged (the two-line notice at INFO on the ``progressive_compactor.integrations``
  logger when a tier was carried out) and passed to ``on_record``, if given.
- After the model call, the integration reports the provider's input tokens for the view
  (:meth:`Compaction.observe`), which anchors the session's counts
  (:meth:`ProgressiveCompactor.observe_usage`); not after a call that sent the uncompacted input.

**Thinking.** An integration counts every thinking block and reasoning item the view sends back
(:data:`THINKING`), whatever turn it belongs to, and sends none it did not count. Providers differ,
and by model: the thinking of the current tool loop (the assistant turns since the last user
message that is not a tool result) is always read and counted as input; an earlier turn's is
dropped by some models (Claude models before Opus 4.5 and Sonnet 4.6; OpenAI's o3 and o4-mini) and
kept in context and counted by others (newer Claude models; newer OpenAI models, as their
``reasoning.context`` says). The integration cannot tell which, so it counts it all: an overcount
only compacts a little early (and the usage the provider reports corrects the session's later
counts), an undercount overflows the window. The thinking of a message whose text the compaction
cut stays with it (Anthropic wants the thinking of the turn's tool calls back, signature intact),
so it is counted apart from the text (:data:`~progressive_compactor.messages.COUNTED_KEY`), where
no cut drops it. Reasoning that only the provider holds (an item sent back by its id alone) cannot
be counted here; the reported usage anchors it.

Every dict the integrations build carries the framework's own message under :data:`SOURCE`: the
compactor gives unchanged messages back as the very dicts it was given, so the integration gives
back the framework's very objects (no conversion loss), and for a changed message it starts from
the original (only the content, or a tool call's arguments, differ).
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ..anchors import COMPACTION_MARKER
from ..compactor import ProgressiveCompactor
from ..errors import CompactorError
from ..messages import message_from_dict, view_problems
from ..models import CompactionRecord, CompactionTier
from ..notice import notice
from ..record_stamp import new_record_id, record_timestamp
from ..tools import READ_TOOL_RESULT_TOOL, handle_read_tool_call

log = logging.getLogger("progressive_compactor.integrations")

SOURCE = "__framework_message__"
"""The key under which a dict keeps the framework message it was made from: private
(:func:`~progressive_compactor.messages.is_private`), so never counted nor sent."""
THINKING = frozenset({"thinking", "redacted_thinking", "reasoning"})
"""The ``type`` of what carries a model's thinking: Anthropic's thinking and redacted thinking
blocks, LangChain's standard reasoning block, the Responses API's reasoning item. Counted
whatever its turn (see the module docstring)."""
FAILED_OPEN = "compaction failed, sent the uncompacted input"
READ_TOOL_NAME: str = READ_TOOL_RESULT_TOOL["function"]["name"]
READ_TOOL_DESCRIPTION: str = READ_TOOL_RESULT_TOOL["function"]["description"]
OnRecord = Callable[[CompactionRecord], Any]


class ContextWindowExceededError(CompactorError):
    """The compacted view is still larger than the context window: nothing the compactor may
    drop is left (the system message, the compaction message and the newest exchange alone are
    over the window). Raised instead of sending a request the provider would refuse."""

    def __init__(self, record: CompactionRecord):
        self.record = record
        super().__init__(
            f"the compacted view of session {record.session_id!r} is {record.tokens_after} tokens, over the "
            f"context window of {record.context_window}: the newest messages alone do not fit (raise "
            "context_window if the model allows more, or shorten what the newest message carries)"
        )


@attrs.frozen
class Outcome:
    """One compaction for one model call."""

    view: list[dict[str, Any]]
    record: CompactionRecord
    session_id: str
    failed: bool = False
    """The compactor failed: ``view`` is the uncompacted input."""

    @property
    def changed(self) -> bool:
        return not self.failed and self.record.tier is not CompactionTier.NONE


def is_compaction_message(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return message.get("role") == "user" and isinstance(content, str) and content.startswith(COMPACTION_MARKER)


SESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar("progressive_compactor_session", default=None)
"""The session of the model call being served: the read tool answers the calls of that model with
that session's results only (a framework runs a model's tool calls in the same run)."""


class Compaction:
    """The compactor as an integration calls it; see the module docstring."""

    def __init__(self, compactor: ProgressiveCompactor, *, on_record: OnRecord | None = None):
        self.compactor = compactor
        self.on_record = on_record

    def compact(self, history: Sequence[dict[str, Any]], session_id: str) -> Outcome:
        SESSION.set(session_id)
        try:
            view, record = self.compactor.compact_with_record(history, session_id)
        except Exception as exc:  # noqa: BLE001 - fail open: the agent's run must go on
            return self._failed(history, session_id, exc)
        return self._done(view, record, session_id)

    async def acompact(self, history: Sequence[dict[str, Any]], session_id: str) -> Outcome:
        SESSION.set(session_id)
        try:
            view, record = await self.compactor.acompact_with_record(history, session_id)
        except Exception as exc:  # noqa: BLE001 - fail open: the agent's run must go on
            return self._failed(history, session_id, exc)
        return self._done(view, record, session_id)

    def observe(self, outcome: Outcome, input_tokens: int | None) -> None:
        """The provider counted ``input_tokens`` for the request that carried ``outcome.view``."""
        if outcome.failed or not input_tokens or input_tokens < 0:
            return
        try:
            self.compactor.observe_usage(outcome.session_id, int(input_tokens), outcome.record)
        except Exception as exc:  # noqa: BLE001 - usage is advice: never break the run for it
            redact = self.compactor.secrets.redact
            log.warning("reporting usage for session %s failed: %s", redact(outcome.session_id), redact(str(exc)))

    def _done(self, view: list[dict[str, Any]], record: CompactionRecord, session_id: str) -> Outcome:
        outcome = Outcome(view, record, session_id)
        self._publish(record)
        if record.tokens_after > record.context_window > 0:
            raise ContextWindowExceededError(record)
        return outcome

    def _failed(self, history: Sequence[dict[str, Any]], session_id: str, exc: Exception) -> Outcome:
        return self.refused(history, session_id, f"{type(exc).__name__}: {exc}")

    def refused(self, history: Sequence[dict[str, Any]], session_id: str, why: str) -> Outcome:
        """The input sent as it was, because ``why`` (the compaction raised, or its view could not
        be converted for the framework): the record that says so is stored and published."""
        cause = self.compactor.secrets.redact(f"{FAILED_OPEN}: {why}")
        log.warning("session %s: %s", self.compactor.secrets.redact(session_id), cause)
        record = failure_record(self.compactor, session_id, history, cause)
        try:
            self.compactor.hooks.persist_record(record)
        except Exception as store_exc:  # noqa: BLE001 - the stores are fail-open too
            log.warning("storing the failure record failed: %s", self.compactor.secrets.redact(str(store_exc)))
        self._publish(record)
        return Outcome(list(history), record, session_id, failed=True)

    def _publish(self, record: CompactionRecord) -> None:
        if record.tier is not CompactionTier.NONE:
            log.info("session %s:\n%s", self.compactor.secrets.redact(record.session_id), notice(record))
        if self.on_record is not None:
            try:
                self.on_record(record)
            except Exception as exc:  # noqa: BLE001 - a callback never breaks the run
                log.warning("on_record callback failed: %s", exc)


def failure_record(
    compactor: ProgressiveCompactor, session_id: str, history: Sequence[Mapping[str, Any]], cause: str
) -> CompactionRecord:
    """The record of a call whose compaction failed: tier None, the input sent as it was."""
    tokens = 0
    try:
        tokens = sum(compactor.hooks.estimate_tokens([message_from_dict(m, i) for i, m in enumerate(history)]))
    except Exception:  # noqa: BLE001 - a count is a nicety here
        tokens = sum(len(str(m.get("content") or "")) for m in history) // 4
    return CompactionRecord(
        id=new_record_id(),
        session_id=session_id,
        timestamp=record_timestamp(),
        tier=CompactionTier.NONE,
        tokens_before=tokens,
        tokens_after=tokens,
        msgs_before=len(history),
        msgs_after=len(history),
        errors=(cause,),
        variant=compactor.config.variant,
        plugins={role: name for role, name in compactor.config.plugins.roles().items() if name != "none"},
        token_method=compactor.config.plugins.roles().get("tokens", ""),
        context_window=compactor.config.context_window,
    )


class Adapter:
    """What every framework adapter keeps: the compactor, how the caller names sessions, the role
    the compaction message takes in the framework (the first of :attr:`ROLES` by default) and the
    fail-open :class:`Compaction`."""

    ROLES: tuple[str, str] = ("user", "system")

    def __init__(
        self,
        compactor: ProgressiveCompactor,
        *,
        session_id: Any = None,
        compaction_role: str | None = None,
        on_record: OnRecord | None = None,
    ):
        role = self.ROLES[0] if compaction_role is None else compaction_role
        if role not in self.ROLES:
            raise ValueError(f"compaction_role must be {self.ROLES[0]!r} or {self.ROLES[1]!r}, got {role!r}")
        super().__init__()  # the framework's base class, when an adapter has one (LangChain's middleware)
        self.compactor = compactor
        self.session_id = session_id
        self.compaction_role = role
        self.compaction = Compaction(compactor, on_record=on_record)

    def chosen_session(self, context: Any) -> str | None:
        """The session id the caller chose (a string, or its function of the framework's
        ``context``); None: the adapter asks the framework, then falls back to the compactor's."""
        if callable(self.session_id):
            return str(self.session_id(context))
        return self.session_id or None


def check_view(view: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why a provider would refuse ``view`` (an empty list when it is valid)."""
    return view_problems([message_from_dict(m, i) for i, m in enumerate(view)])


def read_tool_result(
    compactor: ProgressiveCompactor,
    handle: str,
    start_line: int | None,
    end_line: int | None,
    session_id: str | None = None,
) -> str:
    """The read tool's answer, whole or a line range; errors as text the model can read. Only
    results of ``session_id`` if given."""
    arguments: dict[str, Any] = {"handle": handle}
    if start_line is not None:
        arguments["start_line"] = start_line
    if end_line is not None:
        arguments["end_line"] = end_line
    return handle_read_tool_call(compactor, arguments, session_id)


__all__ = [
    "FAILED_OPEN",
    "READ_TOOL_DESCRIPTION",
    "READ_TOOL_NAME",
    "SESSION",
    "SOURCE",
    "THINKING",
    "Adapter",
    "Compaction",
    "ContextWindowExceededError",
    "Outcome",
    "check_view",
    "failure_record",
    "is_compaction_message",
    "read_tool_result",
]
