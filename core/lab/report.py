"""The HTML report of ``compactor report``: charts of a replayed session or of stored records.

One self-contained page: plotly's JavaScript is written inline (no CDN, no network needed to open
it), with three charts and two tables:

1. view tokens per LLM call, with the four threshold bands of the policy (Warn, Soft, Full,
   Emergency) and each compaction marked by its tier as a drop from the tokens before to the
   tokens after;
2. tokens before and after each compaction;
3. offloaded size per compaction, and its running total.

plotly is an optional extra (``pip install progressive-compactor[report]``) and is imported only
when a report is drawn.
"""

from __future__ import annotations

import html
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

import attrs

from ..errors import CompactorError
from ..models import CompactionRecord, CompactionTier
from ..notice import human_bytes, human_tokens

INSTALL_HINT = "pip install 'progressive-compactor[report]'"
TIER_COLOURS = {
    CompactionTier.WARN: "#d4a000",
    CompactionTier.SOFT: "#1f9bb4",
    CompactionTier.FULL: "#8e44ad",
    CompactionTier.EMERGENCY: "#d62728",
}
TIER_NAMES = {t.name.lower(): t for t in TIER_COLOURS}


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


@attrs.frozen
class Compaction:
    """One compaction as the charts need it. ``x`` is the LLM call number (or record number)."""

    x: int
    tier: CompactionTier
    tokens_before: int
    tokens_after: int
    offloads: int
    offloaded_bytes: int
    summarized: int
    ratio: float
    error: str = ""
    label: str = ""


@attrs.frozen
class ReportData:
    """Everything the page shows, independent of where it came from (replay or records)."""

    title: str
    kind: str
    """``replay`` (a session replayed: one point per LLM call) or ``records`` (stored records)."""
    context_window: int
    thresholds: Mapping[str, float]
    calls: tuple[int, ...] = ()
    view_tokens: tuple[int, ...] = ()
    cache_stable_tokens: tuple[int, ...] = ()
    message_index: tuple[int, ...] = ()
    compactions: tuple[Compaction, ...] = ()
    summary: tuple[tuple[str, str], ...] = ()


def changed_view(record: CompactionRecord) -> bool:
    """Whether a compaction did something: a Warn turn with nothing to offload does not.

    Such turns are counted per tier, but not charted or announced: they would bury the
    compactions that changed what the model sees.
    """
    return bool(
        record.offloaded
        or record.summarized
        or record.errors
        or record.fallback
        or record.tokens_after != record.tokens_before
    )


def _compaction(x: int, record: CompactionRecord, label: str) -> Compaction:
    return Compaction(
        x=x,
        tier=record.tier,
        tokens_before=record.tokens_before,
        tokens_after=record.tokens_after,
        offloads=len(record.offloaded),
        offloaded_bytes=sum(e.chars for e in record.offloaded),
        summarized=record.summarized,
        ratio=record.compression_ratio,
        error="; ".join(record.errors),
        label=label,
    )


def from_replay(
    result: Any, thresholds: Mapping[str, float], title: str, summary: Mapping[str, Any] | None = None
) -> ReportData:
    """Report data of a :class:`~progressive_compactor.lab.replay.ReplayResult`."""
    turns = result.turns
    compactions = tuple(
        _compaction(n, t.record, f"call {n} (message {t.index})")
        for n, t in enumerate(turns, 1)
        if t.tier is not CompactionTier.NONE and changed_view(t.record)
    )
    return ReportData(
        title=title,
        kind="replay",
        context_window=result.context_window,
        thresholds=dict(thresholds),
        calls=tuple(range(1, len(turns) + 1)),
        view_tokens=tuple(t.view_tokens for t in turns),
        cache_stable_tokens=tuple(t.cache_stable_tokens for t in turns),
        message_index=tuple(t.index for t in turns),
        compactions=compactions,
        summary=_summary_rows(summary) if summary else (),
    )


def from_records(records: Sequence[CompactionRecord], thresholds: Mapping[str, float], title: str) -> ReportData:
    """Report data of stored records: compactions only (records of tier None are usually not stored)."""
    if not records:
        raise ReportError("no records to chart")
    window = next((r.context_window for r in reversed(records) if r.context_window), 0)
    compactions = tuple(
        _compaction(n, r, f"record {n} ({r.timestamp[:19].replace('T', ' ')})")
        for n, r in enumerate(records, 1)
        if r.tier is not CompactionTier.NONE and changed_view(r)
    )
    counts = {t: sum(1 for r in records if r.tier is t) for t in TIER_COLOURS}
    rows = [
        ("records", str(len(records))),
        ("compactions that changed the view", str(len(compactions))),
        ("sessions", ", ".join(sorted({r.session_id for r in records}))),
        ("context window", f"{window:,}" if window else "not recorded"),
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
    )


