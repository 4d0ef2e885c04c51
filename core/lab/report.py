"""The HTML report of ``compactor report``: what compaction did to a session, and comparisons.

One self-contained page: plotly's JavaScript is written inline (no CDN, no network needed to
open it). Vocabulary, as on the command line: a *call* is one LLM call (numbered from 1), a
*message* an index into the session file (from 0).

One run (a session replayed under one config, or the records of one session):

1. a summary, and the price table the costs use, with its units;
2. view tokens per call: the view sent, the prompt-cache-stable prefix, the raw history (what the
   view would have been without compaction, and the call where it would have passed the window),
   the policy's threshold bands (labelled in the margin, clear of the lines), and each
   compaction as a drop from the tokens before to the tokens after, coloured by tier;
3. cost per call and cumulative cost, against the same calls sent without compaction;
4. tokens before and after each compaction, a legend entry per tier, the share removed on each;
5. offloaded kilobytes per compaction and their running total (both axes from 0);
6. a table of the compactions and, per compaction, a collapsible panel with its notice, the five
   anchors, the summary text, the offloaded results (handle, size, the command that prints one,
   the preview the view kept) and the facts of the probe set it left out of the view.

Several runs (several sessions, configs or context windows): a table with a row per run, then per
session the view tokens and the cumulative cost of every run on one chart each (the A/B view
before choosing a config), then each run's compactions and panels. :func:`render_page` draws
either from a list of :class:`ReportData`; ``compactor report`` and ``compactor ab`` build those
with :func:`from_replay` and :func:`from_records`.

A report built from records has no per-call series (records are kept for compactions): it draws
what the records hold and its notes describe only that.

plotly is an optional extra (``pip install progressive-compactor[report]``) and is imported only
when a report is drawn.
"""

from __future__ import annotations

import hashlib
import html
import itertools
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

import attrs

from ..errors import CompactorError
from ..models import CompactionRecord, CompactionTier
from ..notice import changed_view, human_bytes, human_tokens, notice, tier_label
from ..pricing import PriceTable, call_cost
from .probes import CATEGORIES, SHORT_NAMES

INSTALL_HINT = "pip install 'progressive-compactor[report]'"
TIER_COLOURS = {
    CompactionTier.WARN: "#c99700",
    CompactionTier.SOFT: "#1f9bb4",
    CompactionTier.FULL: "#8e44ad",
    CompactionTier.EMERGENCY: "#d62728",
}
TIER_NAMES = {t.name.lower(): t for t in TIER_COLOURS}
RUN_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
RAW_COLOUR = "#9a9a9a"
MAX_BAR_LABELS = 40
"""Up to this many compactions, each bar of the before/after chart is labelled with the share
removed; beyond, the labels would overlap and the share is in the hover and the table."""

__all__ = [
    "Compaction",
    "ReportData",
    "ReportError",
    "bands",
    "changed_view",
    "from_records",
    "from_replay",
    "raw_tokens_per_call",
    "render_html",
    "render_page",
    "require_plotly",
]


def bands(thresholds: Mapping[str, float]) -> list[tuple[CompactionTier, float, float | None]]:
    """``(tier, start, end)`` share of the window of each tier the policy names, lowest first;
    the last band has no end."""
    known = sorted((share, TIER_NAMES[name]) for name, share in thresholds.items() if name in TIER_NAMES)
    out: list[tuple[CompactionTier, float, float | None]] = []
    for i, (share, tier) in enumerate(known):
        end = known[i + 1][0] if i + 1 < len(known) else None
        if end is None or end > share:
            out.append((tier, share, end))
    return out


class ReportError(CompactorError):
    """The report cannot be drawn: plotly is missing, or there is nothing to chart."""


def require_plotly() -> None:
    """Fail early, before any replay work, with the command that installs the extra."""
    try:
        import plotly  # noqa: F401
    except ImportError as exc:
        raise ReportError(f"the HTML report needs plotly, an optional extra: {INSTALL_HINT}") from exc


# --- the data ---------------------------------------------------------------------------------


@attrs.frozen
class Compaction:
    """One compaction that changed the view. ``x`` is its call number (replay) or record number."""

    x: int
    record: CompactionRecord = attrs.field(repr=False)
    label: str = ""
    """``call 8 (message 15)`` or ``record 3 (2025-01-02 10:11:12)``."""
    lost: Mapping[str, Sequence[str]] | None = None
    """Facts of the probe set the view no longer held (replays only; None when not checked)."""

    @property
    def tier(self) -> CompactionTier:
        return self.record.tier

    @property
    def tokens_before(self) -> int:
        return self.record.tokens_before

    @property
    def tokens_after(self) -> int:
        return self.record.tokens_after

    @property
    def offloads(self) -> int:
        return len(self.record.offloaded)

    @property
    def offloaded_bytes(self) -> int:
        return sum(e.chars for e in self.record.offloaded)

    @property
    def summarized(self) -> int:
        return self.record.summarized

    @property
    def ratio(self) -> float:
        before, after = self.record.tokens_before, self.record.tokens_after
        return 1 - after / before if before else 0.0

    @property
    def error(self) -> str:
        return "; ".join(self.record.errors)


@attrs.frozen
class ReportData:
    """Everything one run's part of the page shows, whatever it came from (replay or records)."""

    title: str
    kind: str
    """``replay`` (a session replayed: one point per call) or ``records`` (stored records)."""
    context_window: int
    thresholds: Mapping[str, float]
    calls: tuple[int, ...] = ()
    view_tokens: tuple[int, ...] = ()
    cache_stable_tokens: tuple[int, ...] = ()
    message_index: tuple[int, ...] = ()
    compactions: tuple[Compaction, ...] = ()
    summary: tuple[tuple[str, str], ...] = ()
    raw_tokens: tuple[int, ...] = ()
    """Tokens of the whole history before each call: the view without compaction."""
    cost: tuple[float, ...] = ()
    """US dollars billed per call (view, output and summarizer)."""
    baseline_cost: tuple[float, ...] = ()
    """US dollars per call had every call sent the raw history (no compaction)."""
    prices: PriceTable | None = None
    session: str = ""
    """The session this run replayed or read; runs of one session share its charts."""
    label: str = ""
    """What tells this run from the others of the page (config, window), empty alone."""
    show: Mapping[str, str] = attrs.field(factory=dict)
    """Options of ``compactor show`` that read this run's offloaded results (``--data-dir``,
    ``-c``); empty when they are gone (a replay in a temporary folder)."""
    retention: Mapping[str, float | None] | None = None
    overflows: int = 0

    @property
    def overflow_call(self) -> int | None:
        """The first call at which the raw history would not fit the window."""
        for call, raw in zip(self.calls, self.raw_tokens, strict=False):
            if self.context_window and raw > self.context_window:
                return call
        return None

    @property
    def name(self) -> str:
        return f"{self.session} · {self.label}" if self.label else self.session or self.title


