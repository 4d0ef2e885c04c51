"""One validation for every way a config is used.

``ProgressiveCompactor``, ``get_plugin_manager``, ``ExperimentCompactor`` and ``compactor config
check`` all go through :func:`check_config_data`, so they agree on what is valid. It reports every
problem of a config at once, each with its path and, where there is one, the fix: unknown and
mistyped settings, values out of range, unknown plugins (with a "did you mean"), plugins that
cannot fill the role they are given, each selected plugin's block, and each variant of an
``experiment`` section, checked as the config it becomes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import attrs

from .config import (
    BUNDLED,
    CORE_KEYS,
    ESSENTIAL_PLUGINS,
    SHARED_EXPERIMENT_KEYS,
    CompactorConfig,
    VariantSpec,
    deep_merge,
    parse_yaml,
    read_config_data,
    read_config_text,
)
from .converters import did_you_mean, structure_config
from .errors import ConfigError

_FIELD_TYPES: dict[str, Any] = {}


def _field_types() -> dict[str, Any]:
    if not _FIELD_TYPES:
        attrs.resolve_types(CompactorConfig)
        _FIELD_TYPES.update({f.name: f.type for f in attrs.fields(CompactorConfig)})
    return _FIELD_TYPES


REQUIRED_ROLES = {
    "tokens": "every decision needs token counts: use tokens-chars",
    "fallback": "the core must always be able to truncate: use fallback-token-budget",
    "state": "a session's summary must live somewhere: use state-memory",
}
"""Roles that ``none`` cannot leave empty, and the fix."""


def _share_hint(value: float) -> str:
    return f"; did you mean {value / 100:g}?" if 1 < value < math.inf else ""


def core_problems(config: CompactorConfig) -> list[str]:
    """Problems of the core's own values (their types are already checked)."""
    problems = []
    positive = {
        "context_window": "set it to the model's context window in tokens, e.g. 128000",
        "offload_threshold": "tool results longer than this many characters are offloaded",
        "tool_result_threshold": "results longer than this many characters are offloaded on arrival",
        "max_summary_tokens": "the largest summary, in tokens",
        "intent_max_chars": "how much of the user's request is kept verbatim, in characters",
        "cached_sessions": "how many sessions' caches a compactor keeps in memory",
        "async_threads": "threads the async API runs its turns' steps in",
    }
    for name, meaning in positive.items():
        value = getattr(config, name)
        if value <= 0:
            problems.append(f"{name} must be more than 0, got {value} ({meaning}) @ $.{name}")
    if config.min_tail_messages < 0:
        problems.append(f"min_tail_messages must be 0 or more, got {config.min_tail_messages} @ $.min_tail_messages")
    if config.summary_requests not in ("lean", "cache-friendly"):
        problems.append(
            f"summary_requests must be lean or cache-friendly, got {config.summary_requests!r} @ $.summary_requests"
        )
    shares = {  # a share of what; whether 0 is allowed (a summary may have no story, not no size)
        "summary_share": ("the window", False),
        "fallback_budget": ("the window", False),
        "prose_share": ("the summary's size", True),
    }
    for name, (whole, zero_ok) in shares.items():
        value = getattr(config, name)
        if not ((value >= 0 if zero_ok else value > 0) and value <= 1):  # NaN fails both
            least = "at least 0" if zero_ok else "more than 0"
            problems.append(
                f"{name} is a share of {whole}, {least} and at most 1, got {value}{_share_hint(value)} @ $.{name}"
            )
    for name in ESSENTIAL_PLUGINS:
        if name in config.plugins.disable:
            problems.append(f"{name} is essential and cannot be disabled; remove it @ $.plugins.disable")
    for role, fix in REQUIRED_ROLES.items():
        if getattr(config.plugins, role) == "none":
            problems.append(f"the {role} role cannot be empty; {fix} @ $.plugins.{role}")
    return problems + data_dir_problems(config.data_dir)


