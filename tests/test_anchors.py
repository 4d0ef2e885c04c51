"""Anchors: parsing with N/A filling, union merge, the compaction message, and
the deterministic facts that the core adds whatever the summarizer wrote."""

from __future__ import annotations

import re

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from progressive_compactor import CompactionTier, ParsedSummary, hookimpl
from progressive_compactor.anchors import (
    _HEADING,
    COMPACTION_MARKER,
    MAX_ANCHOR_LINES,
    PINNED_REQUEST_NOTE,
    _title,
    compaction_message_text,
    complete,
    empty_anchors,
    ensure_facts,
    facts_as_anchors,
    fit_summary,
    format_summary,
    merge_anchors,
    merge_file_lines,
    parse_markdown,
)
from progressive_compactor.messages import text_of
from progressive_compactor.models import NOT_AVAILABLE, Anchor, AnchorType, Facts, SessionState
from progressive_compactor.testing import RecordingSummarizer, build_history, compaction_message, tool_turn, window_for

FULL_TEXT = """## User Intent
Fix the parser bug.

## Execution Progress
- Reproduced the failure

## Key Decisions
- Use a regex instead of split()

## Tried Solutions
- Patching the tokenizer: broke three tests

## Next Steps
Run the full suite.

## Summary
We are halfway there.
"""


def by_type(anchors):
    return {a.type: a.content for a in anchors}


# --- parsing -------------------------------------------------------------------------------------


def test_all_five_anchors_and_the_prose_are_read():
    parsed = parse_markdown(FULL_TEXT)
    assert [a.type for a in parsed.anchors] == list(AnchorType)
    assert by_type(parsed.anchors)[AnchorType.KEY_DECISION] == "- Use a regex instead of split()"
    assert parsed.prose == "We are halfway there."
    assert parsed.missing == ()


def test_missing_anchors_are_filled_with_na():
    parsed = parse_markdown("## Next Steps\nShip it\n\nsome prose")
    assert [a.type for a in parsed.anchors] == list(AnchorType)
    anchors = by_type(parsed.anchors)
    assert anchors[AnchorType.NEXT_STEP] == "Ship it\n\nsome prose"  # a section runs to the next heading
    assert anchors[AnchorType.USER_INTENT] == NOT_AVAILABLE
    assert set(parsed.missing) == set(AnchorType) - {AnchorType.NEXT_STEP}


def test_an_empty_section_counts_as_missing():
    parsed = parse_markdown("## User Intent\n\n## Key Decisions\n- one")
    assert AnchorType.USER_INTENT in parsed.missing
    assert by_type(parsed.anchors)[AnchorType.USER_INTENT] == NOT_AVAILABLE


def test_text_without_any_heading_is_prose_and_five_na_anchors():
    parsed = parse_markdown("just a paragraph")
    assert parsed.prose == "just a paragraph"
    assert all(a.content == NOT_AVAILABLE for a in parsed.anchors)
    assert len(parsed.missing) == 5


@pytest.mark.parametrize(
    "heading",
    [
        "## user_intent",
        "# Intent",
        "**User Intent**",
        "**User Intent:**",
        "### USER INTENT ###",
        "## 1. User Intent",  # numbered and in bold, as models write them
        "**1) User Intent**",
        "## 1. **User Intent**:",
    ],
)
def test_heading_variants_are_understood(heading):
    parsed = parse_markdown(f"{heading}\nthe goal\n")
    assert by_type(parsed.anchors)[AnchorType.USER_INTENT] == "the goal"


