"""Terminal output of the ``compactor`` command: consoles, tables, notices, compaction details
and the progress bar.

Kept apart from the command modules so that the commands read as what they do and the
look lives in one place. Colour follows terminal conventions: none when ``NO_COLOR`` is set or the
stream is not a terminal (``FORCE_COLOR`` does not override a pipe: output meant for a file or
another program stays plain).

Every table fits the console's width, 80 columns included, by design rather than by rich's
squeezing: a row is one line; a column of names is shortened in the middle (``msa__dja…-1-100``)
with the full names listed below the table; when even that is not enough, the least useful
columns are left out and a line below the table says which. Long text (errors, loop-guard
notes, anchors, summaries) is printed below a table, never in a column. A command to copy is
printed on its own line and never broken (:class:`Command`): the terminal wraps it on screen, and
it still pastes as one command.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import sys
from typing import IO, Any, Callable, Iterable, Mapping, Sequence

import attrs
from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from ..lab.probes import CATEGORIES
from ..models import NOT_AVAILABLE, CompactionRecord, CompactionTier
from ..notice import changed_view, human_bytes, human_tokens, notice, tier_label

TIER_STYLES = {
    CompactionTier.NONE: "dim",
    CompactionTier.WARN: "yellow",
    CompactionTier.SOFT: "cyan",
    CompactionTier.FULL: "magenta",
    CompactionTier.EMERGENCY: "bold red",
}
TIERS = (CompactionTier.WARN, CompactionTier.SOFT, CompactionTier.FULL, CompactionTier.EMERGENCY)
ELLIPSIS = "…"
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
"""Characters a terminal acts on (ESC starts the sequences that clear the screen, move the cursor
or set the window title); tab, line feed and carriage return aside."""


def visible(text: str) -> str:
    """``text`` with its control characters written out (``\\x1b``): a record quotes what tools
    printed, and what a tool printed must be read on the terminal, not run by it."""
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def is_tty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _Console(Console):
    """A console whose output, once closed (``compactor ... | head -1``), raises
    :class:`BrokenPipeError` for the command group to end the command as it ends any other (rich's
    own handler exits 1 without a word)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def make_console(stream: IO[str] | None = None, *, stderr: bool = False) -> Console:
    """A console on ``stream`` (default: the current stdout or stderr, looked up at call time).

    Looked up at call time because click's test runner swaps ``sys.stdout``. Not a terminal:
    no escape codes at all and a fixed width of 120 (or ``COLUMNS``), so piped tables do not
    wrap at 80.
    """
    stream = stream or (sys.stderr if stderr else sys.stdout)
    if is_tty(stream):
        return _Console(file=stream, no_color=bool(os.environ.get("NO_COLOR")), highlight=False)
    width = int(os.environ.get("COLUMNS", "0") or 0) or 120
    return _Console(file=stream, force_terminal=False, color_system=None, no_color=True, highlight=False, width=width)


# --- tables that fit --------------------------------------------------------------------------


@attrs.frozen
class Column:
    """A column of :func:`fit_table`.

    ``drop``: 0 is never left out; when the table is too wide, the column with the highest
    ``drop`` goes first. ``shorten``: the column's cells may be shortened in the middle down to
    this many characters (names), but first only down to ``comfortable``, before any column is
    left out. ``wrap``: the column may wrap on words down to this width. ``meaning``: what an
    abbreviated header stands for, said below the table.
    """

    header: str
    justify: str = "right"
    drop: int = 0
    shorten: int = 0
    comfortable: int = 0
    wrap: int = 0
    style: str = ""
    meaning: str = ""