def _summary_rows(s: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    window = s["context_window"]
    rows = [
        ("session", str(s["session"])),
        ("context window", f"{window:,}"),
        ("LLM calls (turns)", f"{s['turns']:,}"),
        *[(f"turns at tier {k.capitalize()}", str(n)) for k, n in s["tiers"].items() if k != "none"],
        ("compactions that changed the view", str(s["view_changing_compactions"])),
        ("peak view tokens", f"{s['peak_view_tokens']:,} ({s['peak_view_tokens'] / window:.0%} of the window)"),
        ("total input tokens sent", f"{s['total_input_tokens']:,}"),
        ("cache-stable input tokens", f"{s['cache_stable_tokens']:,}"),
        ("overflows (view > window)", str(s["overflows"])),
        ("offloads", f"{s['offloads']} ({human_bytes(s['offloaded_bytes'])})"),
        ("summarizer calls", str(s["summarizer_calls"])),
        ("invalid views", str(s["invalid_views"])),
    ]
    if s.get("retention"):
        kept = [f"{k} {v:.0%}" for k, v in s["retention"].items() if v is not None]
        rows.append(("facts kept in the final view", ", ".join(kept) or "-"))
    if s.get("cost_usd"):
        rows.append(("billed cost (price table of the config)", f"${s['cost_usd']['total']:.4f}"))
    return tuple(rows)


# --- charts -----------------------------------------------------------------------------------


def _band_top(data: ReportData) -> float:
    peaks = [data.context_window, *data.view_tokens, *(c.tokens_before for c in data.compactions)]
    return max(peaks) * 1.05


def view_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    window = data.context_window
    if window:
        top = _band_top(data)
        for tier, low, high in bands(data.thresholds):
            y0 = low * window
            y1 = high * window if high is not None else top
            fig.add_hrect(
                y0=y0,
                y1=y1,
                fillcolor=TIER_COLOURS[tier],
                opacity=0.12,
                line_width=0,
                layer="below",
                annotation_text=f"{tier.label} ≥ {low:.0%}",
                annotation_position="top left",
                annotation_font_color=TIER_COLOURS[tier],
            )
        fig.add_hline(
            y=window,
            line_dash="dash",
            line_color="#444",
            annotation_text=f"context window {human_tokens(window)}",
            annotation_position="top right",
        )
    if data.view_tokens:
        fig.add_trace(
            go.Scatter(
                x=data.calls,
                y=data.view_tokens,
                customdata=data.message_index,
                mode="lines",
                name="view tokens sent",
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
                hovertemplate="%{text}<extra></extra>",
            )
        )
    x_title = "LLM call (turn)" if data.kind == "replay" else "record"
    fig.update_layout(
        title="View tokens per turn, threshold bands and compactions",
        xaxis_title=x_title,
        yaxis_title="tokens",
        hovermode="closest",
        template="plotly_white",
        height=480,
        legend=dict(orientation="h", y=-0.18),
    )
    return fig


def _hover(c: Compaction) -> str:
    lines = [
        f"<b>{c.tier.label}</b> at {html.escape(c.label)}",
        f"{human_tokens(c.tokens_before)} → {human_tokens(c.tokens_after)} tokens ({c.ratio:.0%} removed)",
        f"{c.summarized} summarized, {c.offloads} offloaded ({human_bytes(c.offloaded_bytes)})",
    ]
    if c.error:
        lines.append(f"error: {html.escape(c.error[:120])}")
    return "<br>".join(lines)


def _categories(data: ReportData) -> list[str]:
    return [f"#{n} {c.tier.label} @{c.x}" for n, c in enumerate(data.compactions, 1)]


def before_after_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go

    names = _categories(data)
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=names,
            y=[c.tokens_before for c in data.compactions],
            name="tokens before",
            marker_color="#b0b0b0",
            hovertemplate="%{x}<br>before %{y:,}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Bar(
            x=names,
            y=[c.tokens_after for c in data.compactions],
            name="tokens after (colour: tier)",
            marker_color=[TIER_COLOURS.get(c.tier, "#333") for c in data.compactions],
            text=[f"-{c.ratio:.0%}" for c in data.compactions],
            textposition="outside",
            hovertemplate="%{x}<br>after %{y:,}<extra></extra>",
        )
    )
    fig.update_layout(
        title="Tokens before and after each compaction",
        barmode="group",
        xaxis_title="compaction (# tier @ call)",
        yaxis_title="tokens",
        template="plotly_white",
        height=420,
    )
    _empty_note(fig, data)
    return fig


