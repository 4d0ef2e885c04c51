"""Building the plugin manager, and the typed facade the core calls hooks through.

Built-in plugins are declared under the same entry-point group as third-party ones
(``progressive_compactor``) and loaded the same way. A fresh manager is built for every compactor:

1. check the selection against config (``disable`` may not name an essential plugin);
2. block every disabled name, so that it cannot be registered by accident;
3. load each selected entry point (and only those: an unselected plugin is never imported),
   structure its config block into the plugin's ``Config`` attrs class, and register it;
4. register the essential fallback even when another fallback is selected, as a backstop;
5. ``check_pending()``, so that a misspelt hook name in a plugin fails loudly.
"""

from __future__ import annotations

import inspect
import logging
from importlib import metadata
from typing import Any, Awaitable, Callable, Mapping, Sequence

import attrs
import pluggy

from . import hookspecs
from .config import ESSENTIAL_PLUGINS, CompactorConfig
from .converters import structure_config
from .errors import ConfigError, PluginError
from .models import (
    CompactionRecord,
    CompactionTier,
    Message,
    OffloadEntry,
    ParsedSummary,
    SessionState,
    SummaryRequest,
    SummaryResult,
    TierInput,
    TierPlan,
)

log = logging.getLogger("progressive_compactor")
GROUP = hookspecs.PROJECT

BUILTIN_PLUGINS = (
    "anchors-markdown",
    "fallback-token-budget",
    "offload-files",
    "policy-single-threshold",
    "policy-thresholds",
    "state-files",
    "state-memory",
    "store-jsonl",
    "summarize-anthropic",
    "summarize-extractive",
    "summarize-openai",
    "tier-emergency",
    "tier-full",
    "tier-observation-masking",
    "tier-soft",
    "tier-summarize-head",
    "tier-warn",
    "tokens-chars",
)
"""Every plugin this distribution declares; a test checks the installed metadata says the same."""


@attrs.frozen
class PluginContext:
    """What a plugin may need from the core besides its own config block."""

    work_dir: str = "."
    secrets: "SecretRegistry | None" = None


class SecretRegistry:
    """Values that must never be written anywhere (API keys); :meth:`redact` masks them."""

    def __init__(self) -> None:
        self._values: set[str] = set()

    def add(self, value: str | None) -> None:
        if value and len(value) >= 4:
            self._values.add(value)

    def redact(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, "[REDACTED]")
        return text


@attrs.frozen
class PluginInfo:
    name: str
    distribution: str | None
    version: str | None
    value: str


def installed_plugins() -> dict[str, PluginInfo]:
    """Every entry point in our group, de-duplicated by (distribution, name).

    Two different distributions that declare the same name are a real conflict and raise
    :class:`PluginError` naming both.
    """
    found: dict[str, PluginInfo] = {}
    for ep in metadata.entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        info = PluginInfo(
            name=ep.name,
            distribution=dist.metadata["Name"] if dist is not None else None,
            version=dist.version if dist is not None else None,
            value=ep.value,
        )
        other = found.get(ep.name)
        if other is not None and other.distribution != info.distribution:
            raise PluginError(
                f"plugin {ep.name!r} is declared by two distributions: "
                f"{other.distribution} ({other.value}) and {info.distribution} ({info.value}); "
                "uninstall one of them",
                ep.name,
                info.distribution,
            )
        found.setdefault(ep.name, info)
    return found


def load_plugin_object(info: PluginInfo) -> Any:
    """Import the entry point's target; a failure names the plugin and its distribution."""
    ep = metadata.EntryPoint(name=info.name, value=info.value, group=GROUP)
    try:
        return ep.load()
    except Exception as exc:
        raise PluginError(
            f"plugin {info.name!r} from distribution {info.distribution or '?'} failed to import: "
            f"{type(exc).__name__}: {exc}",
            info.name,
            info.distribution,
        ) from exc


