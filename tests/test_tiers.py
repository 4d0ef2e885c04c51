"""Each tier's data flow and record fields, the thresholds, the "incremental, not repeated"
rule and the loop guard."""

from __future__ import annotations

import copy

import pytest

from progressive_compactor import EMERGENCY_ERROR, CompactionTier, SessionState, load_config
from progressive_compactor.anchors import COMPACTION_MARKER, PINNED_REQUEST_NOTE, format_summary
from progressive_compactor.models import Anchor, AnchorType
from progressive_compactor.plugins.policy_thresholds import ThresholdPolicy
from progressive_compactor.testing import (
    RecordingSummarizer,
    build_history,
    estimate,
    fallback_bound,
    problems,
    tool_turn,
    window_for,
)

SIZES = [5000] * 10
"""system + request + 10 (call, result) pairs = 22 messages; the head is the request and the first
7 pairs (15 messages), the tail the last 3 pairs (6 messages)."""
HEAD, TAIL = 15, 6


@pytest.fixture
def history():
    return build_history(SIZES)


@pytest.fixture
def summarizer():
    return RecordingSummarizer()


def run(make_compactor, history, ratio, summarizer, extra_plugins=(), **overrides):
    compactor = make_compactor(
        context_window=window_for(history, ratio),
        extra_plugins=[("recording", summarizer), *extra_plugins],
        **overrides,
    )
    view, record = compactor.compact_with_record(history)
    return compactor, view, record


def ids(messages):
    return [m.get("tool_call_id") or m["role"] for m in messages]


# --- thresholds --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ratio, tier",
    [
        (0.0, CompactionTier.NONE),
        (0.5999, CompactionTier.NONE),
        (0.60, CompactionTier.WARN),
        (0.6999, CompactionTier.WARN),
        (0.70, CompactionTier.SOFT),
        (0.7999, CompactionTier.SOFT),
        (0.80, CompactionTier.FULL),
        (0.9499, CompactionTier.FULL),
        (0.95, CompactionTier.EMERGENCY),
        (1.7, CompactionTier.EMERGENCY),
    ],
    ids=lambda v: f"{v}" if isinstance(v, float) else v.label,
)
def test_default_thresholds(ratio, tier):
    assert ThresholdPolicy().determine_tier(ratio=ratio, context_window=100) is tier


def test_no_window_means_no_compaction():
    assert ThresholdPolicy().determine_tier(ratio=5.0, context_window=0) is CompactionTier.NONE


def test_the_policy_reports_its_thresholds(make_compactor):
    compactor = make_compactor(config={"policy-thresholds": {"warn": 0.5, "soft": 0.6, "full": 0.7, "emergency": 0.9}})
    assert compactor.hooks.tier_thresholds() == {"warn": 0.5, "soft": 0.6, "full": 0.7, "emergency": 0.9}
    assert ThresholdPolicy().tier_thresholds() == {"warn": 0.60, "soft": 0.70, "full": 0.80, "emergency": 0.95}


@pytest.mark.parametrize(
    "ratio, tier",
    [(0.65, CompactionTier.NONE), (0.75, CompactionTier.WARN), (0.85, CompactionTier.FULL)],
    ids=["below-warn", "warn", "full"],
)
def test_thresholds_come_from_the_config(make_compactor, history, summarizer, ratio, tier):
    custom = {"policy-thresholds": {"warn": 0.7, "soft": 0.8, "full": 0.8, "emergency": 0.99}}
    _, _, record = run(make_compactor, history, ratio, summarizer, config=custom)
    assert record.tier is tier


def test_a_plugin_can_decide_the_tier(make_compactor, history):
    class AlwaysWarn:
        from progressive_compactor import hookimpl

        @hookimpl
        def determine_tier(self, ratio, tokens, context_window):
            return CompactionTier.WARN

    compactor = make_compactor(context_window=10**6, extra_plugins=[("always-warn", AlwaysWarn())])
    _, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.WARN
    assert len(record.offloaded) == 7


