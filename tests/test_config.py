"""The YAML config: the documented defaults, strict structuring with one problem per line and its
path, bundled configs, files, overrides."""

from __future__ import annotations

import math
from importlib import resources

import attrs
import pytest
import yaml

from progressive_compactor import CompactorConfig, ConfigError, PluginSelection, ProgressiveCompactor, load_config
from progressive_compactor.config import BUNDLED, config_to_dict, deep_merge
from progressive_compactor.plugins.offload_files import FileOffloader
from progressive_compactor.plugins.policy_cost import CostPolicy
from progressive_compactor.plugins.policy_thresholds import ThresholdPolicy
from progressive_compactor.validation import config_from_dict


def test_the_classic_config_has_the_documented_tiers_and_sizes():
    config = load_config("classic")
    assert (config.min_tail_messages, config.offload_threshold, config.tool_result_threshold) == (6, 4000, 10_000)
    assert config.plugins == attrs.evolve(PluginSelection(), policy="policy-thresholds")
    thresholds = config.plugin_block("policy-thresholds")
    assert thresholds == {"warn": 0.60, "soft": 0.70, "full": 0.80, "emergency": 0.95}
    assert attrs_values(ThresholdPolicy.Config()) == thresholds
    assert FileOffloader.Config().preview_lines == 10 == config.plugin_block("offload-files")["preview_lines"]
    assert config.plugins.summarizer == "summarize-extractive"  # offline


def test_the_default_config_keeps_the_tier_thresholds_as_its_safety_limits():
    config = load_config("default")
    assert config == load_config(None)
    assert config.plugins == PluginSelection() and config.plugins.policy == "policy-cost"
    policy = config.plugin_block("policy-cost")
    assert {k: policy[k] for k in ("warn", "soft", "full", "emergency")} == {
        "warn": 0.60,
        "soft": 0.70,
        "full": 0.80,
        "emergency": 0.95,
    }
    assert config.plugins.summarizer == "summarize-extractive"  # offline by default


def attrs_values(instance):
    import attrs

    return attrs.asdict(instance)


def test_the_default_config_matches_the_code_defaults():
    """Every key written out in default.yaml is the value the code would use without it, but the
    protected tail: the cheapest default keeps 4 messages, the setting's own default (and
    ``classic``) 6."""
    config = load_config("default")
    assert config.min_tail_messages == 4 and CompactorConfig().min_tail_messages == 6
    assert attrs_values(attrs.evolve(config, min_tail_messages=6)) | {"config": {}} == attrs_values(
        CompactorConfig()
    ) | {"config": {}}


