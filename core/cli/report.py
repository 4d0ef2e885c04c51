"""``compactor report``: a self-contained HTML page of sessions or records, or a comparison.

Every session file is replayed under every config (``-c``, repeatable) and every context window
(``-w``, repeatable); records files are charted as they are. One run gives the full report of a
session; several (sessions, configs, windows) give one page that compares them, a chart per
session with every run on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import click

from .app import check_output, json_option, json_text, load_cli_config, storage_compactor, write_output
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


def default_output(inputs: Sequence[str], comparing: bool) -> str:
    """``NAME-report.html`` (``NAME-comparison.html`` for several configs or windows) in the
    current folder; NAME is the one input's file or folder name, else ``compactor``."""
    names = [Path(i).stem if Path(i).suffix else Path(i).name for i in inputs]
    name = names[0] if len(names) == 1 and names[0] else "compactor"
    return f"{name}-{'comparison' if comparing else 'report'}.html"


def config_names(configs: Sequence[str]) -> dict[str, str]:
    """A short name per config: a bundled name, a file's name without ``.yaml``, or the path as
    given when two files share a name."""
    short = {c: Path(c).stem if c.endswith((".yaml", ".yml")) else c for c in configs}
    names = list(short.values())
    return {c: (c if names.count(name) > 1 else name) for c, name in short.items()}


def run_label(config: str, window: int | None, configs: Sequence[str], windows: int) -> str:
    """What tells runs apart: the config (when there are several), the window (likewise)."""
    parts = []
    if len(configs) > 1:
        parts.append(config_names(configs)[config])
    if windows > 1 and window:
        parts.append(f"{window / 1000:g}k window")
    return " · ".join(parts)


def replay_runs(
    files: Sequence[str],
    configs: Sequence[str],
    windows: Sequence[int | None],
    directory: Path,
    *,
    keep: bool = False,
    progress: Any = None,
) -> list[Any]:
    """Every session file replayed under every config and window: :class:`ReportData` each.

    The replays' files live under ``directory`` (a folder per run when there are several).
    ``keep``: the folder stays, and the panels print the ``compactor show`` command that reads
    each offloaded result from it. ``progress(label)`` is called before each replay.
    """
    from ..compactor import ProgressiveCompactor
    from ..lab import report as report_mod
    from ..lab.replay import isolated_config, replay_session
    from ..redaction import redact_data
    from .inputs import load_history
    from .replay import replay_summary, session_ids

    histories = [load_history(f) for f in files]
    cfgs = [(c, w, load_cli_config(c, context_window=w)) for c in configs for w in windows]
    several = len(cfgs) > 1
    out = []
    for sid, source, messages in zip(session_ids(files), files, histories, strict=True):
        for n, (config, window, cfg) in enumerate(cfgs, 1):
            label = run_label(config, window or cfg.context_window, configs, len(windows))
            folder = directory / f"run-{n}" if several else directory
            if progress is not None:
                progress(f"{sid} {label}".strip())
            with ProgressiveCompactor(isolated_config(cfg, folder)) as compactor:
                compactor.delete_session(sid)
                result = replay_session(messages, compactor, sid, probe_compactions=True)
                thresholds = compactor.hooks.tier_thresholds() or {}
                raw = report_mod.raw_tokens_per_call(
                    messages, compactor.hooks.estimate_tokens, [t.index for t in result.turns]
                )
                prices = compactor.config.pricing
            show = {"--data-dir": str(folder)} if keep else {}
            data = report_mod.from_replay(
                result,
                thresholds,
                title=sid,
                summary=replay_summary(sid, source, result),
                raw_tokens=raw,
                prices=prices,
                label=label,
                show=show,
            )
            out.append(redact_data(data, compactor.secrets.redact))
    return out


def expand(inputs: Sequence[str]) -> list[str]:
    """Files as given; a folder stands for its ``*.jsonl`` files."""
    from .replay import expand_inputs

    if "-" in inputs:
        raise click.UsageError("INPUT must be a file or a folder (sessions or records JSONL), not stdin")
    return expand_inputs(inputs)


