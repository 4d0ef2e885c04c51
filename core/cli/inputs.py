"""Reading a command's input: chat histories as JSONL, a JSON array, or ``-`` for stdin.

Every way of failing becomes one readable line naming the file and, where there is one, the line.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import InvalidMessagesError


def read_text(source: str, what: str = "file") -> str:
    """Text of ``source`` (``-`` is stdin); every way of failing becomes one readable line. Both
    are read as strict UTF-8 with universal newlines (stdin's own text layer would let a stray
    byte through as a lone surrogate)."""
    if source == "-":
        data = (
            sys.stdin.buffer.read()
            if hasattr(sys.stdin, "buffer")
            else sys.stdin.read().encode("utf-8", "surrogateescape")
        )
        try:
            return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
        except UnicodeDecodeError as exc:
            raise click.ClickException(f"{source}: not UTF-8 text (byte {exc.start})") from None
    path = Path(source)
    try:
        return path.read_text("utf-8")
    except FileNotFoundError:
        raise click.ClickException(f"{source}: no such {what}") from None
    except IsADirectoryError:
        raise click.ClickException(f"{source}: is a directory, expected a {what}") from None
    except PermissionError:
        raise click.ClickException(f"{source}: permission denied") from None
    except UnicodeDecodeError as exc:
        raise click.ClickException(f"{source}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise click.ClickException(f"{source}: cannot read: {exc.strerror or exc}") from None


def parse_messages(source: str, text: str) -> tuple[list[Any], list[int] | None]:
    """Messages and, for JSONL, the line each one came from (to name it in errors)."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise click.ClickException(
                f"{source}: invalid JSON on line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from exc
        except RecursionError:
            raise click.ClickException(f"{source}: JSON nested too deeply") from None
        if not isinstance(data, list):
            raise click.ClickException(f"{source}: expected a JSON array of messages")
        return data, None
    messages: list[Any] = []
    lines: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            messages.append(json.loads(line))
        except json.JSONDecodeError as exc:
            whole = _whole_document(text) if not messages else None
            if whole is not None:
                return whole, None
            raise click.ClickException(
                f"{source}: invalid JSON on line {number}, column {exc.colno}: {exc.msg}"
            ) from exc
        except RecursionError:
            raise click.ClickException(f"{source}: line {number}: JSON nested too deeply") from None
        lines.append(number)
    return messages, lines


def _whole_document(text: str) -> list[Any] | None:
    """A pretty-printed ``{"messages": [...]}`` document, accepted as a convenience."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        return list(data["messages"])
    return None


def read_messages(source: str) -> list[dict[str, Any]]:
    """Messages from a JSONL file, a JSON array file, or ``-`` for stdin; errors name the line."""
    return parse_messages(source, read_text(source))[0]


def load_history(source: str) -> list[dict[str, Any]]:
    """:func:`read_messages`, then every message checked, a bad one named by its line."""
    from ..messages import message_from_dict

    messages, lines = parse_messages(source, read_text(source))
    if not messages:
        raise click.ClickException(f"{source}: no messages")
    for index, data in enumerate(messages):
        try:
            message_from_dict(data, index)
        except InvalidMessagesError as exc:
            reason = re.sub(r"^message \d+: ", "", str(exc))
            where = f"line {lines[index]} (message {index})" if lines else f"message {index}"
            raise click.ClickException(f"{source}: {where}: {reason}") from exc
    return messages
