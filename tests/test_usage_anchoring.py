"""Provider usage anchoring: the provider's reported count corrects a session's estimate.

The "provider" here counts every request at ``factor ×`` the characters ÷ 4 estimate (1.3 for
text that tokenizes worse than the estimate assumes, 0.7 for text that tokenizes better): the
±30 % by which real tokenizers differ from characters ÷ 4, plus, where a test says so, a fixed
``offset`` (the tool definitions a provider counts with every request). With the count reported
after every call, the tiers fire at the share of the window the provider really sees; without,
they fire at the estimate's share, which is the wrong turn.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from progressive_compactor import CompactionTier, ProgressiveCompactor
from progressive_compactor.models import Message
from progressive_compactor.plugin_manager import Hooks
from progressive_compactor.testing import build_history, estimate, filler, problems, tool_call, tool_turn
from progressive_compactor.usage import MAX_RATIO, MIN_RATIO, ONE_REPORT_SCALE, CorrectedHooks, corrected, fitted
from timeouts import forked_while_held

THRESHOLDS = (
    (0.95, CompactionTier.EMERGENCY),
    (0.80, CompactionTier.FULL),
    (0.70, CompactionTier.SOFT),
    (0.60, CompactionTier.WARN),
)


def tier_at(tokens: float, window: int) -> CompactionTier:
    """The default policy's tier for ``tokens`` in ``window``."""
    for share, tier in THRESHOLDS:
        if tokens >= share * window:
            return tier
    return CompactionTier.NONE


def provider(view, factor: float, offset: int = 0) -> int:
    """What the fake provider reports for a request carrying ``view``."""
    return offset + round(factor * estimate(view))


def sloped(reported: list[int]) -> bool:
    """Whether reports on views of these estimates give the slope: the latest and another of the
    latest eight, or the smallest, at least a quarter and 500 tokens apart (before, one report's
    worth is all there is)."""
    if not reported:
        return False
    candidates = [*reported[-8:], min(reported)]
    return any(abs(e - reported[-1]) >= max(500, 0.25 * max(e, reported[-1])) for e in candidates)


def replay(compactor, history, factor: float, *, report: bool, sid: str = "s", async_=False, offset: int = 0):
    """A view before each assistant message, as an agent loop asks for one. Returns one row per
    turn: (record, true tokens of the view the compactor was about to send, the view, how far
    the anchored count may be from the true one (the provider reports whole tokens, so what is
    learnt from views of ``n`` estimated tokens is exact to about ``±1 / n``), and whether the
    reports so far give the slope)."""
    rows = []
    previous_view: list = []
    previous_len = 0
    reported: list[int] = []
    for i, message in enumerate(history):
        if message["role"] != "assistant" or i == 0:
            continue
        candidate = previous_view + history[previous_len:i]
        if async_:
            import asyncio

            view, record = asyncio.run(compactor.acompact_with_record(history[:i], sid))
        else:
            view, record = compactor.compact_with_record(history[:i], sid)
        true = offset + factor * estimate(candidate)
        spread = max(abs(e - reported[-1]) for e in [*reported[-8:], min(reported)]) if sloped(reported) else 0
        tolerance = 3 + 2 * true / max(spread or estimate(previous_view), 1)
        rows.append((record, true, view, tolerance, sloped(reported)))
        if report:
            compactor.observe_usage(sid, provider(view, factor, offset))
            reported.append(estimate(view))
        previous_view, previous_len = view, i
    return rows


def requested(record) -> CompactionTier:
    return record.requested_tier if record.requested_tier is not None else record.tier


WINDOW = 16_000


