"""ProgressiveCompactor: the tiered compaction of seed section 2, one turn at a time.

A turn, as DESIGN.md "One turn" describes it::

    history (never modified) ─► compact_with_record(history) ─► (view sent to the LLM, record)

The history is append-only. What the compactor learns of it is cached per session, so a turn that
needs no compaction costs a look at the messages that are new since the last turn, not a pass
over the whole history.

The tier logic is written once, as a generator (:meth:`ProgressiveCompactor._turn`) that yields a
:class:`SummaryRequest` whenever it needs a summary; the synchronous API answers it by calling the
``summarize`` hook, the asynchronous API by awaiting ``asummarize``. Nothing else differs.
"""

from __future__ import annotations

import asyncio
import logging
import time
import secrets
from datetime import datetime, timezone
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any

import attrs

from . import anchors as anchor_fns
from .config import CompactorConfig, config_from_dict, config_to_dict, deep_merge, load_config
from .errors import CompactorError, FallbackError, InvalidMessagesError, SummarizerError
from .facts import extract_facts, first_user_request
from .hookspecs import hookimpl
from .messages import (
    group_start,
    message_from_dict,
    message_to_dict,
    fingerprint,
    repair_tool_pairs,
    replace_content,
    text_of,
    view_problems,
)
from .models import (
    CompactionRecord,
    CompactionTier,
    Facts,
    Message,
    OffloadEntry,
    SessionState,
    SummaryRequest,
    SummaryResult,
    TierInput,
    TierPlan,
)
from .plugin_manager import Hooks, PluginContext, SecretRegistry, get_plugin_manager

log = logging.getLogger("progressive_compactor")
EMERGENCY_ERROR = "emergency fallback: forced truncation"
PLACEHOLDER_CHARS = 1700
"""About the size of an offload placeholder, to judge what an offload saves before doing it."""
MAX_HANDLES_LISTED = 20
"""The compaction message lists the handles of this many of the latest offloaded results."""
History = Sequence[Mapping[str, Any] | Message]


@attrs.define
class _Summarized:
    """What the generator gets back for a SummaryRequest: a result, or why there is none."""

    result: SummaryResult | None
    error: str | None = None


@attrs.define
class _Mirror:
    """What the compactor knows of one session's history, kept between turns in this process.

    ``final`` is the repaired history (after the system message) up to the last point where its
    repair can no longer change; ``pending`` is the rest, repaired again each turn (usually one
    assistant message and its tool results).
    """

    sid: str = ""
    system: Message | None = None
    system_dict: dict[str, Any] | None = None
    system_tokens: int = 0
    has_system: bool = False
    final: list[Message] = attrs.Factory(list)
    final_tokens: list[int] = attrs.Factory(list)
    final_src: int = 0
    """How many history messages (after the system message) ``final`` was built from."""
    last_src: Any = None
    """The last history message read (the caller's own object), to recognise the same history."""
    pending_msgs: list[Message] = attrs.Factory(list)
    repairs_final: int = 0
    first_request: str | None = None
    verified: tuple[int, str | None] | None = None
    # The view of final[covered:] with offloads applied, for the state version it was built for.
    view_version: int = -1
    view_msgs: list[Message] = attrs.Factory(list)
    view_dicts: list[dict[str, Any]] = attrs.Factory(list)
    view_tokens: int = 0
    view_end: int = 0
    compaction: Message | None = None
    compaction_dict: dict[str, Any] | None = None
    compaction_tokens: int = 0
    prev_out: list[Any] = attrs.Factory(list)
    prev_tokens: int = 0
    pending_key: tuple[int, int] | None = None
    pending_cache: Any = None


@attrs.define
class _Turn:
    """The working state of one turn's compaction."""

    state: SessionState
    uncovered: list[Message]
    stable: int
    """``uncovered[:stable]`` may be folded into the summary; the rest is still pending repair."""
    compaction: Message | None
    errors: list[str] = attrs.Factory(list)
    offloaded: list[OffloadEntry] = attrs.Factory(list)
    summarized: int = 0
    summarizer_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    fallback_view: list[Message] | None = None
    preserved: int = 0
    """Messages after the compaction message kept as original text (seed's PreservedTail)."""


