"""``compactor records`` and ``compactor show``: what the stores keep, read back through hooks."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import click

from .app import (
    config_option,
    console,
    data_dir_option,
    echo_json,
    json_option,
    json_text,
    load_cli_config,
    storage_compactor,
)


def _is_records_file(value: str) -> bool:
    path = Path(value).expanduser()
    return path.is_file() or value.endswith(".jsonl") or os.sep in value


@click.command(short_help="Show the compaction records of a session or records file.")
@click.argument("session_or_file")
@config_option
@data_dir_option
@json_option
def records(session_or_file: str, config: str, data_dir: str | None, as_json: bool) -> None:
    """Show the compaction records of a session id (read back through the config's stores) or of
    a records JSONL file.

    A torn last line (a crash mid-write) is skipped with a warning. With --json, the records as
    JSON lines, one per record.

    \b
    Example: compactor records my-session --config team.yaml
    """
    from ..converters import read_records_file, record_to_dict
    from ..redaction import SecretRegistry, config_secrets
    from .render import records_table

    cfg = load_cli_config(config, data_dir=data_dir)
    redact = SecretRegistry(config_secrets(cfg)).redact
    if _is_records_file(session_or_file):
        path = Path(session_or_file).expanduser()
        if not path.exists():
            raise click.ClickException(f"{session_or_file}: no such file")
        if path.is_dir():
            raise click.ClickException(f"{session_or_file}: is a directory, expected a records JSONL file")
        try:
            found = list(read_records_file(path))
        except OSError as exc:
            raise click.ClickException(f"{path}: cannot read: {exc.strerror or exc}") from None
        where = str(path)
    else:
        with storage_compactor(cfg) as compactor:
            stored = compactor.records(session_or_file)
        if stored is None:
            raise click.ClickException(
                f"no records for session {session_or_file!r}: no store of config {config!r} "
                f"(stores: {', '.join(cfg.plugins.stores) or 'none'}) holds any; pass a records JSONL path instead"
            )
        found, where = stored, f"session {session_or_file}"
    if as_json:
        for record in found:
            click.echo(redact(json_text(record_to_dict(record))))
        return
    if not found:
        click.echo(f"no records in {where}", err=True)
        return
    console().print(records_table(found, title=f"{len(found)} records in {where}"))


def parse_line_range(value: str | None) -> tuple[int, int] | None:
    """``A:B``, ``A:``, ``:B`` or ``A`` -> 1-based inclusive ``(start, end)``."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*(\d*)\s*(?::\s*(\d*)\s*)?", value)
    if match is None or not (match.group(1) or match.group(2)):
        raise click.BadParameter(f"expected A:B, A: or :B (1-based line numbers), got {value!r}", param_hint="--lines")
    start = int(match.group(1)) if match.group(1) else 1
    if match.group(2) is None and ":" not in value:
        end = start
    else:
        end = int(match.group(2)) if match.group(2) else sys.maxsize
    if start < 1 or end < start:
        raise click.BadParameter(f"line range {value!r} is empty (lines start at 1, A <= B)", param_hint="--lines")
    return start, end


@click.command(short_help="Print an offloaded tool result, whole or a line range.")
@click.argument("handle")
@click.option("--lines", "line_range", metavar="A:B", help="Only lines A to B (1-based, inclusive; A: or :B open).")
@config_option
@data_dir_option
@json_option
def show(handle: str, line_range: str | None, config: str, data_dir: str | None, as_json: bool) -> None:
    """Print an offloaded tool result by its HANDLE (as named in the placeholder), whole or a line range.

    \b
    Example: compactor show my-session/call_42 --lines 120:180
    """
    lines = parse_line_range(line_range)
    cfg = load_cli_config(config, data_dir=data_dir)
    with storage_compactor(cfg) as compactor:
        text = compactor.secrets.redact(compactor.read_tool_result(handle, lines))
    if as_json:
        end = None if lines is None or lines[1] == sys.maxsize else lines[1]
        echo_json({"handle": handle, "lines": None if lines is None else [lines[0], end], "text": text})
    else:
        click.echo(text)


COMMANDS = [records, show]