@pytest.mark.parametrize("factor", [1.3, 0.7], ids=["true+30%", "true-30%"])
def test_tiers_fire_at_the_true_share_with_anchoring_and_not_without(make_compactor, factor):
    history = build_history([1900] * 34)
    anchored = replay(make_compactor(context_window=WINDOW), history, factor, report=True)
    plain = replay(make_compactor(context_window=WINDOW), history, factor, report=False)
    # the session is built so that no turn's true count lies within a few tokens of a threshold
    for _, true, _, tolerance, _ in anchored[1:]:
        assert all(abs(true - share * WINDOW) > tolerance for share, _ in THRESHOLDS), true
    assert anchored[3][4]  # the first views are small: from the fourth turn on the slope is known
    for n, (record, true, view, tolerance, slope) in enumerate(anchored):
        assert problems(view) == []
        if n == 0:  # nothing reported yet: the estimate stands
            assert record.token_correction == 1.0 and record.token_offset == 0
            continue
        if slope or factor < 1:  # a count below the estimate is all scale from the first report
            assert record.token_correction == pytest.approx(factor, abs=0.02)
            assert abs(record.tokens_before - true) <= tolerance, (n, record.tokens_before, true)
        else:  # one small view reported: its excess was taken for an offset, which it is not
            assert record.token_offset > 0
            assert estimate(view) <= record.tokens_before < true
        assert requested(record) is tier_at(true, WINDOW), (n, record.tier, true / WINDOW)
    fired_true = next(n for n, (r, *_) in enumerate(anchored) if r.tier is not CompactionTier.NONE)
    fired_plain = next(n for n, (r, *_) in enumerate(plain) if r.tier is not CompactionTier.NONE)
    true_first = next(n for n, (_, true, *_) in enumerate(anchored) if tier_at(true, WINDOW) is not CompactionTier.NONE)
    assert fired_true == true_first
    # without anchoring the first compaction comes at the estimate's 60 %: too late at +30 %
    # (the provider already sees more than 60 %), too early at -30 %
    if factor > 1:
        assert fired_plain > true_first
        assert tier_at(plain[fired_plain][1], WINDOW) >= CompactionTier.SOFT  # overshot Warn entirely
    else:
        assert fired_plain < true_first
        assert tier_at(plain[fired_plain][1], WINDOW) is CompactionTier.NONE
    assert all(r.token_correction == 1.0 for r, *_ in plain)
    # anchored, every request the provider saw was below the Soft threshold (compactions bring
    # the view back under it); unanchored at +30 % some were past Full
    assert max(provider(v, factor) for _, _, v, *_ in anchored) < 0.70 * WINDOW
    if factor > 1:
        assert max(provider(v, factor) for _, _, v, *_ in plain) > 0.80 * WINDOW


@pytest.mark.parametrize(("factor", "offset"), [(1.3, 0), (1.0, 2500)], ids=["scale", "offset"])
def test_emergency_truncates_to_the_budget_in_true_tokens(make_compactor, factor, offset):
    """The truncation's budget is in the provider's tokens: 30 % more of them than the estimate,
    or 2,500 tokens of tool definitions besides the messages, which come off the budget."""
    history = build_history([1500] * 30)
    counts = {}
    for report in (True, False):
        compactor = make_compactor(context_window=WINDOW)
        for end in (3, 9):  # two reports, on views far enough apart to give the slope
            view = compactor.compact(history[:end], "s")
            if report:
                compactor.observe_usage("s", provider(view, factor, offset))
        forced = compactor.compact_force(history, "s")
        assert problems(forced) == []
        counts[report] = provider(forced, factor, offset)
    assert counts[True] <= 0.5 * WINDOW < counts[False]  # unreported, the budget is over in the provider's tokens


