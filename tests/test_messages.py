"""OpenAI chat messages: reading and writing them (unknown keys kept), the validity check, orphan
repair of orphaned tool calls and results (counted in the record), and the Anthropic converters."""

from __future__ import annotations

import copy
import json
import types

import attrs
import pytest

from progressive_compactor import CompactionTier, InvalidMessagesError
from progressive_compactor.http.prompt import render_messages
from progressive_compactor.messages import (
    AUDIO_DATA_CHARS,
    IMAGE_CHARS,
    MISSING_RESULT,
    char_count,
    from_anthropic,
    message_from_dict,
    message_to_dict,
    messages_from_dicts,
    repair_tool_pairs,
    replace_content,
    text_of,
    to_anthropic,
    view_problems,
)
from progressive_compactor.testing import build_history, problems, tool_call, window_for


def call(call_id, name="bash", arguments='{"command": "ls"}'):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant(*ids, content=None):
    return {"role": "assistant", "content": content, "tool_calls": [call(i) for i in ids]}


def result(call_id, content="ok"):
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def msgs(*dicts):
    return messages_from_dicts(dicts)


# --- reading and writing -------------------------------------------------------------------------


def test_an_unchanged_message_is_given_back_as_the_same_dict():
    data = {"role": "user", "content": "hi", "x-trace": {"id": 7}}
    assert message_to_dict(message_from_dict(data)) is data


def test_unknown_keys_survive_a_change_of_content():
    data = {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "long",
        "name": "bash",
        "cache_control": {"type": "ephemeral"},
    }
    out = message_to_dict(replace_content(message_from_dict(data), "short"))
    assert out == {**data, "content": "short"}


def test_unknown_keys_of_tool_calls_and_functions_are_kept():
    data = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "hmm",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "index": 0,
                "function": {"name": "bash", "arguments": "{}", "strict": True},
            },
        ],
    }
    message = message_from_dict(data)
    assert message.extra == {"reasoning_content": "hmm"}
    assert message_to_dict(attrs.evolve(message, raw=None)) == data


def test_content_parts_are_kept_and_counted():
    parts = [{"type": "text", "text": "look at this"}, {"type": "image_url", "image_url": {"url": "data:..."}}]
    message = message_from_dict({"role": "user", "content": parts})
    assert message.content == tuple(parts)
    assert text_of(message) == "look at this\n[image]"
    assert char_count(message) == len("look at this") + IMAGE_CHARS
    assert message_to_dict(attrs.evolve(message, raw=None))["content"] == parts


def test_char_count_includes_tool_call_names_and_arguments():
    message = message_from_dict(assistant("c1", content="abc"))
    assert char_count(message) == 3 + len("bash") + len('{"command": "ls"}')
    assert char_count(message_from_dict({"role": "assistant", "content": None})) == 0


def test_non_string_arguments_are_written_as_json():
    data = {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}]}
    assert message_from_dict(data).tool_calls[0].arguments == '{"a": 1}'


