"""Property-based tests: over generated histories, compacted turn by turn at random context
windows, every view that leaves the compactor is valid for the OpenAI chat API and fits the token
target of its tier, the caller's history is never modified, and offloaded files hold the original.

Token targets the core guarantees (tokens as ``tokens-chars`` counts them):

* None: the view is the history, below ``warn`` of the window (that is why it is None);
* Warn: offloads only, so still below ``soft``;
* Soft and Full: below ``soft`` afterwards, or the loop guard escalates;
* Emergency: at most ``fallback_budget`` of the window, or the pinned messages and the newest
  exchange when that alone is more (never more than the window).

Whatever a third-party policy answers (None at twice the window, say), every view still fits
the window: the core escalates.

The wider histories (keys of a message's own, ``developer`` and ``function`` roles, parts of
several kinds, Anthropic blocks, results out of order) run on both bundled configs with usage
reports, rewinds, edits, two sessions and the async API; there a corrected count must stay
within the window, the request stay in the view, and no large result that left it be lost.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from progressive_compactor import CompactionTier, hookimpl
from progressive_compactor.messages import from_anthropic, message_from_dict, text_of
from progressive_compactor.plugins.fallback_token_budget import MARKER
from progressive_compactor.testing import (
    RecordingSummarizer,
    estimate,
    failing_summarizer,
    fallback_bound,
    filler,
    make_compactor,
    problems,
    tool_call,
)
from progressive_compactor.usage import corrected

SOFT, WARN = 0.70, 0.60
EXAMPLES = int(os.environ.get("COMPACTOR_FUZZ_EXAMPLES", "0")) or None
"""More examples for a long fuzz run (``COMPACTOR_FUZZ_EXAMPLES=5000``); CI runs the defaults."""
TURNS: list[int] = []
DATA = Path(__file__).parent / "data"

sizes = st.one_of(
    st.integers(0, 400),
    st.integers(400, 4500),
    st.integers(4500, 12_000),
    st.integers(12_000, 60_000),  # the occasional huge tool result
)

events = st.one_of(
    st.tuples(st.just("tools-reused-ids"), st.lists(sizes, min_size=1, max_size=2)),  # call_0 in every reply
    st.tuples(st.just("tools-duplicate-ids"), st.lists(sizes, min_size=2, max_size=3)),  # one id twice in a message
    st.tuples(st.just("surrogates"), sizes),  # lone surrogates: valid JSON, no valid UTF-8
    st.tuples(st.just("huge-arguments"), st.integers(5_000, 80_000)),
    st.tuples(st.just("user"), st.integers(1, 3000)),
    st.tuples(st.just("assistant"), st.integers(0, 2000)),
    st.tuples(st.just("tools"), st.lists(sizes, min_size=1, max_size=3)),
    st.tuples(st.just("tools-missing-result"), st.lists(sizes, min_size=1, max_size=3)),
    st.tuples(st.just("orphan-result"), sizes),
    st.tuples(st.just("user-parts"), st.integers(0, 3000)),  # text and an image, as a list of parts
)


@st.composite
def histories(draw):
    history = []
    if draw(st.booleans()):
        history.append({"role": "system", "content": filler(draw(st.integers(10, 3000)), "system")})
    history.append({"role": "user", "content": "Fix the bug. " + filler(draw(st.integers(0, 2000)), "request")})
    for n, (kind, arg) in enumerate(draw(st.lists(events, min_size=1, max_size=30))):
        if kind == "user":
            history.append({"role": "user", "content": filler(arg, f"u{n}")})
        elif kind == "assistant":
            history.append({"role": "assistant", "content": filler(arg, f"a{n}")})
        elif kind == "surrogates":
            history.append({"role": "assistant", "content": "Reading.", "tool_calls": [tool_call(f"s{n}", "cat odd")]})
            history.append(
                {"role": "tool", "tool_call_id": f"s{n}", "content": "\ud800 " + filler(arg, f"s{n}") + " \udfff"}
            )
        elif kind == "huge-arguments":
            call = tool_call(f"h{n}", "echo " + filler(arg, f"h{n}"))
            history.append({"role": "assistant", "content": "Writing.", "tool_calls": [call]})
            history.append({"role": "tool", "tool_call_id": f"h{n}", "content": "ok"})
        elif kind.startswith("tools"):
            ids = [f"c{n}_{k}" for k in range(len(arg))]
            if kind == "tools-reused-ids":
                ids = [f"call_{k}" for k in range(len(arg))]
            elif kind == "tools-duplicate-ids":
                ids = [f"dup{n}"] * len(arg)
            history.append(
                {
                    "role": "assistant",
                    "content": None if n % 3 == 0 else f"Running {len(ids)} tools.",
                    "tool_calls": [tool_call(i, f"cat f{i}.py") for i in ids],
                }
            )
            answered = list(zip(ids, arg))
            if kind == "tools-missing-result":
                answered = answered[1:]
            history += [
                {"role": "tool", "tool_call_id": i, "content": filler(size, f"{i}@{n}.{k}")}
                for k, (i, size) in enumerate(answered)
            ]
        elif kind == "user-parts":
            history.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": filler(arg, f"p{n}")},
                        {"type": "image_url", "image_url": {"url": "data:,"}},
                    ],
                }
            )
        else:
            history.append({"role": "tool", "tool_call_id": f"orphan{n}", "content": filler(arg, f"o{n}")})
    return history


def check_view(compactor, history, view, record):
    """Every promise the core makes about one view."""
    window = compactor.config.context_window
    assert problems(view) == [], (record.tier, record.errors)
    if history and history[0]["role"] == "system":
        assert view[0]["role"] == "system"
    tokens = estimate(view)
    assert tokens == record.tokens_after
    if record.tier is CompactionTier.EMERGENCY:
        assert tokens <= fallback_bound(view, compactor), record.errors
    elif record.tier is CompactionTier.NONE:
        assert tokens < WARN * window
    else:
        assert tokens < SOFT * window, (record.tier, record.errors)
    TURNS.append(1)
    check_results(compactor, history, view)


def check_results(compactor, history, view):
    """Each tool result of the view is its own occurrence's, as text or through its handle: with
    reused ids the occurrences of one id are matched in order (summarized ones skipped)."""
    queues: dict[str, list[str]] = {}
    for m in history:
        if m["role"] == "tool":
            queues.setdefault(m["tool_call_id"], []).append(m["content"])
    for m in view:
        if m["role"] != "tool" or m["tool_call_id"] not in queues:
            continue
        text = m["content"]
        if text.startswith("[Tool result offloaded"):
            text = compactor.read_tool_result(text.split("Handle: ")[1].split("]")[0])
        elif MARKER.strip() in text or text.startswith("[no result"):
            continue  # shortened by truncation, or a call that had no result
        queue = queues[m["tool_call_id"]]
        while queue and queue[0] != text:
            queue.pop(0)
        assert queue, f"{m['tool_call_id']}: the view shows a result that is not this occurrence's"
        queue.pop(0)


@settings(
    max_examples=EXAMPLES or 80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    history=histories(),
    window=st.integers(1000, 40_000),
    min_tail=st.integers(0, 8),
    summarizer_fails=st.booleans(),
)
def test_every_view_is_valid_and_fits_its_tier_turn_by_turn(history, window, min_tail, summarizer_fails):
    summarizer = failing_summarizer() if summarizer_fails else RecordingSummarizer()
    with tempfile.TemporaryDirectory() as tmp:
        compactor = make_compactor(
            tmp,
            context_window=window,
            min_tail_messages=min_tail,
            extra_plugins=[("summarizer-under-test", summarizer)],
        )
        before = copy.deepcopy(history)
        cuts = [i for i, m in enumerate(history) if m["role"] == "assistant" and i > 0] + [len(history)]
        for cut in cuts:
            prefix = history[:cut]
            view, record = compactor.compact_with_record(prefix)
            check_view(compactor, prefix, view, record)
        forced = compactor.compact_force(history)
        assert problems(forced) == []
        assert estimate(forced) <= fallback_bound(forced, compactor)
        assert history == before


@settings(
    max_examples=EXAMPLES or 60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(history=histories(), window=st.integers(1000, 40_000))
# Found by long fuzz runs: a summary the loop guard had to reject (larger than the few messages it
# replaced), then a truncation that dropped nothing (it only shortened a long tool call argument),
# so the next call with the same history asked the summarizer again.
@example(**json.loads((DATA / "fuzz_rejected_summary.json").read_text("utf-8")))
@example(**json.loads((DATA / "fuzz_emergency_then_soft.json").read_text("utf-8")))
# A summary the loop guard rejected though the messages were above its floor (a result with lone
# surrogates, an image filling most of a tiny window): it was asked again on every turn.
@example(**json.loads((DATA / "fuzz_rejected_again.json").read_text("utf-8")))
def test_a_whole_history_at_once_is_valid_and_fits(history, window):
    with tempfile.TemporaryDirectory() as tmp:
        compactor = make_compactor(tmp, context_window=window)
        view, record = compactor.compact_with_record(history)
        check_view(compactor, history, view, record)
        again, second = compactor.compact_with_record(history)
        check_view(compactor, history, again, second)
        if record.summarizer_calls or record.tier < CompactionTier.EMERGENCY:
            assert second.summarizer_calls == 0  # incremental, not repeated
        # An Emergency decided outright (at 95 %) asks for no summary; what it shortened beyond
        # its offloads lives in that one view, not in the state, so the same history again may
        # be at Soft and ask for the first summary of these messages: not a repeat.
        if CompactionTier.NONE < record.tier < CompactionTier.EMERGENCY:
            # The same history again gets the same view (the provider's prompt cache keeps
            # working), but for what a Warn offloads: results of the head a Soft left in place.
            assert second.tier < CompactionTier.SOFT
            offloaded = {e.tool_call_id for e in second.offloaded}
            assert len(again) == len(view)
            changed = [(a, b) for a, b in zip(view, again) if a != b]
            assert len(changed) == len(offloaded)
            for before, after in changed:
                assert before["role"] == "tool" and before["tool_call_id"] in offloaded
                assert after["content"].startswith("[Tool result offloaded")


class AnswersInTurn:
    """A third-party policy that answers ``answers`` in turn, whatever the view's size."""

    def __init__(self, answers):
        self.answers, self.calls = answers, 0

    @hookimpl(tryfirst=True)
    def determine_tier(self, ratio, tokens, context_window, turn):
        self.calls += 1
        return self.answers[(self.calls - 1) % len(self.answers)]