def instantiate(name: str, target: Any, block: Mapping[str, Any], context: PluginContext) -> Any:
    """Turn an entry point's target into the object to register.

    A module or an instance is registered as it is (and may have no config block). A class is
    called with ``config`` (its ``Config`` attrs class structured from the block) and/or
    ``context`` when its constructor takes them.
    """
    if not inspect.isclass(target):
        if block:
            raise ConfigError([f"plugin {name!r} takes no settings @ $.config.{name}"])
        return target
    kwargs: dict[str, Any] = {}
    params = inspect.signature(target).parameters
    config_cls = getattr(target, "Config", None)
    if config_cls is not None:
        kwargs["config"] = structure_config(dict(block), config_cls, path=f"$.config.{name}")
    elif block:
        raise ConfigError([f"plugin {name!r} takes no settings @ $.config.{name}"])
    if "context" in params:
        kwargs["context"] = context
    try:
        return target(**kwargs)
    except (ConfigError, PluginError):
        raise
    except Exception as exc:
        raise PluginError(f"plugin {name!r} failed to start: {type(exc).__name__}: {exc}", name) from exc


def get_plugin_manager(
    config: CompactorConfig,
    *,
    extra_plugins: Sequence[tuple[str, Any]] = (),
    context: PluginContext | None = None,
) -> pluggy.PluginManager:
    """A fresh plugin manager for one compactor, loaded as the module docstring says.

    ``extra_plugins`` are ``(name, object)`` pairs registered as they are (for keyword options of
    :class:`~progressive_compactor.ProgressiveCompactor` and for tests).
    """
    context = context or PluginContext(work_dir=config.work_dir)
    pm = _PluginManager(GROUP)
    pm.add_hookspecs(hookspecs)
    for name in config.plugins.disable:
        pm.set_blocked(name)
    wanted = config.plugins.names()
    installed = installed_plugins()
    unknown = [n for n in wanted if n not in installed]
    if unknown:
        problems = []
        by_role = {v: k for k, v in config.plugins.roles().items()}
        for name in unknown:
            where = by_role.get(name)
            path = f"$.plugins.{where}" if where else "$.plugins"
            problems.append(
                f"unknown plugin {name!r} @ {path}; installed: {', '.join(sorted(installed))}"
            )
        raise ConfigError(problems)
    # A block for an installed plugin that is not selected waits unused (the bundled default keeps
    # store-jsonl's block when an override says `stores: []`); a block naming no installed plugin
    # is a typo.
    stray = set(config.config) - set(installed)
    if stray:
        raise ConfigError(
            [
                f"settings for plugin {n!r}, which is not installed @ $.config.{n}; "
                f"installed: {', '.join(sorted(installed))}"
                for n in sorted(stray)
            ]
        )
    for name in wanted:
        target = load_plugin_object(installed[name])
        pm.register(instantiate(name, target, config.plugin_block(name), context), name=name)
    for name in ESSENTIAL_PLUGINS:
        if pm.get_plugin(name) is None:
            target = load_plugin_object(installed[name])
            pm.register(instantiate(name, target, config.plugin_block(name), context), name=name)
    for name, obj in extra_plugins:
        pm.register(obj, name=name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"plugin {exc.plugin!r} implements an unknown hook: {exc}") from exc
    return pm


class _PluginManager(pluggy.PluginManager):
    """A PluginManager that counts registrations, so the facade knows when to refresh its cache."""

    generation = 0

    def register(self, plugin: Any, name: str | None = None) -> str | None:
        self.generation += 1
        return super().register(plugin, name)

    def unregister(self, plugin: Any = None, name: str | None = None) -> Any:
        self.generation += 1
        return super().unregister(plugin, name)


_HOT_HOOKS = ("estimate_tokens", "determine_tier", "load_state", "persist_record")
"""Hooks called on every turn. Without hook wrappers, they are called straight from a cached list
of implementations: pluggy's general machinery costs more than a turn without compaction."""