def test_loop_guard_judges_the_summary_in_true_tokens(make_compactor):
    """A Soft summary that leaves the view below 70 % of the window by the estimate but above it
    in the provider's count escalates to Full: the loop guard checks the corrected count."""
    history = build_history([1900] * 6)
    history += [
        {"role": "assistant", "content": "", "tool_calls": [tool_call("big", "cat big.log")]},
        {"role": "tool", "tool_call_id": "big", "content": filler(26_000, "big")},
        {"role": "assistant", "content": "The log is long; reading on."},
        {"role": "user", "content": "go on"},
    ]
    compactor = make_compactor(context_window=WINDOW)
    for end in (2, 8):  # two reports, on views far enough apart to give the slope
        view = compactor.compact(history[:end], "s")
        compactor.observe_usage("s", provider(view, 1.3))
    assert tier_at(provider(history, 1.3), WINDOW) is CompactionTier.SOFT
    view, record = compactor.compact_with_record(history, "s")
    assert record.requested_tier is CompactionTier.SOFT
    assert record.tier is CompactionTier.FULL
    assert record.escalations and record.escalations[0].startswith("loop guard: Soft left the view at 7")
    assert provider(view, 1.3) < 0.70 * WINDOW
    assert problems(view) == []


def test_tool_definitions_counted_with_a_small_first_view_are_not_taken_for_text(make_compactor):
    """The provider counts 3,000 tokens of tool definitions with every request. Reported on the
    first view (the system message and the request, a few dozen tokens), that excess was taken for
    a ratio (clamped at 4), and the next view, with a file of 20,000 tokens read, counted 80,000 in
    a 64k window: an Emergency truncation of a view at 36 % of it. It is an offset."""
    window = 64_000
    compactor = make_compactor("default", context_window=window)
    history = build_history([])
    compactor.observe_usage("s", provider(compactor.compact(history, "s"), 1.0, offset=3000))
    history += tool_turn("read", 80_000)
    view, record = compactor.compact_with_record(history, "s")
    true = provider(history, 1.0, offset=3000)
    assert record.tier is tier_at(true, window) is CompactionTier.NONE and view == history
    assert record.token_offset == 3000 and record.tokens_before == true


@pytest.mark.parametrize("factor", [1.3, 0.8])
def test_an_offset_and_a_scale_are_learnt_and_hold_after_compactions(make_compactor, factor):
    """A provider that counts 2,000 tokens of tool definitions with every request, and the text at
    ``factor ×`` the estimate: once two reports give the slope, every count is the provider's, the
    views that compactions made small included (a ratio would count them 2,000 × their share
    short), and the tiers fire at the true share."""
    history = build_history([1900] * 40)
    rows = replay(make_compactor(context_window=WINDOW), history, factor, report=True, offset=2000)
    compacted = [n for n, (record, *_) in enumerate(rows) if record.tier >= CompactionTier.SOFT]
    assert compacted and rows[compacted[0] + 1][4]  # a compaction, and turns after it with the slope known
    for n, (record, true, view, tolerance, slope) in enumerate(rows[1:], start=1):
        assert problems(view) == []
        assert requested(record) is tier_at(true, WINDOW), (n, record.tier, true / WINDOW)
        if slope:
            assert abs(record.tokens_before - true) <= tolerance, (n, record.tokens_before, true)
            assert record.token_offset == pytest.approx(2000, abs=30)
            assert record.token_correction == pytest.approx(factor, abs=0.02)
    assert max(provider(v, factor, 2000) for _, _, v, *_ in rows) < 0.70 * WINDOW


def test_where_a_compaction_landed_is_saved_in_the_counts_the_policy_compares(make_compactor):
    """``policy-cost`` measures growth and waits for it past ``landed_tokens`` with the turn's
    corrected counts: the landing must be saved in them too, not in the estimator's (at a ratio
    of 2 a compaction looked as if it had landed at half its size)."""
    history = build_history([3000] * 4)
    compactor = make_compactor("default", context_window=200_000)
    compactor.observe_usage("s", provider(compactor.compact(history, "s"), 2.0))
    for i in range(30):
        history += tool_turn(f"n{i}", 6000)
        view, record = compactor.compact_with_record(history, "s")
        compactor.observe_usage("s", provider(view, 2.0))
        if record.tier >= CompactionTier.SOFT:
            break
    assert record.tier is CompactionTier.SOFT and record.token_correction == pytest.approx(2.0, abs=0.01)
    state = compactor.state("s")
    assert state.landed_tokens == record.tokens_after
    added = tool_turn("after", 6000)
    following = compactor.compact_with_record(history + added, "s")[1]
    assert following.tokens_before - state.landed_tokens == pytest.approx(provider(added, 2.0), rel=0.01)