def test_a_summary_written_as_a_numbered_list_of_bold_labels_fills_the_anchors():
    """Models often write the five sections as a list of bold labels with their text after them,
    or qualify a heading: each is its anchor, not prose (which only its newest paragraphs keep),
    and a qualified ``## Summary (so far)`` is the prose, not more of the next step."""
    text = (
        "1. **User Intent**: Fix the parser bug in src/parser.py.\n"
        "2. **Execution Progress:** Reproduced the failure.\n"
        "   - patched the tokenizer\n"
        "- **Key decisions** - Kept the regex.\n"
        "## Tried Solutions (and why they failed)\n"
        "Bumping the dependency did not help.\n"
        "**Next Steps:** Run the full suite.\n"
        "## Summary (so far)\n"
        "A **bold** word in the prose. **Progress**: is prose too, under a heading's bold label? no.\n"
    )
    parsed = parse_markdown(text)
    assert [a.content for a in parsed.anchors] == [
        "Fix the parser bug in src/parser.py.",
        "Reproduced the failure.\n   - patched the tokenizer",
        "Kept the regex.",
        "Bumping the dependency did not help.",
        "Run the full suite.",
    ]
    assert parsed.missing == () and parsed.prose.startswith("A **bold** word")


HEADING_PIECES = ["#", "##", " ", "\t", "\xa0", "a", "Intent", ":", "*", "**", "b c"]
OLD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*(.+?)\s*#*\s*$|^\s*\*\*(.+?)\*\*:?\s*$")


@given(st.lists(st.sampled_from(HEADING_PIECES), max_size=9).map("".join))
def test_heading_titles_as_the_markdown_pattern_reads_them(line):
    old, new = OLD_HEADING.match(line), _HEADING.match(line)
    assert (new is None) == (old is None)
    if old is not None and new is not None:
        title = (old.group(1) or old.group(2) or "").strip()
        if old.group(1) is not None:  # a heading's title in bold is its title
            title = title.rstrip(":").strip().strip("*_").strip()
        assert _title(new) == title.rstrip(":").lower()


def test_a_long_run_of_spaces_in_a_heading_is_read_at_once(in_time):
    # The pattern that also matched the closing "#" and spaces took the cube of their number.
    parsed = in_time(
        parse_markdown, "## User Intent" + " " * 20_000 + "x\nthe goal\n## Key Decisions  ##  \nuse a regex"
    )
    assert by_type(parsed.anchors)[AnchorType.KEY_DECISION] == "use a regex"
    assert parsed.prose.startswith("## User Intent")


def test_a_compaction_message_is_built_once_per_content_and_secrets(make_compactor):
    compactor = make_compactor()
    state = SessionState(covered=3, summary="the key live-key-0123456789abcdef was used", anchors=empty_anchors())
    first = compactor._tiers.compaction_message("s", state)
    assert compactor._tiers.compaction_message("s", attrs.evolve(state, version=7)) is first  # same content
    assert compactor._tiers.compaction_message("s", attrs.evolve(state, covered=4)) is not first
    assert text_of(compactor._tiers.compaction_message("s", state)) == text_of(first)
    compactor.secrets.add("live-key-0123456789abcdef")  # registered later (a rotated API key)
    again = compactor._tiers.compaction_message("s", state)
    assert "live-key-0123456789abcdef" in text_of(first) and "live-key" not in text_of(again)


def test_headings_inside_a_code_fence_are_content():
    """A summary that shows code or a Markdown file in a fence keeps it whole in its anchor: a
    comment ``# Summary`` or a ``## Next Steps`` line in the fence opens no section. A fence left
    open (a summary cut off) shields nothing, so the sections after it are still read."""
    text = (
        "## Execution Progress\n"
        "Wrote the setup script:\n"
        "```bash\n"
        "# Summary\n"
        "pip install -e .\n"
        "```\n"
        "Updated the README:\n"
        "~~~~markdown\n"
        "## Next Steps\n"
        "~~~\n"
        "- run it\n"
        "~~~~\n"
        "## Next Steps\n"
        "Ship it."
    )
    anchors = by_type(parse_markdown(text).anchors)
    assert anchors[AnchorType.EXECUTION_PROGRESS] == "\n".join(text.splitlines()[1:12])
    assert anchors[AnchorType.NEXT_STEP] == "Ship it."
    unclosed = by_type(parse_markdown("## User Intent\nFix it\n```\n## Next Steps\nShip it.").anchors)
    assert unclosed[AnchorType.USER_INTENT] == "Fix it\n```" and unclosed[AnchorType.NEXT_STEP] == "Ship it."