@pytest.mark.parametrize(
    "data, match",
    [
        ("just text", "expected an object"),
        ({"role": "robot", "content": "x"}, "role 'robot' is not one of"),
        ({"role": "user", "content": 5}, "content must be a string, null or a list"),
        ({"role": "tool", "content": "x"}, "needs a tool_call_id"),
        ({"role": "assistant", "tool_calls": {"id": "c"}}, "tool_calls must be a list"),
        ({"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}, "needs an 'id'"),
        ({"role": "user", "content": "hi", "name": 7}, "name must be a string, got int"),
    ],
    ids=["not-a-dict", "bad-role", "bad-content", "tool-without-id", "calls-not-list", "call-without-id", "bad-name"],
)
def test_invalid_messages_name_the_index_and_the_problem(data, match):
    with pytest.raises(InvalidMessagesError, match=match) as info:
        message_from_dict(data, 4)
    assert info.value.index == 4
    assert str(info.value).startswith("message 4:")


def test_the_compactor_rejects_an_invalid_history(make_compactor):
    with pytest.raises(InvalidMessagesError, match="message 2"):
        make_compactor().compact(
            [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "wizard", "content": "x"}]
        )


# --- validity -----------------------------------------------------------------------------------


def test_a_valid_history_has_no_problems():
    assert (
        view_problems(
            msgs(
                {"role": "system", "content": "s"},
                {"role": "user", "content": "u"},
                assistant("a", "b"),
                result("b"),
                result("a"),
                {"role": "assistant", "content": "x"},
            )
        )
        == []
    )


@pytest.mark.parametrize(
    "history, problem",
    [
        ([{"role": "user", "content": "u"}, {"role": "system", "content": "s"}], "system message not first"),
        ([{"role": "user", "content": "u"}, result("a")], "answers no open call"),
        ([assistant("a"), {"role": "user", "content": "u"}], "have no result"),
        ([assistant("a")], "end: tool calls ['a'] have no result"),
        ([assistant("a"), result("a"), result("a")], "answers no open call"),
        ([assistant("a"), result("a"), {"role": "user", "content": "u"}, result("a")], "answers no open call"),
    ],
    ids=["system-late", "orphan-result", "unanswered", "unanswered-at-end", "answered-twice", "result-too-late"],
)
def test_view_problems_find_each_violation(history, problem):
    found = view_problems(msgs(*history))
    assert any(problem in p for p in found), found


# --- repair ---------------------------------------------------------------------------------------


def test_repair_leaves_a_valid_history_alone():
    history = msgs({"role": "user", "content": "u"}, assistant("a"), result("a"))
    repaired, count = repair_tool_pairs(history)
    assert count == 0 and repaired == history


def test_repair_answers_an_unanswered_call_and_keeps_an_orphan_result_as_text():
    history = msgs(
        {"role": "user", "content": "u"},
        assistant("a", "b"),
        result("a"),
        {"role": "user", "content": "next"},
        result("zzz", "lost output"),
    )
    repaired, count = repair_tool_pairs(history)
    assert count == 2
    assert view_problems(repaired) == []
    assert [m.role for m in repaired] == ["user", "assistant", "tool", "tool", "user", "user"]
    assert repaired[3].tool_call_id == "b" and repaired[3].content == MISSING_RESULT
    assert "lost output" in text_of(repaired[5]) and "zzz" in text_of(repaired[5])


def test_repair_turns_a_late_system_message_into_a_user_message():
    repaired, count = repair_tool_pairs(msgs({"role": "system", "content": "a"}, {"role": "system", "content": "b"}))
    assert count == 1 and [m.role for m in repaired] == ["system", "user"]
    assert repaired[1].content == "[System message]\nb"  # the model can tell it from the user's words
    parts = [{"type": "text", "text": "b"}]
    repaired, _ = repair_tool_pairs(msgs({"role": "user", "content": "u"}, {"role": "system", "content": parts}))
    assert repaired[1].content == ({"type": "text", "text": "[System message]"}, *parts)
    assert repair_tool_pairs(repaired)[1] == 0  # once repaired, it stays as it is


@pytest.mark.parametrize("first", ["system", "user"], ids=["with-system-prompt", "without"])
@pytest.mark.parametrize("turn", range(2, 6))
def test_a_system_message_later_in_the_history_never_reaches_the_view_as_system(make_compactor, first, turn):
    history = [
        {"role": first, "content": "start"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
        {"role": "system", "content": "injected later"},
        {"role": "user", "content": "v"},
        {"role": "assistant", "content": "w"},
    ]
    compactor = make_compactor()
    for n in range(1, turn + 1):  # turn by turn, so the late system message lands in every position
        view, record = compactor.compact_with_record(history[: n + 1], "s")
    assert view_problems(msgs(*view)) == []
    assert [m["role"] for m in view].count("system") == (first == "system")
    assert record.repaired_tool_pairs == (turn >= 3)


def test_repair_piece_by_piece_equals_repair_whole():
    history = msgs(
        {"role": "user", "content": "u"},
        assistant("a"),
        result("x"),
        {"role": "user", "content": "v"},
        assistant("b"),
        result("b"),
        result("b"),
    )
    whole, n = repair_tool_pairs(history)
    first, n1 = repair_tool_pairs(history[:3])
    second, n2 = repair_tool_pairs(history[3:])
    assert first + second == whole and n1 + n2 == n


def test_orphans_are_repaired_and_counted_in_the_record(make_compactor):
    history = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "fix it"},
        assistant("never_answered"),
        {"role": "user", "content": "are you there?"},
        result("orphan", "output of a call nobody made"),
        {"role": "assistant", "content": "yes"},
    ]
    view, record = make_compactor().compact_with_record(history)
    assert record.tier is CompactionTier.NONE
    assert record.repaired_tool_pairs == 2
    assert problems(view) == []
    assert any("output of a call nobody made" in str(m["content"]) for m in view)