@pytest.mark.parametrize(
    "overrides, problem",
    [
        ({"bogus": 1}, "unknown setting 'bogus' @ $.bogus"),
        ({"context_windw": 8000}, "unknown setting 'context_windw'; did you mean 'context_window'? @ $.context_windw"),
        ({"context_window": "10"}, "@ $.context_window"),
        ({"context_window": True}, "@ $.context_window"),
        ({"context_window": 12.5}, "@ $.context_window"),
        ({"fallback_budget": "half"}, "@ $.fallback_budget"),
        (
            {"plugins": {"summariser": "x"}},
            ("unknown setting 'summariser'; did you mean 'summarizer'? (settings: ", "@ $.plugins"),
        ),
        ({"plugins": {"summarizer": 3}}, "@ $.plugins.summarizer"),
        ({"plugins": {"stores": "store-jsonl"}}, "@ $.plugins.stores"),
        ({"plugins": {"stores": ["store-jsonl", 3]}}, "@ $.plugins.stores[1]"),
        ({"context_window": 0}, ("context_window must be more than 0, got 0 (", "@ $.context_window")),
        ({"min_tail_messages": -1}, "@ $.min_tail_messages"),
        (
            {"cached_sessions": 0},
            ("cached_sessions must be more than 0, got 0 (how many sessions'", "@ $.cached_sessions"),
        ),
        ({"summary_requests": "cached"}, "summary_requests must be lean or cache-friendly, got 'cached'"),
        (
            {"fallback_budget": 1.5},
            ("fallback_budget is a share of the window, more than 0 and at most 1, got 1.5", "@ $.fallback_budget"),
        ),
        (
            {"fallback_budget": 50},
            "fallback_budget is a share of the window, more than 0 and at most 1, got 50.0; did you mean 0.5? @ $.fallback_budget",
        ),
        (
            {"fallback_budget": float("inf")},
            "fallback_budget is a share of the window, more than 0 and at most 1, got inf @ $.fallback_budget",
        ),
        (
            {"summary_share": 0},
            "summary_share is a share of the window, more than 0 and at most 1, got 0.0 @ $.summary_share",
        ),
        (
            {"prose_share": 20},
            "prose_share is a share of the summary's size, at least 0 and at most 1, got 20.0; did you mean 0.2? @ $.prose_share",
        ),
        ({"offload_break_factor": 4.0}, "unknown setting 'offload_break_factor' @ $.offload_break_factor"),
        ({"config": {"tier-warn": {"offload_break_factor": "4"}}}, "@ $.config.tier-warn.offload_break_factor"),
        (
            {"config": {"tier-warn": {"offload_break_factor": 0}}},
            "offload_break_factor must be more than 0, got 0.0 @ $.config.tier-warn.offload_break_factor",
        ),
        ({"config": {"offload-files": 3}}, "@ $.config"),
        (
            {"config": {"policy-cost": {"emergency": math.inf}}},
            "thresholds are shares of the window (0.70 for 70 %), got inf @ $.config.policy-cost.emergency",
        ),
        (
            {
                "plugins": {"policy": "policy-single-threshold"},
                "config": {"policy-single-threshold": {"threshold": math.inf}},
            },
            "threshold is a share of the window between 0 and 1, got inf @ $.config.policy-single-threshold.threshold",
        ),
        *[
            (
                {
                    "plugins": {"tier_warn": "tier-observation-masking"},
                    "config": {"tier-observation-masking": {"placeholder": placeholder}},
                },
                "placeholder may name only {lines} and {chars} (write {{ and }} for a brace), got "
                f"{placeholder!r} @ $.config.tier-observation-masking.placeholder",
            )
            for placeholder in ("{lines[0]}", "{lines:>99999999999}", "{lines:{chars}}")
        ],
        (
            {"config": {"policy-cost": {"min_trigger_tokens": -1}}},
            "min_trigger_tokens must be 0 or more, got -1 @ $.config.policy-cost.min_trigger_tokens",
        ),
        (
            {
                "plugins": {"state": "state-redis"},
                "config": {"state-redis": {"url": "redis://127.0.0.1", "ttl": 0.0004}},
            },
            "ttl must be 0 (kept until deleted) or at least 0.001 seconds (Redis counts milliseconds), got 0.0004 "
            "@ $.config.state-redis.ttl",
        ),
        (
            {"config": {"summarize-extractive": {"max_prose_chars": 0}}},
            "max_prose_chars must be 200 or more, got 0 @ $.config.summarize-extractive.max_prose_chars",
        ),
        (
            {"plugins": {"extra": ["otel"]}, "config": {"otel": {"span_name": " "}}},
            "span_name must not be empty @ $.config.otel.span_name",
        ),
        (
            {"config": {"tokens-chars": {"chars_per_token": 0}}},
            "chars_per_token must be more than 0, got 0.0 @ $.config.tokens-chars.chars_per_token",
        ),
        (
            {"config": {"offload-files": {"rot": "/x"}}},
            "unknown setting 'rot'; did you mean 'root'? (settings: root, preview_lines, preview_chars) @ $.config.offload-files",
        ),
        (
            {"config": {"offload-file": {}}},
            "settings for plugin 'offload-file', which is not installed; did you mean 'offload-files'? @ $.config.offload-file",
        ),
        (
            {"plugins": {"summarizer": "sumarize-extractive"}},
            "unknown plugin 'sumarize-extractive'; did you mean 'summarize-extractive'? @ $.plugins.summarizer; installed: ",
        ),
        (
            {"plugins": {"summarizer": "tokens-chars"}},
            "plugin 'tokens-chars' cannot fill the role summarizer: it does not implement summarize @ $.plugins.summarizer",
        ),
        (
            {"plugins": {"state": "state-memory", "stores": ["tokens-chars"]}},
            "plugin 'tokens-chars' cannot fill the role stores: it does not implement persist_record @ $.plugins.stores",
        ),
    ],
    ids=[
        "unknown-key",
        "misspelt-key",
        "string-for-int",
        "bool-for-int",
        "float-for-int",
        "string-for-float",
        "unknown-role",
        "int-for-name",
        "string-for-list",
        "int-in-list",
        "zero-window",
        "negative-tail",
        "no-cached-sessions",
        "unknown-summary-requests",
        "budget-over-one",
        "budget-in-percent",
        "infinite-budget",
        "zero-summary-share",
        "prose-share-in-percent",
        "break-factor-is-no-core-setting",
        "string-for-break-factor",
        "zero-break-factor",
        "scalar-block",
        "infinite-threshold",
        "infinite-single-threshold",
        "indexed-placeholder",
        "placeholder-too-wide",
        "placeholder-nested-width",
        "negative-cost-trigger",
        "redis-ttl-under-a-millisecond",
        "no-room-for-prose",
        "empty-span-name",
        "validator-message",
        "unknown-plugin-setting",
        "block-of-unknown-plugin",
        "unknown-plugin",
        "plugin-without-the-roles-hook",
        "store-without-persist-record",
    ],
)
def test_invalid_settings_name_their_path(overrides, problem):
    with pytest.raises(ConfigError) as info:
        load_config("default", **overrides)
    parts = (problem,) if isinstance(problem, str) else problem
    assert any(all(part in p for part in parts) for p in info.value.problems), info.value.problems
    assert info.value.source == "bundled:default"
    assert str(info.value).startswith("bundled:default: ")


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        config_from_dict({"context_window": "big", "min_tail_messages": "six", "plugins": {"nope": 1}})
    assert len(info.value.problems) == 3
    assert all(" @ $." in p for p in info.value.problems)


