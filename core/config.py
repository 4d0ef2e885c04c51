"""The YAML config: which plugin fills each role, and each plugin's own block.

```yaml
context_window: 128000
plugins:
  summarizer: summarize-extractive     # any installed plugin name
  stores: [store-jsonl]
config:                                # one block per plugin name, checked by that plugin
  offload-files: {threshold: 4000}
```

Bundled configs are referred to by name (``default``, ``openai``, ``anthropic``, ``ollama``,
``ab-example``); anything else is a path.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import attrs
import yaml

from .converters import structure_config
from .errors import ConfigError

BUNDLED = (
    "default",
    "openai",
    "anthropic",
    "ollama",
    "ab-example",
    "baseline-none",
    "baseline-truncation",
    "baseline-one-threshold",
    "baseline-masking",
    "cache-aware",
)
ESSENTIAL_PLUGINS = ("fallback-token-budget",)
"""Plugins that configuration cannot disable: the core must always be able to truncate."""


@attrs.frozen
class PluginSelection:
    """Which plugin fills each role. ``none`` leaves an optional role empty."""

    policy: str = "policy-thresholds"
    tier_warn: str = "tier-warn"
    tier_soft: str = "tier-soft"
    tier_full: str = "tier-full"
    tier_emergency: str = "tier-emergency"
    tokens: str = "tokens-chars"
    offload: str = "offload-files"
    summarizer: str = "summarize-extractive"
    anchors: str = "anchors-markdown"
    fallback: str = "fallback-token-budget"
    state: str = "state-memory"
    stores: tuple[str, ...] = ("store-jsonl",)
    extra: tuple[str, ...] = ()
    """Further plugins to load: memory extractors, todo providers, more stores."""
    disable: tuple[str, ...] = ()
    """Plugin names never to load, even when another setting names them."""

    def roles(self) -> dict[str, str]:
        """Each single-plugin role and the plugin name chosen for it."""
        return {
            f.name: getattr(self, f.name)
            for f in attrs.fields(PluginSelection)
            if f.name not in ("stores", "extra", "disable")
        }

    def names(self) -> list[str]:
        """Every plugin name to load, in a stable order, without repeats or ``none``."""
        names = [*self.roles().values(), *self.stores, *self.extra]
        seen: dict[str, None] = {}
        for name in names:
            if name != "none" and name not in self.disable:
                seen.setdefault(name, None)
        return list(seen)


@attrs.frozen
class CompactorConfig:
    """Settings of the core. Plugin settings live in their own blocks under ``config``."""

    context_window: int = 128_000
    min_tail_messages: int = 6
    offload_threshold: int = 4000
    """Compaction-time offload: tool results in the head longer than this many characters."""
    tool_result_threshold: int = 10_000
    """Production-time offload (seed 3.4): results longer than this never enter the history."""
    fallback_budget: float = 0.5
    """Emergency truncation keeps the view under this share of the context window."""
    offload_break_factor: float | None = None
    """None: Warn offloads every large result in the head, as the seed does. A number makes Warn
    prompt-cache aware: a result is offloaded only if the tokens after it are at most this many
    times what it saves (see ProgressiveCompactor._offload and configs/cache-aware.yaml)."""
    max_summary_tokens: int = 4000
    summary_share: float = 0.1
    """The summary (the user's request aside) stays under this share of the window, and under
    ``max_summary_tokens``: a summary that fills the window makes every compaction come sooner."""
    intent_max_chars: int = 8000
    """The user's original request is kept verbatim in the summary up to this many characters."""
    work_dir: str = "."
    variant: str | None = None
    """Name written into every record, for A/B comparisons."""
    plugins: PluginSelection = PluginSelection()
    config: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    experiment: dict[str, Any] | None = None
    """A/B experiment section (see ``progressive_compactor.experiment``); kept as given."""
    pricing: dict[str, float] | None = None
    """Price table for billed cost in replays (see ``progressive_compactor.pricing``)."""

    def plugin_block(self, name: str) -> Mapping[str, Any]:
        return self.config.get(name) or {}


def _check(config: CompactorConfig) -> list[str]:
    problems = []
    if config.context_window <= 0:
        problems.append("context_window must be positive @ $.context_window")
    if config.min_tail_messages < 0:
        problems.append("min_tail_messages must be 0 or more @ $.min_tail_messages")
    if not 0 < config.summary_share <= 1:
        problems.append("summary_share must be in (0, 1] @ $.summary_share")
    if not 0 < config.fallback_budget <= 1:
        problems.append("fallback_budget must be in (0, 1] @ $.fallback_budget")
    for name in ESSENTIAL_PLUGINS:
        if name in config.plugins.disable:
            problems.append(f"{name} is essential and cannot be disabled @ $.plugins.disable")
    if config.plugins.fallback == "none":
        problems.append("the fallback role cannot be empty @ $.plugins.fallback")
    for name, block in config.config.items():
        if not isinstance(block, Mapping) and block is not None:
            problems.append(f"expected a mapping for plugin {name!r} @ $.config.{name}")
    return problems


def config_from_dict(data: Mapping[str, Any] | None, source: str | None = None) -> CompactorConfig:
    """Build and check a config from parsed YAML; every problem reported with its path."""
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError([f"expected a mapping at the top level, got {type(data).__name__} @ $"], source)
    try:
        config = structure_config(dict(data or {}), CompactorConfig)
    except ConfigError as exc:
        raise ConfigError(exc.problems, source) from exc
    problems = _check(config)
    if problems:
        raise ConfigError(problems, source)
    return config


def read_config_text(name_or_path: str | os.PathLike[str] | None) -> tuple[str, str]:
    """Return ``(text, source)`` of a bundled config name or a file path."""
    if name_or_path is None:
        name_or_path = "default"
    name = str(name_or_path)
    if name in BUNDLED:
        text = resources.files("progressive_compactor.configs").joinpath(f"{name}.yaml").read_text("utf-8")
        return text, f"bundled:{name}"
    path = Path(name).expanduser()
    try:
        return path.read_text("utf-8"), str(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            [f"cannot read config file: {getattr(exc, 'strerror', None) or exc}"
             f" (bundled configs: {', '.join(BUNDLED)})"],
            str(path),
        ) from exc


def parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError([f"invalid YAML{where}: {getattr(exc, 'problem', exc)}"], source) from exc


def load_config(name_or_path: str | os.PathLike[str] | None = None, **overrides: Any) -> CompactorConfig:
    """Load a bundled config by name or a YAML file by path; keyword overrides win."""
    text, source = read_config_text(name_or_path)
    data = parse_yaml(text, source) or {}
    if not isinstance(data, Mapping):
        raise ConfigError([f"expected a mapping at the top level, got {type(data).__name__} @ $"], source)
    data = deep_merge(dict(data), overrides)
    return config_from_dict(data, source)


def deep_merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` laid over it; nested mappings merged key by key."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def config_to_dict(config: CompactorConfig) -> dict[str, Any]:
    from .converters import config_converter

    return config_converter.unstructure(config)
