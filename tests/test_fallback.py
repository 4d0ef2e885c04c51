"""The essential truncation fallback and what a failing summarizer leads to: whatever the
summarizer does wrong, the compactor falls back to truncation and records why."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from progressive_compactor import EMERGENCY_ERROR, CompactionTier, SummarizerError, SummaryResult, hookimpl
from progressive_compactor.messages import messages_from_dicts, repair_tool_pairs, text_of, view_problems
from progressive_compactor.models import Message
from progressive_compactor.plugins.fallback_token_budget import (
    MARKER,
    PINNED_SHARE,
    TokenBudgetFallback,
    groups,
    shorten,
)
from progressive_compactor.plugins.tokens_chars import CharTokens
from progressive_compactor.testing import (
    FixedPolicy,
    RecordingSummarizer,
    build_history,
    compaction_message,
    estimate,
    failing_summarizer,
    fallback_bound,
    filler,
    problems,
    tool_call,
    window_for,
)

ESTIMATE = CharTokens().estimate_tokens


def fallback(messages, pinned, budget, limit=None):
    return TokenBudgetFallback().fallback_compact(messages, pinned, budget, ESTIMATE, limit or budget)


def total(messages):
    return sum(ESTIMATE(messages))


# --- the plugin ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "whole_groups"),
    [(50, 0), (500, 1), (1500, 5), (2700, 10), (100_000, 11)],
    ids=["newest-shortened", "newest-only", "five", "ten", "everything"],
)
def test_it_keeps_the_pinned_messages_fits_the_budget_and_keeps_pairs(budget, whole_groups):
    """Each (call, result) group is 269 tokens: the budget decides how many stay whole."""
    messages = messages_from_dicts(build_history([1000] * 10))
    out = fallback(messages, 1, budget)
    assert total(out) <= budget
    assert out[0].role == "system"
    assert view_problems(out) == []
    kept = out[1:]
    if whole_groups:
        assert kept == messages[len(messages) - len(kept) :]
        assert len(groups(kept)) == whole_groups
    else:  # not even the newest group fits: it stays, shortened
        assert [m.role for m in kept] == ["assistant", "tool"]
        assert kept[-1].tool_call_id == messages[-1].tool_call_id
        assert MARKER.strip() in text_of(kept[-1])


def test_it_keeps_the_newest_whole_groups():
    messages = messages_from_dicts(build_history([1000] * 10))
    out = fallback(messages, 1, 1000)
    assert out[1:] == messages[-(len(out) - 1) :]
    assert out[1].role == "assistant"  # a group starts at its call, never at a result


def test_everything_fits_nothing_is_dropped():
    messages = messages_from_dicts(build_history([100] * 3))
    assert fallback(messages, 1, 10**6) == messages


def test_when_not_even_the_newest_group_fits_it_is_shortened():
    messages = messages_from_dicts(build_history([50_000]))
    out = fallback(messages, 1, 2000)
    assert total(out) <= 2000
    assert [m.role for m in out] == ["system", "user", "assistant", "tool"]  # the request fits beside it
    assert MARKER.strip() in text_of(out[-1])


def test_the_newest_exchange_stays_when_the_pinned_messages_leave_no_room_for_it():
    """A compaction message that takes the whole budget used to push the newest exchange out of the
    view although the window had room for it."""
    pinned = [Message(role="system", content="S" * 400), Message(role="user", content="C" * 7960)]
    newest = messages_from_dicts(build_history([6000], system=None))[-2:]
    out = fallback(pinned + newest, 2, budget=2000, limit=4000)
    assert [m.role for m in out] == ["system", "user", "assistant", "tool"]
    assert out[-1].tool_call_id == newest[-1].tool_call_id
    assert 2000 < total(out) <= 4000  # past the budget, never past the window
    assert view_problems(out) == []


def test_the_arguments_of_the_newest_call_are_shortened_when_they_are_what_is_large():
    history = build_history([10])
    history[-2]["tool_calls"][0]["function"]["arguments"] = json.dumps({"command": "echo " + "x" * 40_000})
    messages = messages_from_dicts(history)
    out = fallback(messages, 1, 2000)
    assert total(out) <= 2000
    assert out[-2].role == "assistant" and out[-1].role == "tool"
    arguments = json.loads(out[-2].tool_calls[0].arguments)
    assert MARKER.strip() in arguments["truncated_arguments"]


def test_a_cut_never_cuts_a_line_that_names_a_handle():
    first = "[Tool result offloaded: 90000 characters, 900 lines. Handle: s/call_7]"
    last = '[Full text: call read_tool_result with {"handle": "s/call_7"}, optionally with start_line and end_line.]'
    placeholder = "\n".join([first, "First 10 lines:", *(f"line {i} " * 30 for i in range(10)), last])
    message = Message(role="tool", tool_call_id="call_7", content=placeholder)
    for tokens in (400, 100, 60):
        text = text_of(shorten(message, tokens, ESTIMATE))
        assert text.startswith(first + "\n") and text.endswith("\n" + last)
        assert MARKER.strip() in text


def test_pinned_messages_over_the_budget_are_shortened_compaction_first():
    pinned = [Message(role="system", content="S" * 4000), Message(role="user", content="C" * 40_000)]
    out = fallback(pinned + [Message(role="user", content="hi")], 2, 3000)
    assert total(out) <= 3000
    assert out[0].content == "S" * 4000  # the system message is shortened last
    assert MARKER.strip() in text_of(out[1])


@pytest.mark.parametrize("window", [1500, 2000])
def test_a_long_pinned_request_leaves_room_for_the_instruction_that_changed_it(make_compactor, window):
    """Near the window's limit with a long request pinned: the request and the compaction message
    share the room. The compaction message was cut first, to its header alone: the user's later
    "do this instead" was lost while the old request stayed whole."""
    request = "Port the parser to Rust. " + "Requirement: keep every old behaviour. " * 130
    history = build_history([300] * 4, request=request)
    history += [{"role": "user", "content": "Forget that: refactor src/lexer.py instead."}]
    history += build_history([300] * 4, system=None, id_prefix="late_")[1:]
    compactor = make_compactor("default", context_window=window)
    view = compactor.compact_force(history)
    assert problems(view) == [] and view[1]["content"].startswith("Port the parser to Rust.")
    assert "- Later instruction: Forget that: refactor src/lexer.py instead." in compaction_message(view)["content"]
    assert estimate(view) <= fallback_bound(view, compactor)


def test_pinned_messages_share_the_room_the_system_message_leaves():
    system = Message(role="system", content="S" * 400)
    request, summary = Message(role="user", content="R" * 8000), Message(role="user", content="C" * 800)
    out = fallback([system, request, summary, Message(role="user", content="hi")], 3, 1000)
    assert total(out) <= 1000 and out[0] == system and out[2] == summary  # the shorter stays whole
    assert MARKER.strip() in text_of(out[1])


def test_a_short_pinned_request_is_never_replaced_by_the_longer_marker():
    """A system message over the budget: the pinned request of a few words went down to the
    truncation marker alone (45 characters for 12), the user's request gone from the view."""
    pinned = [Message(role="system", content="S" * 4000), Message(role="user", content="Fix the bug.")]
    out = fallback([*pinned, Message(role="user", content="C" * 400)], 2, 500)
    assert out[1].content == "Fix the bug."
    assert total(out) <= 500