@pytest.mark.parametrize("ratio", [0.65, 0.85, 0.97], ids=["warn", "full", "emergency"])
def test_orphans_are_repaired_at_every_tier(make_compactor, ratio):
    history = build_history([5000] * 10)
    history.insert(5, result("orphan", "stray"))
    del history[10]  # the result of call_3: its call is now unanswered
    compactor = make_compactor(context_window=window_for(history, ratio))
    view, record = compactor.compact_with_record(history)
    assert problems(view) == []
    assert record.repaired_tool_pairs == 2


# --- through the compactor ------------------------------------------------------------------------


def test_unknown_keys_come_back_untouched_from_a_compaction(make_compactor):
    history = build_history([5000] * 10)
    for i, m in enumerate(history):
        m["x-meta"] = {"index": i}
    history[3]["cache_control"] = {"type": "ephemeral"}
    before = copy.deepcopy(history)
    compactor = make_compactor(context_window=window_for(history, 0.65))
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.WARN
    assert view[3]["content"].startswith("[Tool result offloaded")
    assert view[3]["cache_control"] == {"type": "ephemeral"} and view[3]["x-meta"] == {"index": 3}
    for original, out in zip(before, view):
        assert {k: v for k, v in out.items() if k != "content"} == {k: v for k, v in original.items() if k != "content"}
    assert history == before


def test_message_objects_are_accepted_as_input(make_compactor):
    history = messages_from_dicts(build_history([100] * 3))
    view = make_compactor().compact(history)
    assert view == [message_to_dict(m) for m in history]


@pytest.mark.parametrize("ratio", [0.5, 0.85], ids=["no compaction", "a summary"])
def test_a_history_of_read_only_mappings_gives_a_view_of_dicts(make_compactor, ratio):
    """Messages passed as mappings that are not dicts (read-only views of a store's records) come
    back as dicts, as the view's type says: the caller's own objects were handed back, which no
    JSON encoder takes (``json.dumps`` failed on the view)."""
    history = build_history([3000] * 10)
    window = window_for(history, ratio)
    view = make_compactor(context_window=window).compact([types.MappingProxyType(m) for m in history])
    assert all(type(m) is dict for m in view)
    assert json.loads(json.dumps(view)) == make_compactor(context_window=window).compact(history)


# --- Anthropic ------------------------------------------------------------------------------------


ROUND_TRIP = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "list files"},
    {"role": "assistant", "content": "Looking.", "tool_calls": [tool_call("t1", "ls -la")]},
    {"role": "tool", "tool_call_id": "t1", "content": "a.py\nb.py"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [tool_call("t2", "cat a.py"), tool_call("t3", "cat b.py", name="read")],
    },
    {"role": "tool", "tool_call_id": "t2", "content": "print(1)"},
    {"role": "tool", "tool_call_id": "t3", "content": "print(2)"},
    {"role": "user", "content": "thanks"},
    {"role": "assistant", "content": "Done."},
]


def test_anthropic_gets_no_text_block_of_white_space_alone():
    """Claude Code writes "\n\n" before its tool calls; the Messages API refuses such a block."""
    history = [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": "\n\n", "tool_calls": [call("t1", "bash", '{"command": "ls"}')]},
        {"role": "tool", "tool_call_id": "t1", "content": "a.py"},
        {"role": "assistant", "content": "  "},
        {"role": "user", "content": "thanks"},
    ]
    _, messages = to_anthropic(history)
    assert [[b["type"] for b in m["content"]] for m in messages] == [["text"], ["tool_use"], ["tool_result", "text"]]