def elide(text: str, width: int) -> str:
    """``text`` shortened in the middle to ``width`` cells (start and end kept), or as it is."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = width // 2
    tail = width - 1 - head
    start, end = text, text
    while cell_len(start) > head:
        start = start[:-1]
    while cell_len(end) > tail:
        end = end[1:]
    return f"{start}{ELLIPSIS}{end if tail else ''}"


def _cell_width(cell: Any) -> int:
    plain = cell.plain if isinstance(cell, Text) else str(cell)
    return max((cell_len(line) for line in plain.splitlines()), default=0)


@attrs.frozen
class FittedTable:
    """A table laid out for one width, and what had to give way (said below the table)."""

    table: Table
    columns: tuple[Column, ...] = ()
    """The columns shown."""
    dropped: tuple[str, ...] = ()
    shortened: bool = False
    title: str | None = None

    def __rich__(self) -> RenderableType:
        """The title (wrapped on words at the console's width, not the table's), then the table."""
        if self.title is None:
            return self.table
        return Group(Text(visible(self.title), style="bold"), self.table)

    def legend(self, *extra: tuple[str, str]) -> Text | None:
        """What the abbreviated headers of the columns shown mean, then ``extra``."""
        pairs = [(c.header, c.meaning) for c in self.columns if c.meaning] + list(extra)
        return legend(*pairs) if pairs else None


GAP = 2
"""Cells between two columns of :func:`fit_table` (one of padding, one of the box's divider)."""


def fit_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[Any]],
    width: int,
    *,
    title: str | None = None,
    footer: Sequence[Any] | None = None,
    styles: Sequence[str | None] = (),
) -> FittedTable:
    """A rich table of ``rows`` (one line each) no wider than ``width``; see :class:`Column` for
    how it gives way. ``footer``: a last row below a rule (totals); ``styles``: one per row."""
    keep = list(range(len(columns)))
    every = [*rows, *([footer] if footer is not None else [])]
    widths = [max([cell_len(c.header), *(_cell_width(r[i]) for r in every)]) for i, c in enumerate(columns)]
    shortened = False

    def excess() -> int:
        return sum(widths[i] for i in keep) + GAP * (len(keep) - 1) - width

    def shrink(floor: Callable[[Column], int]) -> bool:
        nonlocal shortened
        flexible = [i for i in keep if widths[i] > floor(columns[i]) > 0]
        if not flexible:
            return False
        i = max(flexible, key=lambda j: widths[j] - floor(columns[j]))
        widths[i] -= min(excess(), widths[i] - floor(columns[i]))
        shortened = shortened or bool(columns[i].shorten)
        return True

    while excess() > 0:
        if shrink(lambda c: max(c.comfortable, c.shorten) if c.shorten else c.wrap):
            continue
        droppable = [i for i in keep if columns[i].drop]
        if droppable:
            keep.remove(max(droppable, key=lambda j: (columns[j].drop, j)))
            continue
        if not shrink(lambda c: c.shorten or c.wrap):
            break
    table = Table(
        box=box.SIMPLE,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        collapse_padding=True,
        show_header=any(columns[i].header for i in keep),
        show_footer=footer is not None,
    )
    for i in keep:
        c = columns[i]
        table.add_column(
            Text(visible(elide(c.header, widths[i]))),
            footer=_fit_cell(footer[i], c, widths[i]) if footer is not None else "",
            justify=c.justify,  # type: ignore[arg-type]
            width=widths[i],
            no_wrap=not c.wrap,
            overflow="fold" if c.wrap else "ellipsis",
            style=c.style or None,
        )
    for n, row in enumerate(rows):
        style = styles[n] if n < len(styles) else None
        table.add_row(*(_fit_cell(row[i], columns[i], widths[i]) for i in keep), style=style)
    dropped = tuple(columns[i].header for i in range(len(columns)) if i not in keep)
    return FittedTable(table, tuple(columns[i] for i in keep), dropped, shortened, title)


def _fit_cell(cell: Any, column: Column, width: int) -> Any:
    """``cell`` as text (a string is never read as markup), shortened to ``width`` in a column of names."""
    if isinstance(cell, Text):
        return cell
    return Text(visible(elide(str(cell), width) if column.shorten else str(cell)))


def dropped_note(fitted: FittedTable) -> Text | None:
    if not fitted.dropped:
        return None
    names = ", ".join(fitted.dropped)
    return Text(f"left out at this width: {names} (widen the terminal, or use --json for every field)", style="dim")


def legend(*pairs: tuple[str, str]) -> Text:
    """``head: what it means; ...`` below a table, wrapped on words."""
    return Text("; ".join(f"{k}: {v}" for k, v in pairs) + ".", style="dim")