def test_the_decision_hook_gets_the_turn_context(make_compactor, history):
    from progressive_compactor import TurnContext, hookimpl

    class Watcher:
        def __init__(self):
            self.turns = []

        @hookimpl
        def determine_tier(self, ratio, tokens, context_window, turn):
            self.turns.append((ratio, tokens, context_window, turn))
            return None  # no opinion: the default policy decides

    watcher = Watcher()
    compactor = make_compactor(context_window=10**6, extra_plugins=[("watcher", watcher)])
    _, record = compactor.compact_with_record(history, "s-turn")
    ((ratio, tokens, window, turn),) = watcher.turns
    assert record.tier is CompactionTier.NONE
    assert isinstance(turn, TurnContext)
    assert (tokens, window) == (record.tokens_before, 10**6)
    assert ratio == tokens / window
    assert (turn.session_id, turn.context_window, turn.view_tokens) == ("s-turn", 10**6, record.tokens_before)
    assert (turn.view_messages, turn.history_messages) == (len(history), len(history))
    assert turn.state == SessionState() and turn.forced is False
    compactor.compact_force(history, "s-turn")
    assert len(watcher.turns) == 1  # a forced turn is Emergency whatever the policy says


# --- TierNone ----------------------------------------------------------------------------------


def test_none_returns_the_history_as_is_without_side_effects(make_compactor, history, summarizer, tmp_path):
    compactor, view, record = run(make_compactor, history, 0.5, summarizer)
    assert record.tier is CompactionTier.NONE
    assert len(view) == len(history) and all(a is b for a, b in zip(view, history))
    assert (record.summarized, record.offloaded, record.anchors, record.summary_text) == (0, (), (), "")
    assert record.tokens_after == record.tokens_before == estimate(history)
    assert summarizer.calls == 0
    assert not (tmp_path / "tool_results").exists()
    assert not (tmp_path / "records").exists()
    assert compactor.state() == SessionState()


# --- TierWarn ----------------------------------------------------------------------------------


def test_warn_offloads_only_the_head_and_keeps_the_structure(make_compactor, history, summarizer):
    _, view, record = run(make_compactor, history, 0.65, summarizer)
    assert record.tier is CompactionTier.WARN
    assert ids(view) == ids(history)
    assert [m["role"] for m in view] == [m["role"] for m in history]
    head_ids = {f"call_{i}" for i in range(7)}
    assert {e.tool_call_id for e in record.offloaded} == head_ids
    for original, out in zip(history, view):
        if original.get("tool_call_id") in head_ids:
            assert out["content"].startswith("[Tool result offloaded")
        else:
            assert out == original
    assert record.summarized == 0
    assert record.preserved_tail == TAIL
    assert record.anchors == () and record.summary_text == ""
    assert summarizer.calls == 0
    assert record.tokens_after < record.tokens_before


@pytest.mark.parametrize("factor", [None, 4.0], ids=["seed-warn", "cache-aware"])
def test_cache_aware_warn_offloads_only_results_worth_the_cache_break(make_compactor, summarizer, factor):
    # An old large result far up the view and a recent one at the head's end.
    history = build_history([12_000] + [800] * 40 + [12_000] + [800] * 3)
    blocks = {} if factor is None else {"tier-warn": {"offload_break_factor": factor}}
    _, view, record = run(make_compactor, history, 0.65, summarizer, config=blocks)
    assert record.tier is CompactionTier.WARN
    offloaded = {e.tool_call_id for e in record.offloaded}
    # Each saves ~2.6k tokens. call_41 has ~0.7k tokens after it: worth a cache break at 4x;
    # call_0 has ~13k after it (more than 4 x 2.6k): it waits for the summary.
    assert offloaded == ({"call_0", "call_41"} if factor is None else {"call_41"})
    if factor is not None:  # what the bundled config sets
        assert load_config("cache-aware").plugin_block("tier-warn") == {"offload_break_factor": factor}
    assert problems(view) == []


# --- TierSoft ----------------------------------------------------------------------------------


def test_soft_summarizes_the_oldest_half_of_the_head(make_compactor, history, summarizer):
    _, view, record = run(make_compactor, history, 0.75, summarizer)
    assert record.tier is CompactionTier.SOFT
    oldest = HEAD // 2  # 7: the request and three pairs
    assert summarizer.calls == 1
    assert [m.tool_call_id or m.role for m in summarizer.requests[0].messages] == ids(history[1 : 1 + oldest])
    assert view[0] == history[0]
    assert view[1]["role"] == "user" and view[1]["content"].startswith(COMPACTION_MARKER)
    assert view[2:] == history[1 + oldest :]  # headRecent and tail verbatim
    assert record.summarized == oldest
    assert record.preserved_tail == len(history) - 1 - oldest == (HEAD - oldest) + TAIL
    assert [a.type for a in record.anchors] == list(AnchorType)
    assert record.summary_text
    assert {e.tool_call_id for e in record.offloaded} == {"call_0", "call_1", "call_2"}
    assert record.msgs_after == len(view) == 2 + len(history) - 1 - oldest
    assert problems(view) == []


