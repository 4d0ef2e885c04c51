"""``compactor ab replay`` and ``compactor ab report``: one cost, honest statistics, readable tables."""

from __future__ import annotations

import json
import os
import shutil
import stat
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from progressive_compactor.cli.app import cli as main
from progressive_compactor.lab.experiment import ExperimentCompactor
from progressive_compactor.lab.probes import CATEGORIES
from progressive_compactor.testing import build_history

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "sessions"
FROM_RECORDS = ("cost", "peak_tokens", "overflow_turns", "overflow_sessions", "cached_share")
FROM_RECORDS += ("summarizer_calls", "summarizer_tokens", "compactions")
"""The metrics records alone can give (retention and invalid views need the transcript)."""


def run(*args: Any, columns: int = 120) -> Any:
    result = CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": str(columns)})
    return result


def run_json(*args: Any) -> dict[str, Any]:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def per_session(data: dict[str, Any], metric: str) -> dict[tuple[str, str], float | None]:
    return {(v, s): m[metric] for v, sessions in data["per_session"].items() for s, m in sessions.items()}


def assert_agree(replayed: dict[str, Any], reported: dict[str, Any]) -> None:
    """Replay and records give the same numbers, exactly, for everything records can give."""
    assert reported["prices"] == replayed["prices"] and reported["cost_definition"] == replayed["cost_definition"]
    assert reported["sessions"] == replayed["sessions"] and reported["control"] == replayed["control"]
    for metric in FROM_RECORDS:
        assert per_session(reported, metric) == per_session(replayed, metric), metric
        assert reported["metrics"][metric] == replayed["metrics"][metric], metric


def test_replay_and_records_agree_to_the_cent(tmp_path):
    records = tmp_path / "records"
    replayed = run_json("ab", "replay", EXAMPLES, "-e", "ab-example", "-w", "16000", "--records-dir", records)
    assert replayed["paired"] is True and sorted(replayed["sessions"].values()) == [3, 3, 3]
    assert replayed["prices"]["input"] == 3.0 and replayed["prices"]["summarizer_output"] == 15.0
    # the summarizer is part of the cost on both sides
    assert all(value > 0 for value in per_session(replayed, "summarizer_tokens").values())
    assert sorted(p.name for p in records.iterdir()) == [
        ".ab-replay-folders",
        "cache-aware",
        "default",
        "one-threshold",
    ]
    reported = run_json("ab", "report", records, "-e", "ab-example")
    assert reported["cost_covers_every_turn"] is True and reported["duplicates_ignored"] == 0
    assert_agree(replayed, reported)
    cost = replayed["metrics"]["cost"]["differences"]["cache-aware"]
    assert cost["test"] == "paired t-test" and cost["n"] == 3


def test_replay_and_records_agree_on_corpus_sessions(tmp_path, corpus_dir):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for path in sorted(corpus_dir.glob("*.jsonl"))[:4]:
        (corpus / path.name).symlink_to(path)
    records = tmp_path / "records"
    replayed = run_json("ab", "replay", corpus, "-e", "ab-example", "-w", "16000", "--records-dir", records)
    reported = run_json("ab", "report", records, "-e", "ab-example")
    assert_agree(replayed, reported)
    assert sum(per_session(replayed, "summarizer_calls").values()) > 0


def test_the_records_folder_and_its_missing_parents_are_owner_only(tmp_path):
    records = tmp_path / "new" / "records"
    old = os.umask(0o022)  # the usual one: folders made by default would be 0755
    try:
        run_json("ab", "replay", EXAMPLES, "-e", "ab-example", "-w", "16000", "--records-dir", records, "--limit", "1")
    finally:
        os.umask(old)
    assert [stat.S_IMODE(f.stat().st_mode) for f in (records, records.parent)] == [0o700, 0o700]


