"""The example third-party package (examples/compactor-example-plugin): installed as a user would
install it, selected from a YAML file to replace the summarizer and the store, and used, through
the library and through the ``compactor`` command."""

from __future__ import annotations

import ast
import importlib
import json
import sqlite3
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from click.testing import CliRunner

from progressive_compactor import CompactionTier, ConfigError, ProgressiveCompactor
from progressive_compactor.cli.app import cli as main
from progressive_compactor.plugin_manager import installed_plugins
from progressive_compactor.testing import build_history, compaction_message, window_for

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
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, f"installing {EXAMPLE} failed:\n{done.stdout}\n{done.stderr}"
    importlib.invalidate_caches()
    try:
        importlib.import_module("compactor_example_plugin")
    except ImportError:  # an editable install's path hook is read at interpreter start-up only
        sys.path.insert(0, str(EXAMPLE))
    return installed_plugins()


def write_config(tmp_path: Path) -> Path:
    """The example plugins selected from YAML; every file in the data folder ``tmp_path``."""
    path = tmp_path / "example.yaml"
    path.write_text(
        f"""
context_window: 16000
data_dir: "{tmp_path}"
plugins:
  summarizer: example-headline
  stores: [example-sqlite-store]
config:
  example-headline: {{max_chars: 80}}
""",
        "utf-8",
    )
    return path


def cli(*args: object) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def test_its_entry_points_are_installed_under_our_group(example_plugin):
    for name in ("example-headline", "example-sqlite-store"):
        assert example_plugin[name].distribution == DISTRIBUTION
    assert example_plugin["example-headline"].value == "compactor_example_plugin.headline:HeadlineSummarizer"


def test_it_imports_only_the_declared_plugin_api():
    for path in sorted((EXAMPLE / "compactor_example_plugin").glob("*.py")):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        ours = {m for m in imported if m.split(".")[0] == "progressive_compactor"}
        assert ours <= {"progressive_compactor.plugin"}, (path.name, ours)


def test_selected_from_yaml_it_replaces_the_summarizer_and_the_store(example_plugin, tmp_path):
    history = build_history([3000] * 12)
    compactor = ProgressiveCompactor(str(write_config(tmp_path)), context_window=window_for(history, 0.85))
    assert compactor.hooks.implementers("summarize") == ["example-headline"]
    assert "store-jsonl" not in compactor.hooks.implementers("persist_record")

    view, record = compactor.compact_with_record(history, "s1")
    assert record.tier is CompactionTier.FULL
    assert record.plugins["summarizer"] == "example-headline"
    assert record.summary_text.startswith("Headline summary: 19 messages folded in")
    assert "Headline summary" in compaction_message(view)["content"]
    # The headline cut the request to 80 characters; the core puts it back whole (the core's own facts).
    assert record.anchors[0].content.startswith(history[1]["content"] + "\n")

    # the database is in the data folder, where "{data_dir}/records.sqlite3" (the default) puts it
    rows = sqlite3.connect(tmp_path / "records.sqlite3").execute("SELECT id, tier FROM records").fetchall()
    assert rows == [(record.id, "full")]
    assert compactor.pm.get_plugin("example-sqlite-store").records("s1") == [record]
    assert compactor.records("s1") == [record]  # through the read_records hook
    assert not any(tmp_path.rglob("*.jsonl"))

    compactor.delete_session("s1")
    assert compactor.pm.get_plugin("example-sqlite-store").records("s1") == []
    assert compactor.records("s1") is None
    compactor.close()


def test_its_config_block_is_checked_by_its_config_class(example_plugin, tmp_path):
    with pytest.raises(ConfigError) as info:
        ProgressiveCompactor(str(write_config(tmp_path)), config={"example-headline": {"max_char": 3}})
    (problem,) = info.value.problems
    assert problem.startswith("unknown setting 'max_char'; did you mean 'max_chars'?")
    assert problem.endswith("@ $.config.example-headline")


def test_compactor_records_reads_the_sqlite_store(example_plugin, tmp_path):
    config = write_config(tmp_path)
    history = build_history([3000] * 12)
    with ProgressiveCompactor(str(config), context_window=window_for(history, 0.85)) as compactor:
        _, first = compactor.compact_with_record(history, "s1")
        compactor.compact_force(history, "s1")
    as_json = cli("records", "s1", "-c", config, "--json")
    assert as_json.exit_code == 0, as_json.output
    records = [json.loads(line) for line in as_json.output.splitlines()]
    assert [r["tier"] for r in records] == ["full", "emergency"]
    assert records[0]["id"] == first.id and records[0]["session_id"] == "s1"
    table = cli("records", "s1", "-c", config)
    assert table.exit_code == 0, table.output
    assert "2 records in session s1" in table.output and "Emergency" in table.output
    missing = cli("records", "s2", "-c", config)
    assert missing.exit_code == 1
    assert "no records for session 's2'" in missing.output and "(stores: example-sqlite-store)" in missing.output


def test_compactor_gc_older_than_finds_old_sessions_in_the_sqlite_store(example_plugin, tmp_path):
    config = write_config(tmp_path)
    history = build_history([3000] * 12)
    with ProgressiveCompactor(str(config), context_window=window_for(history, 0.85)) as compactor:
        for sid in ("old", "new"):
            compactor.compact_with_record(history, sid)
    with sqlite3.connect(tmp_path / "records.sqlite3") as db:  # the old session last wrote ten days ago
        db.execute("UPDATE records SET timestamp = '2020-01-01T00:00:00.000+00:00' WHERE session_id = 'old'")
    dry = cli("gc", "--older-than", "7d", "-c", config, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.output)
    assert [item["session"] for item in plan["removed"]] == ["old"]
    assert plan["removed"][0]["where"] == [
        {"plugin": "example-sqlite-store", "where": str(tmp_path / "records.sqlite3")}
    ]
    real = cli("gc", "--older-than", "7d", "-c", config)
    assert real.exit_code == 0, real.output
    assert "removed session old" in real.output
    sessions = sqlite3.connect(tmp_path / "records.sqlite3").execute("SELECT DISTINCT session_id FROM records")
    assert [row[0] for row in sessions] == ["new"]


def test_its_own_tests_pass_with_the_fixture_we_ship(example_plugin):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed" in done.stdout
