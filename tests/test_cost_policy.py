"""The default config's pieces: the cost-aware policy, Soft's low-water mark, whole-head offloads,
delta summaries and lean summary requests."""

from __future__ import annotations

import math

import attrs
import pytest

from progressive_compactor import CompactionTier, SessionState, SummaryRequest, TierInput, TurnContext
from progressive_compactor.anchors import parse_markdown
from progressive_compactor.http.prompt import build_prompt
from progressive_compactor.models import Anchor, AnchorType, Facts, Message, ToolCall
from progressive_compactor.plugin_manager import PluginContext
from progressive_compactor.plugins.policy_cost import (
    MESSAGES_PER_CALL,
    PRIOR_CALLS,
    SETTLE_CALLS,
    CostPolicy,
)
from progressive_compactor.plugins.summarize_extractive import ExtractiveSummarizer
from progressive_compactor.plugins.tier_soft import SoftTier
from progressive_compactor.pricing import PriceTable
from progressive_compactor.testing import build_history, estimate, problems, tool_turn
from progressive_compactor.validation import load_config


def turn(tokens: int, messages: int = 40, session: str = "s", state: SessionState | None = None) -> TurnContext:
    return TurnContext(session, 128_000, tokens, messages, messages, state or SessionState())


def landed(tokens: int, messages: int) -> SessionState:
    """A session whose last compaction left a view of ``tokens`` at ``messages`` messages."""
    return SessionState(landed_tokens=tokens, landed_messages=messages)


def policy(**prices) -> CostPolicy:
    config = load_config("default", pricing=prices) if prices else load_config("default")
    return CostPolicy(CostPolicy.Config(), PluginContext(config))


def test_the_trigger_is_the_landing_plus_the_cheapest_interval():
    cost = policy()
    cycle = cost.cycle(20_000, turn(20_000))
    p = PriceTable()
    c = CostPolicy.Config()
    growth = (c.growth_tokens * PRIOR_CALLS + 20_000) / (PRIOR_CALLS + 40 / MESSAGES_PER_CALL)
    tail = 20_000 / 40 * load_config("default").min_tail_messages
    landing = c.summary_tokens + tail + c.keep_share * 20_000
    one_off = c.summary_tokens * p.summarizer_output + c.request_tokens * p.summarizer_input
    one_off += landing * (p.input - p.cached_input)
    assert cycle.growth == pytest.approx(growth)
    assert cycle.landing == pytest.approx(landing)
    assert cycle.interval == pytest.approx(math.sqrt(2 * growth * one_off / p.cached_input))
    assert cycle.trigger == pytest.approx(landing + cycle.interval)
    assert 6_000 < cycle.trigger < 20_000  # far below 70 % of a 128k window


def test_a_large_window_compacts_when_it_pays_and_not_before():
    cost, state = policy(), landed(3_000, 40)
    tokens, messages, tiers = 3_000, 40, []
    while not tiers or tiers[-1] is CompactionTier.NONE:  # 600 tokens and 2 messages a call
        tokens, messages = tokens + 600, messages + 2
        tiers.append(cost.determine_tier(tokens / 128_000, tokens, 128_000, turn(tokens, messages, state=state)))
    assert tiers[-1] is CompactionTier.SOFT and len(tiers) > 5
    assert tokens >= cost.cycle(tokens, turn(tokens, messages, state=state)).trigger
    assert tokens - 600 < cost.cycle(tokens - 600, turn(tokens - 600, messages - 2, state=state)).trigger
    assert tokens < 0.3 * 128_000  # far below the Soft threshold


def test_without_a_prompt_cache_compacting_pays_sooner_and_dearer_prices_change_the_point():
    cached = policy().cycle(12_000, turn(12_000)).trigger
    uncached = policy(cached_input=3.0).cycle(12_000, turn(12_000)).trigger
    pricey_summaries = policy(summarizer_output=75.0).cycle(12_000, turn(12_000)).trigger
    assert uncached < cached < pricey_summaries


def test_the_growth_of_a_session_moves_its_trigger():
    cost, state = policy(), landed(4_000, 40)
    slow = cost.cycle(5_000, turn(5_000, 60, state=state))  # 100 tokens a call since the landing
    fast = cost.cycle(24_000, turn(24_000, 60, state=state))  # 2,000 a call
    assert slow.growth < 300 < 1_000 < fast.growth and slow.trigger < fast.trigger
    # the same turn on another worker (a fresh plugin) decides the same: nothing is in memory
    assert policy().cycle(24_000, turn(24_000, 60, state=state)) == fast