@click.command(short_help="Write a self-contained HTML report, or a comparison of configs and windows.")
@click.argument("inputs", metavar="INPUT...", nargs=-1, required=True)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    help="HTML file to write, or - for stdout (default: NAME-report.html, or NAME-comparison.html, in the current folder).",
)
@click.option(
    "--config",
    "-c",
    "configs",
    multiple=True,
    help="Bundled config name or YAML path; repeat to compare configs (default: default).",
)
@click.option(
    "--context-window",
    "-w",
    "windows",
    type=click.IntRange(min=1),
    multiple=True,
    help="Context window in tokens (overrides the config); repeat to compare windows.",
)
@click.option(
    "--keep",
    type=click.Path(file_okay=False),
    help="Keep the replays' offloaded results here, so the report's 'compactor show' commands work.",
)
@json_option
def report(
    inputs: tuple[str, ...],
    output: str | None,
    configs: tuple[str, ...],
    windows: tuple[int, ...],
    keep: str | None,
    as_json: bool,
) -> None:
    """Write a self-contained HTML report (it opens offline) of sessions or records files.

    INPUT is a session (chat messages, JSONL or a JSON array), a records JSONL, or a folder of
    either (its *.jsonl files). Sessions are replayed call by call, in a temporary folder (or
    --keep DIR), under every -c CONFIG and every -w WINDOW given; records files are charted as they
    are. One run: the view tokens per call with the raw history and the threshold bands, the cost
    per call and in total against no compaction (with the price table), tokens before and after
    and the offloads of each compaction, and a panel per compaction with its anchors, summary,
    offloaded results and the facts it left out. Several runs: one page comparing them. Needs
    plotly: pip install 'progressive-compactor[report]'.

    \b
    Example: compactor report session.jsonl -w 16000
    Example: compactor report sessions/ -c default -c cache-aware -w 16000 -w 32000 -o ab.html
    """
    from ..converters import read_records_file
    from ..lab import report as report_mod
    from ..redaction import redact_data
    from .render import make_console
    from .replay import work_folder

    report_mod.require_plotly()
    files = expand(inputs)
    configs = configs or ("default",)
    window_list: list[int | None] = list(windows) or [None]
    kinds = {f: sniff(f) for f in files}
    sessions = [f for f in files if kinds[f] == "messages"]
    records_files = [f for f in files if kinds[f] == "records"]
    comparing = len(configs) > 1 or len(window_list) > 1
    target = output or default_output(inputs, comparing)
    check_output(target, files)
    err = make_console(stderr=True)
    runs: list[Any] = []
    with work_folder(keep, sessions) as directory:
        if sessions:
            status = err.status("replaying", spinner="dots") if err.is_terminal and not as_json else None
            if status is not None:
                status.start()
            try:
                runs += replay_runs(
                    sessions,
                    configs,
                    window_list,
                    directory,
                    keep=bool(keep),
                    progress=(lambda label: status.update(f"replaying {label}")) if status is not None else None,
                )
            finally:
                if status is not None:
                    status.stop()
    cfg = load_cli_config(configs[0], context_window=window_list[0])
    with storage_compactor(cfg) as compactor:
        thresholds = compactor.hooks.tier_thresholds() or {}
        secrets = compactor.secrets
    for path in records_files:
        found = list(read_records_file(path))
        if not found:
            raise click.ClickException(f"{path}: no readable records")
        folder = Path(path).absolute().parent.parent
        show = {"--data-dir": str(folder)} if (folder / "tool_results").is_dir() else {}
        runs.append(
            redact_data(report_mod.from_records(found, thresholds, title=Path(path).stem, show=show), secrets.redact)
        )
    page = report_mod.render_page(runs)  # every run's text masked before HTML escapes what a secret may hold
    write_output(target, page)
    size = len(page.encode("utf-8"))
    compactions = sum(len(r.compactions) for r in runs)
    done = {"output": target, "bytes": size, "runs": len(runs), "compactions": compactions}
    plural = "s" if len(runs) > 1 else ""
    text = (
        json_text(done)
        if as_json
        else f"wrote {target} ({size // 1024} KB, {len(runs)} run{plural}, {compactions} compactions)"
    )
    click.echo(text, err=target == "-")  # with -o -, the page itself is on stdout


COMMANDS = [report]
