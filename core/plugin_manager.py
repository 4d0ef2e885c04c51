"""Building the plugin manager, and the typed facade the core calls hooks through.

Built-in plugins are declared under the same entry-point group as third-party ones
(``progressive_compactor``) and loaded the same way. A fresh manager is built for every compactor,
from a config that :mod:`progressive_compactor.validation` has checked:

1. block every disabled name, so that it cannot be registered by accident;
2. load each selected entry point (and only those: a plugin that is not selected is never
   imported), build it with its config block, and register it;
3. register the essential fallback even when another fallback is selected, as a backstop;
4. register the caller's own plugin objects;
5. ``check_pending()``, so that a misspelt hook name in a plugin fails loudly.

Every plugin that fails to start is reported, not only the first.
"""

from __future__ import annotations

import inspect
import logging
import operator
import os
import sys
from importlib import metadata
from typing import Any, Awaitable, Callable, Mapping, Sequence

import attrs
import pluggy

from . import hookspecs
from .config import ESSENTIAL_PLUGINS, CompactorConfig
from .converters import did_you_mean, structure_config
from .errors import ConfigError, PluginError
from .models import (
    CompactionRecord,
    CompactionTier,
    Message,
    OffloadEntry,
    ParsedSummary,
    SessionInfo,
    SessionState,
    SummaryRequest,
    SummaryResult,
    TierInput,
    TierPlan,
    TurnContext,
)
from .redaction import SecretRegistry
from .storage import expand_path, resolve_data_dir

log = logging.getLogger("progressive_compactor")
GROUP = hookspecs.PROJECT

BUILTIN_PLUGINS = (
    "anchors-markdown",
    "fallback-token-budget",
    "offload-files",
    "offload-postgres",
    "offload-redis",
    "offload-sqlite",
    "otel",
    "policy-cost",
    "policy-single-threshold",
    "policy-thresholds",
    "state-files",
    "state-memory",
    "state-postgres",
    "state-redis",
    "state-sqlite",
    "store-jsonl",
    "store-postgres",
    "store-redis",
    "store-sqlite",
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
    "tokens-tiktoken",
)
"""Every plugin this distribution declares; a test checks the installed metadata says the same."""

ROLE_HOOKS: dict[str, tuple[str, ...]] = {
    "policy": ("determine_tier",),
    "tier_warn": ("apply_tier",),
    "tier_soft": ("apply_tier",),
    "tier_full": ("apply_tier",),
    "tier_emergency": ("apply_tier",),
    "tokens": ("estimate_tokens",),
    "offload": ("offload",),
    "summarizer": ("summarize",),
    "anchors": ("parse_anchors",),
    "fallback": ("fallback_compact",),
    "state": ("load_state", "save_state"),
    "stores": ("persist_record",),
}
"""The hooks a plugin must implement to fill a role (the YAML key under ``plugins:``)."""
TIER_ROLES = {
    CompactionTier.WARN: "tier_warn",
    CompactionTier.SOFT: "tier_soft",
    CompactionTier.FULL: "tier_full",
    CompactionTier.EMERGENCY: "tier_emergency",
}


@attrs.frozen
class PluginContext:
    """What a plugin may need from the core besides its own config block: the core's settings
    (window, prices, data folder) and the secrets registry every writer redacts with."""

    config: CompactorConfig = CompactorConfig()
    secrets: SecretRegistry = attrs.field(factory=SecretRegistry)

    @property
    def data_dir(self) -> str:
        """The folder plugins keep files in (``{data_dir}`` in their settings)."""
        return str(resolve_data_dir(self.config.data_dir))

    def path(self, template: str) -> Any:
        """A folder setting as an absolute path: ``{data_dir}`` and ``~`` expanded."""
        return expand_path(template, self.data_dir)


@attrs.frozen
class PluginInfo:
    name: str
    distribution: str | None
    version: str | None
    value: str


_INSTALLED: dict[tuple[Any, ...], dict[str, PluginInfo]] = {}


