"""The replay engine: turn by turn on synthetic sessions, the baselines, and the corpus."""

from __future__ import annotations

import attrs
import pytest

from progressive_compactor import CompactionTier, ConfigError, load_config
from progressive_compactor.lab.replay import read_session, replay_session, session_files
from progressive_compactor.pricing import PriceTable, call_cost
from progressive_compactor.testing import RecordingSummarizer, build_history, estimate, tool_call


def session(sizes=(3000,) * 14):
    """A synthetic agent session that ends, as recordings may, on an unanswered tool call."""
    history = build_history(list(sizes))
    history.append({"role": "assistant", "content": "Submitting.", "tool_calls": [tool_call("last", "submit")]})
    return history


def assistant_indexes(messages):
    return [i for i, m in enumerate(messages) if i and m["role"] == "assistant"]


def test_one_view_per_assistant_message_computed_from_the_history_before_it(make_compactor):
    messages = session()
    compactor = make_compactor(context_window=8000)
    seen = []
    result = replay_session(messages, compactor, "synthetic", on_turn=seen.append)
    assert [t.index for t in result.turns] == assistant_indexes(messages)
    assert seen == list(result.turns)
    first = result.turns[0]
    assert first.view_tokens == estimate(messages[: first.index])  # nothing to compact yet
    assert all(t.view_messages <= t.index for t in result.turns)
    assert result.invalid_views == 0 and result.overflows == 0
    assert result.peak_view_tokens <= 8000
    assert sum(result.tier_counts.values()) == len(result.turns)
    assert result.compactions > 0 and result.summarizer_calls > 0


def test_cost_is_the_sum_of_every_call_at_the_given_prices(make_compactor):
    prices = PriceTable(input=2.0, cached_input=0.5, output=10.0, summarizer_input=1.0, summarizer_output=4.0)
    messages = session()
    result = replay_session(messages, make_compactor(context_window=8000), "s", prices=prices)
    expected = 0.0
    for t in result.turns:
        assert t.output_tokens == estimate([messages[t.index]])
        expected += call_cost(
            prices,
            view_tokens=t.view_tokens,
            cached_tokens=t.cache_stable_tokens,
            output_tokens=t.output_tokens,
            summarizer_tokens_in=t.summarizer_tokens_in,
            summarizer_tokens_out=t.summarizer_tokens_out,
        ).total
    assert result.cost.total == pytest.approx(expected)
    assert result.cached_input_tokens == sum(t.cache_stable_tokens for t in result.turns) > 0


def test_offline_summarizer_tokens_are_estimated_and_reported_ones_win(make_compactor):
    messages = session()
    offline = replay_session(messages, make_compactor(context_window=8000), "s")
    summarized = [t for t in offline.turns if t.summarizer_calls]
    assert summarized and all(t.summarizer_tokens_in > 0 and t.summarizer_tokens_out > 0 for t in summarized)
    # the provider reported none: the replay's estimates go into the record, so records price as the replay
    assert all(
        (t.record.summarizer_tokens_in, t.record.summarizer_tokens_out)
        == (t.summarizer_tokens_in, t.summarizer_tokens_out)
        for t in summarized
    )

    reporting = RecordingSummarizer(text="## User Intent\nfix it\n## Summary\nshort")
    result = replay_session(messages, make_compactor(context_window=8000, extra_plugins=[("rec", reporting)]), "s")
    turns = [t for t in result.turns if t.summarizer_calls]
    assert turns and all(t.summarizer_tokens_in == t.record.summarizer_tokens_in > 0 for t in turns)


def test_no_compaction_counts_overflows_instead_of_hiding_them(make_compactor):
    messages = session()
    result = replay_session(messages, make_compactor("baseline-none", context_window=8000), "s")
    assert result.compactions == 0
    assert result.overflows == sum(1 for t in result.turns if t.view_tokens > 8000) > 0
    assert result.retention.ratio("request") == 1.0


def test_one_threshold_waits_for_80_percent_then_summarizes_the_whole_head(make_compactor):
    result = replay_session(session(), make_compactor("baseline-one-threshold", context_window=8000), "s")
    for t in result.turns:
        assert t.tier in (CompactionTier.NONE, CompactionTier.FULL, CompactionTier.EMERGENCY)
        if t.tier is CompactionTier.FULL:
            assert t.record.tokens_before >= 0.8 * 8000
            assert t.record.offloaded == ()  # as it is: no offloading before summarizing
    assert result.tier_counts["Full"] > 0 and result.overflows == 0


