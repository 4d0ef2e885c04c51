"""Deterministic facts (facts that do not depend on the summarizer) and the offline
default summarizer that writes the five anchors from them."""

from __future__ import annotations

import json
import re
import shlex

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from progressive_compactor import CompactionTier, SummaryRequest
from progressive_compactor.anchors import parse_markdown
from progressive_compactor.facts import (
    _DECISION,
    _NEXT,
    _READ_COMMANDS,
    INSTRUCTION_CHARS,
    _arguments,
    _clean_path,
    _decisions,
    _files_in_command,
    _sentences,
    bound_text,
    error_line,
    extract_facts,
    first_user_request,
    is_failure,
    shell_words,
)
from progressive_compactor.messages import from_anthropic, messages_from_dicts, text_of
from progressive_compactor.models import AnchorType, Facts
from progressive_compactor.plugins.summarize_extractive import ExtractiveSummarizer
from progressive_compactor.testing import (
    FixedPolicy,
    RecordingSummarizer,
    build_history,
    compaction_message,
    problems,
    tool_turn,
    window_for,
)


def call(call_id, name, **arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


REQUEST = "Make the parser accept trailing commas."
SESSION = [
    {"role": "user", "content": "<system-reminder>be nice</system-reminder>"},
    {"role": "user", "content": REQUEST},
    {
        "role": "assistant",
        "content": "I'll use a regex instead of split(). Let me read the parser first.",
        "tool_calls": [call("1", "Read", file_path="src/parser.py")],
    },
    {"role": "tool", "tool_call_id": "1", "content": "def parse(): ..."},
    {
        "role": "assistant",
        "content": "The root cause is the tokenizer.",
        "tool_calls": [
            call("2", "Edit", file_path="src/parser.py", old_string="a", new_string="b"),
            call("3", "Write", file_path="tests/test_commas.py", content="x"),
        ],
    },
    {"role": "tool", "tool_call_id": "2", "content": "ok"},
    {"role": "tool", "tool_call_id": "3", "content": "ok"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("4", "bash", command="python -m pytest tests/test_commas.py")],
    },
    {
        "role": "tool",
        "tool_call_id": "4",
        "content": "<returncode>1</returncode>\n<output>\nE   AssertionError: expected 3\n1 failed\n</output>",
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            call("5", "bash", command="sed -i 's/a/b/' src/lexer.py && cat > notes.md <<'EOF'\nhi\nEOF\ncat setup.cfg")
        ],
    },
    {"role": "tool", "tool_call_id": "5", "content": "<returncode>0</returncode>"},
    {"role": "assistant", "content": "Next, I will run the whole test suite."},
]


@pytest.fixture
def facts() -> Facts:
    return extract_facts(messages_from_dicts(SESSION))


def test_the_first_real_request_skips_reminders_and_command_echoes(facts):
    assert facts.user_request == REQUEST
    echoes = messages_from_dicts(
        [
            {"role": "user", "content": "<command-name>/clear</command-name>"},
            {"role": "user", "content": "  "},
            {"role": "user", "content": "real one"},
        ]
    )
    assert first_user_request(echoes, 100) == "real one"
    assert first_user_request(echoes[:2], 100) is None


@pytest.mark.parametrize("config", ["default", "classic"])
def test_a_request_after_a_reminder_block_is_the_request(make_compactor, config):
    """A client that puts a reminder block before the user's words in the first message (an
    Anthropic request converted): the message is the request, not a reminder alone. Skipped, the
    request was lost and a later instruction taken for it."""
    reminder = "<system-reminder>\nToday's date is 2025-06-01.\n</system-reminder>"
    first = from_anthropic(
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": reminder}, {"type": "text", "text": "Fix tests/test_parser.py."}],
            }
        ]
    )
    later = {"role": "user", "content": reminder + "\nAlso run ruff."}
    history = [*first, *build_history([3000] * 4, system=None)[1:], later, *tool_turn("x", 3000)]
    history += [m for k in range(5) for m in tool_turn(f"y{k}", 3000)]
    facts = extract_facts(messages_from_dicts(history))
    assert "Fix tests/test_parser.py." in facts.user_request and facts.instructions == ("Also run ruff.",)
    assert extract_facts(messages_from_dicts([{"role": "user", "content": reminder}])).user_request is None
    compactor = make_compactor(config, extra_plugins=[("full", FixedPolicy(CompactionTier.FULL))])
    view, record = compactor.compact_with_record(history)
    assert record.summarizer_calls == 1 and compactor.state().covered > len(history) - 8
    assert "Fix tests/test_parser.py." in str(view) and problems(view) == []
    assert "- Later instruction: Also run ruff." in compaction_message(view)["content"]