def test_soft_never_splits_a_tool_call_from_its_results(make_compactor, summarizer):
    history = build_history([3000] * 3)
    parallel = {
        "role": "assistant",
        "content": "Two reads at once.",
        "tool_calls": [
            {"id": "p1", "type": "function", "function": {"name": "read", "arguments": "{}"}},
            {"id": "p2", "type": "function", "function": {"name": "read", "arguments": "{}"}},
        ],
    }
    history += [
        parallel,
        {"role": "tool", "tool_call_id": "p1", "content": "a" * 3000},
        {"role": "tool", "tool_call_id": "p2", "content": "b" * 3000},
    ]
    history += build_history([3000] * 4, system=None, request="go on", id_prefix="late_")
    for min_tail in (2, 3, 4, 5, 6):
        _, view, record = run(make_compactor, history, 0.75, summarizer, min_tail_messages=min_tail)
        assert problems(view) == [], min_tail
        assert record.tier >= CompactionTier.SOFT


# --- TierFull ----------------------------------------------------------------------------------


def test_full_summarizes_the_whole_head_and_keeps_the_tail(make_compactor, history, summarizer):
    _, view, record = run(make_compactor, history, 0.85, summarizer)
    assert record.tier is CompactionTier.FULL
    assert summarizer.calls == 1
    assert len(summarizer.requests[0].messages) == HEAD
    assert len(view) == 2 + TAIL
    assert view[0] == history[0]
    assert view[1]["content"].startswith(COMPACTION_MARKER)
    assert view[2:] == history[-TAIL:]
    assert record.summarized == HEAD
    assert record.preserved_tail == TAIL
    assert len(record.anchors) == 5 and record.summary_text
    assert {e.tool_call_id for e in record.offloaded} == {f"call_{i}" for i in range(7)}
    assert problems(view) == []


def test_min_tail_messages_is_configurable(make_compactor, summarizer):
    history = build_history([5000] * 10)
    _, view, record = run(make_compactor, history, 0.85, summarizer, min_tail_messages=2)
    assert record.tier is CompactionTier.FULL
    assert view[2:] == history[-2:]
    assert record.preserved_tail == 2


# --- TierEmergency -----------------------------------------------------------------------------


def test_emergency_truncates_without_calling_the_summarizer(make_compactor, history, summarizer):
    compactor, view, record = run(make_compactor, history, 0.97, summarizer)
    window = compactor.config.context_window
    assert record.tier is CompactionTier.EMERGENCY
    assert summarizer.calls == 0
    assert record.fallback
    assert record.errors == (EMERGENCY_ERROR,)
    assert record.escalations == ()
    assert estimate(view) == record.tokens_after <= compactor.config.fallback_budget * window
    assert view[0] == history[0]
    assert problems(view) == []
    kept = [m for m in view[1:] if not str(m["content"]).startswith(COMPACTION_MARKER)]
    assert record.preserved_tail == len(kept)
    # The newest result (5,000 characters) stays, offloaded like every large result at Emergency.
    assert view[-1]["tool_call_id"] == history[-1]["tool_call_id"]
    assert view[-1]["content"].startswith("[Tool result offloaded")


def test_emergency_fits_even_a_single_huge_message(make_compactor, summarizer):
    history = [{"role": "system", "content": "s"}, {"role": "user", "content": "x" * 200_000}]
    compactor, view, record = run(make_compactor, history, 0.99, summarizer)
    assert record.tier is CompactionTier.EMERGENCY
    assert estimate(view) <= fallback_bound(view, compactor)
    assert problems(view) == []


# --- every tier --------------------------------------------------------------------------------


