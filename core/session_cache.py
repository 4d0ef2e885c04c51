"""What the compactor remembers of one session's history between turns, in this process.

The history is append-only: each turn adds messages at its end. So the compactor reads only what
is new since the last turn:

- ``settled``: the repaired history after the system message, up to the last point where repair
  can no longer change it (an assistant message's tool results are complete once a later non-tool
  message follows), with each message's token count;
- ``recent``: the rest (usually the newest assistant message and its tool results), repaired again
  when it changes;
- the *uncovered view*: ``settled[state.covered:]`` with the state's offload placeholders applied,
  and the compaction message that stands for ``settled[:state.covered]``, both kept for the state
  version they were built for.

A turn that needs no compaction then costs the new messages, not a pass over the history. The
cache is rebuilt from scratch when the caller passes a history that does not continue the one it
has seen (another history under the same session id, or one with a message replaced or removed).
Each message read before is compared by identity first, and by equality only where the caller
passes another object, so a caller that keeps its messages pays a pointer comparison a message; a
dict changed in place, though, is the same object and is not noticed: to edit a message, replace
it. A caller that passes equal messages as new objects (a history read back from a database, a
framework that converts its messages on every call) continues the session, and the view gives
back its objects of this turn, never those of an earlier one (:meth:`SessionCache.renewed`).
"""

from __future__ import annotations

import itertools
import operator
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from .facts import first_user_request, request_index
from .messages import (
    fingerprint,
    message_from_dict,
    message_to_dict,
    repair_tool_pairs,
    text_of,
    with_result_text,
)
from .models import AnchorType, Message, SessionState
from .redaction import SecretRegistry, redact_data

Estimate = Callable[[Sequence[Message]], list[int]]
SYSTEM_ROLES = ("system", "developer")
"""A first message in one of these roles is the system message (``developer`` is its name for
OpenAI's newer models): it stays first in every view, never summarized or truncated."""
PREFIX_MARK = "p:"
"""Starts a state's ``covered_fingerprint`` that fingerprints every covered message."""


@attrs.frozen
class Recent:
    """The repaired recent messages with offloads applied, their tokens, dicts and repairs."""

    messages: list[Message]
    counts: list[int]
    """The token count of each message."""
    dicts: list[dict[str, Any]]
    repairs: int

    @property
    def tokens(self) -> int:
        return sum(self.counts)


def state_key(state: SessionState) -> tuple[Any, ...]:
    """What identifies a state's view: a view built for another state is never reused, even one
    with the same version (a store without compare-and-set may hold two)."""
    return (state.version, state.covered, state.covered_fingerprint, len(state.offloaded), len(state.summary or ""))


def as_message(item: Any, index: int) -> Message:
    return item if isinstance(item, Message) else message_from_dict(item, index)


def part(history: Sequence[Any], start: int, stop: int) -> list[Any]:
    """``history[start:stop]`` as a list, from any sequence (a ``deque`` takes no slice)."""
    if isinstance(history, (list, tuple)):
        given = history[start:stop]
        return given if type(given) is list else list(given)
    return list(itertools.islice(history, start, stop))


def role_of(item: Any) -> Any:
    if type(item) is dict:  # as a rule: spares the Mapping check (an abstract class's is slow)
        return item.get("role")
    return item.role if isinstance(item, Message) else item.get("role") if isinstance(item, Mapping) else None


def _link(before: int, message: Message) -> int:
    """One step of a prefix's fingerprint: a running CRC-32 of what tells each message apart at a
    glance (role, ids, length, the ends of its text), not its whole text (a result may be
    megabytes; the boundary message's own fingerprint, which reads all of it, ends the chain)."""
    text = text_of(message)
    ids = "\0".join(call.id for call in message.tool_calls) if message.tool_calls else ""
    key = f"{message.role}\0{message.tool_call_id}\0{ids}\0{len(text)}\0{text[:256]}\0{text[-256:]}\n"
    return zlib.crc32(key.encode("utf-8", "surrogatepass"), before)