@settings(
    max_examples=EXAMPLES or 40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    history=histories(),
    window=st.integers(1000, 40_000),
    answers=st.lists(st.sampled_from(list(CompactionTier)[:-1]), min_size=1, max_size=5),
)
def test_whatever_a_policy_answers_every_view_fits_the_window(history, window, answers):
    """A policy that asks for too little (None at twice the window, a Warn where only a summary
    would do) still gets valid views that fit the window: the core escalates."""
    with tempfile.TemporaryDirectory() as tmp:
        compactor = make_compactor(tmp, context_window=window, extra_plugins=[("lax", AnswersInTurn(answers))])
        cuts = [i for i, m in enumerate(history) if m["role"] == "assistant" and i > 0] + [len(history)]
        for cut in cuts:
            view, record = compactor.compact_with_record(history[:cut])
            assert problems(view) == []
            assert estimate(view) <= window, (record.tier, record.escalations, record.errors)


def teardown_module(module):
    if os.environ.get("COMPACTOR_FUZZ_EXAMPLES"):
        print(f"\nfuzzed turns checked: {len(TURNS)}")


# --- wider histories: keys of their own, other roles, parts, Anthropic blocks, usage reports ---


wide_events = st.one_of(
    events,
    st.tuples(st.just("reasoning"), st.integers(0, 6000)),  # reasoning_content beside the content
    st.tuples(st.just("named"), st.integers(0, 3000)),  # a user with a name, an assistant with a refusal
    st.tuples(st.just("developer"), st.integers(1, 2000)),
    st.tuples(st.just("function"), sizes),  # the legacy function role
    st.tuples(st.just("mixed-parts"), sizes),  # text, image, audio, file parts
    st.tuples(st.just("tools-out-of-order"), st.lists(sizes, min_size=2, max_size=4)),
    st.tuples(st.just("anthropic"), st.lists(sizes, min_size=1, max_size=3)),
    st.tuples(st.just("parts-result"), sizes),  # a tool result as a list of text parts
)


