"""The YAML config: the core's settings, which plugin fills each role, and each plugin's block.

```yaml
context_window: 128000
plugins:
  summarizer: summarize-extractive     # any installed plugin name
  stores: [store-jsonl]
config:                                # one block per plugin name, checked by that plugin
  offload-files: {preview_lines: 10}
```

This module holds the data classes and the reading of YAML; turning data into a checked config
(every problem of a file reported at once, plugins included) is
:mod:`progressive_compactor.validation`'s job. Bundled configs are referred to by name
(:data:`BUNDLED`); anything else is a path.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import attrs
import yaml

from .errors import ConfigError
from .pricing import PriceTable

BUNDLED = (
    "default",
    "classic",
    "cache-aware",
    "openai",
    "anthropic",
    "ollama",
    "ab-example",
    "baseline-none",
    "baseline-truncation",
    "baseline-one-threshold",
    "baseline-masking",
    "fleet-sqlite",
    "fleet-postgres",
    "fleet-redis",
)
ESSENTIAL_PLUGINS = ("fallback-token-budget",)
"""Plugins that configuration cannot disable: the core must always be able to truncate."""


@attrs.frozen
class PluginSelection:
    """Which plugin fills each role. ``none`` leaves a role empty (a tier that does nothing)."""

    policy: str = "policy-cost"
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
    """Further plugins to load: memory extractors, todo providers, observers."""
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
class VariantSpec:
    """One variant of an A/B experiment."""

    weight: float = 1.0
    """Share of live sessions (relative to the other weights); 0 keeps it out of live traffic."""
    config: str | None = None
    """A bundled config name or a YAML path (relative to the experiment's file); default: the base."""
    overrides: dict[str, Any] = attrs.field(factory=dict)
    """Laid over the variant's config. ``context_window`` and ``pricing`` are the experiment's own
    and may not differ between variants; ``data_dir``, the state store and the record stores (with
    their blocks) are the base's, so that every worker finds a session's variant and every record
    lands in one place."""


@attrs.frozen
class ExperimentSpec:
    """The ``experiment`` section: named variants of the rest of the file (the base)."""

    variants: dict[str, VariantSpec]
    name: str = "experiment"
    control: str | None = None
    """Differences are reported against this variant (default: the first)."""
    salt: str | None = None
    """Hashed with the session id to place a *new* session (default: ``name``). A session keeps
    the variant it was given at its first turn (stored with its state) whatever the salt, the
    name or the weights become."""


@attrs.frozen
class CompactorConfig:
    """Settings of the core. Plugin settings live in their own blocks under ``config``."""

    context_window: int = 128_000
    min_tail_messages: int = 6
    """The newest messages, never summarized (never cut inside a tool call's results)."""
    offload_threshold: int = 4000
    """Compaction-time offload: tool results longer than this many characters."""
    tool_result_threshold: int = 10_000
    """Offload when a tool result arrives (``Session.add_tool_result``): longer results never
    enter the history."""
    fallback_budget: float = 0.5
    """Emergency truncation aims at this share of the context window: it drops the oldest messages
    until the view is under it, but keeps the newest exchange whenever it fits the window (the
    window is the limit)."""
    enforce_window: bool = True
    """Escalate to Emergency whenever a view would be over the context window, whatever the policy
    or a tier answered: a provider refuses such a view. ``False`` sends what the policy decided
    even over the window (the no-compaction baseline, ``baseline-none``, counts overflows so)."""
    max_summary_tokens: int = 2000
    summary_share: float = 0.1
    """The summary (the user's request aside) stays under this share of the window, and under
    ``max_summary_tokens``: a summary that fills the window makes every compaction come sooner."""
    prose_share: float = 0.2
    """The summary's prose (the story under ``## Summary``) keeps its newest paragraphs within
    this share of the summary's size limit: the anchors carry the facts, and an old story is
    re-read on every call."""
    intent_max_chars: int = 8000
    """The user's original request is kept verbatim in the summary up to this many characters."""
    pin_request: bool = True
    """Once a summary covers the user's request, send it as a message of its own right after the
    system message, the same every turn, and leave it out of the compaction message: compactions
    change the view only after it, so a provider's prompt cache keeps it. ``False``: the request
    is the compaction message's User Intent (the view is ``[system, compaction message, ...]``)."""
    summary_requests: str = "lean"
    """How a summarizer that calls a provider asks: ``lean`` sends only what the summary needs
    (the new messages cut short, the facts, the previous summary once); ``cache-friendly``
    repeats the view the provider has just cached and asks for the summary after it, so most of
    the request is billed at the cached price. Replays bill summaries the same way."""
    mask_credentials: bool = True
    """Besides the secrets the compactor knows (the values ``*_env`` settings name, passwords of
    connection strings, keys plugins register), mask credentials of well-known formats in
    everything written (offloaded results, records, state, logs, the compaction message, summary
    requests, the command line's outputs): private keys, passwords of URLs, provider keys and
    tokens by their prefixes (``sk-``, ``ghp_``, ``AKIA``...), ``Authorization`` credentials,
    and values of settings named like secrets (``PASSWORD=``, ``"api_key": ...``) that hold a
    digit or a symbol. ``False``: the known secrets only (an agent reads back offloaded results
    as they were)."""
    cached_sessions: int = 256
    """How many sessions' caches (what the compactor has read of each history, about half a
    megabyte for a few hundred messages) one compactor keeps in memory: beyond it the least
    recently compacted session's is dropped, and its next turn reads its history again, as a
    worker that never served it would (its state is in the state store)."""
    async_threads: int = 4
    """Threads the async API runs its turns' own steps in (loading and saving the state, offloads,
    records), shared by all the compactor's sessions: turns of that many sessions wait on their
    stores at once. More only help while stores are slow to answer (a database across the
    network); a turn's own work is Python's. The stores' ``pool_size`` (4) is a good match."""
    data_dir: str | None = None
    """Where plugins keep files (``{data_dir}`` in their settings). Default: the environment
    variable ``COMPACTOR_DATA_DIR``, else a per-user data folder (``~/.local/share/...``)."""
    variant: str | None = None
    """Name written into every record, for A/B comparisons."""
    plugins: PluginSelection = PluginSelection()
    config: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    experiment: ExperimentSpec | None = None
    """An A/B experiment over variants of this config (see ``docs/experiments.md``)."""
    pricing: PriceTable = PriceTable()
    """US dollars per million tokens, for billed cost in replays, reports and cost-aware policies."""

    def plugin_block(self, name: str) -> Mapping[str, Any]:
        return self.config.get(name) or {}


CORE_KEYS = tuple(f.name for f in attrs.fields(CompactorConfig))
"""Every top-level key a config file may have."""
SHARED_EXPERIMENT_KEYS = ("context_window", "pricing")
"""Settings every variant of an experiment shares: a comparison is made at one window and one
price table."""


# --- reading YAML ---------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys without a word; a config with one is an error. A
    key written next to a merge key (``<<: *db``) overrides the merged one, as YAML means it."""


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:  # the keys written here, before the merged ones are copied in
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first on line {seen[key] + 1}); each key may appear once",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    loader.flatten_mapping(node)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, source: str) -> Any:
    """Parsed YAML; a syntax error or a duplicate key raises :class:`ConfigError` with its line."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError([f"invalid YAML{where}: {getattr(exc, 'problem', None) or exc}"], source) from exc


def read_config_text(name_or_path: str | os.PathLike[str] | None) -> tuple[str, str]:
    """Return ``(text, source)`` of a bundled config name or a file path."""
    name = "default" if name_or_path is None else str(name_or_path)
    if name in BUNDLED:
        text = resources.files("progressive_compactor.configs").joinpath(f"{name}.yaml").read_text("utf-8")
        return text, f"bundled:{name}"
    path = Path(name).expanduser()
    try:
        return path.read_text("utf-8"), str(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            [
                f"cannot read config file: {getattr(exc, 'strerror', None) or exc} (bundled configs: {', '.join(BUNDLED)})"
            ],
            str(path),
        ) from exc


def read_config_data(name_or_path: str | os.PathLike[str] | None) -> tuple[dict[str, Any], str, Path | None]:
    """``(data, source, directory)`` of a bundled config or a YAML file; ``directory`` is where
    relative paths in it (an experiment's variant files) are found, None for a bundled config."""
    text, source = read_config_text(name_or_path)
    data = parse_yaml(text, source)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError([f"expected a mapping at the top level, got {type(data).__name__} @ $"], source)
    directory = None if source.startswith("bundled:") else Path(source).expanduser().absolute().parent
    return dict(data), source, directory


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
    """The config as plain data (what a YAML file holding it would say)."""
    from .converters import config_converter

    data: dict[str, Any] = config_converter.unstructure(config)
    return data
