"""``compactor report``: a self-contained HTML page from session files, records, folders, and a
comparison of configs and windows."""

from __future__ import annotations

import html
import itertools
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli_helpers import corpus_file, leaked, synthetic_history, write_config, write_jsonl
from progressive_compactor.cli.app import cli as main
from progressive_compactor.converters import read_records_file as read_records
from progressive_compactor.messages import messages_from_dicts
from progressive_compactor.models import CompactionTier
from progressive_compactor.validation import load_config

pytest.importorskip("plotly", reason="the report needs the optional extra: pip install progressive-compactor[report]")

from progressive_compactor.lab import report  # noqa: E402


def run(*args: object) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_self_contained(page: str) -> None:
    """Opens without network: no external script, stylesheet or image; plotly.js inline."""
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=", page)
    assert not re.search(r"<img[^>]+src=\"?https?:", page)
    assert "Plotly.newPlot" in page
    assert len(re.findall(r"<script[^>]*>", page)) >= 4  # the bundle, then one per chart
    assert len(page) > 1_000_000  # plotly.js itself is in the page


def replay_data(cfg: Path, rounds: int = 12, **kwargs: Any) -> tuple[Any, Any, list[dict[str, Any]]]:
    """A replay of the synthetic session and its report data, with the raw history and prices."""
    from progressive_compactor.compactor import ProgressiveCompactor
    from progressive_compactor.lab.replay import replay_session

    history = synthetic_history(rounds)
    with ProgressiveCompactor(load_config(str(cfg))) as compactor:
        result = replay_session(history, compactor, "s", probes=False, probe_compactions=True)
        thresholds = compactor.hooks.tier_thresholds()
        raw = report.raw_tokens_per_call(history, compactor.hooks.estimate_tokens, [t.index for t in result.turns])
        prices = compactor.config.pricing
    data = report.from_replay(result, thresholds, title="s", raw_tokens=raw, prices=prices, **kwargs)
    return result, data, history


def panel_html(page: str, panel_id: str) -> str:
    """The HTML of one compaction's panel: up to the next panel or the end of the page."""
    start = page.index(f"<details class=panel id='{panel_id}'>")
    end = page.find("<details class=panel", start + 1)
    return page[start : end if end > 0 else None]


# --- one session ------------------------------------------------------------------------------


def test_report_of_a_session(tmp_path: Path, cfg: Path, session: Path) -> None:
    out = tmp_path / "report.html"
    result = run("report", session, "-c", cfg, "-o", out)
    assert result.exit_code == 0, result.output
    page = out.read_text("utf-8")
    assert_self_contained(page)
    assert page.count("Plotly.newPlot") == 4
    for heading in (
        "View tokens per call",
        "Cost per call and in total",
        "Tokens before and after each compaction",
        "Offloaded tool results",
        "Compactions",
    ):
        assert f"<h2>{heading}</h2>" in page
    assert "Soft compaction" in page and "Warn compaction" in page  # legend entries per tier
    assert "raw history (no compaction)" in page and "without compaction" in page
    assert "Prices (US dollars per million tokens)" in page and "$3.00" in page and "$15.00" in page
    assert re.search(r"wrote .*report\.html \(\d+ KB, 1 run, \d+ compactions\)", result.output)
    assert not (tmp_path / "records").exists()  # the replay behind the report used a scratch folder


def test_each_compaction_has_a_panel_with_its_anchors_summary_and_offloads(tmp_path: Path, cfg: Path) -> None:
    _, data, _ = replay_data(cfg)
    page = report.render_html(data)
    panels = re.findall(r"<details class=panel id='(compaction-[^']+)'>", page)
    assert len(panels) == len(data.compactions) > 0
    soft = next(c for c in data.compactions if c.tier is CompactionTier.SOFT and c.record.offloaded)
    panel = panel_html(page, report._panel_id(data, soft))
    for heading in ("User Intent", "Execution Progress", "Key Decisions", "Tried Solutions", "Next Steps"):
        assert f"<th>{heading}</th>" in panel
    assert html.escape(soft.record.summary_text.strip()[:60]) in panel
    for entry in soft.record.offloaded:
        assert html.escape(entry.handle) in panel and f"{entry.chars:,}" in panel
    assert "temporary" in panel  # no folder was kept: the handles cannot be read afterwards
    assert "Facts of the probe set" in panel
    # the table links each compaction to its panel, and a triangle names its panel for the click
    assert all(f"href='#{pid}'" in page for pid in panels)
    fig = report.view_figure(data)
    marked = [d for t in fig.data if t.mode == "markers" for d in t.customdata]
    assert sorted(marked) == sorted(panels)


