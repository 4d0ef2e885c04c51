"""The compacting interfaces (view alone, forced, with a record), the constructor options, the
non-destructive session helper, state kept outside the process, and the cascade clean-up."""

from __future__ import annotations

import asyncio
import collections
import copy
import os
import sys

import attrs
import pytest

from progressive_compactor import (
    EMERGENCY_ERROR,
    AsyncSession,
    CompactionRecord,
    CompactionTier,
    CompactorError,
    OffloadEntry,
    Session,
    SessionState,
    hookimpl,
)
from progressive_compactor.messages import fingerprint, message_from_dict
from progressive_compactor.testing import (
    RecordingSummarizer,
    build_history,
    compaction_message,
    estimate,
    fallback_bound,
    filler,
    problems,
    tool_call,
    tool_turn,
    window_for,
)
from timeouts import forked_while_held


@pytest.fixture
def history():
    return build_history([5000] * 10)


# --- the three interfaces --------------------------------------------------------------------------


def test_compact_is_compact_with_record_without_the_record(make_compactor, history):
    a = make_compactor(context_window=window_for(history, 0.85))
    b = make_compactor(context_window=window_for(history, 0.85))
    view, record = a.compact_with_record(history)
    assert b.compact(history) == view
    assert record.tier is CompactionTier.FULL


def test_compact_force_is_the_emergency_tier(make_compactor, history):
    store = RecordList()
    compactor = make_compactor(record_store=store)
    view = compactor.compact_force(history)
    (record,) = store.records
    assert record.tier is CompactionTier.EMERGENCY
    assert record.fallback
    assert record.errors == (EMERGENCY_ERROR,) == ("emergency fallback: forced truncation",)
    assert estimate(view) <= fallback_bound(view, compactor)


def test_the_async_interfaces_give_what_the_sync_ones_give(make_compactor, history):
    sync = make_compactor(context_window=window_for(history, 0.85))
    asyn = make_compactor(context_window=window_for(history, 0.85))
    view, record = sync.compact_with_record(history)
    aview, arecord = asyncio.run(asyn.acompact_with_record(history))
    assert aview == view
    assert (arecord.tier, arecord.summarized, arecord.summary_text) == (
        record.tier,
        record.summarized,
        record.summary_text,
    )
    assert asyncio.run(asyn.acompact(history)) == asyn.compact(history)


def test_an_async_summarizer_is_awaited(make_compactor, history):
    class AsyncOnly:
        def __init__(self):
            self.awaited = 0

        @hookimpl
        def asummarize(self, request):
            async def run():
                self.awaited += 1
                await asyncio.sleep(0)
                return RecordingSummarizer(text="## User Intent\nasync intent\n## Summary\nasync").summarize(request)

            return run()

    plugin = AsyncOnly()
    compactor = make_compactor(context_window=window_for(history, 0.85), extra_plugins=[("async", plugin)])
    view, record = asyncio.run(compactor.acompact_with_record(history))
    assert plugin.awaited == 1
    assert record.summary_text == "async"


# --- constructor options ----------------------------------------------------------------------------


class RecordList:
    def __init__(self):
        self.records: list[CompactionRecord] = []

    def save(self, record):
        self.records.append(record)


def test_the_todo_injector_text_appears_in_the_compaction_message(make_compactor, history):
    compactor = make_compactor(
        context_window=window_for(history, 0.85), todo_injector=lambda: "- [x] reproduce\n- [ ] fix the parser"
    )
    view, _ = compactor.compact_with_record(history)
    assert "## Todo\n- [x] reproduce\n- [ ] fix the parser" in compaction_message(view)["content"]


def test_a_todo_context_plugin_gets_the_session_id(make_compactor, history):
    class Todos:
        @hookimpl
        def todo_context(self, session_id):
            return f"todos of {session_id}"

    compactor = make_compactor(context_window=window_for(history, 0.85), extra_plugins=[("todos", Todos())])
    assert "todos of ticket-9" in compaction_message(compactor.compact(history, "ticket-9"))["content"]


def test_the_memory_extractor_sees_exactly_the_summarized_messages(make_compactor, history):
    seen = []
    summarizer = RecordingSummarizer()
    compactor = make_compactor(
        context_window=window_for(history, 0.75), memory_extractor=seen.append, extra_plugins=[("r", summarizer)]
    )
    _, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.SOFT
    (messages,) = seen
    assert list(messages) == list(summarizer.requests[0].messages)
    assert len(messages) == record.summarized
    assert [m.tool_call_id or m.role for m in messages] == [m.get("tool_call_id") or m["role"] for m in history[1:8]]


def test_the_memory_extractor_is_not_called_without_a_summary(make_compactor, history):
    seen = []
    compactor = make_compactor(context_window=window_for(history, 0.65), memory_extractor=seen.append)
    assert compactor.compact_with_record(history)[1].tier is CompactionTier.WARN
    compactor.compact_force(history)
    assert seen == []


@pytest.mark.parametrize("kind", ["save", "append", "callable"])
def test_the_record_store_gets_every_record(make_compactor, history, kind):
    received = []
    store = {
        "save": type("S", (), {"save": lambda self, r: received.append(r)})(),
        "append": received,
        "callable": received.append,
    }[kind]
    compactor = make_compactor(context_window=window_for(history, 0.85), record_store=store)
    _, first = compactor.compact_with_record(history)
    _, second = compactor.compact_with_record(history)
    assert received == [first, second]
    assert second.tier is CompactionTier.NONE  # a store given as an option gets tier None too