@pytest.mark.parametrize("ratio", [0.5, 0.65, 0.75, 0.85, 0.97], ids=["none", "warn", "soft", "full", "emergency"])
def test_the_callers_history_is_never_modified(make_compactor, history, summarizer, ratio):
    before = copy.deepcopy(history)
    compactor, view, _ = run(make_compactor, history, ratio, summarizer)
    compactor.compact_with_record(history)
    compactor.compact_force(history)
    assert history == before
    view.append({"role": "user", "content": "appended to the view"})  # the view is a new list
    assert history == before


@pytest.mark.parametrize("ratio", [0.65, 0.75, 0.85, 0.97], ids=["warn", "soft", "full", "emergency"])
def test_record_fields(make_compactor, history, summarizer, ratio):
    compactor, view, record = run(make_compactor, history, ratio, summarizer)
    assert record.session_id == "test-session"
    assert record.msgs_before == len(history) and record.msgs_after == len(view)
    assert record.tokens_before == estimate(history)
    assert record.tokens_after == estimate(view)
    assert record.compression_ratio == round(1 - record.tokens_after / record.tokens_before, 4)
    assert record.context_window == compactor.config.context_window
    assert record.schema_version == 2
    assert record.fallback is (ratio == 0.97)
    assert record.errors == ((EMERGENCY_ERROR,) if ratio == 0.97 else ())
    assert record.escalations == ()
    assert record.token_method == "tokens-chars"
    assert record.plugins["summarizer"] == "summarize-extractive"
    assert record.duration_ms >= 0
    assert record.timestamp.endswith("+00:00")
    assert record.requested_tier is None
    assert record.summarizer_calls == summarizer.calls


# --- incremental, not repeated --------------------------------------------------------------


def grow(compactor, history, turns, until=lambda record: False, size=5000):
    """Append one tool turn per call and compact, up to ``turns`` times or until ``until(record)``."""
    records = []
    for i in range(turns):
        history += tool_turn(f"more_{i}", size)
        records.append(compactor.compact_with_record(history)[1])
        if until(records[-1]):
            break
    return records


def test_after_a_compaction_the_next_turns_do_not_summarize_again(make_compactor, history, summarizer):
    compactor, view, record = run(make_compactor, history, 0.85, summarizer)
    assert record.tier is CompactionTier.FULL
    compaction = view[1]
    history += tool_turn("next_0", 800)
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.NONE
    assert summarizer.calls == 1
    assert view[1] == compaction
    assert view[2:] == history[-(TAIL + 2) :]
    assert record.tokens_before == estimate(view)  # the tier was decided on the view


def test_the_second_summary_gets_the_previous_one_and_only_uncovered_messages(make_compactor, history, summarizer):
    compactor, _, first = run(make_compactor, history, 0.85, summarizer)
    records = grow(compactor, history, 40, until=lambda record: record.summarizer_calls > 0)
    assert summarizer.calls == 2, [r.tier for r in records]
    assert len(records) > 2  # a few turns passed without a summary
    assert all(r.tier < CompactionTier.SOFT and r.summarizer_calls == 0 for r in records[:-1])
    one, two = summarizer.requests
    assert two.previous_summary and two.previous_summary in first.summary_text
    assert two.previous_anchors == first.anchors
    first_ids = {m.tool_call_id for m in one.messages if m.tool_call_id}
    second_ids = [m.tool_call_id for m in two.messages if m.tool_call_id]
    assert not first_ids & set(second_ids)
    assert second_ids[0] == f"call_{len(SIZES) - TAIL // 2}"  # starts right after what was covered
    # The user's request, covered by the first summary, survives the second one.
    assert records[-1].anchors[0].type is AnchorType.USER_INTENT
    assert history[1]["content"] in records[-1].anchors[0].content


def test_a_summary_that_states_no_next_step_leaves_the_one_the_agent_stated_last(make_compactor, history):
    """A summary with N/A under Next Steps (a delta with nothing to add there) must not leave the
    previous summary's next step standing: the covered messages' own next step replaces it."""

    def summary(next_step):
        return format_summary([Anchor(AnchorType.NEXT_STEP, next_step)], "What happened.")

    texts = iter([summary("Run the linter first."), summary("N/A")])
    summarizer = RecordingSummarizer(lambda request: next(texts))
    compactor, _, first = run(make_compactor, history, 0.85, summarizer)
    assert first.anchors[4].content == "Run the linter first."
    for i in range(40):  # turn by turn until the second summary
        history += tool_turn(f"more_{i}", 5000, text="Next, I will run the parser tests again.")
        record = compactor.compact_with_record(history)[1]
        if record.summarizer_calls:
            break
    assert summarizer.calls == 2 and record.tier >= CompactionTier.SOFT
    assert record.anchors[4].type is AnchorType.NEXT_STEP
    assert record.anchors[4].content == "Next, I will run the parser tests again."