# --- notices and tiers ------------------------------------------------------------------------


def notice_text(record: CompactionRecord) -> Text:
    """The notice's lines, as rich Text so that ``[Full]`` is never read as markup."""
    text = Text(notice(record))
    first = text.plain.find("\n")
    text.stylize(TIER_STYLES.get(record.tier, ""), 0, first if first >= 0 else None)
    return text


def tier_text(tier: CompactionTier | None) -> Text:
    if tier is None:
        return Text("-")
    return Text(tier.label, style=TIER_STYLES.get(tier, ""))


def record_tier_text(record: CompactionRecord) -> Text:
    """``Full``, or ``Emergency ← Full`` when the loop guard escalated past the policy's tier."""
    return Text(tier_label(record), style=TIER_STYLES.get(record.tier, ""))


def replay_progress(console: Console, *, disable: bool) -> Progress:
    """The bar of ``compactor replay``: on stderr; never redirects stdout (it may be a pipe)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("calls"),
        TimeElapsedColumn(),
        console=console,
        disable=disable,
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )


# --- compactor records ------------------------------------------------------------------------


def _arrow(a: Any, b: Any) -> str:
    return f"{a}→{b}"


def records_view(records: Sequence[CompactionRecord], width: int, title: str) -> RenderableType:
    """``compactor records``: one line per record, then the errors and loop-guard notes below.

    Columns: # (the record's number, which ``--compaction`` takes), time, tier, tokens before →
    after, how much smaller, the view's share of the window, messages before → after, messages
    summarized, offloads, tail messages kept, milliseconds, and a flag for what is told below.
    """
    days = {r.timestamp[:10] for r in records if r.timestamp}
    one_day = len(days) <= 1
    if one_day and days:
        title = f"{title} ({next(iter(days))})"
    show_variant = any(r.variant for r in records)
    columns = [
        Column("#"),
        Column("time", justify="left", drop=4),
        Column("tier", justify="left"),
        *([Column("variant", justify="left", shorten=8, comfortable=12, drop=1)] if show_variant else []),
        Column("tokens", meaning="the view before → after (K = 1,000)"),
        Column("cut", meaning="share of the view's tokens removed"),
        Column("window", drop=3, meaning="the view sent, share of the context window"),
        Column("msgs", drop=5, meaning="messages in the view before → after"),
        Column("summ.", meaning="messages folded into the summary"),
        Column("offloads"),
        Column("tail", drop=2, meaning="newest messages kept as they were"),
        Column("ms", drop=6, meaning="the call's time"),
        Column("see", justify="left", meaning="errors and loop-guard escalations, told below the table"),
    ]
    flagged = any(r.errors or r.escalations for r in records)
    rows = []
    for number, r in enumerate(records, 1):
        offloaded = sum(e.chars for e in r.offloaded)
        flags = []
        if r.errors:
            flags.append("error")
        if r.escalations:
            flags.append("guard")
        smaller = (
            f"{round((1 - r.tokens_after / r.tokens_before) * 100)}%"
            if r.tokens_before and r.tokens_after < r.tokens_before
            else "-"
        )
        row: list[Any] = [
            str(number),
            _clock(r.timestamp, one_day),
            record_tier_text(r),
            *([r.variant or "-"] if show_variant else []),
            _arrow(human_tokens(r.tokens_before), human_tokens(r.tokens_after)),
            smaller,
            f"{r.tokens_after / r.context_window:.0%}" if r.context_window else "-",
            _arrow(r.msgs_before, r.msgs_after),
            str(r.summarized),
            f"{len(r.offloaded)} ({human_bytes(offloaded)})" if r.offloaded else "0",
            str(r.preserved_tail),
            f"{r.duration_ms:.0f}" if r.duration_ms >= 1 else f"{r.duration_ms:.1f}",
            Text(", ".join(flags), style="red" if r.errors else "yellow") if flags else "",
        ]
        rows.append(row)
    if not flagged:
        columns, rows = columns[:-1], [row[:-1] for row in rows]
    styles = [None if changed_view(r) else "dim" for r in records]
    fitted = fit_table(columns, rows, width, title=title, styles=styles)
    parts: list[RenderableType] = [fitted]
    notes = _record_notes(records)
    if notes:
        parts.append(notes)
    parts.append(fitted.legend() or Text())
    note = dropped_note(fitted)
    if note is not None:
        parts.append(note)
    return Group(*parts)


def _record_notes(records: Sequence[CompactionRecord]) -> Text | None:
    """Errors and loop-guard escalations, one line each, keyed by the record's number."""
    text = Text()
    for number, r in enumerate(records, 1):
        for error in r.errors:
            text.append(f"#{number} error: ", style="bold red")
            text.append(visible(" ".join(error.split())) + "\n")
        for step in r.escalations:
            text.append(f"#{number} loop guard: ", style="bold yellow")
            text.append(visible(_without_prefix(" ".join(step.split()), "loop guard: ")) + "\n")
    if not text.plain:
        return None
    text.rstrip()
    return text