def test_the_offloader_option_replaces_the_file_offloader(make_compactor, history):
    class MemoryOffloader:
        def __init__(self):
            self.texts = {}

        @hookimpl
        def offload(self, message, session_id, threshold):
            if message.role != "tool" or len(message.content) <= threshold:
                return None
            handle = f"mem:{message.tool_call_id}"
            self.texts[handle] = message.content
            return OffloadEntry(
                message.tool_call_id, handle, "", len(message.content), 1, "-", f"[in memory: {handle}]"
            )

        @hookimpl
        def read_offloaded(self, handle):
            return self.texts.get(handle)

    offloader = MemoryOffloader()
    compactor = make_compactor(context_window=window_for(history, 0.65), offloader=offloader)
    view, record = compactor.compact_with_record(history)
    assert view[3]["content"] == "[in memory: mem:call_0]"
    assert compactor.read_tool_result("mem:call_0") == history[3]["content"]
    assert len(offloader.texts) == 7


def test_the_session_id_option_is_the_default_session(make_compactor, history, tmp_path):
    compactor = make_compactor(context_window=window_for(history, 0.85), session_id="ticket-42")
    _, record = compactor.compact_with_record(history)
    assert record.session_id == "ticket-42"
    assert (tmp_path / "records" / "ticket-42.jsonl").exists()
    assert (tmp_path / "tool_results" / "ticket-42").is_dir()
    assert compactor.compact_with_record(history, "other")[1].session_id == "other"


# --- the session helper ---------------------------------------------------------------------------------


def test_a_session_keeps_the_full_history_and_derives_a_view_per_turn(make_compactor, history):
    session = Session(make_compactor(context_window=window_for(history, 0.85)), "s1")
    session.extend(history)
    view = session.view()
    assert session.last_record.tier is CompactionTier.FULL
    assert len(view) < len(session.history) == len(history)
    assert session.history == history
    session.append({"role": "assistant", "content": "Continuing."})
    view2 = session.view()
    assert view2[: len(view)] == view and view2[-1] == {"role": "assistant", "content": "Continuing."}
    assert [r.tier for r in session.records] == [CompactionTier.FULL, CompactionTier.NONE]
    assert len(session.history) == len(history) + 1


def test_a_session_keeps_only_its_newest_records(make_compactor):
    session = Session(make_compactor(), "s1", keep_records=3)
    session.append({"role": "user", "content": "hello"})
    records = [(session.view(), session.last_record)[1] for _ in range(5)]
    assert session.records == records[-3:] and session.last_record is records[-1]
    assert session.records[-2:] == records[-2:]  # a list: slices work
    default = Session(make_compactor(), "s2")
    default.append({"role": "user", "content": "hello"})
    for _ in range(102):
        default.view()
    assert len(default.records) == 100  # bounded unless asked otherwise
    every = Session(make_compactor(), "s3", keep_records=None)
    every.append({"role": "user", "content": "hello"})
    for _ in range(102):
        every.view()
    assert len(every.records) == 102
    with pytest.raises(ValueError, match="keep_records"):
        Session(make_compactor(), "s4", keep_records=0)  # the last record is always kept


def test_a_session_copies_what_it_is_given(make_compactor):
    session = Session(make_compactor(), "s1")
    message = {"role": "user", "content": "hello"}
    session.append(message)
    message["content"] = "changed by the caller"
    assert session.history[0]["content"] == "hello"


def test_a_session_rejects_an_invalid_message_before_it_enters(make_compactor):
    session = Session(make_compactor(), "s1")
    with pytest.raises(Exception, match="role"):
        session.append({"role": "nobody", "content": "x"})
    assert session.history == []
    with pytest.raises(Exception, match="message 1"):  # none of them enters: a retry adds each once
        session.append({"role": "user", "content": "go"}, {"role": "tool", "content": "no call id"})
    assert session.history == []


def test_compact_now_forces_emergency(make_compactor, history):
    session = Session(make_compactor(), "s1")
    session.extend(history)
    view = session.compact_now()
    assert problems(view) == [] and len(view) <= len(history)
    assert session.last_record.tier is CompactionTier.EMERGENCY and len(session.records) == 1


def test_async_session(make_compactor, history):
    async def run():
        session = AsyncSession(make_compactor(context_window=window_for(history, 0.85)), "s1")
        session.extend(history)
        view = await session.view()
        forced = await session.compact_now()
        return session, view, forced

    session, view, forced = asyncio.run(run())
    assert [r.tier for r in session.records] == [CompactionTier.FULL, CompactionTier.EMERGENCY]
    assert problems(view) == [] and problems(forced) == []


def test_delete_cascades_to_offloads_records_and_state(make_compactor, history, tmp_path):
    compactor = make_compactor(context_window=window_for(history, 0.85), plugins={"state": "state-files"})
    session = Session(compactor, "doomed")
    session.extend(history)
    session.view()
    keep = Session(compactor, "kept")
    keep.extend(history)
    keep.view()
    paths = [
        tmp_path / "tool_results" / "doomed",
        tmp_path / "records" / "doomed.jsonl",
        tmp_path / "state" / "doomed.json",
        tmp_path / "state" / "doomed.lock",
    ]
    assert all(p.exists() for p in paths)
    assert session.delete() == []
    assert not any(p.exists() for p in paths)
    assert session.history == [] and not session.records
    assert compactor.state("doomed") == SessionState()
    assert (tmp_path / "records" / "kept.jsonl").exists() and (tmp_path / "state" / "kept.json").exists()
    assert (tmp_path / "tool_results" / "kept").is_dir()


# --- state outside the process --------------------------------------------------------------------------