def test_a_cut_request_keeps_its_image_unless_the_image_alone_is_over():
    """The user's request is a screenshot and words about it: a truncation that cuts the words
    keeps the screenshot, which is half the request; only when it alone is over what the request
    may take is the request its words alone."""
    from progressive_compactor.messages import IMAGE_CHARS

    image = {"type": "image_url", "image_url": {"url": "https://example.com/bug.png"}}
    request = Message(role="user", content=({"type": "text", "text": "Fix the bug shown here. " * 400}, image))
    cut_one = shorten(request, 2000, ESTIMATE)
    assert cut_one.content[1] == image and len(cut_one.content) == 2
    assert cut_one.content[0]["text"].startswith("Fix the bug shown here.") and MARKER.strip() in text_of(cut_one)
    assert "[image]" not in cut_one.content[0]["text"] and ESTIMATE([cut_one])[0] <= 2000
    words = shorten(request, IMAGE_CHARS // 8, ESTIMATE)  # less than the image alone counts
    assert isinstance(words.content, str) and words.content.startswith("Fix the bug shown here.")
    assert ESTIMATE([words])[0] <= IMAGE_CHARS // 8


def test_a_short_request_survives_a_truncation_that_usage_reports_force(make_compactor):
    """Found by the property tests: the provider counts three times the estimate, the system
    message fills the budget, and the truncation replaced the request by its marker."""
    history = [
        {"role": "system", "content": filler(731, "system")},
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "Running.", "tool_calls": [tool_call("c0", "ls")]},
        {"role": "tool", "tool_call_id": "c0", "content": ""},
    ]
    compactor = make_compactor("default", context_window=1000)
    view = compactor.compact(history[:2])
    compactor.observe_usage(None, 700)  # 3.7 times the estimate of the system message and the request
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.EMERGENCY and problems(view) == []
    assert "Fix the bug." in [m["content"] for m in view]