def test_report_with_keep_prints_commands_that_work(tmp_path: Path, cfg: Path, session: Path) -> None:
    keep = tmp_path / "kept"
    out = tmp_path / "r.html"
    assert run("report", session, "-c", cfg, "--keep", keep, "-o", out).exit_code == 0
    page = html.unescape(out.read_text("utf-8"))
    commands = re.findall(r"compactor show (\S+) --data-dir (\S+)</code>", page)
    assert commands and all(folder == str(keep) for _, folder in commands)
    handle = commands[0][0]
    shown = run("show", handle, "--data-dir", keep)
    assert shown.exit_code == 0 and shown.output.startswith("line 0 of file")


def test_the_report_masks_secrets_before_html_escapes_them(
    tmp_path: Path, secret_cfg: Path, secret_session: Path
) -> None:
    out = tmp_path / "r.html"
    assert run("report", secret_session, "-c", secret_cfg, "-o", out).exit_code == 0
    page = out.read_text("utf-8")
    assert "Connect with the password [REDACTED] please." in html.unescape(page)  # a fact left out
    assert not leaked(page)
    # records written while the secret was not known (its variable unset) hold it: masked in the page
    result = CliRunner().invoke(
        main, ["compact", str(secret_session), "-c", str(secret_cfg)], env={"TEST_DB_PASSWORD": ""}
    )
    assert result.exit_code == 0 and leaked((tmp_path / "records" / "sess.jsonl").read_text("utf-8"))
    assert run("report", tmp_path / "records" / "sess.jsonl", "-c", secret_cfg, "-o", out).exit_code == 0
    page = out.read_text("utf-8")
    assert "[REDACTED]" in page and not leaked(page)


def test_view_figure_bands_window_raw_history_and_a_marker_per_compaction(tmp_path: Path, cfg: Path) -> None:
    result, data, history = replay_data(cfg)
    fig = report.view_figure(data)
    bands = [s for s in fig.layout.shapes if s.type == "rect"]
    assert [round(b.y0) for b in bands] == [4800, 5600, 6400, 7600]  # 60/70/80/95 % of 8,000
    assert round(bands[-1].y1) == 8000  # the last band ends at the window
    assert any(s.type == "line" and s.y0 == 8000 for s in fig.layout.shapes)
    markers = [t for t in fig.data if t.mode == "markers"]
    assert sum(len(t.x) for t in markers) == len(data.compactions) > 0
    assert {t.name.split()[0] for t in markers} <= {t.label for t in CompactionTier}
    line = next(t for t in fig.data if t.name == "view sent")
    assert list(line.y) == [t.view_tokens for t in result.turns]
    raw = next(t for t in fig.data if t.name == "raw history (no compaction)")
    from progressive_compactor.compactor import ProgressiveCompactor

    with ProgressiveCompactor(load_config(str(cfg))) as compactor:
        counts = compactor.hooks.estimate_tokens(messages_from_dicts(history))
    prefix = [0, *itertools.accumulate(counts)]
    assert list(raw.y) == [prefix[t.index] for t in result.turns]  # the whole history before each call
    assert list(raw.y)[0] == result.turns[0].record.tokens_before  # before any compaction: the same view


def test_the_call_where_the_raw_history_passes_the_window_is_marked(tmp_path: Path, cfg: Path) -> None:
    _, data, _ = replay_data(cfg)
    at = data.overflow_call
    assert at is not None
    assert data.raw_tokens[at - 1] > 8000 >= data.raw_tokens[at - 2]
    fig = report.view_figure(data)
    assert any(s.type == "line" and s.x0 == at == s.x1 for s in fig.layout.shapes)
    assert any(f"passes the window at call {at}" in (a.text or "") for a in fig.layout.annotations)