def offload_figure(data: ReportData) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = _categories(data)
    sizes = [c.offloaded_bytes / 1000 for c in data.compactions]
    running, total = [], 0.0
    for size in sizes:
        total += size
        running.append(total)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(
        go.Bar(
            x=names,
            y=sizes,
            name="offloaded at this compaction (KB)",
            marker_color=[TIER_COLOURS.get(c.tier, "#333") for c in data.compactions],
            customdata=[c.offloads for c in data.compactions],
            hovertemplate="%{x}<br>%{customdata} results, %{y:,.1f} KB<extra></extra>",
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(x=names, y=running, name="running total (KB)", mode="lines+markers", line=dict(color="#222")),
        secondary_y=True,
    )
    fig.update_layout(
        title="Offloaded tool results (size in KB of characters)",
        xaxis_title="compaction (# tier @ call)",
        template="plotly_white",
        height=380,
    )
    fig.update_yaxes(title_text="KB per compaction", secondary_y=False)
    fig.update_yaxes(title_text="KB in total", secondary_y=True)
    _empty_note(fig, data)
    return fig


def _empty_note(fig: Any, data: ReportData) -> None:
    if not data.compactions:
        fig.add_annotation(
            text="no compaction in this session", showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper"
        )


# --- the page ---------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 2rem auto;
       max-width: 1100px; color: #222; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.meta { color: #666; margin-top: 0; }
table { border-collapse: collapse; font-size: .9rem; }
td, th { padding: .25rem .7rem; border-bottom: 1px solid #e4e4e4; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.tier { font-weight: 600; }
p.note { color: #555; font-size: .9rem; max-width: 60rem; }
"""


def _table(rows: Sequence[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{html.escape(k)}</th><td class=num>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table class=summary>{body}</table>"


def _compaction_table(data: ReportData) -> str:
    if not data.compactions:
        return "<p class=note>No compaction happened.</p>"
    head = (
        "<tr><th class=num>#</th><th>where</th><th>tier</th><th class=num>tokens</th><th class=num>removed</th>"
        "<th class=num>summarized</th><th class=num>offloads</th><th>error</th></tr>"
    )
    rows = []
    for n, c in enumerate(data.compactions, 1):
        colour = TIER_COLOURS.get(c.tier, "#333")
        rows.append(
            f"<tr><td class=num>{n}</td><td>{html.escape(c.label)}</td>"
            f"<td class=tier style='color:{colour}'>{c.tier.label}</td>"
            f"<td class=num>{human_tokens(c.tokens_before)} → {human_tokens(c.tokens_after)}</td>"
            f"<td class=num>{c.ratio:.0%}</td><td class=num>{c.summarized}</td>"
            f"<td class=num>{c.offloads} ({human_bytes(c.offloaded_bytes)})</td>"
            f"<td>{html.escape(c.error)}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def render_html(data: ReportData) -> str:
    """The whole page as one string; plotly.js is inlined once, before the first chart."""
    require_plotly()
    import plotly.io as pio

    from .. import __version__

    chart_config = {"displaylogo": False, "responsive": True}
    figures = [view_figure(data), before_after_figure(data), offload_figure(data)]
    divs = [
        pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0), include_mathjax=False, config=chart_config)
        for i, fig in enumerate(figures)
    ]
    shares = ", ".join(f"{name} {share:.0%}" for name, share in data.thresholds.items()) or "none given by the policy"
    source = (
        "replayed turn by turn: one point per simulated LLM call"
        if data.kind == "replay"
        else "read from stored compaction records: one point per record"
    )
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = html.escape(data.title)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Compaction report: {title}</title><style>{_CSS}</style></head>
<body>
<h1>Compaction report: {title}</h1>
<p class=meta>{html.escape(source)}; thresholds {html.escape(shares)} of the window.
Generated {generated} by progressive-compactor {html.escape(__version__)}.</p>
{_table(data.summary)}
<h2>View tokens per turn</h2>
<p class=note>The black line is the view sent at each call; the shaded bands are the policy's
thresholds; each triangle is a compaction, coloured by tier, dropping from the tokens before to
the tokens after. The dotted green line is the part of each view identical to the previous one
(what a provider's prompt cache would serve).</p>
{divs[0]}
<h2>Tokens before and after each compaction</h2>
{divs[1]}
<h2>Offloaded tool results</h2>
{divs[2]}
<h2>Compactions</h2>
{_compaction_table(data)}
</body></html>
"""
