"""``compactor ab``: A/B comparisons of compaction policies, on recorded sessions or live records.

``compactor ab replay CORPUS_DIR --experiment FILE`` replays every session under every variant
(in parallel across processes) and prints, per metric, each variant's mean and each variant's
paired per-session difference from the control with a bootstrap 95 % confidence interval.
``compactor ab report RECORDS_DIR`` prints the same table from the CompactionRecords live traffic
wrote (retention needs transcripts, so it is shown only by ``ab replay``).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import click

from ..errors import CompactorError
from ..hookspecs import hookimpl


def replay_job(path: str, session_id: str, variant: str, config: Any, records_dir: str | None) -> dict[str, Any]:
    """Replay one session under one variant in a fresh compactor and temporary folder.

    Module level, so that a process pool can run it; returns plain data.
    """
    from ..compactor import ProgressiveCompactor
    from ..lab.experiment import metrics_from_replay
    from ..lab.replay import isolated_config, read_session, replay_session

    messages = read_session(path)
    with tempfile.TemporaryDirectory(prefix="compactor-ab-") as tmp:
        cfg = isolated_config(config, Path(tmp), Path(records_dir) if records_dir else None)
        with ProgressiveCompactor(cfg) as compactor:
            result = replay_session(messages, compactor, session_id)
    return {
        "session": session_id,
        "variant": variant,
        "metrics": metrics_from_replay(result),
        "problems": list(result.invalid_view_problems),
    }


def run_experiment(
    experiment: Any,
    files: list[Path],
    *,
    workers: int = 2,
    records_dir: str | None = None,
    progress: Any = None,
) -> dict[str, dict[str, dict[str, float | None]]]:
    """Every session under every variant; ``{variant: {session: metrics}}``.

    ``progress(done, total)`` is called whenever a session has finished under all variants.
    With ``workers`` > 1 the replays run in a process pool.
    """
    jobs = [(str(f), f.stem, v.name, v.config, records_dir) for f in files for v in experiment.variants]
    results: dict[str, dict[str, dict[str, float | None]]] = {v.name: {} for v in experiment.variants}
    remaining = {f.stem: len(experiment.variants) for f in files}
    done = 0

    def collect(out: dict[str, Any]) -> None:
        nonlocal done
        results[out["variant"]][out["session"]] = out["metrics"]
        remaining[out["session"]] -= 1
        if remaining[out["session"]] == 0:
            done += 1
            if progress is not None:
                progress(done, len(files))

    if workers <= 1:
        for job in jobs:
            collect(replay_job(*job))
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn, not fork: the caller may run threads (the progress bar) that a fork would copy mid-lock
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(replay_job, *job) for job in jobs]
        for future in as_completed(futures):
            collect(future.result())
    return results


# --- rendering --------------------------------------------------------------------------------


def _fmt(metric: str, value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    sign = "+" if signed else ""
    if metric == "cost":
        return f"{value:{sign}.4f}"
    if metric.startswith("retention") or metric == "cached_share":
        return f"{value * 100:{sign}.1f}%"
    if metric in ("overflows", "invalid_views", "summarizer_calls", "compactions"):
        return f"{value:{sign}.2f}"
    return f"{value:{sign},.0f}"


def comparison_table(comparison: Any, title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("metric (mean per session)")
    for v in comparison.variants:
        marker = " (control)" if v == comparison.control else ""
        table.add_column(f"{v}{marker}\nn={comparison.sessions[v]}", justify="right")
    for v in comparison.variants[1:]:
        table.add_column(f"{v} − {comparison.control}\n[95% CI]", justify="right")
    for row in comparison.rows:
        cells = [row.label] + [_fmt(row.metric, row.means[v]) for v in comparison.variants]
        for v in comparison.variants[1:]:
            e = row.differences.get(v)
            if e is None:
                cells.append("-")
            else:
                paired = "" if e.paired else " (unpaired)"
                cells.append(
                    f"{_fmt(row.metric, e.mean, True)} [{_fmt(row.metric, e.low, True)}, "
                    f"{_fmt(row.metric, e.high, True)}]{paired}"
                )
        table.add_row(*cells)
    return table


def _console(stderr: bool = False) -> Any:
    from .render import make_console

    return make_console(stderr=stderr)


@hookimpl
def register_commands(cli: Any) -> None:
    cli.add_command(ab)


# --- commands ---------------------------------------------------------------------------------


@click.group(short_help="A/B experiments: compare compaction policies.")
def ab() -> None:
    """A/B experiments: compare compaction policies on recorded sessions or live records.

    \b
    Example: compactor ab replay examples/sessions --experiment ab-example -w 16000
    """


@ab.command("replay", short_help="Replay every session under every variant and compare.")
@click.argument("corpus_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--experiment",
    "-e",
    "experiment_ref",
    required=True,
    help="Experiment YAML (path or bundled name, e.g. ab-example).",
)
@click.option(
    "--context-window", "-w", type=click.IntRange(min=1), help="Context window for every variant (overrides the file)."
)
@click.option(
    "--workers", type=click.IntRange(min=1), default=2, show_default=True, help="Processes replaying in parallel."
)
@click.option("--limit", type=click.IntRange(min=1), help="Replay only the first N sessions (by file name).")
@click.option(
    "--records-dir",
    type=click.Path(file_okay=False),
    help="Keep the replays' records here (for 'compactor ab report').",
)
@click.option("--resamples", type=click.IntRange(min=100), default=2000, show_default=True, help="Bootstrap resamples.")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap random seed.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
def replay_command(
    corpus_dir: str,
    experiment_ref: str,
    context_window: int | None,
    workers: int,
    limit: int | None,
    records_dir: str | None,
    resamples: int,
    seed: int,
    as_json: bool,
) -> None:
    """Replay every session (*.jsonl) of CORPUS_DIR under every variant of the experiment.

    Prints each variant's mean per session, and each variant's paired per-session difference
    from the control with a bootstrap 95 % confidence interval, for billed cost, peak view
    tokens, overflows, invalid views and retention per category.

    \b
    Example: compactor ab replay examples/sessions -e ab-example -w 16000 --limit 2
    """
    from ..lab.experiment import compare, comparison_to_dict, load_experiment
    from ..lab.replay import session_files

    try:
        experiment = load_experiment(experiment_ref)
    except CompactorError as exc:
        raise click.ClickException(str(exc)) from exc
    if context_window:
        experiment = experiment.with_overrides(context_window=context_window)
    files = session_files(corpus_dir)[: limit or None]
    if not files:
        raise click.ClickException(f"{corpus_dir}: no *.jsonl session files")
    if records_dir:
        Path(records_dir).mkdir(parents=True, exist_ok=True)
        records_dir = str(Path(records_dir).resolve())
    err = _console(stderr=True)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]sessions"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=not err.is_terminal,
        transient=True,
    ) as bar:
        task = bar.add_task("sessions", total=len(files))
        results = run_experiment(
            experiment,
            files,
            workers=workers,
            records_dir=records_dir,
            progress=lambda done, total: bar.update(task, completed=done),
        )
    comparison = compare(results, experiment.control, resamples=resamples, seed=seed)
    window = experiment.variants[0].config.context_window
    if as_json:
        data = comparison_to_dict(comparison)
        data.update(experiment=experiment.name, context_window=window, per_session=results)
        click.echo(json.dumps(data, default=str))
        return
    title = f"{experiment.name}: {len(files)} sessions × {len(experiment.variants)} variants, window {window:,} tokens"
    _console().print(comparison_table(comparison, title))


@ab.command("report", short_help="The same comparison from records written by live traffic.")
@click.argument("records_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--experiment", "-e", "experiment_ref", help="Experiment YAML: its control and price table.")
@click.option(
    "--control", help="Variant to compare against (default: the experiment's control, else the first by name)."
)
@click.option("--resamples", type=click.IntRange(min=100), default=2000, show_default=True, help="Bootstrap resamples.")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap random seed.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
def report_command(
    records_dir: str, experiment_ref: str | None, control: str | None, resamples: int, seed: int, as_json: bool
) -> None:
    """Compare variants from the JSONL records under RECORDS_DIR (searched recursively).

    Cost here is the input side only (records hold no model answers), and covers every turn
    only when the store kept tier-None records (store-jsonl: {record_none: true}). Sessions
    seen under one variant only are compared as independent samples ("unpaired").

    \b
    Example: compactor ab report ab-records -e ab-example   (after: ab replay ... --records-dir ab-records)
    """
    from ..converters import read_records_file
    from ..lab.experiment import compare, comparison_to_dict, load_experiment, metrics_from_records
    from ..models import CompactionTier

    prices = None
    if experiment_ref:
        try:
            experiment = load_experiment(experiment_ref)
        except CompactorError as exc:
            raise click.ClickException(str(exc)) from exc
        prices = experiment.base.pricing
        control = control or experiment.control
    records = [r for path in sorted(Path(records_dir).rglob("*.jsonl")) for r in read_records_file(path)]
    if not records:
        raise click.ClickException(f"{records_dir}: no records in *.jsonl files")
    per_key = metrics_from_records(records, prices)
    per_variant: dict[str, dict[str, Any]] = {}
    for (variant, session), metrics in sorted(per_key.items()):
        per_variant.setdefault(variant, {})[session] = metrics
    if control is not None and control not in per_variant:
        raise click.ClickException(f"no records of control variant {control!r}; found: {', '.join(per_variant)}")
    comparison = compare(per_variant, control, resamples=resamples, seed=seed)
    partial = not any(r.tier is CompactionTier.NONE for r in records)
    if as_json:
        data = comparison_to_dict(comparison)
        data.update(records=len(records), cost_covers_every_turn=not partial)
        click.echo(json.dumps(data, default=str))
        return
    title = f"{len(records):,} records, {sum(comparison.sessions.values())} sessions"
    _console().print(comparison_table(comparison, title))
    if partial:
        _console(stderr=True).print(
            "note: no tier-None records, so cost counts compaction turns only; "
            "set store-jsonl: {record_none: true} to record every turn."
        )


__all__ = ["ab", "register_commands", "replay_job", "run_experiment"]