def test_a_second_process_continues_from_the_saved_state(make_compactor, history):
    summarizer = RecordingSummarizer()
    window = window_for(history, 0.85)
    first = make_compactor(context_window=window, plugins={"state": "state-files"}, extra_plugins=[("r", summarizer)])
    view, record = first.compact_with_record(history)
    assert record.tier is CompactionTier.FULL
    history += tool_turn("next", 500)
    second = make_compactor(context_window=window, plugins={"state": "state-files"}, extra_plugins=[("r", summarizer)])
    view2, record2 = second.compact_with_record(history)
    assert record2.tier is CompactionTier.NONE
    assert summarizer.calls == 1
    assert compaction_message(view2) == compaction_message(view)  # rebuilt from the saved state
    assert view2[2:] == history[-(6 + 2) :]
    assert second.state().covered == first.state().covered == 15


def test_a_state_that_fingerprints_its_last_covered_message_alone_is_still_read(make_compactor, history):
    """States saved before the fingerprint covered every covered message carry the last one's."""
    window = window_for(history, 0.85)
    first = make_compactor(context_window=window, plugins={"state": "state-files"})
    view = first.compact(history)
    state = first.state()
    last_covered = message_from_dict(history[state.covered])  # history[0] is the system message
    older = attrs.evolve(state, covered_fingerprint=fingerprint(last_covered), version=state.version + 1)
    assert first.hooks.save_state(first.session_id, older)
    second = make_compactor(context_window=window, plugins={"state": "state-files"})
    again, record = second.compact_with_record(history)
    assert record.errors == () and record.tier is CompactionTier.NONE
    assert compaction_message(again) == compaction_message(view)


def test_a_different_history_under_the_same_session_id_starts_over(make_compactor, history):
    compactor = make_compactor(context_window=window_for(history, 0.85))
    compactor.compact_with_record(history)
    other = build_history([100] * 12, request="An unrelated task.")  # longer than what the state covers
    view, record = compactor.compact_with_record(other)
    assert view == other
    assert record.errors == (
        "session state did not match this history (another history under the same session id?); started over",
    )
    assert compactor.state().covered == 0


@pytest.mark.parametrize("where", [1, 4], ids=["the request", "a tool result"])
def test_a_message_replaced_in_the_middle_is_read_again(make_compactor, history, where):
    """Same length, same last message, one earlier message replaced (a user correcting their
    request, a framework replacing a message by its id): the view carries the new text, as a
    compactor that never saw the old history gives it."""
    compactor = make_compactor(context_window=window_for(history, 0.5))
    assert compactor.compact_with_record(history)[1].tier is CompactionTier.NONE
    edited = list(history)
    edited[where] = {**history[where], "content": "Replaced: do the other thing instead."}
    view = compactor.compact(edited)
    assert view == make_compactor(context_window=window_for(history, 0.5)).compact(edited)
    assert view[where]["content"] == "Replaced: do the other thing instead."


def test_equal_messages_passed_as_new_objects_continue_the_session(make_compactor, history):
    """A caller that rebuilds its dicts every turn (a history read back from a database, a
    framework that converts its own messages) continues the session: same views, the same cache."""
    compactor = make_compactor(context_window=window_for(history, 0.5))
    first = compactor.compact(history)
    cache = compactor._memory.caches.get(compactor.session_id)
    rebuilt = copy.deepcopy(history)
    again = compactor.compact(tuple(rebuilt))
    assert again == first and compactor._memory.caches.get(compactor.session_id) is cache
    assert all(a is b for a, b in zip(again, rebuilt, strict=True))  # this turn's objects, not the first's
    longer = copy.deepcopy(history) + tool_turn("next", 100)
    assert compactor.compact(longer) == history + tool_turn("next", 100)
    assert compactor._memory.caches.get(compactor.session_id) is cache


def test_a_history_of_any_sequence_is_read_as_a_list_is(make_compactor, history):
    """A history kept in a ``deque`` (a sequence that takes no slice) is compacted as the same
    list is, turn after turn; it used to fail with "sequence index must be integer"."""
    window = window_for(history, 0.85)
    compactor, reference = make_compactor(context_window=window), make_compactor(context_window=window)
    for turn in (history, history + tool_turn("next", 100)):
        view, record = compactor.compact_with_record(collections.deque(turn))
        expected, expected_record = reference.compact_with_record(list(turn))
        assert view == expected and record.tier is expected_record.tier


def test_a_rewound_conversation_that_goes_on_starts_over_instead_of_paying_each_turn(make_compactor):
    """The user rewinds to before what the summary covers and goes on from there. The first turn
    may be an earlier one sent again, and is served stale; the next, longer and still short, is a
    conversation going on: the state starts over from it, so the turns after it build on a saved
    state instead of offloading and summarizing again from scratch each time."""
    history = build_history([3000] * 30)
    compactor = make_compactor("classic", context_window=window_for(history, 0.85))
    assert compactor.compact_with_record(history)[1].tier is CompactionTier.FULL
    covered = compactor.state().covered
    rewound = history[:12] + [{"role": "user", "content": "Scrap that: fix tests/test_lexer.py instead."}]
    records = []
    for i in range(10):
        rewound += tool_turn(f"r{i}", 9000)
        view, record = compactor.compact_with_record(rewound)
        assert problems(view) == []
        records.append(record)
    assert len(rewound) < covered  # every turn shorter than what the first summary covers
    assert "an earlier turn sent again?" in records[0].errors[0]
    assert records[1].errors == ("session state covers messages this history went on without (rewound); started over",)
    assert all(r.errors == () for r in records[2:]) and compactor.state().offloaded
    # before, each turn was served stale: from the sixth on, a summary every turn
    assert sum(r.summarizer_calls for r in records) <= 1


