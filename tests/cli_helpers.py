"""Helpers shared by the CLI and report tests: a temp config, a synthetic session, the corpus."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

CORPUS_FILE = "msa__django__django-11049__deepseek-chat-test-1-100.jsonl"
NOTICE = re.compile(
    r"⚡ Context compressed \[(Warn|Soft|Full|Emergency)(?: ← (?:Warn|Soft|Full))?\] [0-9.]+[KM]?->[0-9.]+[KM]? tokens "
    r"\((?:\d+% smaller|not smaller)(?:, \d+% of window)?\)\n"
    r"   \d+ anchors \| \d+ offload\([0-9.]+(?:B|KB|MB)\) \| \d+ summarized \| tail: \d+ preserved(?: \| \d+ errors?)?"
)
"""The notice of a compaction that changed the view: two lines, exactly (one space, arrows without
spaces, three-space indent)."""
ANSI = re.compile(r"\x1b\[")


def corpus_file(name: str = CORPUS_FILE) -> Path:
    env = os.environ.get("COMPACTOR_CORPUS")
    folder = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "corpus"
    path = folder / name
    if not path.is_file():
        pytest.skip(f"corpus file {path} not found: set COMPACTOR_CORPUS to the corpus folder")
    return path


def write_config(tmp_path: Path, context_window: int = 8000, **extra: Any) -> Path:
    """A config whose data folder (offloads, records and state) is ``tmp_path``, state in files.

    ``extra`` are further top-level keys; a ``plugins`` mapping is laid over ``{state: state-files}``.
    """
    data: dict[str, Any] = {"context_window": context_window, "data_dir": str(tmp_path)}
    data["plugins"] = {"state": "state-files", **extra.pop("plugins", {})}
    data.update(extra)
    lines = [f"{k}: {json.dumps(v)}" for k, v in data.items()]
    path = tmp_path / "compactor.yaml"
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def synthetic_history(rounds: int = 12) -> list[dict[str, Any]]:
    """An agent session: tool results of ~3,000 characters, every third one ~6,000 (offloadable)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test in app/models.py"},
    ]
    for i in range(rounds):
        size = 120 if i % 3 else 300
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"cat file{i}.py"})},
        }
        messages.append({"role": "assistant", "content": f"Looking at file{i}.py", "tool_calls": [call]})
        messages.append(
            {
                "role": "tool",
                "tool_call_id": f"call_{i}",
                "content": "\n".join(f"line {j} of file{i}.py" for j in range(size)),
            }
        )
    messages.append({"role": "assistant", "content": "Fixed."})
    return messages


def fake_plugins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, source: str, **plugins: str) -> None:
    """Plugins installed for the test, never for real: each ``name=attribute`` of the module
    ``source``, written to ``tmp_path`` (``_`` in a name stands for ``-``)."""
    from progressive_compactor import plugin_manager
    from progressive_compactor.plugin_manager import PluginInfo

    (tmp_path / "fake_cli_plugins.py").write_text(source, "utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fake_cli_plugins", raising=False)
    real = plugin_manager.installed_plugins()
    extra = {
        name.replace("_", "-"): PluginInfo(name.replace("_", "-"), "fake-dist", "1.0", f"fake_cli_plugins:{attr}")
        for name, attr in plugins.items()
    }
    monkeypatch.setattr(plugin_manager, "installed_plugins", lambda: {**real, **extra})


def write_jsonl(path: Path, messages: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), "utf-8")
    return path


SECRET = "hunter2\"p&s\\s<9>'x"
"""A password registered through a ``*_env`` setting (:func:`secret_config`), holding every
character JSON or HTML escapes."""


def secret_config(tmp_path: Path) -> Path:
    """A config (:func:`write_config`) that registers :data:`SECRET`, read from ``TEST_DB_PASSWORD``
    (which the caller sets)."""
    return write_config(tmp_path, config={"summarize-openai": {"api_key_env": "TEST_DB_PASSWORD"}})


def secret_history() -> list[dict[str, Any]]:
    """The synthetic session with two later instructions quoting :data:`SECRET` (facts of the summary)."""
    history = synthetic_history()
    instruction = {"role": "user", "content": f"Connect with the password {SECRET} please."}
    history[6:6] = [instruction]
    history[-3:-3] = [instruction]
    return history


def leaked(text: str) -> bool:
    """``text`` holds :data:`SECRET` as it is, or escaped for JSON or HTML."""
    import html

    return any(form in text for form in (SECRET, json.dumps(SECRET)[1:-1], html.escape(SECRET)))