def test_the_request_is_pinned_before_the_compaction_message_and_not_repeated(make_compactor, history, summarizer):
    _, view, record = run(make_compactor, history, 0.85, summarizer, pin_request=True)  # the default's
    request = history[1]["content"]
    assert view[1] == {"role": "user", "content": request}
    assert view[2]["content"].startswith(COMPACTION_MARKER) and view[3:] == history[-TAIL:]
    assert PINNED_REQUEST_NOTE in view[2]["content"] and request not in view[2]["content"]
    assert request in record.anchors[0].content  # the state and the record keep the whole intent
    assert problems(view) == []


def test_the_pinned_request_stays_in_the_cached_prefix_across_compactions(make_compactor, history, summarizer):
    compactor, first_view, _ = run(make_compactor, history, 0.85, summarizer, pin_request=True)
    records = grow(compactor, history, 40, until=lambda record: record.summarizer_calls > 0)
    view = compactor.compact(history)
    assert summarizer.calls == 2 and view[:2] == first_view[:2]
    assert records[-1].cache_stable_prefix_tokens >= estimate(view[:2])  # system and request stay cached


def test_classic_keeps_the_request_in_the_compaction_message(make_compactor, history, summarizer):
    _, view, _ = run(make_compactor, history, 0.85, summarizer)  # classic: pin_request false
    assert view[1]["content"].startswith(COMPACTION_MARKER) and history[1]["content"] in view[1]["content"]
    assert view[2:] == history[-TAIL:]


# --- loop guard -----------------------------------------------------------------------------


BLOATED = "## User Intent\n" + "very long summary " * 20_000


def test_a_head_smaller_than_any_summary_costs_no_summarizer_call(make_compactor, summarizer):
    """At a tiny window the head may be the four-token request alone: no summary can replace it
    with less, so the summarizer is not called (found by the fuzz tests: it was called on every
    turn, each time to be rejected by the loop guard)."""
    history = build_history([100, 2700], request="Fix the bug.")
    compactor = make_compactor("default", context_window=1000, extra_plugins=[("recording", summarizer)])
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.EMERGENCY and problems(view) == []
    assert record.summarizer_calls == 0 and summarizer.calls == 0
    assert any("is no larger than the compaction message would be" in e for e in record.escalations)
    # The truncation offloaded the result it shortened: the next turn's view fits as it stands.
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.NONE and problems(view) == [] and summarizer.calls == 0


def test_a_summary_larger_than_what_it_replaces_is_rejected(make_compactor, history):
    bloated = RecordingSummarizer(text=BLOATED)
    _, view, record = run(make_compactor, history, 0.75, bloated)
    # The offloads of the oldest half already brought the view below Soft: nothing to escalate.
    assert bloated.calls == 1
    assert record.tier is CompactionTier.SOFT
    (escalation,) = record.escalations
    assert escalation.startswith("loop guard: the summary (") and "is larger than what it replaces" in escalation
    assert not record.fallback and EMERGENCY_ERROR not in record.errors
    assert not any(e.startswith("loop guard") for e in record.errors)  # normal behaviour, not an error
    assert record.summarized == 0 and record.summary_text == ""
    assert not any(str(m["content"]).startswith(COMPACTION_MARKER) for m in view)
    assert ids(view) == ids(history)
    assert estimate(view) < 0.70 * record.context_window