def raw_tokens_per_call(
    messages: Sequence[Mapping[str, Any]], estimate: Any, message_index: Sequence[int]
) -> list[int]:
    """Tokens of ``messages[:i]`` for each ``i`` of ``message_index``: the view each call would
    have sent without compaction, counted by ``estimate`` (the compactor's ``estimate_tokens``)."""
    from ..messages import messages_from_dicts

    per = estimate(messages_from_dicts(messages)) if messages else []
    prefix = [0, *itertools.accumulate(per)]
    return [prefix[min(i, len(per))] for i in message_index]


def from_replay(
    result: Any,
    thresholds: Mapping[str, float],
    title: str,
    summary: Mapping[str, Any] | None = None,
    *,
    raw_tokens: Sequence[int] = (),
    prices: PriceTable | None = None,
    label: str = "",
    show: Mapping[str, str] | None = None,
) -> ReportData:
    """Report data of a :class:`~progressive_compactor.lab.replay.ReplayResult`.

    ``raw_tokens`` (from :func:`raw_tokens_per_call`) adds the raw-history line and, with
    ``prices``, the no-compaction baseline of the cost chart.
    """
    turns = result.turns
    compactions = tuple(
        Compaction(n, t.record, f"call {n} (message {t.index})", t.lost)
        for n, t in enumerate(turns, 1)
        if t.tier is not CompactionTier.NONE and changed_view(t.record)
    )
    raw = tuple(raw_tokens)
    baseline: tuple[float, ...] = ()
    if raw and prices is not None:
        previous = 0
        costs = []
        for t, tokens in zip(turns, raw, strict=True):
            costs.append(
                call_cost(prices, view_tokens=tokens, cached_tokens=previous, output_tokens=t.output_tokens).total
            )
            previous = tokens
        baseline = tuple(costs)
    data = ReportData(
        title=title,
        kind="replay",
        context_window=result.context_window,
        thresholds=dict(thresholds),
        calls=tuple(range(1, len(turns) + 1)),
        view_tokens=tuple(t.view_tokens for t in turns),
        cache_stable_tokens=tuple(t.cache_stable_tokens for t in turns),
        message_index=tuple(t.index for t in turns),
        compactions=compactions,
        raw_tokens=raw,
        cost=tuple(t.cost.total if t.cost is not None else 0.0 for t in turns),
        baseline_cost=baseline,
        prices=prices,
        session=result.session_id,
        label=label,
        show=dict(show or {}),
        retention=None if result.retention is None else result.retention.ratios(),
        overflows=result.overflows,
    )
    rows = _summary_rows(summary, data) if summary else ()
    return attrs.evolve(data, summary=rows)


def from_records(
    records: Sequence[CompactionRecord],
    thresholds: Mapping[str, float],
    title: str,
    *,
    label: str = "",
    show: Mapping[str, str] | None = None,
) -> ReportData:
    """Report data of stored records: compactions only (records of tier None are usually not stored)."""
    if not records:
        raise ReportError("no records to chart")
    window = next((r.context_window for r in reversed(records) if r.context_window), 0)
    compactions = tuple(
        Compaction(n, r, f"record {n} ({r.timestamp[:19].replace('T', ' ')})")
        for n, r in enumerate(records, 1)
        if r.tier is not CompactionTier.NONE and changed_view(r)
    )
    counts = {t: sum(1 for r in records if r.tier is t) for t in TIER_COLOURS}
    sessions = sorted({r.session_id for r in records})
    rows = [
        ("records", str(len(records))),
        ("compactions that changed the view", str(len(compactions))),
        ("sessions", ", ".join(sessions)),
        ("context window", f"{window:,} tokens" if window else "not recorded"),
        *[(f"records at tier {t.label}", str(n)) for t, n in counts.items()],
        (
            "offloads",
            f"{sum(c.offloads for c in compactions)} ({human_bytes(sum(c.offloaded_bytes for c in compactions))})",
        ),
        ("summarizer calls", str(sum(r.summarizer_calls for r in records))),
        ("first / last", f"{records[0].timestamp[:19]} / {records[-1].timestamp[:19]}"),
    ]
    return ReportData(
        title=title,
        kind="records",
        context_window=window,
        thresholds=dict(thresholds),
        compactions=compactions,
        summary=tuple(rows),
        session=", ".join(sessions),
        label=label,
        show=dict(show or {}),
    )


def _summary_rows(s: Mapping[str, Any], data: ReportData) -> tuple[tuple[str, str], ...]:
    window = s["context_window"]
    rows = [
        ("session", str(s["session"])),
        ("context window", f"{window:,} tokens"),
        ("LLM calls", f"{s['calls']:,} (messages: {s['messages']:,})"),
        *[(f"calls at tier {k.capitalize()}", str(n)) for k, n in s["tiers"].items() if k != "none"],
        ("compactions that changed the view", str(s["view_changing_compactions"])),
        ("peak view", f"{s['peak_view_tokens']:,} tokens ({s['peak_view_tokens'] / window:.0%} of the window)"),
        ("input tokens sent", f"{s['total_input_tokens']:,}"),
        ("prompt-cache-stable input tokens", _share(s.get("cache_stable_tokens"), s["total_input_tokens"])),
        ("overflows (view > window)", str(s["overflows"])),
        ("offloads", f"{s['offloads']} ({human_bytes(s['offloaded_bytes'])})"),
        ("summarizer calls", str(s["summarizer_calls"])),
        ("invalid views", str(s["invalid_views"])),
    ]
    if s.get("retention"):
        kept = [f"{k} {v:.0%}" for k, v in s["retention"].items() if v is not None]
        rows.append(("facts kept in the final view", ", ".join(kept) or "-"))
    if data.raw_tokens:
        at = data.overflow_call
        rows.append(
            (
                "raw history at the last call",
                f"{data.raw_tokens[-1]:,} tokens ({data.raw_tokens[-1] / window:.0%} of the window)"
                + (f"; passes the window at call {at}" if at else ""),
            )
        )
    if s.get("cost_usd"):
        total = s["cost_usd"]["total"]
        rows.append(("billed cost", f"${total:.4f}"))
        if data.baseline_cost:
            baseline = sum(data.baseline_cost)
            change = f" ({(total - baseline) / baseline:+.1%} with compaction)" if baseline else ""
            rows.append(("billed cost without compaction", f"${baseline:.4f}{change}"))
    return tuple(rows)