def test_later_user_requests_are_instructions_on_one_line_each():
    long = "Keep the old flag working,\n  and   " + "also this " * 50
    history = messages_from_dicts(
        [
            *SESSION[:2],
            {"role": "user", "content": "Also handle tabs."},
            {"role": "user", "content": "[Request interrupted by user]"},
            {"role": "user", "content": "<command-name>/clear</command-name>"},
            {"role": "user", "content": REQUEST},  # the request again is not a new instruction
            {"role": "user", "content": long},
            {"role": "user", "content": "Also handle tabs."},
        ]
    )
    facts = extract_facts(history)
    assert facts.user_request == REQUEST
    flag, tabs = facts.instructions  # said again last, it is the newest
    assert tabs == "Also handle tabs."
    assert flag.startswith("Keep the old flag working, and also this") and len(flag) == INSTRUCTION_CHARS
    assert flag.endswith("...") and "\n" not in flag
    # a later part of the session: its first request-like message is an instruction too
    assert extract_facts(history[2:], request=REQUEST).instructions == facts.instructions
    assert extract_facts(history[2:]).user_request == "Also handle tabs."


def test_a_long_request_is_bounded_with_its_head_and_tail():
    text = "A" * 5000 + "B" * 5000
    bounded = bound_text(text, 1000)
    assert len(bounded) < 1100
    assert bounded.startswith("A" * 700) and bounded.endswith("B" * 100)
    assert "characters omitted" in bounded
    assert bound_text("short", 1000) == "short"


def test_files_from_structured_tools_and_shell_commands(facts):
    assert facts.files_created == ("tests/test_commas.py", "notes.md")
    assert facts.files_edited == ("src/parser.py", "src/lexer.py")
    assert facts.files_read == ("setup.cfg",)  # src/parser.py was edited later: listed as edited only


def test_failed_commands_with_their_error_line(facts):
    (failed,) = facts.failed_commands
    assert failed.startswith("`python -m pytest tests/test_commas.py` -> ")
    assert "AssertionError: expected 3" in failed


def test_a_result_that_arrived_apart_from_its_call_is_a_result_not_an_instruction():
    from progressive_compactor.messages import repair_tool_pairs
    from progressive_compactor.testing import tool_call

    history = [
        {"role": "user", "content": "Fix the bug in parser.py"},
        {"role": "assistant", "content": "run the tests", "tool_calls": [tool_call("call_A", "pytest -x")]},
        {"role": "assistant", "content": "meanwhile", "tool_calls": [tool_call("call_B", "cat parser.py")]},
        {"role": "tool", "tool_call_id": "call_B", "content": "def parse(): pass"},
        {"role": "tool", "tool_call_id": "call_A", "content": "E   ValueError: bad token\nExit code: 1"},
    ]
    repaired, repairs = repair_tool_pairs(messages_from_dicts(history))
    facts = extract_facts(repaired)
    assert repairs == 2 and repaired[-1].role == "user"  # the late result, and call_A's missing one
    assert facts.instructions == ()
    assert facts.failed_commands == ("`pytest -x` -> E   ValueError: bad token",)


def test_a_system_message_in_the_middle_is_no_instruction_of_the_users():
    from progressive_compactor.messages import repair_tool_pairs

    history = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "system", "content": "Tools available: bash. Working directory: /repo."},
        {"role": "user", "content": "Fix the bug in parser.py"},
        {"role": "assistant", "content": "Looking."},
        {"role": "system", "content": "Reminder: the tests run with pytest -x."},
        {"role": "user", "content": "Also keep the public API unchanged."},
    ]
    repaired, _ = repair_tool_pairs(messages_from_dicts(history))
    facts = extract_facts(repaired)
    assert facts.user_request == "Fix the bug in parser.py"
    assert facts.instructions == ("Also keep the public API unchanged.",)