class SessionCache:
    """The cache of one session; see the module docstring."""

    def __init__(
        self,
        session_id: str,
        history: Sequence[Any],
        estimate: Estimate,
        intent_max_chars: int,
        secrets: SecretRegistry | None = None,
        pin_request: bool = True,
    ):
        self.session_id = session_id
        self.estimate = estimate
        self.secrets = secrets if secrets is not None else SecretRegistry(patterns=False)
        """The secrets to mask in the text the cache writes itself (the pinned request); the
        request masked when fewer were registered is masked again."""
        self.redact = self.secrets.redact
        self.pin_request = pin_request
        self.intent_max_chars = intent_max_chars
        self.has_system = bool(history) and role_of(history[0]) in SYSTEM_ROLES
        self.system: Message | None = as_message(history[0], 0) if self.has_system else None
        self.system_dict = message_to_dict(self.system) if self.system is not None else None
        self.system_tokens = estimate([self.system])[0] if self.system is not None else 0
        self.settled: list[Message] = []
        self.settled_tokens: list[int] = []
        self.settled_from = 0
        """How many history messages (after the system message) ``settled`` was built from."""
        self.settled_repairs = 0
        self.recent_messages: list[Message] = []
        self.raw_items: list[Any] = [history[0]] if self.has_system else []
        """The history's messages read so far, the caller's objects as first read (the messages
        the cache holds were made from them)."""
        self.read_items: list[Any] = list(self.raw_items)
        """The same messages as the caller passed them last, to recognise the history."""
        self._renewed: dict[int, Any] = {}
        """The caller's objects of the last turn, by the id of the object first read in their
        place, where they differ."""
        self.first_request: str | None = None
        self.request_index: int | None = None
        """Where the user's request is in ``settled``: once a summary covers it, the view carries
        it as a message of its own after the system message (:meth:`pinned_for`)."""
        self._pinned: tuple[Message, dict[str, Any], int, int] | None = None
        self._masked_request: tuple[str | None, str | None, int] | None = None
        self._fingerprints: dict[int, str] = {}
        """Fingerprints of settled messages, by position: an offloaded result's is looked at
        again at every new view."""
        self._chain: list[int] = []
        """The fingerprints of the settled messages' prefixes, one a length (:meth:`prefix_fingerprint`)."""
        self.rejected_summary: tuple[int, int] = (-1, 0)
        """The loop guard's last rejection in this process: a summary from the state's boundary
        (the first number) to the second came back larger than what it replaced. A summary from
        the same boundary is not asked again until there is more to fold."""
        self.verified: tuple[int, str | None] | None = None
        """The state boundary last checked against this history."""
        self.stale_at: int | None = None
        """How many messages this history had at a turn served stale (shorter than the state's
        summary covers): a longer one that still is tells a rewound history from a turn resent."""
        self._vetted: tuple[tuple[Any, ...], SessionState] | None = None
        """The last state masked (:meth:`masked`), by the key of the state as it was loaded."""
        self._recent_key: tuple[Any, ...] | None = None
        self._recent: Recent | None = None
        self._recent_originals: list[Message] = []
        self._repaired: tuple[list[Message], list[Message], list[int], int] | None = None
        """The last recent messages repaired: (them, repaired, counts, repairs). They settle at
        the next turn unchanged, as a rule: settling reuses this instead of repairing again."""
        # The uncovered view, for the state it was built for.
        self.view_state: tuple[Any, ...] | None = None
        self.uncovered: list[Message] = []
        self.uncovered_counts: list[int] = []
        self.uncovered_dicts: list[dict[str, Any]] = []
        self.uncovered_tokens = 0
        self.uncovered_end = 0
        self.pinned: Message | None = None
        self.compaction: Message | None = None
        self.compaction_dict: dict[str, Any] | None = None
        self.compaction_tokens = 0
        """The compaction message's tokens and the pinned request's."""
        self.previous_view: list[Any] = []
        self.previous_tokens = 0

    # --- reading the history ------------------------------------------------------------------

    @property
    def offset(self) -> int:
        return int(self.has_system)

    @property
    def seen(self) -> int:
        """History messages read so far, the system message included."""
        return self.offset + self.settled_from + len(self.recent_messages)

    def continues(self, history: Sequence[Any]) -> bool:
        """Whether ``history`` is the history this cache has read, maybe with more at its end."""
        has_system = bool(history) and role_of(history[0]) in SYSTEM_ROLES
        if has_system != self.has_system:
            return False
        seen = self.seen
        if len(history) < seen:
            return False
        if all(map(operator.is_, history, self.read_items)):  # a pointer comparison a message read
            return True
        given = part(history, 0, seen)
        if given != self.read_items:  # (a list comparison tries identity, then equality)
            return False
        self.read_items = given
        self._renewed = {id(first): now for first, now in zip(self.raw_items, given, strict=True) if first is not now}
        return True

    def renewed(self, view: list[Any]) -> list[Any]:
        """``view`` with the caller's objects of this turn in place of the equal ones it passed
        first (the view's unchanged messages are the objects the cache read them from)."""
        renewed = self._renewed
        if not renewed:
            return view
        return [renewed.get(id(data), data) for data in view]

    def read(self, history: Sequence[Any]) -> None:
        """Read the messages of ``history`` that are new since the last call."""
        seen = self.seen
        if len(history) <= seen:
            return
        new = part(history, seen, len(history))
        self.recent_messages.extend([as_message(d, seen + i) for i, d in enumerate(new)])
        self.raw_items.extend(new)
        self.read_items.extend(new)
        self._settle()

    def _settle(self) -> None:
        """Move the recent messages whose repair can no longer change into ``settled``."""
        msgs = self.recent_messages
        cut = len(msgs) - 1
        while cut > 0 and msgs[cut].role == "tool":
            cut -= 1
        if cut <= 0:
            return
        repaired, counts, repairs = self._repair(msgs[:cut])
        # The request is looked for among the messages as the history has them: a system message
        # that the repair made a user message is no request. The repair keeps user messages as
        # they are: the request is found in the repaired list by identity.
        if self.request_index is None:
            found = request_index(msgs[:cut])
            if found is not None:
                request = msgs[found]
                self.request_index = len(self.settled) + next(j for j, m in enumerate(repaired) if m is request)
        if self.first_request is None:
            self.first_request = first_user_request(msgs[:cut], self.intent_max_chars)
        self.settled.extend(repaired)
        self.settled_tokens.extend(counts)
        self.settled_repairs += repairs
        self.settled_from += cut
        del msgs[:cut]

    def recent(self, state: SessionState) -> Recent:
        """The repaired recent messages, offloads applied; cached until they or the state change."""
        key = (len(self.recent_messages), self.settled_from, *state_key(state))
        if self._recent_key == key and self._recent is not None:
            return self._recent
        repaired, counts, repairs = self._repair(self.recent_messages)
        self._recent_originals = repaired
        if state.offloaded:  # an Emergency offloads recent results too: a retry must see that
            start = len(self.settled)
            shown = [self.with_placeholder(m, start + j, state) for j, m in enumerate(repaired)]
            counts = [c if m is r else self.estimate([m])[0] for m, r, c in zip(shown, repaired, counts, strict=True)]
            repaired = shown
        if self.first_request is None:
            self.first_request = first_user_request(self.recent_messages, self.intent_max_chars)
        self._recent_key = key
        self._recent = Recent(repaired, counts, [message_to_dict(m) for m in repaired], repairs)
        return self._recent

    def _repair(self, messages: list[Message]) -> tuple[list[Message], list[int], int]:
        """``messages`` repaired (a view's continuation), each one's tokens, and the repairs made;
        the last answer again when they are the same messages."""
        done = self._repaired
        if done is not None and len(done[0]) == len(messages) and all(map(operator.is_, done[0], messages)):
            return done[1], done[2], done[3]
        repaired, repairs = repair_tool_pairs(messages, at_start=False)
        counts = self.estimate(repaired) if repaired else []
        self._repaired = (list(messages), repaired, counts, repairs)
        return repaired, counts, repairs

    # --- the state's boundary and view ----------------------------------------------------------

    def boundary_matches(self, state: SessionState) -> bool:
        """Whether the messages the state's summary covers are this history's first ones (their
        fingerprint, :meth:`prefix_fingerprint`), and the first one it does not cover starts a
        group (is not a tool result): a view that began with an orphan result would be invalid.
        A state saved before the fingerprint covered the whole prefix carries the last covered
        message's alone, and is checked on that.
        """
        if not state.covered:
            return True
        key = (state.covered, state.covered_fingerprint)
        if self.verified == key:
            return True
        if state.covered > len(self.settled) or self._starts_inside_a_group(state.covered):
            return False
        given = state.covered_fingerprint or ""
        if given.startswith(PREFIX_MARK):
            matches = given == self.prefix_fingerprint(state.covered)
        else:
            matches = given == self.fingerprint(state.covered - 1)
        matches = matches and self._keeps_request(state)
        if matches:
            self.verified = key
        return matches

    def _keeps_request(self, state: SessionState) -> bool:
        """Whether ``state``'s intent holds this history's request, when its summary covers it.
        The prefix fingerprint reads the ends of each message alone: a request edited inside (a
        port, a target, the same length) would be served the summary of the old one."""
        if self.request_index is None or state.covered <= self.request_index or not self.first_request:
            return True
        intent = next((a for a in self.masked(state).anchors if a.type is AnchorType.USER_INTENT), None)
        return intent is None or (self.masked_request() or "") in intent.content

    def masked(self, state: SessionState) -> SessionState:
        """``state`` with its summary and anchors masked: a state another process saved (an older
        version, or one with ``mask_credentials`` off) may hold a credential. A state this cache
        saw saved, or masked already, is not searched again."""
        key = state_key(state)
        if self._vetted is not None and self._vetted[0] == key:
            return self._vetted[1]
        parts = (state.summary, state.anchors)
        done = redact_data(parts, self.redact)
        vetted = state if done is parts else attrs.evolve(state, summary=done[0], anchors=done[1])
        self._vetted = (key, vetted)
        return vetted

    def saved(self, state: SessionState) -> None:
        """``state`` was saved for this history (made here, of masked parts)."""
        self.verified = (state.covered, state.covered_fingerprint)
        self._vetted = (state_key(state), state)

    def shorter_than(self, state: SessionState) -> bool:
        """Whether this history has fewer messages than ``state``'s summary covers: an earlier
        turn delivered again, say, whose state a later turn has already moved on. Counted as the
        summary counts them, in settled messages: the repair adds a result for each call left
        unanswered, and the newest messages are not settled yet (a summary covers none of them)."""
        return len(self.settled) < state.covered

    def served_stale(self, state: SessionState) -> bool:
        """Whether this turn is served stale: its history is shorter than what ``state``'s
        summary covers (an earlier turn sent again). Not once such a history went on since a turn
        served stale: that is a rewound or edited conversation, and served stale, each of its
        turns would pay a summary again."""
        if not self.shorter_than(state) or (self.stale_at is not None and self.seen > self.stale_at):
            return False
        self.stale_at = self.seen
        return True

    def prefix_fingerprint(self, count: int) -> str:
        """The fingerprint of the first ``count`` messages, every one of them: a chain of
        :func:`_link` steps (kept for the settled messages, so a longer prefix costs the messages
        it adds), ended by the last message's whole :meth:`fingerprint`."""
        chain = self._chain
        while len(chain) < min(count, len(self.settled)):
            chain.append(_link(chain[-1] if chain else 0, self.settled[len(chain)]))
        last = chain[count - 1] if count <= len(chain) else chain[-1] if chain else 0
        for position in range(len(chain), count):  # recent messages: their repair may still change
            last = _link(last, self.original(position))
        return f"{PREFIX_MARK}{last:08x}.{self.fingerprint(count - 1)}"

    def _starts_inside_a_group(self, index: int) -> bool:
        after = self.settled[index] if index < len(self.settled) else None
        if after is None and self.recent_messages:
            after = self.recent_messages[0]
        return after is not None and after.role == "tool"

    def pinned_for(self, state: SessionState) -> Message | None:
        """The user's request as a message of its own, once ``state``'s summary covers it (the
        same object every time, a provider's prompt cache keeps it across compactions; made again
        only to mask a secret registered since)."""
        covers = self.request_index is not None and state.covered > self.request_index
        if not (self.pin_request and covers and self.first_request):
            return None
        if self._pinned is None or self._pinned[3] != len(self.secrets):  # masked with the secrets known
            # the request's own name and keys kept (a speaker's name, cache_control)
            original = self.settled[self.request_index]  # type: ignore[index]  # ``covers`` says it is set
            content = self._request_content(original, self.first_request)
            message = Message(role="user", content=content, name=original.name, extra=original.extra)
            self._pinned = (message, message_to_dict(message), self.estimate([message])[0], len(self.secrets))
        return self._pinned[0]

    def _request_content(self, original: Message, request: str) -> Any:
        """The pinned request's content: the message's own parts (an image stays an image) when
        its text is kept whole, else the bounded text; secrets masked."""
        parts = original.content
        if not isinstance(parts, tuple) or text_of(original).strip() != request:
            return self.masked_request()
        return tuple(
            {**part, "text": self.redact(part["text"])}
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
            else part
            for part in parts
        )

    def masked_request(self) -> str | None:
        """The user's request with secrets masked, masked once (every summary's facts carry it), and
        again once a secret is registered since."""
        done = self._masked_request
        count = len(self.secrets)
        if done is None or done[0] is not self.first_request or done[2] != count:
            done = self._masked_request = (self.first_request, self.redact(self.first_request or "") or None, count)
        return done[1]

    def request_for(self, state: SessionState) -> str | None:
        """The request's text when ``state`` pins it, for the compaction message to leave out
        (masked, as the intent that holds it is)."""
        return self.masked_request() if self.pinned_for(state) is not None else None

    def pinned_tokens(self, state: SessionState) -> int:
        """Tokens of the pinned request in ``state``'s view (0 when it is not pinned)."""
        return self._pinned[2] if self.pinned_for(state) is not None and self._pinned is not None else 0

    def refresh(self, state: SessionState, compaction_message: Callable[[SessionState, str | None], Message]) -> None:
        """Keep the uncovered view for ``state``, extending it as ``settled`` grows."""
        key = state_key(state)
        if self.view_state != key or self.uncovered_end < state.covered:
            self.view_state = key
            self.uncovered, self.uncovered_dicts, self.uncovered_counts, self.uncovered_tokens = [], [], [], 0
            self.uncovered_end = state.covered
            self.pinned = self.pinned_for(state)
            if state.covered:
                self.compaction = compaction_message(state, self.request_for(state))
                self.compaction_dict = message_to_dict(self.compaction)
                self.compaction_tokens = self.estimate([self.compaction])[0] + self.pinned_tokens(state)
            else:
                self.compaction, self.compaction_dict, self.compaction_tokens = None, None, 0
        end = len(self.settled)
        for i in range(self.uncovered_end, end):
            m = self.settled[i]
            tokens = self.settled_tokens[i]
            shown = self.with_placeholder(m, i, state)
            if shown is not m:
                tokens = self.estimate([shown])[0]
            self.uncovered.append(shown)
            self.uncovered_dicts.append(message_to_dict(shown))
            self.uncovered_counts.append(tokens)
            self.uncovered_tokens += tokens
        self.uncovered_end = max(self.uncovered_end, end)

    def with_placeholder(self, message: Message, position: int, state: SessionState) -> Message:
        """``message`` (at ``position`` in the session) with its offload placeholder, if the state
        says this very message was offloaded: the entry is found by position and must carry the
        message's fingerprint, so a tool call id reused later in the session, or another history
        under the same session id, never gets another result's placeholder."""
        if not state.offloaded or message.role not in ("tool", "user"):
            return message
        entry = state.offloaded.get(str(position))
        if entry is None or entry.fingerprint != self.fingerprint(position):
            return message
        return with_result_text(message, entry.placeholder)

    def fingerprint(self, position: int) -> str:
        """The fingerprint of the repaired message at ``position`` as the history has it; a
        settled message's is computed once."""
        if position >= len(self.settled):
            return fingerprint(self.original(position))
        found = self._fingerprints.get(position)
        if found is None:
            found = self._fingerprints[position] = fingerprint(self.settled[position])
        return found

    def forget_view(self) -> None:
        self.view_state = None

    def original(self, position: int) -> Message:
        """The repaired message at ``position`` as the history has it (no placeholder)."""
        if position < len(self.settled):
            return self.settled[position]
        return self._recent_originals[position - len(self.settled)]

    def originals(self, start: int, stable: int, rest: Sequence[Message]) -> list[Message]:
        """``settled[start:start + stable]`` (the original texts, not placeholders) + ``rest``."""
        return self.settled[start : start + stable] + list(rest)

    # --- the view sent ------------------------------------------------------------------------

    def head(self) -> list[Message]:
        """The system message, the pinned request and the compaction message, as a view starts."""
        view = [self.system] if self.system is not None else []
        if self.pinned is not None:
            view.append(self.pinned)
        if self.compaction is not None:
            view.append(self.compaction)
        return view

    def unchanged_view(self, recent: Recent) -> list[Any]:
        """The view of a turn that compacts nothing: cached dicts, the caller's own where unchanged."""
        out: list[Any] = [self.system_dict] if self.has_system else []
        if self.pinned is not None and self._pinned is not None:
            out.append(self._pinned[1])
        if self.compaction_dict is not None:
            out.append(self.compaction_dict)
        out += self.uncovered_dicts
        out += recent.dicts
        return out

    def stable_prefix_tokens(self, out: list[Any], tokens: int, messages: Sequence[Message] | None = None) -> int:
        """Tokens at the start of ``out`` equal to the previous view's (prompt-cache hits);
        ``messages``, when given, are the messages ``out`` was written from (none read again)."""
        previous = self.previous_view
        n = len(previous)
        if n <= len(out) and out[:n] == previous:
            stable = self.previous_tokens
        else:
            common = 0
            limit = min(n, len(out))
            while common < limit and (out[common] is previous[common] or out[common] == previous[common]):
                common += 1
            if messages is None:
                messages = [as_message(d, i) for i, d in enumerate(out[:common])]
            stable = sum(self.estimate(messages[:common])) if common else 0
        self.previous_view = out
        self.previous_tokens = tokens
        return stable