def _share(part: int | None, total: int) -> str:
    if part is None:
        return "-"
    return f"{part:,} ({part / total:.0%})" if total else f"{part:,}"


# --- charts -----------------------------------------------------------------------------------


def _band_top(data: ReportData) -> float:
    peaks = [data.context_window, *data.view_tokens, *(c.tokens_before for c in data.compactions)]
    return max(peaks) * 1.05


def _x_title(data: ReportData) -> str:
    return "LLM call" if data.kind == "replay" else "record"


VIEW_HEIGHT = 480
VIEW_MARGIN = dict(l=60, r=120, t=30, b=40)
LABEL_PX = 15
"""Height of a band label in pixels: labels closer than this are moved apart."""


def spread(wanted: Sequence[float], gap: float, floor: float = 0.0, ceiling: float | None = None) -> list[float]:
    """Positions as close to ``wanted`` (ascending) as they can be while ``gap`` apart, none below
    ``floor`` nor above ``ceiling``: labels that would overlap move up, and down again from the
    ceiling when they would pass it."""
    out = list(wanted)
    for i in range(len(out)):
        out[i] = max(out[i], floor if i == 0 else out[i - 1] + gap)
    if ceiling is not None and out:
        out[-1] = min(out[-1], ceiling)
        for i in range(len(out) - 2, -1, -1):
            out[i] = min(out[i], out[i + 1] - gap)
    return out


def _add_bands(fig: Any, data: ReportData, top: float) -> None:
    """The policy's bands, labelled in the right margin (never over the lines) and never on top of
    one another, and the window line with its label."""
    window = data.context_window
    plot_px = VIEW_HEIGHT - VIEW_MARGIN["t"] - VIEW_MARGIN["b"] - 50  # the legend below takes about 50
    gap = LABEL_PX * top / plot_px
    labels: list[tuple[float, str, str]] = []
    for tier, low, high in bands(data.thresholds):
        y0 = low * window
        y1 = high * window if high is not None else max(window, y0)
        if y1 > y0:
            fig.add_hrect(y0=y0, y1=y1, fillcolor=TIER_COLOURS[tier], opacity=0.12, line_width=0, layer="below")
        labels.append(((y0 + y1) / 2 if y1 > y0 else y0, f"{tier.label} ≥ {low:.0%}", TIER_COLOURS[tier]))
    fig.add_hline(y=window, line_dash="dash", line_color="#444", line_width=1)
    labels.append((window + gap / 2, f"window {human_tokens(window)}", "#444"))
    labels.sort(key=lambda item: item[0])
    placed = spread([y for y, _, _ in labels], gap, gap / 2, top - gap / 2)
    for y, (_, text, colour) in zip(placed, labels, strict=True):
        fig.add_annotation(
            x=1.0,
            xref="paper",
            xanchor="left",
            xshift=6,
            y=y,
            yref="y",
            yanchor="middle",
            text=text,
            showarrow=False,
            font=dict(color=colour, size=11),
            align="left",
        )


def _overflow_marker(fig: Any, data: ReportData, **where: Any) -> None:
    at = data.overflow_call
    if at is None:
        return
    fig.add_vline(x=at, line_dash="dot", line_color=RAW_COLOUR, line_width=1.5, **where)


