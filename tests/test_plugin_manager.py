"""The plugin manager: entry points, selection, per-plugin config, essential plugins, failures that
name the plugin, broadcast hooks that keep going. Entry points are faked, never installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from progressive_compactor import CompactionTier, ConfigError, PluginError, hookimpl, load_config, plugin_manager
from progressive_compactor.plugin_manager import (
    BUILTIN_PLUGINS,
    GROUP,
    Hooks,
    PluginContext,
    PluginInfo,
    get_plugin_manager,
    installed_plugins,
)
from progressive_compactor.testing import ListStore, build_history, problems, window_for


@pytest.fixture
def fake_plugins(monkeypatch, tmp_path):
    """``add(name, source)``: an installed plugin whose module ``source`` is written to tmp_path."""
    real = installed_plugins()
    extra: dict[str, PluginInfo] = {}
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugin_manager, "installed_plugins", lambda: {**real, **extra})

    def add(name, source, attr="Plugin", distribution="fake-dist"):
        module = "fake_" + name.replace("-", "_")
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
        extra[name] = PluginInfo(name, distribution, "1.0", f"{module}:{attr}")
        return module

    return add


# --- entry points ----------------------------------------------------------------------------


def test_built_ins_are_entry_points_of_our_group():
    installed = installed_plugins()
    assert set(BUILTIN_PLUGINS) <= set(installed)
    for name in BUILTIN_PLUGINS:
        assert installed[name].distribution == "progressive-compactor"
        assert installed[name].value.startswith("progressive_compactor.plugins.")


def fake_entry_point(name, value, dist):
    return SimpleNamespace(
        name=name, value=value, group=GROUP, dist=SimpleNamespace(metadata={"Name": dist}, version="1")
    )


def test_duplicates_of_one_distribution_are_merged(monkeypatch):
    eps = [fake_entry_point("x", "a:B", "dist-a"), fake_entry_point("x", "a:B", "dist-a")]
    monkeypatch.setattr(plugin_manager.metadata, "entry_points", lambda group: eps)
    monkeypatch.setattr(plugin_manager, "_INSTALLED", {})  # what was read before the fake
    assert list(installed_plugins()) == ["x"]


def test_two_distributions_declaring_one_name_are_a_conflict_naming_both(monkeypatch):
    eps = [fake_entry_point("x", "a:B", "dist-a"), fake_entry_point("x", "c:D", "dist-c")]
    monkeypatch.setattr(plugin_manager.metadata, "entry_points", lambda group: eps)
    monkeypatch.setattr(plugin_manager, "_INSTALLED", {})
    with pytest.raises(PluginError, match=r"dist-a \(a:B\) and dist-c \(c:D\)"):
        installed_plugins()


def test_an_unknown_plugin_name_lists_the_installed_ones(make_compactor):
    with pytest.raises(ConfigError) as info:
        make_compactor(plugins={"summarizer": "summarize-telepathy"})
    (problem,) = info.value.problems
    assert problem.startswith("unknown plugin 'summarize-telepathy'")
    assert " @ $.plugins.summarizer; installed: " in problem
    for name in BUILTIN_PLUGINS:
        assert name in problem.split("; installed: ")[1]


def test_an_unknown_plugin_name_suggests_the_closest(make_compactor):
    with pytest.raises(ConfigError) as info:
        make_compactor(plugins={"stores": ["store-jsnl"]})
    (problem,) = info.value.problems
    assert problem.startswith(
        "unknown plugin 'store-jsnl'; did you mean 'store-jsonl'? @ $.plugins.stores; installed: "
    )


def test_a_plugin_that_fails_to_import_is_named_with_its_distribution(make_compactor, fake_plugins):
    fake_plugins("broken", "import this_module_does_not_exist_anywhere\n", distribution="acme-compactor-plugins")
    with pytest.raises(ConfigError) as info:  # checking the config imports what it selects
        make_compactor(plugins={"extra": ["broken"]})
    (problem,) = info.value.problems
    assert problem == (
        "plugin 'broken' from distribution acme-compactor-plugins failed to import: "
        "ModuleNotFoundError: No module named 'this_module_does_not_exist_anywhere' @ $.plugins"
    )
    with pytest.raises(PluginError) as raised:
        plugin_manager.load_plugin_object(plugin_manager.installed_plugins()["broken"])
    assert raised.value.plugin == "broken"
    assert raised.value.distribution == "acme-compactor-plugins"
    assert isinstance(raised.value.__cause__, ModuleNotFoundError)


def test_a_plugin_that_exits_at_import_is_an_import_failure_like_any_other(make_compactor, fake_plugins):
    fake_plugins("exit-import", "import sys\nsys.exit('plugin exits at import')\n", distribution="acme")
    with pytest.raises(ConfigError) as info:
        make_compactor(plugins={"extra": ["exit-import"]})
    assert info.value.problems == [
        "plugin 'exit-import' from distribution acme failed to import: SystemExit: plugin exits at import @ $.plugins"
    ]
    with pytest.raises(PluginError) as raised:
        plugin_manager.load_plugin_object(plugin_manager.installed_plugins()["exit-import"])
    assert isinstance(raised.value.__cause__, SystemExit)


def test_a_plugin_that_fails_to_start_is_named(make_compactor, fake_plugins):
    fake_plugins(
        "grumpy",
        """
        class Plugin:
            def __init__(self):
                raise RuntimeError("no mood today")
    """,
    )
    with pytest.raises(ConfigError) as info:
        make_compactor(plugins={"extra": ["grumpy"]})
    assert info.value.problems == ["plugin 'grumpy' failed to start: RuntimeError: no mood today @ $.config.grumpy"]


CLOSING = """
    from progressive_compactor.plugin import hookimpl

    closed = []

    class Raises:
        @hookimpl
        def persist_record(self, record):
            pass

        def close(self):
            raise RuntimeError("close boom")

    class Notes:
        @hookimpl
        def persist_record(self, record):
            pass

        def close(self):
            closed.append("notes")
