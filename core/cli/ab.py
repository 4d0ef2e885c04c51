"""``compactor ab``: A/B comparisons of compaction policies, on recorded sessions or live records.

``compactor ab replay CORPUS_DIR --experiment FILE`` replays every session under every variant (in
parallel across processes) and compares each variant with the control, paired by session.
``compactor ab report RECORDS_DIR`` (or ``--config FILE``, through its record stores) compares the
variants from the CompactionRecords that live traffic (or ``ab replay --records-dir``) wrote. Both compute cost the same way from the same
record fields with the experiment's price table, and print the same tables (retention and invalid
views need transcripts, so only ``ab replay`` has them). The method is
:mod:`progressive_compactor.lab.experiment`'s.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any, Sequence

import click

from ..errors import CompactorError
from ..hookspecs import hookimpl
from .app import data_dir_option, load_cli_config, storage_compactor


def replay_job(
    path: str, session_id: str, variant: str, config: Any, records_dir: str | None, prices: Any = None
) -> dict[str, Any]:
    """Replay one session under one variant in a fresh compactor and temporary folder.

    With ``records_dir``, the run's records (every turn, tier None included) replace
    ``records_dir/VARIANT/SESSION.jsonl``, so that running the replay again never doubles them.
    Module level, so that a process pool can run it; returns plain data.
    """
    import attrs

    from ..compactor import ProgressiveCompactor
    from ..lab.experiment import metrics_from_replay
    from ..lab.replay import isolated_config, read_session, replay_session

    messages = read_session(path)
    with tempfile.TemporaryDirectory(prefix="compactor-ab-") as tmp:
        cfg = isolated_config(config, Path(tmp))
        if records_dir:  # every turn recorded, so that the records' cost covers every turn
            block = {**cfg.plugin_block("store-jsonl"), "record_none": True}
            cfg = attrs.evolve(cfg, config={**cfg.config, "store-jsonl": block})
        with ProgressiveCompactor(cfg) as compactor:
            result = replay_session(messages, compactor, session_id)
        if records_dir:
            _keep_records(Path(tmp) / "records", Path(records_dir), variant)
    return {
        "session": session_id,
        "variant": variant,
        "calls": len(result.turns),
        "metrics": metrics_from_replay(result, prices or config.pricing),
        "problems": list(result.invalid_view_problems),
    }


def _keep_records(source: Path, records_dir: Path, variant: str) -> None:
    """Move a replay's record files into ``records_dir/VARIANT/``, each replacing its older run."""
    from ..storage import read_private, safe_name, write_private

    target = records_dir / safe_name(variant)
    for file in sorted(source.glob("*.jsonl")):
        data = read_private(file, source)
        if data is not None:
            write_private(target / file.name, data, records_dir)


RUN_FOLDERS = ".ab-replay-folders"
"""In a records folder: the variant folders the last run wrote (JSON list of names)."""


def _clear_records(records_dir: Path, folders: Sequence[str]) -> None:
    """Remove the record files (``*.jsonl``) an earlier run left in ``records_dir``: in the
    variant folders its :data:`RUN_FOLDERS` names and in ``folders`` (this run's), each folder
    removed when nothing else is left in it; then :data:`RUN_FOLDERS` names ``folders``. Nothing
    else in ``records_dir`` is touched."""
    from ..storage import made_by_safe_name, write_private

    listed = records_dir / RUN_FOLDERS
    for name in dict.fromkeys([*_earlier_folders(records_dir), *folders]):
        folder = records_dir / name
        if not made_by_safe_name(name) or folder.is_symlink() or not folder.is_dir():
            continue  # never a path out of records_dir
        for file in folder.glob("*.jsonl"):
            if file.is_file() and not file.is_symlink():
                file.unlink()
        if name not in folders and not any(folder.iterdir()):
            folder.rmdir()
    write_private(listed, json.dumps(list(folders)).encode("utf-8"), records_dir)


def _earlier_folders(records_dir: Path) -> list[str]:
    """The variant folders :data:`RUN_FOLDERS` names: what the last run into ``records_dir`` wrote."""
    try:
        earlier = json.loads((records_dir / RUN_FOLDERS).read_text("utf-8"))
    except (OSError, ValueError):
        earlier = []
    return [n for n in earlier if isinstance(n, str)] if isinstance(earlier, list) else []


