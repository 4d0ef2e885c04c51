"""Replay a recorded session through a compactor, turn by turn, as an agent loop would.

One engine serves ``compactor replay``, ``compactor ab replay`` and ``benchmarks/replay.py``.

For every assistant message ``messages[i]`` of the recorded session (one simulated LLM call), the
view is computed from the history so far, ``messages[:i]``, exactly as an agent would compute it
before calling its model; the recorded assistant message is what the model answered. Nothing is
generated: the transcript is fixed, only the view sent differs between policies. The last message
of a recording may be an assistant tool call that was never answered; that is fine, its view is
computed before it.

Per call (:class:`TurnMetrics`): the view's tokens; its prefix tokens identical to the previous
call's view (``record.cache_stable_prefix_tokens``: what a provider's prompt cache would serve);
summarizer calls and their tokens; whether the view overflowed the window (view tokens >
``context_window``); the compactor's own time without the summarizer; and whether the view passes
:func:`~progressive_compactor.messages.view_problems` (an invalid view is counted, never hidden).

Summarizer tokens. A provider-backed summarizer reports its tokens in the record; the offline
extractive summarizer reports none. So that any summarizer can be priced, the replay also
*estimates* them with the compactor's own token estimator: tokens in = the whole prompt the HTTP
summarizers send for the request (instructions, previous summary, facts, the new messages, each
cut as the prompt cuts them), tokens out = the summary text. Reported tokens win when the
provider gave them.

Billed cost (:mod:`progressive_compactor.pricing`): the output tokens of a call are the
estimated tokens of the recorded assistant message that follows the view.

Retention (:mod:`progressive_compactor.lab.probes`): probes built from the history the final view
was computed from, checked against that final view and the offloaded files it names.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

import attrs

from ..hookspecs import hookimpl
from ..http.prompt import build_instruction, build_prompt
from ..messages import message_from_dict, messages_from_dicts, view_problems
from ..models import CompactionRecord, CompactionTier, Message, SummaryRequest, SummaryResult
from ..notice import changed_view
from ..pricing import Cost, PriceTable, call_cost

METER_NAME = "replay-meter"


def isolated_config(config: Any, directory: Any, records_dir: Any = None) -> Any:
    """``config`` for a replay whose files all live under ``directory``.

    A replay never writes where the config's own stores keep data: the offloader, the record
    stores and the session state are replaced by the built-in file plugins under ``directory``
    (records under ``records_dir`` when given), with the config's own settings for those built-ins
    kept (``record_none``, preview sizes). Everything else (policy, tiers, summarizer) is as
    configured.
    """
    from ..config import CompactorConfig

    assert isinstance(config, CompactorConfig)
    blocks = dict(config.config)
    offload = config.plugins.offload
    if offload != "none":
        own = config.plugin_block("offload-files") if offload == "offload-files" else {}
        blocks["offload-files"] = {**own, "root": "{data_dir}/tool_results"}
        offload = "offload-files"
    own_store = config.plugin_block("store-jsonl") if "store-jsonl" in config.plugins.stores else {}
    blocks["store-jsonl"] = {**own_store, "directory": str(records_dir) if records_dir else "{data_dir}/records"}
    plugins = attrs.evolve(config.plugins, offload=offload, state="state-memory", stores=("store-jsonl",))
    return attrs.evolve(config, plugins=plugins, config=blocks, data_dir=str(directory))


@attrs.frozen
class TurnMetrics:
    """One simulated LLM call."""

    index: int
    """Index in the session of the assistant message this view was sent for."""
    view_tokens: int
    cache_stable_tokens: int
    """Tokens at the start of the view equal to the previous call's view (prompt-cache hits)."""
    overflow: bool
    tier: CompactionTier
    summarizer_calls: int
    summarizer_tokens_in: int
    summarizer_tokens_out: int
    compactor_seconds: float
    """Wall time of the compaction call minus the time spent in the summarizer."""
    record: CompactionRecord = attrs.field(repr=False)
    output_tokens: int = 0
    """Estimated tokens of the recorded assistant message that answered this view."""
    view_messages: int = 0
    summarizer_seconds: float = 0.0
    valid: bool = True
    cost: Cost | None = None
    summarizer_tokens_in_cached: int = 0
    """Of ``summarizer_tokens_in``, those a provider's prompt cache would serve."""
    lost: Mapping[str, tuple[str, ...]] | None = None
    """For a call whose compaction changed the view, when asked (``probe_compactions``): per probe
    category, the facts of the history so far that the view no longer holds (offloaded text the
    view names counts as held), with the compactor's secrets masked."""