@pytest.mark.parametrize(
    ("ratio", "tier"),
    [
        (0.61, CompactionTier.WARN),
        (0.71, CompactionTier.SOFT),
        (0.81, CompactionTier.FULL),
        (0.96, CompactionTier.EMERGENCY),
    ],
)
def test_the_thresholds_stay_the_safety_limits(ratio, tier):
    window = 4_000  # a view too small for the cost trigger: only the thresholds decide
    tokens = int(ratio * window)
    assert policy().determine_tier(ratio, tokens, window, turn(tokens)) is tier


def test_the_session_s_summaries_price_the_next_one():
    """What the summarizer wrote (``summary_tokens_out``) replaces the assumed ``summary_tokens``
    in the one-off cost: a terse summarizer compacts sooner, a verbose one later."""
    cost, p = policy(), PriceTable()
    c = CostPolicy.Config()
    assumed = cost.cycle(20_000, turn(20_000))
    terse = cost.cycle(20_000, turn(20_000, state=SessionState(summary_tokens_out=100)))
    verbose = cost.cycle(20_000, turn(20_000, state=SessionState(summary_tokens_out=2_000)))
    assert terse.trigger < assumed.trigger < verbose.trigger
    one_off = assumed.interval**2 * p.cached_input / (2 * assumed.growth)
    terse_off = one_off - (c.summary_tokens - 100) * p.summarizer_output
    assert terse.interval == pytest.approx(math.sqrt(2 * terse.growth * terse_off / p.cached_input))


def test_a_pinned_request_is_not_counted_in_the_cache_break():
    """A compaction re-reads its landing uncached, but a pinned request stays cached: the one-off
    cost, and with it the cheapest interval, leaves the request out."""
    request = "Fix the parser. " * 500  # 8,000 characters: 2,000 tokens of intent
    state = SessionState(anchors=(Anchor(AnchorType.USER_INTENT, request),), summary="so far")
    pinned = CostPolicy(CostPolicy.Config(), PluginContext(load_config("default"))).cycle(
        30_000, turn(30_000, state=state)
    )
    whole = CostPolicy(CostPolicy.Config(), PluginContext(load_config("default", pin_request=False)))
    unpinned = whole.cycle(30_000, turn(30_000, state=state))
    p = PriceTable()
    assert pinned.landing == unpinned.landing  # the request is still in the view
    saved = len(request) / 4 * (p.input - p.cached_input)
    one_off = unpinned.interval**2 * p.cached_input / (2 * unpinned.growth)
    assert pinned.interval == pytest.approx(math.sqrt(2 * pinned.growth * (one_off - saved) / p.cached_input))


def test_after_a_compaction_only_the_thresholds_decide():
    """The loop guard asks again after a Soft compaction: a view still over the cost trigger but
    below the thresholds must not escalate to Full and Emergency."""
    cost = policy()
    before = 30_000
    trigger = cost.cycle(before, turn(before)).trigger
    after = int(trigger) + 1_000
    assert cost.determine_tier(after / 128_000, after, 128_000, turn(before)) is CompactionTier.NONE


def test_soft_keeps_the_newest_head_messages_within_its_share():
    head = tuple(Message(role="user", content=f"m{i}") for i in range(10))
    counts = (1_000,) * 10
    tier_input = TierInput(CompactionTier.SOFT, head, (), 20_000, 128_000, counts, ())
    assert SoftTier(SoftTier.Config(keep_share=0.15)).count(tier_input) == 7  # keeps 3 x 1,000 of 3,000
    assert SoftTier().count(tier_input) == 5  # classic: the oldest half


def test_the_default_compacts_a_long_session_at_a_large_window_and_soft_leaves_part_of_the_head(make_compactor):
    history = build_history([5000] * 40)  # about 51k tokens: 40 % of a 128k window
    compactor = make_compactor("default", context_window=128_000)
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.SOFT and record.summarizer_calls == 1
    assert problems(view) == [] and estimate(view) < estimate(history) / 3
    head = len(history) - 1 - compactor.config.min_tail_messages
    assert 0 < record.summarized < head  # part of the head, not all of it
    # offload_head: every large result left in the head is a placeholder now, so the next turns
    # do not break the prompt cache again
    kept_head = view[2 : 2 + head - record.summarized]
    assert all(m["content"].startswith("[Tool result offloaded") for m in kept_head if m["role"] == "tool")
    history += tool_turn("next", 3000)
    again = compactor.compact_with_record(history)[1]
    assert again.tier is CompactionTier.NONE