def test_an_earlier_turn_sent_again_leaves_the_newer_state(make_compactor, history):
    """A queue delivers an early turn again after later ones were served: that turn is served
    from its history, and the state the later turns saved stays for the turns after it."""
    window = window_for(history, 0.85)
    compactor = make_compactor(context_window=window)
    compactor.compact(history[:6])
    assert compactor.compact_with_record(history)[1].tier is CompactionTier.FULL
    state = compactor.state()
    stale, record = compactor.compact_with_record(history[:6])
    assert stale == history[:6]
    assert record.errors == (
        "session state covers more messages than this history has (an earlier turn sent again?); "
        "served from the history, nothing saved",
    )
    assert compactor.state() == state
    # the same when the turn sent again compacts: its summary is not saved over the newer state
    small = make_compactor(context_window=window_for(history[: state.covered + 1], 0.85))
    small.compact(history[: state.covered + 1])
    small.hooks.save_state(small.session_id, attrs.evolve(state, version=small.state().version + 1))
    newer = small.state()
    stale, record = small.compact_with_record(history[: state.covered - 1])
    assert record.tier is not CompactionTier.NONE and problems(stale) == []
    assert small.state() == newer
    untouched = make_compactor(context_window=window)
    untouched.compact(history)
    longer = history + tool_turn("next", 500)
    assert compactor.compact(longer) == untouched.compact(longer)


def test_an_earlier_turn_sent_again_whose_last_result_is_not_settled_leaves_the_newer_state(make_compactor, history):
    """An earlier turn sent again with as many messages as the summary covers, the last an
    assistant message and its result (not settled yet: a summary covers none of them) is an
    earlier turn all the same: it is served stale, the newer state is not started over."""
    compactor = make_compactor(context_window=window_for(history, 0.85))
    assert compactor.compact_with_record(history)[1].tier is CompactionTier.FULL
    state = compactor.state()
    earlier = history[: 1 + state.covered]  # the system message, then as many as the summary covers
    assert earlier[-1]["role"] == "tool"
    view, record = compactor.compact_with_record(earlier)
    assert view == earlier and record.errors[0].startswith("session state covers more messages than this history")
    assert compactor.state() == state


def test_a_history_edited_in_a_session_of_unanswered_calls_starts_over_at_once(make_compactor):
    """The summary counts the results the repair adds for unanswered calls: a history of as many
    messages, one of them edited, is another history (started over and saved), not an earlier
    turn served stale (its summary paid, then paid again at the next turn)."""
    history = build_history([], request="Fix the parser.")
    for i in range(12):  # two calls a step, one answered
        calls = [tool_call(f"a{i}", f"cat a{i}"), tool_call(f"b{i}", f"cat b{i}")]
        history += [
            {"role": "assistant", "content": f"Step {i}.", "tool_calls": calls},
            {"role": "tool", "tool_call_id": f"a{i}", "content": filler(3000, f"a{i}")},
        ]
    history.append({"role": "user", "content": "Go on."})
    compactor = make_compactor(context_window=window_for(history, 0.85))
    assert compactor.compact_with_record(history)[1].tier is CompactionTier.FULL
    assert compactor.state().covered > len(history) - 1  # more than the history's messages
    edited = copy.deepcopy(history)
    edited[1]["content"] = "Fix the lexer instead."
    view, record = compactor.compact_with_record(edited)
    assert record.errors == (
        "session state did not match this history (another history under the same session id?); started over",
    )
    assert "Fix the lexer instead." in str(view) and problems(view) == []
    _, record = compactor.compact_with_record(edited + [{"role": "assistant", "content": "On it."}])
    assert record.errors == () and record.summarizer_calls == 0


def test_another_history_that_ends_like_the_first_is_not_given_its_summary(make_compactor):
    """The state is recognised by every message it covers, not by the last one alone."""
    first = build_history([5000] * 8, request="Drop every table of the production database.")
    compactor = make_compactor(context_window=window_for(first, 0.85))
    compactor.compact(first)
    assert compactor.state().covered
    other = build_history([5000] * 8, request="Write a haiku about autumn leaves.")
    view, record = compactor.compact_with_record(other)
    assert "production database" not in str(view) and "autumn leaves" in str(view)
    assert record.errors[0].startswith("session state did not match this history")


@pytest.mark.parametrize("config", ["default", "classic"])
def test_a_request_edited_inside_is_not_given_the_summary_of_the_old_one(make_compactor, config):
    """The user edits one word in the middle of a long request: same length, same ends. The state
    that covers the old request must not be served with it (the prefix fingerprint reads only the
    ends of each message): the view states the new request alone."""
    request = "Please deploy the service. " + "Context line. " * 60 + "Target: deploy to staging now. "
    request += "More context. " * 60
    history = build_history([3000] * 12, request=request)
    compactor = make_compactor(config, context_window=window_for(history, 0.85))
    assert compactor.compact_with_record(history)[1].tier is CompactionTier.FULL
    edited = copy.deepcopy(history)
    edited[1]["content"] = request.replace("deploy to staging", "deploy to product")
    view, record = compactor.compact_with_record(edited)
    assert "deploy to staging" not in str(view) and "deploy to product" in str(view)
    assert record.errors[0].startswith("session state did not match this history")
    assert problems(view) == []