def test_groups_keep_results_with_their_call():
    messages = messages_from_dicts(build_history([10] * 2))
    assert [[m.role for m in g] for g in groups(messages)] == [
        ["system"],
        ["user"],
        ["assistant", "tool"],
        ["assistant", "tool"],
    ]


def test_a_result_that_arrived_apart_from_its_call_stays_in_the_group_before_it():
    history = [
        {"role": "user", "content": "Fix the bug."},
        {"role": "tool", "tool_call_id": "gone", "content": "a result whose call was cut"},
        {"role": "user", "content": "go on"},
    ]
    repaired, _ = repair_tool_pairs(messages_from_dicts(history))
    assert [[m.role for m in g] for g in groups(repaired)] == [["user", "user"], ["user"]]


def test_a_request_a_result_apart_from_its_call_follows_stays_in_a_truncation(make_compactor):
    """The request followed by a result whose call is not in the history (cut by the caller)
    are the newest exchange together: the truncation kept the result alone and dropped the
    request, which no summary covered, so the user's goal left the view."""
    history = [
        {"role": "system", "content": filler(2650, "system")},
        {"role": "user", "content": "Fix the bug."},
        {"role": "tool", "tool_call_id": "orphan0", "content": filler(100, "o0")},
    ]
    compactor = make_compactor(context_window=1000)
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.EMERGENCY
    assert problems(view) == []
    assert estimate(view) <= fallback_bound(view, compactor)
    assert [m["content"] for m in view[1:2]] == ["Fix the bug."]
    assert view[2]["content"].startswith("[Tool result for call orphan0, which arrived apart from its call]")


# --- summarizer failures -----------------------------------------------------------------------


class ReturnsBlank:
    @hookimpl
    def summarize(self, request):
        return SummaryResult(text="  \n ")


class ReturnsWrongType:
    @hookimpl
    def summarize(self, request):
        return "a bare string"


class RaisesTimeout:
    @hookimpl
    def summarize(self, request):
        raise TimeoutError("read timed out after 30 s")


@pytest.mark.parametrize(
    "plugin, cause",
    [
        (failing_summarizer("HTTP 503 from api.example.com"), "summarizer failed: HTTP 503 from api.example.com"),
        (RaisesTimeout(), "summarizer failed: TimeoutError: read timed out after 30 s"),
        (ReturnsBlank(), "summarizer failed: summarizer returned empty text"),
        (ReturnsWrongType(), "summarizer failed: summarizer returned str, not a SummaryResult"),
    ],
    ids=["summarizer-error", "timeout", "empty-text", "wrong-type"],
)
@pytest.mark.parametrize("ratio", [0.75, 0.85], ids=["soft", "full"])
def test_a_failing_summarizer_falls_back_with_the_cause_in_the_record(make_compactor, plugin, cause, ratio):
    history = build_history([3000] * 10)
    compactor = make_compactor(context_window=window_for(history, ratio), extra_plugins=[("broken", plugin)])
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.EMERGENCY
    assert record.requested_tier in (CompactionTier.SOFT, CompactionTier.FULL)
    assert record.errors == (cause, EMERGENCY_ERROR)
    assert record.fallback
    assert record.escalations == ()
    assert problems(view) == []
    assert view[0] == history[0]
    assert estimate(view) <= fallback_bound(view, compactor)
    assert record.summarizer_calls == 1


