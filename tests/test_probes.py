"""Retention probes: built from hand-written sessions, kept or lost against hand-made views."""

from __future__ import annotations

import json

from progressive_compactor.lab.probes import CATEGORIES, build_probes, check_probes, key_sentences, named_handles


def call(call_id: str, name: str, **arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


REQUEST = (
    "<pr_description>\n"
    "The parser crashes on empty input files.\n"
    "x = parse('')\n"
    "It should return an empty document instead of raising.\n"
    "Please keep the public API unchanged!\n"
    "Also add a regression test for it.\n"
    "</pr_description>"
)
SESSION = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": REQUEST},
    {
        "role": "assistant",
        "content": "Let me read the parser first.",
        "tool_calls": [call("c1", "bash", command="cat src/parser.py")],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "def parse(text):\n    return Document(text.split())"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            call("c2", "str_replace_editor", command="str_replace", path="src/util.py", old_str="a", new_str="b")
        ],
    },
    {"role": "tool", "tool_call_id": "c2", "content": "The file src/util.py has been edited."},
    {
        "role": "assistant",
        "content": "Running the tests.",
        "tool_calls": [call("c3", "bash", command="python -m pytest tests/test_parser.py")],
    },
    {
        "role": "tool",
        "tool_call_id": "c3",
        "content": 'Traceback (most recent call last):\n  File "src/parser.py", line 2\nValueError: empty input is not a document',
    },
    {"role": "assistant", "content": "The cause is the split. Next, I will handle the empty string in parse()."},
]


def by_category(probes):
    return {c: [p for p in probes if p.category == c] for c in CATEGORIES}


def test_key_sentences_skip_tags_and_code():
    assert key_sentences(REQUEST) == [
        "The parser crashes on empty input files.",
        "It should return an empty document instead of raising.",
        "Please keep the public API unchanged!",
    ]


def test_probes_of_a_hand_written_session():
    probes = by_category(build_probes(SESSION))
    assert [p.label for p in probes["request"]] == key_sentences(REQUEST)
    assert [p.label for p in probes["artifacts"]] == ["src/parser.py", "src/util.py"]  # read, then edited
    [error] = probes["errors"]
    assert error.needles == ("python -m pytest tests/test_parser.py", "valueerror: empty input is not a document")
    [step] = probes["next_step"]
    assert step.label == "Next, I will handle the empty string in parse()."


LATER = [
    {"role": "user", "content": "[Request interrupted by user]"},
    {"role": "user", "content": "Also   keep the old parse_file() working."},
]


def test_the_whole_transcript_keeps_every_probe():
    retention = check_probes(build_probes(SESSION + LATER), SESSION + LATER)
    assert all(retention.ratio(c) == 1.0 for c in CATEGORIES)


def test_a_later_instruction_is_kept_by_its_message_or_the_summary_line_only():
    probes = build_probes(SESSION + LATER)
    assert [p.label for p in by_category(probes)["instructions"]] == ["Also keep the old parse_file() working."]
    line = "- Later instruction: Also keep the old parse_file() working."
    summary = {"role": "user", "content": f"[Context Compaction]\n## User Intent\n{line}"}
    assert check_probes(probes, [*SESSION[:2], summary]).ratio("instructions") == 1.0
    assert check_probes(probes, SESSION).ratio("instructions") == 0.0
    assert check_probes(build_probes(SESSION), SESSION).ratio("instructions") is None


def test_a_view_that_dropped_the_failure_loses_the_error_probe_only():
    view = SESSION[:2] + [
        {
            "role": "user",
            "content": "[Context Compaction]\n## Execution Progress\n- Files read: src/parser.py\n- Files edited: src/util.py",
        },
        SESSION[-1],
    ]
    retention = check_probes(build_probes(SESSION), view)
    assert retention.ratio("request") == 1.0
    assert retention.ratio("artifacts") == 1.0
    assert retention.ratio("next_step") == 1.0
    assert retention.ratio("errors") == 0.0
    assert retention.categories["errors"].lost == (
        "python -m pytest tests/test_parser.py -> ValueError: empty input is not a document",
    )


def test_a_view_without_the_request_loses_its_sentences():
    view = [SESSION[0], {"role": "user", "content": "Fix the parser."}, *SESSION[2:]]
    assert check_probes(build_probes(SESSION), view).ratio("request") == 0.0


def test_an_offloaded_result_counts_when_the_view_names_its_handle():
    failure = SESSION[7]["content"]
    placeholder = "[Tool result offloaded: 120 characters, 3 lines. Handle: sess/c3]\nFirst 1 lines:\nTraceback"
    view = SESSION[:7] + [{"role": "tool", "tool_call_id": "c3", "content": placeholder}, SESSION[8]]
    probes = build_probes(SESSION)
    files = {"sess/c3": failure}
    assert check_probes(probes, view, read_handle=files.get).ratio("errors") == 1.0
    assert check_probes(probes, view).ratio("errors") == 0.0  # the handle cannot be read: not kept
    other = [dict(m) for m in view]
    other[7]["content"] = placeholder.replace("sess/c3", "sess/zz")
    assert check_probes(probes, other, read_handle=files.get).ratio("errors") == 0.0


def test_named_handles_reads_placeholders_and_the_offloaded_list():
    text = "x [Tool result offloaded: 9 characters. Handle: s1/call_1]\n## Offloaded Tool Results\n- s1/call_2\n- not a handle"
    assert named_handles(text, known_handles=["s1/call_3"]) == ["s1/call_1", "s1/call_2"]
    assert named_handles(text + " s1/call_3", known_handles=["s1/call_3"])[-1] == "s1/call_3"


def test_a_category_without_probes_has_no_ratio():
    session = [
        {"role": "user", "content": "Say hello to the world please."},
        {"role": "assistant", "content": "Hello!"},
    ]
    retention = check_probes(build_probes(session), session)
    assert retention.ratio("errors") is None
    assert retention.ratio("request") == 1.0
