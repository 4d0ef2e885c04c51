"""Terminal output of the ``compactor`` command: consoles, tables, notices and the progress bar.

Kept apart from the command modules so that the commands read as what they do and the
look lives in one place. Colour follows terminal conventions: none when ``NO_COLOR`` is set or the
stream is not a terminal (``FORCE_COLOR`` does not override a pipe: output meant for a file or
another program stays plain).
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any, Iterable, Mapping, Sequence

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..models import CompactionRecord, CompactionTier
from ..notice import human_bytes, human_tokens, notice

TIER_STYLES = {
    CompactionTier.NONE: "dim",
    CompactionTier.WARN: "yellow",
    CompactionTier.SOFT: "cyan",
    CompactionTier.FULL: "magenta",
    CompactionTier.EMERGENCY: "bold red",
}
TIERS = (CompactionTier.WARN, CompactionTier.SOFT, CompactionTier.FULL, CompactionTier.EMERGENCY)


def is_tty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def make_console(stream: IO[str] | None = None, *, stderr: bool = False) -> Console:
    """A console on ``stream`` (default: the current stdout or stderr, looked up at call time).

    Looked up at call time because click's test runner swaps ``sys.stdout``. Not a terminal:
    no escape codes at all and a fixed width of 120 (or ``COLUMNS``), so piped tables do not
    wrap at 80.
    """
    stream = stream or (sys.stderr if stderr else sys.stdout)
    if is_tty(stream):
        return Console(file=stream, no_color=bool(os.environ.get("NO_COLOR")), highlight=False)
    width = int(os.environ.get("COLUMNS", "0") or 0) or 120
    return Console(file=stream, force_terminal=False, color_system=None, no_color=True, highlight=False, width=width)


def notice_text(record: CompactionRecord) -> Text:
    """The notice's two lines, as rich Text so that ``[Full]`` is never read as markup."""
    text = Text(notice(record))
    first = text.plain.find("\n")
    text.stylize(TIER_STYLES.get(record.tier, ""), 0, first if first >= 0 else None)
    return text


def tier_text(tier: CompactionTier | None) -> Text:
    if tier is None:
        return Text("-")
    return Text(tier.label, style=TIER_STYLES.get(tier, ""))