def test_observation_masking_keeps_only_the_ten_newest_results(make_compactor):
    messages = build_history([400] * 16)
    messages.append({"role": "assistant", "content": "done"})
    result = replay_session(messages, make_compactor("baseline-masking", context_window=100_000), "s")
    view = result.final_view
    tools = [m for m in view if m["role"] == "tool"]
    masked = [m for m in tools if m["content"].startswith("[Old tool output omitted")]
    assert len(tools) == 16 and len(masked) == 6
    assert result.summarizer_calls == 0 and result.invalid_views == 0
    # masking one more old result each turn breaks the prompt cache at that result
    later = [b for a, b in zip(result.turns, result.turns[1:]) if b.index > messages.index(tools[10]) + 1]
    assert later and all(b.cache_stable_tokens < b.view_tokens for b in later)


def test_observation_masking_counts_an_overflow_instead_of_truncating(make_compactor):
    """The masking baseline as published: no summary, no offload, no fallback. A view still over
    the window once the old results are masked is sent as it is and counted as an overflow."""
    messages = build_history([2000] * 14)
    messages.append({"role": "assistant", "content": "done"})
    result = replay_session(messages, make_compactor("baseline-masking", context_window=4000), "s")
    assert result.overflows > 0
    for t in result.turns:
        assert t.tier in (CompactionTier.NONE, CompactionTier.WARN), t.record.escalations
        assert not t.record.fallback and t.record.offloaded == ()


def test_observation_masking_rejects_a_placeholder_it_cannot_fill(compactor_factory):
    """A placeholder field other than ``{lines}`` and ``{chars}`` is a config error naming the
    field, not a KeyError on every turn once the policy reaches the tier."""
    bad = {"tier-observation-masking": {"placeholder": "[omitted: {bytes} bytes]"}}
    with pytest.raises(ConfigError) as info:
        load_config("baseline-masking", config=bad)
    (problem,) = info.value.problems
    assert "{lines}" in problem and "{bytes}" in problem
    assert problem.endswith("@ $.config.tier-observation-masking.placeholder")
    braces = {"tier-observation-masking": {"placeholder": "{{omitted}} {lines} lines, {chars} chars"}}
    compactor = compactor_factory(braces, base="baseline-masking", context_window=100_000)
    view = compactor.compact(build_history([400] * 12))
    assert "{omitted} 6 lines, 400 chars" in [m["content"] for m in view]


def test_truncation_baseline_never_calls_the_summarizer(make_compactor):
    result = replay_session(session(), make_compactor("baseline-truncation", context_window=8000), "s")
    assert result.summarizer_calls == 0
    assert result.tier_counts["Emergency"] > 0 and result.overflows == 0 and result.invalid_views == 0


def test_single_threshold_policy_rejects_an_unknown_tier():
    with pytest.raises(ConfigError) as info:  # the plugin's block is checked when the config loads
        load_config("baseline-none", config={"policy-single-threshold": {"tier": "gentle"}})
    assert info.value.problems == [
        "unknown tier 'gentle'; use one of none, warn, soft, full, emergency @ $.config.policy-single-threshold.tier"
    ]


def test_retention_of_a_compacted_synthetic_session(make_compactor):
    messages = session()
    messages.insert(
        4, {"role": "assistant", "content": "", "tool_calls": [tool_call("bad", "pytest tests/test_parser.py")]}
    )
    messages.insert(
        5,
        {
            "role": "tool",
            "tool_call_id": "bad",
            "content": "E   AssertionError: parser returned None\nFAILED tests/test_parser.py::test_empty",
        },
    )
    result = replay_session(messages, make_compactor(context_window=6000), "s")
    assert result.summarizer_calls > 0
    assert result.retention.ratio("errors") == 1.0  # kept through the anchors, not the raw result
    assert all(m.get("tool_call_id") != "bad" for m in result.final_view)


@pytest.mark.corpus
@pytest.mark.parametrize("config", ["default", "classic"])
def test_the_corpus_at_16k_has_no_invalid_view_no_overflow_and_every_tier(corpus_dir, make_compactor, config):
    fired: dict[str, int] = {}
    for path in session_files(corpus_dir):
        compactor = make_compactor(config, context_window=16_000)
        result = replay_session(read_session(path), compactor, path.stem, probes=False)
        assert result.invalid_views == 0, (path.name, result.invalid_view_problems)
        assert result.overflows == 0, path.name
        for label, count in result.tier_counts.items():
            fired[label] = fired.get(label, 0) + count
        compactor.close()
    for tier in (CompactionTier.WARN, CompactionTier.SOFT, CompactionTier.FULL, CompactionTier.EMERGENCY):
        assert fired.get(tier.label, 0) > 0, (config, tier.label, fired)