def _installation_key() -> tuple[Any, ...]:
    """What changes when a distribution is installed or removed: the folders on ``sys.path``
    and their modification times."""
    key: list[tuple[str, int | None]] = []
    for entry in sys.path:
        try:
            key.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            key.append((entry, None))
    return tuple(key)


def installed_plugins() -> dict[str, PluginInfo]:
    """Every entry point in our group, de-duplicated by (distribution, name).

    Two different distributions that declare the same name are a real conflict and raise
    :class:`PluginError` naming both. Reading the metadata of every distribution costs tens of
    milliseconds, so the answer is kept until an installation changes a folder on ``sys.path``.
    """
    key = _installation_key()
    cached = _INSTALLED.get(key)
    if cached is None:
        _INSTALLED.clear()
        cached = _INSTALLED[key] = _scan_entry_points()
    return dict(cached)


def _scan_entry_points() -> dict[str, PluginInfo]:
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
    """Import the entry point's target; a failure names the plugin and its distribution (a
    module that calls ``sys.exit()`` as it is imported included: it must not end the program)."""
    ep = metadata.EntryPoint(name=info.name, value=info.value, group=GROUP)
    try:
        return ep.load()
    except (Exception, SystemExit) as exc:
        raise PluginError(
            f"plugin {info.name!r} from distribution {info.distribution or '?'} failed to import: "
            f"{type(exc).__name__}: {exc}",
            info.name,
            info.distribution,
        ) from exc


IMPL_MARKER = f"{GROUP}_impl"


def hooks_of(target: Any) -> list[str]:
    """Hook names implemented by a plugin class, instance or module (read from pluggy's markers)."""
    names = set()
    for attr in dir(target):
        try:
            member = getattr(target, attr)
        except Exception:  # noqa: BLE001, S112 - a property that fails on a class is no hook
            continue
        options = getattr(member, IMPL_MARKER, None)
        if isinstance(options, dict):
            names.add(options.get("specname") or attr)
    return sorted(names)


def structure_block(name: str, target: Any, block: Mapping[str, Any]) -> Any:
    """The plugin's ``Config`` instance from its YAML block (None for a plugin with no Config)."""
    config_cls = getattr(target, "Config", None) if inspect.isclass(target) else None
    if config_cls is None:
        if block:
            raise ConfigError([f"plugin {name!r} takes no settings; remove the block @ $.config.{name}"])
        return None
    return structure_config(dict(block), config_cls, path=f"$.config.{name}")


def instantiate(name: str, target: Any, block: Mapping[str, Any], context: PluginContext) -> Any:
    """Turn an entry point's target into the object to register.

    A module or an instance is registered as it is (and takes no config block). A class is called
    with ``config`` (its ``Config`` attrs class structured from the block) and/or ``context`` when
    its constructor takes them.
    """
    config = structure_block(name, target, block)
    if not inspect.isclass(target):
        return target
    kwargs: dict[str, Any] = {}
    params = inspect.signature(target).parameters
    if config is not None:
        kwargs["config"] = config
    if "context" in params:
        kwargs["context"] = context
    try:
        return target(**kwargs)
    except (ConfigError, PluginError):
        raise
    except Exception as exc:
        raise PluginError(f"plugin {name!r} failed to start: {type(exc).__name__}: {exc}", name) from exc