def test_no_summarizer_at_all_falls_back(make_compactor):
    history = build_history([3000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.85), plugins={"summarizer": "none"})
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.EMERGENCY
    assert record.errors == ("summarizer failed: no summarizer plugin answered", EMERGENCY_ERROR)
    assert record.fallback


@pytest.mark.parametrize("config", ["classic", "default"])
def test_a_result_the_truncation_shortens_is_offloaded_whole_first(make_compactor, config):
    """A result under the offload threshold that the truncation must still shorten is offloaded
    whole: the view names its handle, and the whole text reads back."""
    history = build_history([3900])  # under the 4,000 characters of offload_threshold
    compactor = make_compactor(config, context_window=1000)
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.EMERGENCY
    (result,) = [m for m in view if m["role"] == "tool"]
    (entry,) = record.offloaded
    assert result["content"] != history[-1]["content"] and entry.handle in result["content"]
    assert compactor.read_tool_result(entry.handle) == history[-1]["content"]
    assert problems(view) == [] and estimate(view) <= 1000


def test_after_a_fallback_the_users_request_is_still_in_the_view(make_compactor):
    history = build_history([3000] * 30)
    compactor = make_compactor(context_window=window_for(history, 0.85), extra_plugins=[("b", failing_summarizer())])
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.EMERGENCY and record.summarized > 0
    assert history[1]["content"] in view[1]["content"]
    assert "dropped by emergency truncation" in compaction_message(view)["content"]


def test_a_summarizer_that_recovers_is_used_on_the_next_turn(make_compactor):
    flaky = RecordingSummarizer(fail=SummarizerError("rate limited", retryable=True, status=429))
    history = build_history([3000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.85), extra_plugins=[("flaky", flaky)])
    _, first = compactor.compact_with_record(history)
    assert first.tier is CompactionTier.EMERGENCY and first.fallback
    assert first.errors == ("summarizer failed: rate limited", EMERGENCY_ERROR)
    flaky.fail = None
    for i in range(40):
        history += build_history([3000], system=None, request=f"more {i}", id_prefix=f"m{i}_")
        _, record = compactor.compact_with_record(history)
        if record.summarizer_calls:
            break
    assert record.tier in (CompactionTier.SOFT, CompactionTier.FULL)
    assert record.errors == () and not record.fallback
    assert flaky.requests[-1].previous_summary  # what the fallback kept is carried on


# --- compact_force --------------------------------------------------------------------------------


def test_compact_force_is_emergency_without_a_summary(make_compactor, recording_summarizer):
    history = build_history([3000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.3), extra_plugins=[("r", recording_summarizer)])
    view = compactor.compact_force(history)
    assert recording_summarizer.calls == 0
    assert problems(view) == []
    assert estimate(view) <= fallback_bound(view, compactor)


def test_async_force_and_async_failure_behave_like_sync(make_compactor):
    history = build_history([3000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.85), extra_plugins=[("b", failing_summarizer())])
    view, record = asyncio.run(compactor.acompact_with_record(history))
    assert record.tier is CompactionTier.EMERGENCY and record.fallback
    assert record.errors == ("summarizer failed: HTTP 503 from the summarizer", EMERGENCY_ERROR)
    forced = asyncio.run(compactor.acompact_force(history, "other"))
    assert problems(forced) == []


class Restless:
    """A truncation that always drops two messages more than the compaction message it is given
    covers: each round's cut makes a message that moves the cut again, until only the newest
    exchange is left."""

    @hookimpl(tryfirst=True)
    def fallback_compact(self, messages, pinned, budget, estimate, limit):
        covered = 0
        for m in messages[:pinned]:
            found = re.search(r"The first (\d+) messages", text_of(m))
            covered = int(found.group(1)) if found else covered
        rest = list(messages[pinned:])
        cut = min(covered + 2, len(rest) - 2)
        while 0 < cut < len(rest) and rest[cut].role == "tool":
            cut -= 1
        return list(messages[:pinned]) + rest[cut:]


