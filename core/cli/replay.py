"""``compactor replay``: play recorded sessions turn by turn, as an agent loop would."""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import click

from .app import config_option, console, echo_json, json_option, load_cli_config, window_option
from .inputs import load_history


def turn_count(messages: Sequence[Mapping[str, Any]]) -> int:
    """Simulated LLM calls of a replay: one per assistant message after the first message."""
    return sum(1 for i, m in enumerate(messages) if i and m.get("role") == "assistant")


def replay_summary(session: str, source: str, result: Any) -> dict[str, Any]:
    """What ``compactor replay`` reports for one session: the table's rows, and the --json object."""
    from ..lab.report import changed_view
    from ..models import CompactionTier

    compactions = [
        {
            "turn": t.index,
            "tier": t.tier.name.lower(),
            "tokens_before": t.record.tokens_before,
            "tokens_after": t.record.tokens_after,
            "summarized": t.record.summarized,
            "offloads": len(t.record.offloaded),
            "offloaded_bytes": sum(e.chars for e in t.record.offloaded),
            "errors": list(t.record.errors),
            "escalations": list(t.record.escalations),
            "fallback": t.record.fallback,
            "changed_view": changed_view(t.record),
        }
        for t in result.turns
        if t.tier is not CompactionTier.NONE
    ]
    cost = result.cost
    return {
        "session": session,
        "file": source,
        "messages": result.messages,
        "context_window": result.context_window,
        "variant": result.variant,
        "turns": len(result.turns),
        "tiers": {t.name.lower(): result.tier_counts.get(t.label, 0) for t in CompactionTier},
        "compactions": result.compactions,
        "view_changing_compactions": sum(1 for c in compactions if c["changed_view"]),
        "peak_view_tokens": result.peak_view_tokens,
        "total_input_tokens": result.total_input_tokens,
        "cache_stable_tokens": result.cached_input_tokens,
        "overflows": result.overflows,
        "offloads": result.offloads,
        "offloaded_bytes": result.offloaded_bytes,
        "summarizer_calls": result.summarizer_calls,
        "summarizer_tokens_in": result.summarizer_tokens_in,
        "summarizer_tokens_out": result.summarizer_tokens_out,
        "compactor_seconds": round(result.compactor_seconds, 4),
        "invalid_views": result.invalid_views,
        "invalid_view_problems": list(result.invalid_view_problems),
        "cost_usd": None
        if cost is None
        else {
            "input": round(cost.input, 6),
            "cached_input": round(cost.cached_input, 6),
            "output": round(cost.output, 6),
            "summarizer": round(cost.summarizer, 6),
            "total": round(cost.total, 6),
        },
        "retention": None if result.retention is None else result.retention.ratios(),
        "compaction_log": compactions,
    }


def session_ids(files: Sequence[str]) -> list[str]:
    """File stems as session ids, made unique when two files share a name."""
    seen: dict[str, int] = {}
    out = []
    for f in files:
        stem = Path(f).stem if f != "-" else "stdin"
        seen[stem] = seen.get(stem, 0) + 1
        out.append(stem if seen[stem] == 1 else f"{stem}-{seen[stem]}")
    return out


def run_replays(
    files: Sequence[str],
    cfg: Any,
    directory: Path,
    on_start: Callable[[str, int], None] | None = None,
    on_turn: Callable[[Any], None] | None = None,
) -> Iterator[tuple[str, str, Any]]:
    """Replay each file with a fresh compactor whose files all live under ``directory``.

    Yields ``(session_id, file, ReplayResult)``. Every file is read and checked before the first
    replay starts, so a bad file fails fast instead of after minutes of work. A session replayed
    before in the same folder starts afresh.
    """
    from ..compactor import ProgressiveCompactor
    from ..lab.replay import isolated_config, replay_session

    histories = [load_history(f) for f in files]
    isolated = isolated_config(cfg, directory)
    for sid, source, messages in zip(session_ids(files), files, histories, strict=False):
        if on_start is not None:
            on_start(sid, turn_count(messages))
        with ProgressiveCompactor(isolated) as compactor:
            compactor.delete_session(sid)
            result = replay_session(messages, compactor, sid, on_turn)
        yield sid, source, result


@contextlib.contextmanager
def work_folder(keep: str | None) -> Iterator[Path]:
    """The given folder (created), or a temporary one removed afterwards."""
    if keep:
        path = Path(keep).expanduser().absolute()
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="compactor-") as tmp:
        yield Path(tmp)


@click.command(short_help="Replay sessions turn by turn; notices and a summary table.")
@click.argument("files", nargs=-1, required=True)
@config_option
@window_option
@click.option(
    "--keep",
    type=click.Path(file_okay=False),
    help="Keep offloaded results, records and state in this folder (default: a temporary folder, removed).",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Also print turns whose tier changed nothing (a Warn with nothing to offload).",
)
@json_option
def replay(
    files: tuple[str, ...], config: str, context_window: int | None, keep: str | None, verbose: bool, as_json: bool
) -> None:
    """Play recorded sessions turn by turn, as an agent loop would, and report every compaction.

    Before each assistant message of FILE, the view is computed from the history so far; each
    compaction that changed the view prints its two-line notice, and a summary table closes the
    run. With --json, one JSON object per session (one per line) instead. A replay never writes
    where the config's own stores keep data: offloaded results, records and state go to a
    temporary folder, or to the folder --keep names (read them there with --data-dir).

    \b
    Example: compactor replay session.jsonl other.jsonl -w 16000
    """
    from ..lab.report import changed_view
    from .render import is_tty, notice_text, replay_progress, summary_table

    cfg = load_cli_config(config, context_window=context_window)
    out = console()
    err = console(stderr=True)
    show_bar = not as_json and is_tty(sys.stderr)
    summaries = []
    with work_folder(keep) as directory, replay_progress(err, disable=not show_bar) as progress:
        task: Any = None
        # With a bar on a terminal, notices are printed above it (same terminal); otherwise to stdout.
        notices = progress.console if show_bar and is_tty(sys.stdout) else out

        def on_start(sid: str, turns: int) -> None:
            nonlocal task
            if task is not None:
                progress.remove_task(task)
            task = progress.add_task(sid, total=turns)
            if not as_json and len(files) > 1:
                notices.print(f"── {sid}", style="bold", markup=False, soft_wrap=True)

        def on_turn(turn: Any) -> None:
            progress.advance(task)
            if not as_json and turn.tier and (verbose or changed_view(turn.record)):
                notices.print(notice_text(turn.record), soft_wrap=True)

        for sid, source, result in run_replays(files, cfg, directory, on_start, on_turn):
            summary = replay_summary(sid, source, result)
            summaries.append(summary)
            if as_json:
                echo_json(summary)
    if not as_json:
        out.print(summary_table(summaries))
        if keep:
            out.print(f"kept in {keep}: tool_results/, records/", markup=False, soft_wrap=True)
            out.print(
                f"read the records with: compactor records {summaries[0]['session']} --data-dir {keep}",
                markup=False,
                soft_wrap=True,
            )


COMMANDS = [replay]