@attrs.frozen
class ReplayResult:
    """What a session's replay measured. ``cost`` and ``retention`` are None when not computed."""

    session_id: str
    turns: tuple[TurnMetrics, ...] = attrs.field(repr=False)
    final_view: list[dict[str, Any]] = attrs.field(repr=False)
    context_window: int
    tier_counts: Mapping[str, int]
    """Turns per tier label (``None``, ``Warn``, ``Soft``, ``Full``, ``Emergency``)."""
    peak_view_tokens: int
    overflows: int
    total_input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    offloads: int
    """Distinct tool results offloaded during the replay."""
    offloaded_bytes: int
    """Their total size in characters (the notice's KB figure counts the same)."""
    summarizer_calls: int
    summarizer_tokens_in: int
    summarizer_tokens_out: int
    compactor_seconds: float
    invalid_views: int
    invalid_view_problems: tuple[str, ...] = ()
    """The first problems found (at most 5), as ``turn i: problem``."""
    cost: Cost | None = None
    retention: Any = None
    """A :class:`progressive_compactor.lab.probes.Retention`, when probes were computed."""
    variant: str | None = None
    messages: int = 0

    @property
    def compactions(self) -> int:
        """Turns whose tier was not None."""
        return sum(n for label, n in self.tier_counts.items() if label != CompactionTier.NONE.label)


class SummarizerMeter:
    """A hook wrapper around ``summarize``: times every call and estimates its tokens.

    Registered on the compactor's plugin manager by :func:`replay_session` (and by
    :class:`~progressive_compactor.lab.experiment.ExperimentCompactor` on each variant's). It
    changes nothing the summarizer returns but the token counts a summarizer did not report: those
    are filled in with the estimates, so that the record of the turn carries them, and a replay's
    records price exactly as the replay does (``compactor ab report`` on them agrees with ``ab
    replay``). A cache-friendly request's cached part is the view the session's previous call sent
    (what a provider's cache holds), as the compactor's cache of the session has it: per session,
    since sessions interleave in live traffic (0 for a session the compactor no longer keeps).
    """

    def __init__(self, compactor: Any):
        self.estimate: Callable[[Sequence[Message]], list[int]] = compactor.hooks.estimate_tokens
        self.compactor = compactor
        self.reset()

    def previous_view(self, session_id: str) -> int:
        """Tokens of the view the session's previous call sent."""
        cache = self.compactor._memory.caches.get(session_id)
        return cache.previous_tokens if cache is not None else 0

    def reset(self) -> None:
        self.calls = 0
        self.seconds = 0.0
        self.tokens_in = 0
        self.tokens_out = 0
        self.tokens_in_cached = 0

    @hookimpl(wrapper=True)
    def summarize(self, request: SummaryRequest):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            result = yield
            result = self._count(request, result)
        finally:  # the meter's own estimates count as the summarizer's time, not the compactor's
            self.seconds += time.perf_counter() - started
            self.calls += 1
        return result

    def _count(self, request: SummaryRequest, result: Any) -> Any:
        """Add what ``request`` would be billed for to the totals. A result without the
        provider's counts gets these estimates, so its record carries what the replay bills."""
        delta = isinstance(result, SummaryResult) and result.delta
        cached = 0
        if request.view:  # cache-friendly: the view again (mostly cached), then the instruction
            view = sum(self.estimate(request.view))
            instruction = self.estimate([Message(role="user", content=build_instruction(request, delta=delta))])[0]
            tokens_in = view + instruction
            cached = min(self.previous_view(request.session_id), view)
        else:
            prompt = build_prompt(request, delta=delta)
            tokens_in = self.estimate([Message(role="user", content=prompt.system + prompt.user)])[0]
        tokens_out = 0
        if isinstance(result, SummaryResult) and result.text:
            tokens_out = self.estimate([Message(role="assistant", content=result.text)])[0]
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        self.tokens_in_cached += cached
        if isinstance(result, SummaryResult) and (result.tokens_in is None or result.tokens_out is None):
            result = attrs.evolve(
                result,
                tokens_in=tokens_in if result.tokens_in is None else result.tokens_in,
                tokens_out=tokens_out if result.tokens_out is None else result.tokens_out,
                tokens_in_cached=cached if result.tokens_in is None else result.tokens_in_cached,
            )
        return result