def test_a_summary_larger_than_what_it_replaces_escalates(make_compactor):
    history = build_history([3000] * 10)  # below the offload threshold: only a summary can help
    bloated = RecordingSummarizer(text=BLOATED)
    compactor, view, record = run(make_compactor, history, 0.75, bloated)
    assert bloated.calls == 2  # Soft, then Full, then the fallback without a summary
    assert record.tier is CompactionTier.EMERGENCY
    assert record.requested_tier is CompactionTier.SOFT
    summary_1, soft, summary_2, full = record.escalations
    assert summary_1.startswith("loop guard: the summary (") and summary_2.startswith("loop guard: the summary (")
    assert soft.startswith("loop guard: Soft left the view at ") and soft.endswith("; escalating")
    assert full.startswith("loop guard: Full left the view at ") and full.endswith("; escalating")
    assert record.fallback
    assert record.errors[-1] == EMERGENCY_ERROR
    assert not any(e.startswith("loop guard") for e in record.errors)
    assert "very long summary " * 3 not in str(view)
    assert estimate(view) <= fallback_bound(view, compactor)
    assert problems(view) == []


def test_a_compaction_that_stays_above_soft_escalates_full_then_emergency(make_compactor, summarizer):
    history = build_history([200] * 8 + [15_000] * 3)  # the tail alone is over 70 % of the window
    compactor, view, record = run(make_compactor, history, 0.78, summarizer)
    assert record.requested_tier is CompactionTier.SOFT
    assert record.tier is CompactionTier.EMERGENCY
    soft, full = record.escalations
    assert soft.startswith("loop guard: Soft left the view at ") and soft.endswith(" of the window; escalating")
    assert full.startswith("loop guard: Full left the view at ") and full.endswith(" of the window; escalating")
    assert record.fallback
    assert record.errors == (EMERGENCY_ERROR,)
    assert summarizer.calls == 2
    assert estimate(view) <= fallback_bound(view, compactor)
    assert problems(view) == []


def test_a_tier_plugin_can_change_what_a_tier_does(make_compactor, history, summarizer):
    from progressive_compactor import TierPlan, TurnContext, hookimpl

    class WarnOffloadsEverything:
        def __init__(self):
            self.calls = []

        @hookimpl
        def apply_tier(self, tier_input, turn):
            self.calls.append((tier_input, turn))
            return TierPlan(offload=True, offload_tail=True)

    plugin = WarnOffloadsEverything()
    _, view, record = run(
        make_compactor,
        history,
        0.65,
        summarizer,
        extra_plugins=[("everything", plugin)],
        plugins={"tier_warn": "everything"},
    )
    ((seen, turn),) = plugin.calls
    assert seen.tier is CompactionTier.WARN
    assert (len(seen.head), len(seen.tail)) == (HEAD, TAIL)
    assert seen.view_tokens == record.tokens_before and seen.context_window == record.context_window
    assert isinstance(turn, TurnContext) and turn.session_id == "test-session"
    assert record.tier is CompactionTier.WARN
    assert record.plugins["tier_warn"] == "everything"
    assert len(record.offloaded) == 10  # the tail's results too
    assert ids(view) == ids(history)


def test_a_tier_plugin_that_is_not_selected_is_never_called(make_compactor, history, summarizer):
    from progressive_compactor import TierPlan, hookimpl

    class Unselected:
        def __init__(self):
            self.calls = 0

        @hookimpl
        def apply_tier(self, tier_input):
            self.calls += 1
            return TierPlan(offload=True, offload_tail=True)

    plugin = Unselected()
    _, _, record = run(make_compactor, history, 0.65, summarizer, extra_plugins=[("unselected", plugin)])
    assert plugin.calls == 0
    assert record.tier is CompactionTier.WARN
    assert {e.tool_call_id for e in record.offloaded} == {f"call_{i}" for i in range(7)}  # tier-warn's plan


def test_a_tier_role_set_to_none_does_nothing(make_compactor, history, summarizer):
    _, view, record = run(make_compactor, history, 0.65, summarizer, plugins={"tier_warn": "none"})
    assert record.tier is CompactionTier.WARN
    assert record.offloaded == () and record.errors == ()
    assert view == history


def test_a_token_estimator_plugin_decides_the_counts(make_compactor, history):
    from progressive_compactor import hookimpl

    class OnePerMessage:
        @hookimpl
        def estimate_tokens(self, messages):
            return [1] * len(messages)

    compactor = make_compactor(context_window=100, extra_plugins=[("one", OnePerMessage())])
    view, record = compactor.compact_with_record(history)
    assert record.tokens_before == len(history) == 22
    assert record.tier is CompactionTier.NONE  # 22 % of a 100-token window
    assert view == history
