"""Carrying out a tier: what the core does with the plan a tier plugin returns.

A tier plugin (the one the config selects for the tier's role) looks at the head and the tail
and returns a :class:`~progressive_compactor.models.TierPlan`; :class:`TierRunner` carries it out:

1. ``rewrite``: a pure function of the uncovered messages (observation masking);
2. ``offload``: large tool results of the head (or of the part summarized, or with
   ``offload_tail`` of everything) move out of the view, each leaving a placeholder and a handle;
3. ``summarize``: the oldest messages fold into the summary, the split moved so that no tool call
   is separated from its results and nothing of the protected tail is taken;
4. ``fallback``: truncation to the token budget with no LLM call, after offloading everything
   large; the dropped part's facts go into a mechanical compaction message.

The loop guard: a summary larger than what it replaces falls back to truncation, and a Soft or
Full compaction that leaves the view at Soft or above escalates one tier (Full, then Emergency)
instead of coming back every turn.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from itertools import accumulate
from typing import Any

import attrs

from . import anchors as anchor_fns
from .config import CompactorConfig
from .converters import EMERGENCY_CAUSE
from .errors import FallbackError
from .facts import extract_facts
from .messages import carried_result, group_start, text_of, with_result_text
from .models import (
    MAX_DROPPED_HANDLES,
    Anchor,
    CompactionTier,
    Facts,
    Message,
    OffloadEntry,
    SessionState,
    SummaryRequest,
    SummaryResult,
    TierInput,
    TierPlan,
    TurnContext,
)
from .plugin_manager import Hooks
from .redaction import SecretRegistry, redact_data
from .session_cache import SessionCache
from .tools import placeholder_handle
from .usage import NO_CORRECTION, CorrectedHooks, Correction, corrected

PLACEHOLDER_CHARS = 1700
"""About the size of an offload placeholder, to judge what an offload saves before doing it."""
MAX_HANDLES_LISTED = 20
"""The compaction message lists the handles of this many of the latest offloaded results."""


@attrs.define
class Summarized:
    """What the turn gets back for a SummaryRequest: a result, or why there is none (and the
    tokens the provider billed for a reply it sent that was rejected)."""

    result: SummaryResult | None
    error: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_in_cached: int = 0

    @classmethod
    def failed(cls, cause: str, exc: BaseException) -> Summarized:
        """The answer for a summarizer that raised ``exc``: a :class:`SummarizerError` may carry
        the usage of a rejected reply."""
        return cls(
            None,
            cause,
            getattr(exc, "tokens_in", None) or 0,
            getattr(exc, "tokens_out", None) or 0,
            getattr(exc, "tokens_in_cached", None) or 0,
        )


@attrs.define
class TurnWork:
    """The working state of one turn's compaction."""

    session_id: str
    context: TurnContext
    state: SessionState
    uncovered: list[Message]
    stable: int
    """``uncovered[:stable]`` may be folded into the summary; the rest is still being repaired."""
    compaction: Message | None
    counts: list[int] = attrs.Factory(list)
    """The token count of each message of ``uncovered``, kept in step with it."""
    rewritten: bool = False
    """A tier's rewrite changed the uncovered messages (the view differs though the state does not)."""
    errors: list[str] = attrs.Factory(list)
    escalations: list[str] = attrs.Factory(list)
    fallback: bool = False
    offloaded: list[OffloadEntry] = attrs.Factory(list)
    summarized: int = 0
    summarizer_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_in_cached: int = 0
    sent: list[Message] = attrs.Factory(list)
    """The view the previous call sent (only kept for cache-friendly summary requests)."""
    fallback_view: list[Message] | None = None
    preserved: int = 0
    """Messages after the compaction message kept as original text."""