def _meter(compactor: Any) -> SummarizerMeter:
    meter = compactor.pm.get_plugin(METER_NAME)
    if meter is None:
        meter = SummarizerMeter(compactor)
        compactor.pm.register(meter, name=METER_NAME)
    return meter


def replay_session(
    messages: list[dict[str, Any]],
    compactor: Any,
    session_id: str,
    on_turn: Callable[[TurnMetrics], None] | None = None,
    *,
    prices: PriceTable | None = None,
    probes: bool = True,
    probe_compactions: bool = False,
) -> ReplayResult:
    """Replay ``messages`` through ``compactor`` (a ProgressiveCompactor) as the module says.

    ``prices`` defaults to the config's ``pricing`` section.
    ``probes`` computes retention against the final view (False skips it); ``probe_compactions``
    also checks the probes of the history so far against the view of every call whose compaction
    changed the view (``TurnMetrics.lost``). ``on_turn`` is called after every simulated call, for
    progress display. The compactor keeps the session's state and offloaded files afterwards (the
    caller may ``delete_session``).
    """
    prices = prices or compactor.config.pricing
    window = compactor.config.context_window
    estimate = compactor.hooks.estimate_tokens
    meter = _meter(compactor)
    turns: list[TurnMetrics] = []
    problems_seen: list[str] = []
    final_view: list[dict[str, Any]] = []
    final_end = 0
    offloaded: dict[str, int] = {}
    for i, data in enumerate(messages):
        if data.get("role") != "assistant" or i == 0:
            continue
        history = messages[:i]
        meter.reset()
        started = time.perf_counter()
        view, record = compactor.compact_with_record(history, session_id)
        elapsed = time.perf_counter() - started
        problems = view_problems(messages_from_dicts(view))
        if problems:
            problems_seen.append(f"turn {i}: {problems[0]}")
        for entry in record.offloaded:
            offloaded[entry.handle] = entry.chars
        reported = record.summarizer_tokens_in or record.summarizer_tokens_out
        s_in = record.summarizer_tokens_in if reported else meter.tokens_in
        s_out = record.summarizer_tokens_out if reported else meter.tokens_out
        s_cached = record.summarizer_tokens_in_cached if reported else meter.tokens_in_cached
        output = estimate([message_from_dict(data, i)])[0]
        view_tokens = record.tokens_after
        cached = min(record.cache_stable_prefix_tokens, view_tokens)
        lost = None
        if probe_compactions and record.tier is not CompactionTier.NONE and changed_view(record):
            lost = _lost_facts(compactor, history, view, offloaded)
        turn = TurnMetrics(
            index=i,
            view_tokens=view_tokens,
            cache_stable_tokens=cached,
            overflow=view_tokens > window,
            tier=record.tier,
            summarizer_calls=record.summarizer_calls,
            summarizer_tokens_in=s_in,
            summarizer_tokens_out=s_out,
            summarizer_tokens_in_cached=s_cached,
            compactor_seconds=max(elapsed - meter.seconds, 0.0),
            record=record,
            output_tokens=output,
            view_messages=len(view),
            summarizer_seconds=meter.seconds,
            valid=not problems,
            lost=lost,
            cost=call_cost(
                prices,
                view_tokens=view_tokens,
                cached_tokens=cached,
                output_tokens=output,
                summarizer_tokens_in=s_in,
                summarizer_tokens_out=s_out,
                summarizer_tokens_in_cached=s_cached,
            ),
        )
        turns.append(turn)
        final_view, final_end = view, i
        if on_turn is not None:
            on_turn(turn)
    retention = None
    if probes and turns:
        from .probes import build_probes, check_probes

        retention = check_probes(
            build_probes(messages[:final_end]),
            final_view,
            read_handle=lambda handle: _read(compactor, handle),
            known_handles=offloaded,
        )
    return _result(session_id, turns, final_view, window, problems_seen, offloaded, retention, compactor, len(messages))