def test_problems_of_the_core_and_of_plugin_blocks_are_reported_together():
    with pytest.raises(ConfigError) as info:
        config_from_dict(
            {
                "context_window": 0,
                "plugins": {"summarizer": "nope"},
                "config": {"offload-files": {"rot": 1}, "tokens-chars": {"chars_per_token": -1}},
            }
        )
    paths = sorted(p.rsplit(" @ ", 1)[1].split(";")[0] for p in info.value.problems)
    assert paths == [
        "$.config.offload-files",
        "$.config.tokens-chars.chars_per_token",
        "$.context_window",
        "$.plugins.summarizer",
    ]


def test_a_block_for_an_installed_plugin_that_is_not_selected_is_kept_unused():
    config = load_config("default", config={"summarize-openai": {"model": "gpt-x"}})
    assert config.plugins.summarizer == "summarize-extractive"
    assert config.plugin_block("summarize-openai") == {"model": "gpt-x"}
    with pytest.raises(ConfigError, match=r"summarize-openai"):  # once selected, its block is checked
        load_config("default", plugins={"summarizer": "summarize-openai"}, config={"summarize-openai": {"modl": "x"}})


def test_a_data_folder_that_is_a_file_is_refused_from_the_config_and_the_environment(tmp_path, monkeypatch):
    afile = tmp_path / "afile"
    afile.write_text("")
    for data_dir in (afile, afile / "sub"):
        with pytest.raises(ConfigError) as info:
            load_config("default", data_dir=str(data_dir))
        assert info.value.problems == [
            f"data_dir {str(data_dir)!r} is not a folder: {str(afile)!r} is a file; name a folder"
            " (created if missing) @ $.data_dir"
        ]
    monkeypatch.setenv("COMPACTOR_DATA_DIR", str(afile))
    with pytest.raises(ConfigError) as info:
        load_config("default")
    assert info.value.problems == [
        f"the environment variable COMPACTOR_DATA_DIR {str(afile)!r} is not a folder: {str(afile)!r} is a file;"
        " name a folder (created if missing), or set data_dir @ $.data_dir"
    ]
    assert load_config("default", data_dir=str(tmp_path / "new")).data_dir == str(tmp_path / "new")  # data_dir wins