def view_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    window = data.context_window
    raw_shown = [r for r in data.raw_tokens if r <= 2 * window] if window else list(data.raw_tokens)
    top = max([_band_top(data), *(r * 1.02 for r in raw_shown)]) if window else None
    if window:
        _add_bands(fig, data, top or window)
    if data.raw_tokens:
        fig.add_trace(
            go.Scatter(
                x=data.calls,
                y=data.raw_tokens,
                customdata=data.message_index,
                mode="lines",
                name="raw history (no compaction)",
                line=dict(color=RAW_COLOUR, width=1.5, dash="dash"),
                hovertemplate="call %{x} (message %{customdata})<br>raw history %{y:,} tokens<extra></extra>",
            )
        )
        at = data.overflow_call
        if at is not None:
            _overflow_marker(fig, data)
            fig.add_annotation(
                x=at,
                y=window,
                yref="y",
                text=f"raw history passes the window at call {at}",
                showarrow=True,
                arrowhead=0,
                ax=-60 if at > max(data.calls, default=0) / 2 else 60,
                ay=-28,
                xanchor="right" if at > max(data.calls, default=0) / 2 else "left",
                font=dict(size=11, color="#555"),
                bgcolor="rgba(255,255,255,0.85)",
            )
    if data.view_tokens:
        fig.add_trace(
            go.Scatter(
                x=data.calls,
                y=data.view_tokens,
                customdata=data.message_index,
                mode="lines",
                name="view sent",
                line=dict(color="#222", width=1.8),
                hovertemplate="call %{x} (message %{customdata})<br>view %{y:,} tokens<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=data.calls,
                y=data.cache_stable_tokens,
                mode="lines",
                name="prompt-cache-stable prefix",
                line=dict(color="#2ca02c", width=1, dash="dot"),
                hovertemplate="call %{x}<br>stable prefix %{y:,} tokens<extra></extra>",
            )
        )
    for tier, colour in TIER_COLOURS.items():
        points = [c for c in data.compactions if c.tier is tier]
        if not points:
            continue
        drop_x: list[Any] = []
        drop_y: list[Any] = []
        for c in points:
            drop_x += [c.x, c.x, None]
            drop_y += [c.tokens_before, c.tokens_after, None]
        fig.add_trace(
            go.Scatter(
                x=drop_x,
                y=drop_y,
                mode="lines",
                line=dict(color=colour, width=2),
                legendgroup=tier.label,
                showlegend=False,
                hoverinfo="skip",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[c.x for c in points],
                y=[c.tokens_before for c in points],
                mode="markers",
                name=f"{tier.label} compaction ({len(points)})",
                legendgroup=tier.label,
                marker=dict(color=colour, size=10, symbol="triangle-down", line=dict(color="#fff", width=1)),
                text=[_hover(c) for c in points],
                customdata=[_panel_id(data, c) for c in points],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    fig.update_layout(
        xaxis_title=_x_title(data),
        yaxis_title="tokens",
        hovermode="closest",
        template="plotly_white",
        height=VIEW_HEIGHT,
        margin=VIEW_MARGIN,
        legend=dict(orientation="h", y=-0.16, x=0),
    )
    if top:
        fig.update_yaxes(range=[0, top])
    last = max([*data.calls, *(c.x for c in data.compactions), 1])
    fig.update_xaxes(range=[0, last + 1])
    _empty_note(fig, data, needs_series=True)
    return fig


def _hover(c: Compaction) -> str:
    lines = [
        f"<b>{html.escape(tier_label(c.record))}</b> at {html.escape(c.label)}",
        f"{human_tokens(c.tokens_before)} → {human_tokens(c.tokens_after)} tokens ({c.ratio:.0%} removed)",
        f"{c.summarized} messages summarized, {c.offloads} offloaded ({human_bytes(c.offloaded_bytes)})",
        "click: anchors, summary and offloaded results below",
    ]
    if c.error:
        lines.append(f"error: {html.escape(c.error[:120])}")
    return "<br>".join(lines)


def cost_figure(data: ReportData) -> Any:
    """Cumulative cost (top) and cost per call (bottom), with and without compaction."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.62, 0.38], vertical_spacing=0.06)
    series = [("with compaction", data.cost, "#222", "solid")]
    if data.baseline_cost:
        series.append(("without compaction", data.baseline_cost, RAW_COLOUR, "dash"))
    for name, costs, colour, dash in series:
        fig.add_trace(
            go.Scatter(
                x=data.calls,
                y=list(itertools.accumulate(costs)),
                mode="lines",
                name=f"cumulative, {name}",
                line=dict(color=colour, width=2, dash=dash),
                hovertemplate="call %{x}<br>$%{y:.4f} so far<extra></extra>",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=data.calls,
                y=costs,
                mode="lines",
                name=f"per call, {name}",
                line=dict(color=colour, width=1, dash=dash),
                hovertemplate="call %{x}<br>$%{y:.5f}<extra></extra>",
            ),
            row=2,
            col=1,
        )
    for c in data.compactions:
        if c.summarized:
            fig.add_vline(x=c.x, line_color=TIER_COLOURS.get(c.tier, "#333"), line_width=1, opacity=0.35)
    _overflow_marker(fig, data, row="all", col=1)
    fig.update_layout(
        template="plotly_white",
        height=480,
        hovermode="x unified",
        margin=dict(l=60, r=30, t=30, b=40),
        legend=dict(orientation="h", y=-0.14, x=0),
    )
    fig.update_yaxes(title_text="US dollars, cumulative", rangemode="tozero", tickprefix="$", row=1, col=1)
    fig.update_yaxes(title_text="US dollars per call", rangemode="tozero", tickprefix="$", row=2, col=1)
    fig.update_xaxes(title_text="LLM call", row=2, col=1)
    return fig


def _categories(data: ReportData) -> list[str]:
    return [f"#{n} {c.tier.label} · {c.x}" for n, c in enumerate(data.compactions, 1)]


def before_after_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    names = _categories(data)
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=names,
            y=[c.tokens_before for c in data.compactions],
            name="tokens before",
            marker_color="#c4c4c4",
            offsetgroup="before",
            hovertemplate="%{x}<br>before %{y:,}<extra></extra>",
        )
    )
    labelled = len(data.compactions) <= MAX_BAR_LABELS
    for tier, colour in TIER_COLOURS.items():
        points = [(name, c) for name, c in zip(names, data.compactions, strict=True) if c.tier is tier]
        if not points:
            continue
        fig.add_trace(
            go.Bar(
                x=[name for name, _ in points],
                y=[c.tokens_after for _, c in points],
                name=f"tokens after, {tier.label}",
                marker_color=colour,
                offsetgroup="after",
                text=[f"−{c.ratio:.0%}" for _, c in points] if labelled else None,
                textposition="outside",
                textangle=0,
                textfont=dict(size=12, color="#222"),
                cliponaxis=False,
                customdata=[f"{c.ratio:.0%}" for _, c in points],
                hovertemplate="%{x}<br>after %{y:,} (%{customdata} removed)<extra></extra>",
            )
        )
    top = max([c.tokens_before for c in data.compactions], default=0)
    fig.update_layout(
        barmode="group",
        xaxis_title="compaction (# tier · " + ("call)" if data.kind == "replay" else "record)"),
        yaxis_title="tokens",
        template="plotly_white",
        height=420,
        margin=dict(l=60, r=50, t=50, b=40),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0),
        modebar=dict(orientation="v"),
        xaxis=dict(categoryorder="array", categoryarray=names),
    )
    if top:
        fig.update_yaxes(range=[0, top * 1.12])
    _empty_note(fig, data)
    return fig


def offload_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    names = _categories(data)
    sizes = [c.offloaded_bytes / 1000 for c in data.compactions]
    running = list(itertools.accumulate(sizes))
    fig = go.Figure()
    for tier, colour in TIER_COLOURS.items():
        points = [(name, c) for name, c in zip(names, data.compactions, strict=True) if c.tier is tier and c.offloads]
        if not points:
            continue
        fig.add_trace(
            go.Bar(
                x=[name for name, _ in points],
                y=[c.offloaded_bytes / 1000 for _, c in points],
                name=f"offloaded at a {tier.label} compaction (KB)",
                marker_color=colour,
                offsetgroup="offloaded",
                customdata=[c.offloads for _, c in points],
                hovertemplate="%{x}<br>%{customdata} results, %{y:,.1f} KB<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=names,
            y=running,
            name="running total (KB)",
            mode="lines+markers",
            line=dict(color="#222"),
            hovertemplate="%{x}<br>%{y:,.1f} KB in total<extra></extra>",
        )
    )
    fig.update_layout(
        xaxis_title="compaction (# tier · " + ("call)" if data.kind == "replay" else "record)"),
        template="plotly_white",
        height=380,
        margin=dict(l=60, r=50, t=50, b=40),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0),
        modebar=dict(orientation="v"),
        xaxis=dict(categoryorder="array", categoryarray=names),
    )
    fig.update_yaxes(title_text="KB (thousands of characters)", rangemode="tozero")
    _empty_note(fig, data)
    return fig


def _empty_note(fig: Any, data: ReportData, needs_series: bool = False) -> None:
    if not data.compactions and not (needs_series and data.view_tokens):
        fig.add_annotation(
            text="no compaction changed the view", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper"
        )


def comparison_view_figure(runs: Sequence[ReportData]) -> Any:
    """View tokens per call of every run of one session, the raw history once, each run's window."""
    import plotly.graph_objects as go

    fig = go.Figure()
    first = runs[0]
    if first.raw_tokens:
        fig.add_trace(
            go.Scatter(
                x=first.calls,
                y=first.raw_tokens,
                mode="lines",
                name="raw history (no compaction)",
                line=dict(color=RAW_COLOUR, width=1.5, dash="dash"),
                hovertemplate="call %{x}<br>raw history %{y:,} tokens<extra></extra>",
            )
        )
    windows = sorted({r.context_window for r in runs if r.context_window})
    for window in windows:
        fig.add_hline(y=window, line_dash="dash", line_color="#444", line_width=1)
        fig.add_annotation(
            x=1.0,
            xref="paper",
            xanchor="left",
            xshift=6,
            y=window,
            yref="y",
            text=f"window {human_tokens(window)}",
            showarrow=False,
            font=dict(color="#444", size=11),
        )
    for n, run in enumerate(runs):
        colour = RUN_COLOURS[n % len(RUN_COLOURS)]
        fig.add_trace(
            go.Scatter(
                x=run.calls,
                y=run.view_tokens,
                mode="lines",
                name=run.label or run.title,
                line=dict(color=colour, width=1.8),
                hovertemplate=f"{html.escape(run.label)}<br>call %{{x}}<br>view %{{y:,}} tokens<extra></extra>",
            )
        )
    peaks = [*(v for r in runs for v in r.view_tokens), *windows]
    raw_shown = [v for v in first.raw_tokens if not windows or v <= 2 * max(windows)]
    top = max([*peaks, *raw_shown, 1]) * 1.05
    fig.update_layout(
        xaxis_title="LLM call",
        yaxis_title="tokens",
        template="plotly_white",
        height=440,
        margin=dict(l=60, r=90, t=30, b=40),
        legend=dict(orientation="h", y=-0.18, x=0),
        hovermode="closest",
    )
    fig.update_yaxes(range=[0, top])
    return fig


def comparison_cost_figure(runs: Sequence[ReportData]) -> Any:
    """Cumulative cost of every run of one session, and the no-compaction baseline once."""
    import plotly.graph_objects as go

    fig = go.Figure()
    first = runs[0]
    if first.baseline_cost:
        fig.add_trace(
            go.Scatter(
                x=first.calls,
                y=list(itertools.accumulate(first.baseline_cost)),
                mode="lines",
                name="without compaction",
                line=dict(color=RAW_COLOUR, width=1.5, dash="dash"),
                hovertemplate="call %{x}<br>$%{y:.4f} so far<extra></extra>",
            )
        )
    for n, run in enumerate(runs):
        fig.add_trace(
            go.Scatter(
                x=run.calls,
                y=list(itertools.accumulate(run.cost)),
                mode="lines",
                name=run.label or run.title,
                line=dict(color=RUN_COLOURS[n % len(RUN_COLOURS)], width=1.8),
                hovertemplate=f"{html.escape(run.label)}<br>call %{{x}}<br>$%{{y:.4f}} so far<extra></extra>",
            )
        )
    fig.update_layout(
        xaxis_title="LLM call",
        yaxis_title="US dollars, cumulative",
        template="plotly_white",
        height=380,
        margin=dict(l=60, r=30, t=30, b=40),
        legend=dict(orientation="h", y=-0.22, x=0),
        hovermode="x unified",
    )
    fig.update_yaxes(rangemode="tozero", tickprefix="$")
    return fig


# --- the page ---------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 1.5rem auto;
       max-width: 1200px; color: #222; padding: 0 1rem; line-height: 1.4; }
h1 { font-size: 1.45rem; margin-bottom: .2rem; overflow-wrap: anywhere; }
h2 { font-size: 1.15rem; margin-top: 2rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
h3 { font-size: 1rem; margin: 1.2rem 0 .4rem; overflow-wrap: anywhere; }
.meta { color: #666; margin-top: 0; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: .88rem; }
td, th { padding: .22rem .6rem; border-bottom: 1px solid #e6e6e6; text-align: left; vertical-align: top; }
th { font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.tables { display: flex; flex-wrap: wrap; gap: 1.5rem 3rem; align-items: flex-start; }
.tables table.summary td { overflow-wrap: anywhere; }
.tier { font-weight: 600; white-space: nowrap; } td.where { white-space: nowrap; }
p.note { color: #555; font-size: .88rem; max-width: 62rem; }
details.panel { border: 1px solid #ddd; border-radius: 6px; margin: .5rem 0; background: #fcfcfc; }
details.panel > summary { cursor: pointer; padding: .45rem .7rem; font-size: .92rem; }
details.panel[open] > summary { border-bottom: 1px solid #e4e4e4; background: #f4f6f8; }
details.panel .body { padding: .3rem .9rem .8rem; }
details.panel h4 { font-size: .9rem; margin: .8rem 0 .3rem; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; font-size: .8rem; background: #f6f6f6;
      border-radius: 4px; padding: .45rem .6rem; margin: .2rem 0; max-height: 18rem; overflow-y: auto; }
table.anchors { width: 100%; } table.anchors th { white-space: nowrap; width: 10rem; }
table.anchors td pre { max-height: 9rem; }
code.cmd { font-size: .8rem; background: #eef2f6; padding: .05rem .3rem; border-radius: 3px;
           overflow-wrap: anywhere; }
.lost { color: #9a5b00; } .kept { color: #2a7a2a; } .err { color: #b00020; }
.na { color: #999; }
@media (max-width: 900px) { table.compactions td, table.compactions th { padding: .2rem .35rem; } }
table.overview tr.group th { background: #f1f3f5; font-weight: 600; overflow-wrap: anywhere; }
"""

_SCRIPT = """
(function () {
  function openPanel(id, scroll) {
    var el = document.getElementById(id);
    if (!el) return;
    el.open = true;
    if (scroll) el.scrollIntoView({block: "start"});
  }
  if (location.hash) openPanel(location.hash.slice(1), true);
  window.addEventListener("hashchange", function () { openPanel(location.hash.slice(1), true); });
  document.querySelectorAll(".js-plotly-plot").forEach(function (plot) {
    if (!plot.on) return;
    plot.on("plotly_click", function (event) {
      var point = event.points && event.points[0];
      if (point && typeof point.customdata === "string" && point.customdata.indexOf("compaction-") >= 0) {
        openPanel(point.customdata, true);
      }
    });
  });
})();
"""


def _table(rows: Sequence[tuple[str, str]], cls: str = "summary") -> str:
    body = "".join(f"<tr><th>{html.escape(k)}</th><td class=num>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table class={cls}>{body}</table>"


def price_table(prices: PriceTable) -> str:
    """The price table the costs use, with its units."""
    rows = [
        ("input (uncached)", prices.input if prices.cache_write is None else prices.cache_write),
        ("input read from the prompt cache", prices.cached_input),
        ("output", prices.output),
        ("summarizer input", prices.summarizer_input),
        (
            "summarizer input read from the prompt cache",
            prices.cached_input if prices.summarizer_cached_input is None else prices.summarizer_cached_input,
        ),
        ("summarizer output", prices.summarizer_output),
    ]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td class=num>${v:,.2f}</td></tr>" for k, v in rows)
    return (
        "<table class=prices><caption style='text-align:left;font-weight:600;padding-bottom:.3rem'>"
        "Prices (US dollars per million tokens)</caption>"
        f"<tr><th>tokens</th><th class=num>$ / 1M</th></tr>{body}</table>"
    )


def _panel_id(data: ReportData, c: Compaction) -> str:
    """``compaction-{run}-{x}``: the run's name, other characters than ASCII letters and digits as
    ``-`` (a browser gives the page's script a link's other characters percent-encoded); a long
    name is cut, and to a cut name or one that was not ASCII a digest of it whole is added, so
    that two runs never share an id."""
    name = data.name
    key = "".join(ch if ch.isascii() and ch.isalnum() else "-" for ch in name)
    if len(key) > 60 or not name.isascii():
        key = f"{key[:48]}-{hashlib.blake2b(name.encode('utf-8', 'surrogatepass'), digest_size=4).hexdigest()}"
    return f"compaction-{key}-{c.x}"


def _compaction_table(data: ReportData) -> str:
    if not data.compactions:
        return "<p class=note>No compaction changed the view.</p>"
    legend = (
        "<p class=note>cut: share of the view's tokens removed; summ.: messages folded into the summary; "
        "lost: facts of the probe set no longer in the view (replays only).</p>"
    )
    where = "call (message)" if data.kind == "replay" else "record"
    head = (
        f"<tr><th class=num>#</th><th>{where}</th><th>tier</th><th class=num>tokens</th>"
        "<th class=num title='share of the view removed'>cut</th>"
        "<th class=num title='messages folded into the summary'>summ.</th><th class=num>offloads</th>"
        "<th class=num title='facts of the probe set no longer in the view'>lost</th>"
        "<th class=num>errors</th></tr>"
    )
    rows = []
    for n, c in enumerate(data.compactions, 1):
        colour = TIER_COLOURS.get(c.tier, "#333")
        lost = "-" if c.lost is None else str(sum(len(v) for v in c.lost.values()))
        rows.append(
            f"<tr><td class=num>{n}</td><td class=where><a href='#{_panel_id(data, c)}'>{html.escape(c.label)}</a></td>"
            f"<td class=tier style='color:{colour}'>{html.escape(tier_label(c.record))}</td>"
            f"<td class=num>{human_tokens(c.tokens_before)} → {human_tokens(c.tokens_after)}</td>"
            f"<td class=num>{c.ratio:.0%}</td><td class=num>{c.summarized}</td>"
            f"<td class=num>{c.offloads} ({human_bytes(c.offloaded_bytes)})</td>"
            f"<td class=num>{lost}</td><td class='num err' title='{html.escape(c.error, quote=True)}'>"
            f"{len(c.record.errors) or ''}</td></tr>"
        )
    return f"<div class=scroll><table class=compactions>{head}{''.join(rows)}</table></div>{legend}"


def _show_command(data: ReportData, handle: str) -> str:
    import shlex

    parts = ["compactor", "show", handle]
    for option, value in data.show.items():
        parts += [option, value]
    return " ".join(shlex.quote(p) for p in parts)


def _panel(data: ReportData, n: int, c: Compaction) -> str:
    r = c.record
    colour = TIER_COLOURS.get(c.tier, "#333")
    head = (
        f"<b>#{n}</b> <span class=tier style='color:{colour}'>{html.escape(tier_label(r))}</span> at "
        f"{html.escape(c.label)}: {human_tokens(c.tokens_before)} → {human_tokens(c.tokens_after)} tokens "
        f"({c.ratio:.0%} smaller), {c.summarized} messages summarized, {c.offloads} offloaded"
    )
    parts = [f"<pre>{html.escape(notice(r))}</pre>"]
    if r.anchors:
        rows = "".join(
            f"<tr><th>{html.escape(a.type.heading)}</th><td>"
            + ("<span class=na>N/A</span>" if a.is_empty else f"<pre>{html.escape(a.content)}</pre>")
            + "</td></tr>"
            for a in r.anchors
        )
        parts.append(f"<h4>Anchors</h4><table class=anchors>{rows}</table>")
    if r.summary_text.strip():
        parts.append(f"<h4>Summary</h4><pre>{html.escape(r.summary_text.strip())}</pre>")
    if r.offloaded:
        gone = "" if data.show else " (the replay's folder was temporary: keep it with --keep DIR to read them)"
        rows = "".join(
            f"<tr><td><code class=cmd>{html.escape(_show_command(data, e.handle) if data.show else e.handle)}"
            f"</code></td><td class=num>{e.chars:,}</td><td class=num>{e.lines:,}</td></tr>"
            + (
                f"<tr><td colspan=3><details><summary>what the view kept of it</summary>"
                f"<pre>{html.escape(e.placeholder)}</pre></details></td></tr>"
                if e.placeholder
                else ""
            )
            for e in r.offloaded
        )
        parts.append(
            f"<h4>Offloaded tool results ({len(r.offloaded)}){html.escape(gone)}</h4><div class=scroll><table>"
            f"<tr><th>{'command that prints it' if data.show else 'handle'}</th><th class=num>characters</th>"
            f"<th class=num>lines</th></tr>{rows}</table></div>"
        )
    if c.lost is not None:
        missing = [(k, v) for k, values in c.lost.items() for v in values]
        if missing:
            items = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in missing)
            parts.append(
                f"<h4 class=lost>Facts of the probe set no longer in the view ({len(missing)})</h4><ul>{items}</ul>"
            )
        else:
            parts.append("<h4 class=kept>Facts of the probe set: all still in the view</h4>")
    if r.errors:
        items = "".join(f"<li>{html.escape(e)}</li>" for e in r.errors)
        parts.append(f"<h4 class=err>Errors</h4><ul>{items}</ul>")
    if r.escalations:
        items = "".join(f"<li>{html.escape(e)}</li>" for e in r.escalations)
        parts.append(f"<h4>Loop guard (normal escalation, not an error)</h4><ul>{items}</ul>")
    return (
        f"<details class=panel id='{_panel_id(data, c)}'><summary>{head}</summary>"
        f"<div class=body>{''.join(parts)}</div></details>"
    )


def _panels(data: ReportData) -> str:
    return "".join(_panel(data, n, c) for n, c in enumerate(data.compactions, 1))


def _view_note(data: ReportData) -> str:
    """What the view chart draws, and only that."""
    said = []
    if data.view_tokens:
        said.append("The black line is the view sent at each call; the dotted green line the part of it equal to")
        said.append("the previous call's view (what a provider's prompt cache would serve).")
    if data.raw_tokens:
        said.append("The grey dashed line is the raw history: the view each call would have sent without compaction")
        at = data.overflow_call
        said.append(
            f"(it passes the window at call {at}, where the dotted vertical line is)."
            if at
            else "(it never passes the window)."
        )
    if data.thresholds and data.context_window:
        said.append("The shaded bands are the policy's thresholds, labelled on the right.")
    if data.compactions:
        said.append(
            "Each triangle is a compaction, coloured by tier, with a line down to the tokens after it; click one for"
            " its anchors, summary and offloaded results."
        )
    else:
        said.append("No compaction changed the view.")
    if data.kind == "records":
        said.append("Records are kept for compactions only, so there is no line per call.")
    return " ".join(said)


def _figure_html(fig: Any, first: bool, div_id: str | None = None) -> str:
    import plotly.io as pio

    return str(
        pio.to_html(
            fig,
            full_html=False,
            include_plotlyjs=first,
            include_mathjax=False,
            config={"displaylogo": False, "responsive": True},
            div_id=div_id,
        )
    )


class _Figures:
    """Writes plotly.js once, before the first chart."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, fig: Any) -> str:
        self.count += 1
        return _figure_html(fig, self.count == 1)


def _single(data: ReportData, figure: _Figures) -> str:
    side = [_table(data.summary)] if data.summary else []
    if data.prices is not None and data.kind == "replay":
        side.append(price_table(data.prices))
    out = [f"<div class=tables>{''.join(side)}</div>"]
    what = "call" if data.kind == "replay" else "record"
    out.append(f"<h2>View tokens per {what}</h2><p class=note>{html.escape(_view_note(data))}</p>")
    out.append(figure(view_figure(data)))
    if data.cost and data.kind == "replay":
        note = (
            "What each call is billed (the view, the model's answer and any summary), at the prices above, "
            "and in total so far"
        )
        if data.baseline_cost:
            note += "; the grey dashed lines are the same calls sent with the raw history, cached the same way"
            at = data.overflow_call
            if at:
                note += (
                    f". Past call {at} the raw history no longer fits the window, so a model could not be called"
                    " with it: from there the baseline is what it would cost if the window allowed it"
                )
        note += ". The faint vertical lines are the compactions that wrote a summary."
        out.append(f"<h2>Cost per call and in total</h2><p class=note>{html.escape(note)}</p>")
        out.append(figure(cost_figure(data)))
    out.append("<h2>Tokens before and after each compaction</h2>")
    if len(data.compactions) > MAX_BAR_LABELS:
        out.append(
            f"<p class=note>{len(data.compactions)} compactions: the share removed is in the hover and the table.</p>"
        )
    out.append(figure(before_after_figure(data)))
    out.append("<h2>Offloaded tool results</h2>")
    out.append(figure(offload_figure(data)))
    out.append("<h2>Compactions</h2>")
    out.append(_compaction_table(data))
    if data.compactions:
        out.append(
            "<p class=note>Each compaction in detail: open a panel (or click a triangle on the first chart).</p>"
        )
        out.append(_panels(data))
    return "\n".join(out)


def _overview(runs: Sequence[ReportData]) -> str:
    """A row per run, grouped under a row per session."""
    columns = 9
    head = (
        "<tr><th>run</th><th class=num>window</th><th class=num>calls</th>"
        "<th class=num>compactions</th><th class=num>peak view</th><th class=num>overflows</th>"
        "<th class=num>billed cost</th><th class=num>vs. no compaction</th>"
        f"<th class=num title='{' / '.join(CATEGORIES)}'>facts kept ({' / '.join(SHORT_NAMES[c] for c in CATEGORIES)})</th></tr>"
    )
    rows = []
    session = None
    for run in runs:
        if run.session != session:
            session = run.session
            rows.append(f"<tr class=group><th colspan={columns}>{html.escape(session)}</th></tr>")
        total = sum(run.cost)
        baseline = sum(run.baseline_cost)
        peak = max(run.view_tokens, default=0)
        window = run.context_window
        retention = run.retention or {}
        kept = " / ".join("-" if retention.get(c) is None else f"{retention[c]:.0%}" for c in CATEGORIES)
        rows.append(
            f"<tr><td class=where>{html.escape(run.label or run.title)}</td>"
            f"<td class=num>{f'{window:,}' if window else '-'}</td><td class=num>{len(run.calls) or '-'}</td>"
            f"<td class=num>{len(run.compactions)}</td>"
            f"<td class=num>{f'{peak:,} ({peak / window:.0%})' if peak and window else '-'}</td>"
            f"<td class=num>{run.overflows if run.kind == 'replay' else '-'}</td>"
            f"<td class=num>{f'${total:.4f}' if run.cost else '-'}</td>"
            f"<td class=num>{f'{(total - baseline) / baseline:+.1%}' if baseline else '-'}</td>"
            f"<td class=num>{kept if run.retention is not None else '-'}</td></tr>"
        )
    return f"<div class=scroll><table class=overview>{head}{''.join(rows)}</table></div>"


def _thresholds_note(runs: Sequence[ReportData]) -> str:
    """The policy's thresholds of each run label, once per distinct set."""
    seen: dict[str, list[str]] = {}
    for run in runs:
        shares = (
            ", ".join(f"{name} {share:.0%}" for name, share in run.thresholds.items()) or "none given by the policy"
        )
        names = seen.setdefault(shares, [])
        label = run.label or run.title
        if label not in names:
            names.append(label)
    if len(seen) == 1:
        return f"thresholds {next(iter(seen))} of the window"
    return (
        "thresholds "
        + "; ".join(f"{', '.join(names)}: {shares}" for shares, names in seen.items())
        + " (of the window)"
    )


def _multi(runs: Sequence[ReportData], figure: _Figures) -> str:
    out = ["<h2>Every run</h2>", _overview(runs)]
    out.append(
        "<p class=note>A run is one session replayed under one config and window (or read from records). "
        "Billed cost at each run's price table; 'vs. no compaction' compares it with the same calls sent "
        "with the raw history; 'kept' is the share of the probe set's facts in the final view.</p>"
    )
    prices = {r.prices for r in runs if r.prices is not None}
    if len(prices) == 1:
        out.append(f"<div class=tables>{price_table(next(iter(prices)))}</div>")
    sessions: dict[str, list[ReportData]] = {}
    for run in runs:
        sessions.setdefault(run.session, []).append(run)
    for session, group in sessions.items():
        out.append(f"<h2>{html.escape(session)}</h2>")
        replays = [r for r in group if r.kind == "replay"]
        if len(replays) > 1:
            out.append(
                "<p class=note>View tokens per call of each run; the grey dashed line is the raw history, the "
                "dashed black lines the windows.</p>"
            )
            out.append(figure(comparison_view_figure(replays)))
            if any(r.cost for r in replays):
                out.append(
                    "<p class=note>Cumulative billed cost of each run, and of the same calls without compaction.</p>"
                )
                out.append(figure(comparison_cost_figure(replays)))
        for run in group:
            name = run.label or run.title
            out.append(f"<h3>{html.escape(name)}</h3>")
            if len(replays) <= 1 or run.kind != "replay":
                out.append(f"<p class=note>{html.escape(_view_note(run))}</p>")
                out.append(figure(view_figure(run)))
            if run.summary:
                out.append(
                    f"<details class=panel><summary>Summary of this run</summary><div class=body>"
                    f"{_table(run.summary)}</div></details>"
                )
            out.append(_compaction_table(run))
            out.append(_panels(run))
        if len(prices) > 1:
            for run in group:
                if run.prices is not None:
                    out.append(f"<div class=tables>{price_table(run.prices)}</div>")
    return "\n".join(out)


def render_page(runs: Sequence[ReportData], title: str | None = None) -> str:
    """The whole page for one run or several (a comparison), as one self-contained string."""
    require_plotly()
    from .. import __version__

    if not runs:
        raise ReportError("nothing to report")
    figure = _Figures()
    body = _single(runs[0], figure) if len(runs) == 1 else _multi(runs, figure)
    if figure.count == 0:  # plotly.js must be in the page for the script; a page without charts has none
        body = _figure_html(_blank(), True) + body
    first = runs[0]
    heading = title or (f"Compaction report: {first.title}" if len(runs) == 1 else "Compaction comparison")
    kinds = {r.kind for r in runs}
    source = []
    if "replay" in kinds:
        source.append("sessions replayed call by call: one point per simulated LLM call")
    if "records" in kinds:
        source.append("stored compaction records: one point per record")
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    runs_note = "" if len(runs) == 1 else f" {len(runs)} runs."
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(heading)}</title><style>{_CSS}</style></head>
<body>
<h1>{html.escape(heading)}</h1>
<p class=meta>{html.escape("; ".join(source))}; {html.escape(_thresholds_note(runs))}.{runs_note}
Generated {generated} by progressive-compactor {html.escape(__version__)}.</p>
{body}
<script>{_SCRIPT}</script>
</body></html>
"""


def _blank() -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.update_layout(height=10, margin=dict(l=0, r=0, t=0, b=0), xaxis_visible=False, yaxis_visible=False)
    return fig


def render_html(data: ReportData) -> str:
    """The page of one run (see :func:`render_page`)."""
    return render_page([data])