def test_a_command_that_fails_without_a_word_is_not_a_tried_solution():
    history = messages_from_dicts(
        [
            {"role": "user", "content": REQUEST},
            {"role": "assistant", "content": None, "tool_calls": [call("g", "bash", command="grep -n wrapt setup.py")]},
            {"role": "tool", "tool_call_id": "g", "content": "<returncode>1</returncode>\n<output>\n</output>"},
            {"role": "assistant", "content": None, "tool_calls": [call("p", "bash", command="pytest -x")]},
            {"role": "tool", "tool_call_id": "p", "content": "<returncode>1</returncode>\nE   KeyError: 'a'"},
        ]
    )
    assert is_failure(text_of(history[2]))  # it did exit with 1: grep found nothing
    assert extract_facts(history).failed_commands == ("`pytest -x` -> E   KeyError: 'a'",)


@pytest.mark.parametrize(
    "text, failure",
    [
        ("<returncode>2</returncode>\nboom", True),
        ("<returncode>0</returncode>\nall good", False),
        ("Traceback (most recent call last):\n  ...\nValueError: x", True),
        ("bash: foo: command not found", True),
        ("Exit code 1\nerror: thing", True),
        ("3 passed in 0.2s", False),
    ],
)
def test_is_failure(text, failure):
    assert is_failure(text) is failure


def test_error_line_prefers_a_named_error():
    assert error_line("Traceback (most recent call last):\n  File x\nKeyError: 'a'\n1 failed") == "KeyError: 'a'"


def test_decisions_next_step_and_tools(facts):
    assert facts.decisions == ("I'll use a regex instead of split().", "The root cause is the tokenizer.")
    assert facts.next_step == "Next, I will run the whole test suite."
    assert facts.tools_used == ("Read", "Edit", "Write", "bash")


def test_a_question_a_list_lead_in_or_a_table_row_is_no_decision():
    text = (
        "Should we proceed with this approach? The fix is:\n"
        "| Approach | Cost |\n"
        "I'll use a lookup table instead of the regex. **The root cause is**:\n"
        "- the tokenizer"
    )
    facts = extract_facts(messages_from_dicts([{"role": "assistant", "content": text}]))
    assert facts.decisions == ("I'll use a lookup table instead of the regex.",)
    assert len(_decisions(text)) == 4  # each names a decision phrase: the filter is what drops three
    guesses = (
        "Maybe the issue is in the lexer. Hmm, the fix might be simpler. The root cause is probably "
        "the cache. Perhaps a better approach is a set. I'll use a set instead of the list."
    )
    facts = extract_facts(messages_from_dicts([{"role": "assistant", "content": guesses}]))
    assert facts.decisions == ("I'll use a set instead of the list.",)
    assert len(_decisions(guesses)) == 4  # the phrase search finds four; the guesses are dropped
    listed = extract_facts(
        messages_from_dicts(
            [
                {
                    "role": "assistant",
                    "content": "Done:\n- **Approach**: a lookup table\n2. I'll use a cache instead of a list",
                }
            ]
        )
    )
    assert listed.decisions == ("**Approach**: a lookup table", "I'll use a cache instead of a list")  # no "- - "


# The fast paths against the slow originals they replace: shlex, and case-insensitive patterns.

SHELL_PIECES = ["a", "b.py", "'", '"', " ", "\t", "\\", "\r", "\xa0", "#", "-n", "İ"]


@given(st.lists(st.sampled_from(SHELL_PIECES), max_size=14).map("".join))
def test_shell_words_splits_as_shlex(text):
    try:
        expected: list[str] | str = shlex.split(text)
    except ValueError:
        expected = "unclosed quote"
    try:
        got: list[str] | str = shell_words(text)
    except ValueError:
        got = "unclosed quote"
    assert got == expected


PHRASE_PIECES = ["I", "i", "'ll", " will", " use", "decided", "DECISION", "Instead of", "the fix is", "root ",
                 "cause is", " is", "approach", "CHOSE", "Next,", " step", "now", "let me", "TODO", "x", "_", " ",
                 ".", "İ", "ı", "ſ", "\u212a", "é", "—", "É", "ß", "\u2028"]  # fmt: skip


@pytest.mark.parametrize(
    "text",
    ["The bug iſ in the parser — I'll fix it.", "ı'll uſe the cache → then test.", "\u212aEEP: the fix is here",
     "Decİsion: İ will use pathlib.", "Straße: the root cause is the encoding.", "Next step — run it"],
)  # fmt: skip
def test_phrases_in_text_beyond_ascii_match_as_their_case_insensitive_pattern(text):
    # A text is searched lowered only where that finds what the pattern finds: ſ, ı and the
    # Kelvin sign match ASCII letters case-insensitively, though their lower case is not one.
    for phrases in (_DECISION, _NEXT):
        assert phrases.search(text) is (re.search(phrases.any.pattern, text, re.I) is not None)
    sentences = _sentences(text)
    assert _decisions(text) == [s for s in sentences if re.search(_DECISION.any.pattern, s, re.I)]


