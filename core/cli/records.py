"""``compactor records`` and ``compactor show``: what the stores keep, read back through hooks.

``records`` lists what each call did and, per compaction, what it kept: anchors, summary,
offloaded results (with the ``show`` command that prints each) and, for replays, the facts of the
probe set it left out; ``show`` prints an offloaded result.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path
from typing import Callable

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


def _looks_like_a_path(value: str) -> bool:
    return value.endswith(".jsonl") or os.sep in value


def _chat_history(data: bytes) -> bool:
    """Whether a file's first line is a chat history's: a message, or the start of a JSON array."""
    import json

    first = next((line for line in data.split(b"\n") if line.strip()), b"")
    try:
        item = json.loads(first)
    except ValueError:
        return first.lstrip().startswith(b"[")
    return isinstance(item, list) or (isinstance(item, dict) and "role" in item)


FACTS_FOLDER = "replay"
"""Under a data folder that ``replay --keep`` filled: per session, the facts of the probe set each
compaction left out of the view (``{session}.facts.jsonl``), which ``records`` shows."""


def facts_path(data_dir: Path, session_id: str) -> Path:
    from ..storage import session_name

    return data_dir / FACTS_FOLDER / f"{session_name(session_id)}.facts.jsonl"


def read_lost_facts(path: Path, root: Path, redact: Callable[[str], str]) -> dict[str, dict[str, list[str]]]:
    """Record id -> {category: [facts no longer in the view]}, from a file ``replay --keep`` wrote
    under ``root`` (no link under it followed, nothing but a regular file read), each fact passed
    through ``redact`` (the file may predate a secret, or this version)."""
    import json

    from ..errors import StorageError
    from ..storage import read_private

    out: dict[str, dict[str, list[str]]] = {}
    try:
        data = read_private(path, root)
    except (OSError, StorageError):
        return out
    text = "" if data is None else data.decode("utf-8", "replace")
    for line in text.splitlines():
        try:
            item = json.loads(line)
            out[str(item["record"])] = {str(k): [redact(str(x)) for x in v] for k, v in item["lost"].items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return out


@click.command(short_help="Show the compaction records of a session or records file.")
@click.argument("session_or_file")
@click.option(
    "--compaction",
    "-n",
    "number",
    type=click.IntRange(min=1),
    help="What record N (the # column) did: anchors, summary, offloaded results, errors.",
)
@click.option(
    "--full", is_flag=True, help="Every line of the anchors and summary; without -n, every compaction after the table."
)
@config_option
@data_dir_option
@json_option
def records(
    session_or_file: str, number: int | None, full: bool, config: str, data_dir: str | None, as_json: bool
) -> None:
    """Show the compaction records of a session id (read back through the config's stores) or of
    a records JSONL file (an existing path is a file, anything else a session id, 'team/t42'
    included): a table with one line per record, errors and loop-guard notes below it.

    With --compaction N, what compaction N did: its notice, the five anchors, the summary text, each
    offloaded tool result with the command that prints it, and for sessions replayed with
    'replay --keep', the facts of the probe set no longer in the view; each anchor's first line and
    the summary's first lines, or every line with --full. --full alone prints that for every
    compaction that changed the view. A torn last line (a crash mid-write) is skipped with a
    warning. With --json, the records as JSON lines, one per record.

    \b
    Example: compactor records my-session --compaction 3 --config team.yaml
    """
    from ..converters import parse_records, record_to_dict
    from ..notice import changed_view
    from ..redaction import config_registry, redact_data
    from ..storage import read_file, resolve_data_dir
    from .render import Where, compaction_detail, details_hint, print_all, records_view

    cfg = load_cli_config(config, data_dir=data_dir)
    redact = config_registry(cfg).redact
    show_dir = os.path.abspath(os.path.expanduser(data_dir)) if data_dir else None
    path = Path(session_or_file).expanduser()
    if path.exists():
        if path.is_dir():
            raise click.ClickException(f"{session_or_file}: is a directory, expected a records JSONL file")
        try:
            data = read_file(path)
        except OSError as exc:
            raise click.ClickException(f"{path}: cannot read: {exc.strerror or exc}") from None
        if _chat_history(data):
            replay = shlex.join(["compactor", "replay", session_or_file])
            raise click.ClickException(
                f"{session_or_file}: not a records file (it holds chat messages; to replay it: {replay})"
            )
        found = list(parse_records(data, path))
        if not found and data.strip():
            raise click.ClickException(f"{session_or_file}: not a records file: no line of it is a compaction record")
        where, command = str(path), f"compactor records {shlex.quote(str(path))}"
        folder = path.absolute().parent.parent
        lost = read_lost_facts(folder / FACTS_FOLDER / f"{path.stem}.facts.jsonl", folder, redact)
        if path.absolute().parent.name == "records" and show_dir is None and (folder / "tool_results").is_dir():
            show_dir = str(folder)
    else:
        with storage_compactor(cfg) as compactor:
            stored = compactor.records(session_or_file)
        if stored is None and _looks_like_a_path(session_or_file):
            raise click.ClickException(
                f"{session_or_file}: no such file, and no store of config {config!r} "
                f"(stores: {', '.join(cfg.plugins.stores) or 'none'}) holds a session of that name"
            )
        if stored is None:
            raise click.ClickException(
                f"no records for session {session_or_file!r}: no store of config {config!r} "
                f"(stores: {', '.join(cfg.plugins.stores) or 'none'}) holds any; pass a records JSONL path instead"
            )
        found, where = stored, f"session {session_or_file}"
        command = shlex.join(["compactor", "records", session_or_file, *_options(config, show_dir)])
        data_folder = resolve_data_dir(cfg.data_dir)
        lost = read_lost_facts(facts_path(data_folder, session_or_file), data_folder, redact)
    if number is not None and number > len(found):
        raise click.ClickException(f"there is no record {number}: {where} has {len(found)}")
    found = redact_data(found, redact)  # records written before a secret was known: masked here
    if as_json:
        for record in found if number is None else [found[number - 1]]:
            click.echo(json_text(record_to_dict(record)))
        return
    if not found:
        click.echo(f"no records in {where}", err=True)
        return
    out = console()
    at = Where(config=config, data_dir=show_dir)

    def detail(n: int) -> None:
        record = found[n - 1]
        heading = f"#{n} {record.tier.label} · {record.timestamp[:19].replace('T', ' ')}"
        print_all(out, compaction_detail(record, heading=heading, where=at, full=full, lost=lost.get(record.id)))

    if number is not None:
        detail(number)
        return
    out.print(records_view(found, out.width, title=f"{len(found)} records in {where}"))
    if full:
        for n, record in enumerate(found, 1):
            if changed_view(record):
                detail(n)
    else:
        print_all(out, details_hint(found, command))


def _options(config: str, data_dir: str | None) -> list[str]:
    return [*(["-c", config] if config != "default" else []), *(["--data-dir", data_dir] if data_dir else [])]


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

    Results written by 'compact' and by the library live in the data folder, found from any
    folder; what 'replay --keep DIR' kept is read with --data-dir DIR. 'compactor records SESSION
    --full' lists each compaction's offloaded results with the command that prints each.

    \b
    Example: compactor show my-session/call_42 --lines 120:180
    """
    from ..errors import CompactorError

    lines = parse_line_range(line_range)
    cfg = load_cli_config(config, data_dir=data_dir)
    with storage_compactor(cfg) as compactor:
        try:
            text = compactor.secrets.redact(compactor.read_tool_result(handle, lines))
        except CompactorError as exc:
            if "/" in handle or not compactor.records(handle):
                raise
            command = shlex.join(["compactor", "records", handle, *_options(config, data_dir), "--full"])
            raise click.ClickException(
                f"{exc}; {handle!r} is a session: what its compactions did is printed by {command}"
            ) from exc
    if as_json:
        end = None if lines is None or lines[1] == sys.maxsize else lines[1]
        echo_json({"handle": handle, "lines": None if lines is None else [lines[0], end], "text": text})
    else:
        click.echo(text)


COMMANDS = [records, show]