# --- delta summaries and lean requests --------------------------------------------------------


def request(previous_anchors=(), previous_summary=None, messages=None) -> SummaryRequest:
    return SummaryRequest(
        messages=tuple(messages or [Message(role="tool", tool_call_id="c1", content="x" * 9000)]),
        previous_summary=previous_summary,
        previous_anchors=previous_anchors,
        facts=Facts(user_request="Fix the parser in src/p.py", files_edited=("src/p.py",)),
        session_id="s",
        tier=CompactionTier.SOFT,
        max_summary_tokens=1000,
        replaced_tokens=2500,
    )


def test_a_delta_summary_is_merged_into_the_previous_one(make_compactor):
    history = build_history([3000] * 40)
    compactor = make_compactor("default", context_window=128_000)
    compactor.compact_with_record(history)
    first = compactor.state()
    for i in range(30):  # turn by turn, as an agent loop goes, until the next summary
        history += tool_turn(f"more_{i}", 3000, command=f"sed -i s/a/b/ src/file_{i}.py")
        record = compactor.compact_with_record(history)[1]
        if record.summarizer_calls:
            break
    second = compactor.state()
    assert record.summarizer_calls == 1 and record.errors == ()  # no "anchor parsing incomplete" for a delta
    assert second.summary.startswith(first.summary[:200])  # the prose grew, the first paragraph stayed
    assert "src/file_0.py" in second.anchors[1].content and "file_call_30.py" in second.anchors[1].content


def test_the_extractive_delta_writes_only_what_is_new():
    previous = ExtractiveSummarizer().summarize(request()).text
    from progressive_compactor.anchors import parse_markdown

    anchors = parse_markdown(previous).anchors
    delta = ExtractiveSummarizer(ExtractiveSummarizer.Config(delta=True)).summarize(request(previous_anchors=anchors))
    assert delta.delta and "Fix the parser" not in delta.text  # the request is in the summary already
    assert len(delta.text) < len(previous)


def test_the_extractive_delta_leaves_the_facts_to_the_core(make_compactor):
    """A delta does not copy the facts (the core adds them to the summary itself, so they are not
    billed as output twice), yet the summary that comes of it holds every one of them."""
    messages = [
        Message(role="user", content="Also keep the old flag working."),
        Message(role="assistant", content="I will use a lookup table instead of the regex."),
    ]
    facts = Facts(
        user_request="Fix the parser in src/p.py",
        files_edited=("src/p.py",),
        failed_commands=("`pytest` -> ImportError: p",),
        decisions=("I will use a lookup table instead of the regex.",),
        next_step="Next, I will run the tests.",
        instructions=("Also keep the old flag working.",),
    )
    delta = ExtractiveSummarizer(ExtractiveSummarizer.Config(delta=True)).summarize(
        attrs.evolve(request(messages=messages), facts=facts)
    )
    anchors = {a.type: a.content for a in parse_markdown(delta.text).anchors}
    assert all(anchors[t] == "N/A" for t in AnchorType)
    assert "src/p.py" not in delta.text and "ImportError" not in delta.text
    assert "old flag" not in delta.text  # the later instruction too is a fact the core adds
    # a whole summary writes the later instruction once, under User Intent
    whole = ExtractiveSummarizer().summarize(attrs.evolve(request(messages=messages), facts=facts))
    intent = {a.type: a.content for a in parse_markdown(whole.text).anchors}[AnchorType.USER_INTENT]
    assert intent.endswith("\n- Later instruction: Also keep the old flag working.")
    assert whole.text.count("Also keep the old flag working.") == 1

    history = build_history([3000] * 40)
    compactor = make_compactor("default", context_window=128_000)
    record = compactor.compact_with_record(history)[1]
    assert record.summarizer_calls == 1 and record.errors == ()
    assert record.summarizer_tokens_out < 400  # the paragraph and the notes, no copied fact
    assert "file_call_10.py" in record.anchors[1].content  # the core added the files read


def test_a_lean_request_cuts_results_and_sends_the_previous_summary_once():
    big = request(previous_summary="Earlier work. " * 50)
    prompt = build_prompt(big)
    assert prompt.user.count("Earlier work.") == 50
    assert len(prompt.user) < 9000 / 2  # the 9,000-character result is cut
    assert prompt.user.count("Fix the parser in src/p.py") == 1
    delta = build_prompt(big, delta=True)
    assert "Earlier work." not in delta.user and "only what the new messages add" in delta.system