def test_a_truncation_that_moves_with_its_message_never_drops_what_the_message_does_not_cover(make_compactor):
    # The compaction message depends on what truncation drops, and what is dropped on the
    # message: the rounds go on while each drops more than the message covers, so that every
    # message of the history is in the view or in the summary.
    history = build_history([300] * 12)
    compactor = make_compactor(context_window=window_for(history, 0.97), extra_plugins=[("restless", Restless())])
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.EMERGENCY and record.fallback
    assert problems(view) == []
    covered = int(re.search(r"The first (\d+) messages", compaction_message(view)["content"]).group(1))
    first_kept = next(i for i, m in enumerate(history) if m is view[2])  # [system, compaction, ...]
    assert first_kept <= 1 + covered  # nothing between what the summary covers and what the view keeps
    assert compactor.state().covered == covered
    assert len(view) == 2 + len(history) - first_kept


def test_a_system_prompt_over_the_budget_leaves_the_user_request_its_share():
    """A long system prompt at a small window: the pinned request and the compaction message
    were cut first, the request to its marker alone, and the user's goal left the view while the
    system message stayed whole. Each keeps an eighth of the budget now; the system message gives
    way."""
    budget = 2000
    system = Message(role="system", content="You are careful. " * 800)  # about 3,400 tokens
    request = Message(role="user", content="Port the parser to Rust. " + "Keep every old behaviour. " * 300)
    summary = Message(role="user", content="[Context Compaction]\n## User Intent\n" + "C" * 8000)
    out = fallback([system, request, summary, Message(role="user", content="hi")], 3, budget)
    assert total(out) <= budget
    share = budget // PINNED_SHARE
    for kept, original in ((out[1], request), (out[2], summary)):
        assert ESTIMATE([kept])[0] >= share - 50 and text_of(kept)[:40] == text_of(original)[:40]
    assert MARKER.strip() in text_of(out[0]) and text_of(out[0]).startswith("You are careful.")


def test_a_system_prompt_just_under_the_budget_leaves_the_user_request_its_share():
    """A system prompt that leaves a few tokens of the budget: the request and the compaction
    message shared those few, and the request was cut to its marker alone before the system
    message was cut at all. Each keeps an eighth of the budget (the request whole, here); the
    system message gives way."""
    budget = 2000
    system = Message(role="system", content="You are careful. " * 470)  # 1,998 tokens
    request = Message(role="user", content="Port the parser to Rust. " * 20)  # 125 tokens
    summary = Message(role="user", content="[Context Compaction]\n## User Intent\n" + "C" * 8000)
    out = fallback([system, request, summary, Message(role="user", content="hi")], 3, budget)
    assert total(out) <= budget
    assert text_of(out[1]) == text_of(request)
    share = budget // PINNED_SHARE
    assert ESTIMATE([out[2]])[0] >= share - 50 and text_of(out[2]).startswith("[Context Compaction]")
    assert MARKER.strip() in text_of(out[0]) and text_of(out[0]).startswith("You are careful.")


# --- a window too small for what must stay --------------------------------------------------------


def compact_three_ways(compactor, history):
    """``compact``, ``acompact`` and ``compact_force``, each in a session of its own: (view, record)."""
    views = [
        compactor.compact(history, "sync"),
        asyncio.run(compactor.acompact(history, "async")),
        compactor.compact_force(history, "forced"),
    ]
    return [(view, compactor.records(sid)[-1]) for view, sid in zip(views, ("sync", "async", "forced"), strict=True)]


def test_a_system_prompt_larger_than_the_window_is_cut_to_fit_it(make_compactor):
    """The system message alone is twice the window: the view is cut to the window, the request in it."""
    history = build_history([300] * 4, system="You are careful. " * 480, request="Fix the bug in parser.py.")
    compactor = make_compactor("default", context_window=1000)
    for view, record in compact_three_ways(compactor, history):
        assert record.tier is CompactionTier.EMERGENCY and record.errors == (EMERGENCY_ERROR,)
        assert problems(view) == [] and estimate(view) <= 1000
        assert view[0]["content"].startswith("You are careful.") and MARKER.strip() in view[0]["content"]
        assert "Fix the bug in parser.py." in [m["content"] for m in view]