def plugin_problems(config: CompactorConfig, extra: Mapping[str, Any] = {}) -> list[str]:
    """Every problem of the config's plugin selection and blocks, each with its path.

    Selected plugins must be installed (or among ``extra``, the caller's own ``name -> object``),
    fill their role (implement its hooks) and accept their block. A block for an installed plugin
    that is not selected is kept unused (a plugin can be switched off with its settings kept); a
    block for a name nobody knows is a typo. Only selected plugins are imported.
    """
    try:
        installed = installed_plugins()
    except PluginError as exc:
        return [str(exc)]
    known = sorted(set(installed) | set(extra))
    problems: list[str] = []
    where: dict[str, list[str]] = {}
    for role, name in config.plugins.roles().items():
        where.setdefault(name, []).append(role)
    for name in config.plugins.stores:
        where.setdefault(name, []).append("stores")
    for name in config.plugins.extra:
        where.setdefault(name, []).append("extra")
    targets: dict[str, Any] = {}
    for name in config.plugins.names():
        if name in extra:
            targets[name] = extra[name]
            continue
        if name not in installed:
            paths = ", ".join(f"$.plugins.{r}" for r in where.get(name, [])) or "$.plugins"
            problems.append(
                f"unknown plugin {name!r}{did_you_mean(name, known)} @ {paths}; installed: {', '.join(known)}"
            )
            continue
        try:
            targets[name] = load_plugin_object(installed[name])
        except PluginError as exc:
            problems.append(f"{exc} @ $.plugins")
    for role, name in [*config.plugins.roles().items(), *[("stores", s) for s in config.plugins.stores]]:
        target = targets.get(name)
        if target is None:
            continue
        missing = [h for h in ROLE_HOOKS[role] if h not in hooks_of(target)]
        if missing:
            problems.append(
                f"plugin {name!r} cannot fill the role {role}: it does not implement {', '.join(missing)} "
                f"@ $.plugins.{role}"
            )
    for name, block in config.config.items():
        if name in targets:
            try:
                structure_block(name, targets[name], block)
            except ConfigError as exc:
                problems.extend(exc.problems)
        elif name not in installed and name not in extra:
            problems.append(
                f"settings for plugin {name!r}, which is not installed{did_you_mean(name, known)} @ $.config.{name}"
            )
    return problems


def get_plugin_manager(
    config: CompactorConfig,
    *,
    extra_plugins: Sequence[tuple[str, Any]] = (),
    context: PluginContext | None = None,
) -> pluggy.PluginManager:
    """A fresh plugin manager for one checked config, loaded as the module docstring says.

    ``extra_plugins`` are ``(name, object)`` pairs: keyword options of
    :class:`~progressive_compactor.ProgressiveCompactor`, and plugins not packaged (yet), an
    object registered as it is, a class started as an installed plugin's is. Raises
    :class:`ConfigError` with every plugin that could not start.
    """
    context = context or PluginContext(config)
    pm = _PluginManager(GROUP)
    pm.add_hookspecs(hookspecs)
    for name in config.plugins.disable:
        pm.set_blocked(name)
    extra = dict(extra_plugins)
    installed = installed_plugins()
    problems: list[str] = []
    names = [n for n in config.plugins.names() if n not in extra]
    names += [n for n in ESSENTIAL_PLUGINS if n not in names]
    for name in names:
        try:
            target = load_plugin_object(installed[name])
            pm.register(instantiate(name, target, config.plugin_block(name), context), name=name)
        except KeyError:
            problems.append(f"unknown plugin {name!r} @ $.plugins")
        except ConfigError as exc:
            problems.extend(exc.problems)
        except PluginError as exc:
            problems.append(f"{exc} @ $.config.{name}")
    made = []
    for name, obj in extra_plugins:  # a class is started as an installed one is, with its block
        try:
            made.append((name, instantiate(name, obj, config.plugin_block(name), context)))
        except ConfigError as exc:
            problems.extend(exc.problems)
        except PluginError as exc:
            problems.append(f"{exc} @ $.config.{name}")
    if problems:
        problems += close_problems(pm)
        raise ConfigError(problems)
    for name, obj in made:
        pm.register(obj, name=name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"plugin {exc.plugin!r} implements an unknown hook: {exc}") from exc
    return pm


def _close_all(pm: pluggy.PluginManager, redact: Callable[[str], str] = str) -> list[tuple[str, str]]:
    """Close every plugin that has a ``close()``, the ones after a failing one included: the
    plugins that failed, each with its error (``RuntimeError: ...``, masked by ``redact``)."""
    failed = []
    for name, plugin in pm.list_name_plugin():
        closer = getattr(plugin, "close", None)
        if callable(closer):
            try:
                closer()
            except Exception as exc:  # noqa: BLE001 - one plugin's failure must not leak the others
                failed.append((name, redact(f"{type(exc).__name__}: {exc}")))
    return failed