def _without_prefix(text: str, prefix: str) -> str:
    return text[len(prefix) :] if text.startswith(prefix) else text


def _clock(timestamp: str, one_day: bool) -> str:
    """``2025-01-02T10:11:12.345+00:00`` -> ``10:11:12`` (or ``01-02 10:11`` over several days)."""
    if not timestamp:
        return "-"
    return timestamp[11:19] if one_day else f"{timestamp[5:10]} {timestamp[11:16]}"


# --- one compaction in detail -----------------------------------------------------------------


@attrs.frozen
class Where:
    """How a command can read back what a compaction offloaded: the options ``show`` needs."""

    config: str = "default"
    data_dir: str | None = None
    temporary: bool = False
    """The results live in a temporary folder removed at the end (a replay without ``--keep``)."""

    def show_command(self, handle: str) -> str:
        parts = ["compactor", "show", handle]
        if self.config != "default":
            parts += ["-c", self.config]
        if self.data_dir:
            parts += ["--data-dir", self.data_dir]
        return " ".join(shlex.quote(p) for p in parts)


SUMMARY_LINES = 6
"""Lines of the summary text shown without ``--full``."""


@attrs.frozen
class Command:
    """A command to copy: printed on its own line and never broken, however narrow the terminal
    (a terminal wraps it on screen; a hard line break would break the copy)."""

    text: str
    comment: str = ""
    indent: int = 2


def print_all(console: Console, parts: Iterable[Any]) -> None:
    """Print renderables one after another, :class:`Command` lines unbroken."""
    for part in parts:
        if isinstance(part, Command):
            line = Text(" " * part.indent + visible(part.text))
            if part.comment:
                line.append(f"   # {part.comment}", style="dim")
            console.print(line, soft_wrap=True)
        else:
            console.print(part)