def data_dir_problems(configured: str | None) -> list[str]:
    """The problem of a data folder (``data_dir``, else ``$COMPACTOR_DATA_DIR``) that is a file, or
    lies under one: every plugin's offload and write would fail in it, turn after turn."""
    from .storage import DATA_DIR_ENV, resolve_data_dir

    path = resolve_data_dir(configured)
    found = next((p for p in (path, *path.parents) if os.path.exists(p)), None)
    if found is None or os.path.isdir(found):
        return []
    if configured:
        return [
            f"data_dir {configured!r} is not a folder: {str(found)!r} is a file; name a folder (created if missing) @ $.data_dir"
        ]
    named = os.environ.get(DATA_DIR_ENV, "")
    return [
        f"the environment variable {DATA_DIR_ENV} {named!r} is not a folder: {str(found)!r} is a file; name a"
        " folder (created if missing), or set data_dir @ $.data_dir"
    ]


def _structure_fields(data: Mapping[str, Any]) -> tuple[CompactorConfig, list[str]]:
    """Each top-level field structured on its own, so one bad field hides no other problem."""
    problems = []
    values: dict[str, Any] = {}
    for key in data:
        if key not in CORE_KEYS:
            problems.append(f"unknown setting {key!r}{did_you_mean(str(key), CORE_KEYS)} @ $.{key}")
    types = _field_types()
    for name in CORE_KEYS:
        if name not in data or (data[name] is None and name in ("experiment",)):
            continue
        value = data[name]
        if name == "config" and isinstance(value, Mapping):  # an empty block in YAML is null
            value = {k: {} if v is None else v for k, v in value.items()}
        try:
            values[name] = structure_config(value, types[name], path=f"$.{name}")
        except ConfigError as exc:
            problems.extend(exc.problems)
    return CompactorConfig(**values), problems


def check_config_data(
    data: Mapping[str, Any],
    *,
    directory: Path | None = None,
    extra_plugins: Mapping[str, Any] | None = None,
) -> tuple[CompactorConfig, list[str]]:
    """Structure and check ``data`` (a parsed YAML mapping); return the config and every problem.

    ``directory`` is where relative paths of the file are found (an experiment's variant files);
    ``extra_plugins`` (``name -> object``) are plugins the caller registers itself, which the
    config may select by name. The config returned has defaults where a field was invalid.
    """
    from .plugin_manager import plugin_problems

    if not isinstance(data, Mapping):
        return CompactorConfig(), [f"expected a mapping at the top level, got {type(data).__name__} @ $"]
    config, problems = _structure_fields(data)
    selection_readable = not any("@ $.plugins" in p or "@ $.config" in p for p in problems)
    problems += core_problems(config)
    if selection_readable:
        problems += plugin_problems(config, extra_plugins or {})
    if config.experiment is not None:
        problems += experiment_problems(config, data, directory, extra_plugins, known=problems)
    return config, problems


# --- experiments ------------------------------------------------------------------------------