def test_format_and_parse_round_trip():
    parsed = parse_markdown(FULL_TEXT)
    again = parse_markdown(format_summary(parsed.anchors, parsed.prose))
    assert again == parsed


_LINES = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30),
    st.sampled_from(
        [
            "## Summary",
            "## Next Steps",
            "**Progress**",
            "# Intent",
            "### Context:",
            COMPACTION_MARKER,
            "\\## Summary",
            "## Offloaded Tool Results",
            "```",
            "~~~~ text",
            "\\```",
            "1. **Next Steps**: ship",
            "- **Intent:** the goal",
            "## Key Decisions (draft)",
        ]
    ),
)
_CONTENT = st.lists(_LINES, min_size=1, max_size=5).map("\n".join).filter(str.strip)


def _read_back(text: str) -> str:
    """``text`` as parse_markdown gives a section back: its lines, stripped."""
    return "\n".join(text.strip().splitlines()).strip()


@given(contents=st.lists(_CONTENT, min_size=5, max_size=5), prose=_CONTENT)
def test_any_anchor_text_reads_back_as_it_was_written(contents, prose):
    """A user's request with its own Markdown sections (``## Context``, ``**Progress**``) is
    kept verbatim in the intent: read back, it must not open another anchor or the prose."""
    anchors = tuple(Anchor(t, c) for t, c in zip(AnchorType, contents, strict=True))
    parsed = parse_markdown(format_summary(anchors, prose))
    assert [a.content for a in parsed.anchors] == [_read_back(c) for c in contents]
    assert parsed.prose == _read_back(prose) and parsed.missing == ()


def test_a_summary_that_echoes_the_compaction_message_reads_as_the_summary_alone():
    """A model given the view may copy the compaction message, header and handle list included:
    the handles are the core's to list (it does, in every compaction message), so the echoed list
    is not kept in the prose, where the message would show it twice."""
    parsed = parse_markdown(FULL_TEXT)
    echoed = compaction_message_text(parsed.anchors, parsed.prose, covered=40, handles=["s/call_1", "s/call_2"])
    again = parse_markdown(echoed + "\n\n## Next Steps\nRun the tests.")
    assert "s/call_1" not in again.prose and "Offloaded" not in again.prose
    assert again.prose.endswith(parsed.prose)  # what follows the list is read as ever
    assert again.anchors[:-1] == parsed.anchors[:-1]
    assert again.anchors[-1].content.split() == [*parsed.anchors[-1].content.split(), "Run", "the", "tests."]


def test_a_request_with_its_own_sections_stays_in_the_intent(make_compactor):
    request = "## Task\nFix the login bug.\n\n## Context\nWe use Django 4.2.\n\n## Progress\nNothing done yet."
    history = build_history([1500] * 12, request=request)
    compactor = make_compactor(context_window=window_for(history, 0.75))  # classic: whole summaries
    record = compactor.compact_with_record(history)[1]
    anchors = {a.type: a.content for a in compactor.state().anchors}
    assert record.tier is CompactionTier.SOFT
    assert anchors[AnchorType.USER_INTENT] == request
    assert "Nothing done yet" not in anchors[AnchorType.EXECUTION_PROGRESS]
    assert "Django" not in (compactor.state().summary or "")


def test_complete_orders_and_fills():
    anchors = complete([Anchor(AnchorType.NEXT_STEP, "x")])
    assert [a.type for a in anchors] == list(AnchorType)
    assert anchors[-1].content == "x" and anchors[0].content == NOT_AVAILABLE
    assert all(a.is_empty for a in empty_anchors())