def close_problems(pm: pluggy.PluginManager) -> list[str]:
    """Close every plugin of ``pm`` (``compactor config check``): the failures as problems of
    their plugin's block."""
    return [f"plugin {name!r} failed to close: {cause} @ $.config.{name}" for name, cause in _close_all(pm)]


def _bad_plan(name: str, result: Any) -> TierPlan:
    raise PluginError(f"plugin {name!r} returned {type(result).__name__} from apply_tier, not a TierPlan", name)


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
_Impl = tuple[Callable[..., Any], Callable[[dict[str, Any]], tuple[Any, ...]], str]
"""An implementation: its function, what picks its arguments out of the call's, its plugin's name."""


def _picker(names: Sequence[str]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """What picks an implementation's arguments (``names``, in order) out of a hook call's."""
    if len(names) == 1:
        name = names[0]
        return lambda kwargs: (kwargs[name],)
    return operator.itemgetter(*names) if names else lambda kwargs: ()


class Hooks:
    """Typed facade over the plugin manager: the core never calls ``pm.hook.x`` directly.

    ``tier_plugins`` maps each tier to the plugin name the config selects for it (``none``: the
    tier does nothing); ``apply_tier`` is called on that plugin only.
    """

    def __init__(
        self,
        pm: pluggy.PluginManager,
        tier_plugins: Mapping[CompactionTier, str] | None = None,
        secrets: SecretRegistry | None = None,
    ):
        self.pm = pm
        self.secrets = secrets if secrets is not None else SecretRegistry()  # shared, even while empty
        self._h = pm.hook
        self._generation = -1
        self._direct: dict[str, list[_Impl] | None] = {}
        self.tier_plugins = dict(tier_plugins or {})

    def _impls(self, hook: str) -> list[_Impl] | None:
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
                    self._direct[name] = [(i.function, _picker(i.argnames), i.plugin_name) for i in reversed(impls)]
        return self._direct[hook]

    def _first(self, hook: str, **kwargs: Any) -> Any:
        impls = self._impls(hook)
        if impls is None:
            return getattr(self._h, hook)(**kwargs)
        for function, pick, _ in impls:
            result = function(*pick(kwargs))
            if result is not None:
                return result
        return None

    def estimate_tokens(self, messages: Sequence[Message]) -> list[int]:
        counts = self._first("estimate_tokens", messages=messages)
        if counts is None or len(counts) != len(messages):
            raise PluginError("no token estimator answered with one count per message")
        return list(counts)

    def determine_tier(self, tokens: int, context_window: int, turn: TurnContext) -> CompactionTier:
        ratio = tokens / context_window if context_window > 0 else 0.0
        tier = self._first("determine_tier", ratio=ratio, tokens=tokens, context_window=context_window, turn=turn)
        if tier is None:
            return CompactionTier.NONE
        return tier if type(tier) is CompactionTier else CompactionTier(tier)

    def apply_tier(self, tier_input: TierInput, turn: TurnContext) -> TierPlan | None:
        """The plan of the plugin selected for the tier's role (None: that role is ``none``)."""
        name = self.tier_plugins.get(tier_input.tier)
        if not name or name == "none":
            return None
        for impl in self._h.apply_tier.get_hookimpls():
            if impl.plugin_name == name:
                kwargs = {"tier_input": tier_input, "turn": turn}
                result = impl.function(*[kwargs[a] for a in impl.argnames])
                return result if isinstance(result, TierPlan) or result is None else _bad_plan(name, result)
        raise PluginError(
            f"plugin {name!r}, selected for {TIER_ROLES[tier_input.tier]}, does not implement apply_tier", name
        )

    def offload(self, message: Message, session_id: str, threshold: int) -> OffloadEntry | None:
        result: OffloadEntry | None = self._h.offload(message=message, session_id=session_id, threshold=threshold)
        return result

    def read_offloaded(self, handle: str) -> str | None:
        result: str | None = self._h.read_offloaded(handle=handle)
        return result

    def summarize(self, request: SummaryRequest) -> SummaryResult | None:
        result: SummaryResult | None = self._h.summarize(request=request)
        return result

    def asummarize(self, request: SummaryRequest) -> Awaitable[SummaryResult] | None:
        result: Awaitable[SummaryResult] | None = self._h.asummarize(request=request)
        return result

    def parse_anchors(self, text: str) -> ParsedSummary | None:
        result: ParsedSummary | None = self._h.parse_anchors(text=text)
        return result

    def fallback_compact(
        self, messages: Sequence[Message], pinned: int, budget: int, limit: int
    ) -> list[Message] | None:
        result: list[Message] | None = self._h.fallback_compact(
            messages=messages, pinned=pinned, budget=budget, estimate=self.estimate_tokens, limit=limit
        )
        return result

    def load_state(self, session_id: str) -> SessionState | None:
        result: SessionState | None = self._first("load_state", session_id=session_id)
        return result

    def save_state(self, session_id: str, state: SessionState) -> bool | None:
        result: bool | None = self._h.save_state(session_id=session_id, state=state)
        return result

    def read_records(self, session_id: str) -> list[CompactionRecord] | None:
        result = self._h.read_records(session_id=session_id)
        return None if result is None else list(result)

    def tier_thresholds(self) -> dict[str, float] | None:
        result = self._h.tier_thresholds()
        return None if result is None else dict(result)

    # Broadcast hooks: every implementation is called, one failure does not stop the others.

    def extract_memory(self, messages: Sequence[Message], session_id: str) -> list[str]:
        return self._broadcast("extract_memory", messages=messages, session_id=session_id)[1]

    def todo_context(self, session_id: str) -> list[str]:
        results, _ = self._broadcast("todo_context", session_id=session_id)
        return [r for r in results if r]

    def persist_record(self, record: CompactionRecord) -> list[str]:
        return self._broadcast("persist_record", record=record)[1]

    def list_sessions(self) -> tuple[list[SessionInfo], list[str]]:
        results, errors = self._broadcast("list_sessions")
        return [info for found in results if found for info in found], errors

    def on_delete_session(self, session_id: str) -> list[str]:
        return self._broadcast("on_delete_session", session_id=session_id)[1]

    def remove_leftovers(self, older_than: float, dry_run: bool) -> tuple[list[str], list[str]]:
        results, errors = self._broadcast("remove_leftovers", older_than=older_than, dry_run=dry_run)
        return [where for found in results if found for where in found], errors

    def _broadcast(self, hook: str, **kwargs: Any) -> tuple[list[Any], list[str]]:
        """Call every implementation; one that raises is logged and the others still run."""
        results, errors = [], []
        impls = self._impls(hook) if hook in _HOT_HOOKS else None
        if impls is None:
            impls = [
                (i.function, _picker(i.argnames), i.plugin_name)
                for i in reversed(getattr(self._h, hook).get_hookimpls())
                if not (i.hookwrapper or getattr(i, "wrapper", False))
            ]
        for function, pick, name in impls:
            try:
                results.append(function(*pick(kwargs)))
            except Exception as exc:  # noqa: BLE001 - fail-open: log, note, go on
                cause = self.secrets.redact(f"{type(exc).__name__}: {exc}")
                log.warning("%s of plugin %s failed: %s", hook, name, cause)
                errors.append(f"{name}: {cause}")
        return results, errors

    def implementers(self, hook: str) -> list[str]:
        return [impl.plugin_name for impl in getattr(self._h, hook).get_hookimpls()]

    def close(self) -> None:
        """Close every plugin; one whose ``close()`` raises is logged as a warning, never raised:
        it must not lose what was computed, nor leave the plugins after it open."""
        for name, cause in _close_all(self.pm, self.secrets.redact):
            log.warning("close of plugin %s failed: %s", name, cause)