@pytest.mark.parametrize(
    "ratio, tier",
    [(0.75, CompactionTier.SOFT), (0.85, CompactionTier.FULL), (0.97, CompactionTier.EMERGENCY)],
    ids=["soft", "full", "emergency"],
)
def test_a_developer_message_first_is_kept_as_the_system_message(make_compactor, ratio, tier):
    """``developer`` is the system role of OpenAI's newer models: first in every view, whole."""
    history = build_history([5000] * 10, system=None)
    history.insert(0, {"role": "developer", "content": "You are a careful coding agent. Never push."})
    view, record = make_compactor(context_window=window_for(history, ratio)).compact_with_record(history)
    assert record.tier is tier
    assert view[0] is history[0] and [m["role"] for m in view].count("developer") == 1
    assert problems(view) == []


@pytest.mark.parametrize("ratio", [0.75, 0.85, 0.97], ids=["soft", "full", "emergency"])
def test_a_second_system_message_is_not_taken_for_the_request(make_compactor, ratio):
    """A harness's second system message (tools, working directory) before the user's request: the
    repair makes it a user message, and the request is still the user's, pinned whole."""
    request = "Migrate the billing service to gRPC." + " Keep the retry semantics and the public API." * 12
    history = build_history([5000] * 10, request=request)
    history.insert(1, {"role": "system", "content": "Tools available: bash. Working directory: /repo."})
    compactor = make_compactor("default", context_window=window_for(history, ratio))
    view, record = compactor.compact_with_record(history)
    assert record.tier >= CompactionTier.SOFT and problems(view) == []
    assert {"role": "user", "content": request} in view
    if compactor.state().covered:  # pinned right after the system message
        assert view[1] == {"role": "user", "content": request}


def test_a_request_is_pinned_with_its_name_and_its_other_keys(make_compactor):
    history = build_history([5000] * 10)
    history[1] = {**history[1], "name": "alice", "cache_control": {"type": "ephemeral"}}
    view, record = make_compactor("default", context_window=window_for(history, 0.85)).compact_with_record(history)
    assert record.tier is CompactionTier.FULL and view[1] == history[1]


