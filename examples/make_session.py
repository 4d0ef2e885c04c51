"""Writes synthetic but realistic agent sessions (OpenAI chat JSONL).

An agent fixes a date-parsing bug in a small Python project: it reads files, runs the tests
(which fail with a traceback), tries a fix that does not work, edits again, and gets the tests
to pass. Tool outputs are long, as real ones are. Deterministic: run it again to get the same
files: ``examples/session.jsonl`` (the README's session) and three variants of it, with other
random draws and lengths, in ``examples/sessions/`` (for ``compactor ab replay``).

    python examples/make_session.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

rng = random.Random(7)
messages: list[dict] = []
call_number = 0
ROUNDS = 6


def say(role: str, content: str) -> None:
    messages.append({"role": role, "content": content})


def run(thought: str, command: str, output: str) -> None:
    global call_number
    call_number += 1
    call_id = f"call_{call_number:03d}"
    messages.append(
        {
            "role": "assistant",
            "content": thought,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "bash", "arguments": json.dumps({"command": command})},
                }
            ],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call_id, "content": output})


def source_file(name: str, lines: int) -> str:
    body = []
    for i in range(1, lines + 1):
        kind = rng.choice(["def", "return", "if", "assign", "comment"])
        if kind == "def":
            body.append(f"def {name}_helper_{i}(value, *, strict=False):")
        elif kind == "return":
            body.append(f"    return normalize(value, field='{name}_{i}')")
        elif kind == "if":
            body.append(f"    if value is None or value == '':  # line {i}")
        elif kind == "assign":
            body.append(f"    result_{i} = parse_component(value[{i % 7}:{i % 7 + 2}])")
        else:
            body.append(f"# {name}: keep ISO 8601 compatibility for field {i}")
    return "\n".join(body)


def pytest_output(failed: bool, tests: int) -> str:
    lines = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0",
        f"collected {tests} items",
        "",
    ]
    for i in range(tests):
        lines.append(
            f"tests/test_dates.py::test_parse_case_{i:03d} PASSED" + " " * 20 + f"[{100 * (i + 1) // tests:3d}%]"
        )
    if failed:
        lines += [
            "",
            "=================================== FAILURES ===================================",
            "_____________________________ test_parse_timezone ______________________________",
            "    def test_parse_timezone():",
            ">       assert parse_date('2024-03-01T10:00:00+02:00').utcoffset() == timedelta(hours=2)",
            "E       AttributeError: 'NoneType' object has no attribute 'utcoffset'",
            "",
            "tests/test_dates.py:88: AttributeError",
            "=========================== short test summary info ============================",
            "FAILED tests/test_dates.py::test_parse_timezone - AttributeError: 'NoneType' object has no attribute 'utcoffset'",
            f"========================= 1 failed, {tests - 1} passed in 1.42s =========================",
        ]
    else:
        lines.append(f"============================== {tests} passed in 1.38s ==============================")
    return "\n".join(lines)


def session(seed: int, rounds: int) -> list[dict]:
    """One session: the same story, ``rounds`` rounds of reading callers, drawn with ``seed``."""
    global rng, messages, call_number
    rng, messages, call_number = random.Random(seed), [], 0
    story(rounds)
    return messages


def story(rounds: int) -> None:
    say(
        "system",
        "You are a careful coding agent. Use the bash tool to inspect and change the repository. "
        "Run the tests before you finish.",
    )
    say(
        "user",
        "The function parse_date in src/datekit/parse.py returns None for timestamps with a UTC offset "
        "like '2024-03-01T10:00:00+02:00'. Please fix it so offsets are kept, add a regression test, and make "
        "sure the whole test suite passes. Do not change the public API.",
    )
    run(
        "I'll start by looking at the layout of the repository.",
        "find . -name '*.py' | sort",
        "\n".join(f"./src/datekit/{n}.py" for n in ["__init__", "parse", "format", "zones", "compat", "errors"])
        + "\n"
        + "\n".join(f"./tests/test_{n}.py" for n in ["dates", "format", "zones", "compat"]),
    )
    run("Let me read the parser.", "cat src/datekit/parse.py", source_file("parse", 260))
    run("Now the time zone helpers, since offsets are involved.", "cat src/datekit/zones.py", source_file("zones", 180))
    run("Let me run the tests to see the current state.", "python -m pytest -q tests", pytest_output(True, 140))
    say(
        "assistant",
        "The failing test confirms the bug: parse_date returns None when the string has an offset. "
        "The problem is that the regular expression in parse.py has no group for the offset, so the match fails.",
    )
    run(
        "Let me look at the regular expression.",
        "grep -n 'ISO_RE' -A 12 src/datekit/parse.py",
        "42:ISO_RE = re.compile(\n43:    r'(?P<date>\\d{4}-\\d{2}-\\d{2})'\n44:    r'(?:T(?P<time>\\d{2}:\\d{2}(?::\\d{2})?))?$'\n45:)",
    )
    run(
        "I'll try the quick fix first: strip the offset before matching.",
        "sed -i 's/match = ISO_RE.match(text)/match = ISO_RE.match(text[:19])/' src/datekit/parse.py && python -m pytest -q tests",
        pytest_output(True, 140).replace(
            "AttributeError: 'NoneType' object has no attribute 'utcoffset'",
            "AssertionError: assert None == datetime.timedelta(seconds=7200)",
        ),
    )
    say(
        "assistant",
        "Stripping the offset makes the parse succeed but drops the offset, so the test still fails. "
        "I decided to use an explicit offset group in ISO_RE instead of slicing the string, because the API must "
        "return an aware datetime.",
    )
    run(
        "Revert the quick fix and add an offset group.",
        "git checkout src/datekit/parse.py && python - <<'EOF'\n"
        "import re\np='src/datekit/parse.py'\ns=open(p).read()\n"
        's=s.replace("(?::\\\\d{2})?))?$\'", "(?::\\\\d{2})?)(?P<offset>Z|[+-]\\\\d{2}:\\\\d{2})?)?$\'")\n'
        "open(p,'w').write(s)\nEOF",
        "",
    )
    run(
        "Let me read the zones module's offset parser to reuse it.",
        "sed -n '1,200p' src/datekit/zones.py",
        source_file("zones", 200),
    )
    run(
        "Wire the offset into the result with zones.fixed_offset.",
        "cat >> src/datekit/parse.py <<'EOF'\n\n"
        "def _apply_offset(value, offset):\n    if not offset:\n        return value\n"
        "    return value.replace(tzinfo=fixed_offset(offset))\nEOF",
        "",
    )
    run("Run the tests again.", "python -m pytest -q tests", pytest_output(False, 140))
    run(
        "Add a regression test.",
        "cat >> tests/test_dates.py <<'EOF'\n\ndef test_parse_negative_offset():\n"
        "    assert parse_date('2024-03-01T10:00:00-05:30').utcoffset() == -timedelta(hours=5, minutes=30)\nEOF",
        "",
    )
    for round_ in range(rounds):
        run(
            f"Check the other callers of parse_date (round {round_ + 1}).",
            f"grep -rn 'parse_date' src tests | head -{40 + round_}",
            "\n".join(
                f"src/datekit/{rng.choice(['format', 'compat', 'zones'])}.py:{rng.randint(10, 400)}:    value = parse_date(raw_{i})"
                for i in range(60 + 10 * round_)
            ),
        )
        run(
            "Read the compatibility layer around those calls.",
            f"sed -n '{round_ * 100},{round_ * 100 + 150}p' src/datekit/compat.py",
            source_file("compat", 150),
        )
    run("Run the full suite one last time.", "python -m pytest -q", pytest_output(False, 141))
    say(
        "assistant",
        "All 141 tests pass. Next step: summarize the change for the user. The fix adds an optional "
        "offset group to ISO_RE and applies it with zones.fixed_offset; a regression test covers negative offsets.",
    )
    say("user", "Thanks. Can you also make sure 'Z' is treated as UTC?")
    run(
        "Let me check how 'Z' is handled now.",
        "python -c \"from datekit.parse import parse_date; print(parse_date('2024-03-01T10:00:00Z'))\"",
        "2024-03-01 10:00:00+00:00",
    )
    say(
        "assistant",
        "'Z' already parses as UTC with the new offset group (2024-03-01 10:00:00+00:00). Next, I will add a "
        "test for it so it stays that way.",
    )


def write(path: Path, messages: list[dict]) -> None:
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages), "utf-8")
    print(f"wrote {path}: {len(messages)} messages, {sum(len(m['content'] or '') for m in messages):,} characters")


if __name__ == "__main__":
    here = Path(__file__).parent
    write(here / "session.jsonl", session(7, ROUNDS))
    for name, seed, rounds in (("date-bug-a", 11, 4), ("date-bug-b", 12, 8), ("date-bug-c", 13, 10)):
        write(here / "sessions" / f"{name}.jsonl", session(seed, rounds))