class ProgressiveCompactor:
    """The tiered compactor of the seed, with the three interfaces of seed section 7.

    ``config`` is a :class:`CompactorConfig`, a bundled config name or a YAML path; any other
    keyword (``context_window=...``, ``plugins={...}``, ``config={plugin: {...}}``) overrides that
    config's top-level keys, nested mappings merged. The keyword options stand for the seed's
    constructor options (todo injector, memory extractor, record store, offloader, session id);
    each is registered as a plugin, as are ``extra_plugins`` (``(name, object)`` pairs).
    """

    def __init__(
        self,
        config: CompactorConfig | str | None = None,
        /,
        *,
        session_id: str = "default",
        todo_injector: Callable[[], str | None] | None = None,
        memory_extractor: Callable[[Sequence[Message]], Any] | None = None,
        record_store: Any = None,
        offloader: Any = None,
        extra_plugins: Iterable[tuple[str, Any]] = (),
        **overrides: Any,
    ):
        if not isinstance(config, CompactorConfig):
            config = load_config(config, **overrides)
        elif overrides:
            config = config_from_dict(deep_merge(config_to_dict(config), overrides))
        self.config = config
        self.session_id = session_id
        self.secrets = SecretRegistry()
        extra = list(extra_plugins)
        if todo_injector is not None:
            extra.append(("todo-injector", _TodoAdapter(todo_injector)))
        if memory_extractor is not None:
            extra.append(("memory-extractor", _MemoryAdapter(memory_extractor)))
        if record_store is not None:
            extra.append(("record-store", _StoreAdapter(record_store)))
        if offloader is not None:
            extra.append(("offloader", offloader))
        self.pm = get_plugin_manager(
            config, extra_plugins=extra, context=PluginContext(config.work_dir, self.secrets)
        )
        self.hooks = Hooks(self.pm)
        self._mirrors: dict[str, _Mirror] = {}
        self._plugin_names = {role: name for role, name in config.plugins.roles().items() if name != "none"}

    # --- the three interfaces of seed section 7 -----------------------------------------------

    def compact(self, history: History, session_id: str | None = None) -> list[dict[str, Any]]:
        """The compacted view alone (Compactor.Compact)."""
        return self.compact_with_record(history, session_id)[0]

    def compact_force(self, history: History, session_id: str | None = None) -> list[dict[str, Any]]:
        """Force the Emergency tier, as a manual ``/compact`` does (ForceCompactor.CompactForce)."""
        return self._drive_sync(self._turn(history, session_id, force=True))[0]

    def compact_with_record(
        self, history: History, session_id: str | None = None
    ) -> tuple[list[dict[str, Any]], CompactionRecord]:
        """The view to send and the record of what was done (RecordedCompactor)."""
        return self._drive_sync(self._turn(history, session_id))

    async def acompact(self, history: History, session_id: str | None = None) -> list[dict[str, Any]]:
        return (await self.acompact_with_record(history, session_id))[0]

    async def acompact_force(self, history: History, session_id: str | None = None) -> list[dict[str, Any]]:
        return (await self._drive_async(self._turn(history, session_id, force=True)))[0]

    async def acompact_with_record(
        self, history: History, session_id: str | None = None
    ) -> tuple[list[dict[str, Any]], CompactionRecord]:
        return await self._drive_async(self._turn(history, session_id))

    # --- other services -----------------------------------------------------------------------

    def offload_tool_result(self, message: Mapping[str, Any], session_id: str | None = None) -> dict[str, Any]:
        """The production-time OffloadHook (seed 3.4): call it when a tool result arrives.

        A result longer than ``tool_result_threshold`` characters is written out and the message
        comes back with a placeholder; anything else comes back unchanged. Fail-open: when writing
        fails the original comes back.
        """
        m = message_from_dict(message)
        try:
            entry = self.hooks.offload(m, session_id or self.session_id, self.config.tool_result_threshold)
        except Exception as exc:
            log.warning("offloading tool result %s failed: %s", m.tool_call_id, exc)
            return dict(message)
        if entry is None:
            return dict(message)
        return message_to_dict(replace_content(m, entry.placeholder))

    def read_tool_result(self, handle: str, lines: tuple[int, int] | None = None) -> str:
        """Full text of an offloaded tool result, or lines ``start..end`` (1-based, inclusive)."""
        text = self.hooks.read_offloaded(handle)
        if text is None:
            raise CompactorError(f"no offloaded tool result has the handle {handle!r}")
        if lines is None:
            return text
        start, end = lines
        return "\n".join(text.splitlines()[max(start, 1) - 1 : end])

    def state(self, session_id: str | None = None) -> SessionState:
        return self.hooks.load_state(session_id or self.session_id) or SessionState()

    def delete_session(self, session_id: str | None = None) -> list[str]:
        """Cascade clean-up (seed 5.5) through ``on_delete_session``; returns the errors, if any."""
        sid = session_id or self.session_id
        self._mirrors.pop(sid, None)
        return self.hooks.on_delete_session(sid)

    def close(self) -> None:
        for _, plugin in self.pm.list_name_plugin():
            closer = getattr(plugin, "close", None)
            if callable(closer):
                closer()

    async def aclose(self) -> None:
        for _, plugin in self.pm.list_name_plugin():
            closer = getattr(plugin, "aclose", None)
            if callable(closer):
                await closer()
        self.close()

    def __enter__(self) -> "ProgressiveCompactor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "ProgressiveCompactor":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # --- drivers ------------------------------------------------------------------------------

    def _drive_sync(self, turn: Generator[SummaryRequest, _Summarized, Any]) -> Any:
        try:
            request = next(turn)
            while True:
                try:
                    result = self.hooks.summarize(request)
                    answer = _checked(result)
                except Exception as exc:
                    answer = _Summarized(None, _cause(exc))
                request = turn.send(answer)
        except StopIteration as stop:
            return stop.value

    async def _drive_async(self, turn: Generator[SummaryRequest, _Summarized, Any]) -> Any:
        try:
            request = next(turn)
            while True:
                try:
                    pending = self.hooks.asummarize(request)
                    if pending is not None:
                        result = await pending
                    else:
                        result = await asyncio.to_thread(self.hooks.summarize, request)
                    answer = _checked(result)
                except Exception as exc:
                    answer = _Summarized(None, _cause(exc))
                request = turn.send(answer)
        except StopIteration as stop:
            return stop.value

    # --- one turn -----------------------------------------------------------------------------

    def _turn(
        self, history: History, session_id: str | None, force: bool = False
    ) -> Generator[SummaryRequest, _Summarized, tuple[list[dict[str, Any]], CompactionRecord]]:
        started = time.perf_counter()
        sid = session_id or self.session_id
        window = self.config.context_window
        mirror = self._sync_mirror(sid, history)
        state, reset_error = self._load_state(sid, mirror)
        pending, pending_tokens, pending_dicts, pending_repairs = self._pending(mirror, state)
        self._refresh_view(mirror, state)
        uncovered_tokens = mirror.view_tokens + pending_tokens
        tokens_before = mirror.system_tokens + mirror.compaction_tokens + uncovered_tokens
        msgs_before = mirror.has_system + (mirror.compaction is not None) + len(mirror.view_msgs) + len(pending)
        tier = CompactionTier.EMERGENCY if force else self.hooks.determine_tier(
            tokens_before / window, tokens_before, window
        )
        repairs = mirror.repairs_final + pending_repairs
        turn = _Turn(state=state, uncovered=[], stable=len(mirror.view_msgs), compaction=mirror.compaction)
        if reset_error:
            turn.errors.append(reset_error)
        requested = tier
        if tier is CompactionTier.NONE:
            out = self._fast_view(mirror, pending_dicts)
            tokens_after = tokens_before
        else:
            turn.uncovered = mirror.view_msgs + pending
            tier = yield from self._compact(sid, mirror, turn, tier, tokens_before)
            view = self._assemble(mirror, turn)
            problems = view_problems(view)
            if problems:  # a plugin broke the structure: repair before anything leaves
                view, fixed = repair_tool_pairs(view)
                repairs += fixed
                turn.errors.append(f"repaired view: {problems[0]}")
            out = [message_to_dict(m) for m in view]
            tokens_after = sum(self.hooks.estimate_tokens(view))
            if turn.state is not state:
                turn.state = attrs.evolve(turn.state, version=state.version + 1)
                self._save_state(sid, turn.state, turn.errors)
                self._refresh_view(mirror, turn.state)
        stable_tokens = self._stable_prefix_tokens(mirror, out, tokens_after)
        record = CompactionRecord(
            id=secrets.token_hex(16),
            session_id=sid,
            timestamp=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            tier=tier,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            msgs_before=msgs_before,
            msgs_after=len(out),
            anchors=turn.state.anchors if tier >= CompactionTier.SOFT else (),
            offloaded=tuple(turn.offloaded),
            summarized=turn.summarized,
            preserved_tail=turn.preserved,
            summary_text=self.secrets.redact(turn.state.summary or "") if tier >= CompactionTier.SOFT else "",
            compression_ratio=round(1 - tokens_after / tokens_before, 4) if tokens_before else 0.0,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
            error=self.secrets.redact("; ".join(turn.errors)),
            variant=self.config.variant,
            requested_tier=requested if requested != tier else None,
            plugins=self._plugin_names,
            token_method=self._plugin_names.get("tokens", ""),
            repaired_tool_pairs=repairs,
            cache_stable_prefix_tokens=stable_tokens,
            summarizer_tokens_in=turn.tokens_in,
            summarizer_tokens_out=turn.tokens_out,
            summarizer_calls=turn.summarizer_calls,
            context_window=window,
        )
        self.hooks.persist_record(record)
        return out, record

    def _compact(
        self, sid: str, mirror: _Mirror, turn: _Turn, tier: CompactionTier, tokens: int
    ) -> Generator[SummaryRequest, _Summarized, CompactionTier]:
        """Carry out ``tier``, escalating (Full, then Emergency) when the loop guard says so."""
        window = self.config.context_window
        while True:
            tail_start = self._tail_start(turn)
            plan = self.hooks.apply_tier(
                TierInput(
                    tier=tier,
                    head=tuple(turn.uncovered[:tail_start]),
                    tail=tuple(turn.uncovered[tail_start:]),
                    view_tokens=tokens,
                    context_window=window,
                )
            )
            if plan is None:
                if tier is not CompactionTier.EMERGENCY:
                    turn.errors.append(f"no plugin answered apply_tier for {tier.label}")
                    return tier
                plan = TierPlan(offload=True, offload_tail=True, fallback=True)
            if plan.rewrite is not None:
                turn.uncovered = list(plan.rewrite(list(turn.uncovered)))
                turn.stable = min(turn.stable, len(turn.uncovered))
            count = 0
            if plan.summarize > 0 and not plan.fallback:
                count = self._split(turn.uncovered, plan.summarize, min(tail_start, turn.stable))
            if plan.offload:
                end = len(turn.uncovered) if plan.offload_tail else (count or tail_start)
                self._offload(sid, mirror, turn, end, cache_aware=not (count or plan.fallback))
            if plan.fallback:
                self._fallback(sid, mirror, turn, EMERGENCY_ERROR)
                return CompactionTier.EMERGENCY
            turn.preserved = len(turn.uncovered) - tail_start
            if count > 0:
                failure, grew = yield from self._summarize(sid, mirror, turn, tier, count)
                if failure and not grew:
                    self._fallback(sid, mirror, turn, failure)
                    return CompactionTier.EMERGENCY
                if failure:
                    turn.errors.append(failure)
                turn.preserved = len(turn.uncovered)
            if tier < CompactionTier.SOFT:
                return tier
            tokens = sum(self.hooks.estimate_tokens(self._assemble(mirror, turn)))
            after = self.hooks.determine_tier(tokens / window, tokens, window)
            if after < CompactionTier.SOFT:
                return tier
            turn.errors.append(
                f"loop guard: {tier.label} left the view at {tokens / window:.0%} of the window; escalating"
            )
            tier = CompactionTier(tier + 1)

    def _summarize(
        self, sid: str, mirror: _Mirror, turn: _Turn, tier: CompactionTier, count: int
    ) -> Generator[SummaryRequest, _Summarized, tuple[str | None, bool]]:
        """Fold ``turn.uncovered[:count]`` into the summary.

        Returns ``(cause, grew)``: ``(None, False)`` on success; a failure cause otherwise, with
        ``grew`` true when the summary came back larger than what it replaces (the loop guard).
        """
        messages = turn.uncovered[:count]
        self.hooks.extract_memory(messages, sid)
        facts = self._facts(mirror, turn, count)
        replaced = sum(self.hooks.estimate_tokens(messages))
        previous = turn.state
        request = SummaryRequest(
            messages=tuple(messages),
            previous_summary=previous.summary,
            previous_anchors=previous.anchors,
            facts=facts,
            session_id=sid,
            tier=tier,
            max_summary_tokens=self.summary_budget,
            replaced_tokens=replaced,
        )
        turn.summarizer_calls += 1
        answer = yield request
        if answer.result is None:
            return f"summarizer failed: {answer.error}", False
        result = answer.result
        turn.tokens_in += result.tokens_in or 0
        turn.tokens_out += result.tokens_out or 0
        parsed = self.hooks.parse_anchors(result.text) or anchor_fns.parse_markdown(result.text)
        if parsed.missing:
            turn.errors.append(
                "anchor parsing incomplete: " + ", ".join(t.value for t in parsed.missing) + " set to N/A"
            )
        merged = anchor_fns.ensure_facts(anchor_fns.merge_anchors(previous.anchors, parsed.anchors), facts)
        handles = self._dropped_handles(turn, messages)
        state = attrs.evolve(
            previous,
            summary=parsed.prose or previous.summary,
            anchors=merged,
            covered=previous.covered + count,
            covered_fingerprint=fingerprint(messages[-1]),
            dropped_handles=handles,
        )
        compaction = self._compaction_message(sid, state)
        old_tokens = sum(self.hooks.estimate_tokens([turn.compaction])) if turn.compaction else 0
        new_tokens = self.hooks.estimate_tokens([compaction])[0]
        if new_tokens >= old_tokens + replaced:
            return (
                f"loop guard: the summary ({new_tokens} tokens) is larger than what it replaces "
                f"({old_tokens + replaced} tokens)",
                True,
            )
        turn.state = state
        turn.compaction = compaction
        turn.uncovered = turn.uncovered[count:]
        turn.stable -= count
        turn.summarized += count
        return None, False

    def _fallback(self, sid: str, mirror: _Mirror, turn: _Turn, cause: str) -> None:
        """Truncate to the token budget with no LLM call; the dropped part's facts are kept.

        Every large tool result of the uncovered part is offloaded first (the tail's too), so
        that what truncation drops stays readable through its handle.
        """
        budget = int(self.config.fallback_budget * self.config.context_window)
        if cause != EMERGENCY_ERROR:
            cause = f"{cause}; {EMERGENCY_ERROR}"
        turn.errors.append(cause)
        self._offload(sid, mirror, turn, len(turn.uncovered))
        head = [mirror.system] if mirror.has_system else []
        dropped = 0
        for _ in range(3):  # the compaction message depends on what is dropped: settle it
            state = self._truncated_state(mirror, turn, dropped)
            compaction = self._compaction_message(sid, state) if state.covered else None
            pinned = [*head, compaction] if compaction is not None else head
            result = self.hooks.fallback_compact(pinned + turn.uncovered, len(pinned), budget)
            if result is None:
                raise FallbackError("no fallback_compact plugin answered; fallback-token-budget is essential")
            kept = result[len(pinned):]
            cut = _suffix_start(turn.uncovered, kept)
            if cut is None or cut == dropped:
                break
            dropped = cut
        turn.fallback_view = result
        turn.preserved = len(kept)
        if cut is not None:
            cut = min(cut, turn.stable)
            turn.state = self._truncated_state(mirror, turn, cut)
            turn.compaction = compaction
            turn.summarized += cut
            turn.uncovered = turn.uncovered[cut:]
            turn.stable -= cut

    def _truncated_state(self, mirror: _Mirror, turn: _Turn, cut: int) -> SessionState:
        previous = turn.state
        if cut <= 0:
            return previous
        messages = turn.uncovered[:cut]
        facts = self._facts(mirror, turn, cut)
        merged = anchor_fns.merge_anchors(previous.anchors, anchor_fns.facts_as_anchors(facts))
        note = (
            f"{cut} messages were dropped by emergency truncation without an LLM summary; "
            "the anchors above were extracted from them mechanically."
        )
        return attrs.evolve(
            previous,
            summary=f"{previous.summary}\n\n{note}" if previous.summary else note,
            anchors=anchor_fns.ensure_facts(merged, facts),
            covered=previous.covered + cut,
            covered_fingerprint=fingerprint(messages[-1]),
            dropped_handles=self._dropped_handles(turn, messages),
        )

    # --- pieces -------------------------------------------------------------------------------

    def _facts(self, mirror: _Mirror, turn: _Turn, count: int) -> Facts:
        """Facts of ``turn.uncovered[:count]``, read from the original messages: an offloaded
        result's placeholder no longer shows the error line that its full text has."""
        start = turn.state.covered
        stable = min(count, turn.stable)
        originals = mirror.final[start : start + stable] + turn.uncovered[stable:count]
        facts = extract_facts(originals, intent_limit=self.config.intent_max_chars)
        return attrs.evolve(facts, user_request=mirror.first_request)

    def _tail_start(self, turn: _Turn) -> int:
        """Where the protected tail begins: never inside a tool call's results."""
        start = max(len(turn.uncovered) - self.config.min_tail_messages, 0)
        return min(group_start(turn.uncovered, start), turn.stable)

    @staticmethod
    def _split(messages: Sequence[Message], count: int, limit: int) -> int:
        """A split point near ``count`` but not past ``limit``: forward first, then back."""
        count = min(count, limit)
        index = count
        while index < limit and messages[index].role == "tool":
            index += 1
        if index <= limit and (index >= len(messages) or messages[index].role != "tool"):
            return index
        return group_start(messages, count)

    def _offload(self, sid: str, mirror: _Mirror, turn: _Turn, end: int, cache_aware: bool = False) -> None:
        """Offload the large tool results of ``turn.uncovered[:end]``.

        ``cache_aware`` (an offload that no summary follows, as at Warn): a result is offloaded
        only when what it saves is worth the prompt-cache break, that is when the tokens after it,
        which the provider must then read again at full price, are at most ``offload_break_factor``
        times the tokens it saves. An old result far up the view costs a re-read of everything
        after it and saves a tenth of its size per call (cached tokens are cheap): it waits for the
        summary, which breaks the cache anyway.
        """
        threshold = self.config.offload_threshold
        offloaded = dict(turn.state.offloaded)
        changed = False
        factor = self.config.offload_break_factor if cache_aware else None
        after: list[int] = []
        if factor is not None:
            counts = self.hooks.estimate_tokens(turn.uncovered)
            total = 0
            for count in reversed(counts):
                after.append(total)
                total += count
            after.reverse()
        for i in range(min(end, len(turn.uncovered))):
            m = turn.uncovered[i]
            if m.role != "tool" or not m.tool_call_id or m.tool_call_id in offloaded:
                continue
            size = len(text_of(m))
            if size <= threshold:
                continue
            if factor is not None and after[i] > factor * (counts[i] * (1 - PLACEHOLDER_CHARS / size)):
                continue
            try:
                entry = self.hooks.offload(m, sid, threshold)
            except Exception as exc:  # seed 6.1: keep the original, note the error
                turn.errors.append(f"offload of {m.tool_call_id} failed: {_cause(exc)}")
                continue
            if entry is None:
                continue
            offloaded[m.tool_call_id] = entry
            turn.offloaded.append(entry)
            turn.uncovered[i] = replace_content(m, entry.placeholder)
            changed = True
        if changed:
            turn.state = attrs.evolve(turn.state, offloaded=offloaded)

    @staticmethod
    def _dropped_handles(turn: _Turn, messages: Sequence[Message]) -> tuple[str, ...]:
        handles = list(turn.state.dropped_handles)
        for m in messages:
            entry = turn.state.offloaded.get(m.tool_call_id or "") if m.role == "tool" else None
            if entry is not None and entry.handle not in handles:
                handles.append(entry.handle)
        return tuple(handles)

    @property
    def summary_budget(self) -> int:
        """Tokens the summary may take (the user's request aside), from config and window."""
        config = self.config
        return max(min(config.max_summary_tokens, int(config.summary_share * config.context_window)), 200)

    def _compaction_message(self, sid: Any, state: SessionState) -> Message:
        todo = self.hooks.todo_context(sid) if isinstance(sid, str) and sid else []
        anchors, prose = anchor_fns.fit_summary(
            state.anchors or anchor_fns.empty_anchors(), state.summary or "", self.summary_budget * 4
        )
        text = anchor_fns.compaction_message_text(
            anchors,
            prose,
            covered=state.covered,
            handles=state.dropped_handles[-MAX_HANDLES_LISTED:],
            todo=todo,
        )
        return Message(role="user", content=self.secrets.redact(text))

    def _assemble(self, mirror: _Mirror, turn: _Turn) -> list[Message]:
        if turn.fallback_view is not None:
            return list(turn.fallback_view)
        view = [mirror.system] if mirror.has_system else []
        if turn.compaction is not None:
            view.append(turn.compaction)
        return view + turn.uncovered

    # --- the per-session mirror ---------------------------------------------------------------

    def _sync_mirror(self, sid: str, history: History) -> _Mirror:
        """Bring the cached mirror of ``sid`` up to date with ``history`` (new messages only)."""
        mirror = self._mirrors.get(sid)
        has_system = bool(history) and _role(history[0]) == "system"
        offset = int(has_system)
        if mirror is None or not self._mirror_matches(mirror, history, offset):
            mirror = _Mirror(sid=sid, has_system=has_system)
            self._mirrors[sid] = mirror
            if has_system:
                mirror.system = _as_message(history[0], 0)
                mirror.system_dict = message_to_dict(mirror.system)
                mirror.system_tokens = self.hooks.estimate_tokens([mirror.system])[0]
        seen = offset + mirror.final_src + len(mirror.pending_msgs)
        if len(history) > seen:
            new_src = history[seen:]
            mirror.pending_msgs.extend([_as_message(d, seen + i) for i, d in enumerate(new_src)])
            mirror.last_src = new_src[-1]
            self._finalize(mirror)
        return mirror

    @staticmethod
    def _mirror_matches(mirror: _Mirror, history: History, offset: int) -> bool:
        if mirror.has_system != bool(offset):
            return False
        if offset and history[0] is not mirror.system.raw and history[0] != mirror.system_dict:  # type: ignore[union-attr]
            return False
        seen = offset + mirror.final_src + len(mirror.pending_msgs)
        if len(history) < seen:
            return False
        if seen > offset:
            last = history[seen - 1]
            return last is mirror.last_src or last == mirror.last_src
        return True

    def _finalize(self, mirror: _Mirror) -> None:
        """Move the pending messages whose repair can no longer change into ``final``."""
        msgs = mirror.pending_msgs
        cut = len(msgs) - 1
        while cut > 0 and msgs[cut].role == "tool":
            cut -= 1
        if cut <= 0:
            return
        repaired, repairs = repair_tool_pairs(msgs[:cut], at_start=False)
        if mirror.first_request is None:
            mirror.first_request = first_user_request(repaired, self.config.intent_max_chars)
        mirror.final.extend(repaired)
        mirror.final_tokens.extend(self.hooks.estimate_tokens(repaired))
        mirror.repairs_final += repairs
        mirror.final_src += cut
        del mirror.pending_msgs[:cut]

    def _pending(self, mirror: _Mirror, state: SessionState) -> tuple[list[Message], int, list[dict[str, Any]], int]:
        """The repaired pending messages (offloads applied), their tokens, their dicts and the
        repairs made.

        Cached until the pending messages or the state change: an unchanged history costs nothing.
        """
        key = (len(mirror.pending_msgs), mirror.final_src, state.version)
        if mirror.pending_key == key:
            return mirror.pending_cache
        repaired, repairs = repair_tool_pairs(mirror.pending_msgs, at_start=False)
        if state.offloaded:  # an Emergency offloads pending results too: a retry must see that
            repaired = [_with_offload(m, state) for m in repaired]
        if mirror.first_request is None:
            mirror.first_request = first_user_request(repaired, self.config.intent_max_chars)
        tokens = sum(self.hooks.estimate_tokens(repaired)) if repaired else 0
        mirror.pending_key = key
        mirror.pending_cache = (repaired, tokens, [message_to_dict(m) for m in repaired], repairs)
        return mirror.pending_cache

    def _load_state(self, sid: str, mirror: _Mirror) -> tuple[SessionState, str | None]:
        state = self.hooks.load_state(sid) or SessionState()
        if not state.covered:
            return state, None
        key = (state.covered, state.covered_fingerprint)
        if mirror.verified == key:
            return state, None
        if state.covered <= len(mirror.final):
            last = mirror.final[state.covered - 1]
            # The boundary was fingerprinted as the summary saw it: offloaded, if it was.
            entry = state.offloaded.get(last.tool_call_id or "") if last.role == "tool" else None
            seen = replace_content(last, entry.placeholder) if entry is not None else last
            if state.covered_fingerprint in (fingerprint(last), fingerprint(seen)):
                mirror.verified = key
                return state, None
        mirror.view_version = -1
        fresh = SessionState(version=state.version + 1)
        errors: list[str] = []
        self._save_state(sid, fresh, errors)
        return fresh, "; ".join(
            [
                "session state did not match this history (another history under the same session id?); "
                "started over",
                *errors,
            ]
        )

    def _save_state(self, sid: str, state: SessionState, errors: list[str]) -> None:
        try:
            self.hooks.save_state(sid, state)
        except Exception as exc:
            errors.append(f"saving session state failed: {_cause(exc)}")
        mirror = self._mirrors.get(sid)
        if mirror is not None:
            mirror.verified = (state.covered, state.covered_fingerprint)

    def _refresh_view(self, mirror: _Mirror, state: SessionState) -> None:
        """Keep ``final[covered:]`` with offloads applied, extending it as ``final`` grows."""
        if mirror.view_version != state.version or mirror.view_end < state.covered:
            mirror.view_version = state.version
            mirror.view_msgs, mirror.view_dicts = [], []
            mirror.view_tokens = 0
            mirror.view_end = state.covered
            if state.covered:
                mirror.compaction = self._compaction_message(mirror.sid, state)
                mirror.compaction_dict = message_to_dict(mirror.compaction)
                mirror.compaction_tokens = self.hooks.estimate_tokens([mirror.compaction])[0]
            else:
                mirror.compaction, mirror.compaction_dict, mirror.compaction_tokens = None, None, 0
        end = len(mirror.final)
        if mirror.view_end >= end:
            return
        offloaded = state.offloaded
        for i in range(mirror.view_end, end):
            m = mirror.final[i]
            tokens = mirror.final_tokens[i]
            entry = offloaded.get(m.tool_call_id) if offloaded and m.role == "tool" else None  # type: ignore[arg-type]
            # A tool call id reused later in the session must not get the earlier result's placeholder.
            if entry is not None and entry.chars == len(text_of(m)):
                m = replace_content(m, entry.placeholder)
                tokens = self.hooks.estimate_tokens([m])[0]
            mirror.view_msgs.append(m)
            mirror.view_dicts.append(message_to_dict(m))
            mirror.view_tokens += tokens
        mirror.view_end = end

    @staticmethod
    def _fast_view(mirror: _Mirror, pending_dicts: list[dict[str, Any]]) -> list[Any]:
        out: list[Any] = [mirror.system_dict] if mirror.has_system else []
        if mirror.compaction_dict is not None:
            out.append(mirror.compaction_dict)
        out += mirror.view_dicts
        out += pending_dicts
        return out

    def _stable_prefix_tokens(self, mirror: _Mirror, out: list[Any], tokens: int) -> int:
        """Tokens at the start of this view that equal the previous view's (prompt-cache hits)."""
        prev = mirror.prev_out
        n = len(prev)
        if n <= len(out) and out[:n] == prev:
            stable = mirror.prev_tokens
        else:
            common = 0
            limit = min(n, len(out))
            while common < limit and (out[common] is prev[common] or out[common] == prev[common]):
                common += 1
            stable = (
                sum(self.hooks.estimate_tokens([_as_message(d, i) for i, d in enumerate(out[:common])]))
                if common
                else 0
            )
        mirror.prev_out = out
        mirror.prev_tokens = tokens
        return stable


