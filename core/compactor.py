"""ProgressiveCompactor: tiered compaction of an agent's history, one turn at a time.

::

    history (never modified) ─► compact_with_record(history) ─► (view sent to the LLM, record)

A turn: load the session's state, bring the per-session cache up to date with the new messages,
decide the tier on the view that would be sent, carry out the tier (offload, summarize, truncate,
with the loop guard escalating when a compaction does not bring the view below Soft), check the
view's structure, save the state, build and store the record. The design document of the
repository (``docs/architecture.md``) explains why.

The tier logic is written once, as a generator (:meth:`ProgressiveCompactor._turn`) that yields a
:class:`SummaryRequest` whenever it needs a summary; the synchronous API answers it by calling the
``summarize`` hook, the asynchronous API by awaiting ``asummarize``. Nothing else differs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any

import attrs

from .config import CompactorConfig, config_to_dict, deep_merge
from .converters import EMERGENCY_CAUSE
from .errors import CompactorError, SummarizerError
from .messages import message_from_dict, message_to_dict, repair_tool_pairs, view_problems, with_result_text
from .models import (
    CompactionRecord,
    CompactionTier,
    Message,
    SessionInfo,
    SessionState,
    SummaryRequest,
    SummaryResult,
    TurnContext,
)
from .options import keyword_plugins
from .plugin_manager import TIER_ROLES, Hooks, PluginContext, get_plugin_manager
from .record_stamp import new_record_id, record_timestamp
from .redaction import SecretRegistry, config_registry
from .session_cache import SessionCache
from .session_memory import Finished, SessionMemory, advanced, cancelling
from .tiers import Summarized, TierRunner, TurnWork
from .tools import read_result
from .usage import NO_CORRECTION, Correction, UsageAnchors, corrected
from .validation import config_from_dict, load_config

log = logging.getLogger("progressive_compactor")
EMERGENCY_ERROR = EMERGENCY_CAUSE
History = Sequence[Mapping[str, Any] | Message]
SAVE_ATTEMPTS = 3
"""A turn whose new state loses its compare-and-set save starts over this many times in all."""
TurnResult = tuple[list[dict[str, Any]], CompactionRecord]


class ProgressiveCompactor:
    """Tiered, progressive compaction of long agent histories; see the module docstring.

    ``config`` is a :class:`CompactorConfig`, a bundled config name, a YAML path or a mapping (what
    a YAML file holds); any other keyword (``context_window=...``, ``plugins={...}``,
    ``config={plugin: {...}}``) overrides that config's top-level keys, nested mappings merged.
    ``todo_injector`` (a callable returning text for the compaction message), ``memory_extractor``
    (a callable given the messages about to be summarized), ``record_store`` (an object with
    ``save``/``append``, or a callable) and ``offloader`` (a plugin object) are registered as
    plugins, as are ``extra_plugins`` (``(name, object)`` pairs, the config may select them too).
    """

    def __init__(
        self,
        config: CompactorConfig | str | Mapping[str, Any] | None = None,
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
        extra = [*keyword_plugins(todo_injector, memory_extractor, record_store, offloader), *extra_plugins]
        named = dict(extra)
        if isinstance(config, (CompactorConfig, Mapping)):  # a config, or what a YAML file holds
            base = config_to_dict(config) if isinstance(config, CompactorConfig) else dict(config)
            config = config_from_dict(deep_merge(base, overrides), extra_plugins=named)
        else:
            config = load_config(config, extra_plugins=named, **overrides)
        if not session_id:
            raise CompactorError("session_id must not be empty")
        self.config = config
        self.session_id = session_id
        self.secrets: SecretRegistry = config_registry(config)
        self.pm = get_plugin_manager(config, extra_plugins=extra, context=PluginContext(config, self.secrets))
        roles = config.plugins.roles()
        self.hooks = Hooks(self.pm, {tier: roles[role] for tier, role in TIER_ROLES.items()}, self.secrets)
        self._plugin_names = {role: name for role, name in roles.items() if name != "none"}
        self._tiers = TierRunner(self.config, self.hooks, self.secrets)
        self._usage = UsageAnchors(config.context_window, self.secrets.redact)
        self._memory = SessionMemory(config.cached_sessions, self._usage, config.async_threads)
        """The sessions' caches (the most recently compacted), and a lock per session served."""

    # --- compacting ---------------------------------------------------------------------------

    def compact(self, history: History, session_id: str | None = None) -> list[dict[str, Any]]:
        """The compacted view alone."""
        return self.compact_with_record(history, session_id)[0]

    def compact_force(self, history: History, session_id: str | None = None) -> list[dict[str, Any]]:
        """Force the Emergency tier, as a manual ``/compact`` does: truncation, no LLM call."""
        return self._run_sync(history, session_id, force=True)[0]

    def compact_with_record(self, history: History, session_id: str | None = None) -> TurnResult:
        """The view to send to the LLM, and the record of what was done."""
        return self._run_sync(history, session_id)

    async def acompact(self, history: History, session_id: str | None = None) -> list[dict[str, Any]]:
        return (await self.acompact_with_record(history, session_id))[0]

    async def acompact_force(self, history: History, session_id: str | None = None) -> list[dict[str, Any]]:
        return (await self._run_async(history, session_id, force=True))[0]

    async def acompact_with_record(self, history: History, session_id: str | None = None) -> TurnResult:
        return await self._run_async(history, session_id)

    # --- other services -----------------------------------------------------------------------

    def offload_tool_result(self, message: Mapping[str, Any], session_id: str | None = None) -> dict[str, Any]:
        """Offload a tool result as it arrives: call it before the result enters the history.

        A result longer than ``tool_result_threshold`` characters is written out and the message
        comes back with a placeholder; anything else comes back unchanged. Fail-open: when writing
        fails the original comes back.
        """
        sid = self._session_id(session_id)
        m = message_from_dict(message)
        try:
            entry = self.hooks.offload(m, sid, self.config.tool_result_threshold)
        except Exception as exc:  # noqa: BLE001 - fail-open
            log.warning("offloading a tool result failed: %s", self.secrets.redact(f"{m.tool_call_id}: {exc}"))
            return dict(message)
        if entry is None:
            return dict(message)
        return message_to_dict(with_result_text(m, entry.placeholder))

    def read_tool_result(
        self, handle: str, lines: tuple[int, int] | None = None, *, session_id: str | None = None
    ) -> str:
        """Full text of an offloaded tool result, or lines ``start..end`` (1-based, inclusive).

        With ``session_id`` (the session whose model asks), a handle of another session's result
        is refused: where one compactor serves several users, one user's model never reads
        another's results, whatever handle it writes. The session's part of a handle alone
        (``"{session}/"``, which a compaction message names when it lists only the newest
        handles) lists the handles the session's state keeps, one a line.
        """
        return read_result(self, handle, lines, session_id)

    def observe_usage(
        self, session_id: str | None, input_tokens: int, record: CompactionRecord | None = None
    ) -> float | None:
        """The provider's count of the last view returned for the session, or of ``record``'s
        (``compact_with_record``'s: model calls in flight together, a report that comes late).

        ``input_tokens`` is the whole prompt the provider reported for the request that sent that
        view (OpenAI's ``prompt_tokens``/``input_tokens``; Anthropic's ``input_tokens`` plus its
        ``cache_creation_input_tokens`` and ``cache_read_input_tokens``). The session's views then
        count ``offset + scale × estimate`` (the offset: tool definitions), learnt from the reports
        (records say them: ``token_offset``, ``token_correction``). Returns ``reported ÷ estimated``
        (at most 4); None without such a view (none yet, or not among the latest) or a count under a quarter of it."""
        return self._usage.observe(self._session_id(session_id), input_tokens, record.id if record else None)

    def state(self, session_id: str | None = None) -> SessionState:
        """The saved state of a session (an empty state for a new one)."""
        return self.hooks.load_state(self._session_id(session_id)) or SessionState()

    def records(self, session_id: str | None = None) -> list[CompactionRecord] | None:
        """The stored records of a session, oldest first; None when no store can read them back."""
        return self.hooks.read_records(self._session_id(session_id))

    def sessions(self) -> list[SessionInfo]:
        """Every session that a plugin keeps something for (offloads, records, state)."""
        return self.hooks.list_sessions()[0]

    def delete_session(self, session_id: str | None = None) -> list[str]:
        """Delete a session everywhere (offloads, records, state); returns the errors, if any."""
        sid = self._session_id(session_id)
        self._memory.forget(sid)
        return self.hooks.on_delete_session(sid)

    def close(self) -> None:
        self.hooks.close()
        self._memory.close()

    async def aclose(self) -> None:
        """Close every plugin, awaiting the ``aclose()`` of those that have one; one that raises
        is logged as a warning and the others are closed all the same."""
        for name, plugin in self.pm.list_name_plugin():
            closer = getattr(plugin, "aclose", None)
            if callable(closer):
                try:
                    await closer()
                except Exception as exc:  # noqa: BLE001 - one plugin's failure must not leak the others
                    log.warning(
                        "aclose of plugin %s failed: %s", name, self.secrets.redact(f"{type(exc).__name__}: {exc}")
                    )
        self.close()

    def __enter__(self) -> ProgressiveCompactor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> ProgressiveCompactor:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # --- drivers: one turn of a session at a time; who answers the summary requests -----------

    def _run_sync(self, history: History, session_id: str | None, force: bool = False) -> TurnResult:
        sid = self._session_id(session_id)
        try:
            with self._memory.enter(sid):
                return self._drive_sync(self._turn(history, sid, force))
        finally:
            self._memory.leave(sid)

    async def _run_async(self, history: History, session_id: str | None, force: bool = False) -> TurnResult:
        sid = self._session_id(session_id)
        history = list(history)  # as it is now: the turn runs in a thread while the caller goes on
        async with self._memory.aserving(sid):
            return await self._drive_async(self._turn(history, sid, force))

    def _drive_sync(self, turn: Generator[SummaryRequest, Summarized, TurnResult]) -> TurnResult:
        try:
            request = next(turn)
            while True:
                try:
                    answer = checked(self.hooks.summarize(request))
                except Exception as exc:  # noqa: BLE001 - any failure means "fall back"
                    answer = Summarized.failed(cause(exc), exc)
                request = turn.send(answer)
        except StopIteration as stop:
            result: TurnResult = stop.value
            return result

    async def _drive_async(self, turn: Generator[SummaryRequest, Summarized, TurnResult]) -> TurnResult:
        """As :meth:`_drive_sync`, the turn's own steps run off the event loop (:func:`advanced`)."""
        step = await advanced(turn, None, self._memory.steps())
        while not isinstance(step, Finished):
            try:
                pending = self.hooks.asummarize(step)
                result: SummaryResult | None
                if pending is not None:
                    result = await pending
                else:
                    result = await asyncio.to_thread(self.hooks.summarize, step)
                answer = checked(result)
            except (Exception, asyncio.CancelledError) as exc:  # any failure means "fall back"
                if isinstance(exc, asyncio.CancelledError) and cancelling():
                    raise  # this turn is cancelled (not the summarizer's own call): it stops, saving nothing
                answer = Summarized.failed(cause(exc), exc)
            step = await advanced(turn, answer, self._memory.steps())
        return step.value

    # --- one turn -----------------------------------------------------------------------------

    def _turn(
        self, history: History, session_id: str | None, force: bool = False
    ) -> Generator[SummaryRequest, Summarized, TurnResult]:
        """One turn; started over from the stored state when another worker saved first."""
        started = time.perf_counter()
        sid = self._session_id(session_id)
        lost: list[TurnWork] = []  # attempts whose save lost: their summaries were paid, their offloads written
        correction = self._usage.correction(sid)  # the provider's count of a view (none: not reported)
        for attempt in range(1, SAVE_ATTEMPTS + 1):
            done = yield from self._attempt(history, sid, force, correction, last=attempt == SAVE_ATTEMPTS)
            if not isinstance(done, TurnWork):
                break
            lost.append(done)
        cache, out, messages, work, tier, requested, before, after, msgs_before, repairs = done
        for earlier in lost:
            work.summarizer_calls += earlier.summarizer_calls
            work.tokens_in += earlier.tokens_in
            work.tokens_out += earlier.tokens_out
            work.tokens_in_cached += earlier.tokens_in_cached
            # A save whose answer was lost stored the state all the same: the next attempt finds
            # these results offloaded already, and only this record says which call did it.
            work.offloaded += [entry for entry in earlier.offloaded if entry not in work.offloaded]
        out = cache.renewed(out)
        stable = correction.total(cache.stable_prefix_tokens(out, after, messages))
        estimated, before, after = after, correction.total(before), correction.total(after)
        record = self._record(
            work, tier, requested, started, before, after, msgs_before, len(out), repairs, stable, correction
        )
        self._usage.returned(sid, estimated, record.id)
        self.hooks.persist_record(record)
        return out, record

    def _attempt(
        self, history: History, sid: str, force: bool, correction: Correction, *, last: bool
    ) -> Generator[SummaryRequest, Summarized, Any]:
        """Compute the view once. When the new state loses its compare-and-set save, return the
        work done and start over (not on the ``last`` attempt, which keeps its view and records
        that the state was not saved). The tier is decided on the estimator's counts as
        ``correction`` corrects them (provider usage anchoring); the counts returned are the
        estimator's own."""
        window = self.config.context_window
        tiers = self._tiers if correction.none else TierRunner(self.config, self.hooks, self.secrets, correction)
        cache = self._cache(sid, history)
        state, reset_errors, stale = self._load_state(sid, cache)
        recent = cache.recent(state)
        cache.refresh(state, self._tiers.compaction_message_for(sid))
        tokens_before = cache.system_tokens + cache.compaction_tokens + cache.uncovered_tokens + recent.tokens
        msgs_before = len(cache.head()) + len(cache.uncovered) + len(recent.messages)
        tokens = correction.total(tokens_before)
        system_tokens = correction.total(cache.system_tokens)  # with the provider's offset: neither shrinks
        context = TurnContext(sid, window, tokens, msgs_before, len(history), state, force, system_tokens)
        requested = CompactionTier.EMERGENCY if force else self.hooks.determine_tier(tokens, window, context)
        work = TurnWork(sid, context, state, [], stable=len(cache.uncovered), compaction=cache.compaction)
        work.errors += reset_errors
        repairs = cache.settled_repairs + recent.repairs

        def unchanged(tier: CompactionTier) -> Any:
            """The view as it stands (the cached one): this turn changes nothing."""
            view = cache.unchanged_view(recent)
            return cache, view, None, work, tier, requested, tokens_before, tokens_before, msgs_before, repairs

        if requested is CompactionTier.NONE and tokens <= window:  # else the tiers keep to the window
            return unchanged(requested)
        work.uncovered = cache.uncovered + recent.messages
        counts = cache.uncovered_counts + recent.counts
        work.counts = counts if correction.none else [corrected(c, correction.scale) for c in counts]
        if self.config.summary_requests == "cache-friendly":
            work.sent = cache.head() + work.uncovered
        tier = yield from tiers.run(cache, work, requested, tokens)
        if work.state is state and not work.rewritten and work.fallback_view is None:  # nothing to do at this tier
            return unchanged(tier)
        view = tiers.assemble(cache, work)
        problems = view_problems(view)
        fixed_view = bool(problems)
        if problems:  # a plugin broke the structure: repair before anything leaves
            view, fixed = repair_tool_pairs(view)
            repairs += fixed
            work.errors.append(f"repaired view: {problems[0]}")
        kept_in_step = not fixed_view and correction.none  # else the counts are corrected: estimate afresh
        tokens_after = self._tiers.view_tokens(cache, work) if kept_in_step else sum(self.hooks.estimate_tokens(view))
        if work.state is not state:
            work.state = attrs.evolve(work.state, version=state.version + 1)
            if tier >= CompactionTier.SOFT:  # where this compaction landed, in the counts the policy compares
                landed = correction.total(tokens_after)
                work.state = attrs.evolve(work.state, landed_tokens=landed, landed_messages=context.history_messages)
            save_errors: list[str] = []
            # A stale turn (an earlier one sent again) saves nothing: the newer state stays.
            saved = False if stale else self._save_state(sid, cache, work.state, save_errors)
            if saved:
                cache.refresh(work.state, self._tiers.compaction_message_for(sid))
            else:  # the next attempt (or turn) builds its view from the state that is stored
                cache.forget_view()
                if saved is None and not last:
                    return work
            work.errors += save_errors  # a save that failed (not one that lost) is said at once
        out = [message_to_dict(m) for m in view]
        return cache, out, view, work, tier, requested, tokens_before, tokens_after, msgs_before, repairs

    def _record(
        self,
        work: TurnWork,
        tier: CompactionTier,
        requested: CompactionTier,
        started: float,
        tokens_before: int,
        tokens_after: int,
        msgs_before: int,
        msgs_after: int,
        repairs: int,
        stable_tokens: int,
        correction: Correction = NO_CORRECTION,
    ) -> CompactionRecord:
        summarized = tier >= CompactionTier.SOFT
        redact = self.secrets.redact
        return CompactionRecord(
            id=new_record_id(),
            session_id=work.session_id,
            timestamp=record_timestamp(),
            tier=tier,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            msgs_before=msgs_before,
            msgs_after=msgs_after,
            anchors=work.state.anchors if summarized else (),
            offloaded=tuple(work.offloaded),
            summarized=work.summarized,
            preserved_tail=work.preserved,
            summary_text=self.secrets.redact_registered(work.state.summary or "") if summarized else "",
            compression_ratio=round(1 - tokens_after / tokens_before, 4) if tokens_before else 0.0,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
            errors=tuple(map(redact, work.errors)) if work.errors else (),
            fallback=work.fallback,
            escalations=tuple(map(redact, work.escalations)),
            variant=self.config.variant,
            requested_tier=requested if requested != tier else None,
            plugins=self._plugin_names,
            token_method=self._plugin_names.get("tokens", ""),
            repaired_tool_pairs=repairs,
            cache_stable_prefix_tokens=stable_tokens,
            summarizer_tokens_in=work.tokens_in,
            summarizer_tokens_out=work.tokens_out,
            summarizer_tokens_in_cached=work.tokens_in_cached,
            summarizer_calls=work.summarizer_calls,
            context_window=self.config.context_window,
            token_correction=round(correction.scale, 4),
            token_offset=correction.offset,
        )

    # --- the session's cache and state --------------------------------------------------------

    def _session_id(self, session_id: str | None) -> str:
        sid = self.session_id if session_id is None else session_id
        if not isinstance(sid, str) or not sid:
            raise CompactorError(f"session_id must be a non-empty string, got {sid!r}")
        return sid

    def _cache(self, sid: str, history: History) -> SessionCache:
        """The session's cache, brought up to date with ``history`` (new messages only)."""
        cache = self._memory.caches.get(sid)
        if cache is None or not cache.continues(history):
            cache = SessionCache(
                sid,
                history,
                self.hooks.estimate_tokens,
                self.config.intent_max_chars,
                self.secrets,
                self.config.pin_request,
            )
            self._memory.keep(sid, cache)
        cache.read(history)
        return cache

    def _load_state(self, sid: str, cache: SessionCache) -> tuple[SessionState, list[str], bool]:
        """The saved state, the errors, and whether this turn is stale (:meth:`SessionCache.served_stale`):
        served from its history, it saves nothing, so the turns that continue the state keep it.
        The state starts over from the history when it cannot be read, or does not match."""
        try:
            state = self.hooks.load_state(sid) or SessionState()
        except Exception as exc:  # noqa: BLE001 - fail-open: start from the history
            cache.forget_view()
            return SessionState(), [f"loading session state failed: {cause(exc)}; started from the history"], False
        if cache.boundary_matches(state):
            return cache.masked(state), [], False
        cache.forget_view()
        if cache.served_stale(state):
            kept = "session state covers more messages than this history has (an earlier turn sent again?)"
            return SessionState(variant=state.variant), [f"{kept}; served from the history, nothing saved"], True
        reason = "did not match this history (another history under the same session id?)"
        reason = "covers messages this history went on without (rewound)" if cache.shorter_than(state) else reason
        fresh = SessionState(version=state.version + 1, variant=state.variant)  # the variant is for life
        errors: list[str] = []
        self._save_state(sid, cache, fresh, errors)
        return fresh, [f"session state {reason}; started over", *errors], False

    def _save_state(self, sid: str, cache: SessionCache, state: SessionState, errors: list[str]) -> bool | None:
        """Save ``state`` (compare-and-set). True when saved; None when another turn of the
        session saved first; False when saving failed. Either cause goes into ``errors``."""
        try:
            saved = self.hooks.save_state(sid, state)
        except Exception as exc:  # noqa: BLE001 - fail-open: the view stays valid
            errors.append(f"saving session state failed: {cause(exc)}")
            return False
        if saved is False:
            errors.append("saving session state failed: another turn of this session saved its state first")
            return None
        cache.saved(state)
        return True


def checked(result: SummaryResult | None) -> Summarized:
    """A summarizer's answer, or why it cannot be used."""
    if result is None:
        return Summarized(None, "no summarizer plugin answered")
    if not isinstance(result, SummaryResult):
        return Summarized(None, f"summarizer returned {type(result).__name__}, not a SummaryResult")
    if not result.text or not result.text.strip():
        return Summarized(None, "summarizer returned empty text")
    return Summarized(result)


def cause(exc: BaseException) -> str:
    return exc.cause if isinstance(exc, SummarizerError) else f"{type(exc).__name__}: {str(exc) or 'no message'}"


__all__ = ["EMERGENCY_ERROR", "ProgressiveCompactor"]
