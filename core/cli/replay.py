"""``compactor replay``: play recorded sessions call by call, as an agent loop would.

Vocabulary, the same in every output of the command line and the report: a *call* is one
simulated LLM call (numbered from 1, one per assistant message after the first message); a
*message* is an index into the session file (from 0). "call 8 (message 15)" is the eighth call,
whose view was computed before message 15.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import click

from .app import config_option, console, echo_json, json_option, load_cli_config, window_option
from .inputs import load_history


def call_count(messages: Sequence[Mapping[str, Any]]) -> int:
    """Simulated LLM calls of a replay: one per assistant message after the first message."""
    return sum(1 for i, m in enumerate(messages) if i and m.get("role") == "assistant")


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """Files as given; a folder stands for its ``*.jsonl`` files, sorted by name."""
    from ..lab.replay import session_files

    out: list[str] = []
    for item in inputs:
        path = Path(item)
        if item != "-" and path.is_dir():
            found = [str(p) for p in session_files(path)]
            if not found:
                raise click.ClickException(f"{item}: no *.jsonl session files in this folder")
            out += found
        else:
            out.append(item)
    return out


def replay_summary(session: str, source: str, result: Any) -> dict[str, Any]:
    """What ``compactor replay`` reports for one session: the table's rows, and the --json object.

    ``calls`` counts simulated LLM calls; each compaction names its ``call`` (from 1) and the
    ``message`` (index in the file) whose view it made.
    """
    from ..models import CompactionTier
    from ..notice import changed_view

    compactions = [
        {
            "call": n,
            "message": t.index,
            "record": t.record.id,
            "tier": t.tier.name.lower(),
            "requested_tier": t.record.requested_tier.name.lower() if t.record.requested_tier else None,
            "tokens_before": t.record.tokens_before,
            "tokens_after": t.record.tokens_after,
            "summarized": t.record.summarized,
            "offloads": len(t.record.offloaded),
            "offloaded_bytes": sum(e.chars for e in t.record.offloaded),
            "handles": [e.handle for e in t.record.offloaded],
            "errors": list(t.record.errors),
            "escalations": list(t.record.escalations),
            "fallback": t.record.fallback,
            "changed_view": changed_view(t.record),
            **({"facts_lost": {k: list(v) for k, v in t.lost.items()}} if t.lost is not None else {}),
        }
        for n, t in enumerate(result.turns, 1)
        if t.tier is not CompactionTier.NONE
    ]
    cost = result.cost
    return {
        "session": session,
        "file": source,
        "messages": result.messages,
        "context_window": result.context_window,
        "variant": result.variant,
        "calls": len(result.turns),
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
    """File stems as session ids, made unique when two files share a name: the second ``x`` is
    ``x-2``, or ``x-3`` when a file is named ``x-2``."""
    stems = [Path(f).stem if f != "-" else "stdin" for f in files]
    used: set[str] = set()
    out = []
    for stem in stems:
        name, n = stem, 1
        while name in used or (n > 1 and name in stems):
            n += 1
            name = f"{stem}-{n}"
        used.add(name)
        out.append(name)
    return out


def run_replays(
    files: Sequence[str],
    cfg: Any,
    directory: Path,
    on_start: Callable[[str, int], None] | None = None,
    on_turn: Callable[[Any], None] | None = None,
    *,
    probe_compactions: bool = False,
    histories: Sequence[list[dict[str, Any]]] | None = None,
    session_names: Sequence[str] | None = None,
) -> Iterator[tuple[str, str, Any]]:
    """Replay each file with a fresh compactor whose files all live under ``directory``.

    Yields ``(session_id, file, ReplayResult)``. Every file is read and checked before the first
    replay starts, so a bad file fails fast instead of after minutes of work (``histories``: the
    files already read). A session replayed before in the same folder starts afresh.
    ``probe_compactions``: see :func:`progressive_compactor.lab.replay.replay_session`.
    """
    from ..compactor import ProgressiveCompactor
    from ..lab.replay import isolated_config, replay_session

    histories = histories if histories is not None else [load_history(f) for f in files]
    isolated = isolated_config(cfg, directory)
    names = session_names if session_names is not None else session_ids(files)
    for sid, source, messages in zip(names, files, histories, strict=True):
        if on_start is not None:
            on_start(sid, call_count(messages))
        with ProgressiveCompactor(isolated) as compactor:
            compactor.delete_session(sid)
            result = replay_session(messages, compactor, sid, on_turn, probe_compactions=probe_compactions)
        yield sid, source, result


def write_lost_facts(directory: Path, session_id: str, result: Any) -> None:
    """For ``records --data-dir DIR``: per compaction that changed the view, the facts it left out
    (owner-only, replaced atomically; a link planted there is replaced, never followed)."""
    from ..storage import write_private
    from .records import facts_path

    lines = [
        json.dumps(
            {"record": t.record.id, "call": n, "message": t.index, "lost": {k: list(v) for k, v in t.lost.items()}}
        )
        for n, t in enumerate(result.turns, 1)
        if t.lost is not None
    ]
    path = facts_path(directory, session_id)
    write_private(path, "".join(line + "\n" for line in lines).encode("utf-8", "surrogatepass"), directory)


@contextlib.contextmanager
def work_folder(keep: str | None, inputs: Sequence[str] = ()) -> Iterator[Path]:
    """The given folder (created owner-only, 0700, with any missing parent), or a temporary one
    removed afterwards. A kept folder is refused when one of the ``inputs`` is in a subfolder the
    replay writes (``records``, ``tool_results``, ``replay``): the replay would replace it."""
    if keep:
        from ..storage import private_dir
        from .records import FACTS_FOLDER

        path = Path(keep).expanduser().absolute()
        for source in (s for s in inputs if s != "-"):
            parent = Path(source).resolve().parent
            for name in ("records", "tool_results", FACTS_FOLDER):
                folder = (path / name).resolve()
                if parent == folder or folder in parent.parents:
                    raise click.UsageError(
                        f"--keep {keep}: {source} is in its {name} folder, where the replay writes; "
                        "keep the replay in another folder"
                    )
        private_dir(path, path)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="compactor-") as tmp:
        yield Path(tmp)


@click.command(short_help="Replay sessions call by call; notices and a summary table.")
@click.argument("files", nargs=-1, required=True)
@config_option
@window_option
@click.option(
    "--keep",
    type=click.Path(file_okay=False),
    help="Keep offloaded results, records and state in this folder (default: a temporary folder, removed).",
)
@click.option(
    "--details",
    "-d",
    is_flag=True,
    help="After each notice: the anchors, the summary's first lines, the offloaded results and the facts left "
    "out (with --json: the facts left out by each compaction).",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Also print calls whose tier changed nothing (a Warn with nothing to offload).",
)
@json_option
def replay(
    files: tuple[str, ...],
    config: str,
    context_window: int | None,
    keep: str | None,
    details: bool,
    verbose: bool,
    as_json: bool,
) -> None:
    """Play recorded sessions call by call, as an agent loop would, and report every compaction.

    FILES are chat histories (JSONL or a JSON array); a folder stands for its *.jsonl files.
    Before each assistant message, the view is computed from the history so far (one simulated
    LLM call); each compaction that changed the view prints its notice, and a summary table
    closes the run. With --json, one JSON object per session (one per line) instead. A replay
    never writes where the config's own stores keep data: offloaded results, records and state go
    to a temporary folder, or to the folder --keep names (then read them with
    'compactor records SESSION --data-dir DIR' and 'compactor show HANDLE --data-dir DIR').

    \b
    Example: compactor replay session.jsonl other.jsonl -w 16000 --details
    """
    from rich.markup import escape

    from ..notice import changed_view
    from .render import (
        Command,
        Where,
        compaction_detail,
        is_tty,
        notice_text,
        print_all,
        replay_progress,
        summary_view,
        visible,
    )

    paths = expand_inputs(files)
    cfg = load_cli_config(config, context_window=context_window)
    out = console()
    err = console(stderr=True)
    show_bar = not as_json and is_tty(sys.stderr)
    summaries = []
    histories = [load_history(f) for f in paths]
    probe = details or bool(keep)  # checking the probes at every compaction costs about 4 times the replay
    with work_folder(keep, paths) as directory, replay_progress(err, disable=not show_bar) as progress:
        task: Any = None
        # With a bar on a terminal, notices are printed above it (same terminal); otherwise to stdout.
        notices = progress.console if show_bar and is_tty(sys.stdout) else out
        at = Where(config=config, data_dir=str(directory) if keep else None, temporary=not keep)
        calls = 0

        def on_start(sid: str, total: int) -> None:
            nonlocal task, calls
            calls = 0
            if task is not None:
                progress.remove_task(task)
            task = progress.add_task(escape(visible(sid)), total=total)  # the bar reads markup
            if not as_json and len(paths) > 1:
                notices.print(f"── {visible(sid)}", style="bold", markup=False, soft_wrap=True)

        def on_turn(turn: Any) -> None:
            nonlocal calls
            calls += 1
            progress.advance(task)
            if as_json or not turn.tier or not (verbose or changed_view(turn.record)):
                return
            if details and changed_view(turn.record):
                heading = f"call {calls} (message {turn.index})"
                print_all(
                    notices, compaction_detail(turn.record, heading=heading, where=at, full=False, lost=turn.lost)
                )
            else:
                notices.print(notice_text(turn.record))

        for sid, source, result in run_replays(
            paths, cfg, directory, on_start, on_turn, probe_compactions=probe, histories=histories
        ):
            summary = replay_summary(sid, source, result)
            summaries.append(summary)
            if keep:
                write_lost_facts(directory, sid, result)
            if as_json:
                echo_json(summary)
    if not as_json:
        out.print(summary_view(summaries, out.width))
        if keep:
            kept = str(Path(keep).expanduser().absolute())
            out.print(f"kept in {kept}: tool_results/, records/, replay/", markup=False)
            out.print("read the records with:", markup=False)
            command = shlex.join(["compactor", "records", summaries[0]["session"], "--data-dir", kept])
            print_all(out, [Command(command, indent=0)])


COMMANDS = [replay]