@attrs.frozen
class CorpusTotals:
    """What ``benchmarks/replay.py`` sums over the corpus for one policy at one window."""

    cost: float
    """Billed, with a prompt cache."""
    uncached_cost: float
    """Billed as if the provider had no prompt cache (every input token at the input price)."""
    kept: dict[str, int]
    total: dict[str, int]
    """Probes kept and probes in all, per category."""
    summarizer_input_per_call: float


def corpus_totals(corpus_dir, make_compactor, config, window):
    cost = uncached = 0.0
    kept: dict[str, int] = {}
    total: dict[str, int] = {}
    calls = tokens_in = 0
    for path in session_files(corpus_dir):
        compactor = make_compactor(config, context_window=window)
        result = replay_session(read_session(path), compactor, path.stem)
        assert result.invalid_views == 0, (config, window, path.name)
        assert result.overflows == 0 or config == "baseline-none", (config, window, path.name)
        cost += result.cost.total
        uncached += call_cost(  # every token sent billed at the input price: no cached prefix
            compactor.config.pricing,
            view_tokens=result.total_input_tokens,
            output_tokens=result.output_tokens,
            summarizer_tokens_in=result.summarizer_tokens_in,
            summarizer_tokens_out=result.summarizer_tokens_out,
        ).total
        for name, found in result.retention.categories.items():
            kept[name] = kept.get(name, 0) + len(found.kept)
            total[name] = total.get(name, 0) + found.total
        calls, tokens_in = calls + result.summarizer_calls, tokens_in + result.summarizer_tokens_in
        compactor.close()
    return CorpusTotals(cost, uncached, kept, total, tokens_in / calls if calls else 0.0)


@pytest.mark.corpus
@pytest.mark.parametrize(
    ("window", "baseline", "most"),
    [
        (16_000, "baseline-one-threshold", 0.80),
        (32_000, "baseline-one-threshold", 0.80),
        (64_000, "baseline-one-threshold", 0.72),
        (128_000, "baseline-none", 0.53),
        (200_000, "baseline-none", 0.53),
    ],
)
def test_the_default_costs_what_its_goals_allow_and_keeps_as_much(corpus_dir, make_compactor, window, baseline, most):
    """The cost goals the default meets, kept from regressing: at most 0.80 × the one-threshold
    policy at 16k (0.799: by 0.06 %, the thinnest margin) and 32k (0.772), 0.72 × at 64k (0.633),
    0.53 × no compaction at 128k and 200k (0.443), with every probe category kept at least as well
    as the baseline."""
    ours = corpus_totals(corpus_dir, make_compactor, "default", window)
    theirs = corpus_totals(corpus_dir, make_compactor, baseline, window)
    assert ours.cost <= most * theirs.cost, (ours.cost / theirs.cost, window)
    assert ours.total == theirs.total
    for name in ours.total:
        assert ours.kept[name] >= theirs.kept[name], (name, ours.kept[name], theirs.kept[name])


@pytest.mark.corpus
@pytest.mark.parametrize("window", [16_000, 32_000])
def test_without_a_prompt_cache_the_default_is_at_most_five_percent_dearer_than_any_baseline(
    corpus_dir, make_compactor, window
):
    """With no prompt cache the default must still cost at most 1.05 × the cheapest baseline that
    never overflows: truncation and one-threshold at these windows (masking and none overflow)."""
    ours = corpus_totals(corpus_dir, make_compactor, "default", window).uncached_cost
    cheapest = min(
        corpus_totals(corpus_dir, make_compactor, baseline, window).uncached_cost
        for baseline in ("baseline-one-threshold", "baseline-truncation")
    )
    assert ours <= 1.05 * cheapest, (ours / cheapest, window)


@pytest.mark.corpus
def test_summary_requests_are_at_most_half_as_large_as_classic_ones(corpus_dir, make_compactor):
    """Summarizer input per call, default against the classic tiers at 16k (the goal: at most half
    of what the classic requests took, 7,350 tokens then)."""
    lean = corpus_totals(corpus_dir, make_compactor, "default", 16_000).summarizer_input_per_call
    assert 0 < lean <= 7350 / 2