"""
"""Two plugins: one whose close() raises, and one that notes it was closed."""


def test_a_plugin_whose_close_raises_is_named_and_the_others_are_closed_all_the_same(
    make_compactor, fake_plugins, tmp_path, caplog
):
    from progressive_compactor.validation import config_file_problems

    fake_plugins("close-raise", CLOSING, attr="Raises")
    module = fake_plugins("close-notes", CLOSING, attr="Notes")
    compactor = make_compactor(plugins={"extra": ["close-raise", "close-notes"]})
    with caplog.at_level("WARNING", logger="progressive_compactor"):
        compactor.close()  # raises nothing
    assert sys.modules[module].closed == ["notes"]
    assert "close of plugin close-raise failed: RuntimeError: close boom" in caplog.text
    config = tmp_path / "closing.yaml"
    config.write_text("plugins: {extra: [close-raise, close-notes]}\n", "utf-8")
    assert config_file_problems(config) == [
        "plugin 'close-raise' failed to close: RuntimeError: close boom @ $.config.close-raise"
    ]
    assert sys.modules[module].closed == ["notes", "notes"]


def test_a_plugin_whose_aclose_raises_is_named_and_the_others_are_closed_all_the_same(make_compactor, caplog):
    import asyncio

    closed = []

    class Raises:
        @hookimpl
        def persist_record(self, record):
            pass

        async def aclose(self):
            raise RuntimeError("aclose boom")

    class Notes(Raises):
        async def aclose(self):
            closed.append("aclose")

        def close(self):
            closed.append("close")

    compactor = make_compactor(extra_plugins=[("raises", Raises()), ("notes", Notes())])
    with caplog.at_level("WARNING", logger="progressive_compactor"):
        asyncio.run(compactor.aclose())  # raises nothing
    assert closed == ["aclose", "close"]
    assert "aclose of plugin raises failed: RuntimeError: aclose boom" in caplog.text


def test_a_plugin_class_in_extra_plugins_is_started_with_its_block_as_an_installed_one(make_compactor):
    import attrs

    from progressive_compactor import SummaryResult

    class AcmeSummarizer:
        @attrs.frozen
        class Config:
            prefix: str = "x"

        def __init__(self, config):
            self.config = config

        @hookimpl
        def summarize(self, request):
            return SummaryResult(text=f"## User Intent\n{self.config.prefix}\n## Summary\ns", model="acme")

    history = build_history([3000] * 12)
    options = {"plugins": {"summarizer": "acme"}, "extra_plugins": [("acme", AcmeSummarizer)]}
    compactor = make_compactor(
        context_window=window_for(history, 0.85), config={"acme": {"prefix": "HELLO"}}, **options
    )
    view, record = compactor.compact_with_record(history)
    assert isinstance(compactor.pm.get_plugin("acme"), AcmeSummarizer) and not record.fallback
    assert "HELLO" in record.anchors[0].content
    with pytest.raises(ConfigError, match=r"prefix"):
        make_compactor(config={"acme": {"prefix": 3}}, **options)


def test_unselected_plugins_are_never_imported(make_compactor, fake_plugins):
    module = fake_plugins("trap", "raise RuntimeError('imported although not selected')\n")
    make_compactor()
    assert module not in sys.modules


def test_building_the_default_compactor_imports_no_unselected_built_in(tmp_path):
    code = f"""