def compaction_detail(
    record: CompactionRecord,
    *,
    heading: str,
    where: Where,
    full: bool,
    lost: Mapping[str, Sequence[str]] | None = None,
) -> list[Any]:
    """What one compaction did, as parts for :func:`print_all`: the notice, the five anchors, the
    summary text, each offloaded result with the command that prints it, the facts of the probe
    set no longer in the view (known for replays), the errors and the loop guard's escalations.

    ``full`` prints every line of the anchors and the summary; otherwise each anchor's first
    line and the summary's first :data:`SUMMARY_LINES` lines, with how many more there are.
    """
    parts: list[Any] = [Rule(Text(visible(heading), style="bold"), align="left", style="dim")]
    parts.append(notice_text(record))
    if record.anchors:
        parts.append(Text("Anchors", style="bold"))
        anchors = Table.grid(padding=(0, 2))
        anchors.add_column(no_wrap=True, style="cyan")
        anchors.add_column(overflow="fold")
        for anchor in record.anchors:
            anchors.add_row(anchor.type.heading, _clip(anchor.content, full, 1))
        parts.append(Padding(anchors, (0, 0, 0, 2)))
    if record.summary_text.strip():
        lines = record.summary_text.strip().splitlines()
        shown = lines if full else lines[:SUMMARY_LINES]
        more = "" if len(shown) == len(lines) else f" (first {len(shown)} of {len(lines)} lines; --full for all)"
        parts.append(Text("Summary" + more, style="bold"))
        body = Text(visible("\n".join(shown if full else [_first_chars(line, 400) for line in shown])))
        parts.append(Padding(body, (0, 0, 0, 2)))
    if record.offloaded:
        if where.temporary:
            heading = f"Offloaded tool results ({len(record.offloaded)}), in a temporary folder (--keep DIR keeps them)"
        else:
            heading = f"Offloaded tool results ({len(record.offloaded)}): print one with"
        parts.append(Text(heading, style="bold"))
        for entry in record.offloaded:
            size = f"{entry.chars:,} characters, {entry.lines:,} lines"
            parts.append(Command(entry.handle if where.temporary else where.show_command(entry.handle), size))
    if lost is not None:
        missing = [(category, label) for category, labels in lost.items() for label in labels]
        if missing:
            parts.append(Text(f"Facts of the probe set no longer in the view ({len(missing)})", style="bold"))
            facts = Text()
            for category, label in missing:
                facts.append(f"{category}: ", style="yellow")
                facts.append(visible(_first_chars(" ".join(label.split()), 300)) + "\n")
            facts.rstrip()
            parts.append(Padding(facts, (0, 0, 0, 2)))
        else:
            parts.append(Text("Facts of the probe set: all still in the view", style="green"))
    for title, items, style in (
        ("Errors", record.errors, "bold red"),
        ("Loop guard (normal escalation, not an error)", record.escalations, "bold yellow"),
    ):
        if items:
            parts.append(Text(title, style=style))
            parts.append(Padding(Text(visible("\n".join(" ".join(i.split()) for i in items))), (0, 0, 0, 2)))
    return parts


def _clip(content: str, full: bool, lines: int) -> Text:
    text = visible(content.strip()) or NOT_AVAILABLE
    rows = text.splitlines()
    if full or len(rows) <= lines:
        shown = rows if full else [_first_chars(r, 300) for r in rows]
        return Text("\n".join(shown), style="dim" if text == NOT_AVAILABLE else "")
    out = Text("\n".join(_first_chars(r, 300) for r in rows[:lines]))
    out.append(f" (+{len(rows) - lines} lines)", style="dim")
    return out