def test_anthropic_round_trip():
    system, messages = to_anthropic(ROUND_TRIP)
    assert system == "be brief"
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert messages[1]["content"][1] == {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls -la"}}
    assert [b["type"] for b in messages[4]["content"]] == ["tool_result", "tool_result", "text"]
    assert from_anthropic(messages, system) == ROUND_TRIP


def test_from_anthropic_reads_block_lists_in_tool_results():
    messages = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "u1", "name": "shot", "input": {}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "u1",
                    "content": [{"type": "text", "text": "a"}, image()],
                }
            ],
        },
    ]
    out = from_anthropic(messages)
    png = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    assert out[1] == {"role": "tool", "tool_call_id": "u1", "content": [{"type": "text", "text": "a"}, png]}
    assert text_of(message_from_dict(out[1])) == "a\n[image]"
    assert view_problems(messages_from_dicts(out)) == []
    assert json.loads(out[0]["tool_calls"][0]["function"]["arguments"]) == {}


def test_from_anthropic_rejects_other_roles():
    with pytest.raises(InvalidMessagesError, match="user or assistant"):
        from_anthropic([{"role": "system", "content": "x"}])


PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}


def image(source=PNG):
    return {"type": "image", "source": source}


def anthropic_tool_turn(thinking=True):
    """An extended-thinking history: each assistant turn of a tool loop starts with signed thinking."""
    think = [{"type": "thinking", "thinking": "I should call ls", "signature": "EqQBCkgIAR..."}] if thinking else []
    return [
        {"role": "user", "content": [{"type": "text", "text": "list the files"}]},
        {
            "role": "assistant",
            "content": [*think, {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True, "content": "ls: permission denied"}
            ],
        },
        {
            "role": "assistant",
            "content": [
                *([{"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}] if thinking else []),
                {"type": "text", "text": "Retrying with sudo."},
                {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"cmd": "sudo ls"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "a.py\nb.py"}]},
    ]


def test_anthropic_images_come_back_from_a_round_trip():
    messages = [
        {"role": "user", "content": [image(), {"type": "text", "text": "Describe it"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A red pixel."}]},
        {"role": "user", "content": [image({"type": "url", "url": "https://example.com/cat.jpg"})]},
    ]
    out = from_anthropic(messages)
    assert out[0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "text", "text": "Describe it"},
    ]
    assert out[2]["content"] == [{"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}]
    assert to_anthropic(out) == (None, messages)


def test_to_anthropic_sends_image_url_parts_as_images():
    history = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ", "detail": "low"}},
            ],
        }
    ]
    _, messages = to_anthropic(history)
    jpeg = {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}
    assert messages == [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image(jpeg)]}]


def test_thinking_blocks_of_a_tool_turn_come_back_in_their_place():
    """With extended thinking on, the Messages API answers 400 when the last assistant turn of a
    tool loop comes back without its thinking blocks, unchanged."""
    turn = anthropic_tool_turn()
    out = from_anthropic(turn)
    assert [text_of(message_from_dict(m)) for m in out] == ["list the files", "", "ls: permission denied"] + [
        "Retrying with sudo.",
        "a.py\nb.py",
    ]
    assert to_anthropic(out) == (None, turn)
    rendered = render_messages(messages_from_dicts(out), 1000)  # the summarizer's prompt: text only
    assert "Retrying with sudo." in rendered and "I should call ls" not in rendered and "EmwK" not in rendered


def test_is_error_of_a_tool_result_comes_back():
    turn = anthropic_tool_turn(thinking=False)
    _, back = to_anthropic(from_anthropic(turn))
    assert back[2]["content"][0]["is_error"] is True
    assert back == turn


def test_blocks_openai_has_no_part_for_come_back_in_their_place():
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Hello"}}
    messages = [
        {"role": "user", "content": [document, {"type": "text", "text": "Summarize it"}, {"type": "new_kind", "x": 1}]},
        {"role": "assistant", "content": [{"type": "text", "text": "It says hello."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And these?"},
                {"type": "search_result", "source": "s", "title": "t", "content": []},
                image({"type": "file", "file_id": "file_011"}),
            ],
        },
    ]
    out = from_anthropic(messages)
    assert text_of(message_from_dict(out[0])) == "Summarize it"
    assert to_anthropic(out) == (None, messages)


def test_tool_results_keep_their_images_and_other_blocks():
    messages = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "u1", "name": "shot", "input": {}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "u1",
                    "content": [{"type": "text", "text": "a"}, image(), {"type": "document", "source": {}}],
                },
                {"type": "text", "text": "what do you see?"},
            ],
        },
    ]
    out = from_anthropic(messages)
    assert text_of(message_from_dict(out[1])) == "a\n[image]"
    assert to_anthropic(out) == (None, messages)