@given(st.lists(st.sampled_from(PHRASE_PIECES), max_size=10).map("".join))
def test_phrases_match_as_their_case_insensitive_pattern(text):
    for phrases in (_DECISION, _NEXT):
        assert phrases.search(text) is (re.search(phrases.any.pattern, text, re.I) is not None)


def test_an_unclosed_quote_after_long_words_is_found_at_once(in_time):
    # A pattern with nested repeats once tried every way to split the words: 2^n steps.
    with pytest.raises(ValueError, match="No closing quotation"):
        in_time(shell_words, "cat " + "a" * 400 + "'")
    assert in_time(_files_in_command, "cat notes.txt && cat " + "b" * 400 + "'")[2] == ["notes.txt"]


def test_a_command_naming_many_files_costs_time_in_proportion(in_time):
    # The files were kept in lists, each new path compared with all before it: n^2 (100,000 paths
    # took about 35 s); the last 30 are what the facts keep.
    command = "cat " + " ".join(f"src/module{i}.py" for i in range(100_000))
    messages = messages_from_dicts(
        [{"role": "assistant", "content": "", "tool_calls": [call("c1", "bash", command=command)]}]
    )
    facts = in_time(extract_facts, messages)
    assert facts.files_read == tuple(f"src/module{i}.py" for i in range(99_970, 100_000))


COMMAND_PIECES = ["cat", "sed", "-n", "head", "less", "concat", " ", "\t", "\n", "&&", "&", "|", ";", "a.py",
                  "'b c.txt'", '"d.md"', "\x0b", "\xa0", "x", "1,5p", ">", "out.txt"]  # fmt: skip


def split_reads(command: str) -> list[str]:
    """The files a command reads, found the plain way: every segment split and looked at."""
    read: list[str] = []
    for segment in command.replace("&&", "\n").replace("|", "\n").replace(";", "\n").split("\n"):
        first = segment.split(None, 1)
        if not first or first[0] not in {*_READ_COMMANDS, "sed"}:
            continue
        words = segment.split()
        if "'" in segment or '"' in segment:
            try:
                words = shlex.split(segment)
            except ValueError:
                pass
        if words and (words[0] in _READ_COMMANDS or (words[0] == "sed" and "-n" in words)):
            read += [p for p in map(_clean_path, words[1:]) if p]
    return read


@given(st.lists(st.sampled_from(COMMAND_PIECES), max_size=16).map("".join))
def test_read_files_as_a_split_of_every_segment(command):
    assert _files_in_command(command)[2] == split_reads(command)


SENTENCE_PIECES = [*PHRASE_PIECES, "!", "?", "\n", "\n\n", "\t", " ", ". ", "?\n", "decided that", "0123456789"]


@given(st.lists(st.sampled_from(SENTENCE_PIECES), max_size=24).map("".join))
def test_sentences_and_decisions_as_a_split_and_a_search_of_each(text):
    pieces = re.split(r"(?<=[.!?])\s+|\n+", text)
    sentences = [s.strip() for s in pieces if len(s.strip()) > 12]
    assert _sentences(text) == sentences
    assert _decisions(text) == [s for s in sentences if re.search(_DECISION.any.pattern, s, re.I)]