class TierRunner:
    """Carries out tiers for one compactor (its config, hooks and secrets)."""

    def __init__(
        self, config: CompactorConfig, hooks: Hooks, secrets: SecretRegistry, correction: Correction = NO_CORRECTION
    ):
        """``correction`` corrects every token count of the turn (provider usage anchoring): the
        counts in :class:`TurnWork` must be corrected by the caller, the rest is done here (the
        messages count ``scale ×`` their estimate; the offset is counted once per view)."""
        self.config = config
        self.hooks = hooks if correction.none else CorrectedHooks(hooks, correction.scale)
        self.secrets = secrets
        self.correction = correction
        self._last_message: tuple[tuple[Any, ...], Message] | None = None
        """The last compaction message built and what it was built from (the secrets to mask
        included): a turn builds the message of its new state, then the cache asks for it again
        once the state is saved."""

    def run(
        self, cache: SessionCache, work: TurnWork, tier: CompactionTier, tokens: int
    ) -> Generator[SummaryRequest, Summarized, CompactionTier]:
        """Carry out ``tier``, escalating (Full, then Emergency) when the loop guard says so, and to
        Emergency when what a tier leaves is over the window, whatever the policy says: the
        provider refuses such a view. None (no tier plugin, no plan) is asked only over the window."""
        window = self.config.context_window
        while True:
            tail_start = self._tail_start(work)
            tier_input = TierInput(
                tier=tier,
                head=tuple(work.uncovered[:tail_start]),
                tail=tuple(work.uncovered[tail_start:]),
                view_tokens=tokens,
                context_window=window,
                head_tokens=tuple(work.counts[:tail_start]),
                tail_tokens=tuple(work.counts[tail_start:]),
            )
            plan = self.hooks.apply_tier(tier_input, work.context)
            if plan is None:
                if tier is not CompactionTier.EMERGENCY:
                    tier = self._over_the_window(work, tier, self.view_tokens(cache, work))
                    if tier is not CompactionTier.EMERGENCY:
                        return tier
                    continue
                plan = TierPlan(offload=True, offload_tail=True, fallback=True)
            if plan.rewrite is not None:
                rewritten = list(plan.rewrite(list(work.uncovered)))
                if rewritten != work.uncovered:
                    work.uncovered, work.rewritten = rewritten, True
                    work.counts = self.hooks.estimate_tokens(rewritten)
                work.stable = min(work.stable, len(work.uncovered))
            count = 0
            if plan.summarize > 0 and not plan.fallback:
                count = self._split(work.uncovered, plan.summarize, min(tail_start, work.stable))
            if plan.offload:
                end = (
                    len(work.uncovered)
                    if plan.offload_tail
                    else tail_start
                    if plan.offload_head
                    else (count or tail_start)
                )
                factor = plan.offload_break_factor if not (count or plan.fallback) else None
                self._offload(cache, work, end, factor)
            if plan.fallback:
                self._fallback(cache, work)
                return CompactionTier.EMERGENCY
            work.preserved = len(work.uncovered) - tail_start
            if count > 0:
                failure, grew = yield from self._summarize(cache, work, tier, count)
                if failure and not grew:
                    work.errors.append(failure)
                    self._fallback(cache, work)
                    return CompactionTier.EMERGENCY
                if failure:
                    work.escalations.append(failure)
                work.preserved = len(work.uncovered)
            tokens = self.view_tokens(cache, work)
            if tier < CompactionTier.SOFT or self._asked_again(tokens, work) < CompactionTier.SOFT:
                tier = self._over_the_window(work, tier, tokens)
                if tier is not CompactionTier.EMERGENCY:
                    return tier
                continue
            work.escalations.append(
                f"loop guard: {tier.label} left the view at {tokens / window:.0%} of the window; escalating"
            )
            tier = CompactionTier(tier + 1)

    def _asked_again(self, tokens: int, work: TurnWork) -> CompactionTier:
        """The policy's tier for the view a compaction left (the loop guard's question)."""
        recheck = attrs.evolve(work.context, after_compaction=True)
        return self.hooks.determine_tier(tokens, self.config.context_window, recheck)

    def _over_the_window(self, work: TurnWork, tier: CompactionTier, tokens: int) -> CompactionTier:
        """``tier`` when the view it leaves (``tokens``) fits the window, else Emergency, said in
        the record's escalations."""
        window = self.config.context_window
        if tokens <= window or not self.config.enforce_window:
            return tier
        what = "the policy asked for no compaction with" if tier is CompactionTier.NONE else f"{tier.label} left"
        work.escalations.append(
            f"{what} the view over the context window ({tokens / window:.0%}); escalating to Emergency"
        )
        return CompactionTier.EMERGENCY

    def _summarize(
        self, cache: SessionCache, work: TurnWork, tier: CompactionTier, count: int
    ) -> Generator[SummaryRequest, Summarized, tuple[str | None, bool]]:
        """Fold ``work.uncovered[:count]`` into the summary.

        Returns ``(cause, grew)``: ``(None, False)`` on success; a failure cause otherwise, with
        ``grew`` true when the summary came back larger than what it replaces (the loop guard).
        """
        messages = work.uncovered[:count]
        replaced = sum(work.counts[:count])
        old_tokens = sum(self.hooks.estimate_tokens([work.compaction])) if work.compaction else 0
        old_tokens += self._pinned_tokens(cache, work.state)
        facts = self._facts(cache, work, count)
        least = self._least_compaction_tokens(cache, work, count, facts) if replaced <= _growth_bound(facts) else 0
        if old_tokens + replaced <= least:  # no summary can be smaller: spare the summarizer call
            return (
                f"loop guard: what a summary would replace ({old_tokens + replaced} tokens) is no larger "
                f"than the compaction message would be with nothing new but the facts ({least} tokens)",
                True,
            )
        start, end = work.state.covered, work.state.covered + count
        rejected_from, rejected_to = cache.rejected_summary
        if start == rejected_from and end <= rejected_to:  # the same rejection is not paid for every turn
            return "loop guard: a summary of these messages came back larger than them on an earlier turn", True
        self.hooks.extract_memory(messages, work.session_id)
        previous = work.state
        request = SummaryRequest(
            messages=tuple(messages),
            previous_summary=previous.summary,
            previous_anchors=previous.anchors,
            facts=facts,
            session_id=work.session_id,
            tier=tier,
            max_summary_tokens=self.summary_budget,
            replaced_tokens=replaced,
            view=tuple(work.sent),
        )
        work.summarizer_calls += 1
        answer = yield request
        if answer.result is None:
            work.tokens_in += answer.tokens_in
            work.tokens_out += answer.tokens_out
            work.tokens_in_cached += answer.tokens_in_cached
            return f"summarizer failed: {answer.error}", False
        result = answer.result
        work.tokens_in += result.tokens_in or 0
        work.tokens_out += result.tokens_out or 0
        work.tokens_in_cached += result.tokens_in_cached or 0
        text = self.secrets.redact(result.text)  # masked as it enters the state
        parsed = self.hooks.parse_anchors(text) or anchor_fns.parse_markdown(text)
        if parsed.missing and not result.delta:  # a delta leaves out what the new messages do not change
            work.errors.append(
                "anchor parsing incomplete: " + ", ".join(t.value for t in parsed.missing) + " set to N/A"
            )
        new = anchor_fns.with_fresh_next_step(parsed.anchors, facts)
        merged = anchor_fns.ensure_facts(anchor_fns.merge_anchors(previous.anchors, new), facts)
        prose = parsed.prose or previous.summary
        if result.delta and previous.summary and parsed.prose:
            prose = f"{previous.summary}\n\n{parsed.prose}"
        written = result.tokens_out
        if written is None:  # not reported: estimated from what it wrote
            written = self.hooks.estimate_tokens([Message(role="assistant", content=result.text)])[0]
        state = self._covering(cache, work, count, summary=prose, anchors=merged, written=written)
        compaction = self.compaction_message(work.session_id, state, cache.request_for(state))
        new_tokens = self.hooks.estimate_tokens([compaction])[0] + self._pinned_tokens(cache, state)
        if new_tokens >= old_tokens + replaced:
            cache.rejected_summary = (start, end)
            return (
                f"loop guard: the summary ({new_tokens} tokens) is larger than what it replaces "
                f"({old_tokens + replaced} tokens)",
                True,
            )
        work.state = state
        work.compaction = compaction
        work.uncovered = work.uncovered[count:]
        work.counts = work.counts[count:]
        work.stable -= count
        work.summarized += count
        return None, False

    def _fallback(self, cache: SessionCache, work: TurnWork) -> None:
        """Truncate to the token budget with no LLM call; the dropped part's facts are kept.

        Every large tool result of the uncovered part is offloaded first (the tail's too), so
        that what truncation drops stays readable through its handle.
        """
        # what the provider counts besides the messages (usage anchoring's offset) takes its room
        budget = max(int(self.config.fallback_budget * self.config.context_window) - self.correction.offset, 0)
        work.fallback = True
        work.errors.append(EMERGENCY_CAUSE)
        self._offload(cache, work, len(work.uncovered))
        while True:
            result, kept, cut, dropped, state, compaction = self._truncate(cache, work, budget)
            # A result the truncation shortened is offloaded whole (its placeholder names the
            # handle, which no cut removes), and the truncation runs again: nothing is lost.
            if cut is None:  # not a suffix of what is uncovered: nothing to compare with
                break
            start = len(work.uncovered) - len(kept)
            shortened = [
                start + j
                for j, m in enumerate(kept)
                if carried_result(m) is not None and text_of(m) != text_of(work.uncovered[start + j])
            ]
            if not shortened or not self._offload(cache, work, len(work.uncovered), only=shortened, threshold=0):
                break
        work.fallback_view = result
        work.preserved = len(kept)
        if work.uncovered and not kept:
            newest = len(work.uncovered) - group_start(work.uncovered, len(work.uncovered) - 1)
            work.errors.append(
                f"the newest exchange ({newest} messages) cannot fit the context window even shortened: dropped"
            )
        window = self.config.context_window
        tokens = self.view_tokens(cache, work)
        if tokens > window:  # what must stay (system, request, headers, markers) is over it alone
            work.errors.append(
                f"the view cannot fit the context window: {tokens} tokens for a window of {window}, even truncated"
            )
        if cut is not None:
            cut = min(dropped, work.stable)  # what the message covers (the view may keep some of it)
            work.state = state
            work.compaction = compaction
            work.summarized += cut
            work.uncovered = work.uncovered[cut:]
            work.counts = work.counts[cut:]
            work.stable -= cut

    def _truncate(
        self, cache: SessionCache, work: TurnWork, budget: int
    ) -> tuple[list[Message], list[Message], int | None, int, SessionState, Message | None]:
        """The fallback's view of ``work``: the view, the part of ``work.uncovered`` it keeps
        (where that starts, or None when it is not a suffix), how much the compaction message
        covers, the state and the compaction message."""
        head = [cache.system] if cache.system is not None else []
        dropped = 0
        while True:  # the compaction message depends on what is dropped, and what is dropped on it
            state = self._truncated_state(cache, work, min(dropped, work.stable))
            compaction = (
                self.compaction_message(work.session_id, state, cache.request_for(state)) if state.covered else None
            )
            request = cache.pinned_for(state)
            pinned = [*head, *([request] if request is not None else []), *([compaction] if compaction else [])]
            result = self.hooks.fallback_compact(
                pinned + work.uncovered,
                len(pinned),
                budget,
                max(self.config.context_window - self.correction.offset, 0),
            )
            if result is None:
                raise FallbackError("no fallback_compact plugin answered; fallback-token-budget is essential")
            kept = result[len(pinned) :]
            cut = _suffix_start(work.uncovered, kept)
            # Settled when the message covers what the view drops; while the view drops more, the
            # next round covers that too (the cut only grows: at most one round per message).
            if cut is None or cut <= dropped:
                return result, kept, cut, dropped, state, compaction
            dropped = cut

    def _truncated_state(self, cache: SessionCache, work: TurnWork, cut: int) -> SessionState:
        previous = work.state
        if cut <= 0:
            return previous
        facts = self._facts(cache, work, cut)
        merged = anchor_fns.merge_anchors(previous.anchors, anchor_fns.facts_as_anchors(facts))
        note = (
            f"{cut} messages were dropped by emergency truncation without an LLM summary; "
            "the anchors above were extracted from them mechanically."
        )
        summary = f"{previous.summary}\n\n{note}" if previous.summary else note
        return self._covering(cache, work, cut, summary=summary, anchors=anchor_fns.ensure_facts(merged, facts))

    def _covering(
        self,
        cache: SessionCache,
        work: TurnWork,
        count: int,
        *,
        summary: str | None,
        anchors: Sequence[Anchor],
        written: int | None = None,
    ) -> SessionState:
        """The state once ``work.uncovered[:count]`` is covered: the summary and anchors, cut to the
        summary budget as the compaction message shows them (the next summary request sends the
        previous summary as the agent saw it, no more) and with secrets masked (the state is
        written where records are); the boundary fingerprinted from the original message; the
        handles of the offloaded results that leave the view; no entry for a position now covered
        (the state stays small however long the session runs). ``written``: the tokens a
        summarizer wrote for it, which the state's running mean (``summary_tokens_out``) takes in."""
        previous = work.state
        mean_written = previous.summary_tokens_out
        if written is not None:  # each new summary weighs half
            mean_written = (mean_written + written + 1) // 2 if mean_written else written
        anchors, summary = self._fit(anchors, summary or "")
        covered = previous.covered + count
        handles = list(previous.dropped_handles)
        for i, position in enumerate(range(previous.covered, covered)):
            entry = previous.offloaded.get(str(position))
            if entry is not None and entry.fingerprint == cache.fingerprint(position):
                handle: str | None = entry.handle
            else:  # a result offloaded as it arrived (offload_tool_result): its placeholder names it
                m = work.uncovered[i]
                handle = placeholder_handle(m.content) if m.role == "tool" and type(m.content) is str else None
            if handle is not None and handle not in handles:
                handles.append(handle)
        return attrs.evolve(  # summary and anchors are made of masked parts: the state's, the facts, the summary
            previous,
            summary=summary or None,
            anchors=tuple(anchors),
            covered=covered,
            covered_fingerprint=cache.prefix_fingerprint(covered),
            offloaded={k: e for k, e in previous.offloaded.items() if int(k) >= covered},
            dropped_handles=tuple(handles[-MAX_DROPPED_HANDLES:]),
            summary_tokens_out=mean_written,
        )

    def _offload(
        self,
        cache: SessionCache,
        work: TurnWork,
        end: int,
        break_factor: float | None = None,
        *,
        only: Sequence[int] | None = None,
        threshold: int | None = None,
    ) -> bool:
        """Offload the large tool results of ``work.uncovered[:end]`` (``only`` those positions,
        larger than ``threshold`` characters if given, else ``offload_threshold``); True when
        one was.

        With ``break_factor`` (an offload that no summary follows, as at Warn), a result is
        offloaded only when what it saves is worth the prompt-cache break: when the tokens after
        it, which the provider must then read again at full price, are at most ``break_factor``
        times the tokens it saves. An old result far up the view costs a re-read of everything
        after it and saves a tenth of its size per call (cached tokens are cheap): it waits for
        the summary, which breaks the cache anyway.
        """
        if threshold is None:
            threshold = self.config.offload_threshold
        offloaded = dict(work.state.offloaded)
        start = work.state.covered
        changed = False
        counts = work.counts
        tails: list[int] | None = None  # tails[k]: the tokens of counts[k:], summed once a result is weighed
        for i in range(min(end, len(work.uncovered))) if only is None else only:
            m = work.uncovered[i]
            result = carried_result(m) if m.role != "assistant" else None
            if result is None:
                continue
            kept = offloaded.get(str(start + i))
            if kept is not None and kept.fingerprint == cache.fingerprint(start + i):
                continue  # an entry of another message (an edited history) is replaced
            size = len(text_of(result))
            if size <= threshold:
                continue
            if break_factor is not None:
                if tails is None:  # an offload changes only its own count: the later sums stay true
                    tails = list(accumulate(reversed(counts), initial=0))[::-1]
                after = tails[i + 1]  # tokens the provider must read again if this one changes
                if after > break_factor * (counts[i] * (1 - PLACEHOLDER_CHARS / size)):
                    continue
            try:
                entry = self.hooks.offload(result, work.session_id, threshold)
            except Exception as exc:  # noqa: BLE001 - keep the original, note the error
                error = f"offload of {result.tool_call_id} failed: {type(exc).__name__}: {exc}"
                if error not in work.errors:  # tried again by a later step of the turn: said once
                    work.errors.append(error)
                continue
            if entry is None:
                continue
            entry = attrs.evolve(entry, position=start + i, fingerprint=cache.fingerprint(start + i))
            offloaded[str(start + i)] = entry
            work.offloaded.append(entry)
            work.uncovered[i] = with_result_text(m, entry.placeholder)
            work.counts[i] = self.hooks.estimate_tokens([work.uncovered[i]])[0]
            changed = True
        if changed:
            work.state = attrs.evolve(work.state, offloaded=offloaded)
        return changed

    # --- pieces -------------------------------------------------------------------------------

    @property
    def summary_budget(self) -> int:
        """Tokens the summary may take (the user's request aside), from config and window."""
        config = self.config
        return max(min(config.max_summary_tokens, int(config.summary_share * config.context_window)), 200)

    def _fit(self, anchors: Sequence[Anchor], prose: str) -> tuple[tuple[Anchor, ...], str]:
        """Anchors and prose cut to the summary budget, the prose to its share of it."""
        budget = self.summary_budget * 4
        return anchor_fns.fit_summary(anchors, prose, budget, int(self.config.prose_share * budget))

    def compaction_message(self, session_id: str, state: SessionState, request: str | None = None) -> Message:
        """The ``[Context Compaction]`` message that stands for what ``state`` covers; with
        ``request`` (the user's request, pinned as a message of its own before it), its intent
        says where the request is instead of repeating it."""
        todo = self.hooks.todo_context(session_id) if session_id else []
        handles = state.dropped_handles[-MAX_HANDLES_LISTED:]
        key = (state.covered, state.anchors, state.summary, handles, request, tuple(todo), len(self.secrets))
        last = self._last_message  # one read: another thread may serve another session
        if last is not None and last[0] == key:
            return last[1]
        anchors, prose = self._fit(state.anchors or anchor_fns.empty_anchors(), state.summary or "")
        if request:
            anchors = anchor_fns.without_request(anchors, request)
        text = anchor_fns.compaction_message_text(
            anchors,
            prose,
            covered=state.covered,
            handles=handles,
            older_handles=len(state.dropped_handles) - len(handles),
            todo=[self.secrets.redact(line) for line in todo],
        )
        # The state's texts were masked when they entered it (``_covering``); the todo list is a
        # plugin's, masked here; the whole again for a secret registered since.
        message = Message(role="user", content=self.secrets.redact_registered(text))
        self._last_message = (key, message)
        return message

    def compaction_message_for(self, session_id: str) -> Callable[[SessionState, str | None], Message]:
        return lambda state, request: self.compaction_message(session_id, state, request)

    def view_tokens(self, cache: SessionCache, work: TurnWork) -> int:
        """Tokens of the view as it stands (counted once per message, kept in step)."""
        if work.fallback_view is not None:
            return self.correction.offset + sum(self.hooks.estimate_tokens(work.fallback_view))
        compaction = self.hooks.estimate_tokens([work.compaction])[0] if work.compaction is not None else 0
        compaction += self._pinned_tokens(cache, work.state)
        return self.correction.total(cache.system_tokens) + compaction + sum(work.counts)  # the offset with it

    def assemble(self, cache: SessionCache, work: TurnWork) -> list[Message]:
        """The view as it stands: the fallback's, or system, pinned request, compaction message and
        uncovered."""
        if work.fallback_view is not None:
            return list(work.fallback_view)
        view = [cache.system] if cache.system is not None else []
        request = cache.pinned_for(work.state)
        if request is not None:
            view.append(request)
        if work.compaction is not None:
            view.append(work.compaction)
        return view + work.uncovered

    def _facts(self, cache: SessionCache, work: TurnWork, count: int) -> Facts:
        """Facts of ``work.uncovered[:count]``, read from the original messages: an offloaded
        result's placeholder no longer shows the error line that its full text has."""
        stable = min(count, work.stable)
        originals = cache.originals(work.state.covered, stable, work.uncovered[stable:count])
        facts = extract_facts(originals, intent_limit=self.config.intent_max_chars, request=cache.first_request)
        # Masked as they enter the summary and its request; the user's request, in every summary's
        # facts, masked once.
        masked = redact_data(attrs.evolve(facts, user_request=None), self.secrets.redact)
        request = facts.user_request
        if request is not None:
            request = cache.masked_request() if request == cache.first_request else self.secrets.redact(request)
        return attrs.evolve(masked, user_request=request)

    def _least_compaction_tokens(self, cache: SessionCache, work: TurnWork, count: int, facts: Facts) -> int:
        """Tokens of the smallest view head a summary of ``count`` more messages can leave: the
        compaction message if the summarizer added nothing (the previous summary and anchors with
        the facts of these messages, which the core always adds), and the pinned request."""
        previous = work.state
        anchors = anchor_fns.ensure_facts(anchor_fns.complete(previous.anchors), facts)
        state = attrs.evolve(previous, covered=previous.covered + count, anchors=anchors)
        least = self.compaction_message(work.session_id, state, cache.request_for(state))
        return self.hooks.estimate_tokens([least])[0] + self._pinned_tokens(cache, state)

    def _pinned_tokens(self, cache: SessionCache, state: SessionState) -> int:
        """Tokens of the request ``state`` pins (counted once per session by the cache)."""
        return corrected(cache.pinned_tokens(state), self.correction.scale)

    def _tail_start(self, work: TurnWork) -> int:
        """Where the protected tail begins: never inside a tool call's results."""
        start = max(len(work.uncovered) - self.config.min_tail_messages, 0)
        return min(group_start(work.uncovered, start), work.stable)

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


def _growth_bound(facts: Facts) -> int:
    """Tokens by which a compaction message can at most grow when nothing but ``facts`` is added
    (its headings, the listed handles and the pinned request included, with room to spare): a
    fold of more tokens always leaves the view smaller, so its exact floor need not be computed."""
    texts = (
        *facts.instructions,
        *facts.files_created,
        *facts.files_edited,
        *facts.files_read,
        *facts.failed_commands,
        *facts.decisions,
    )
    return (sum(map(len, texts)) + len(facts.next_step or "") + len(facts.user_request or "")) // 4 + 1000


def _suffix_start(items: Sequence[Message], kept: Sequence[Message]) -> int | None:
    """Where ``kept`` starts as a suffix of ``items``, or None if it is not one.

    A fallback may shorten the content of a message it keeps, so messages are matched by role
    and tool call id rather than by identity.
    """
    start = len(items) - len(kept)
    if start < 0:
        return None
    for a, b in zip(items[start:], kept, strict=False):
        if a is not b and (a.role != b.role or a.tool_call_id != b.tool_call_id):
            return None
    return start


__all__: list[Any] = ["Summarized", "TierRunner", "TurnWork"]