def test_a_request_names_tool_calls_by_short_labels_not_by_their_ids():
    """A provider's call id is some 30 random characters (a score of tokens each time) that tell
    the summarizer only which result answers which call: a request labels the calls instead. A
    result whose call it does not show keeps its id, and an offloaded result's handle (in its
    text) keeps it too, so the summary can name it."""
    first, second, stray = "toolu_01Gk3P7HeiSrLZ3UC1cfxLzG", "toolu_01Ba8eg2XcfNJemSjzoeGb61", "call_9xQ2mLwZ"
    handle = f"s/{second}"
    messages = [
        Message(
            role="assistant",
            content="Looking.",
            tool_calls=(ToolCall(first, "bash", '{"cmd": "ls"}'), ToolCall(second, "read", '{"path": "a.py"}')),
        ),
        Message(role="tool", tool_call_id=second, name="read", content=f"[Tool result offloaded. Handle: {handle}]"),
        Message(role="tool", tool_call_id=first, content="a.py b.py"),
        Message(role="tool", tool_call_id=stray, content="late"),
    ]
    user = build_prompt(request(messages=messages), delta=True).user
    assert '-> tool call #1 bash: {"cmd": "ls"}' in user and "-> tool call #2 read:" in user
    assert "[2] tool result of #2 (read):" in user and "[3] tool result of #1:\na.py b.py" in user
    assert user.count(second) == 1 and f"Handle: {handle}" in user  # only in the handle
    assert first not in user
    assert f"[4] tool result of {stray}:" in user


def test_after_a_compaction_the_next_waits_for_growth_past_where_it_landed():
    """A compaction that cannot get below the trigger (a large protected tail) must not repeat on
    every turn: the trigger counts from where the last compaction really landed."""
    cost = policy()
    state = landed(25_000, 40)  # the tail alone is this large
    tokens, messages, calls = 25_000, 40, 0
    cycle = cost.cycle(tokens, turn(tokens, messages, state=state))
    assert cycle.landing < 25_000 and cycle.trigger == pytest.approx(25_000 + SETTLE_CALLS * cycle.growth)
    while cost.determine_tier(tokens / 128_000, tokens, 128_000, turn(tokens, messages, state=state)) is (
        CompactionTier.NONE
    ):
        tokens, messages, calls = tokens + 600, messages + 2, calls + 1
    assert SETTLE_CALLS <= calls < 40


def test_after_an_emergency_the_same_history_is_not_summarized(tmp_path):
    """An Emergency offloads and truncates without a summary; the same history again starts
    from the offloaded view, which is where that compaction landed: no Soft for it (a case the
    fuzz tests found)."""
    from progressive_compactor.testing import make_compactor, tool_call

    history = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix it. " * 200}]
    for i, size in enumerate([5000, 5000, 5000, 5000, 9700, 15000]):  # large calls, short results
        call = tool_call(f"h{i}", "echo " + "x" * size)
        history += [{"role": "assistant", "content": "Writing.", "tool_calls": [call]}]
        history += [{"role": "tool", "tool_call_id": f"h{i}", "content": "ok"}]
    for i in range(6):  # small ones
        history += [{"role": "assistant", "content": "", "tool_calls": [tool_call(f"s{i}", "ls")]}]
        history += [{"role": "tool", "tool_call_id": f"s{i}", "content": ""}]
    for i, size in enumerate([31_000, 19_000]):  # then two large results
        history += [{"role": "assistant", "content": "", "tool_calls": [tool_call(f"r{i}", "cat big.log")]}]
        history += [{"role": "tool", "tool_call_id": f"r{i}", "content": "y" * size}]
    compactor = make_compactor(tmp_path, context_window=24_624)
    _, first = compactor.compact_with_record(history)
    _, second = compactor.compact_with_record(history)
    compactor.close()
    assert first.tier is CompactionTier.EMERGENCY and first.summarizer_calls == 0
    assert second.tokens_before < first.tokens_before and second.summarizer_calls == 0


def test_a_summarizing_compaction_saves_where_it_landed(tmp_path):
    from progressive_compactor.testing import make_compactor

    history = build_history([3000] * 14)
    compactor = make_compactor(tmp_path, "classic", context_window=14_000)
    _, record = compactor.compact_with_record(history)
    state = compactor.state("test-session")
    compactor.close()
    assert record.tier >= CompactionTier.SOFT
    assert (state.landed_tokens, state.landed_messages) == (record.tokens_after, len(history))