def _refuse_corpus_folder(records_dir: Path, folders: Sequence[str], files: Sequence[Path]) -> None:
    """A variant folder of ``records_dir`` (this run's or the last run's: both are cleared) that
    is the folder of a session file is refused: its sessions would be deleted, then replaced by
    records."""
    corpus = {f.parent.resolve() for f in files}
    for name in dict.fromkeys([*_earlier_folders(records_dir), *folders]):
        if (records_dir / name).resolve() in corpus:
            raise CompactorError(
                f"--records-dir {records_dir}: its folder {name} is the corpus folder, whose sessions the "
                "records would replace; name another records folder"
            )


def run_experiment(
    experiment: Any,
    files: list[Path],
    *,
    workers: int = 2,
    records_dir: str | None = None,
    progress: Any = None,
) -> dict[str, dict[str, dict[str, float | None]]]:
    """Every session under every variant; ``{variant: {session: metrics}}``.

    A session without an LLM call to replay (no assistant message after the first message) is
    left out, as its records are: it has none. ``progress(done, total)`` is called whenever a
    session has finished under all variants.
    With ``workers`` > 1 the replays run in a process pool. With ``records_dir``, the run's
    records replace every record an earlier run left there (:func:`_clear_records`).
    """
    if records_dir:
        from ..storage import safe_name

        folders = [safe_name(v.name) for v in experiment.variants]
        _refuse_corpus_folder(Path(records_dir), folders, files)
        _clear_records(Path(records_dir), folders)
    prices = experiment.prices
    jobs = [(str(f), f.stem, v.name, v.config, records_dir, prices) for f in files for v in experiment.variants]
    results: dict[str, dict[str, dict[str, float | None]]] = {v.name: {} for v in experiment.variants}
    remaining = {f.stem: len(experiment.variants) for f in files}
    done = 0

    def collect(out: dict[str, Any]) -> None:
        nonlocal done
        if out["calls"]:
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


def check_variants_start(experiment: Any) -> None:
    """Start every variant's plugins once, here, so that a variant that cannot start says why
    before any worker runs (:class:`CompactorError` names the variant)."""
    from ..compactor import ProgressiveCompactor
    from ..lab.replay import isolated_config

    for variant in experiment.variants:
        with tempfile.TemporaryDirectory(prefix="compactor-ab-") as tmp:
            try:
                ProgressiveCompactor(isolated_config(variant.config, Path(tmp))).close()
            except CompactorError as exc:
                raise CompactorError(f"variant {variant.name!r}: {exc}") from exc


# --- rendering --------------------------------------------------------------------------------

_TOKENS = ("peak_tokens", "summarizer_tokens")


def _num(metric: str, kind: str, value: float | None, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    sign = "+" if signed else ""
    if kind == "money":
        text = f"{value:{sign}.4f}"
    elif kind in ("share", "retention"):
        text = f"{value * 100:{sign}.1f}" + (" pp" if signed else " %")
    elif metric in _TOKENS:
        text = f"{value:{sign},.0f}"
    else:
        text = f"{value:{sign},.2f}"
    return text.replace("-", "−")


def _ci(metric: str, kind: str, low: float | None, high: float | None, signed: bool) -> str:
    if low is None or high is None:
        return "-"
    return f"[{_num(metric, kind, low, signed)}, {_num(metric, kind, high, signed)}]"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f} %".replace("-", "−")


def _p(value: float | None) -> str:
    if value is None:
        return "-"
    return "p < 0.0001" if value < 0.0001 else f"p = {value:.4f}"


def _level(alpha: float) -> str:
    return f"{(1 - alpha) * 100:g} %"