def _lost_facts(
    compactor: Any, history: list[dict[str, Any]], view: list[dict[str, Any]], offloaded: Mapping[str, int]
) -> dict[str, tuple[str, ...]]:
    from .probes import CATEGORIES, build_probes, check_probes

    retention = check_probes(
        build_probes(history), view, read_handle=lambda handle: _read(compactor, handle), known_handles=offloaded
    )
    found = retention.categories
    redact = compactor.secrets.redact  # facts are copied from the history: secrets masked, as in the view
    return {name: tuple(map(redact, found[name].lost)) for name in CATEGORIES if name in found and found[name].lost}


def _read(compactor: Any, handle: str) -> str | None:
    try:
        return compactor.read_tool_result(handle)
    except Exception:  # noqa: BLE001 - a handle the view names but no plugin can read counts as not kept
        return None


def _result(
    session_id: str,
    turns: list[TurnMetrics],
    final_view: list[dict[str, Any]],
    window: int,
    problems: list[str],
    offloaded: dict[str, int],
    retention: Any,
    compactor: Any,
    n_messages: int,
) -> ReplayResult:
    counts = {tier.label: 0 for tier in CompactionTier}
    cost = Cost()
    for t in turns:
        counts[t.tier.label] += 1
        if t.cost is not None:
            cost = cost + t.cost
    return ReplayResult(
        session_id=session_id,
        turns=tuple(turns),
        final_view=final_view,
        context_window=window,
        tier_counts=counts,
        peak_view_tokens=max((t.view_tokens for t in turns), default=0),
        overflows=sum(t.overflow for t in turns),
        total_input_tokens=sum(t.view_tokens for t in turns),
        cached_input_tokens=sum(t.cache_stable_tokens for t in turns),
        output_tokens=sum(t.output_tokens for t in turns),
        offloads=len(offloaded),
        offloaded_bytes=sum(offloaded.values()),
        summarizer_calls=sum(t.summarizer_calls for t in turns),
        summarizer_tokens_in=sum(t.summarizer_tokens_in for t in turns),
        summarizer_tokens_out=sum(t.summarizer_tokens_out for t in turns),
        compactor_seconds=sum(t.compactor_seconds for t in turns),
        invalid_views=len(problems),
        invalid_view_problems=tuple(problems[:5]),
        cost=cost,
        retention=retention,
        variant=compactor.config.variant,
        messages=n_messages,
    )


def read_session(path: Any) -> list[dict[str, Any]]:
    """Messages of a corpus file: JSONL, one chat message per line (blank lines skipped); a file
    that is not UTF-8, a line that is not JSON or not a chat message is a :class:`CompactorError`
    naming the file and the line."""
    import json
    import re
    from pathlib import Path

    from ..errors import CompactorError, InvalidMessagesError
    from ..messages import message_from_dict

    try:
        text = Path(path).read_text("utf-8")
    except UnicodeDecodeError as exc:
        raise CompactorError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise CompactorError(f"{path}: invalid JSON on line {number}: {exc.msg}") from exc
            try:
                message_from_dict(out[-1], len(out) - 1)
            except InvalidMessagesError as exc:
                reason = re.sub(r"^message \d+: ", "", str(exc))
                raise CompactorError(f"{path}: line {number} (message {len(out) - 1}): {reason}") from None
    return out


def session_files(directory: Any) -> list[Any]:
    """The ``*.jsonl`` files of a corpus directory, sorted by name."""
    from pathlib import Path

    return sorted(p for p in Path(directory).glob("*.jsonl") if p.is_file())


__all__ = [
    "ReplayResult",
    "SummarizerMeter",
    "TurnMetrics",
    "isolated_config",
    "read_session",
    "replay_session",
    "session_files",
]