def variant_data(
    name: str, spec: VariantSpec, base: Mapping[str, Any], directory: Path | None
) -> tuple[dict[str, Any], str]:
    """The config data of one variant, and where it came from.

    A variant is the base with ``overrides`` laid over it, or another config file with
    ``overrides`` laid over that. Either way it keeps the base's measurement and record settings:
    the window and the price table (a comparison is made at one of each), the data folder, the
    record stores with their blocks and the state store with its block (so that every variant's
    records land where the base says, and a session's state is found by every variant).
    """
    if spec.config is None:
        data, source = {k: v for k, v in base.items() if k != "experiment"}, "base"
    else:
        ref = spec.config
        if ref not in BUNDLED and directory is not None and not Path(ref).expanduser().is_absolute():
            ref = str(directory / ref)
        data, source, _ = read_config_data(ref)
        data.pop("experiment", None)
        for key in (*SHARED_EXPERIMENT_KEYS, "data_dir"):
            if key in base:
                data[key] = base[key]
            else:
                data.pop(key, None)
        base_plugins = _mapping(base.get("plugins"))
        plugins = dict(_mapping(data.get("plugins")))
        blocks = dict(_mapping(data.get("config")))
        base_blocks = _mapping(base.get("config"))
        defaults = CompactorConfig().plugins
        for role in ("stores", "state"):
            chosen = base_plugins.get(role, getattr(defaults, role))
            plugins[role] = chosen
            for plugin in [chosen] if isinstance(chosen, str) else list(chosen or ()):
                if plugin in base_blocks:
                    blocks[plugin] = base_blocks[plugin]
        data["plugins"], data["config"] = plugins, blocks
    data = deep_merge(data, spec.overrides)
    data["variant"] = name
    data.pop("experiment", None)
    return data, source


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _placement_overrides(name: str, spec: VariantSpec, base: CompactorConfig, where: str) -> list[str]:
    """A variant's overrides of where things live: the data folder, the state store, the record
    stores and their blocks belong to the base, so that every worker finds a session's variant
    in its state and every variant's records land in one place."""
    why = "every variant keeps the base's, so that a session's variant and records are found in one place"
    overrides = spec.overrides
    problems = []
    for key in ("data_dir", "variant"):
        if key in overrides:
            reason = why if key == "data_dir" else "it is the variant's name"
            problems.append(f"a variant may not set {key}: {reason} @ {where}.{key}")
    plugins = _mapping(overrides.get("plugins"))
    for role in ("state", "stores"):
        if role in plugins:
            problems.append(f"a variant may not choose plugins.{role}: {why} @ {where}.plugins.{role}")
    blocks = _mapping(overrides.get("config"))
    for plugin in (base.plugins.state, *base.plugins.stores):
        if plugin in blocks:
            problems.append(f"a variant may not change the block of {plugin!r}: {why} @ {where}.config.{plugin}")
    return problems


def experiment_problems(
    config: CompactorConfig,
    data: Mapping[str, Any],
    directory: Path | None,
    extra: Mapping[str, Any] | None,
    known: Sequence[str] = (),
) -> list[str]:
    """Problems of the ``experiment`` section and of every variant's config (a variant's problem
    that the base has too, ``known``, is said once, for the base)."""
    spec = config.experiment
    assert spec is not None
    problems = []
    where = "$.experiment.variants"
    if not spec.variants:
        problems.append(f"an experiment needs at least one variant @ {where}")
    for name, v in spec.variants.items():
        if not v.weight >= 0 or math.isinf(v.weight):
            problems.append(f"weight must be a number, 0 or more, got {v.weight} @ {where}.{name}.weight")
        for key in SHARED_EXPERIMENT_KEYS:
            if key in v.overrides:
                problems.append(
                    f"a variant may not set {key}: every variant is compared at the experiment's own "
                    f"{key}; set it once, outside the experiment section @ {where}.{name}.overrides.{key}"
                )
        problems += _placement_overrides(name, v, config, f"{where}.{name}.overrides")
    if spec.variants and sum(v.weight for v in spec.variants.values() if v.weight >= 0) <= 0:
        problems.append(f"at least one variant needs a weight above 0 @ {where}")
    if spec.control is not None and spec.control not in spec.variants:
        problems.append(
            f"control {spec.control!r} is not a variant{did_you_mean(spec.control, spec.variants)}; "
            f"variants: {', '.join(spec.variants)} @ $.experiment.control"
        )
    for name, v in spec.variants.items():
        try:
            vdata, source = variant_data(name, v, data, directory)
        except ConfigError as exc:
            problems += [f"{p} (variant {name!r}) @ {where}.{name}.config" for p in exc.problems]
            continue
        _, found = check_config_data(vdata, directory=directory, extra_plugins=extra)
        problems += [f"variant {name!r} (from {source}): {p}" for p in found if p not in known]
    return problems