def test_what_the_summarizer_wrote_is_kept_as_a_running_mean(make_compactor):
    """The state keeps what a summary cost to write, for the policy to price the next one: the
    tokens the summarizer reported, or, when it reports none, an estimate from its text; each new
    summary weighs half."""
    from progressive_compactor.plugin import hookimpl
    from progressive_compactor.testing import RecordingSummarizer

    class SoftOnce:  # one Soft compaction a turn: the loop guard's question is answered None
        @hookimpl
        def determine_tier(self, ratio, tokens, context_window, turn):
            return CompactionTier.NONE if turn.after_compaction else CompactionTier.SOFT

    size = {"chars": 400}  # 100 tokens reported, then 50
    reporting = RecordingSummarizer(text=lambda request: "## Summary\n" + "w" * (size["chars"] - 11))
    policy, history = SoftOnce(), build_history([3000] * 12)
    compactor = make_compactor("default", extra_plugins=[("p", policy), ("s", reporting)])
    _, first = compactor.compact_with_record(history[:10])
    assert first.summarizer_calls == 1 and compactor.state("test-session").summary_tokens_out == 100
    size["chars"] = 200
    _, second = compactor.compact_with_record(history)
    assert second.summarizer_calls == 1 and compactor.state("test-session").summary_tokens_out == 75

    silent = RecordingSummarizer()  # the extractive summary: no usage reported
    other = make_compactor("default", extra_plugins=[("p", policy), ("s", silent)], session_id="other")
    view, record = other.compact_with_record(history)
    written = other.state("other").summary_tokens_out
    assert record.summarizer_tokens_out == 0 and silent.calls == 1
    assert 0 < written == len(ExtractiveSummarizer().summarize(silent.requests[0]).text) // 4
    compactor.close()
    other.close()


def test_a_cost_trigger_with_nothing_to_summarize_does_not_escalate_to_truncation(make_compactor):
    """The cost trigger fires on a view far below the thresholds whose tokens are all in the
    protected tail (one reply with many parallel tool calls). Soft and Full have nothing to fold,
    so the view stays as large: the loop guard must judge it by the thresholds, not ask the cost
    trigger again and escalate to an Emergency truncation at 14 % of the window."""
    from progressive_compactor.testing import filler, tool_call

    ids = [f"c{i}" for i in range(24)]
    history = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix the parser."}]
    history.append(
        {"role": "assistant", "content": "Reading.", "tool_calls": [tool_call(i, f"cat {i}.py") for i in ids]}
    )
    history += [{"role": "tool", "tool_call_id": i, "content": filler(3000, i)} for i in ids]
    compactor = make_compactor("default", context_window=128_000)
    tokens = estimate(history)
    assert tokens >= compactor.pm.get_plugin("policy-cost").cycle(tokens, turn(tokens, len(history))).trigger
    view, record = compactor.compact_with_record(history)
    assert not record.fallback and record.errors == (), (record.errors, record.escalations)
    assert record.tier < CompactionTier.FULL
    assert view == history


@pytest.mark.parametrize(
    "prices",
    [
        {"input": 0, "cached_input": 0, "output": 0, "summarizer_input": 0, "summarizer_output": 0},  # a local model
        {"cached_input": 0},  # a provider that bills no cached input
    ],
)
def test_when_re_reading_the_view_is_free_only_the_thresholds_compact(prices):
    """Compacting pays only by making re-reads cheaper: at a cached price of 0 there is nothing to
    save, and a free summarizer (0 / 0) must not make it compact every few calls for nothing."""
    cost, window = policy(**prices), 128_000
    tokens, messages, state, tiers = 1_000, 2, SessionState(), []
    for _ in range(100):  # 600 tokens and 2 messages a call, with a compaction landing at 3,000
        tokens, messages = tokens + 600, messages + 2
        tier = cost.determine_tier(tokens / window, tokens, window, turn(tokens, messages, state=state))
        tiers.append(tier)
        if tier is not CompactionTier.NONE:
            tokens, state = 3_000, landed(3_000, messages)
    assert set(tiers) == {CompactionTier.NONE}, tiers.index(CompactionTier.SOFT)
    soft = int(0.71 * window)
    assert cost.determine_tier(0.71, soft, window, turn(soft, 200)) is CompactionTier.SOFT
