"""``compactor compact``: compact one history once and write the view."""

from __future__ import annotations

from pathlib import Path

import click

from ..converters import EMERGENCY_CAUSE
from .app import (
    check_output,
    config_option,
    data_dir_option,
    json_option,
    json_text,
    load_cli_config,
    one_line,
    window_option,
    write_output,
)
from .inputs import load_history


@click.command(short_help="Compact one history and write the view.")
@click.argument("session_file")
@config_option
@window_option
@data_dir_option
@click.option("--session-id", "-s", help="Session id (default: the file name without its extension; stdin for -).")
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False), help="Write the view to this file (default, or -: stdout)."
)
@json_option
def compact(
    session_file: str,
    config: str,
    context_window: int | None,
    data_dir: str | None,
    session_id: str | None,
    output: str | None,
    as_json: bool,
) -> None:
    """Compact SESSION_FILE (JSONL, a JSON array of chat messages, or - for stdin) and write the view.

    The view is written as JSONL, one message per line, and the two-line notice goes to stderr
    (to stdout with -o FILE). With --json, one object {"view": [...], "record": {...}} instead.
    Offloaded results go to the data folder, where 'compactor show HANDLE' finds them.

    What went wrong on the way (an offload or a summary that failed, a plugin's error) is
    printed on stderr as 'warning: ...' lines, and the record keeps it all. The exit status is 0
    whenever a view was written: a view is valid and loses no message even when a step failed.

    \b
    Example: compactor compact session.jsonl -w 32000 -o view.jsonl
    """
    from ..compactor import ProgressiveCompactor
    from ..converters import record_to_dict
    from ..notice import notice
    from ..redaction import redact_data

    check_output(output, [session_file])
    cfg = load_cli_config(config, context_window=context_window, data_dir=data_dir)
    messages = load_history(session_file)
    sid = session_id or (Path(session_file).stem if session_file != "-" else "stdin")
    with ProgressiveCompactor(cfg) as compactor:
        view, record = compactor.compact_with_record(messages, sid)
    # secrets are masked before JSON escapes a character they may hold (escaped, they would not match)
    redact = compactor.secrets.redact
    if as_json:
        text = json_text(redact_data({"view": view, "record": record_to_dict(record)}, redact)) + "\n"
    else:
        text = "".join(json_text(m) + "\n" for m in redact_data(view, redact))
    if output:
        write_output(output, text)
    else:
        click.echo(text, nl=False)
    if not as_json:
        message = notice(record) or f"No compaction needed: {record.tokens_before} tokens"
        click.echo(message, err=output in (None, "-"))
    warn_errors(record.errors)


SHOWN_ERRORS = 5
"""How many of a record's errors ``compact`` prints; the rest are counted."""


def warn_errors(errors: tuple[str, ...]) -> None:
    """The record's errors (already redacted) as ``warning:`` lines on stderr, the first few. The
    truncation that the Emergency tier is goes unsaid: the notice names the tier."""
    errors = tuple(error for error in errors if error != EMERGENCY_CAUSE)
    for error in errors[:SHOWN_ERRORS]:
        click.echo(f"warning: {one_line(error)}", err=True)
    if len(errors) > SHOWN_ERRORS:
        more = len(errors) - SHOWN_ERRORS
        click.echo(f"warning: ... and {more} more (--json gives the record with all of them)", err=True)


COMMANDS = [compact]