# --- loading ----------------------------------------------------------------------------------


def config_from_dict(
    data: Mapping[str, Any] | None,
    source: str | None = None,
    *,
    directory: Path | None = None,
    extra_plugins: Mapping[str, Any] | None = None,
) -> CompactorConfig:
    """A checked config from parsed YAML; :class:`ConfigError` lists every problem."""
    config, problems = check_config_data(dict(data or {}), directory=directory, extra_plugins=extra_plugins)
    if problems:
        raise ConfigError(problems, source)
    return config


def load_config(
    name_or_path: str | os.PathLike[str] | None = None,
    *,
    extra_plugins: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> CompactorConfig:
    """Load and check a bundled config by name or a YAML file by path; keyword overrides win
    (nested mappings merged). :class:`ConfigError` lists every problem."""
    data, source, directory = read_config_data(name_or_path)
    data = deep_merge(data, overrides)
    return config_from_dict(data, source, directory=directory, extra_plugins=extra_plugins)


def config_file_problems(name_or_path: str | os.PathLike[str]) -> list[str]:
    """Every problem of a config file, plugins started (and closed) included (``compactor config
    check``)."""
    from .plugin_manager import close_problems, get_plugin_manager

    try:
        config = load_config(name_or_path)
    except ConfigError as exc:
        return exc.problems + _start_problems(name_or_path, exc.problems)
    configs: list[tuple[str, CompactorConfig]] = [("", config)]
    if config.experiment is not None:  # every variant's plugins must start too
        data, _, directory = read_config_data(name_or_path)
        for name, spec in config.experiment.variants.items():
            vdata, source = variant_data(name, spec, data, directory)
            configs.append((f"variant {name!r} (from {source}): ", config_from_dict(vdata, directory=directory)))
    problems: list[str] = []
    for prefix, each in configs:
        try:
            pm = get_plugin_manager(each)
        except ConfigError as exc:
            problems += [prefix + p for p in exc.problems if prefix + p not in problems and p not in problems]
            continue
        except Exception as exc:  # noqa: BLE001 - a plugin's own failure, named
            problems.append(f"{prefix}{type(exc).__name__}: {exc}")
            continue
        problems += [prefix + p for p in close_problems(pm) if prefix + p not in problems and p not in problems]
    return problems


def _start_problems(name_or_path: str | os.PathLike[str], found: list[str]) -> list[str]:
    """What the selected plugins whose blocks are clean say when they start (thresholds out of
    order, an API key's variable unset), so that a bad block elsewhere does not hide it."""
    from .errors import PluginError
    from .plugin_manager import PluginContext, installed_plugins, instantiate, load_plugin_object

    try:
        data, _, directory = read_config_data(name_or_path)
        config, _ = check_config_data(data, directory=directory)
        installed = installed_plugins()
    except (ConfigError, PluginError):
        return []
    problems: list[str] = []
    for name in config.plugins.names():
        where = f"@ $.config.{name}"
        if name not in installed or any(p.endswith(where) or f"{where}." in p for p in found):
            continue
        try:
            target = load_plugin_object(installed[name])
            plugin = instantiate(name, target, config.plugin_block(name), PluginContext(config))
        except ConfigError as exc:
            problems += [p for p in exc.problems if p not in found]
            continue
        except Exception:  # noqa: BLE001, S112 - reported once the config is otherwise valid
            continue
        closer = getattr(plugin, "close", None)
        try:
            if callable(closer):
                closer()
        except Exception as exc:  # noqa: BLE001 - a problem of the plugin like any other
            problem = f"plugin {name!r} failed to close: {type(exc).__name__}: {exc} {where}"
            problems += [problem] if problem not in found else []
    return problems


__all__ = [
    "check_config_data",
    "config_file_problems",
    "config_from_dict",
    "core_problems",
    "experiment_problems",
    "load_config",
    "parse_yaml",
    "read_config_text",
    "variant_data",
]