def test_a_rerun_into_the_same_records_folder_does_not_double_costs(tmp_path):
    records = tmp_path / "records"
    args = ("ab", "replay", EXAMPLES, "-e", "ab-example", "-w", "16000", "--records-dir", records, "--limit", "2")
    first = run_json(*args)
    run_json(*args)  # the same replay again, into the same folder
    reported = run_json("ab", "report", records, "-e", "ab-example")
    assert reported["records"] == sum(1 for f in records.rglob("*.jsonl") for _ in f.open())
    assert_agree(first, reported)
    # records read twice (a file appended to itself) count once
    file = records / "default" / "date-bug-a.jsonl"
    text = file.read_text("utf-8")
    file.write_text(text * 2, "utf-8")
    again = run_json("ab", "report", records, "-e", "ab-example")
    assert again["duplicates_ignored"] == text.count("\n") > 0
    assert_agree(first, again)
    # a copy of a folder (the same ids) adds nothing
    shutil.copytree(records / "default", records / "copy")
    copied = run_json("ab", "report", records, "-e", "ab-example")
    assert copied["duplicates_ignored"] > again["duplicates_ignored"]
    assert_agree(first, copied)
    # another run of one variant in another folder (other ids) is left out, not added
    run_json(*args[:-4], "--records-dir", tmp_path / "second", "--limit", "2")
    (records / "old-run").mkdir()
    shutil.copy(tmp_path / "second" / "default" / "date-bug-a.jsonl", records / "old-run")
    mixed = run_json("ab", "report", records, "-e", "ab-example")
    assert mixed["excluded_several_runs"] == ["date-bug-a"]
    # left out under every variant, so that the variants are still compared on the same sessions
    assert mixed["sessions"] == {"default": 1, "cache-aware": 1, "one-threshold": 1}


def test_a_rerun_replaces_every_record_an_earlier_run_left_and_nothing_else(tmp_path):
    records = tmp_path / "records"
    (records / "notes").mkdir(parents=True)
    (records / "notes" / "mine.jsonl").write_text("{}\n", "utf-8")  # someone else's: kept
    (records / "README").write_text("mine", "utf-8")
    run_json("ab", "replay", EXAMPLES, "-e", "ab-example", "-w", "64000", "--workers", "1", "--records-dir", records)
    # the second run: another window, fewer sessions, one variant fewer
    fewer = tmp_path / "fewer.yaml"
    fewer.write_text(
        "experiment:\n  control: default\n  variants:\n    default: {config: default}\n"
        "    cache-aware: {config: cache-aware}\n",
        "utf-8",
    )
    args = ("-w", "16000", "--workers", "1", "--limit", "1", "--records-dir", records)
    second = run_json("ab", "replay", EXAMPLES, "-e", fewer, *args)
    folders = [".ab-replay-folders", "README", "cache-aware", "default", "notes"]
    assert sorted(p.name for p in records.iterdir()) == folders
    assert (records / "notes" / "mine.jsonl").read_text("utf-8") == "{}\n"
    assert sorted(p.name for p in (records / "default").iterdir()) == ["date-bug-a.jsonl"]
    (records / "notes" / "mine.jsonl").unlink()  # not records: ab report would choke on it
    reported = run_json("ab", "report", records, "-e", fewer)
    assert reported["sessions"] == {"default": 1, "cache-aware": 1}
    assert_agree(second, reported)


def test_a_report_says_when_records_of_different_windows_are_compared(tmp_path):
    records, other = tmp_path / "records", tmp_path / "other"
    args = ("ab", "replay", EXAMPLES, "-e", "ab-example", "--workers", "1", "--limit", "2")
    run_json(*args, "-w", "16000", "--records-dir", records)
    same = run_json("ab", "report", records, "-e", "ab-example")
    assert same["context_windows"] == [16000]
    run_json("ab", "replay", EXAMPLES, "-e", "ab-example", "-w", "64000", "--workers", "1", "--records-dir", other)
    shutil.copy(other / "default" / "date-bug-c.jsonl", records / "default")
    mixed = run_json("ab", "report", records, "-e", "ab-example")
    assert mixed["context_windows"] == [16000, 64000]
    text = run("ab", "report", records, "-e", "ab-example", columns=100)
    assert "warning: the records compared were written at different context windows (16,000 and 64,000 " in (
        " ".join(text.stdout.split())
    )