def test_a_duplicate_key_in_yaml_is_an_error(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("context_window: 1000\nplugins: {}\ncontext_window: 2000\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (problem,) = info.value.problems
    assert problem.startswith("invalid YAML at line 3, column 1: duplicate key 'context_window' (first on line 1)")
    assert info.value.source == str(path)


def test_a_yaml_merge_key_may_be_overridden_but_an_explicit_key_not_repeated(tmp_path, monkeypatch):
    from progressive_compactor.validation import parse_yaml

    monkeypatch.setenv("AGENTS_DB", "postgresql://agents:pw@db.internal:5432/agents")
    path = tmp_path / "fleet.yaml"
    path.write_text(  # as docs/fleet.md shares one block, with one setting overridden
        "plugins: {state: state-postgres, stores: [store-postgres]}\n"
        "config:\n"
        "  state-postgres: &db {dsn_env: AGENTS_DB, schema: compactor, timeout: 5}\n"
        "  store-postgres: {<<: *db, timeout: 30}\n"
    )
    config = load_config(path)
    assert config.plugin_block("store-postgres") == {"dsn_env": "AGENTS_DB", "schema": "compactor", "timeout": 30}
    assert config.plugin_block("state-postgres")["timeout"] == 5
    with pytest.raises(ConfigError, match=r"line 2.*duplicate key 'y' \(first on line 2\)"):
        parse_yaml("a: &a {x: 1}\nb: {<<: *a, y: 2, y: 3}\n", "twice.yaml")
    assert parse_yaml("a: &a {x: 1}\nb: &b {y: 1}\nc: {<<: [*a, *b], x: 2}\n", "ok.yaml")["c"] == {"x": 2, "y": 1}


def test_a_duplicate_key_inside_a_plugin_block_is_an_error_too(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("config:\n  offload-files:\n    preview_lines: 3\n    preview_lines: 4\n")
    with pytest.raises(ConfigError, match=r"line 4.*duplicate key 'preview_lines' \(first on line 3\)"):
        load_config(path)


def test_a_config_object_is_validated_by_the_compactor(tmp_path):
    import attrs

    with pytest.raises(ConfigError, match=r"context_window must be more than 0, got 0 .*@ \$\.context_window"):
        ProgressiveCompactor(CompactorConfig(context_window=0, data_dir=str(tmp_path)))
    good = CompactorConfig(data_dir=str(tmp_path))
    typo = attrs.evolve(good, plugins=attrs.evolve(good.plugins, summarizer="sumarize-extractive"))
    with pytest.raises(ConfigError, match=r"did you mean 'summarize-extractive'\? @ \$\.plugins\.summarizer"):
        ProgressiveCompactor(typo)
    with ProgressiveCompactor(good) as compactor:
        assert compactor.config == good


def test_an_empty_session_id_is_rejected(tmp_path):
    from progressive_compactor import CompactorError

    with pytest.raises(CompactorError, match="session_id must not be empty"):
        ProgressiveCompactor(CompactorConfig(data_dir=str(tmp_path)), session_id="")


def test_thresholds_must_be_ordered(make_compactor):
    with pytest.raises(ConfigError, match=r"0 < warn <= soft <= full <= emergency.*@ \$.config.policy-thresholds"):
        make_compactor(config={"policy-thresholds": {"soft": 0.9}})


def test_a_mapping_is_a_config_as_a_yaml_file_holds_it(tmp_path):
    data = {"context_window": 32000, "plugins": {"stores": []}, "config": {"offload-files": {"preview_lines": 3}}}
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(data))
    from_dict = ProgressiveCompactor(data, data_dir=str(tmp_path), min_tail_messages=5).config
    from_file = ProgressiveCompactor(str(tmp_path / "mine.yaml"), data_dir=str(tmp_path), min_tail_messages=5).config
    assert from_dict == from_file and from_dict.context_window == 32000 and from_dict.min_tail_messages == 5
    with pytest.raises(ConfigError, match=r"unknown setting 'windw'.* @ \$\.windw"):
        ProgressiveCompactor({"windw": 1})  # checked as a file's content is, not read as a file name


def test_a_yaml_file_is_loaded_by_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("context_window: 32000\nmin_tail_messages: 4\nplugins:\n  stores: []\n")
    config = load_config(path)
    assert config.context_window == 32000 and config.min_tail_messages == 4
    assert config.plugins.stores == ()
    assert config.plugins.summarizer == "summarize-extractive"  # unspecified keys keep their defaults
    with path.open("a") as f:
        f.write("config:\n  offload-files: {threshold_is_not_a_key: 1}\n")
    with pytest.raises(ConfigError) as info:  # the block is checked by the plugin's Config class, on loading
        load_config(path)
    (problem,) = info.value.problems
    assert problem.startswith("unknown setting 'threshold_is_not_a_key'") and problem.endswith(
        "@ $.config.offload-files"
    )
    assert info.value.source == str(path)


def test_invalid_yaml_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("context_window: 1000\nplugins: [unclosed\n")
    with pytest.raises(ConfigError, match=r"invalid YAML at line \d+") as info:
        load_config(path)
    assert info.value.source == str(path)


def test_a_missing_file_lists_the_bundled_configs(tmp_path):
    with pytest.raises(ConfigError, match="bundled configs: default"):
        load_config(tmp_path / "nope.yaml")


def test_a_top_level_that_is_not_a_mapping_is_rejected(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match=r"expected a mapping at the top level, got list @ \$"):
        load_config(path)


def test_an_empty_file_is_the_default(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config(path) == CompactorConfig()


def test_overrides_are_deep_merged():
    config = load_config("default", config={"offload-files": {"preview_lines": 3}}, plugins={"stores": []})
    assert config.plugin_block("offload-files") == {"root": "{data_dir}/tool_results", "preview_lines": 3}
    assert config.plugins.stores == () and config.plugins.summarizer == "summarize-extractive"
    assert deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}, "d": 4}) == {"a": {"b": 1, "c": 3}, "d": 4}