def replay_progress(console: Console, *, disable: bool) -> Progress:
    """The bar of ``compactor replay``: on stderr; never redirects stdout (it may be a pipe)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("turns"),
        TimeElapsedColumn(),
        console=console,
        disable=disable,
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )


def records_table(records: Sequence[CompactionRecord], title: str | None = None) -> Table:
    show_variant = any(r.variant for r in records)
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("time", no_wrap=True)
    table.add_column("tier")
    if show_variant:
        table.add_column("variant")
    table.add_column("tokens", justify="right", no_wrap=True)
    table.add_column("ratio", justify="right")
    table.add_column("msgs", justify="right", no_wrap=True)
    table.add_column("summarized", justify="right")
    table.add_column("offloads", justify="right", no_wrap=True)
    table.add_column("tail", justify="right")
    table.add_column("ms", justify="right")
    table.add_column("error", overflow="fold")
    for number, r in enumerate(records, 1):
        offloaded = sum(e.chars for e in r.offloaded)
        tier = tier_text(r.tier)
        if r.requested_tier is not None and r.requested_tier != r.tier:
            tier.append(f" (asked {r.requested_tier.label})", style="dim")
        row: list[Any] = [str(number), _clock(r.timestamp), tier]
        if show_variant:
            row.append(r.variant or "-")
        row += [
            f"{human_tokens(r.tokens_before)}->{human_tokens(r.tokens_after)}",
            f"{round(r.compression_ratio * 100)}%",
            f"{r.msgs_before}->{r.msgs_after}",
            str(r.summarized),
            f"{len(r.offloaded)} ({human_bytes(offloaded)})" if r.offloaded else "0",
            str(r.preserved_tail),
            f"{r.duration_ms:.0f}",
            Text("; ".join(r.errors), style="red") if r.errors else "",
        ]
        table.add_row(*row)
    return table


def _clock(timestamp: str) -> str:
    """``2025-01-02T10:11:12.345+00:00`` -> ``2025-01-02 10:11:12``."""
    return timestamp[:19].replace("T", " ") if timestamp else "-"


def summary_table(summaries: Sequence[Mapping[str, Any]]) -> Table:
    """The replay summary (see ``cli.replay_summary``): a column per session, or for more than
    two sessions a row per session, so that a whole corpus still fits a terminal."""
    if len(summaries) > 2:
        return _summary_rows_table(summaries)
    table = Table(title="Replay summary", title_justify="left")
    table.add_column("")
    for s in summaries:
        table.add_column(str(s["session"]), justify="right", overflow="fold")
    rows: list[tuple[str, Any]] = [
        ("context window", lambda s: f"{s['context_window']:,}"),
        ("turns", lambda s: f"{s['turns']:,}"),
        *[(f"turns at tier {t.label}", (lambda tier: lambda s: str(s["tiers"][tier.name.lower()]))(t)) for t in TIERS],
        ("compactions that changed the view", lambda s: str(s["view_changing_compactions"])),
        (
            "peak view tokens",
            lambda s: f"{s['peak_view_tokens']:,} ({s['peak_view_tokens'] / s['context_window']:.0%})",
        ),
        ("total input tokens sent", lambda s: f"{s['total_input_tokens']:,}"),
        ("cache-stable input tokens", lambda s: _share(s.get("cache_stable_tokens"), s["total_input_tokens"])),
        ("overflows (view > window)", lambda s: _overflow(s["overflows"])),
        ("offloads", lambda s: f"{s['offloads']} ({human_bytes(s['offloaded_bytes'])})"),
        ("summarizer calls", lambda s: _summarizer(s)),
        ("facts kept in the final view", _retention),
        ("billed cost (USD)", lambda s: f"${s['cost_usd']['total']:.4f}" if s.get("cost_usd") else "-"),
        (
            "compactor time",
            lambda s: f"{s['compactor_seconds']:.2f} s" if s.get("compactor_seconds") is not None else "-",
        ),
    ]
    for label, cell in rows:
        table.add_row(label, *[cell(s) for s in summaries])
    return table


def _retention(s: Mapping[str, Any]) -> str:
    """Probe categories of :mod:`progressive_compactor.lab.probes` and the share of each kept."""
    ratios = s.get("retention") or {}
    kept = [f"{name} {ratio:.0%}" for name, ratio in ratios.items() if ratio is not None]
    return ", ".join(kept) or "-"


def _share(part: int | None, total: int) -> str:
    if part is None:
        return "-"
    return f"{part:,} ({part / total:.0%})" if total else f"{part:,}"


def _overflow(n: int) -> Text:
    return Text(str(n), style="bold red" if n else "green")


def _summarizer(s: Mapping[str, Any]) -> str:
    calls = s["summarizer_calls"]
    tokens = (s.get("summarizer_tokens_in") or 0) + (s.get("summarizer_tokens_out") or 0)
    return f"{calls} ({human_tokens(tokens)} tokens)" if tokens else str(calls)


def plugins_table(rows: Iterable[Mapping[str, Any]], config_source: str) -> Table:
    table = Table(title=f"Installed plugins (selection from {config_source})", title_justify="left")
    table.add_column("name", no_wrap=True)
    table.add_column("distribution")
    table.add_column("version")
    table.add_column("hooks", overflow="fold")
    table.add_column("selected as")
    for row in rows:
        hooks: Any = ", ".join(row["hooks"]) if row["error"] is None else Text(row["error"], style="red")
        selected = ", ".join(row["selected"])
        table.add_row(
            Text(row["name"], style="bold" if selected else ""),
            row["distribution"] or "-",
            row["version"] or "-",
            hooks,
            Text(selected or "-", style="green" if selected else "dim"),
        )
    return table


def _summary_rows_table(summaries: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(
        title="Replay summary. W/S/F/E: turns at Warn/Soft/Full/Emergency; chg: compactions that changed "
        "the view; peak: largest view, share of the window; sent: input tokens sent; cached: share "
        "prompt-cache-stable; over: overflows; offl.: offloads; summ.: summarizer calls; USD: billed cost",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
        pad_edge=False,
    )
    table.add_column("session", overflow="fold", min_width=12)
    for name in ("turns", "W/S/F/E", "chg", "peak", "sent", "cached", "over", "offl.", "summ.", "USD"):
        table.add_column(name, justify="right", no_wrap=True)
    for s in summaries:
        table.add_row(
            str(s["session"]),
            f"{s['turns']:,}",
            "/".join(str(s["tiers"][t.name.lower()]) for t in TIERS),
            str(s["view_changing_compactions"]),
            f"{s['peak_view_tokens'] / s['context_window']:.0%}",
            human_tokens(s["total_input_tokens"]),
            _percent(s.get("cache_stable_tokens"), s["total_input_tokens"]),
            _overflow(s["overflows"]),
            str(s["offloads"]),
            str(s["summarizer_calls"]),
            f"{s['cost_usd']['total']:.2f}" if s.get("cost_usd") else "-",
        )
    total = lambda key: sum(s[key] for s in summaries)  # noqa: E731
    table.add_section()
    table.add_row(
        Text(f"{len(summaries)} sessions", style="bold"),
        f"{total('turns'):,}",
        "/".join(str(sum(s["tiers"][t.name.lower()] for s in summaries)) for t in TIERS),
        str(total("view_changing_compactions")),
        "",
        human_tokens(total("total_input_tokens")),
        _percent(total("cache_stable_tokens"), total("total_input_tokens")),
        _overflow(total("overflows")),
        str(total("offloads")),
        str(total("summarizer_calls")),
        f"{sum(s['cost_usd']['total'] for s in summaries if s.get('cost_usd')):.2f}",
    )
    return table


def _percent(part: int | None, total: int) -> str:
    return f"{part / total:.0%}" if part is not None and total else "-"
