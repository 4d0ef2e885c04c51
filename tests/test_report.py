"""``compactor report``: a self-contained HTML page from a session file or from stored records."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli_helpers import corpus_file, synthetic_history
from progressive_compactor.cli.app import cli as main
from progressive_compactor.converters import read_records_file as read_records
from progressive_compactor.models import CompactionTier
from progressive_compactor.validation import load_config

pytest.importorskip("plotly", reason="the report needs the optional extra: pip install progressive-compactor[report]")

from progressive_compactor.lab import report  # noqa: E402


def run(*args: object) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_self_contained(page: str) -> None:
    """Opens without network: no external script, stylesheet or image; plotly.js inline."""
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=", page)
    assert not re.search(r"<img[^>]+src=\"?https?:", page)
    assert "Plotly.newPlot" in page
    assert len(re.findall(r"<script[^>]*>", page)) >= 4  # the bundle, then one per chart
    assert len(page) > 1_000_000  # plotly.js itself is in the page


def test_report_of_a_session(tmp_path: Path, cfg: Path, session: Path) -> None:
    out = tmp_path / "report.html"
    result = run("report", session, "-c", cfg, "-o", out)
    assert result.exit_code == 0, result.output
    page = out.read_text("utf-8")
    assert_self_contained(page)
    assert page.count("Plotly.newPlot") == 3
    assert "View tokens per turn" in page and "Tokens before and after each compaction" in page
    assert "Offloaded tool results" in page
    assert "Soft compaction" in page and "Warn compaction" in page  # legend entries per tier
    assert re.search(r"wrote .*report\.html \(\d+ KB, \d+ compactions\)", result.output)
    assert not (tmp_path / "records").exists()  # the replay behind the report used a scratch folder


def test_report_of_records(tmp_path: Path, cfg: Path, session: Path) -> None:
    keep = tmp_path / "kept"
    assert run("replay", session, "-c", cfg, "--keep", keep).exit_code == 0
    records_file = keep / "records" / "sess.jsonl"
    out = tmp_path / "records.html"
    result = run("report", records_file, "-o", out, "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    changed = [r for r in read_records(records_file) if report.changed_view(r)]
    assert info["compactions"] == len(changed) > 0
    page = out.read_text("utf-8")
    assert_self_contained(page)
    assert "read from stored compaction records" in page


def test_view_figure_has_four_bands_the_window_and_a_marker_per_compaction(
    tmp_path: Path, cfg: Path, session: Path
) -> None:
    from progressive_compactor.compactor import ProgressiveCompactor
    from progressive_compactor.lab.replay import replay_session

    config = load_config(str(cfg))
    with ProgressiveCompactor(config) as compactor:
        result = replay_session(synthetic_history(), compactor, "s", probes=False)
        thresholds = compactor.hooks.tier_thresholds()
    data = report.from_replay(result, thresholds, title="s")
    fig = report.view_figure(data)
    bands = [s for s in fig.layout.shapes if s.type == "rect"]
    assert [round(b.y0) for b in bands] == [4800, 5600, 6400, 7600]  # 60/70/80/95 % of 8,000
    assert any(s.type == "line" and s.y0 == 8000 for s in fig.layout.shapes)
    markers = [t for t in fig.data if t.mode == "markers"]
    marked = sum(len(t.x) for t in markers)
    assert marked == len(data.compactions) > 0
    assert {t.name.split()[0] for t in markers} <= {t.label for t in CompactionTier}
    line = next(t for t in fig.data if t.name == "view tokens sent")
    assert list(line.y) == [t.view_tokens for t in result.turns]


def test_custom_thresholds_move_the_bands(tmp_path: Path, session: Path) -> None:
    from cli_helpers import write_config

    custom = {"warn": 0.5, "soft": 0.6, "full": 0.7, "emergency": 0.9}
    cfg = write_config(tmp_path, config={"policy-cost": custom})
    out = tmp_path / "custom.html"
    result = run("report", session, "-c", cfg, "-o", out)
    assert result.exit_code == 0, result.output
    assert "thresholds warn 50%, soft 60%, full 70%, emergency 90% of the window." in out.read_text("utf-8")
    bands = report.bands(custom)
    assert [(tier, low) for tier, low, _ in bands] == [
        (CompactionTier.WARN, 0.5),
        (CompactionTier.SOFT, 0.6),
        (CompactionTier.FULL, 0.7),
        (CompactionTier.EMERGENCY, 0.9),
    ]


def test_the_report_draws_what_the_policy_reports(tmp_path: Path, session: Path) -> None:
    from cli_helpers import write_config

    cfg = write_config(
        tmp_path,
        plugins={"policy": "policy-single-threshold"},
        config={"policy-single-threshold": {"threshold": 0.75, "tier": "full"}},
    )
    out = tmp_path / "single.html"
    result = run("report", session, "-c", cfg, "-o", out)
    assert result.exit_code == 0, result.output
    assert "thresholds full 75% of the window." in out.read_text("utf-8")


def test_missing_plotly_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cfg: Path, session: Path
) -> None:
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly now raises ImportError
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", str(session), "-c", str(cfg), "-o", str(out)])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error: the HTML report needs plotly, an optional extra: pip install 'progressive-compactor[report]'"
    )
    assert not out.exists()


def test_report_bad_input(tmp_path: Path, cfg: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", "utf-8")
    result = run("report", empty, "-o", tmp_path / "x.html")
    assert result.exit_code == 1 and "empty file" in result.output
    result = run("report", tmp_path / "missing.jsonl", "-o", tmp_path / "x.html")
    assert result.exit_code == 1 and "no such file" in result.output
    assert not (tmp_path / "x.html").exists()


@pytest.mark.corpus
def test_report_of_a_corpus_session(tmp_path: Path, cfg: Path) -> None:
    out = tmp_path / "corpus.html"
    result = run("report", corpus_file(), "-c", cfg, "-w", "16000", "-o", out)
    assert result.exit_code == 0, result.output
    assert_self_contained(out.read_text("utf-8"))