def test_a_session_without_an_llm_call_is_left_out_of_a_replay_as_of_its_records(tmp_path):
    corpus, records = tmp_path / "corpus", tmp_path / "records"
    corpus.mkdir()
    talk = [
        {"role": "user", "content": "Please write a poem about the sea and the sky."},
        {"role": "assistant", "content": "The sea is blue."},
        {"role": "user", "content": "Another one please, about the mountains."},
        {"role": "assistant", "content": "Mountains are tall."},
    ]
    for name, messages in (("a", talk), ("b", talk[:1]), ("c", talk)):  # b: one user message, no call
        (corpus / f"{name}.jsonl").write_text("".join(json.dumps(m) + "\n" for m in messages), "utf-8")
    args = ("ab", "replay", corpus, "-e", "ab-example", "-w", "16000", "--workers", "1")
    replayed = run_json(*args, "--records-dir", records)
    assert replayed["sessions"] == {"default": 2, "cache-aware": 2, "one-threshold": 2}
    assert replayed["sessions_without_calls"] == ["b"]
    assert_agree(replayed, run_json("ab", "report", records, "-e", "ab-example"))
    text = run(*args, columns=100)
    out = " ".join(text.stdout.split())
    assert "2 sessions replayed under each of 3 variants" in out
    assert "1 sessions left out: no LLM call to replay (no assistant message after the first message) (b)." in out