def _tables(comparison: Any) -> list[Any]:
    """One table per variant with its values, then one per variant against the control: a
    variant's name is a title, so it is never cut, however narrow the terminal."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    level = _level(comparison.alpha)
    width = max(len(row.label) for row in comparison.rows)
    tables: list[Any] = []

    def table(title: str) -> Any:
        t = Table(
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            padding=(0, 1, 0, 0),
        )
        t.add_column("metric", no_wrap=True, min_width=width)
        tables.append(Text(title, style="bold"))  # a title wraps at the console's width, not the table's
        tables.append(t)
        return t

    for v in comparison.variants:
        role = " (control)" if v == comparison.control else ""
        per = table(f"{v}{role}: mean per session, {level} CI, total over sessions")
        per.add_column("n", justify="right", no_wrap=True)
        per.add_column("mean", justify="right", no_wrap=True)
        per.add_column(f"{level} CI", justify="right", no_wrap=True)
        per.add_column("total", justify="right", no_wrap=True)
        for row in comparison.rows:
            s = row.summaries[v]
            if not s.n:
                continue
            total = "" if s.total is None else _total(row, s.total)
            ci = _ci(row.metric, row.kind, s.low, s.high, False)
            per.add_row(row.label, str(s.n), _num(row.metric, row.kind, s.mean), ci, total)
    for v in comparison.variants[1:]:
        cost = comparison.row("cost").differences.get(v)
        test = f"{cost.test} on {cost.n} sessions" if cost is not None and cost.paired else ""
        if cost is not None and not cost.paired:
            test = f"{cost.test} on {cost.n} and {cost.n_control} sessions"
        diff = table(f"{v} against {comparison.control} (control): {test}, two-sided, level α = {comparison.alpha:g}")
        diff.add_column("difference", justify="right", no_wrap=True)
        diff.add_column(f"{level} CI", justify="right", no_wrap=True)
        diff.add_column("relative", justify="right", no_wrap=True)
        diff.add_column("verdict (p-value)", min_width=12)
        for row in comparison.rows:
            d = row.differences.get(v)
            if d is None:
                continue
            if row.saturated:
                diff.add_row(row.label, "saturated", "", "", "no verdict")
                continue
            relative = _percent(d.relative) if row.kind in ("money", "count") else ""
            verdict = d.verdict
            if d.p is not None and d.verdict != "no difference":
                verdict += f" ({_p(d.p)})"
            if d.test != (cost.test if cost is not None else d.test):
                verdict += f", {d.test}"
            target = comparison.target_sample_sizes.get(v)
            if row.metric == "cost" and target is not None and target.underpowered:
                verdict += "; underpowered"
            ci = _ci(row.metric, row.kind, d.low, d.high, True)
            diff.add_row(row.label, _num(row.metric, row.kind, d.mean, True), ci, relative, verdict)
    return tables


def _total(row: Any, total: float) -> str:
    if row.kind == "money":
        return _num(row.metric, row.kind, total)
    return f"{total:,.0f}"  # turns, calls, tokens, sessions: whole numbers


def _guidance(comparison: Any) -> list[str]:
    """Sample sizes for cost (the observed difference, and the smallest one worth detecting),
    and a warning for each unpaired comparison without the power to detect the latter."""
    lines = []
    level = f"α = {comparison.alpha:g}"
    target = f"{comparison.effect * 100:g} %"
    cost = comparison.row("cost")
    for v in comparison.variants[1:]:
        observed = comparison.sample_sizes.get(v)
        wanted = comparison.target_sample_sizes.get(v)
        d = cost.differences.get(v)
        if observed is None or wanted is None or d is None:
            lines.append(f"{v}: too few sessions to say how many a live experiment needs.")
            continue

        def needs(size: Any) -> str:
            if size.per_variant is None:
                return "cannot be estimated (no spread or no difference)"
            paired = f" (paired, every session under both: {size.pairs:,})" if size.pairs is not None else ""
            return f"about {size.per_variant:,} sessions per variant{paired}"

        seen = f"{_num('cost', 'money', d.mean, True)} USD per session, {_percent(d.relative)}"
        lines.append(
            f"{v}: to detect the observed difference in cost ({seen}) with 80 % power at {level}, a live "
            f"experiment (each session on one variant) needs {needs(observed)}; to detect a {target} "
            f"difference, {needs(wanted)}."
        )
        if wanted.underpowered:
            power = "an unknown" if wanted.power is None else f"a {wanted.power * 100:.0f} %"
            more = f" About {wanted.per_variant:,} sessions per variant are needed." if wanted.per_variant else ""
            lines.append(
                f"warning: {v} against {comparison.control} is unpaired and underpowered: with {d.n} and "
                f"{d.n_control} sessions it had {power} chance of detecting a {target} difference in cost; "
                f"its confidence intervals are wide and even the sign of its difference may be wrong.{more} "
                "(--effect sets the difference; 'ab replay' on recorded sessions pairs them.)"
            )
    return lines


def _prices_line(prices: Any, source: str) -> str:
    summarizer_cached = (
        prices.cached_input if prices.summarizer_cached_input is None else prices.summarizer_cached_input
    )
    fields = [
        ("input", prices.input),
        ("cached input", prices.cached_input),
        ("summarizer input", prices.summarizer_input),
        ("summarizer cached input", summarizer_cached),
        ("summarizer output", prices.summarizer_output),
    ]
    if prices.cache_write is not None:
        fields.insert(1, ("cache write", prices.cache_write))
    text = ", ".join(f"{name} {value:.2f}" for name, value in fields)
    return f"Prices ({source}, USD per million tokens): {text}."


def print_comparison(
    comparison: Any, *, title: str, prices: Any, prices_source: str, notes: Sequence[str] = ()
) -> None:
    from ..lab.experiment import COST_DEFINITION

    console = _console()
    console.print(title, markup=False, highlight=False)
    console.print(_prices_line(prices, prices_source), markup=False)
    console.print(f"Cost: {COST_DEFINITION}.", markup=False)
    for part in _tables(comparison):
        if not hasattr(part, "columns"):  # a title
            console.print()
        console.print(part)
    console.print()
    saturated = [row.label for row in comparison.rows if row.saturated]
    if saturated:
        console.print(
            f"Saturated ({', '.join(saturated)}): 100 % for every session under every variant, so these "
            "probes cannot tell the variants apart; not a win for anyone.",
            markup=False,
        )
    console.print(
        "Overflows count the turns whose view exceeded the window, and the sessions with any; compactions "
        "count only the turns that changed the view.",
        markup=False,
    )
    for line in [*_guidance(comparison), *notes]:
        console.print(line, markup=False)


def _console(stderr: bool = False) -> Any:
    from .render import make_console

    return make_console(stderr=stderr)


@hookimpl
def register_commands(cli: Any) -> None:
    cli.add_command(ab)


# --- commands ---------------------------------------------------------------------------------


def _load(experiment_ref: str, control: str | None) -> Any:
    from ..lab.experiment import load_experiment

    try:
        experiment = load_experiment(experiment_ref)
        return experiment.with_control(control) if control else experiment
    except CompactorError as exc:
        raise click.ClickException(str(exc)) from exc


_ALPHA = click.option(
    "--alpha",
    type=click.FloatRange(min=0.0001, max=0.5),
    default=0.05,
    show_default=True,
    help="Significance level of the tests; the confidence intervals are at 1 − alpha.",
)
_EFFECT = click.option(
    "--effect",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Smallest difference in cost worth detecting, in % of the control's: sample sizes are given "
    "for it and for the observed one, and an unpaired comparison without 80 % power for it is flagged.",
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")


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
@click.option("--control", help="Variant to compare against (default: the experiment's control).")
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
    help="Keep every turn's record here, one folder per variant (for 'compactor ab report'); each run "
    "replaces the records an earlier run left here.",
)
@_ALPHA
@_EFFECT
@_JSON
def replay_command(
    corpus_dir: str,
    experiment_ref: str,
    control: str | None,
    context_window: int | None,
    workers: int,
    limit: int | None,
    records_dir: str | None,
    alpha: float,
    effect: float,
    as_json: bool,
) -> None:
    """Replay every session (*.jsonl) of CORPUS_DIR under every variant of the experiment.

    Every session runs under every variant, so each variant is compared with the control by a
    paired t-test on the per-session differences: per metric, each variant's mean per session with
    its confidence interval and total, the difference from the control with its interval, relative
    to the control, its p-value and verdict. Cost is the same as 'ab report' computes from records,
    with the experiment's prices (printed). Sample sizes say how many sessions a live experiment
    would need to see the same difference.

    \b
    Example: compactor ab replay examples/sessions -e ab-example -w 16000 --control cache-aware
    """
    from ..lab.experiment import compare, comparison_to_dict
    from ..lab.replay import session_files

    experiment = _load(experiment_ref, control)
    try:
        if context_window:
            experiment = experiment.with_overrides(context_window=context_window)
        check_variants_start(experiment)
    except CompactorError as exc:
        raise click.ClickException(str(exc)) from exc
    files = session_files(corpus_dir)[: limit or None]
    if not files:
        raise click.ClickException(f"{corpus_dir}: no *.jsonl session files")
    if records_dir:
        from ..storage import private_dir

        private_dir(Path(records_dir).absolute(), Path(records_dir).absolute())  # 0700, parents too
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
        try:
            results = run_experiment(
                experiment,
                files,
                workers=workers,
                records_dir=records_dir,
                progress=lambda done, total: bar.update(task, completed=done),
            )
        except CompactorError as exc:
            raise click.ClickException(str(exc)) from exc
    without_calls = [f.stem for f in files if not any(f.stem in sessions for sessions in results.values())]
    if len(without_calls) == len(files):
        raise click.ClickException(f"{corpus_dir}: no session has an LLM call to replay (an assistant message)")
    relative = effect / 100
    comparison = compare(results, experiment.control, alpha=alpha, effect=relative)
    window = experiment.base.context_window
    if as_json:
        data = comparison_to_dict(comparison)
        data.update(
            experiment=experiment.name,
            context_window=window,
            paired=comparison.paired,
            prices=_prices_dict(experiment.prices),
            cost_definition=_cost_definition(),
            sessions_without_calls=without_calls,
            per_session=results,
        )
        click.echo(json.dumps(data, default=str))
        return
    replayed = len(files) - len(without_calls)
    title = (
        f"{experiment.name}: {replayed} sessions replayed under each of {len(experiment.variants)} variants, "
        f"window {window:,} tokens"
    )
    notes = []
    if without_calls:
        notes.append(
            f"{len(without_calls)} sessions left out: no LLM call to replay (no assistant message after the "
            f"first message) ({_some(without_calls)})."
        )
    print_comparison(
        comparison,
        title=title,
        prices=experiment.prices,
        prices_source="the experiment's",
        notes=notes,
    )


@ab.command("report", short_help="The same comparison from records written by live traffic.")
@click.argument("records_dir", required=False, type=click.Path(exists=True, file_okay=False))
@click.option(
    "--config",
    "-c",
    "config",
    help="Read every session's records through this config's record stores (a database store"
    " included) instead of RECORDS_DIR.",
)
@data_dir_option
@click.option("--experiment", "-e", "experiment_ref", help="Experiment YAML: its control and price table.")
@click.option(
    "--control", help="Variant to compare against (default: the experiment's control, else the first by name)."
)
@_ALPHA
@_EFFECT
@_JSON
def report_command(
    records_dir: str | None,
    config: str | None,
    data_dir: str | None,
    experiment_ref: str | None,
    control: str | None,
    alpha: float,
    effect: float,
    as_json: bool,
) -> None:
    """Compare variants from the JSONL records under RECORDS_DIR (searched recursively), or from
    every session's records in the record stores of --config (PostgreSQL, Redis, SQLite, JSONL).

    Cost is computed as 'ab replay' computes it, from the same record fields, with the
    experiment's prices (the defaults without -e; printed). Records are de-duplicated by id. A
    session whose records in one folder name two variants (its variant changed mid-session) is
    left out and counted; records of different context windows are compared with a warning.
    Sessions seen under one variant only (live traffic) are compared by Welch's t-test, with
    sample-size guidance and a warning when the comparison is underpowered. Cost covers every
    turn only when tier-None turns were recorded (store-jsonl: {record_none: true}).

    \b
    Example: compactor ab report ab-records -e ab-example   (after: ab replay ... --records-dir ab-records)
             compactor ab report --config fleet.yaml -e my-experiment.yaml
    """
    from ..converters import read_records_file
    from ..lab.experiment import compare, comparison_to_dict, group_records, metrics_from_records
    from ..pricing import DEFAULT_PRICES

    prices, source = DEFAULT_PRICES, "the defaults; pass -e for the experiment's"
    if experiment_ref:
        experiment = _load(experiment_ref, None)
        prices, source = experiment.prices, "the experiment's"
        control = control or experiment.control
    if (records_dir is None) == (config is None):
        raise click.UsageError("pass either RECORDS_DIR (a folder of JSONL records) or --config (its record stores)")
    if data_dir and config is None:
        raise click.UsageError("--data-dir goes with --config (RECORDS_DIR is read as it is)")
    if config is not None:
        with storage_compactor(load_cli_config(config, data_dir=data_dir)) as compactor:
            ids = sorted({info.session_id for info in compactor.sessions()})
            grouped = group_records((config, compactor.records(sid) or ()) for sid in ids)
        if not grouped.sessions:
            raise click.ClickException(f"{config}: no records to compare in its record stores")
    else:
        root = Path(str(records_dir))
        files = sorted(path for path in root.rglob("*.jsonl") if not path.is_dir())  # a pipe is refused when read
        grouped = group_records((str(path.parent.relative_to(root)), read_records_file(path)) for path in files)
        if not grouped.sessions:
            raise click.ClickException(f"{records_dir}: no records to compare in *.jsonl files")
    per_key = metrics_from_records(grouped, prices)
    per_variant: dict[str, dict[str, Any]] = {}
    for (variant, session), metrics in sorted(per_key.items()):
        per_variant.setdefault(variant, {})[session] = metrics
    if control is not None and control not in per_variant:
        raise click.ClickException(f"no records of control variant {control!r}; found: {', '.join(per_variant)}")
    relative = effect / 100
    comparison = compare(per_variant, control, alpha=alpha, effect=relative)
    partial = sorted(v for v, every in grouped.every_turn.items() if not every)
    unpriced = sum(
        1
        for sessions in grouped.sessions.values()
        for recs in sessions.values()
        for r in recs
        if r.summarizer_calls and not (r.summarizer_tokens_in or r.summarizer_tokens_out)
    )
    windows = sorted(
        {r.context_window for sessions in grouped.sessions.values() for recs in sessions.values() for r in recs}
    )
    if as_json:
        data = comparison_to_dict(comparison)
        data.update(
            records=grouped.records,
            context_windows=windows,
            duplicates_ignored=grouped.duplicates,
            excluded_mixed_variants=list(grouped.mixed),
            excluded_several_runs=list(grouped.conflicting),
            cost_covers_every_turn=not partial,
            turns_with_unpriced_summaries=unpriced,
            variants_without_every_turn=partial,
            paired=comparison.paired,
            prices=_prices_dict(prices),
            prices_source=source,
            cost_definition=_cost_definition(),
            per_session=per_variant,
        )
        click.echo(json.dumps(data, default=str))
        return
    notes = []
    if grouped.duplicates:
        notes.append(f"{grouped.duplicates:,} records seen twice (same id) were counted once.")
    if grouped.mixed:
        notes.append(
            f"{len(grouped.mixed)} sessions left out: their records name more than one variant "
            f"({_some(grouped.mixed)})."
        )
    if grouped.conflicting:
        notes.append(
            f"{len(grouped.conflicting)} sessions left out: recorded under one variant in several folders "
            f"(two runs?) ({_some(grouped.conflicting)})."
        )
    if len(windows) > 1:
        *first, last = [f"{w:,}" for w in windows]
        notes.append(
            f"warning: the records compared were written at different context windows ({', '.join(first)} and "
            f"{last} tokens): they mix runs or deployments under other settings, so the variants may not "
            "be compared on equal terms."
        )
    if unpriced:
        notes.append(
            f"note: {unpriced:,} turns called the summarizer without token counts in their record; their "
            "summarizer cost is not counted (ExperimentCompactor and replays estimate them)."
        )
    if partial:
        notes.append(
            f"note: no tier-None records for {', '.join(partial)}, so cost counts compaction turns only; "
            "set record_none: true on the record store (store-jsonl: {record_none: true}) to record every turn."
        )
    sessions = sum(comparison.sessions.values())
    how = "paired by session" if comparison.paired else "unpaired (each session under one variant)"
    title = f"{grouped.records:,} records, {sessions} sessions, {how}"
    if experiment_ref:
        title = f"{experiment.name}: {title}"
    print_comparison(comparison, title=title, prices=prices, prices_source=source, notes=notes)


def _some(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _prices_dict(prices: Any) -> dict[str, Any]:
    import attrs

    return attrs.asdict(prices)


def _cost_definition() -> str:
    from ..lab.experiment import COST_DEFINITION

    return COST_DEFINITION


__all__ = ["ab", "check_variants_start", "register_commands", "replay_job", "run_experiment"]