def _anthropic_turn(n, arg):
    thinking = {"type": "thinking", "thinking": filler(300, f"t{n}"), "signature": "sig" * 20}
    uses = [{"type": "tool_use", "id": f"tu{n}_{k}", "name": "bash", "input": {"k": k}} for k in range(len(arg))]
    results = [
        {"type": "tool_result", "tool_use_id": f"tu{n}_{k}", "content": filler(size, f"tu{n}_{k}"), "is_error": k == 1}
        for k, size in enumerate(arg)
    ]
    return from_anthropic(
        [
            {"role": "assistant", "content": [thinking, {"type": "text", "text": "Looking."}, *uses]},
            {"role": "user", "content": results},
        ]
    )


@st.composite
def wide_histories(draw):
    history = []
    first = draw(st.sampled_from([None, "system", "developer"]))
    if first:
        history.append({"role": first, "content": filler(draw(st.integers(10, 3000)), "system")})
    request = "Fix the bug. " + filler(draw(st.integers(0, 2000)), "request")
    if draw(st.booleans()):
        history.append({"role": "user", "content": request})
    else:
        image = {"type": "image_url", "image_url": {"url": "data:,"}}
        history.append({"role": "user", "content": [{"type": "text", "text": request}, image]})
    for n, (kind, arg) in enumerate(draw(st.lists(wide_events, min_size=1, max_size=30))):
        if kind == "reasoning":
            history.append({"role": "assistant", "content": f"Thought {n}.", "reasoning_content": filler(arg, f"r{n}")})
        elif kind == "named":
            history.append({"role": "user", "name": "alice", "content": filler(arg, f"n{n}")})
            history.append({"role": "assistant", "content": None, "refusal": filler(arg // 4, f"no{n}")})
        elif kind == "developer":
            history.append({"role": "developer", "content": filler(arg, f"d{n}")})
        elif kind == "function":
            history.append({"role": "function", "name": "legacy", "content": filler(arg, f"f{n}")})
        elif kind == "mixed-parts":
            history.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": filler(arg, f"m{n}")},
                        {"type": "image_url", "image_url": {"url": "data:,"}},
                        {"type": "input_audio", "input_audio": {"data": "QUJD" * 100, "format": "mp3"}},
                        {"type": "file", "file": {"file_data": "JVBE" * 50, "filename": "a.pdf"}},
                    ],
                }
            )
        elif kind == "tools-out-of-order":
            ids = [f"o{n}_{k}" for k in range(len(arg))]
            history.append(
                {"role": "assistant", "content": None, "tool_calls": [tool_call(i, f"cat {i}") for i in ids]}
            )
            history += [
                {"role": "tool", "tool_call_id": i, "content": filler(size, f"{i}@{n}")}
                for i, size in reversed(list(zip(ids, arg)))
            ]
        elif kind == "anthropic":
            history += _anthropic_turn(n, arg)
        elif kind == "parts-result":
            history.append({"role": "assistant", "content": "Reading.", "tool_calls": [tool_call(f"pr{n}", "cat")]})
            history.append(
                {"role": "tool", "tool_call_id": f"pr{n}", "content": [{"type": "text", "text": filler(arg, f"pr{n}")}]}
            )
        else:
            history += _plain_event(n, kind, arg)
    return history