def write_live_records(tmp_path: Path, sessions: int = 8) -> Path:
    """Records of live traffic: each session on its one variant, every turn recorded."""
    path = tmp_path / "live.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            context_window: 6000
            data_dir: {tmp_path / "data"}
            plugins: {{state: state-files}}
            config: {{store-jsonl: {{record_none: true}}}}
            experiment:
              name: live
              variants:
                default: {{weight: 1}}
                one-threshold: {{weight: 1, config: baseline-one-threshold}}
            """
        ),
        "utf-8",
    )
    with ExperimentCompactor(path) as compactor:
        for i in range(sessions):
            history = build_history([2500 + 300 * i] * (6 + i % 4), id_prefix=f"s{i}_")
            for end in range(3, len(history) + 1, 2):
                compactor.compact_with_record(history[:end], f"session-{i}")
    return path


def test_live_records_are_compared_unpaired_with_sample_sizes_and_a_warning(tmp_path):
    experiment = write_live_records(tmp_path)
    records = tmp_path / "data" / "records"
    data = run_json("ab", "report", records, "-e", experiment)
    assert data["paired"] is False and sum(data["sessions"].values()) == 8 and len(data["sessions"]) == 2
    cost = data["metrics"]["cost"]["differences"]["one-threshold"]
    assert cost["test"] == "Welch t-test" and cost["paired"] is False
    size = data["target_sample_sizes"]["one-threshold"]
    assert data["effect"] == 0.1 and size["relative_effect"] == pytest.approx(0.1) and size["observed"] is False
    assert size["underpowered"] is True and size["power"] < 0.8
    assert size["per_variant"] > max(data["sessions"].values())
    assert data["sample_sizes"]["one-threshold"]["observed"] is True
    text = run("ab", "report", records, "-e", experiment, columns=100)
    assert text.exit_code == 0, text.output
    out = " ".join(text.stdout.split())
    n = data["sessions"]
    assert (
        f"one-threshold against default (control): Welch t-test on {n['one-threshold']} and {n['default']} "
        "sessions, two-sided, level α = 0.05" in out
    )
    power = f"{size['power'] * 100:.0f} %"
    assert (
        f"warning: one-threshold against default is unpaired and underpowered: with {n['one-threshold']} and "
        f"{n['default']} sessions it had a {power} chance of detecting a 10 % difference in cost" in out
    )
    assert f"to detect a 10 % difference, about {size['per_variant']:,} sessions per variant" in out
    # another smallest difference worth detecting
    given = run_json("ab", "report", records, "-e", experiment, "--effect", "50")
    assert given["target_sample_sizes"]["one-threshold"]["relative_effect"] == pytest.approx(0.5)
    assert given["target_sample_sizes"]["one-threshold"]["per_variant"] < size["per_variant"]


def test_a_replay_is_paired_and_names_its_test_level_and_prices(tmp_path):
    text = run("ab", "replay", EXAMPLES, "-e", "ab-example", "-w", "16000", "--alpha", "0.1", columns=100)
    assert text.exit_code == 0, text.output
    out = " ".join(text.stdout.split())
    assert "3 sessions replayed under each of 3 variants, window 16,000 tokens" in out
    assert "Prices (the experiment's, USD per million tokens): input 3.00, cached input 0.30" in out
    assert "cache-aware against default (control): paired t-test on 3 sessions, two-sided, level α = 0.1" in out
    assert "default (control): mean per session, 90 % CI, total over sessions" in out
    assert "underpowered" not in out  # paired
    assert "retention: request saturated no verdict" in out
    saturated = ", ".join(f"retention: {c.replace('_', ' ')}" for c in CATEGORIES)
    assert f"Saturated ({saturated})" in out


def test_replay_control_option(tmp_path):
    data = run_json("ab", "replay", EXAMPLES, "-e", "ab-example", "-w", "16000", "--control", "one-threshold")
    assert data["control"] == "one-threshold" and data["variants"][0] == "one-threshold"
    assert set(data["metrics"]["cost"]["differences"]) == {"default", "cache-aware"}
    wrong = run("ab", "replay", EXAMPLES, "-e", "ab-example", "--control", "one-treshold")
    assert wrong.exit_code == 1 and "no variant named 'one-treshold'" in wrong.output


def long_names_experiment(tmp_path: Path) -> Path:
    path = tmp_path / "long.yaml"
    path.write_text(
        "context_window: 16000\n"
        "experiment:\n"
        "  control: the-one-threshold-baseline-as-claude-code-does-it\n"
        "  variants:\n"
        "    the-one-threshold-baseline-as-claude-code-does-it: {config: baseline-one-threshold}\n"
        "    cache-aware-without-the-soft-tier: {config: cache-aware}\n"
        "    default: {}\n",
        "utf-8",
    )
    return path


@pytest.mark.parametrize("columns", [80, 100])
def test_tables_are_readable_at_80_and_100_columns(tmp_path, columns):
    experiment = long_names_experiment(tmp_path)
    text = run("ab", "replay", EXAMPLES, "-e", experiment, "--limit", "2", columns=columns)
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert "…" not in text.stdout
    out = " ".join(text.stdout.split())
    control, other = "the-one-threshold-baseline-as-claude-code-does-it", "cache-aware-without-the-soft-tier"
    for name in (control, other, "default"):  # each name whole in its table's title
        role = " (control)" if name == control else ""
        assert f"{name}{role}: mean per session, 95 % CI, total over sessions" in out
    for name in (other, "default"):
        assert f"{name} against {control} (control): paired t-test on 2 sessions, two-sided" in out
    costs = [line.split() for line in lines if line.startswith("cost (USD)")]
    assert len(costs) == 5 and all(len(cells) >= 5 for cells in costs)  # one line each, numbers whole


def test_report_names_the_prices_it_used(tmp_path):
    experiment = write_live_records(tmp_path, sessions=4)
    records = tmp_path / "data" / "records"
    text = run("ab", "report", records, columns=100)
    out = " ".join(text.stdout.split())
    assert "Prices (the defaults; pass -e for the experiment's, USD per million tokens): input 3.00" in out
    custom = experiment.read_text("utf-8").replace(
        "context_window: 6000", "context_window: 6000\npricing: {input: 1.5}"
    )
    experiment.write_text(custom, "utf-8")
    data = run_json("ab", "report", records, "-e", experiment)
    assert data["prices"]["input"] == 1.5 and data["prices_source"] == "the experiment's"


def test_the_printed_cost_definition_and_prices_are_the_ones_cost_is_computed_with(tmp_path):
    """A cache-friendly summary request's cached input is billed at the summarizer's cached-input
    price: the definition and the price line printed with every table say so."""
    path = tmp_path / "exp.yaml"
    path.write_text(
        "context_window: 16000\npricing: {summarizer_cached_input: 0.05}\n"
        "experiment:\n  variants:\n    lean: {}\n    friendly: {overrides: {summary_requests: cache-friendly}}\n",
        "utf-8",
    )
    records = tmp_path / "records"
    args = ("ab", "replay", EXAMPLES, "-e", path, "--workers", "1")
    data = run_json(*args, "--records-dir", records)
    assert data["cost_definition"].startswith(
        "per LLM call: uncached view tokens × input + cached prefix × cached input + uncached summarizer "
        "tokens in × summarizer input + cached summarizer tokens in × summarizer cached input + summarizer "
        "tokens out × summarizer output;"
    )
    p = data["prices"]
    for file in (records / "friendly").glob("*.jsonl"):  # the cost, as the definition says
        total, cached_summaries = 0.0, 0
        for line in file.read_text("utf-8").splitlines():
            r = json.loads(line)
            cached = min(r["cache_stable_prefix_tokens"], r["tokens_after"])
            s_cached = r["summarizer_tokens_in_cached"]
            cached_summaries += s_cached
            total += (
                (r["tokens_after"] - cached) * p["input"]
                + cached * p["cached_input"]
                + (r["summarizer_tokens_in"] - s_cached) * p["summarizer_input"]
                + s_cached * p["summarizer_cached_input"]
                + r["summarizer_tokens_out"] * p["summarizer_output"]
            ) / 1e6
        assert data["per_session"]["friendly"][file.stem]["cost"] == pytest.approx(total, rel=1e-12)
    assert cached_summaries > 0
    out = " ".join(run(*args, columns=100).stdout.split())
    assert "summarizer input 3.00, summarizer cached input 0.05, summarizer output 15.00." in out
    assert f"Cost: {data['cost_definition']}." in out
    default = " ".join(run("ab", "replay", EXAMPLES, "-e", "ab-example", "--limit", "1", columns=100).stdout.split())
    assert "summarizer input 3.00, summarizer cached input 0.30, summarizer output 15.00." in default  # unset


def test_a_report_leaves_out_sessions_whose_variant_changed_and_says_so(tmp_path):
    experiment = write_live_records(tmp_path, sessions=6)
    records = tmp_path / "data" / "records"
    before = run_json("ab", "report", records, "-e", experiment)
    # a session whose records name two variants (as when a variant changed mid-session)
    file = sorted(records.glob("*.jsonl"))[0]
    lines = file.read_text("utf-8").splitlines()
    other = json.loads(lines[-1])
    other.update(id="f" * 32, variant="default" if other["variant"] != "default" else "one-threshold")
    file.write_text("\n".join([*lines, json.dumps(other)]) + "\n", "utf-8")
    after = run_json("ab", "report", records, "-e", experiment)
    assert after["excluded_mixed_variants"] == [file.stem]
    assert sum(after["sessions"].values()) == sum(before["sessions"].values()) - 1
    text = run("ab", "report", records, "-e", experiment, columns=100)
    assert f"1 sessions left out: their records name more than one variant ({file.stem})" in " ".join(
        text.stdout.split()
    )


def test_a_report_says_when_cost_misses_turns(tmp_path):
    experiment = write_live_records(tmp_path, sessions=4)
    records = tmp_path / "data" / "records"
    for file in records.glob("*.jsonl"):  # as a store without record_none writes them
        kept = [line for line in file.read_text("utf-8").splitlines() if json.loads(line)["tier"] != "none"]
        file.write_text("".join(line + "\n" for line in kept), "utf-8")
    data = run_json("ab", "report", records, "-e", experiment)
    assert data["cost_covers_every_turn"] is False and data["variants_without_every_turn"]


def test_an_error_inside_a_variant_prints_readably_with_two_workers(tmp_path, monkeypatch):
    monkeypatch.delenv("COMPACTOR_TEST_UNSET_KEY", raising=False)
    path = tmp_path / "exp.yaml"
    path.write_text(
        "experiment:\n  variants:\n    a: {}\n    b:\n      overrides:\n"
        "        plugins: {summarizer: summarize-openai}\n"
        "        config: {summarize-openai: {api_key_env: COMPACTOR_TEST_UNSET_KEY}}\n",
        "utf-8",
    )
    out = run("ab", "replay", EXAMPLES, "-e", path, "--workers", "2")
    assert out.exit_code == 1
    assert "variant 'b': summarize-openai reads its API key from the environment variable COMPACTOR_TEST_UNSET_KEY" in (
        out.output
    )
    assert "; e; " not in out.output


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"\xff\xfe\n", "not UTF-8 text (byte 0)"),
        (b"[1, 2]\n", "line 1 (message 0): expected an object with a 'role', got list"),
        (b'{"role": "user", "content": "a"}\n{"role": "robot"}\n', "line 2 (message 1): role 'robot' is not one of"),
    ],
)
def test_a_bad_session_file_is_named_with_its_problem(tmp_path, content, reason):
    corpus = tmp_path / "corpus"
    shutil.copytree(EXAMPLES, corpus)
    (corpus / "zz-bad.jsonl").write_bytes(content)
    result = run("ab", "replay", corpus, "-e", "ab-example", "-w", "16000", "--workers", "1")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {corpus / 'zz-bad.jsonl'}: {reason}"), result.stderr
    assert "Traceback" not in result.output


def test_a_report_reads_records_files_and_passes_over_a_folder_named_like_one(tmp_path):
    records = tmp_path / "records"
    expected = run_json("ab", "replay", EXAMPLES, "-e", "ab-example", "-w", "16000", "--records-dir", records)
    (records / "default" / "archive.jsonl").mkdir()  # a folder, not a records file
    reported = run_json("ab", "report", records, "-e", "ab-example")
    assert reported["sessions"] == expected["sessions"]


def test_a_records_folder_whose_variant_folder_is_the_corpus_is_refused_and_the_corpus_kept(tmp_path):
    corpus = tmp_path / "runs" / "default"  # named as the experiment's control variant
    shutil.copytree(EXAMPLES, corpus)
    before = {p.name: p.read_bytes() for p in corpus.iterdir()}
    result = run("ab", "replay", corpus, "-e", "ab-example", "-w", "16000", "--records-dir", tmp_path / "runs")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: --records-dir {tmp_path / 'runs'}: its folder default is the corpus")
    assert {p.name: p.read_bytes() for p in corpus.iterdir()} == before  # not one session deleted or replaced


def test_a_report_reads_a_configs_record_stores_or_a_folder_of_records(tmp_path):
    experiment = write_live_records(tmp_path, sessions=4)
    records = tmp_path / "data" / "records"
    from_folder = run_json("ab", "report", records, "-e", experiment)
    through = run_json("ab", "report", "--config", "default", "--data-dir", tmp_path / "data", "-e", experiment)
    assert through["per_session"] == from_folder["per_session"] and through["records"] == from_folder["records"]
    for args, problem in [
        ((), "pass either RECORDS_DIR (a folder of JSONL records) or --config (its record stores)"),
        ((records, "--config", "default"), "pass either RECORDS_DIR"),
        ((records, "--data-dir", tmp_path), "--data-dir goes with --config"),
    ]:
        result = run("ab", "report", *args)
        assert result.exit_code == 2 and problem in result.output, result.output
    empty = run("ab", "report", "--config", "default", "--data-dir", tmp_path / "nothing")
    assert empty.exit_code == 1 and "default: no records to compare in its record stores" in empty.output