# --- merge ---------------------------------------------------------------------------------------


def test_merge_keeps_old_anchors_that_new_ones_leave_na():
    old = parse_markdown(FULL_TEXT).anchors
    merged = merge_anchors(old, empty_anchors())
    assert merged == old


def test_merge_is_a_union_without_repeats():
    old = complete([Anchor(AnchorType.KEY_DECISION, "- Use a regex\n- Keep the API")])
    new = complete([Anchor(AnchorType.KEY_DECISION, "- keep the api\n- Add a test")])
    merged = by_type(merge_anchors(old, new))[AnchorType.KEY_DECISION]
    assert merged.splitlines() == ["- Use a regex", "- Keep the API", "- Add a test"]


def test_merge_tells_lines_apart_by_the_number_they_start_with():
    """A repeat is the same line under another bullet or list number; a line that starts with
    another number ("7 of 10 tests pass" after "3 of 10") is news, not a repeat."""
    old = complete([Anchor(AnchorType.EXECUTION_PROGRESS, "- 3 of 10 tests pass\n- 404 on /login fixed")])
    new = complete(
        [Anchor(AnchorType.EXECUTION_PROGRESS, "1. 3 of 10 tests pass\n* 7 of 10 tests pass\n2) 500 on /login fixed")]
    )
    merged = by_type(merge_anchors(old, new))[AnchorType.EXECUTION_PROGRESS]
    assert merged.splitlines() == [
        "- 3 of 10 tests pass",
        "- 404 on /login fixed",
        "* 7 of 10 tests pass",
        "2) 500 on /login fixed",
    ]


def test_merge_takes_new_anchors_where_the_old_ones_were_na():
    new = parse_markdown(FULL_TEXT).anchors
    assert merge_anchors(empty_anchors(), new) == new


def test_the_next_step_is_the_newest_alone():
    old = complete([Anchor(AnchorType.NEXT_STEP, "Write the test")])
    new = complete([Anchor(AnchorType.NEXT_STEP, "Open the PR")])
    assert by_type(merge_anchors(old, new))[AnchorType.NEXT_STEP] == "Open the PR"
    assert by_type(merge_anchors(old, empty_anchors()))[AnchorType.NEXT_STEP] == "Write the test"


def test_merged_anchors_stay_bounded_but_the_intent_is_left_to_ensure_facts():
    many = "\n".join(f"- item {i}" for i in range(MAX_ANCHOR_LINES))
    more = "\n".join(f"- extra {i}" for i in range(10))
    old = complete([Anchor(AnchorType.USER_INTENT, many), Anchor(AnchorType.EXECUTION_PROGRESS, many)])
    new = complete([Anchor(AnchorType.USER_INTENT, more), Anchor(AnchorType.EXECUTION_PROGRESS, more)])
    merged = by_type(merge_anchors(old, new))
    intent = merged[AnchorType.USER_INTENT].splitlines()
    progress = merged[AnchorType.EXECUTION_PROGRESS].splitlines()
    assert len(progress) == MAX_ANCHOR_LINES
    assert progress[-1] == "- extra 9" and "- item 0" not in progress
    assert intent == many.splitlines() + more.splitlines()  # the request may be many lines: not cut here


def test_the_intent_keeps_the_request_whole_then_the_newest_other_lines():
    request = "\n".join(f"Requirement {i}." for i in range(MAX_ANCHOR_LINES + 10))
    notes = [f"- Later instruction: note {i}" for i in range(MAX_ANCHOR_LINES + 5)]
    summary = complete([Anchor(AnchorType.USER_INTENT, "\n".join([request, *notes[:-1], request]))])
    facts = Facts(user_request=request, instructions=("note 0", f"note {MAX_ANCHOR_LINES + 4}"))
    intent = by_type(ensure_facts(summary, facts))[AnchorType.USER_INTENT]
    assert intent.startswith(request + "\n") and intent.count("Requirement 0.") == 1
    # note 0, said again with the newest, comes after the notes said since
    assert intent.splitlines()[len(request.splitlines()) :] == [*notes[6:-1], notes[0], notes[-1]]
    assert by_type(ensure_facts(complete([]), Facts(instructions=("x y",))))[AnchorType.USER_INTENT] == (
        "- Later instruction: x y"
    )