def test_a_replay_never_writes_to_the_configs_own_stores(tmp_path):
    from progressive_compactor.lab.replay import isolated_config

    own = load_config(
        "default",
        context_window=8000,
        data_dir=str(tmp_path / "production"),
        plugins={"state": "state-files", "stores": ["store-jsonl"], "extra": []},
        config={"store-jsonl": {"record_none": True}, "offload-files": {"preview_lines": 3}},
    )
    isolated = isolated_config(own, tmp_path / "scratch")
    assert isolated.data_dir == str(tmp_path / "scratch")
    assert (isolated.plugins.offload, isolated.plugins.state, isolated.plugins.stores) == (
        "offload-files",
        "state-memory",
        ("store-jsonl",),
    )
    assert isolated.plugin_block("store-jsonl") == {"record_none": True, "directory": "{data_dir}/records"}
    assert isolated.plugin_block("offload-files")["preview_lines"] == 3  # the config's own settings kept
    assert isolated.plugins.summarizer == own.plugins.summarizer and isolated.plugins.policy == own.plugins.policy
    records = isolated_config(own, tmp_path / "scratch", tmp_path / "kept-records")
    assert records.plugin_block("store-jsonl")["directory"] == str(tmp_path / "kept-records")

    from progressive_compactor import ProgressiveCompactor

    with ProgressiveCompactor(isolated) as compactor:
        result = replay_session(session(), compactor, "s", probes=False)
    assert result.compactions > 0
    assert not (tmp_path / "production").exists()
    assert (tmp_path / "scratch" / "records" / "s.jsonl").is_file()


def test_a_replay_with_another_store_uses_the_built_in_one(tmp_path):
    from progressive_compactor.lab.replay import isolated_config
    from progressive_compactor.testing import ListStore

    own = load_config("default", plugins={"stores": ["mine"], "offload": "none"}, extra_plugins={"mine": ListStore()})
    isolated = isolated_config(own, tmp_path)
    assert isolated.plugins.stores == ("store-jsonl",) and isolated.plugins.offload == "none"
    assert isolated.plugin_block("store-jsonl") == {"directory": "{data_dir}/records"}


def test_cache_friendly_summaries_are_billed_with_the_cached_view(make_compactor):
    """A cache-friendly summary request repeats the view: more input, most of it at the cached
    price (the previous call's view); a lean request has none cached."""
    messages = session()
    lean = replay_session(messages, make_compactor(context_window=8000), "s", probes=False)
    friendly = replay_session(
        messages, make_compactor(context_window=8000, summary_requests="cache-friendly"), "s", probes=False
    )
    assert [t.tier for t in friendly.turns] == [t.tier for t in lean.turns]
    assert all(t.summarizer_tokens_in_cached == 0 for t in lean.turns)
    calls = [t for t in friendly.turns if t.summarizer_calls]
    assert calls
    for turn in calls:
        previous = next(t for t in reversed(friendly.turns) if t.index < turn.index)
        assert 0 < turn.summarizer_tokens_in_cached <= previous.view_tokens
        assert turn.summarizer_tokens_in_cached < turn.summarizer_tokens_in
        assert turn.cost is not None
        prices = make_compactor().config.pricing
        full_price = turn.summarizer_tokens_in * prices.summarizer_input / 1e6
        assert turn.cost.summarizer < full_price + turn.summarizer_tokens_out * prices.summarizer_output / 1e6


def test_the_overhead_benchmark_times_its_parts_and_puts_every_function_back(tmp_path):
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "overhead.py"
    spec = importlib.util.spec_from_file_location("overhead_benchmark", path)
    assert spec is not None and spec.loader is not None
    overhead = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(overhead)
    history = build_history([6000] * 30)
    for i, message in enumerate(history):  # an answer after every result: a call to replay
        if message["role"] == "tool":
            history.insert(i + 1, {"role": "assistant", "content": f"Step {i} done."})
    session = tmp_path / "session.jsonl"
    session.write_text("".join(json.dumps(m) + "\n" for m in history))
    from progressive_compactor.plugin_manager import Hooks

    def functions():
        timed = {label: overhead.importlib.import_module(m).__dict__[n] for label, (m, n) in overhead.PARTS.items()}
        return timed, Hooks.__dict__["summarize"]

    before = functions()
    with overhead.timed_parts() as spent:
        by_tier = overhead.measure([session], "default", 16000, str(tmp_path))
    assert "Soft" in by_tier or "Full" in by_tier
    for label in ("facts of the folded messages", "offloaded results written", "record made JSON", "record appended"):
        assert spent[label] > 0, label
    total = sum(t for rows in by_tier.values() for t, _ in rows)
    assert sum(spent.values()) < total  # parts of the calls' own time, the summarizer's excluded
    assert functions() == before
    assert "µs a call" in overhead.parts_table(by_tier, spent)