def test_band_labels_sit_in_the_margin_apart_from_each_other(tmp_path: Path, cfg: Path) -> None:
    _, data, _ = replay_data(cfg)
    fig = report.view_figure(data)
    labels = [a for a in fig.layout.annotations if a.xref == "paper" and a.x == 1.0]
    assert {a.text.split()[0] for a in labels} == {"Warn", "Soft", "Full", "Emergency", "window"}
    assert all(a.xanchor == "left" for a in labels)  # right of the plot area: clear of every line
    ys = sorted(a.y for a in labels)
    top = fig.layout.yaxis.range[1]
    plot_px = report.VIEW_HEIGHT - report.VIEW_MARGIN["t"] - report.VIEW_MARGIN["b"] - 50
    gap = report.LABEL_PX * top / plot_px
    assert all(b - a >= gap - 1e-6 for a, b in itertools.pairwise(ys))


@pytest.mark.parametrize(
    "wanted, ceiling, expected",
    [
        ([1, 2, 3], None, [1, 2, 3]),
        ([5, 5, 5], None, [5, 6, 7]),
        ([0, 0.2, 10], None, [0.5, 1.5, 10]),
        ([5, 5, 5], 6, [4, 5, 6]),
        ([], 6, []),
    ],
)
def test_spread(wanted: list[float], ceiling: float | None, expected: list[float]) -> None:
    assert report.spread(wanted, 1, floor=0.5, ceiling=ceiling) == pytest.approx(expected)


def test_cost_per_call_and_in_total_against_no_compaction(tmp_path: Path, cfg: Path) -> None:
    from progressive_compactor.pricing import call_cost

    result, data, _ = replay_data(cfg)
    assert list(data.cost) == pytest.approx([t.cost.total for t in result.turns])
    expected, previous = [], 0
    for t, raw in zip(result.turns, data.raw_tokens, strict=True):
        expected.append(
            call_cost(data.prices, view_tokens=raw, cached_tokens=previous, output_tokens=t.output_tokens).total
        )
        previous = raw
    assert list(data.baseline_cost) == pytest.approx(expected)
    fig = report.cost_figure(data)
    cumulative = next(t for t in fig.data if t.name == "cumulative, with compaction")
    assert cumulative.y[-1] == pytest.approx(result.cost.total)
    baseline = next(t for t in fig.data if t.name == "cumulative, without compaction")
    assert baseline.y[-1] == pytest.approx(sum(expected))
    assert fig.layout.yaxis.rangemode == "tozero" and fig.layout.yaxis.tickprefix == "$"


def test_before_after_legend_has_each_tier_colour_and_readable_labels(tmp_path: Path, cfg: Path) -> None:
    _, data, _ = replay_data(cfg)
    fig = report.before_after_figure(data)
    after = [t for t in fig.data if t.name.startswith("tokens after")]
    tiers = {c.tier for c in data.compactions}
    assert {t.name for t in after} == {f"tokens after, {tier.label}" for tier in tiers}
    assert all(t.marker.color == report.TIER_COLOURS[CompactionTier[t.name.split(", ")[1].upper()]] for t in after)
    assert all(t.offsetgroup == "after" and t.textangle == 0 and t.textfont.size >= 12 for t in after)
    labels = [label for t in after for label in t.text]
    assert len(labels) == len(data.compactions) and all(re.fullmatch(r"−\d+%", label) for label in labels)
    assert fig.layout.yaxis.range[1] > max(c.tokens_before for c in data.compactions)  # room for the labels


def test_offload_axis_starts_at_zero(tmp_path: Path, cfg: Path) -> None:
    _, data, _ = replay_data(cfg)
    fig = report.offload_figure(data)
    assert fig.layout.yaxis.rangemode == "tozero"
    total = next(t for t in fig.data if t.name == "running total (KB)")
    assert total.y[-1] == pytest.approx(sum(c.offloaded_bytes for c in data.compactions) / 1000)
    assert all(t.offsetgroup == "offloaded" for t in fig.data if t.type == "bar")


def test_custom_thresholds_move_the_bands(tmp_path: Path, session: Path) -> None:
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
    cfg = write_config(
        tmp_path,
        plugins={"policy": "policy-single-threshold"},
        config={"policy-single-threshold": {"threshold": 0.75, "tier": "full"}},
    )
    out = tmp_path / "single.html"
    result = run("report", session, "-c", cfg, "-o", out)
    assert result.exit_code == 0, result.output
    assert "thresholds full 75% of the window." in out.read_text("utf-8")


# --- records ----------------------------------------------------------------------------------