def test_a_view_that_cannot_fit_the_window_says_so_in_the_record(make_compactor):
    """A window of ten tokens: the compaction message's header, the truncation marker and the
    request of a few words are more than that. The view is still valid and the request in it,
    and the record says the view is over the window rather than report a clean truncation."""
    history = build_history([300] * 4, system="S" * 100, request="Fix the bug in parser.py.")
    compactor = make_compactor("default", context_window=10)
    for view, record in compact_three_ways(compactor, history):
        assert problems(view) == [] and estimate(view) > 10
        assert "Fix the bug in parser.py." in [m["content"] for m in view]
        assert record.errors == (
            EMERGENCY_ERROR,
            "the newest exchange (2 messages) cannot fit the context window even shortened: dropped",
            f"the view cannot fit the context window: {estimate(view)} tokens for a window of 10, even truncated",
        )
        assert record.tokens_after == estimate(view)


# --- pinned messages over the budget, within the window -----------------------------------------


def test_pinned_messages_over_the_budget_stay_whole_when_the_window_has_room():
    """The budget is what truncation aims at, the window the limit: the request and the summary
    were cut to the budget though the window had room for them and the newest exchange."""
    system = Message(role="system", content="S" * 1600)  # 400 tokens
    request = Message(role="user", content="Port the parser to Rust. " + "Keep every old behaviour. " * 80)
    summary = Message(role="user", content="[Context Compaction]\n## User Intent\n" + "C" * 1200)
    newest = messages_from_dicts(build_history([400], system=None))[-2:]
    messages = [system, request, summary, *newest]
    assert 1000 < total(messages[:3]) and total(messages) < 2000
    out = fallback(messages, 3, budget=1000, limit=2000)
    assert out == messages


def test_pinned_messages_are_cut_only_as_far_as_the_window_demands():
    """Over the window with the newest exchange: the pinned messages give way down to the window's
    room (twice the newest exchange kept for it), not down to the budget."""
    system = Message(role="system", content="S" * 4000)  # 1,000 tokens
    request = Message(role="user", content="Fix the bug in parser.py. " + "R" * 2000)
    summary = Message(role="user", content="[Context Compaction]\n" + "C" * 2000)
    newest = messages_from_dicts(build_history([400], system=None))[-2:]  # 138 tokens
    out = fallback([system, request, summary, *newest], 3, budget=1000, limit=1800)
    assert out[3:] == newest and view_problems(out) == []
    assert 1000 < total(out[:3]) <= 1800 - 2 * total(newest)
    assert text_of(out[1]).startswith("Fix the bug in parser.py.")


def test_a_system_prompt_over_the_budget_is_not_cut_when_the_window_has_room(make_compactor):
    system = "You are careful. Run the tests before you answer. " * 140  # 1,750 tokens
    history = build_history([300] * 6, system=system, request="Fix the bug in parser.py.")
    compactor = make_compactor("default", context_window=3000)  # a budget of 1,500 tokens
    for view, record in compact_three_ways(compactor, history):
        assert record.errors == (EMERGENCY_ERROR,) and problems(view) == []
        assert view[0]["content"] == system and view[1]["content"] == "Fix the bug in parser.py."
        assert view[-1] == history[-1] and estimate(view) <= 3000
        assert MARKER.strip() not in compaction_message(view)["content"]


# --- what cannot be kept ----------------------------------------------------------------------------