# --- deterministic facts -------------------------------------------------------------------------


FACTS = Facts(
    user_request="Make the CLI faster",
    files_created=("bench.py",),
    files_edited=("cli/main.py",),
    files_read=("README.md",),
    failed_commands=("`pytest -x` -> AssertionError: 3 != 4",),
    decisions=("I'll use a cache instead of re-reading the file.",),
    next_step="Now I'll profile the startup.",
)


def test_facts_become_anchors():
    anchors = by_type(facts_as_anchors(FACTS))
    assert anchors[AnchorType.USER_INTENT] == "Make the CLI faster"
    assert "bench.py" in anchors[AnchorType.EXECUTION_PROGRESS]
    assert "cli/main.py" in anchors[AnchorType.EXECUTION_PROGRESS]
    assert "pytest -x" in anchors[AnchorType.TRIED_SOLUTION]
    assert "cache" in anchors[AnchorType.KEY_DECISION]
    assert anchors[AnchorType.NEXT_STEP] == "Now I'll profile the startup."
    assert by_type(facts_as_anchors(Facts())) == {t: NOT_AVAILABLE for t in AnchorType}


def test_ensure_facts_adds_what_the_summary_lacks_and_keeps_what_it_has():
    summary = complete(
        [
            Anchor(AnchorType.USER_INTENT, "Speed things up"),
            Anchor(AnchorType.EXECUTION_PROGRESS, "- Edited cli/main.py"),
            Anchor(AnchorType.NEXT_STEP, "Measure again"),
        ]
    )
    anchors = by_type(ensure_facts(summary, FACTS))
    assert anchors[AnchorType.USER_INTENT].startswith("Make the CLI faster\n")
    assert "Speed things up" in anchors[AnchorType.USER_INTENT]
    assert "bench.py" in anchors[AnchorType.EXECUTION_PROGRESS]
    assert anchors[AnchorType.EXECUTION_PROGRESS].count("cli/main.py") == 1
    assert "pytest -x" in anchors[AnchorType.TRIED_SOLUTION]
    assert anchors[AnchorType.NEXT_STEP] == "Measure again"
    assert ensure_facts(ensure_facts(summary, FACTS), FACTS) == ensure_facts(summary, FACTS)


def test_a_fact_inside_another_path_or_instruction_is_not_taken_as_stated():
    """``parser.py`` in ``tests/test_parser.py`` is another file; "use pytest" inside a longer
    instruction is part of that one: both are facts the anchors still lack."""
    summary = complete(
        [
            Anchor(AnchorType.USER_INTENT, "Fix the tests.\n- Later instruction: Do not use regex; and use pytest -x."),
            Anchor(AnchorType.EXECUTION_PROGRESS, "- Files read: tests/test_parser.py\n- Backed up parser.py.bak"),
        ]
    )
    facts = Facts(user_request="Fix the tests.", instructions=("use pytest",), files_created=("parser.py",))
    anchors = by_type(ensure_facts(summary, facts))
    assert "- Later instruction: use pytest" in anchors[AnchorType.USER_INTENT].splitlines()
    assert "- Files created: parser.py" in anchors[AnchorType.EXECUTION_PROGRESS].splitlines()
    stated = complete(
        [
            Anchor(AnchorType.USER_INTENT, "Fix the tests.\n- Use pytest"),
            Anchor(AnchorType.EXECUTION_PROGRESS, "- Wrote `parser.py`. Then ran it."),
        ]
    )
    assert by_type(ensure_facts(stated, facts)) == by_type(stated)  # on a line of its own, named whole: nothing added


