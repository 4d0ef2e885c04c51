"""A/B experiments: the YAML section, sticky assignment, the bootstrap, and the ``ab`` commands."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from progressive_compactor import CompactionRecord, CompactionTier, ConfigError, load_config
from progressive_compactor.converters import read_records_file as read_records
from progressive_compactor.lab.experiment import (
    ExperimentCompactor,
    assign_variant,
    bootstrap_ci,
    compare,
    experiment_from_config,
    load_experiment,
    metrics_from_records,
    paired_difference,
    unpaired_difference,
)
from progressive_compactor.testing import build_history

WEIGHTS = [("a", 0.2), ("b", 0.3), ("c", 0.5)]


# --- sticky assignment ------------------------------------------------------------------------


def test_same_session_same_variant_every_time():
    ids = [f"session-{i}" for i in range(200)]
    assert [assign_variant(s, WEIGHTS, "salt") for s in ids] == [assign_variant(s, WEIGHTS, "salt") for s in ids]


def test_same_session_same_variant_in_another_process():
    ids = ["alpha", "beta", "gamma", "delta", "épsilon", "session/7"]
    here = [assign_variant(s, WEIGHTS, "x") for s in ids]
    code = (
        "import json, sys; from progressive_compactor.lab.experiment import assign_variant; "
        f"print(json.dumps([assign_variant(s, {WEIGHTS!r}, 'x') for s in {ids!r}]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    )
    assert json.loads(out.stdout) == here


def test_weights_are_respected_over_ten_thousand_ids():
    counts = Counter(assign_variant(f"id-{i}", WEIGHTS, "w") for i in range(10_000))
    for name, weight in WEIGHTS:
        assert abs(counts[name] / 10_000 - weight) < 0.02, counts


def test_a_zero_weight_variant_is_never_assigned_and_the_salt_reshuffles():
    weights = [("on", 1.0), ("off", 0.0)]
    assert {assign_variant(f"s{i}", weights) for i in range(500)} == {"on"}
    a = [assign_variant(f"s{i}", WEIGHTS, "one") for i in range(200)]
    b = [assign_variant(f"s{i}", WEIGHTS, "two") for i in range(200)]
    assert a != b


# --- the experiment section -------------------------------------------------------------------


def test_bundled_ab_example():
    e = load_experiment("ab-example")
    assert e.names == ["one-threshold", "progressive", "masking"] and e.control == "one-threshold"
    assert {v.config.context_window for v in e.variants} == {32_000}  # shared with the base
    assert all(v.config.variant == v.name for v in e.variants)
    assert e.variant("one-threshold").config.plugins.policy == "policy-single-threshold"
    assert e.variant("progressive").config.plugins.policy == "policy-cost"  # the default's
    assert {e.assign(f"s{i}") for i in range(300)} == {"one-threshold", "progressive"}  # masking: weight 0
    from_config = experiment_from_config(load_config("ab-example"))
    assert from_config.names == e.names and from_config.assign("s1") == e.assign("s1")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), "utf-8")
    return path


def test_variants_from_overrides_and_from_a_relative_file(tmp_path):
    write(
        tmp_path,
        "other.yaml",
        "context_window: 999\nmin_tail_messages: 2\ndata_dir: /elsewhere\n"
        "config: {store-jsonl: {directory: /elsewhere/records}}\n",
    )
    path = write(
        tmp_path,
        "exp.yaml",
        f"""
        context_window: 20000
        min_tail_messages: 6
        data_dir: {tmp_path}
        config:
          store-jsonl: {{record_none: true}}
        experiment:
          variants:
            base: {{}}
            tail10: {{overrides: {{min_tail_messages: 10}}}}
            other: {{config: other.yaml, weight: 2}}
        """,
    )
    e = load_experiment(path)
    assert e.control == "base" and e.salt == "experiment"
    assert [v.config.min_tail_messages for v in e.variants] == [6, 10, 2]
    assert [v.config.context_window for v in e.variants] == [20000] * 3
    # every variant keeps the base's data folder and record store, so its records land with the others'
    assert [v.config.data_dir for v in e.variants] == [str(tmp_path)] * 3
    assert [v.config.plugin_block("store-jsonl") for v in e.variants] == [{"record_none": True}] * 3
    assert e.with_overrides(context_window=16000).variant("other").config.context_window == 16000


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (
            "{variants: {a: {wieght: 1}}}",
            "unknown setting 'wieght'; did you mean 'weight'? (settings: weight, config, overrides) "
            "@ $.experiment.variants['a']",
        ),
        (
            "{variants: {a: {weight: -1}}}",
            "weight must be a number, 0 or more, got -1.0 @ $.experiment.variants.a.weight",
        ),
        ("{variants: {a: {weight: 0}}}", "at least one variant needs a weight above 0 @ $.experiment.variants"),
        ("{control: z, variants: {a: {}}}", "$.experiment.control"),
        ("{variants: {a: {overrides: {context_window: big}}}}", "variant 'a' (from base): "),
    ],
    ids=["misspelt-key", "negative-weight", "all-zero", "unknown-control", "bad-override"],
)
def test_experiment_problems_name_their_path(tmp_path, section, expected):
    path = write(tmp_path, "exp.yaml", f"experiment: {section}\n")
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert any(expected in p for p in info.value.problems), info.value.problems


def test_live_traffic_writes_each_sessions_variant_into_its_records(tmp_path):
    path = write(
        tmp_path,
        "exp.yaml",
        f"""
        context_window: 4000
        data_dir: {tmp_path}
        config:
          store-jsonl: {{record_none: true}}
        experiment:
          variants:
            a: {{}}
            b: {{overrides: {{min_tail_messages: 4}}}}
        """,
    )
    router = ExperimentCompactor(path)
    history = build_history([2000] * 6)
    sessions = [f"live-{i}" for i in range(12)]
    for sid in sessions:
        router.compact_with_record(history[:5], sid)
        router.compact_with_record(history, sid)
    router.close()
    for sid in sessions:
        records = list(read_records(tmp_path / "records" / f"{sid}.jsonl"))
        assert len(records) == 2
        assert {r.variant for r in records} == {router.experiment.assign(sid)}


# --- statistics -------------------------------------------------------------------------------


def test_bootstrap_of_a_constant_is_that_constant():
    assert bootstrap_ci([2.5] * 30) == (2.5, 2.5)
    e = paired_difference([3.0, 5.0, 7.0], [1.0, 3.0, 5.0])
    assert (e.mean, e.low, e.high, e.n, e.paired) == (2.0, 2.0, 2.0, 3, True)


def test_bootstrap_interval_on_known_data():
    import random

    rng = random.Random(7)
    values = [rng.gauss(10.0, 2.0) for _ in range(400)]
    low, high = bootstrap_ci(values, seed=1)
    mean = statistics.fmean(values)
    assert low < mean < high
    assert low < 10.0 < high
    assert (high - low) == pytest.approx(2 * 1.96 * 2.0 / 20, rel=0.2)  # normal theory: ±1.96 σ/√n
    assert bootstrap_ci(values, seed=1) == (low, high)  # seeded: reproducible


def test_pairing_removes_the_between_session_spread():
    sizes = [1.0, 50.0, 3.0, 400.0, 20.0, 7.0, 90.0, 2.0]
    treatment = [s * 0.9 for s in sizes]  # 10 % cheaper on every session
    paired = paired_difference(treatment, sizes)
    unpaired = unpaired_difference(treatment, sizes)
    assert paired.high < 0  # the paired interval sees the saving
    assert unpaired.low < 0 < unpaired.high  # the unpaired one cannot
    assert not unpaired.paired


def test_compare_pairs_sessions_and_puts_the_control_first():
    per_variant = {
        "new": {"s1": {"cost": 1.0}, "s2": {"cost": 2.0}, "s3": {"cost": 3.0}},
        "old": {"s1": {"cost": 2.0}, "s2": {"cost": 3.0}, "s3": {"cost": 4.0}},
    }
    comparison = compare(per_variant, "old")
    assert comparison.variants == ("old", "new")
    cost = next(r for r in comparison.rows if r.metric == "cost")
    assert cost.means == {"old": 3.0, "new": 2.0}
    assert cost.differences["new"].mean == -1.0 and cost.differences["new"].paired
    assert next(r for r in comparison.rows if r.metric == "retention_errors").differences["new"] is None


def test_metrics_from_records():
    def record(sid, variant, tier, after, cached, window=1000):
        return CompactionRecord(
            id=sid + str(after),
            session_id=sid,
            timestamp="t",
            tier=tier,
            tokens_before=after,
            tokens_after=after,
            msgs_before=1,
            msgs_after=1,
            variant=variant,
            cache_stable_prefix_tokens=cached,
            context_window=window,
        )

    records = [
        record("s1", "a", CompactionTier.NONE, 500, 0),
        record("s1", "a", CompactionTier.WARN, 1200, 500),
        record("s2", "b", CompactionTier.FULL, 300, 0),
    ]
    metrics = metrics_from_records(records)
    assert metrics[("a", "s1")]["peak_tokens"] == 1200 and metrics[("a", "s1")]["overflows"] == 1
    assert metrics[("a", "s1")]["compactions"] == 1 and metrics[("a", "s1")]["cached_share"] == 500 / 1700
    assert metrics[("a", "s1")]["cost"] == pytest.approx((1200 * 3.0 + 500 * 0.3) / 1e6)
    assert metrics[("b", "s2")]["retention_request"] is None


# --- the commands -----------------------------------------------------------------------------


def test_ab_replay_then_ab_report(tmp_path):
    from progressive_compactor.cli.app import cli as main

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, sizes in (("one", [3000] * 10), ("two", [2500] * 12)):
        history = build_history(sizes, id_prefix=f"{name}_")
        history.append({"role": "assistant", "content": "Done."})
        (corpus / f"{name}.jsonl").write_text("".join(json.dumps(m) + "\n" for m in history), "utf-8")
    records = tmp_path / "records"
    runner = CliRunner()
    out = runner.invoke(
        main, ["ab", "replay", str(corpus), "-e", "ab-example", "-w", "8000", "--records-dir", str(records), "--json"]
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["control"] == "one-threshold" and data["sessions"] == {
        "one-threshold": 2,
        "progressive": 2,
        "masking": 2,
    }
    assert data["metrics"]["invalid_views"]["means"]["progressive"] == 0
    assert data["metrics"]["cost"]["differences"]["progressive"]["paired"] is True
    assert set(data["per_session"]["masking"]) == {"one", "two"}

    report = runner.invoke(main, ["ab", "report", str(records), "-e", "ab-example", "--json"])
    assert report.exit_code == 0, report.output
    live = json.loads(report.stdout)
    assert live["sessions"] == data["sessions"] and live["cost_covers_every_turn"] is True
    for variant in data["variants"]:  # the same peaks, from the records alone
        assert live["metrics"]["peak_tokens"]["means"][variant] == data["metrics"]["peak_tokens"]["means"][variant]

    table = runner.invoke(main, ["ab", "report", str(records), "--control", "progressive"])
    assert table.exit_code == 0, table.output
    header = table.output.split("billed cost")[0]
    assert "(control)" in header and header.index("progressive") < header.index("masking")