def _plain_event(n, kind, arg):
    """One event of :func:`histories`, as the messages it adds."""
    out = []
    if kind == "user":
        out.append({"role": "user", "content": filler(arg, f"u{n}")})
    elif kind == "assistant":
        out.append({"role": "assistant", "content": filler(arg, f"a{n}")})
    elif kind.startswith("tools") or kind == "surrogates" or kind == "huge-arguments":
        ids = [f"c{n}_{k}" for k in range(len(arg) if isinstance(arg, list) else 1)]
        sizes_ = arg if isinstance(arg, list) else [10]
        out.append({"role": "assistant", "content": "Running.", "tool_calls": [tool_call(i, f"cat {i}") for i in ids]})
        answered = list(zip(ids, sizes_))[1 if kind == "tools-missing-result" else 0 :]
        out += [{"role": "tool", "tool_call_id": i, "content": filler(s, f"{i}@{n}")} for i, s in answered]
    elif kind == "user-parts":
        out.append({"role": "user", "content": [{"type": "text", "text": filler(arg, f"p{n}")}]})
    else:
        out.append({"role": "tool", "tool_call_id": f"orphan{n}", "content": filler(arg, f"o{n}")})
    return out


def texts(view):
    return "\n".join(text_of(message_from_dict(m)) for m in view)