class Hooks:
    """Typed facade over the plugin manager: the core never calls ``pm.hook.x`` directly."""

    def __init__(self, pm: pluggy.PluginManager):
        self.pm = pm
        self._h = pm.hook
        self._generation = -1
        self._direct: dict[str, list[tuple[Callable[..., Any], tuple[str, ...], str]] | None] = {}

    def _impls(self, hook: str) -> list[tuple[Callable[..., Any], tuple[str, ...], str]] | None:
        """Implementations of a hot hook in call order, or None when a wrapper needs pluggy."""
        generation = getattr(self.pm, "generation", 0)
        if generation != self._generation:
            self._generation = generation
            self._direct = {}
            for name in _HOT_HOOKS:
                impls = getattr(self._h, name).get_hookimpls()
                if any(i.hookwrapper or getattr(i, "wrapper", False) for i in impls):
                    self._direct[name] = None
                else:
                    self._direct[name] = [
                        (i.function, tuple(i.argnames), i.plugin_name) for i in reversed(impls)
                    ]
        return self._direct[hook]

    def _first(self, hook: str, **kwargs: Any) -> Any:
        impls = self._impls(hook)
        if impls is None:
            return getattr(self._h, hook)(**kwargs)
        for function, argnames, _ in impls:
            result = function(*[kwargs[a] for a in argnames])
            if result is not None:
                return result
        return None

    def estimate_tokens(self, messages: Sequence[Message]) -> list[int]:
        counts = self._first("estimate_tokens", messages=messages)
        if counts is None or len(counts) != len(messages):
            raise PluginError("no token estimator answered with one count per message")
        return list(counts)

    def determine_tier(self, ratio: float, tokens: int, context_window: int) -> CompactionTier:
        tier = self._first("determine_tier", ratio=ratio, tokens=tokens, context_window=context_window)
        return CompactionTier.NONE if tier is None else CompactionTier(tier)

    def apply_tier(self, tier_input: TierInput) -> TierPlan | None:
        return self._h.apply_tier(tier_input=tier_input)

    def offload(self, message: Message, session_id: str, threshold: int) -> OffloadEntry | None:
        return self._h.offload(message=message, session_id=session_id, threshold=threshold)

    def read_offloaded(self, handle: str) -> str | None:
        return self._h.read_offloaded(handle=handle)

    def summarize(self, request: SummaryRequest) -> SummaryResult | None:
        return self._h.summarize(request=request)

    def asummarize(self, request: SummaryRequest) -> Awaitable[SummaryResult] | None:
        return self._h.asummarize(request=request)

    def parse_anchors(self, text: str) -> ParsedSummary | None:
        return self._h.parse_anchors(text=text)

    def fallback_compact(self, messages: Sequence[Message], pinned: int, budget: int) -> list[Message] | None:
        return self._h.fallback_compact(
            messages=messages, pinned=pinned, budget=budget, estimate=self.estimate_tokens
        )

    def load_state(self, session_id: str) -> SessionState | None:
        return self._first("load_state", session_id=session_id)

    def save_state(self, session_id: str, state: SessionState) -> bool | None:
        return self._h.save_state(session_id=session_id, state=state)

    # Broadcast hooks: every implementation is called, one failure does not stop the others.

    def extract_memory(self, messages: Sequence[Message], session_id: str) -> list[str]:
        return self._broadcast("extract_memory", messages=messages, session_id=session_id)[1]

    def todo_context(self, session_id: str) -> list[str]:
        results, _ = self._broadcast("todo_context", session_id=session_id)
        return [r for r in results if r]

    def persist_record(self, record: CompactionRecord) -> list[str]:
        return self._broadcast("persist_record", record=record)[1]

    def on_delete_session(self, session_id: str) -> list[str]:
        return self._broadcast("on_delete_session", session_id=session_id)[1]

    def _broadcast(self, hook: str, **kwargs: Any) -> tuple[list[Any], list[str]]:
        """Call every implementation; one that raises is logged and the others still run."""
        results, errors = [], []
        impls = self._impls(hook) if hook in _HOT_HOOKS else None
        if impls is None:
            impls = [
                (i.function, i.argnames, i.plugin_name)
                for i in reversed(getattr(self._h, hook).get_hookimpls())
                if not (i.hookwrapper or getattr(i, "wrapper", False))
            ]
        for function, argnames, name in impls:
            try:
                results.append(function(*[kwargs[a] for a in argnames]))
            except Exception as exc:
                log.warning("%s of plugin %s failed: %s: %s", hook, name, type(exc).__name__, exc)
                errors.append(f"{name}: {type(exc).__name__}: {exc}")
        return results, errors

    def implementers(self, hook: str) -> list[str]:
        return [impl.plugin_name for impl in getattr(self._h, hook).get_hookimpls()]


