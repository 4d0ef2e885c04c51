"""``compactor report``: a self-contained HTML page with charts of a session or of its records."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .app import config_option, echo_json, json_option, load_cli_config, storage_compactor, window_option, write_output
from .inputs import read_text


def sniff(source: str) -> str:
    """``messages`` or ``records``: what the first JSON object of a JSONL file looks like."""
    text = read_text(source)
    for line in text.splitlines():
        if line.strip():
            break
    else:
        raise click.ClickException(f"{source}: empty file")
    if line.lstrip().startswith("["):
        return "messages"
    try:
        first = json.loads(line)
    except json.JSONDecodeError:
        return "messages"  # let the messages reader name the line
    if isinstance(first, dict) and "tokens_before" in first and "tier" in first:
        return "records"
    return "messages"


@click.command(short_help="Write a self-contained HTML report with charts.")
@click.argument("input_file", metavar="INPUT")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False), help="HTML file to write.")
@config_option
@window_option
@json_option
def report(input_file: str, output: str, config: str, context_window: int | None, as_json: bool) -> None:
    """Write a self-contained HTML report (charts work offline) for a session file or a records JSONL.

    A session (chat messages) is replayed first, in a temporary folder; a records file is charted
    as it is. Charts: view tokens per turn with the policy's threshold bands and each compaction
    marked by tier, tokens before/after per compaction, offloaded size. Needs plotly:
    pip install 'progressive-compactor[report]'.

    \b
    Example: compactor report session.jsonl -w 16000 -o report.html
    """
    from ..converters import read_records_file
    from ..lab import report as report_mod
    from .replay import replay_summary, run_replays, work_folder

    if input_file == "-":
        raise click.UsageError("INPUT must be a file (a session or a records JSONL), not stdin")
    report_mod.require_plotly()
    cfg = load_cli_config(config, context_window=context_window)
    with storage_compactor(cfg) as compactor:
        thresholds = compactor.hooks.tier_thresholds() or {}
    if sniff(input_file) == "records":
        found = list(read_records_file(input_file))
        if not found:
            raise click.ClickException(f"{input_file}: no readable records")
        data = report_mod.from_records(found, thresholds, title=Path(input_file).stem)
    else:
        with work_folder(None) as directory:
            sid, source, result = next(run_replays([input_file], cfg, directory))
        data = report_mod.from_replay(result, thresholds, title=sid, summary=replay_summary(sid, source, result))
    page = compactor.secrets.redact(report_mod.render_html(data))
    write_output(output, page)
    if as_json:
        echo_json({"output": output, "bytes": len(page.encode("utf-8")), "compactions": len(data.compactions)})
    else:
        click.echo(f"wrote {output} ({len(page.encode('utf-8')) // 1024} KB, {len(data.compactions)} compactions)")


COMMANDS = [report]