# --- the compaction message ----------------------------------------------------------------------


def test_compaction_message_format():
    text = compaction_message_text(
        parse_markdown(FULL_TEXT).anchors, "prose here", covered=12, handles=["s/c1"], todo=["- [ ] ship"]
    )
    assert text.splitlines()[0] == COMPACTION_MARKER
    assert "The first 12 messages" in text
    for title in ("User Intent", "Execution Progress", "Key Decisions", "Tried Solutions", "Next Steps", "Summary"):
        assert f"## {title}" in text
    assert "- s/c1" in text and "## Todo\n- [ ] ship" in text
    assert parse_markdown(text).anchors == parse_markdown(FULL_TEXT).anchors


# --- through the compactor -------------------------------------------------------------------------


def test_incomplete_anchors_become_na_and_the_error_says_so(make_compactor):
    history = build_history([3000] * 10)
    summarizer = RecordingSummarizer(text="## Key Decisions\n- keep it small\n\n## Summary\nshort")
    compactor = make_compactor(context_window=window_for(history, 0.85), extra_plugins=[("s", summarizer)])
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.FULL
    anchors = by_type(record.anchors)
    assert len(record.anchors) == 5
    assert anchors[AnchorType.KEY_DECISION] == "- keep it small"
    assert anchors[AnchorType.TRIED_SOLUTION] == NOT_AVAILABLE
    # The user's request is a fact the core adds itself, whatever the summarizer wrote.
    assert anchors[AnchorType.USER_INTENT] == history[1]["content"]
    assert record.errors == (
        "anchor parsing incomplete: user_intent, execution_progress, tried_solution, next_step set to N/A",
    )
    assert not record.fallback
    assert history[1]["content"] in view[1]["content"]


@pytest.mark.parametrize("config", ["default", "classic"])
def test_a_summary_that_copies_the_pinned_request_note_does_not_keep_it(make_compactor, config):
    """A summarizer shown the view (cache-friendly requests) copies the compaction message's
    intent, the note that the request is pinned before it included. The note is the view's to
    write: kept in the state, it came twice after the next compaction, and where the request is
    not pinned it would say the request is a message that is not there."""
    history = build_history([3000] * 10)
    request = history[1]["content"]
    text = f"## User Intent\n{PINNED_REQUEST_NOTE}\n{request}\n\n## Summary\nshort"
    summarizer = RecordingSummarizer(text=text)
    compactor = make_compactor(config, context_window=window_for(history, 0.85), extra_plugins=[("s", summarizer)])
    view, record = compactor.compact_with_record(history)
    assert record.tier >= CompactionTier.SOFT and summarizer.calls
    assert by_type(record.anchors)[AnchorType.USER_INTENT] == request
    message = compaction_message(view)["content"]
    assert message.count(PINNED_REQUEST_NOTE) == (1 if compactor.config.pin_request else 0)


def test_a_parse_anchors_plugin_replaces_the_markdown_reader(make_compactor):
    class Shouting:
        def __init__(self):
            self.texts = []

        @hookimpl
        def parse_anchors(self, text):
            self.texts.append(text)
            return ParsedSummary(anchors=complete([Anchor(t, t.value.upper()) for t in AnchorType]), prose="PROSE")

    history = build_history([3000] * 10)
    plugin = Shouting()
    compactor = make_compactor(context_window=window_for(history, 0.85), extra_plugins=[("shouting", plugin)])
    view, record = compactor.compact_with_record(history)
    assert len(plugin.texts) == 1
    assert by_type(record.anchors)[AnchorType.KEY_DECISION] == "KEY_DECISION"
    assert record.summary_text == "PROSE"
    assert "## Summary\nPROSE" in compaction_message(view)["content"]
    assert record.errors == ()