def test_report_of_records_describes_only_what_it_draws(tmp_path: Path, cfg: Path, session: Path) -> None:
    keep = tmp_path / "kept"
    assert run("replay", session, "-c", cfg, "--keep", keep).exit_code == 0
    records_file = keep / "records" / "sess.jsonl"
    out = tmp_path / "records.html"
    result = run("report", records_file, "-o", out, "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    changed = [r for r in read_records(records_file) if report.changed_view(r)]
    assert info["compactions"] == len(changed) > 0 and info["runs"] == 1
    page = out.read_text("utf-8")
    assert_self_contained(page)
    assert "stored compaction records" in page
    assert "<h2>View tokens per record</h2>" in page
    for not_drawn in ("black line", "raw history", "dotted green", "Cost per call"):
        assert not_drawn not in page, not_drawn
    assert "no line per call" in page
    # the records came from a kept replay: its folder reads the offloaded results back
    assert f"--data-dir {keep}" in html.unescape(page)


# --- several inputs, folders, comparisons -----------------------------------------------------


def test_several_files_a_folder_and_the_default_output_name(
    tmp_path: Path, cfg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", synthetic_history(12))
    write_jsonl(folder / "b.jsonl", synthetic_history(6))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = run("report", folder, "-c", cfg, "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["output"] == "sessions-report.html" and info["runs"] == 2
    page = (work / "sessions-report.html").read_text("utf-8")
    assert "<h2>Every run</h2>" in page and "<h2>a</h2>" in page and "<h2>b</h2>" in page
    single = run("report", folder / "a.jsonl", "-c", cfg)
    assert single.exit_code == 0 and (work / "a-report.html").is_file()
    both = run("report", folder / "a.jsonl", folder / "b.jsonl", "-c", cfg, "--json")
    assert json.loads(both.output)["output"] == "compactor-report.html"


def test_a_comparison_of_configs_and_windows(tmp_path: Path, cfg: Path, session: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(cfg.read_text("utf-8") + "config: {policy-cost: {warn: 0.5}}\n", "utf-8")
    out = tmp_path / "cmp.html"
    result = run("report", session, "-c", cfg, "-c", other, "-w", "8000", "-w", "16000", "-o", out, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["runs"] == 4
    page = out.read_text("utf-8")
    assert "<h1>Compaction comparison</h1>" in page and "<h2>sess</h2>" in page
    labels = re.findall(r"<tr><td class=where>([^<]+)</td>", page)
    assert labels == ["compactor · 8k window", "compactor · 16k window", "other · 8k window", "other · 16k window"]
    assert "warn 50%" in page and "warn 60%" in page  # each config's thresholds
    assert page.count("<details class=panel id=") == len(re.findall(r"<td class=where><a href=", page)) > 0


def test_configs_with_the_same_file_name_are_told_apart(tmp_path: Path, cfg: Path, session: Path) -> None:
    twin = tmp_path / "twin"
    twin.mkdir()
    copy = twin / cfg.name
    copy.write_text(cfg.read_text("utf-8"), "utf-8")
    out = tmp_path / "twins.html"
    assert run("report", session, "-c", cfg, "-c", copy, "-o", out).exit_code == 0
    labels = re.findall(r"<tr><td class=where>([^<]+)</td>", out.read_text("utf-8"))
    assert labels == [html.escape(str(cfg)), html.escape(str(copy))]


def test_every_panel_of_a_comparison_has_its_own_id(tmp_path: Path, cfg: Path) -> None:
    """A link of the table, a click on a triangle open the panel of their own run: ids are not
    cut to the same start when a session's name (or a config's path) is long."""
    session = write_jsonl(tmp_path / ("agent-session-" + "x" * 60 + ".jsonl"), synthetic_history())
    other = tmp_path / "other.yaml"
    other.write_text(cfg.read_text("utf-8"), "utf-8")
    out = tmp_path / "cmp.html"
    assert run("report", session, "-c", cfg, "-c", other, "-o", out).exit_code == 0
    page = out.read_text("utf-8")
    ids = re.findall(r"<details class=panel id='(compaction-[^']+)'>", page)
    assert len(ids) > 2 and len(set(ids)) == len(ids)
    assert sorted(re.findall(r"<td class=where><a href='#([^']+)'>", page)) == sorted(ids)


def test_panel_ids_are_ascii_and_apart_for_sessions_named_in_other_scripts(tmp_path: Path, cfg: Path) -> None:
    """The page's script opens the panel a link names: the browser hands it the link percent-encoded
    when it is not ASCII, and no element has that id."""
    names = ["会话", "セッ"]
    for name in names:
        write_jsonl(tmp_path / f"{name}.jsonl", synthetic_history())
    out = tmp_path / "cmp.html"
    assert run("report", *(tmp_path / f"{n}.jsonl" for n in names), "-c", cfg, "-o", out).exit_code == 0
    ids = re.findall(r"<details class=panel id='(compaction-[^']+)'>", out.read_text("utf-8"))
    assert len(ids) > 2 and len(set(ids)) == len(ids)
    assert all(i.isascii() for i in ids)


def test_comparison_function_for_other_commands(tmp_path: Path, cfg: Path) -> None:
    """``render_page`` takes any list of runs: what ``compactor ab`` can call with its replays."""
    _, first, _ = replay_data(cfg, rounds=12, label="A")
    _, second, _ = replay_data(cfg, rounds=8, label="B")
    page = report.render_page([first, second], title="A against B")
    assert "<h1>A against B</h1>" in page
    assert re.findall(r"<tr><td class=where>([^<]+)</td>", page) == ["A", "B"]
    assert page.count("<h2>s</h2>") == 1  # one section for the session both runs replayed
    fig = report.comparison_view_figure([first, second])
    assert [t.name for t in fig.data] == ["raw history (no compaction)", "A", "B"]
    assert list(fig.data[1].y) == list(first.view_tokens) and list(fig.data[2].y) == list(second.view_tokens)
    cost = report.comparison_cost_figure([first, second])
    assert [t.name for t in cost.data] == ["without compaction", "A", "B"]
    assert cost.data[1].y[-1] == pytest.approx(sum(first.cost))


# --- errors -----------------------------------------------------------------------------------


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
    nothing = tmp_path / "nothing"
    nothing.mkdir()
    result = run("report", nothing, "-o", tmp_path / "x.html")
    assert result.exit_code == 1 and "no *.jsonl session files" in result.output


def test_report_never_writes_over_an_input(tmp_path: Path, cfg: Path, session: Path) -> None:
    before = session.read_bytes()
    result = run("report", session, "-c", cfg, "-o", session)
    assert result.exit_code == 2 and "is the input file" in result.output
    assert session.read_bytes() == before
    result = run("report", tmp_path, "-c", cfg, "-o", session)  # a folder's session is an input too
    assert result.exit_code == 2 and session.read_bytes() == before


# --- a real session ---------------------------------------------------------------------------


@pytest.mark.corpus
def test_report_of_a_corpus_session_at_16k(tmp_path: Path, cfg: Path) -> None:
    """A holdout-like session: a Claude Code trajectory replayed at 16k tokens; its Full compaction
    shows its anchors and the handle of the result it offloaded, with a command that reads it."""
    out = tmp_path / "corpus.html"
    keep = tmp_path / "kept"
    source = corpus_file("claudecode__entire-cli__5504c1f4266f-0.jsonl")
    result = run("report", source, "-c", cfg, "-w", "16000", "--keep", keep, "-o", out)
    assert result.exit_code == 0, result.output
    page = out.read_text("utf-8")
    assert_self_contained(page)
    panel = html.unescape(panel_html(page, "compaction-claudecode--entire-cli--5504c1f4266f-0-7"))
    assert ">Full</span> at call 7 (message 15)" in panel
    assert "<th>User Intent</th>" in panel and "can you review the changes in this branch?" in panel
    handle = re.search(r"compactor show (\S+) --data-dir (\S+)</code>", panel)
    assert handle is not None and handle.group(2) == str(keep)
    shown = run("show", handle.group(1), "--data-dir", keep)
    assert shown.exit_code == 0 and len(shown.output) > 10_000


def test_the_price_table_names_every_price_the_costs_use() -> None:
    """A cache-friendly summary request's cached input has its own price (by default the cached
    input's): the table shows it, as the costs charge it."""
    from progressive_compactor.pricing import PriceTable

    row = "<tr><th>summarizer input read from the prompt cache</th><td class=num>${}</td></tr>"
    assert row.format("0.05") in report.price_table(PriceTable(summarizer_cached_input=0.05))
    assert row.format("0.30") in report.price_table(PriceTable())