@pytest.mark.parametrize("arguments", ["[1, 2]", "null", "3", '"ls"'])
def test_tool_use_input_is_always_an_object(arguments):
    history = [
        {"role": "user", "content": "hi"},
        assistant(content=None),
        result("c1", "a"),
    ]
    history[1]["tool_calls"] = [call("c1", "f", arguments)]
    _, messages = to_anthropic(history)
    assert messages[1]["content"][0]["input"] == {"_raw_arguments": arguments}


def test_thinking_blocks_come_back_from_a_compaction(make_compactor):
    """The compactor keeps the key that carries them and gives it back untouched."""
    turn = from_anthropic(anthropic_tool_turn())
    history = build_history([5000] * 8) + turn[1:]
    compactor = make_compactor(context_window=window_for(history, 0.65))
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.WARN
    _, messages = to_anthropic(view)
    assert messages[-2:] == anthropic_tool_turn()[-2:]
    assert messages[-4]["content"] == anthropic_tool_turn()[1]["content"]


THINKING = "Let me weigh the options before I call the tool. " * 400  # 20,000 characters
SIGNATURE = "EqQBCkgIARABGAIiQL" * 20
REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4a" * 50

PDF = "JVBERi0xLjcKJcfsj6IKNSAwIG9iago8PC9MZW5ndGggNiAwIFI+PgpzdHJlYW0K" * 300


def heavy_tool_turn():
    """A tool loop of Claude with extended thinking: a long thinking block, redacted thinking, a PDF."""
    return [
        {
            "role": "user",
            "content": [
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
                {"type": "text", "text": "Check the report"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE},
                {"type": "redacted_thinking", "data": REDACTED},
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "is_error": False,
                    "content": [
                        {"type": "text", "text": "see the page"},
                        {
                            "type": "document",
                            "source": {"type": "text", "media_type": "text/plain", "data": "x" * 5000},
                        },
                    ],
                }
            ],
        },
    ]


def test_blocks_carried_for_anthropic_are_counted_as_they_are_sent():
    """A 20,000-character thinking block goes back to the provider: it counts as much, not as the
    few characters of text its message has."""
    user, thinker, result_ = messages_from_dicts(from_anthropic(heavy_tool_turn()))
    assert char_count(thinker) == len(THINKING) + len(SIGNATURE) + len(REDACTED) + len("bash") + len('{"cmd": "ls"}')
    assert char_count(user) == IMAGE_CHARS + len(PDF) + len("application/pdf") + len("Check the report")
    assert char_count(result_) == len("see the page") + IMAGE_CHARS + len("text/plain") + 5000
    assert to_anthropic([message_to_dict(m) for m in (user, thinker, result_)]) == (None, heavy_tool_turn())