import sys
from progressive_compactor import ProgressiveCompactor
ProgressiveCompactor("default", data_dir={str(tmp_path)!r})
print(",".join(sorted(m for m in sys.modules if m.startswith("progressive_compactor.plugins.") or m == "httpx")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = {m.rsplit(".", 1)[-1] for m in out.strip().split(",") if m}
    selected = {name.replace("-", "_") for name in load_config("default").plugins.names()}
    assert "httpx" not in loaded
    assert loaded <= selected  # plugins share helpers through progressive_compactor.plugin, not each other
    assert "summarize_openai" not in loaded and "state_files" not in loaded


def test_a_third_party_plugin_gets_its_config_block_and_the_context(make_compactor, fake_plugins, tmp_path):
    fake_plugins(
        "greeter",
        """
        import attrs
        from progressive_compactor import hookimpl

        class Plugin:
            @attrs.frozen
            class Config:
                greeting: str = "hello"
                times: int = 1

            instances = []

            def __init__(self, config, context):
                self.config, self.context = config, context
                Plugin.instances.append(self)

            @hookimpl
            def todo_context(self, session_id):
                return " ".join([self.config.greeting] * self.config.times)
    """,
    )
    compactor = make_compactor(plugins={"extra": ["greeter"]}, config={"greeter": {"greeting": "hi", "times": 2}})
    plugin = compactor.pm.get_plugin("greeter")
    assert plugin.config.greeting == "hi" and plugin.config.times == 2
    assert isinstance(plugin.context, PluginContext) and plugin.context.data_dir == str(tmp_path)
    assert plugin.context.config == compactor.config and plugin.context.secrets is compactor.secrets
    assert plugin.context.path("{data_dir}/greeter/cache") == tmp_path / "greeter" / "cache"
    assert compactor.hooks.todo_context("s") == ["hi hi"]


@pytest.mark.parametrize(
    "block, expected",
    [
        ({"bogus": 1}, "bogus"),
        ({"preview_lines": "10"}, "$.config.offload-files.preview_lines"),
        ({"preview_lines": True}, "$.config.offload-files.preview_lines"),
        ({"root": ["a", "b"]}, "$.config.offload-files.root"),
    ],
    ids=["unknown-key", "string-for-int", "bool-for-int", "list-for-str"],
)
def test_a_plugin_block_is_checked_strictly(make_compactor, block, expected):
    with pytest.raises(ConfigError) as info:
        make_compactor(config={"offload-files": block})
    assert any(expected in p and "$.config.offload-files" in p for p in info.value.problems), info.value.problems


def test_a_block_for_a_plugin_that_is_not_installed_is_a_typo(make_compactor):
    with pytest.raises(ConfigError, match="settings for plugin 'ofload-files', which is not installed"):
        make_compactor(config={"ofload-files": {"root": "/tmp"}})


def test_a_module_plugin_takes_no_settings(make_compactor, fake_plugins):
    fake_plugins("modplugin", "x = 1\n", attr="x")
    with pytest.raises(
        ConfigError, match=r"plugin 'modplugin' takes no settings; remove the block @ \$.config.modplugin"
    ):
        make_compactor(plugins={"extra": ["modplugin"]}, config={"modplugin": {"a": 1}})


def test_a_misspelt_hook_fails_loudly(make_compactor):
    class Typo:
        @hookimpl
        def summarise(self, request):  # British spelling: not a hook of ours
            return None

    with pytest.raises(PluginError, match="unknown hook"):
        make_compactor(extra_plugins=[("typo", Typo())])


# --- essential and disabled plugins ---------------------------------------------------------------


def test_the_fallback_cannot_be_disabled():
    with pytest.raises(
        ConfigError, match=r"fallback-token-budget is essential and cannot be disabled; remove it @ \$.plugins.disable"
    ):
        load_config("default", plugins={"disable": ["fallback-token-budget"]})
    with pytest.raises(
        ConfigError,
        match=r"the fallback role cannot be empty; the core must always be able to truncate: use fallback-token-budget @ \$.plugins.fallback",
    ):
        load_config("default", plugins={"fallback": "none"})


def test_the_essential_fallback_backs_up_a_fallback_that_gives_no_answer(make_compactor):
    class Shrug:
        def __init__(self):
            self.calls = 0

        @hookimpl
        def fallback_compact(self, messages, pinned, budget, estimate):
            self.calls += 1
            return None

    shrug = Shrug()
    history = build_history([5000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.97), extra_plugins=[("shrug", shrug)])
    view, record = compactor.compact_with_record(history)
    assert shrug.calls >= 1
    assert record.tier is CompactionTier.EMERGENCY
    assert "fallback-token-budget" in compactor.hooks.implementers("fallback_compact")
    assert problems(view) == []


def test_disabled_plugins_are_not_loaded_even_when_selected(make_compactor, tmp_path):
    history = build_history([5000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.85), plugins={"disable": ["store-jsonl"]})
    assert compactor.pm.get_plugin("store-jsonl") is None
    assert compactor.pm.is_blocked("store-jsonl")
    compactor.compact_with_record(history)
    assert not (tmp_path / "records").exists()


def test_an_optional_role_can_be_left_empty(make_compactor):
    history = build_history([5000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.65), plugins={"offload": "none"})
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.WARN
    assert record.offloaded == () and view == history


# --- the manager and the facade ---------------------------------------------------------------------


def test_each_compactor_gets_a_fresh_manager_and_fresh_plugins(make_compactor):
    a, b = make_compactor(), make_compactor()
    assert a.pm is not b.pm
    assert a.pm.get_plugin("state-memory") is not b.pm.get_plugin("state-memory")


def test_get_plugin_manager_registers_what_the_config_selects(tmp_config):
    pm = get_plugin_manager(tmp_config)
    names = {name for name, _ in pm.list_name_plugin()}
    assert set(tmp_config.plugins.names()) <= names
    assert "summarize-openai" not in names
    assert Hooks(pm).implementers("summarize") == ["summarize-extractive"]


def test_a_firstresult_default_gives_way_whatever_the_registration_order(make_compactor, recording_summarizer):
    history = build_history([5000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.85), extra_plugins=[("mine", recording_summarizer)])
    _, record = compactor.compact_with_record(history)
    assert recording_summarizer.calls == 1
    assert compactor.hooks.implementers("summarize")[-1] == "mine"  # pluggy calls it first


def test_broadcast_hooks_call_everyone_even_after_a_failure(make_compactor, tmp_path):
    class BrokenCleaner:
        @hookimpl(tryfirst=True)
        def on_delete_session(self, session_id):
            raise PermissionError("read-only volume")

    store = ListStore()
    compactor = make_compactor(extra_plugins=[("broken", BrokenCleaner()), ("list", store)])
    compactor.offload_tool_result({"role": "tool", "tool_call_id": "c", "content": "x" * 20_000}, "s1")
    errors = compactor.delete_session("s1")
    assert errors == ["broken: PermissionError: read-only volume"]
    assert store.deleted == ["s1"]
    assert not (tmp_path / "tool_results" / "s1").exists()


def test_extract_memory_failures_are_skipped_silently(make_compactor):
    class Amnesiac:
        @hookimpl
        def extract_memory(self, messages, session_id):
            raise RuntimeError("vector store unreachable")

    history = build_history([5000] * 10)
    compactor = make_compactor(context_window=window_for(history, 0.85), extra_plugins=[("amnesiac", Amnesiac())])
    view, record = compactor.compact_with_record(history)
    assert record.tier is CompactionTier.FULL and record.summarized == 15
    assert record.errors == ()  # fail-open: skipped silently, nothing in the record


def test_record_names_the_plugins_that_answered(make_compactor):
    _, record = make_compactor().compact_with_record(build_history([10]))
    assert record.plugins["policy"] == "policy-thresholds"
    assert record.plugins["fallback"] == "fallback-token-budget"
    assert record.plugins["tier_full"] == "tier-full"


# --- roles are a contract ---------------------------------------------------------------------------


class NoTierHook:
    @hookimpl
    def todo_context(self, session_id):
        return None


def test_a_plugin_selected_for_a_role_must_implement_its_hooks(make_compactor):
    with pytest.raises(ConfigError) as info:
        make_compactor(plugins={"tier_warn": "tokens-chars", "state": "store-jsonl"})
    assert sorted(info.value.problems) == [
        "plugin 'store-jsonl' cannot fill the role state: it does not implement load_state, save_state @ $.plugins.state",
        "plugin 'tokens-chars' cannot fill the role tier_warn: it does not implement apply_tier @ $.plugins.tier_warn",
    ]


def test_an_object_of_the_caller_selected_for_a_role_is_checked_too(make_compactor):
    with pytest.raises(
        ConfigError,
        match=r"plugin 'mine' cannot fill the role tier_soft: it does not implement apply_tier @ \$.plugins.tier_soft",
    ):
        make_compactor(plugins={"tier_soft": "mine"}, extra_plugins=[("mine", NoTierHook())])


def test_a_tier_plugin_that_returns_no_plan_is_named(make_compactor):
    class Sloppy:
        @hookimpl
        def apply_tier(self, tier_input):
            return "offload please"

    history = build_history([5000] * 10)
    compactor = make_compactor(
        context_window=window_for(history, 0.65), plugins={"tier_warn": "sloppy"}, extra_plugins=[("sloppy", Sloppy())]
    )
    with pytest.raises(PluginError, match="plugin 'sloppy' returned str from apply_tier, not a TierPlan") as info:
        compactor.compact_with_record(history)
    assert info.value.plugin == "sloppy"


# --- hooks that read what plugins keep --------------------------------------------------------------


def test_list_sessions_merges_every_plugins_answer_and_survives_a_failure(make_compactor, tmp_path):
    from progressive_compactor import SessionInfo

    class Remote:
        @hookimpl
        def list_sessions(self):
            return [SessionInfo("remote-1", 1234.0, "remote", "db://sessions")]

    class Down:
        @hookimpl
        def list_sessions(self):
            raise ConnectionError("database is down")

    compactor = make_compactor(extra_plugins=[("remote", Remote()), ("down", Down())])
    compactor.offload_tool_result({"role": "tool", "tool_call_id": "c", "content": "x" * 20_000}, "local-1")
    found = {(i.session_id, i.plugin) for i in compactor.sessions()}
    assert found == {("remote-1", "remote"), ("local-1", "offload-files")}
    infos, errors = compactor.hooks.list_sessions()
    assert len(infos) == 2 and errors == ["down: ConnectionError: database is down"]


def test_tier_thresholds_come_from_the_policy_and_a_plugin_may_override_them(make_compactor):
    assert make_compactor().hooks.tier_thresholds() == {"warn": 0.6, "soft": 0.7, "full": 0.8, "emergency": 0.95}
    single = make_compactor(
        plugins={"policy": "policy-single-threshold"},
        config={"policy-single-threshold": {"threshold": 0.5, "tier": "soft"}},
    )
    assert single.hooks.tier_thresholds() == {"soft": 0.5}

    class Charts:
        @hookimpl
        def tier_thresholds(self):
            return {"emergency": 0.99}

    assert make_compactor(extra_plugins=[("charts", Charts())]).hooks.tier_thresholds() == {"emergency": 0.99}


def test_the_plugin_context_resolves_the_data_dir(monkeypatch, tmp_path):
    from progressive_compactor import CompactorConfig

    monkeypatch.setenv("COMPACTOR_DATA_DIR", str(tmp_path / "from-env"))
    assert PluginContext().data_dir == str(tmp_path / "from-env")
    monkeypatch.delenv("COMPACTOR_DATA_DIR")
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert PluginContext().data_dir == str(tmp_path / "home" / ".local" / "share" / "progressive-compactor")
    context = PluginContext(CompactorConfig(data_dir="~/compactor"))
    assert context.data_dir == str(tmp_path / "home" / "compactor")
    assert context.path("{data_dir}/records") == tmp_path / "home" / "compactor" / "records"
    assert context.path("/elsewhere/state") == Path("/elsewhere/state")


def test_the_installed_plugins_are_read_again_when_an_installation_changes_sys_path(monkeypatch, tmp_path):
    first = installed_plugins()
    eps = [fake_entry_point("x", "a:B", "dist-a")]
    monkeypatch.setattr(plugin_manager.metadata, "entry_points", lambda group: eps)
    assert installed_plugins() == first  # nothing changed on sys.path: the answer is kept
    monkeypatch.syspath_prepend(str(tmp_path))  # a new folder, as an installation would add
    assert list(installed_plugins()) == ["x"]


def test_a_failing_plugins_error_is_masked_with_a_secret_registered_after_the_start(make_compactor, caplog):
    key = "rotated-key-0123456789abcdef"  # not a well-known format: only the registry knows it

    class Quoting:
        @hookimpl
        def persist_record(self, record):
            raise RuntimeError(f"the server rejected key {key}")

    history = build_history([3000] * 6)
    compactor = make_compactor(context_window=window_for(history, 0.85), extra_plugins=[("quoting", Quoting())])
    assert len(compactor.secrets) == 0  # nothing registered when the hooks were set up
    compactor.secrets.add(key)  # as a summarizer does when it first reads its key
    with caplog.at_level("WARNING", logger="progressive_compactor"):
        compactor.compact_with_record(history)
    assert "persist_record of plugin quoting failed: RuntimeError: the server rejected key [REDACTED]" in caplog.text
    assert key not in caplog.text
