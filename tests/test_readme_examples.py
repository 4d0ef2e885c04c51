"""The README's examples are real: the agent loop runs as shown, and the list of built-in plugins
names every one we ship."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path

import pytest

from cli_helpers import NOTICE
from progressive_compactor.plugin_manager import BUILTIN_PLUGINS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text("utf-8")
EXAMPLE = ROOT / "examples" / "agent_loop.py"


def _section(heading: str) -> str:
    start = README.index(heading)
    end = README.find("\n## ", start + len(heading))
    return README[start : end if end > 0 else None]


def _loop_of_the_example() -> str:
    text = EXAMPLE.read_text("utf-8")
    return text[text.index("# --- the loop ---\n") + len("# --- the loop ---\n") : text.index("# --- end ---")]


def test_the_readme_shows_the_loop_the_example_runs() -> None:
    section = _section("## Use it in an agent loop")
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    imports, _, loop = code.group(1).partition("\n\n")
    assert loop == _loop_of_the_example()
    assert imports.startswith("from progressive_compactor import ")
    for name in ("READ_TOOL_RESULT_TOOL", "ProgressiveCompactor", "Session"):
        assert name in imports and name in EXAMPLE.read_text("utf-8")


def test_the_agent_loop_example_compacts_routes_read_tool_result_and_prints_notices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COMPACTOR_DATA_DIR", str(tmp_path))
    found = runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    notices = [m.group(0) for m in NOTICE.finditer(out)]
    assert len(notices) == out.count("⚡") >= 2  # the session compacts at 8,000 tokens
    assert out.rstrip().endswith("Fixed: the failing test passes now.")
    assert "CompactionRecord(" not in out  # the notice, not the whole record
    session = found["session"]
    assert [r.summary() for r in session.records if r.tier] == notices
    # the model's read_tool_result call was answered with the offloaded text, not an error
    history = session.history
    read = next(
        call for m in history for call in m.get("tool_calls") or [] if call["function"]["name"] == "read_tool_result"
    )
    answer = next(m for m in history if m.get("tool_call_id") == read["id"])
    handle = json.loads(read["function"]["arguments"])["handle"]
    assert answer["content"] == "\n".join(f"pytest -q: output line {i}" for i in range(1, 6))
    assert (tmp_path / "tool_results" / handle.split("/")[0]).is_dir()
    # the README shows what it prints
    shown = re.search(r"```text\n(.*?)```", _section("## Use it in an agent loop"), re.S)
    assert shown is not None and shown.group(1) == out


def test_the_readme_lists_every_built_in_plugin() -> None:
    section = _section("### Built-in plugins")
    rows = re.findall(r"^\| (`[a-z-]+`(?:, `[a-z-]+`)*) \|", section, re.M)
    listed = [name for row in rows for name in re.findall(r"`([a-z-]+)`", row)]
    assert sorted(listed) == sorted(BUILTIN_PLUGINS)