def test_async_turns_are_anchored_too(make_compactor):
    history = build_history([1900] * 34)
    rows = replay(make_compactor(context_window=WINDOW), history, 1.3, report=True, async_=True)
    for n, (record, true, *_) in enumerate(rows[1:], start=1):
        assert requested(record) is tier_at(true, WINDOW), n


def test_observe_usage_edges(make_compactor):
    compactor = make_compactor(context_window=WINDOW)
    assert compactor.observe_usage("s", 1000) is None  # no view returned yet: nothing to anchor
    view = compactor.compact(build_history([400] * 3), "s")
    tokens = estimate(view)
    assert compactor.observe_usage("s", round(tokens * 1.25)) == pytest.approx(1.25, abs=0.01)
    assert compactor.observe_usage("s", tokens * 100) == 4.0  # kept between 0.25 and 4
    assert compactor.observe_usage("s", tokens // 4 - 1) is None  # a count of part of the view: ignored
    assert compactor.observe_usage("s", round(tokens * 0.3)) == pytest.approx(0.3, abs=0.01)
    for bad in (-1, 2.5, "10", True):
        with pytest.raises(ValueError, match="input_tokens"):
            compactor.observe_usage("s", bad)
    assert compactor.observe_usage("s", 0) is None  # a provider that reports nothing changes nothing
    _, record = compactor.compact_with_record(build_history([400] * 3), "s")
    assert record.token_correction == pytest.approx(0.3, abs=0.01)
    assert compactor.observe_usage("other", 100) is None  # sessions are separate
    compactor.delete_session("s")
    _, record = compactor.compact_with_record(build_history([400] * 3), "s")
    assert record.token_correction == 1.0


def test_the_session_helper_reports_usage(make_compactor):
    from progressive_compactor import Session

    compactor = make_compactor(context_window=WINDOW)
    session = Session(compactor, "helper")
    session.extend(build_history([400] * 3))
    view = session.view()
    assert session.observe_usage(round(estimate(view) * 1.3)) == pytest.approx(1.3, abs=0.01)
    session.view()
    assert session.last_record.tokens_before == round(estimate(view) * 1.3)  # the same view: as reported


@pytest.mark.corpus
@pytest.mark.parametrize("factor", [1.3, 0.7], ids=["true+30%", "true-30%"])
@pytest.mark.parametrize(
    "name",
    ["msa__django__django-11049__deepseek-chat-test-1-100.jsonl", "claudecode__entire-cli__6d63c3a51594-0.jsonl"],
)
def test_corpus_sessions_fire_at_the_true_share(corpus_dir: Path, make_compactor, factor, name):
    history = [json.loads(line) for line in (corpus_dir / name).read_text("utf-8").splitlines() if line.strip()]
    window = 32_000
    anchored = replay(make_compactor(context_window=window), history, factor, report=True)
    plain = replay(make_compactor(context_window=window), history, factor, report=False)
    for n, (record, true, view, tolerance, slope) in enumerate(anchored[1:], start=1):
        assert problems(view) == []
        # no turn of these sessions lies closer to a threshold than the count's rounding
        assert all(abs(true - share * window) > tolerance for share, _ in THRESHOLDS), (n, true)
        if slope or factor < 1:
            assert abs(record.tokens_before - true) <= tolerance, (n, record.tokens_before, true)
        assert requested(record) is tier_at(true, window), (n, record.tier, true / window)
    assert max(provider(v, factor) for _, _, v, *_ in anchored[1:]) <= window
    # the same replay unanchored decides on the estimate: some turn at another tier than the true one
    assert any(requested(r) is not tier_at(true, window) for r, true, *_ in plain)


@functools.cache
def _hooks(tmp: str) -> Hooks:
    return ProgressiveCompactor("default", data_dir=tmp).hooks


@given(sizes=st.lists(st.integers(0, 5000), max_size=30), ratio=st.floats(0.25, 4.0))
def test_corrected_counts_of_the_messages_never_sum_below_the_corrected_total(tmp_path_factory, sizes, ratio):
    """The truncation fits a view message by message on corrected counts, the record and the next
    turn judge it by its corrected total: fitted one way, it fits the other."""
    hooks = _hooks(str(tmp_path_factory.getbasetemp()))
    messages = [Message(role="user", content="x" * n) for n in sizes]
    per_message = CorrectedHooks(hooks, ratio).estimate_tokens(messages)
    assert sum(per_message) >= corrected(sum(hooks.estimate_tokens(messages)), ratio)


@given(
    offset=st.integers(0, 20_000),
    scale=st.floats(0.3, 3.5),
    sizes=st.lists(st.integers(1, 150_000), min_size=1, max_size=12),
)
def test_the_reports_give_back_the_providers_offset_and_scale(offset, scale, sizes):
    """Whatever the views reported on: the scale is kept between its clamps and the offset between
    0 and the latest count; once two views are far enough apart, both are the provider's (to the
    rounding of whole tokens)."""
    reports = [(e, offset + round(scale * e)) for e in sizes]
    correction = fitted(reports, 128_000)
    assert MIN_RATIO <= correction.scale <= MAX_RATIO and 0 <= correction.offset <= reports[-1][1]
    e1 = sizes[-1]
    far = max(sizes, key=lambda e: abs(e - e1))
    if abs(far - e1) >= max(500, 0.25 * max(far, e1)):
        assert correction.scale == pytest.approx(scale, abs=1.5 / abs(far - e1))  # two counts rounded
        assert abs(correction.total(e1) - reports[-1][1]) <= 1
        if offset > 1 + scale * min(e1, far) / abs(far - e1):  # an offset the rounding cannot hide
            assert correction.offset == pytest.approx(offset, abs=2 + 2 * max(e1, far) / abs(far - e1))


def test_a_count_of_part_of_the_view_is_not_taken_for_the_whole(make_compactor, caplog):
    """Anthropic's ``input_tokens`` alone is the part of the request after its cache breakpoint: a
    few dozen tokens of a view of thousands. Taken for the view's count (clamped at a ratio of
    0.25), the session counted a quarter of what it sent and let it grow to 1.5 windows without
    compacting: the provider refused it. A count below a quarter of the estimate is no count of
    the view: it changes nothing, and says why."""
    compactor = make_compactor(context_window=WINDOW)
    history = build_history([2000] * 3)
    view = compactor.compact(history, "s")
    with caplog.at_level("WARNING", logger="progressive_compactor"):
        assert compactor.observe_usage("s", estimate(view) // 50) is None
    assert "cache_read_input_tokens" in caplog.text
    history += [m for i in range(12) for m in tool_turn(f"n{i}", 8000)]
    assert estimate(history) > 1.5 * WINDOW
    view, record = compactor.compact_with_record(history, "s")
    assert record.token_correction == 1.0 and record.token_offset == 0
    assert record.tier is not CompactionTier.NONE and estimate(view) <= WINDOW
    # a whole count after it anchors as before
    assert compactor.observe_usage("s", round(estimate(view) * 1.3)) == pytest.approx(1.3, abs=0.01)


def test_a_session_dropped_while_its_turn_runs_leaves_no_anchor_behind(make_compactor):
    """The anchors are kept for the sessions whose caches are (``cached_sessions``). A session
    whose cache was dropped while its turn was summarizing (other sessions compacted meanwhile)
    got its anchor back when the turn returned its view, with no cache to drop it again: one
    anchor for ever per such session, in a worker that serves thousands."""
    from progressive_compactor.testing import RecordingSummarizer, window_for

    history = build_history([1900] * 8)
    others = iter(range(1000))

    def busy_meanwhile(request) -> str:  # other sessions' turns while this one waits for its summary
        for _ in range(3):
            compactor.compact(build_history([100]), f"other-{next(others)}")
        return "The agent read the files."

    compactor = make_compactor(
        context_window=window_for(history, 0.75),
        cached_sessions=2,
        extra_plugins=[("s", RecordingSummarizer(busy_meanwhile))],
    )
    view, record = compactor.compact_with_record(history, "x")
    assert record.tier is CompactionTier.SOFT
    kept = set(compactor._memory.caches._values)
    assert "x" not in kept
    assert set(compactor._usage._sessions) <= kept
    assert compactor.observe_usage("x", estimate(view)) is None  # dropped: no correction, as documented


def test_the_warning_about_a_partial_count_masks_the_session_id(make_compactor, caplog):
    """A session id comes from outside: the warning about a count of part of the view masks it as
    the other warnings do (an id holding a registered secret showed it in clear)."""
    compactor = make_compactor(context_window=WINDOW)
    key = "hunter2-registered-secret"
    compactor.secrets.add(key)
    sid = f"user-{key}"
    view = compactor.compact(build_history([2000] * 3), sid)
    with caplog.at_level("WARNING", logger="progressive_compactor"):
        assert compactor.observe_usage(sid, estimate(view) // 50) is None
    assert "below a quarter" in caplog.text and "user-[REDACTED]" in caplog.text
    assert key not in caplog.text


@pytest.mark.parametrize("config", ["classic", "default"])
def test_tool_definitions_over_a_tenth_of_the_window_are_not_taken_for_text(make_compactor, config):
    """7,000 tokens of tool definitions in a 32k window (MCP servers list that many) are more than
    the tenth of the window one report takes for an offset. Reported on a small first view, the
    rest was taken for a scale (clamped at 4) and the next view, with one file of 6,000 tokens
    read, counted 27,000: a Full summary (or an Emergency truncation) of a view at 40 % of the
    window. From one report the scale stays a plausible estimator's error; the rest is offset."""
    window = 32_000
    compactor = make_compactor(config, context_window=window)
    history = build_history([])
    compactor.observe_usage("s", provider(compactor.compact(history, "s"), 1.0, offset=7000))
    history += tool_turn("read", 24_000)
    view, record = compactor.compact_with_record(history, "s")
    true = provider(history, 1.0, offset=7000)
    assert tier_at(true, window) is CompactionTier.NONE
    assert record.tier is CompactionTier.NONE and view == history
    # counted on the safe side, the text at no more than 1.5 times its estimate
    assert true <= record.tokens_before <= 7000 + ONE_REPORT_SCALE * estimate(history) + 1
    compactor.observe_usage("s", true)  # the second report, on a view of another size, settles it
    record = compactor.compact_with_record(history, "s")[1]
    assert record.token_offset == pytest.approx(7000, abs=2) and abs(record.tokens_before - true) <= 2


def test_a_report_for_an_earlier_view_is_paired_with_that_view(make_compactor):
    """Two model calls of one session in flight (two runs of a thread at once, or a report that
    comes late): the count of the first view arrived after the compactor had returned a second,
    compacted one (a fifth of its size), and was taken for the count of that one: the next turn
    counted a view at 11 % of the window as 59 % of it, one step from a needless compaction. An
    integration knows which view a count is for and says so; the count is paired with that view."""
    from progressive_compactor.integrations.common import Compaction

    history = build_history([1900] * 27)
    assert tier_at(estimate(history), WINDOW) is CompactionTier.FULL
    compaction = Compaction(make_compactor(context_window=WINDOW))
    first = compaction.compact(history[:-16], "s")  # about half the window: sent as it is
    second = compaction.compact(history, "s")  # past Soft: summarized
    assert first.record.tier is CompactionTier.NONE and second.record.tier is CompactionTier.FULL
    assert estimate(second.view) < 0.5 * estimate(first.view)
    compaction.observe(first, provider(first.view, 1.0))  # the first call's count, last
    following = compaction.compact([*history, {"role": "user", "content": "go on"}], "s").record
    true = provider([*second.view, {"role": "user", "content": "go on"}], 1.0)
    assert following.tier is tier_at(true, WINDOW) is CompactionTier.NONE
    assert following.token_correction == pytest.approx(1.0, abs=0.02) and abs(following.tokens_before - true) <= 3


def test_observe_usage_names_the_view_by_its_record(make_compactor):
    compactor = make_compactor(context_window=WINDOW)
    history = build_history([1900] * 10)
    first, first_record = compactor.compact_with_record(history[:3], "s")
    second, _ = compactor.compact_with_record(history, "s")
    count = provider(first, 1.2)
    assert compactor.observe_usage("s", count, first_record) == pytest.approx(1.2, abs=0.01)
    assert compactor.compact_with_record(history[:3], "s")[1].tokens_before == count  # that view: as reported
    other = compactor.compact_with_record(history, "other")[1]
    assert compactor.observe_usage("s", 5000, other) is None  # another session's view: not this one's
    for end in range(4, 14):  # the view of the first record is no longer among the latest
        compactor.compact(history[:end], "s")
    assert compactor.observe_usage("s", count, first_record) is None
    assert compactor.observe_usage("s", provider(second, 1.2)) is not None  # unnamed: the last view's


def test_a_sessions_report_is_paired_with_the_view_that_session_gave(make_compactor):
    """A ``Session`` whose id another caller compacts meanwhile (a second worker thread on the
    same conversation): its count is for the view it gave, not the other caller's newer one."""
    from progressive_compactor import Session

    compactor = make_compactor(context_window=WINDOW)
    history = build_history([1900] * 10)
    session = Session(compactor, "s")
    session.extend(history[:3])
    view = session.view()
    compactor.compact(history, "s")  # another caller's view of the same session, larger
    assert session.observe_usage(provider(view, 1.2)) == pytest.approx(1.2, abs=0.01)


def test_a_wild_count_does_not_truncate_every_view(make_compactor):
    """A count far beyond what the view could hold (the whole run's usage summed, a count of
    another session's request) was taken whole for an offset counted with every view after it:
    the next view, at 12 % of the window, was truncated by Emergency. What one report gives the
    offset beyond a tenth of the window stays under half of it."""
    compactor = make_compactor(context_window=WINDOW)
    history = build_history([1900] * 4)
    compactor.observe_usage("s", 40 * compactor_view_count(compactor, history))
    view, record = compactor.compact_with_record([*history, {"role": "user", "content": "go on"}], "s")
    assert record.tier < CompactionTier.EMERGENCY and record.token_offset <= WINDOW // 2
    assert view[-1]["content"] == "go on" and len(view) == len(history) + 1


def compactor_view_count(compactor, history) -> int:
    """The provider's count (the estimate) of the view the compactor returns for ``history``."""
    return estimate(compactor.compact(history, "s"))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_worker_forked_while_a_thread_holds_the_usage_lock_compacts_and_reports_usage():
    # The usage anchors' lock is held for an instant by every turn and every usage report: a child
    # forked at that instant makes it anew, or its first turn would wait for it forever.
    history = build_history([2000] * 6)
    compactor = ProgressiveCompactor(context_window=1_000_000)
    compactor.compact(history, "s")

    def child_turn() -> list[int]:
        view = compactor.compact(history, "s")
        compactor.observe_usage("s", input_tokens=5000)
        return [len(view), len(compactor.compact(history, "s"))]

    assert forked_while_held(compactor._usage._lock, child_turn) == [len(history), len(history)]
    compactor.close()