def check_wide_view(compactor, history, view, record, sid):
    window = compactor.config.context_window
    assert problems(view) == [], (record.tier, record.errors)
    if history and history[0]["role"] in ("system", "developer"):
        assert view[0]["role"] == history[0]["role"]
    scale, offset = record.token_correction, record.token_offset
    tokens = estimate(view)
    total = tokens if scale == 1.0 and offset == 0 else offset + corrected(tokens, scale)
    assert abs(total - record.tokens_after) <= (0 if scale == 1.0 else 1 + tokens // 5000), (
        record.tier,
        tokens,
        record.tokens_after,
    )
    # the user's request is in the view, verbatim
    request = text_of(message_from_dict(next(m for m in history if m["role"] == "user")))
    # (the truncation may shorten a pinned request that does not fit its budget: its head stays)
    if record.tier is not CompactionTier.EMERGENCY:
        assert request.strip()[: min(400, compactor.config.intent_max_chars // 2)] in texts(view), record.tier
    elif compactor.config.pin_request and len(request.strip()) < len(MARKER) and "[image]" not in request:
        # a truncation's cut never makes a text longer: a short pinned request stays whole
        assert request.strip() in texts(view), record.tier
    # every handle named in the view reads back
    for m in view:
        text = m.get("content")
        if isinstance(text, str) and text.startswith("[Tool result offloaded"):
            compactor.read_tool_result(text.split("Handle: ")[1].split("]")[0], session_id=sid)
    # every large result that left the view is readable through a handle the session keeps
    shown = texts(view)
    readable = None
    for m in history:
        if m["role"] != "tool":
            continue
        text = text_of(message_from_dict(m))
        if len(text) <= compactor.config.offload_threshold or text in shown:
            continue
        if readable is None:
            listing = compactor.read_tool_result(f"{sid}/", session_id=sid)
            handles = listing.splitlines() if "/" in listing else []
            readable = {compactor.read_tool_result(h, session_id=sid) for h in handles}
        assert text in readable, (m["tool_call_id"], record.tier, record.errors)
    if record.tier is CompactionTier.EMERGENCY or scale != 1.0 or offset:
        assert total <= window, (record.tier, total, window)
    elif record.tier is CompactionTier.NONE:
        assert tokens < WARN * window
    elif compactor.config.plugins.policy == "policy-thresholds":
        assert tokens < SOFT * window, (record.tier, record.errors)
    check_results(compactor, as_text(history), as_text(view))


def as_text(messages):
    """Tool results with their text as a string (a result of parts is compared by its text)."""
    return [
        {**m, "content": text_of(message_from_dict(m))}
        if m["role"] == "tool" and not isinstance(m["content"], str)
        else m
        for m in messages
    ]


@settings(
    max_examples=EXAMPLES or 60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    history=wide_histories(),
    window=st.integers(1000, 40_000),
    config=st.sampled_from(["default", "classic"]),
    usage=st.one_of(st.none(), st.tuples(st.floats(0.5, 3.0), st.integers(0, 3000))),
    other=st.booleans(),
    edit=st.sampled_from([None, "rewind", "change"]),
    use_async=st.booleans(),
    intent=st.sampled_from([8000, 300]),
)
# A system message that fills the truncation's budget once usage reports say the provider counts
# three times the estimate: the pinned request "Fix the bug." was cut to the longer marker alone.
@example(**json.loads((DATA / "fuzz_short_request_marker.json").read_text("utf-8")))
# The request followed by a result whose call the history does not have: the truncation kept the
# result as the newest exchange and dropped the request, which no summary covered.
@example(**json.loads((DATA / "fuzz_request_apart_result.json").read_text("utf-8")))
def test_wide_histories_turn_by_turn(history, window, config, usage, other, edit, use_async, intent):
    """Histories of every kind of message, on both bundled configs, with provider usage reports
    between turns (0.5 to 3 times the estimate, plus tool definitions), a turn rewound or a
    message edited, two sessions interleaved, the async API: every view is valid, its record
    counts it, the user's request is in it, no large result that left it is lost, and once the
    provider's counts are known no view is above the window."""
    with tempfile.TemporaryDirectory() as tmp:
        compactor = make_compactor(
            tmp, config, context_window=window, intent_max_chars=intent, extra_plugins=[("s", RecordingSummarizer())]
        )
        before = copy.deepcopy(history)
        cuts = [i for i, m in enumerate(history) if m["role"] == "assistant" and i > 0] + [len(history)]
        work = copy.deepcopy(history)
        for n, cut in enumerate(cuts):
            prefix = work[:cut]
            if edit == "rewind" and n == len(cuts) // 2 and n > 0:
                prefix = work[: cuts[n - 1]]  # the last turn dropped
            elif edit == "change" and n == len(cuts) // 2 and cut > 3:
                middle = cut // 2
                if work[middle]["role"] in ("user", "assistant") and isinstance(work[middle]["content"], str):
                    work[middle] = {**work[middle], "content": work[middle]["content"] + " (edited)"}
                    prefix = work[:cut]
            for sid in ("one", "two") if other else ("one",):
                if use_async:
                    view, record = asyncio.run(compactor.acompact_with_record(prefix, sid))
                else:
                    view, record = compactor.compact_with_record(prefix, sid)
                check_wide_view(compactor, prefix, view, record, sid)
                if usage is not None:
                    # tool definitions of up to a quarter of the window (more, and nothing fits)
                    offset = min(usage[1], window // 4)
                    compactor.observe_usage(sid, max(1, int(estimate(view) * usage[0]) + offset))
        assert history == before