def test_a_request_with_an_image_is_pinned_with_its_image(make_compactor):
    parts = [
        {"type": "text", "text": "Make the page look like this mockup."},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    history = build_history([5000] * 10)
    history[1] = {"role": "user", "content": parts}
    view, record = make_compactor("default", context_window=window_for(history, 0.85)).compact_with_record(history)
    assert record.tier is CompactionTier.FULL
    assert view[1] == {"role": "user", "content": parts}


def test_a_request_holding_a_credential_is_pinned_masked_and_not_repeated(make_compactor):
    token = "ghp_" + "A1b2C3d4E5" * 4
    history = build_history([5000] * 10, request=f"Push the fix to the fork with the token {token}")
    view = make_compactor("default", context_window=window_for(history, 0.85)).compact(history)
    assert view[1]["content"] == "Push the fix to the fork with the token [REDACTED]"
    assert "Push the fix" not in compaction_message(view)["content"] and token not in str(view[1:])


def test_histories_are_not_modified_by_any_interface(make_compactor, history):
    before = copy.deepcopy(history)
    compactor = make_compactor(context_window=window_for(history, 0.85))
    compactor.compact(history)
    compactor.compact_with_record(history)
    compactor.compact_force(history)
    asyncio.run(compactor.acompact(history))
    asyncio.run(compactor.acompact_force(history))
    assert history == before


def test_a_state_plugin_lets_workers_share_a_session(make_compactor, history):
    class SharedState:
        """What a Redis- or database-backed state store does, in a dict."""

        def __init__(self):
            self.states, self.saves = {}, 0

        @hookimpl
        def load_state(self, session_id):
            return self.states.get(session_id)

        @hookimpl
        def save_state(self, session_id, state):
            self.saves += 1
            self.states[session_id] = state
            return True

        @hookimpl
        def on_delete_session(self, session_id):
            self.states.pop(session_id, None)

    shared, summarizer = SharedState(), RecordingSummarizer()
    window = window_for(history, 0.85)
    worker_a = make_compactor(context_window=window, extra_plugins=[("shared", shared), ("r", summarizer)])
    worker_b = make_compactor(context_window=window, extra_plugins=[("shared", shared), ("r", summarizer)])
    view_a = worker_a.compact(history)
    assert shared.saves == 1 and shared.states["test-session"].covered == 15
    history += tool_turn("next", 300)
    view_b, record_b = worker_b.compact_with_record(history)
    assert record_b.tier is CompactionTier.NONE and summarizer.calls == 1
    assert view_b[: len(view_a)] == view_a
    worker_b.delete_session()
    assert "test-session" not in shared.states


def test_an_empty_session_id_is_refused_by_every_method_never_taken_for_the_default(make_compactor):
    compactor = make_compactor()
    compactor.compact_force(build_history([5000] * 4))  # the default session has a state and records
    kept = (compactor.state(), compactor.records())
    big = {"role": "tool", "tool_call_id": "c1", "content": "z" * 20_000}
    calls = [
        lambda: compactor.compact(build_history([100]), ""),
        lambda: compactor.offload_tool_result(big, ""),
        lambda: compactor.state(""),
        lambda: compactor.records(""),
        lambda: compactor.delete_session(""),
        lambda: Session(compactor, ""),
    ]
    for call in calls:
        with pytest.raises(CompactorError, match="session_id must be a non-empty string"):
            call()
    assert (compactor.state(), compactor.records()) == kept and kept[1]


# --- what a compactor keeps in memory --------------------------------------------------------------


def test_a_compactor_keeps_the_caches_of_its_most_recent_sessions_alone(make_compactor, history):
    window = window_for(history, 0.85)
    bounded = make_compactor(context_window=window, cached_sessions=2)
    unbounded = make_compactor(context_window=window)
    for sid in ("a", "b", "c"):
        assert bounded.compact(history, sid) == unbounded.compact(history, sid)
        assert bounded.observe_usage(sid, 2 * window) is not None
    assert len(bounded._memory.caches) == 2 and bounded._memory.caches.get("a") is None
    assert bounded._usage.correction("a").none and not bounded._usage.correction("c").none  # dropped with its cache
    longer = history + tool_turn("next", 300)
    for sid in ("a", "b", "c"):  # "a" reads its history again, and goes on from its stored state
        view, record = bounded.compact_with_record(longer, sid)
        assert view == unbounded.compact(longer, sid) and record.errors == ()


def test_a_long_running_compactor_holds_what_its_recent_sessions_need_alone(make_compactor):
    import gc
    import tracemalloc

    compactor = make_compactor(cached_sessions=4)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for n in range(40):  # each caller drops its history once the turn is served
            compactor.compact(build_history([20_000] * 10), f"session-{n}")
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert kept < 8 * 200_000  # four sessions of 200 kB and some; all forty would be 8 MB
    assert len(compactor._memory.caches) == 4 and compactor._memory._locks == {}


def test_turns_of_one_session_wait_for_each_other_and_leave_no_lock_behind(make_compactor, history):
    import threading

    order = []

    class Slow:
        @hookimpl
        def summarize(self, request):
            order.append("start")
            threading.Event().wait(0.05)
            order.append("end")
            return None  # the offline summarizer answers

    def sync_turn(session):
        compactor.compact(history, session)

    def async_turn(session):  # each in its own event loop
        asyncio.run(compactor.acompact(history, session))

    for turns in ([sync_turn] * 3, [sync_turn, async_turn], [async_turn, async_turn]):
        compactor = make_compactor(context_window=window_for(history, 0.85), extra_plugins=[("slow", Slow())])
        order.clear()
        threads = [threading.Thread(target=turn, args=("s",)) for turn in turns]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert order == ["start", "end"]  # one summary: the other turns waited and found it
        assert compactor._memory._locks == {}

    async def three_at_once():
        await asyncio.gather(*(compactor.acompact(history, f"t{n % 2}") for n in range(3)))
        return dict(compactor._memory._alocks[asyncio.get_running_loop()])

    assert asyncio.run(three_at_once()) == {}


# --- the state stores: compare-and-set ------------------------------------------------------------


@pytest.fixture(params=["state-memory", "state-files"])
def state_store(request, tmp_path):
    from progressive_compactor import CompactorConfig
    from progressive_compactor.plugin import PluginContext
    from progressive_compactor.plugins.state_files import FileState
    from progressive_compactor.plugins.state_memory import MemoryState

    if request.param == "state-memory":
        return MemoryState()
    return FileState(context=PluginContext(CompactorConfig(data_dir=str(tmp_path))))


def test_save_state_is_compare_and_set(state_store):
    assert state_store.load_state("s") is None
    assert state_store.save_state("s", SessionState(version=2)) is False  # no stored state counts as version 0
    assert state_store.save_state("s", SessionState(summary="one", version=1)) is True
    assert state_store.save_state("s", SessionState(summary="lost race", version=1)) is False  # another saved v1
    assert state_store.save_state("s", SessionState(summary="skips one", version=3)) is False
    assert state_store.load_state("s") == SessionState(summary="one", version=1)
    assert state_store.save_state("s", SessionState(summary="two", version=2)) is True
    assert state_store.load_state("s") == SessionState(summary="two", version=2)
    assert state_store.load_state("other") is None
    (info,) = state_store.list_sessions()
    assert info.session_id == "s"
    state_store.on_delete_session("s")
    assert state_store.load_state("s") is None and state_store.list_sessions() == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_state_store_forked_while_a_thread_holds_its_lock_saves_and_loads(state_store):
    """Forked while another thread saves or reads a state (holding the store's lock for an
    instant): the child's saves and loads do not wait for that thread, which does not run there."""
    lock = state_store._read._lock if hasattr(state_store, "_read") else state_store._lock

    def child_turn() -> list[object]:
        saved = state_store.save_state("s", SessionState(summary="child", version=1))
        return [saved, state_store.load_state("s").summary]

    assert forked_while_held(lock, child_turn) == [True, "child"]


def test_state_files_names_the_session_and_keeps_a_lock_per_session(tmp_path):
    import json
    import os
    import stat

    from progressive_compactor import CompactorConfig
    from progressive_compactor.plugin import PluginContext
    from progressive_compactor.plugins.state_files import FileState

    context = PluginContext(CompactorConfig(data_dir=str(tmp_path)))
    store = FileState(context=context)
    sid = "team/ticket 9"  # not a plain file name: the file is named by a hash of it
    assert store.save_state(sid, SessionState(summary="x", covered=3, version=1))
    path = store.path_for(sid)
    assert path.parent == tmp_path / "state" and path.name.startswith("_")
    data = json.loads(path.read_text("utf-8"))
    assert data["session_id"] == sid and data["summary"] == "x" and data["version"] == 1
    assert path.with_suffix(".lock").exists()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    (info,) = store.list_sessions()
    assert (info.session_id, info.plugin, info.where) == (sid, "state-files", str(path))
    # another process reads what this one saved, and saves over it only from that version
    other = FileState(context=context)
    assert other.load_state(sid) == SessionState(summary="x", covered=3, version=1)
    assert other.save_state(sid, SessionState(summary="y", covered=5, version=2))
    assert store.save_state(sid, SessionState(summary="stale", covered=4, version=2)) is False
    assert store.load_state(sid).summary == "y"


def test_a_save_compares_with_the_stored_version_even_when_the_file_looks_unchanged(tmp_path):
    """A file's inode, size and modification time are the same after other saves when the file
    system reuses the inode and its clock is coarse (one tick per 1 to 10 ms, or per second on
    some shared folders): the compare-and-set must not take the version read before for the
    stored one, or it saves over a newer state."""
    import os

    from progressive_compactor import CompactorConfig
    from progressive_compactor.plugin import PluginContext
    from progressive_compactor.plugins.state_files import FileState

    context = PluginContext(CompactorConfig(data_dir=str(tmp_path)))
    worker, other = FileState(context=context), FileState(context=context)
    assert worker.save_state("s", SessionState(summary="v1", version=1))
    assert worker.load_state("s").version == 1
    path = worker.path_for("s")
    before = os.stat(path)
    for version in range(2, 20):  # other workers save on, until the file system hands the inode back
        assert other.save_state("s", SessionState(summary=f"v{version % 10}", version=version))
        if os.stat(path).st_ino == before.st_ino:
            break
    else:
        pytest.skip("this file system does not reuse inodes at once")
    assert os.stat(path).st_size == before.st_size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # all in one tick of a coarse clock
    assert worker.save_state("s", SessionState(summary="stale", version=2)) is False
    assert other.load_state("s").version == version


def test_state_files_keeps_the_parsed_states_of_a_bounded_number_of_sessions(tmp_path, monkeypatch):
    """A long-running worker serves session after session: what it keeps to skip parsing is
    bounded, as the database state stores' is, not one parsed state per session ever served."""
    from progressive_compactor import CompactorConfig
    from progressive_compactor.plugin import PluginContext
    from progressive_compactor.plugins import state_files

    monkeypatch.setattr(state_files, "CACHED_STATES", 3, raising=False)
    store = state_files.FileState(context=PluginContext(CompactorConfig(data_dir=str(tmp_path))))
    for n in range(10):
        assert store.save_state(f"s{n}", SessionState(summary=f"summary {n}", version=1))
        assert store.load_state(f"s{n}").summary == f"summary {n}"
    assert len(store._read) == 3
    assert [store.load_state(f"s{n}").summary for n in range(10)] == [f"summary {n}" for n in range(10)]
    assert len(store._read) == 3


def test_a_reader_sets_aside_only_the_unreadable_file_it_read_never_one_saved_since(tmp_path, monkeypatch):
    """A worker reads an unreadable state file; while it parses, another worker (setting the
    file aside itself) saves a good state in its place. The first must not move that one aside."""
    from progressive_compactor import CompactorConfig
    from progressive_compactor.plugin import PluginContext
    from progressive_compactor.plugins import state_files

    context = PluginContext(CompactorConfig(data_dir=str(tmp_path)))
    reader, other = state_files.FileState(context=context), state_files.FileState(context=context)
    (tmp_path / "state").mkdir()
    reader.path_for("s").write_text('{"summary": "tor', "utf-8")
    real = state_files.state_from_json
    saved: list[bool] = []

    def parse(text):
        if not saved:  # the other worker saves while the reader parses what it read
            saved.append(False)
            saved[0] = other.save_state("s", SessionState(summary="good", version=1))
        return real(text)

    monkeypatch.setattr(state_files, "state_from_json", parse)
    assert reader.load_state("s") == SessionState(summary="good", version=1)  # what is there now
    assert saved == [True]
    monkeypatch.setattr(state_files, "state_from_json", real)
    assert state_files.FileState(context=context).load_state("s") == SessionState(summary="good", version=1)


def _hold_lock(path, ready, release) -> None:
    """Another worker in the middle of a save: it holds the session's lock until ``release``."""
    import fcntl
    import os

    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    ready.set()
    release.wait(30)
    os.close(fd)


@pytest.mark.skipif(sys.platform == "win32", reason="no advisory locks on Windows")
def test_a_session_deleted_while_a_worker_saves_never_lets_another_save_at_the_same_time(tmp_path):
    """Deleting a session took its lock file away under the worker holding it: the next worker
    made a new lock file, locked it at once and saved alongside the first."""
    import multiprocessing
    import threading
    import time

    from progressive_compactor import CompactorConfig
    from progressive_compactor.plugin import PluginContext
    from progressive_compactor.plugins.state_files import FileState

    context = PluginContext(CompactorConfig(data_dir=str(tmp_path)))
    assert FileState(context=context).save_state("s", SessionState(summary="one", version=1))
    mp = multiprocessing.get_context("fork")
    ready, release = mp.Event(), mp.Event()
    holder = mp.Process(target=_hold_lock, args=(tmp_path / "state" / "s.lock", ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        done: dict[str, object] = {}
        deleter = threading.Thread(
            target=lambda: done.update(deleted=FileState(context=context).on_delete_session("s"))
        )
        deleter.start()
        time.sleep(0.3)
        saver = threading.Thread(
            target=lambda: done.update(saved=FileState(context=context).save_state("s", SessionState(version=1)))
        )
        saver.start()
        time.sleep(0.5)
        assert "saved" not in done  # the other worker still holds the session's lock
    finally:
        release.set()
        holder.join(30)
    deleter.join(30)
    saver.join(30)
    assert set(done) == {"deleted", "saved"}


@pytest.mark.parametrize(
    "text", ['{"summary": "tor', "not json at all", '{"covered": "many"}'], ids=["torn", "garbage", "wrong-type"]
)
def test_an_unreadable_state_file_is_moved_aside_and_the_session_starts_fresh(tmp_path, caplog, text):
    import logging

    from progressive_compactor import CompactorConfig
    from progressive_compactor.plugin import PluginContext
    from progressive_compactor.plugins.state_files import FileState

    store = FileState(context=PluginContext(CompactorConfig(data_dir=str(tmp_path))))
    path = store.path_for("s")
    path.parent.mkdir(parents=True)
    path.write_text(text, "utf-8")
    with caplog.at_level(logging.WARNING, logger="progressive_compactor"):
        assert store.load_state("s") is None
    assert not path.exists()
    (aside,) = path.parent.glob("s.json.corrupt-*")
    assert aside.read_text("utf-8") == text
    assert "unreadable" in caplog.text and "starting over" in caplog.text
    assert store.save_state("s", SessionState(summary="fresh", version=1))  # a fresh start saves as version 1


def test_a_compactor_starts_over_from_a_corrupt_state_file(make_compactor, history, tmp_path):
    summarizer = RecordingSummarizer()
    window = window_for(history, 0.85)
    first = make_compactor(context_window=window, plugins={"state": "state-files"}, extra_plugins=[("r", summarizer)])
    assert first.compact_with_record(history)[1].tier is CompactionTier.FULL
    (tmp_path / "state" / "test-session.json").write_text("{", "utf-8")
    second = make_compactor(context_window=window, plugins={"state": "state-files"}, extra_plugins=[("r", summarizer)])
    view, record = second.compact_with_record(history)
    assert record.tier is CompactionTier.FULL and summarizer.calls == 2  # summarized again from the history
    assert problems(view) == []
    assert second.state().version == 1 and second.state().covered == 15
    assert list((tmp_path / "state").glob("test-session.json.corrupt-*"))


def test_a_worker_that_loses_the_compare_and_set_starts_over_from_the_stored_state(make_compactor, history):
    """Workers A and B compact the same turn; A saves first. B's save fails (compare-and-set), so
    B starts the turn over from A's state: both send the same view, B's record counts the summary
    it paid for, and nothing of B's summary is stored or sent."""
    from progressive_compactor.plugins.summarize_extractive import ExtractiveSummarizer

    window = window_for(history, 0.85)
    worker_a = make_compactor(context_window=window, plugins={"state": "state-files"})

    class FinishesTheOtherWorkerFirst:
        def __init__(self):
            self.raced = False

        @hookimpl
        def summarize(self, request):
            if not self.raced:  # while B waits for its summary, A completes the same turn
                self.raced = True
                assert worker_a.compact_with_record(history)[1].tier is CompactionTier.FULL
            return RecordingSummarizer(
                text=lambda r: ExtractiveSummarizer().summarize(r).text + "\nB-SUMMARY"
            ).summarize(request)

    worker_b = make_compactor(
        context_window=window, plugins={"state": "state-files"}, extra_plugins=[("race", FinishesTheOtherWorkerFirst())]
    )
    view_b, lost = worker_b.compact_with_record(history)
    assert lost.tier is CompactionTier.NONE and lost.summarizer_calls == 1 and lost.errors == ()
    stored = worker_b.state()
    assert stored.version == 1 and "B-SUMMARY" not in stored.summary
    assert view_b == worker_a.compact(history) and "B-SUMMARY" not in compaction_message(view_b)["content"]
    history += tool_turn("next", 300)
    view_b, record_b = worker_b.compact_with_record(history)
    view_a, _ = worker_a.compact_with_record(history)
    assert record_b.tier is CompactionTier.NONE and record_b.errors == ()
    assert view_b == view_a and "B-SUMMARY" not in compaction_message(view_b)["content"]


def test_gc_removes_the_files_a_deleted_session_left_that_no_listing_shows(tmp_path):
    """A lock file made again by a worker that waited on it while the session was deleted, and
    a state set aside as unreadable by a session that never saved again: neither is listed, so
    only the leftovers sweep finds them, once they are old enough; a live session's stay."""
    import os
    import time

    from progressive_compactor import CompactorConfig
    from progressive_compactor.plugin import PluginContext
    from progressive_compactor.plugins.state_files import FileState

    store = FileState(context=PluginContext(CompactorConfig(data_dir=str(tmp_path))))
    for sid in ("live", "gone", "fresh"):
        assert store.save_state(sid, SessionState(summary=sid, version=1))
    folder = store.path_for("live").parent
    store.path_for("live").with_name("live.json.corrupt-1").write_text("{")  # beside a state: the session's
    store.on_delete_session("gone")
    store.path_for("gone").with_name("gone.lock").touch()  # made again by a waiting worker
    store.path_for("gone").with_name("gone.json.corrupt-7").write_text("{")
    store.on_delete_session("fresh")
    store.path_for("fresh").with_name("fresh.lock").touch()  # not old enough yet
    (folder / "notes.lock").mkdir()  # not a file this plugin makes
    old = time.time() - 7200
    for path in folder.iterdir():
        if not path.name.startswith("fresh"):
            os.utime(path, (old, old))
    assert store.remove_leftovers(3600, dry_run=True) == [
        str(folder / "gone.json.corrupt-7"),
        str(folder / "gone.lock"),
    ]
    assert (folder / "gone.lock").exists()
    assert store.remove_leftovers(3600, dry_run=False) == [
        str(folder / "gone.json.corrupt-7"),
        str(folder / "gone.lock"),
    ]
    assert sorted(p.name for p in folder.iterdir()) == [
        "fresh.lock",
        "live.json",
        "live.json.corrupt-1",
        "live.lock",
        "notes.lock",
    ]
    assert store.load_state("live") == SessionState(summary="live", version=1)
