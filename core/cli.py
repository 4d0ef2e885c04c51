"""The ``compactor`` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from .errors import CompactorError


def read_messages(source: str) -> list[dict[str, Any]]:
    """Messages from a JSONL file, a JSON array file, or ``-`` for stdin; errors name the line."""
    text = sys.stdin.read() if source == "-" else Path(source).read_text("utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise click.ClickException(f"{source}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc
        return list(data)
    messages = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            messages.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise click.ClickException(f"{source}: invalid JSON on line {number}: {exc.msg}") from exc
    return messages


@click.group()
@click.version_option(package_name="progressive-compactor", prog_name="compactor")
def main() -> None:
    """Tiered context compaction for LLM agents."""


@main.command()
@click.argument("session_file")
@click.option("--config", "-c", default="default", show_default=True, help="Bundled config name or YAML path.")
@click.option("--context-window", "-w", type=int, help="Context window in tokens (overrides the config).")
@click.option("--session-id", "-s", help="Session id (default: the file name).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write the view here as JSONL (default: stdout).")
def compact(session_file: str, config: str, context_window: int | None, session_id: str | None, output: str | None) -> None:
    """Compact SESSION_FILE (JSONL or a JSON array of chat messages) and write the view.

    Example: compactor compact session.jsonl -w 32000 -o view.jsonl
    """
    from .compactor import ProgressiveCompactor
    from .notification import notification

    overrides = {"context_window": context_window} if context_window else {}
    try:
        compactor = ProgressiveCompactor(config, **overrides)
        messages = read_messages(session_file)
        sid = session_id or (Path(session_file).stem if session_file != "-" else "stdin")
        view, record = compactor.compact_with_record(messages, sid)
    except CompactorError as exc:
        raise click.ClickException(str(exc)) from exc
    lines = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in view)
    if output:
        Path(output).write_text(lines, "utf-8")
    else:
        click.echo(lines, nl=False)
    notice = notification(record) or f"No compaction needed: {record.tokens_before} tokens"
    click.echo(notice, err=bool(not output))
