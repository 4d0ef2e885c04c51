"""The example third-party package (examples/compactor-example-plugin): installed as a user would
install it, selected from a YAML file to replace the summarizer and the store, and used."""

from __future__ import annotations

import importlib
import sqlite3
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from progressive_compactor import CompactionTier, ConfigError, ProgressiveCompactor
from progressive_compactor.plugin_manager import installed_plugins
from progressive_compactor.testing import build_history, window_for

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "compactor-example-plugin"
DISTRIBUTION = "compactor-example-plugin"


@pytest.fixture(scope="session")
def example_plugin():
    """The example package, installed (editable) if it is not yet; ``.ci/run`` installs it too."""
    try:
        metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(EXAMPLE)],
            capture_output=True, text=True,
        )
        assert done.returncode == 0, f"installing {EXAMPLE} failed:\n{done.stdout}\n{done.stderr}"
    importlib.invalidate_caches()
    try:
        importlib.import_module("compactor_example_plugin")
    except ImportError:  # an editable install's path hook is read at interpreter start-up only
        sys.path.insert(0, str(EXAMPLE))
    return installed_plugins()


def write_config(tmp_path: Path) -> Path:
    path = tmp_path / "example.yaml"
    path.write_text(
        f"""
context_window: 16000
work_dir: "{tmp_path}"
plugins:
  summarizer: example-headline
  stores: [example-sqlite-store]
config:
  offload-files: {{root: "{tmp_path}/tool_results"}}
  example-headline: {{max_chars: 80}}
  example-sqlite-store: {{path: "{tmp_path}/records.sqlite3"}}
""",
        "utf-8",
    )
    return path


def test_its_entry_points_are_installed_under_our_group(example_plugin):
    for name in ("example-headline", "example-sqlite-store"):
        assert example_plugin[name].distribution == DISTRIBUTION
    assert example_plugin["example-headline"].value == "compactor_example_plugin.headline:HeadlineSummarizer"


def test_selected_from_yaml_it_replaces_the_summarizer_and_the_store(example_plugin, tmp_path):
    history = build_history([3000] * 12)
    compactor = ProgressiveCompactor(str(write_config(tmp_path)), context_window=window_for(history, 0.85))
    assert compactor.hooks.implementers("summarize") == ["example-headline"]
    assert "store-jsonl" not in compactor.hooks.implementers("persist_record")

    view, record = compactor.compact_with_record(history, "s1")
    assert record.tier is CompactionTier.FULL
    assert record.plugins["summarizer"] == "example-headline"
    assert record.summary_text.startswith("Headline summary: 19 messages folded in")
    assert "Headline summary" in view[1]["content"]
    # The headline cut the request to 80 characters; the core puts it back whole (DESIGN.md facts).
    assert record.anchors[0].content.startswith(history[1]["content"] + "\n")

    rows = sqlite3.connect(tmp_path / "records.sqlite3").execute("SELECT id, tier FROM records").fetchall()
    assert rows == [(record.id, "full")]
    assert compactor.pm.get_plugin("example-sqlite-store").records("s1") == [record]
    assert not (tmp_path / ".compactor").exists() and not any(tmp_path.rglob("*.jsonl"))

    compactor.delete_session("s1")
    assert compactor.pm.get_plugin("example-sqlite-store").records("s1") == []
    compactor.close()


def test_its_config_block_is_checked_by_its_config_class(example_plugin, tmp_path):
    with pytest.raises(ConfigError, match=r"max_char.*\$\.config\.example-headline"):
        ProgressiveCompactor(str(write_config(tmp_path)), config={"example-headline": {"max_char": 3}})


def test_its_own_tests_pass_with_the_fixture_we_ship(example_plugin):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=EXAMPLE, capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout
