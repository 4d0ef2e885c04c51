"""A/B experiments: the YAML section, sticky assignment, the bootstrap, and the ``ab`` commands."""

from __future__ import annotations

import json
import math
import os
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
    comparison_to_dict,
    experiment_from_config,
    load_experiment,
    metrics_from_records,
    paired_difference,
    unpaired_difference,
)
from progressive_compactor.testing import build_history
from timeouts import forked_while_held

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
    assert e.names == ["default", "cache-aware", "one-threshold"] and e.control == "default"
    assert {v.config.context_window for v in e.variants} == {32_000}  # shared with the base
    assert all(v.config.variant == v.name for v in e.variants)
    assert e.variant("one-threshold").config.plugins.policy == "policy-single-threshold"
    assert e.variant("default").config.plugins.policy == "policy-cost"  # the code default
    # every variant keeps the base's state store and record store with its block
    assert {v.config.plugins.state for v in e.variants} == {"state-files"}
    assert all(v.config.plugin_block("store-jsonl")["record_none"] is True for v in e.variants)
    assert {e.assign(f"s{i}") for i in range(300)} == {"default", "cache-aware"}  # one-threshold: weight 0
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


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_worker_forked_while_a_thread_assigns_a_variant_assigns_its_own(tmp_path):
    """Forked while another thread assigns a session its variant (holding the lock over a load
    and a save of the session's state): the child assigns its sessions theirs."""
    path = write(tmp_path, "exp.yaml", f"data_dir: {tmp_path}\nexperiment:\n  variants: {{a: {{}}, b: {{}}}}\n")
    router = ExperimentCompactor(path)
    assert forked_while_held(router._lock, lambda: router.variant_of("s")) == router.experiment.assign("s")


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
    def record(sid, variant, tier, after, cached, window=1000, before=None, n=0):
        return CompactionRecord(
            id=f"{sid}-{after}-{n}",
            session_id=sid,
            timestamp="t",
            tier=tier,
            tokens_before=after if before is None else before,
            tokens_after=after,
            msgs_before=1,
            msgs_after=1,
            variant=variant,
            cache_stable_prefix_tokens=cached,
            context_window=window,
            summarizer_tokens_in=100 if tier is CompactionTier.FULL else 0,
            summarizer_tokens_out=10 if tier is CompactionTier.FULL else 0,
            summarizer_calls=1 if tier is CompactionTier.FULL else 0,
        )

    records = [
        record("s1", "a", CompactionTier.NONE, 500, 0),
        record("s1", "a", CompactionTier.WARN, 1200, 500),  # a Warn that changed nothing
        record("s1", "a", CompactionTier.WARN, 900, 500, before=1300, n=1),  # one that did
        record("s2", "b", CompactionTier.FULL, 300, 0, before=1100),
    ]
    metrics = metrics_from_records(records)
    a, b = metrics[("a", "s1")], metrics[("b", "s2")]
    assert a["peak_tokens"] == 1200 and a["overflow_turns"] == 1 and a["overflow_sessions"] == 1
    assert a["compactions"] == 1  # only the turn that changed the view
    assert a["cached_share"] == 1000 / 2600
    assert a["cost"] == pytest.approx((500 * 3.0 + 700 * 3.0 + 500 * 0.3 + 400 * 3.0 + 500 * 0.3) / 1e6)
    # the summarizer is part of the cost, at the summarizer's prices
    assert b["cost"] == pytest.approx((300 * 3.0 + 100 * 3.0 + 10 * 15.0) / 1e6)
    assert b["summarizer_tokens"] == 110 and b["overflow_sessions"] == 0
    assert b["retention_request"] is None and b["invalid_views"] is None


# --- validation of the experiment section -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "config: {policy-cost: {warn: 50, soft: 60, full: 75, emergency: 90}}\nexperiment: {variants: {a: {}}}\n",
            "thresholds are shares of the window (0.70 for 70 %), got 50.0; did you mean 0.5? "
            "@ $.config.policy-cost.warn",
        ),
        (
            "experiment:\n  variants:\n    a: {}\n"
            "    b: {overrides: {plugins: {policy: policy-thresholds},\n"
            "        config: {policy-thresholds: {warn: 50, soft: 60, full: 75, emergency: 90}}}}\n",
            "variant 'b' (from base): thresholds are shares of the window (0.70 for 70 %), got 90.0; "
            "did you mean 0.9? @ $.config.policy-thresholds.emergency",
        ),
        (
            "experiment:\n  variants:\n    a: {}\n    a: {weight: 2}\n",
            "invalid YAML at line 4, column 5: duplicate key 'a' (first on line 3); each key may appear once",
        ),
        (
            "experiment: {variants: {a: {}, b: {overrides: {pricing: {input: 1.0}}}}}\n",
            "a variant may not set pricing: every variant is compared at the experiment's own pricing; set it "
            "once, outside the experiment section @ $.experiment.variants.b.overrides.pricing",
        ),
        (
            "experiment: {variants: {a: {}, b: {overrides: {context_window: 8000}}}}\n",
            "@ $.experiment.variants.b.overrides.context_window",
        ),
        (
            "experiment: {variants: {a: {}, b: {overrides: {data_dir: /elsewhere}}}}\n",
            "a variant may not set data_dir: every variant keeps the base's, so that a session's variant and "
            "records are found in one place @ $.experiment.variants.b.overrides.data_dir",
        ),
        (
            "experiment: {variants: {a: {}, b: {overrides: {plugins: {state: state-files}}}}}\n",
            "a variant may not choose plugins.state: every variant keeps the base's, so that a session's "
            "variant and records are found in one place @ $.experiment.variants.b.overrides.plugins.state",
        ),
        (
            "experiment: {variants: {a: {}, b: {overrides: {config: {store-jsonl: {record_none: true}}}}}}\n",
            "@ $.experiment.variants.b.overrides.config.store-jsonl",
        ),
        (
            "experiment: {variants: {a: {}, b: {overrides: {config: {policy-single-threshold: {threshold: 80}}, "
            "plugins: {policy: policy-single-threshold}}}}}\n",
            "variant 'b' (from base): threshold is a share of the window between 0 and 1, got 80.0; did you "
            "mean 0.8? @ $.config.policy-single-threshold.threshold",
        ),
    ],
    ids=[
        "percent-base",
        "percent-variant",
        "duplicate-variant",
        "variant-prices",
        "variant-window",
        "variant-data-dir",
        "variant-state",
        "variant-store-block",
        "percent-single",
    ],
)
def test_a_broken_experiment_is_rejected_at_load_time_and_by_config_check(tmp_path, text, expected):
    from progressive_compactor.cli.app import cli as main

    path = write(tmp_path, "exp.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert any(expected in p for p in info.value.problems), info.value.problems
    checked = CliRunner().invoke(main, ["config", "check", str(path)])
    assert checked.exit_code == 1
    assert expected in checked.stdout


def test_a_problem_of_the_base_is_said_once_not_once_more_per_variant(tmp_path):
    path = write(
        tmp_path,
        "exp.yaml",
        "min_tail_messages: -1\nexperiment: {variants: {a: {}, b: {overrides: {offload_threshold: 10}}}}\n",
    )
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert info.value.problems == ["min_tail_messages must be 0 or more, got -1 @ $.min_tail_messages"]


def test_config_check_starts_every_variants_plugins(tmp_path, monkeypatch):
    from progressive_compactor.cli.app import cli as main

    monkeypatch.delenv("COMPACTOR_TEST_UNSET_KEY", raising=False)
    path = write(
        tmp_path,
        "exp.yaml",
        """
        experiment:
          variants:
            a: {}
            b:
              overrides:
                plugins: {summarizer: summarize-openai}
                config: {summarize-openai: {api_key_env: COMPACTOR_TEST_UNSET_KEY}}
        """,
    )
    checked = CliRunner().invoke(main, ["config", "check", str(path)])
    assert checked.exit_code == 1
    assert "variant 'b' (from base): summarize-openai reads its API key from the environment variable" in checked.stdout
    assert "COMPACTOR_TEST_UNSET_KEY, which is not set" in checked.stdout


def test_a_config_error_crosses_a_process_boundary_whole():
    import pickle

    error = ConfigError(["thresholds are shares of the window @ $.config.policy-thresholds.warn"], "exp.yaml")
    again = pickle.loads(pickle.dumps(error))
    assert again.problems == error.problems and again.source == "exp.yaml"
    assert str(again) == "exp.yaml: thresholds are shares of the window @ $.config.policy-thresholds.warn"


# --- the t distribution and the tests (reference values from scipy.stats) ---------------------


def test_t_quantiles_and_p_values_match_the_reference():
    from progressive_compactor.lab.experiment import t_quantile, t_two_sided_p

    for df, expected in ((1, 12.70620474), (4, 2.77644511), (10, 2.22813885), (21, 2.07961384)):
        assert t_quantile(0.975, df) == pytest.approx(expected, rel=1e-8)
    assert t_two_sided_p(2.5, 7.3) == pytest.approx(0.03965023466560043, rel=1e-9)
    assert t_two_sided_p(0.0, 5) == pytest.approx(1.0)


def test_paired_and_welch_t_tests_match_the_reference():
    from progressive_compactor.lab.experiment import paired_t, welch_t

    paired = paired_t([2, 4, 6, 8, 10], [1, 2, 3, 4, 5])
    assert paired.p == pytest.approx(0.01323559956368269, rel=1e-9) and paired.df == 4
    assert (paired.low, paired.high) == pytest.approx((1.0367568385224428, 4.963243161477557), rel=1e-9)
    assert paired.significant and paired.verdict == "significant: higher" and paired.relative == 1.0
    welch = welch_t([1, 2, 3, 4, 5], [2, 4, 6, 8, 10])
    assert welch.p == pytest.approx(0.10753119493062728, rel=1e-9)
    assert welch.df == pytest.approx(5.882352941176471)
    assert not welch.significant and welch.verdict == "not significant" and not welch.paired
    assert welch.low < 0 < welch.high  # the interval agrees with the test


def test_the_interval_excludes_zero_exactly_when_the_test_is_significant():
    import random

    from progressive_compactor.lab.experiment import paired_t, welch_t

    rng = random.Random(3)
    for _ in range(200):
        n = rng.randrange(3, 30)
        control = [rng.uniform(0.1, 2.0) for _ in range(n)]
        treatment = [c * rng.uniform(0.7, 1.2) for c in control]
        for d in (paired_t(treatment, control), welch_t(treatment, control)):
            assert d.significant == (d.high < 0 or d.low > 0)


def test_a_value_that_is_not_finite_is_refused_naming_where_it_is():
    from progressive_compactor.lab.experiment import compare

    for bad in (float("nan"), float("inf"), float("-inf")):
        per_variant = {
            "old": {"s1": {"cost": 1.0}, "s2": {"cost": bad}},
            "new": {"s1": {"cost": 1.0}, "s2": {"cost": 2.0}},
        }
        with pytest.raises(ValueError, match=r"cost of session 's2' under 'old' is not a finite number"):
            compare(per_variant)


def test_degenerate_differences_have_a_plain_verdict():
    from progressive_compactor.lab.experiment import paired_t, welch_t

    assert paired_t([1.0, 1.0, 1.0], [1.0, 1.0, 1.0]).verdict == "no difference"
    # +1 on every session, no spread: the sign test (2 × 0.5^n) says whether that is chance
    assert paired_t([2.0, 3.0], [1.0, 2.0]).verdict == "not significant"  # p = 0.5
    assert paired_t([2.0] * 6, [1.0] * 6).verdict == "significant: higher"  # p = 0.03
    # each side one value: the permutation test (2 of the C(4, 2) splits put them apart)
    assert welch_t([1.0, 1.0], [2.0, 2.0]).p == pytest.approx(1 / 3)
    assert welch_t([1.0] * 5, [2.0] * 5).verdict == "significant: lower"  # p = 2 / 252
    from progressive_compactor.lab.stats import sample_size

    few = sample_size([1.0, 1.0], [2.0, 2.0], welch_t([1.0, 1.0], [2.0, 2.0]))
    assert few.power == 0.0 and few.underpowered  # two sessions a side can never show it
    enough = sample_size([1.0] * 5, [2.0] * 5, welch_t([1.0] * 5, [2.0] * 5))
    assert enough.power == 1.0 and not enough.underpowered
    assert paired_t([2.0], [1.0]).verdict == "too few sessions"
    assert welch_t([2.0], [1.0, 1.5]).verdict == "too few sessions"


def test_a_spread_that_is_only_rounding_is_no_spread():
    """Costs are sums of floats: +0.10 USD on every session comes out as 0.09999999999999998,
    0.10000000000000009... The t-test on that rounding says p = 1e-31 from three sessions; the
    exact tests, as for a spread of exactly 0, say it could be chance."""
    from progressive_compactor.lab.experiment import paired_t, welch_t
    from progressive_compactor.lab.stats import sample_size

    paired = paired_t([0.3, 0.7, 1.1], [0.2, 0.6, 1.0])
    assert paired.se == 0 and paired.p == pytest.approx(0.25)  # the sign test, as for [2, 3, 4] - [1, 2, 3]
    assert paired.verdict == "not significant" and paired.low == paired.high == paired.mean
    welch = welch_t([0.1 + 0.2, 0.3, 0.3], [0.2, 0.2, 0.2])
    assert welch.se == 0 and welch.p == pytest.approx(2 / 20) and welch.verdict == "not significant"
    size = sample_size([0.3, 0.7, 1.1], [0.2, 0.6, 1.0], paired)
    assert size is not None and size.pairs is None  # no spread: no sample size from it
    # a real spread, however small against the values, is still a spread
    assert paired_t([1000.0, 1000.0, 1000.0], [999.0, 999.0, 999.0 + 1e-6]).se > 0


def test_sample_size_follows_the_normal_formula():
    from progressive_compactor.lab.experiment import sample_size, welch_t

    control = [0.0, 2.0] * 10  # sd ≈ 1.026
    treatment = [0.5, 2.5] * 10
    d = welch_t(treatment, control)
    size = sample_size(treatment, control, d)
    variance = statistics.variance(control)
    z = statistics.NormalDist().inv_cdf(0.975) + statistics.NormalDist().inv_cdf(0.8)
    assert size.per_variant == math.ceil(2 * z * z * variance / 0.25)
    expected_power = statistics.NormalDist().cdf(0.5 / d.se - statistics.NormalDist().inv_cdf(0.975))
    assert size.observed and size.underpowered and size.power == pytest.approx(expected_power)
    assert 0.3 < size.power < 0.4
    wanted = sample_size(treatment, control, d, relative_effect=0.5)  # half the control's mean: 0.5
    assert not wanted.observed and wanted.effect == pytest.approx(0.5) and wanted.per_variant == size.per_variant


def test_compare_reports_shares_totals_relative_differences_and_saturation():
    def session(cost, retained, overflowed):
        return {
            "cost": cost,
            "overflow_turns": 2.0 if overflowed else 0.0,
            "overflow_sessions": 1.0 if overflowed else 0.0,
            "retention_request": 1.0,
            "retention_errors": retained,
        }

    per_variant = {
        "old": {f"s{i}": session(1.0 + i, 1.0, i == 0) for i in range(4)},
        "new": {f"s{i}": session(0.8 * (1.0 + i), 0.5 if i == 0 else 1.0, False) for i in range(4)},
    }
    comparison = compare(per_variant, "old")
    cost = comparison.row("cost")
    assert cost.summaries["old"].total == 10.0 and cost.summaries["new"].total == pytest.approx(8.0)
    assert cost.differences["new"].relative == pytest.approx(-0.2) and cost.differences["new"].significant
    sessions = comparison.row("overflow_sessions")
    assert sessions.summaries["old"].total == 1 and sessions.differences["new"].mean == -0.25
    assert comparison.row("retention_request").saturated  # 100 % everywhere
    assert not comparison.row("retention_errors").saturated  # 50 % once: a real difference
    data = comparison_to_dict(comparison)
    assert data["metrics"]["retention_request"]["differences"]["new"]["verdict"] == "saturated"
    assert data["sample_sizes"]["new"]["paired"] is True and data["alpha"] == 0.05
