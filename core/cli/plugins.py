"""``compactor plugins``: what is installed, what each implements, what the config selects."""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any

import click

from .app import config_option, console, echo_json, json_option, load_cli_config


def selection(cfg: Any) -> dict[str, list[str]]:
    """Plugin name -> the roles the config gives it, named as the YAML keys under ``plugins:``
    (plus ``disabled`` and ``essential``)."""
    from ..config import ESSENTIAL_PLUGINS

    roles: dict[str, list[str]] = {}
    for role, name in cfg.plugins.roles().items():
        if name != "none":
            roles.setdefault(name, []).append(role)
    for name in cfg.plugins.stores:
        roles.setdefault(name, []).append("stores")
    for name in cfg.plugins.extra:
        roles.setdefault(name, []).append("extra")
    for name in cfg.plugins.disable:
        roles[name] = ["disabled"]
    for name in ESSENTIAL_PLUGINS:
        if "fallback" not in roles.get(name, []):
            roles.setdefault(name, []).append("essential")
    return roles


def description(name: str, obj: Any) -> str:
    """A plugin's one-line description: the first line of its module's docstring (without the
    ``name``: prefix the built-ins start with), else of its own docstring."""
    module = sys.modules.get(getattr(obj, "__module__", "") or "") if not inspect.ismodule(obj) else obj
    for doc in (getattr(module, "__doc__", None), inspect.getdoc(obj)):
        if not doc or not doc.strip():
            continue
        first = doc.strip().splitlines()[0].strip()
        first = re.sub(rf"^``{re.escape(name)}``:\s*", "", first).replace("``", "")
        if first and not first.startswith("Base of "):
            return first[0].upper() + first[1:]
    return ""


@click.command(short_help="List installed plugins and what the config selects.")
@config_option
@json_option
def plugins(config: str, as_json: bool) -> None:
    """List installed plugins: what each does, the hooks it implements, and what CONFIG selects.

    A plugin that fails to import shows its error instead of its hooks. With --json, also the
    distribution, version and entry-point target of each.

    \b
    Example: compactor plugins --config team.yaml
    """
    from ..plugin_manager import BUILTIN_PLUGINS, hooks_of, installed_plugins, load_plugin_object
    from .render import plugins_view

    cfg = load_cli_config(config)
    selected = selection(cfg)
    rows = []
    installed = installed_plugins()
    for name, info in sorted(installed.items()):
        try:
            obj = load_plugin_object(info)
            hooks, error, about = hooks_of(obj), None, description(name, obj)
        except Exception as exc:  # noqa: BLE001 - shown in its row
            cause = exc.__cause__ or exc
            hooks, error, about = [], f"failed to import: {type(cause).__name__}: {cause}", ""
        rows.append(
            {
                "name": name,
                "distribution": info.distribution,
                "version": info.version,
                "target": info.value,
                "builtin": name in BUILTIN_PLUGINS,
                "description": about,
                "hooks": hooks,
                "error": error,
                "selected": selected.get(name, []),
            }
        )
    for name in sorted(set(selected) - set(installed)):
        rows.append(
            {
                "name": name,
                "distribution": None,
                "version": None,
                "target": None,
                "builtin": False,
                "description": "",
                "hooks": [],
                "error": "not installed",
                "selected": selected[name],
            }
        )
    if as_json:
        echo_json(rows)
    else:
        out = console()
        out.print(plugins_view(rows, config, out.width))


COMMANDS = [plugins]