def test_parts_that_are_not_images_count_by_their_size():
    refusal = "I can't help with that, because " + "it would hurt someone. " * 300
    long_refusal = message_from_dict({"role": "assistant", "content": [{"type": "refusal", "refusal": refusal}]})
    short_refusal = message_from_dict({"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]})
    assert char_count(long_refusal) == len(refusal)
    assert char_count(short_refusal) == 3
    audio = "UklGRiQAAABXQVZFZm10IBAAAAABAAEA" * 4000  # 128,000 characters of base64 wav
    clip = message_from_dict(
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": audio, "format": "wav"}}]}
    )
    assert char_count(clip) == len(audio) // AUDIO_DATA_CHARS + len("wav")
    picture = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 100_000}}
    assert char_count(message_from_dict({"role": "user", "content": [picture]})) == IMAGE_CHARS


def test_a_long_thinking_block_makes_the_compactor_compact(make_compactor):
    """Counted as nothing, 20,000 characters of thinking in the head let a view the compactor took
    for a sixth of the window overflow it; counted, they are compacted away."""
    turn = from_anthropic(heavy_tool_turn())
    history = build_history([300]) + turn + build_history([300] * 6, system=None, id_prefix="later_")[1:]
    window = 4000
    assert len(THINKING) // 4 > window  # the thinking block to_anthropic sends fills the window alone
    assert THINKING in json.dumps(to_anthropic(history))
    view, record = make_compactor(context_window=window).compact_with_record(history)
    assert record.tier is not CompactionTier.NONE
    assert record.tokens_before > len(THINKING) // 4
    assert THINKING not in json.dumps(to_anthropic(view))
    assert sum((char_count(m) + 3) // 4 for m in messages_from_dicts(view)) <= window
    assert problems(view) == []


def test_a_refusal_part_is_text_the_summary_and_anthropic_get():
    """The Agents SDK writes a model's refusal as a ``refusal`` part of the assistant's content:
    it is what the assistant said, not an image and not nothing."""
    history = [
        {"role": "user", "content": "delete the production database"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I won't delete production data."}]},
        {"role": "user", "content": "fine, back it up then"},
    ]
    messages = messages_from_dicts(history)
    assert text_of(messages[1]) == "I won't delete production data."
    assert "I won't delete production data." in render_messages(messages, 1000)
    _, sent = to_anthropic(history)
    assert sent[1] == {"role": "assistant", "content": [{"type": "text", "text": "I won't delete production data."}]}
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]


def test_the_other_fields_of_text_image_and_tool_use_blocks_come_back():
    """A client marks its prompt-cache breakpoints with ``cache_control`` on the last blocks, and
    an answer's text blocks carry their ``citations``: dropped, every request misses the cache."""
    ephemeral = {"type": "ephemeral"}
    cited = [{"type": "char_location", "cited_text": "Hello", "document_index": 0, "start_char_index": 0}]
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Read the notes"},
                {"type": "text", "text": "and list the files", "cache_control": ephemeral},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "The notes say hello.", "citations": cited},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "bash",
                    "input": {"cmd": "ls"},
                    "cache_control": ephemeral,
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "a.py", "cache_control": ephemeral}],
                },
                {**image(), "cache_control": ephemeral},
            ],
        },
    ]
    out = from_anthropic(messages)
    assert [text_of(message_from_dict(m)) for m in out] == [
        "Read the notes\nand list the files",
        "The notes say hello.",
        "a.py",
        "[image]",
    ]
    assert view_problems(messages_from_dicts(out)) == []
    assert to_anthropic(out) == (None, messages)


def test_what_a_message_sends_in_keys_of_its_own_is_counted():
    """A reasoning model's history gives its reasoning back in a key of its own; the provider
    counts it, so the estimate does, and the message's name."""
    reasoning = "First, check the imports. " * 800
    thinker = message_from_dict({"role": "assistant", "content": "Done.", "reasoning_content": reasoning})
    refused = message_from_dict({"role": "assistant", "content": None, "refusal": "I can't do that."})
    named = message_from_dict({"role": "user", "name": "alice", "content": "hi"})
    framework = {"role": "assistant", "content": "Done.", "__framework_message__": [{"text": reasoning}]}
    assert char_count(message_from_dict(framework)) == len("Done.")  # an integration's copy, never sent
    assert char_count(thinker) == len("Done.") + len(reasoning)
    assert char_count(refused) == len("I can't do that.")
    assert char_count(named) == len("hi") + len("alice")