def test_a_config_object_takes_overrides_too(tmp_config):
    compactor = ProgressiveCompactor(tmp_config, context_window=5000)
    assert compactor.config.context_window == 5000
    assert compactor.config.plugin_block("store-jsonl") == tmp_config.plugin_block("store-jsonl")
    assert config_from_dict(config_to_dict(tmp_config)) == tmp_config


def test_plugin_selection_names():
    selection = PluginSelection(
        stores=("store-jsonl", "store-x"), extra=("store-x", "memo"), offload="none", disable=("memo",)
    )
    names = selection.names()
    assert names.count("store-x") == 1
    assert "none" not in names and "memo" not in names
    assert selection.roles()["summarizer"] == "summarize-extractive"


BUNDLED_FILES = sorted(
    p.name[: -len(".yaml")]
    for p in resources.files("progressive_compactor.configs").iterdir()
    if p.name.endswith(".yaml")
)


@pytest.mark.parametrize("name", BUNDLED_FILES)
def test_every_bundled_config_loads(name):
    assert name in BUNDLED
    config = load_config(name)
    assert config.plugins.fallback != "none"


def test_secrets_are_named_not_written():
    for name in BUNDLED_FILES:
        text = resources.files("progressive_compactor.configs").joinpath(f"{name}.yaml").read_text()
        assert "sk-" not in text and "api_key:" not in text, name


@pytest.mark.parametrize("name", ["fleet-sqlite", "fleet-postgres", "fleet-redis"])
def test_a_fleet_config_is_the_default_policy_with_shared_stores(name):
    fleet, default = load_config(name), load_config("default")
    shared = {"state": default.plugins.state, "offload": default.plugins.offload, "stores": default.plugins.stores}
    assert attrs.evolve(fleet.plugins, **shared) == default.plugins
    assert fleet.min_tail_messages == default.min_tail_messages and fleet.pin_request == default.pin_request
    for block in ("tier-soft", "tier-warn", "summarize-extractive"):
        assert fleet.plugin_block(block) == default.plugin_block(block), block
    # default.yaml writes out policy-cost's own defaults, which a fleet config leaves implicit
    assert CostPolicy.Config(**default.plugin_block("policy-cost")) == CostPolicy.Config()
    assert CostPolicy.Config(**fleet.plugin_block("policy-cost")) == CostPolicy.Config()


def test_cache_aware_runs_the_thresholds_it_configures():
    config = load_config("cache-aware")
    assert config.plugins.policy == "policy-thresholds"
    assert config.plugin_block("policy-thresholds")["soft"] == config.plugin_block("policy-thresholds")["full"]


@pytest.mark.parametrize(
    "headers",
    [{"X-Api-Key": 8723467823648723}, {"Authorization": ["Bearer", "tok9876543210"]}, {"x-token": {"k": 55512349876}}],
    ids=["number", "list", "mapping"],
)
def test_a_header_of_the_wrong_type_is_named_without_its_value(tmp_path, headers):
    """An ``extra_headers`` value is a secret whatever its name (an unquoted numeric key is a
    number in YAML): the error names the header and the type it should be, never the value."""
    with pytest.raises(ConfigError) as info:
        load_config(
            "default",
            data_dir=str(tmp_path),
            plugins={"summarizer": "summarize-openai"},
            config={"summarize-openai": {"extra_headers": headers}},
        )
    text = str(info.value)
    name = next(iter(headers))
    assert f"extra_headers[{name!r}]" in text and "expected str" in text
    for secret in ("8723467823648723", "tok9876543210", "55512349876"):
        assert secret not in text
