"""``compactor config check`` and ``compactor config show``."""

from __future__ import annotations

import logging
from typing import Any, Mapping

import click

from ..errors import PluginError
from ..redaction import mask_passwords, secret_setting
from .app import CONTEXT, echo_json, json_option

log = logging.getLogger("progressive_compactor")


@click.group(name="config", context_settings=CONTEXT, short_help="Check a config, or show the effective one.")
def config_group() -> None:
    """Check a config file, or show the effective config with every default filled in.

    \b
    Example: compactor config check team.yaml
    """


@config_group.command(name="check", short_help="Validate a config; every problem with its path.")
@click.argument("file")
@json_option
def config_check(file: str, as_json: bool) -> None:
    """Validate a config FILE (or bundled name): every problem on its own line with its path, and
    the fix where there is one; exit 1 if any. The same validation runs whenever a compactor is
    built from the file, so what passes here works there.

    \b
    Example: compactor config check team.yaml
    """
    from ..validation import config_file_problems

    problems = config_file_problems(file)
    if as_json:
        echo_json({"file": file, "ok": not problems, "problems": problems})
    elif problems:
        for problem in problems:
            click.echo(f"{file}: {problem}")
        click.echo(f"error: {len(problems)} problem{'s' if len(problems) != 1 else ''} in {file}", err=True)
    else:
        click.echo(f"{file}: OK")
    if problems:
        raise click.exceptions.Exit(1)


def masked(data: Any, key: str = "", parent: str = "") -> Any:
    """``data`` with the values of secret settings (:func:`~progressive_compactor.redaction.secret_setting`)
    and connection-string passwords masked."""
    if isinstance(data, Mapping):
        return {k: masked(v, str(k), key) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [masked(v, key, parent) for v in data]
    if isinstance(data, str) and data and secret_setting(key, parent):
        return "***"
    if isinstance(data, str):  # postgresql://user:***@host/db, host=db password=***
        return mask_passwords(data)
    return data


def effective_config(source: str) -> dict[str, Any]:
    """The config as the core sees it, with each selected plugin's block completed by its defaults."""
    from ..config import config_to_dict
    from ..converters import config_converter
    from ..plugin_manager import installed_plugins, load_plugin_object, structure_block
    from ..storage import resolve_data_dir
    from ..validation import load_config

    cfg = load_config(source)
    data = config_to_dict(cfg)
    data["data_dir"] = str(resolve_data_dir(cfg.data_dir))
    installed = installed_plugins()
    blocks = dict(data.get("config") or {})
    for name in cfg.plugins.names():
        info = installed.get(name)
        if info is None:
            continue
        try:
            block = structure_block(name, load_plugin_object(info), cfg.plugin_block(name))
        except PluginError as exc:
            log.warning("%s; its block is shown as written", exc)
            continue
        if block is not None:
            blocks[name] = config_converter.unstructure(block)
    data["config"] = blocks
    result: dict[str, Any] = masked(data)
    return result


@config_group.command(name="show", short_help="Print the effective config, defaults filled in.")
@click.argument("file", required=False, default="default")
@json_option
def config_show(file: str, as_json: bool) -> None:
    """Print the effective config of FILE (default: the bundled 'default') with every default filled in.

    YAML by default. Values of secret-looking settings and passwords in connection strings are
    masked; configs name environment variables (api_key_env), never keys.

    \b
    Example: compactor config show team.yaml --json
    """
    import yaml

    from .render import make_console

    data = effective_config(file)
    if as_json:
        echo_json(data)
    else:
        width = make_console().width  # long text folds at the terminal's width (YAML reads it back the same)
        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=max(width - 2, 40)), nl=False)


COMMANDS = [config_group]