def test_a_tool_result_larger_than_the_window_that_cannot_be_offloaded_is_cut_to_fit(make_compactor, tmp_path):
    """The offloader fails (its root is a file): the result of 200,000 characters stays in the
    view, cut with the marker to fit the window, and the record names the failure once (it was
    there as often as the turn tried to offload it)."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the offload root should be")
    history = build_history([300, 300, 200_000], request="Fix the bug in parser.py.")
    compactor = make_compactor({"offload-files": {"root": str(blocker)}}, context_window=2000)
    for view, record in compact_three_ways(compactor, history):
        assert problems(view) == [] and estimate(view) <= 2000
        assert view[-1]["tool_call_id"] == "call_2" and MARKER.strip() in view[-1]["content"]
        assert any("Fix the bug in parser.py." in m["content"] for m in view)
        failed = [e for e in record.errors if e.startswith("offload of call_2 failed: OffloadError: ")]
        assert len(failed) == 1 and EMERGENCY_ERROR in record.errors


def parallel_calls(count: int) -> list[dict]:
    calls = [tool_call(f"p{i}", f"cat src/module_{i}.py") for i in range(count)]
    results = [{"role": "tool", "tool_call_id": f"p{i}", "content": filler(2000, str(i))} for i in range(count)]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *results]


def test_a_newest_exchange_that_cannot_fit_even_shortened_is_dropped_with_a_note(make_compactor):
    """Three hundred parallel calls: their ids and truncation markers alone are over the window.
    The older exchange was kept in their place, the view ending as if it were the newest, and the
    dropped calls were neither in the view nor in the summary, the record silent."""
    history = build_history([300], request="Fix the bug in parser.py.") + parallel_calls(300)
    compactor = make_compactor("default", context_window=2000)
    for view, record in compact_three_ways(compactor, history):
        assert problems(view) == [] and estimate(view) <= 2000
        assert not any(m["role"] in ("assistant", "tool") for m in view)
        assert "Fix the bug in parser.py." in [m["content"] for m in view]
        assert "The first 3 messages" in compaction_message(view)["content"]  # the older exchange
        assert record.errors == (
            EMERGENCY_ERROR,
            "the newest exchange (301 messages) cannot fit the context window even shortened: dropped",
        )


# --- the window is a limit, whatever the plugins answer ------------------------------------------


@pytest.mark.parametrize(
    "tier, plugins",
    [
        (CompactionTier.NONE, {}),
        (CompactionTier.WARN, {}),
        (CompactionTier.SOFT, {"tier_soft": "none"}),
        (CompactionTier.SOFT, {}),
    ],
    ids=["policy-says-none", "policy-says-warn", "no-soft-tier", "policy-says-soft"],
)
def test_the_window_is_a_limit_whatever_the_policy_and_the_tiers_answer(make_compactor, tier, plugins):
    """A view over the window is refused by the provider: a policy that asks too little (or a
    tier role left empty) ends in the Emergency truncation, and the record says why."""
    history = build_history([3000] * 10)
    window = window_for(history, 1.9)
    compactor = make_compactor(context_window=window, plugins=plugins, extra_plugins=[("lax", FixedPolicy(tier))])
    results = compact_three_ways(compactor, history)
    for view, record in results:
        assert problems(view) == []
        assert estimate(view) <= window
        assert record.tier is CompactionTier.EMERGENCY
        assert record.tokens_after <= window
    if tier is not CompactionTier.SOFT or plugins:  # (Soft asked again by the loop guard escalates as ever)
        for _, record in results[:2]:  # compact_force asks no policy
            assert any("over the context window" in e for e in record.escalations), record.escalations


def test_a_policy_that_asks_too_little_within_the_window_is_obeyed(make_compactor):
    """Only the window overrules a policy: at 90 % of it, a policy that says None is obeyed."""
    history = build_history([3000] * 10)
    compactor = make_compactor(
        context_window=window_for(history, 0.9), extra_plugins=[("lax", FixedPolicy(CompactionTier.NONE))]
    )
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.NONE and view == history


def test_enforce_window_false_sends_what_the_policy_decided(make_compactor):
    """The no-compaction baseline counts overflows: with ``enforce_window: false`` a view over the
    window leaves as the policy decided, and nothing is escalated."""
    history = build_history([3000] * 10)
    compactor = make_compactor(
        context_window=window_for(history, 1.9),
        enforce_window=False,
        extra_plugins=[("lax", FixedPolicy(CompactionTier.NONE))],
    )
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.NONE and record.escalations == () and view == history