def test_anchors_merge_across_compactions(make_compactor):
    """The second summary writes a new decision and N/A for the old one: both survive (a union)."""
    texts = iter(
        [
            "## Key Decisions\n- first decision\n## Tried Solutions\n- approach A failed\n## Summary\none",
            "## Key Decisions\n- second decision\n## Summary\ntwo",
        ]
    )
    summarizer = RecordingSummarizer(text=lambda request: next(texts))
    history = build_history([3000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.85), extra_plugins=[("s", summarizer)])
    compactor.compact_with_record(history)
    for i in range(20):
        history += tool_turn(f"more_{i}", 3000)
        view, record = compactor.compact_with_record(history)
        if summarizer.calls == 2:
            break
    assert summarizer.calls == 2 and record.tier in (CompactionTier.SOFT, CompactionTier.FULL)
    anchors = by_type(record.anchors)
    assert anchors[AnchorType.KEY_DECISION].splitlines() == ["- first decision", "- second decision"]
    assert "approach A failed" in anchors[AnchorType.TRIED_SOLUTION]
    assert summarizer.requests[1].previous_anchors[2].content == "- first decision"


# --- bounded summaries -------------------------------------------------------------------------


def test_file_lists_from_several_merges_become_one_line_per_kind():
    old = (Anchor(AnchorType.EXECUTION_PROGRESS, "- Files edited: a.py\n- Files read: b.py, c.py\n- Ran tests"),)
    new = (Anchor(AnchorType.EXECUTION_PROGRESS, "- Files edited: b.py, a.py\n- Files read: d.py"),)
    progress = merge_anchors(old, new)[1].content.splitlines()
    assert progress == ["- Files edited: a.py, b.py", "- Files read: c.py, d.py", "- Ran tests"]
    assert merge_file_lines(["- Ran tests"]) == ["- Ran tests"]


def test_fit_summary_cuts_the_prose_first_and_never_the_intent():
    intent = "Fix the parser. " * 200  # 3,200 characters: not counted against the budget
    anchors = complete([Anchor(AnchorType.USER_INTENT, intent), Anchor(AnchorType.NEXT_STEP, "Run the tests")])
    prose = "old paragraph. " * 300 + "NEWEST PARAGRAPH"
    fitted, short = fit_summary(anchors, prose, 2000)
    assert fitted == anchors and short.endswith("NEWEST PARAGRAPH")
    assert len(format_summary(fitted, short)) - len(intent) <= 2000
    assert fit_summary(anchors, "short", 2000) == (anchors, "short")


def test_fit_summary_keeps_the_newest_whole_paragraphs_of_the_prose_within_its_share():
    anchors = complete([Anchor(AnchorType.USER_INTENT, "Fix it"), Anchor(AnchorType.NEXT_STEP, "Run the tests")])
    story = "\n\n".join(f"Paragraph {i}: " + "x" * 280 for i in range(10))
    fitted, prose = fit_summary(anchors, story, 100_000, prose_chars=700)
    assert fitted == anchors  # the anchors fit: only the prose is cut
    assert prose.startswith("Paragraph 8: ") and prose.endswith("Paragraph 9: " + "x" * 280)
    assert len(prose) <= 700
    # one paragraph longer than the share keeps its end
    _, cut = fit_summary(anchors, "old\n\n" + "y" * 1000 + " NEWEST", 100_000, prose_chars=500)
    assert cut.startswith("...") and cut.endswith(" NEWEST") and len(cut) <= 500
    assert fit_summary(anchors, story, 100_000) == (anchors, story)  # no share given: the budget alone