def _first_chars(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def details_hint(records: Sequence[CompactionRecord], command: str) -> list[Any]:
    """The lines under ``records`` that say how to see a compaction's anchors, summary and offloads."""
    numbers = [n for n, r in enumerate(records, 1) if r.tier is not CompactionTier.NONE and changed_view(r)]
    if not numbers:
        return []
    return [
        Text(
            f"What compaction N did (anchors, summary, offloaded results), e.g. N = {numbers[-1]}; "
            "--full for every compaction:",
            style="dim",
        ),
        Command(f"{command} --compaction N", indent=0),
    ]


# --- compactor replay -------------------------------------------------------------------------


def summary_view(summaries: Sequence[Mapping[str, Any]], width: int) -> RenderableType:
    """The replay summary (see ``cli.replay.replay_summary``): a column per session, or for more
    than two sessions a row per session, so that a whole corpus still fits a terminal."""
    if len(summaries) > 2:
        return _summary_rows(summaries, width)
    rows: list[tuple[str, Any]] = [
        ("context window", lambda s: f"{s['context_window']:,} tokens"),
        ("LLM calls", lambda s: f"{s['calls']:,}"),
        *[(f"calls at tier {t.label}", (lambda tier: lambda s: str(s["tiers"][tier.name.lower()]))(t)) for t in TIERS],
        ("compactions changing the view", lambda s: str(s["view_changing_compactions"])),
        (
            "peak view, share of window",
            lambda s: f"{s['peak_view_tokens']:,} ({s['peak_view_tokens'] / s['context_window']:.0%})",
        ),
        ("input tokens sent", lambda s: f"{s['total_input_tokens']:,}"),
        ("prompt-cache-stable", lambda s: _share(s.get("cache_stable_tokens"), s["total_input_tokens"])),
        ("overflows (view > window)", lambda s: _overflow(s["overflows"])),
        ("offloads", lambda s: f"{s['offloads']} ({human_bytes(s['offloaded_bytes'])})"),
        ("summarizer calls", _summarizer),
        *[
            (f"facts kept: {name}", (lambda key: lambda s: _ratio((s.get("retention") or {}).get(key)))(name))
            for name in CATEGORIES
        ],
        ("billed cost", lambda s: f"${s['cost_usd']['total']:.4f}" if s.get("cost_usd") else "-"),
        (
            "compactor time",
            lambda s: f"{s['compactor_seconds']:.2f} s" if s.get("compactor_seconds") is not None else "-",
        ),
    ]
    body = [[label, *[cell(s) for s in summaries]] for label, cell in rows]
    if len(summaries) == 1:
        s = summaries[0]
        return fit_table([Column("", justify="left"), Column("")], body, width, title=f"Replay of {s['session']}")
    # session names are headers: shorten them to the column, and name them in full below
    label_width = max(cell_len(label) for label, _ in rows)
    value_width = max(_cell_width(cell) for row in body for cell in row[1:])
    room = max(12, value_width, (width - label_width - 2 * len(summaries)) // len(summaries))
    headers = [elide(str(s["session"]), room) for s in summaries]
    columns = [Column("", justify="left")] + [Column(h) for h in headers]
    fitted = fit_table(columns, body, width, title="Replay summary")
    parts: list[RenderableType] = [fitted]
    if any(h != str(s["session"]) for h, s in zip(headers, summaries, strict=True)):
        parts.append(_full_names(summaries))
    return Group(*parts)


def _full_names(summaries: Sequence[Mapping[str, Any]]) -> Text:
    text = Text("sessions: ", style="dim")
    text.append(visible(", ".join(str(s["session"]) for s in summaries)), style="dim")
    return text


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


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


def _summary_rows(summaries: Sequence[Mapping[str, Any]], width: int) -> RenderableType:
    columns = [
        Column("#"),
        Column("session", justify="left", shorten=10, comfortable=24),
        Column("calls", meaning="simulated LLM calls"),
        Column("W/S/F/E", meaning="calls at tier Warn/Soft/Full/Emergency"),
        Column("chg", drop=3, meaning="compactions that changed the view"),
        Column("peak", meaning="largest view, share of the window"),
        Column("sent", drop=2, meaning="input tokens sent"),
        Column("cached", meaning="share of the input tokens a prompt cache would serve"),
        Column("over", meaning="views over the window"),
        Column("offl.", drop=1, meaning="tool results offloaded"),
        Column("summ.", drop=4, meaning="summarizer calls"),
        Column("USD", meaning="billed cost in US dollars"),
        Column("kept", drop=5, meaning="facts of the probe set in the final view (mean of the categories)"),
    ]

    def kept(s: Mapping[str, Any]) -> str:
        ratios = [v for v in (s.get("retention") or {}).values() if v is not None]
        return f"{sum(ratios) / len(ratios):.0%}" if ratios else "-"

    rows = [
        [
            str(n),
            str(s["session"]),
            f"{s['calls']:,}",
            "/".join(str(s["tiers"][t.name.lower()]) for t in TIERS),
            str(s["view_changing_compactions"]),
            f"{s['peak_view_tokens'] / s['context_window']:.0%}",
            human_tokens(s["total_input_tokens"]),
            _percent(s.get("cache_stable_tokens"), s["total_input_tokens"]),
            _overflow(s["overflows"]),
            str(s["offloads"]),
            str(s["summarizer_calls"]),
            f"{s['cost_usd']['total']:.2f}" if s.get("cost_usd") else "-",
            kept(s),
        ]
        for n, s in enumerate(summaries, 1)
    ]
    total = lambda key: sum(s[key] for s in summaries)  # noqa: E731
    footer = [
        "",
        Text(f"{len(summaries)} sessions", style="bold"),
        f"{total('calls'):,}",
        "/".join(str(sum(s["tiers"][t.name.lower()] for s in summaries)) for t in TIERS),
        str(total("view_changing_compactions")),
        "",
        human_tokens(total("total_input_tokens")),
        _percent(total("cache_stable_tokens"), total("total_input_tokens")),
        _overflow(total("overflows")),
        str(total("offloads")),
        str(total("summarizer_calls")),
        f"{sum(s['cost_usd']['total'] for s in summaries if s.get('cost_usd')):.2f}",
        "",
    ]
    windows = ", ".join(f"{w:,}" for w in sorted({s["context_window"] for s in summaries}))
    fitted = fit_table(columns, rows, width, title=f"Replay summary (window {windows} tokens)", footer=footer)
    parts: list[RenderableType] = [fitted]
    if fitted.shortened:
        parts.append(_numbered_names(summaries))
    parts.append(fitted.legend() or Text())
    note = dropped_note(fitted)
    if note is not None:
        parts.append(note)
    return Group(*parts)


def _numbered_names(summaries: Sequence[Mapping[str, Any]]) -> Text:
    text = Text("sessions in full:\n", style="dim")
    for n, s in enumerate(summaries, 1):
        text.append(visible(f"{n:>3} {s['session']}") + "\n", style="dim")
    text.rstrip()
    return text


def _percent(part: int | None, total: int) -> str:
    return f"{part / total:.0%}" if part is not None and total else "-"


# --- compactor plugins ------------------------------------------------------------------------


def plugins_view(rows: Iterable[Mapping[str, Any]], config_source: str, width: int) -> RenderableType:
    """One row per plugin: its name, what the config selects it as, a one-line description, the
    distribution when it is not this package, and the hooks it implements (wrapped on words)."""
    rows = list(rows)
    builtin = {r["distribution"] for r in rows if r.get("builtin")} or {"progressive-compactor"}
    body = []
    for row in rows:
        cell = Text()
        if row["error"] is not None:
            cell.append(row["error"], style="red")
        else:
            if row.get("description"):
                cell.append(row["description"])
            if row["distribution"] and not row.get("builtin"):
                cell.append(f" (from {row['distribution']} {row['version'] or ''})".rstrip(" "), style="dim")
            cell.append("\nhooks: " + ", ".join(row["hooks"]), style="dim")
        selected = ", ".join(row["selected"])
        body.append(
            [
                Text(row["name"], style="bold" if selected else ""),
                Text(selected or "-", style="green" if selected else "dim"),
                cell,
            ]
        )
    columns = [
        Column("plugin", justify="left", shorten=16),
        Column("selected as", justify="left", wrap=8),
        Column("what it does; hooks", justify="left", wrap=24),
    ]
    # the description column takes whatever is left
    name_width = max([cell_len("plugin"), *(cell_len(r["name"]) for r in rows)])
    role_width = max([cell_len("selected as"), *(cell_len(", ".join(r["selected"]) or "-") for r in rows)])
    rest = max(24, width - name_width - role_width - 4)
    body = [[name, role, _wrapped(cell, rest)] for name, role, cell in body]
    version = next((r["version"] for r in rows if r.get("builtin")), "")
    title = f"Installed plugins; 'selected as': the roles config {config_source!r} gives them"
    fitted = fit_table(columns, body, width, title=title)
    parts: list[RenderableType] = [fitted]
    parts.append(Text(f"built-in plugins come with {', '.join(sorted(builtin))} {version}".rstrip(), style="dim"))
    return Group(*parts)


def _wrapped(text: Text, width: int) -> Text:
    """``text`` wrapped on words to ``width`` cells, so the table measures its real lines."""
    console = Console(width=width, no_color=True, color_system=None)
    lines = text.wrap(console, width)
    out = Text()
    for n, line in enumerate(lines):
        if n:
            out.append("\n")
        out.append_text(line)
    return out


__all__ = [
    "Column",
    "Command",
    "FittedTable",
    "Where",
    "compaction_detail",
    "details_hint",
    "elide",
    "fit_table",
    "is_tty",
    "make_console",
    "notice_text",
    "plugins_view",
    "print_all",
    "records_view",
    "replay_progress",
    "summary_view",
    "tier_text",
]
