"""The YAML config: defaults of seed 2.2, strict structuring with one problem per line and its
path, bundled configs, files, overrides."""

from __future__ import annotations

from importlib import resources

import pytest

from progressive_compactor import CompactorConfig, ConfigError, PluginSelection, ProgressiveCompactor, load_config
from progressive_compactor.config import BUNDLED, config_to_dict, deep_merge
from progressive_compactor.validation import config_from_dict
from progressive_compactor.plugins.offload_files import FileOffloader
from progressive_compactor.plugins.policy_thresholds import ThresholdPolicy


def test_the_defaults_are_the_seeds():
    config = load_config("default")
    assert config == load_config(None)
    assert (config.min_tail_messages, config.offload_threshold, config.tool_result_threshold) == (6, 4000, 10_000)
    assert config.plugins == PluginSelection()
    thresholds = config.plugin_block("policy-thresholds")
    assert thresholds == {"warn": 0.60, "soft": 0.70, "full": 0.80, "emergency": 0.95}
    assert attrs_values(ThresholdPolicy.Config()) == thresholds
    assert FileOffloader.Config().preview_lines == 10 == config.plugin_block("offload-files")["preview_lines"]
    assert config.plugins.summarizer == "summarize-extractive"  # offline by default


def attrs_values(instance):
    import attrs

    return attrs.asdict(instance)


def test_the_default_config_matches_the_code_defaults():
    """Every key written out in default.yaml is the value the code would use without it."""
    config = load_config("default")
    assert attrs_values(config) | {"config": {}} == attrs_values(CompactorConfig()) | {"config": {}}


@pytest.mark.parametrize(
    "overrides, problem",
    [
        ({"bogus": 1}, "extra fields found (bogus) @ $"),
        ({"context_window": "10"}, "@ $.context_window"),
        ({"context_window": True}, "@ $.context_window"),
        ({"context_window": 12.5}, "@ $.context_window"),
        ({"fallback_budget": "half"}, "@ $.fallback_budget"),
        ({"plugins": {"summariser": "x"}}, "extra fields found (summariser) @ $.plugins"),
        ({"plugins": {"summarizer": 3}}, "@ $.plugins.summarizer"),
        ({"plugins": {"stores": "store-jsonl"}}, "@ $.plugins.stores"),
        ({"plugins": {"stores": ["store-jsonl", 3]}}, "@ $.plugins.stores[1]"),
        ({"context_window": 0}, "context_window must be positive @ $.context_window"),
        ({"min_tail_messages": -1}, "@ $.min_tail_messages"),
        ({"fallback_budget": 1.5}, "fallback_budget must be in (0, 1] @ $.fallback_budget"),
        ({"summary_share": 0}, "summary_share must be in (0, 1] @ $.summary_share"),
        ({"offload_break_factor": "4"}, "@ $.offload_break_factor"),
        ({"config": {"offload-files": 3}}, "@ $.config"),
    ],
    ids=[
        "unknown-key", "string-for-int", "bool-for-int", "float-for-int", "string-for-float",
        "unknown-role", "int-for-name", "string-for-list", "int-in-list", "zero-window", "negative-tail",
        "budget-over-one", "zero-summary-share", "string-for-break-factor", "scalar-block",
    ],
)
def test_invalid_settings_name_their_path(overrides, problem):
    with pytest.raises(ConfigError) as info:
        load_config("default", **overrides)
    assert any(problem in p for p in info.value.problems), info.value.problems
    assert info.value.source == "bundled:default"
    assert str(info.value).startswith("bundled:default: ")


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        config_from_dict({"context_window": "big", "min_tail_messages": "six", "plugins": {"nope": 1}})
    assert len(info.value.problems) == 3
    assert all(" @ $." in p for p in info.value.problems)


def test_thresholds_must_be_ordered(make_compactor):
    with pytest.raises(ConfigError, match=r"0 < warn <= soft <= full <= emergency.*@ \$.config.policy-thresholds"):
        make_compactor(config={"policy-thresholds": {"soft": 0.9}})


def test_a_yaml_file_is_loaded_by_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "context_window: 32000\nmin_tail_messages: 4\nplugins:\n  stores: []\n"
        "config:\n  offload-files: {threshold_is_not_a_key: 1}\n"
    )
    config = load_config(path)
    assert config.context_window == 32000 and config.min_tail_messages == 4
    assert config.plugins.stores == ()
    assert config.plugins.summarizer == "summarize-extractive"  # unspecified keys keep their defaults
    with pytest.raises(ConfigError, match="threshold_is_not_a_key"):
        ProgressiveCompactor(config)  # the block is checked by the plugin's Config class


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
    assert config.plugin_block("offload-files") == {"root": "{work_dir}/.compactor/tool_results", "preview_lines": 3}
    assert config.plugins.stores == () and config.plugins.summarizer == "summarize-extractive"
    assert deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}, "d": 4}) == {"a": {"b": 1, "c": 3}, "d": 4}


def test_a_config_object_takes_overrides_too(tmp_config):
    compactor = ProgressiveCompactor(tmp_config, context_window=5000)
    assert compactor.config.context_window == 5000
    assert compactor.config.plugin_block("store-jsonl") == tmp_config.plugin_block("store-jsonl")
    assert config_from_dict(config_to_dict(tmp_config)) == tmp_config


def test_plugin_selection_names():
    selection = PluginSelection(stores=("store-jsonl", "store-x"), extra=("store-x", "memo"), offload="none",
                                disable=("memo",))
    names = selection.names()
    assert names.count("store-x") == 1
    assert "none" not in names and "memo" not in names
    assert selection.roles()["summarizer"] == "summarize-extractive"


BUNDLED_FILES = sorted(
    p.name[: -len(".yaml")] for p in resources.files("progressive_compactor.configs").iterdir() if p.name.endswith(".yaml")
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