def standard_arguments(text: str) -> dict:
    """A call's arguments read the plain way, by the standard library."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


ARGUMENT_PIECES = ['{"command": ', '"cat a.py"', '"\\ud800"', '"\ud800"', "NaN", "Infinity", "1e999", "-0",
                   "123456789012345678901234567890", '{"path": "x"}', "[1, 2]", ", ", '"k": ', "}", "{", "null", "\xa0"]  # fmt: skip


@given(st.lists(st.sampled_from(ARGUMENT_PIECES), max_size=8).map("".join))
def test_arguments_read_as_the_standard_library_reads_them(text):
    # orjson reads them; what it refuses (NaN, a lone surrogate) the standard library does. A
    # number beyond 64 bits may come back as a float: only names and text values are looked at.
    def texts(value):
        return {k: v for k, v in value.items() if isinstance(v, str)}

    assert texts(_arguments(text)) == texts(standard_arguments(text))
    assert _arguments(text).keys() == standard_arguments(text).keys()


@pytest.mark.parametrize(
    "command, created, edited, read",
    [
        # "cat" and ">" inside a heredoc's text are still found; a word holding "cat" is not a cat
        ("cat > notes.md << 'EOF'\nlocate concatenate > x.txt\nEOF", ["notes.md"], ["x.txt"], ["notes.md"]),
        ("sed -n '1,20p' src/a.py && cat \"b.txt\" | head -3 c.py", [], [], ["src/a.py", "b.txt", "c.py"]),
        ("echo hi 2>&1 >> log.txt; tee -a out.txt < in", [], ["log.txt", "out.txt"], []),
        ("cat 'unclosed.py", [], [], ["unclosed.py"]),  # shlex fails: split at spaces, quote stripped
    ],
)
def test_files_in_shell_commands(command, created, edited, read):
    assert _files_in_command(command) == (created, edited, read)


def test_facts_of_nothing_are_empty():
    assert extract_facts([]) == Facts()


# --- the offline summarizer ------------------------------------------------------------------------


def request_for(messages, previous_summary=None, previous_anchors=()):
    """A request as the core builds it: the facts carry the session's first request."""
    msgs = tuple(messages_from_dicts(messages))
    return SummaryRequest(
        messages=msgs,
        previous_summary=previous_summary,
        previous_anchors=previous_anchors,
        facts=extract_facts(msgs, request=REQUEST),
        session_id="s",
        tier=CompactionTier.FULL,
        max_summary_tokens=4000,
        replaced_tokens=10_000,
    )


def test_the_extractive_summary_writes_all_five_anchors_from_the_messages():
    result = ExtractiveSummarizer().summarize(request_for(SESSION))
    parsed = parse_markdown(result.text)
    assert parsed.missing == ()
    anchors = {a.type: a.content for a in parsed.anchors}
    assert anchors[AnchorType.USER_INTENT].startswith(REQUEST)
    assert "tests/test_commas.py" in anchors[AnchorType.EXECUTION_PROGRESS]
    assert "src/lexer.py" in anchors[AnchorType.EXECUTION_PROGRESS]
    assert "regex instead of split()" in anchors[AnchorType.KEY_DECISION]
    assert "pytest tests/test_commas.py" in anchors[AnchorType.TRIED_SOLUTION]
    assert anchors[AnchorType.NEXT_STEP] == "Next, I will run the whole test suite."
    assert "Compacted 12 messages" in parsed.prose


def test_the_extractive_summary_is_deterministic_and_keeps_the_previous_prose():
    one = ExtractiveSummarizer().summarize(request_for(SESSION))
    assert ExtractiveSummarizer().summarize(request_for(SESSION)) == one
    previous = parse_markdown(one.text)
    two = ExtractiveSummarizer().summarize(
        request_for([{"role": "user", "content": "Also handle tabs."}], previous.prose, previous.anchors)
    )
    parsed = parse_markdown(two.text)
    assert parsed.prose.startswith(previous.prose)
    anchors = {a.type: a.content for a in parsed.anchors}
    assert "regex instead of split()" in anchors[AnchorType.KEY_DECISION]  # merged, not lost
    assert "Later instruction: Also handle tabs." in anchors[AnchorType.USER_INTENT]


def test_the_extractive_summary_shortens_its_prose_to_fit_the_budget():
    messages = [{"role": "assistant", "content": f"Step {i}: " + "x" * 300} for i in range(20)]
    request = attrs.evolve(request_for(messages, previous_summary="earlier work " * 1000), max_summary_tokens=1000)
    text = ExtractiveSummarizer().summarize(request).text
    assert len(text) <= request.max_summary_tokens * 4
    assert "characters omitted" in text
    assert parse_markdown(text).missing == ()  # the anchors are kept whole


# --- through the compactor ---------------------------------------------------------------------------


def test_the_request_survives_a_summarizer_that_forgets_it(make_compactor):
    forgetful = RecordingSummarizer(text="## Summary\nStuff happened.")
    history = build_history([3000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.85), extra_plugins=[("f", forgetful)])
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.FULL
    intent = record.anchors[0]
    assert intent.type is AnchorType.USER_INTENT and intent.content == history[1]["content"]
    assert "file_call_0.py" in record.anchors[1].content  # files the agent read, from the facts