def _with_offload(message: Message, state: SessionState) -> Message:
    """``message`` with its offload placeholder, if the state says it was offloaded."""
    entry = state.offloaded.get(message.tool_call_id or "") if message.role == "tool" else None
    if entry is None or entry.chars != len(text_of(message)):
        return message
    return replace_content(message, entry.placeholder)


def _role(item: Any) -> Any:
    return item.role if isinstance(item, Message) else item.get("role") if isinstance(item, Mapping) else None


def _as_message(item: Any, index: int) -> Message:
    if isinstance(item, Message):
        return item
    return message_from_dict(item, index)


def _suffix_start(items: Sequence[Message], kept: Sequence[Message]) -> int | None:
    """Where ``kept`` starts as a suffix of ``items``, or None if it is not one.

    A fallback may shorten the content of a message it keeps, so messages are matched by role
    and tool call id rather than by identity.
    """
    start = len(items) - len(kept)
    if start < 0:
        return None
    for a, b in zip(items[start:], kept):
        if a is not b and (a.role != b.role or a.tool_call_id != b.tool_call_id):
            return None
    return start


def _checked(result: SummaryResult | None) -> _Summarized:
    if result is None:
        return _Summarized(None, "no summarizer plugin answered")
    if not isinstance(result, SummaryResult):
        return _Summarized(None, f"summarizer returned {type(result).__name__}, not a SummaryResult")
    if not result.text or not result.text.strip():
        return _Summarized(None, "summarizer returned empty text")
    return _Summarized(result)


def _cause(exc: BaseException) -> str:
    if isinstance(exc, SummarizerError):
        return exc.cause
    return f"{type(exc).__name__}: {exc}"


class _TodoAdapter:
    def __init__(self, fn: Callable[[], str | None]):
        self.fn = fn

    @hookimpl
    def todo_context(self, session_id: str) -> str | None:
        return self.fn()


class _MemoryAdapter:
    def __init__(self, fn: Callable[[Sequence[Message]], Any]):
        self.fn = fn

    @hookimpl
    def extract_memory(self, messages: Sequence[Message], session_id: str) -> None:
        self.fn(messages)


class _StoreAdapter:
    def __init__(self, store: Any):
        self.store = store

    @hookimpl
    def persist_record(self, record: CompactionRecord) -> None:
        save = getattr(self.store, "save", None) or getattr(self.store, "append", None) or self.store
        save(record)


__all__ = ["ProgressiveCompactor", "EMERGENCY_ERROR", "InvalidMessagesError"]