def test_fit_summary_keeps_the_newest_anchor_lines_and_file_lists_when_anchors_alone_overflow():
    tried = "\n".join(f"- Failed: `cmd {i}` -> Error {i}" for i in range(200))
    progress = "- Files edited: a.py, b.py\n" + "\n".join(f"- step {i}" for i in range(200))
    anchors = complete(
        [
            Anchor(AnchorType.USER_INTENT, "Fix it"),
            Anchor(AnchorType.EXECUTION_PROGRESS, progress),
            Anchor(AnchorType.TRIED_SOLUTION, tried),
        ]
    )
    fitted, prose = fit_summary(anchors, "prose " * 500, 3000)
    assert len(format_summary(fitted, prose)) - len("Fix it") <= 3000 + 100
    assert "Error 199" in fitted[3].content and "Error 0\n" not in fitted[3].content + "\n"
    assert fitted[1].content.startswith("- Files edited: a.py, b.py") and "step 199" in fitted[1].content


def test_when_anchors_overflow_the_stated_decisions_yield_before_the_failed_commands():
    decided = "\n".join(f"- I think the issue is in module {i}." for i in range(100))
    tried = "\n".join(f"- Failed: `cmd {i}` -> Error {i}" for i in range(100))
    anchors = complete(
        [
            Anchor(AnchorType.USER_INTENT, "Fix it"),
            Anchor(AnchorType.KEY_DECISION, decided),
            Anchor(AnchorType.TRIED_SOLUTION, tried),
        ]
    )
    fitted, _ = fit_summary(anchors, "prose", 4000)
    kept_decisions, kept_tried = fitted[2].content, fitted[3].content
    assert "module 99." in kept_decisions and "Error 99" in kept_tried  # the newest of both
    assert len(kept_decisions) <= (4000 - 500) // 8  # half an equal share of the four anchors' room
    assert len(kept_tried) > 2 * len(kept_decisions)


def test_the_compaction_message_stays_within_its_share_of_the_window(make_compactor):
    # Every turn edits another file and fails another way: anchors that grow with each merge.
    history = build_history([])
    for i in range(80):
        turn = tool_turn(
            f"c{i}",
            2000,
            text=f"I decided to use approach {i} instead of approach {i - 1}.",
            command=f"sed -i 's/a/b/' src/module_{i}.py && python -m pytest tests/test_{i}.py",
        )
        turn[1]["content"] = f"Traceback (most recent call last):\nValueError: case {i} broke\n" + turn[1]["content"]
        history += turn
    window = 12_000
    compactor = make_compactor(context_window=window)
    budget_chars = int(compactor.config.summary_share * window) * 4
    sizes = []
    for n in range(4, len(history) + 1, 2):
        view, _ = compactor.compact_with_record(history[:n])
        compaction = [m["content"] for m in view if str(m.get("content", "")).startswith(COMPACTION_MARKER)]
        if compaction:
            intent = compactor.state().anchors[0].content
            sizes.append(len(compaction[0]) - len(intent))
    assert len(sizes) > 10  # many compactions, each bounded: headers and handles aside, the budget
    assert max(sizes) <= budget_chars + 1500


@pytest.mark.parametrize("share", [0.2, 1.0])
def test_the_story_keeps_its_newest_paragraphs_within_its_share(make_compactor, share):
    history = build_history([])
    for i in range(60):
        history += tool_turn(f"c{i}", 2000, text=f"Step {i} is done.")
    window = 12_000
    compactor = make_compactor(context_window=window, prose_share=share)
    for n in range(4, len(history) + 1, 2):
        view, _ = compactor.compact_with_record(history[:n])
    state = compactor.state()
    budget_chars = min(compactor.config.max_summary_tokens, int(compactor.config.summary_share * window)) * 4
    last = max(int(step) for step in re.findall(r"Step (\d+) is done", state.summary or ""))
    kept = [int(step) for m in view if m["role"] == "assistant" for step in re.findall(r"Step (\d+)", m["content"])]
    assert last == min(kept) - 1  # the newest paragraph tells up to the first message the view keeps
    first = min(int(step) for step in re.findall(r"Step (\d+) is done", state.summary or ""))
    if share < 1:
        assert len(state.summary or "") <= int(share * budget_chars)
        assert first > 10  # the oldest paragraphs are gone
    else:
        assert first < 5  # the whole story fits the budget: the share decides what goes