def test_one_summary_keeps_the_newest_forty_later_instructions(make_compactor):
    history = build_history([100])
    for i in range(50):
        history += [{"role": "user", "content": f"Instruction {i}: also rename helper_{i}."}] + tool_turn(f"t{i}", 2000)
    compactor = make_compactor(context_window=window_for(history, 0.85))
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.FULL and record.summarized > 2 * 42
    covered = [m["content"] for m in history[: compactor.state().covered] if m["content"].startswith("Instruction")]
    kept = [line for line in record.anchors[0].content.splitlines() if line.startswith("- Later instruction:")]
    assert len(covered) > 40 and kept == [f"- Later instruction: {text}" for text in covered[-40:]]


@pytest.mark.parametrize("across", [False, True], ids=["one summary", "a summary each"])
def test_an_instruction_said_again_is_the_newest(make_compactor, across):
    """ "Use pytest", "no, use unittest", then "use pytest" again: the intent lists pytest last,
    where the newest instruction is; listed where it was first said, unittest read as the newest."""
    history = build_history([3000] * 4)
    compactor = make_compactor(extra_plugins=[("full", FixedPolicy(CompactionTier.FULL))])
    said = ["Use pytest for the tests.", "No, use unittest for the tests.", "Use pytest for the tests."]
    for k, text in enumerate(said):
        history += [{"role": "user", "content": text}, *tool_turn(f"t{k}", 3000), *tool_turn(f"u{k}", 3000)]
        if across:
            compactor.compact(history)
    history += [message for k in range(4) for message in tool_turn(f"w{k}", 3000)]
    view, record = compactor.compact_with_record(history)
    assert record.summarizer_calls == 1 and compactor.state().covered > len(history) - 8
    intent = compaction_message(view)["content"].split("## User Intent\n")[1].split("\n\n## ")[0]
    later = [line for line in intent.splitlines() if line.startswith("- Later instruction:")]
    assert later == [
        "- Later instruction: No, use unittest for the tests.",
        "- Later instruction: Use pytest for the tests.",
    ]


@pytest.mark.parametrize("config", ["classic", "default"])
def test_later_instructions_outlast_a_long_request_through_many_compactions(make_compactor, config):
    """A request longer than an anchor's line limit stays whole and once, and every later
    instruction stays after it, in the summary once its message is compacted."""
    request = "\n".join(f"Requirement {i} of the request." for i in range(60))
    history = build_history([3000] * 10, request=request)
    compactor = make_compactor(config, context_window=window_for(history, 0.85))
    for k in range(12):
        history.append({"role": "user", "content": f"Instruction {k}: keep step {k} quiet."})
        history += tool_turn(f"t{k}", 3000)
        view = compactor.compact(history)
        summary = (compaction_message(view) or {}).get("content", "")
        raw = {m.get("content") for m in view}
        for j in range(k + 1):
            assert f"- Later instruction: Instruction {j}: keep step {j} quiet." in summary or (
                f"Instruction {j}: keep step {j} quiet." in raw
            ), (k, j)
        assert summary.count("Requirement 59 of the request.") <= 1
    compacted = [j for j in range(12) if f"Instruction {j}: keep step {j} quiet." not in raw]
    assert len(compacted) >= 4  # several compactions covered instructions


def test_a_failed_command_reaches_the_tried_solutions_anchor(make_compactor):
    history = build_history([3000] * 10)
    history[3]["content"] = "Traceback (most recent call last):\n  File 'x'\nImportError: no module named foo\n"
    compactor = make_compactor(context_window=window_for(history, 0.85))
    view, record = compactor.compact_with_record(history)
    tried = record.anchors[3]
    assert "cat file_call_0.py" in tried.content and "ImportError: no module named foo" in tried.content
    assert "ImportError: no module named foo" in compaction_message(view)["content"]


def test_the_intent_is_bounded_by_intent_max_chars(make_compactor):
    history = build_history([3000] * 10, request="Q" * 20_000)
    compactor = make_compactor(context_window=window_for(history, 0.85), intent_max_chars=2000)
    view, record = compactor.compact_with_record(history)
    assert record.tier >= CompactionTier.FULL
    assert bound_text("Q" * 20_000, 2000) in view[1]["content"]
    history += tool_turn("later", 100)
    assert bound_text("Q" * 20_000, 2000) in compactor.compact(history)[1]["content"]
