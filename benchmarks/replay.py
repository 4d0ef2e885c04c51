"""Replay benchmark: every corpus session under every policy at several context windows.

    python benchmarks/replay.py                                   # the tables of benchmarks/README.md
    python benchmarks/replay.py --windows 16000 --policies default,one-threshold
    COMPACTOR_SUMMARIZER_URL=http://localhost:11434/v1 python benchmarks/replay.py   # + default-http

Each session is replayed turn by turn with :func:`progressive_compactor.lab.replay.replay_session`
(the engine ``compactor replay`` and ``compactor ab replay`` use), in a process pool. Printed per
window: invalid views, overflows, peak view, billed cost (default price table of
``progressive_compactor.pricing``) with and without a prompt cache, cached share, summarizer calls
and tokens per call, how often each tier fired, retention per probe category, and the
compactor's own time per call (pooled mean; the summarizer's time excluded); then paired
per-session differences with bootstrap 95 % confidence intervals, and the default config's cost
as a ratio of the baselines'. ``--json FILE`` writes every per-session number.

Policies (bundled configs, see ``configs/``): the baselines ``none``, ``truncation``,
``one-threshold``, ``masking``; ``default``; ``default-cache-friendly`` (the default config with
``summary_requests: cache-friendly``); ``classic`` (the 60/70/80/95 % tiers); ``cache-aware``;
``default-http`` (the ``ollama`` config's ``summarize-openai`` plugin, only when
``COMPACTOR_SUMMARIZER_URL`` or ``--summarizer-url`` is set; ``COMPACTOR_SUMMARIZER_MODEL``,
default ``llama3.1:8b``; ``COMPACTOR_SUMMARIZER_KEY_ENV`` names the variable holding an API key,
if the server wants one). Variants of the classic tiers are listed in ``CANDIDATES``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from progressive_compactor.lab.probes import CATEGORIES

POLICIES: dict[str, tuple[str, dict[str, Any]]] = {
    "none": ("baseline-none", {}),
    "truncation": ("baseline-truncation", {}),
    "one-threshold": ("baseline-one-threshold", {}),
    "masking": ("baseline-masking", {}),
    "default": ("default", {}),
    "default-cache-friendly": ("default", {"summary_requests": "cache-friendly"}),
    "classic": ("classic", {}),
    "cache-aware": ("cache-aware", {}),
}
CANDIDATES: dict[str, tuple[str, dict[str, Any]]] = {
    # The classic tiers without Soft: Warn offloads at 60 %, Full summarizes the whole head at 80 %.
    "classic-no-soft": (
        "classic",
        {"config": {"policy-thresholds": {"warn": 0.60, "soft": 0.80, "full": 0.80, "emergency": 0.95}}},
    ),
    # No Warn tier: Soft at 70 %, Full at 80 %.
    "classic-no-warn": (
        "classic",
        {"config": {"policy-thresholds": {"warn": 0.70, "soft": 0.70, "full": 0.80, "emergency": 0.95}}},
    ),
    # Full alone at 80 % (offload, then summarize the whole head), Emergency at 95 %.
    "classic-full-only": (
        "classic",
        {"config": {"policy-thresholds": {"warn": 0.80, "soft": 0.80, "full": 0.80, "emergency": 0.95}}},
    ),
}
DEFAULT_POLICIES = (
    "none",
    "truncation",
    "one-threshold",
    "masking",
    "default",
    "default-cache-friendly",
    "classic",
    "cache-aware",
)
BASELINES = ("none", "truncation", "one-threshold", "masking")


def corpus_default() -> Path:
    env = os.environ.get("COMPACTOR_CORPUS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "corpus"


def http_policy(url: str) -> tuple[str, dict[str, Any]]:
    key_env = os.environ.get("COMPACTOR_SUMMARIZER_KEY_ENV") or None
    block = {
        "base_url": url,
        "model": os.environ.get("COMPACTOR_SUMMARIZER_MODEL", "llama3.1:8b"),
        "api_key_env": key_env,
    }
    return "ollama", {"config": {"summarize-openai": block}}


def run_one(policy: str, config_name: str, overrides: dict[str, Any], window: int, path: str) -> dict[str, Any]:
    """One replay (a process-pool job): plain numbers out."""
    from progressive_compactor import ProgressiveCompactor, load_config
    from progressive_compactor.config import deep_merge
    from progressive_compactor.lab.replay import isolated_config, read_session, replay_session

    messages = read_session(path)
    with tempfile.TemporaryDirectory(prefix="compactor-bench-") as tmp:
        config = load_config(config_name, **deep_merge(overrides, {"context_window": window}))
        with ProgressiveCompactor(isolated_config(config, Path(tmp))) as compactor:
            started = time.perf_counter()
            r = replay_session(messages, compactor, Path(path).stem)
            wall = time.perf_counter() - started
    per_call = [t.compactor_seconds for t in r.turns]
    retention = r.retention.categories if r.retention is not None else {}
    return {
        "policy": policy,
        "window": window,
        "session": Path(path).stem,
        "turns": len(r.turns),
        "invalid_views": r.invalid_views,
        "invalid_view_problems": list(r.invalid_view_problems),
        "overflows": r.overflows,
        "peak": r.peak_view_tokens,
        "input_tokens": r.total_input_tokens,
        "cached_tokens": r.cached_input_tokens,
        "output_tokens": r.output_tokens,
        "cost": r.cost.total,
        "cost_input": r.cost.input,
        "cost_cached": r.cost.cached_input,
        "cost_output": r.cost.output,
        "cost_summarizer": r.cost.summarizer,
        "summarizer_calls": r.summarizer_calls,
        "summarizer_tokens_in": r.summarizer_tokens_in,
        "summarizer_tokens_out": r.summarizer_tokens_out,
        "summarizer_tokens_in_cached": sum(t.summarizer_tokens_in_cached for t in r.turns),
        "tiers": dict(r.tier_counts),
        "cache_breaks": sum(
            1 for a, b in zip(r.turns, r.turns[1:], strict=False) if b.cache_stable_tokens < a.view_tokens
        ),
        "offloads": r.offloads,
        "compactor_seconds": sum(per_call),
        "compactor_ms_max": 1000 * max(per_call, default=0.0),
        "wall_seconds": wall,
        "retention": {c: (len(v.kept), v.total) for c, v in retention.items()},
        "lost": {c: list(v.lost[:5]) for c, v in retention.items()},
    }


def retention_mean(rows: list[dict[str, Any]], category: str) -> tuple[float | None, int, int]:
    """Mean of per-session retention ratios (sessions with probes of the category), and the pooled counts."""
    ratios = []
    kept = total = 0
    for r in rows:
        k, t = r["retention"].get(category, (0, 0))
        kept, total = kept + k, total + t
        if t:
            ratios.append(k / t)
    return (statistics.fmean(ratios) if ratios else None), kept, total


def no_cache_cost(r: dict[str, Any]) -> float:
    """The session's cost if the provider had no prompt cache (cached input, the summarizer's
    too, billed as input)."""
    from progressive_compactor.pricing import DEFAULT_PRICES as P

    fresh = r["input_tokens"] * P.input + r["output_tokens"] * P.output
    return (
        fresh + r["summarizer_tokens_in"] * P.summarizer_input + r["summarizer_tokens_out"] * P.summarizer_output
    ) / 1e6


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def window_table(window: int, by_policy: dict[str, list[dict[str, Any]]], reference: str) -> str:
    head = (
        f"| policy | invalid views | overflow turns (sessions) | peak view, max | billed cost, sum | vs {reference} "
        "| cost without prompt cache | mean view | cached share | summarizer calls | summarizer tokens in / out "
        "per call | tiers Warn/Soft/Full/Emergency | "
        + " | ".join(c.replace("_", " ") for c in CATEGORIES)
        + " | compactor µs/call, mean (max ms) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    ref_cost = sum(r["cost"] for r in by_policy.get(reference, [])) or None
    for policy, rows in by_policy.items():
        cost = sum(r["cost"] for r in rows)
        inp = sum(r["input_tokens"] for r in rows)
        cached = sum(r["cached_tokens"] for r in rows)
        turns = max(sum(r["turns"] for r in rows), 1)
        calls = sum(r["summarizer_calls"] for r in rows)
        per_call = (
            f"{sum(r['summarizer_tokens_in'] for r in rows) / calls:,.0f} / "
            f"{sum(r['summarizer_tokens_out'] for r in rows) / calls:,.0f}"
            if calls
            else "-"
        )
        tiers = "/".join(str(sum(r["tiers"].get(t, 0) for r in rows)) for t in ("Warn", "Soft", "Full", "Emergency"))
        cells = [
            policy,
            str(sum(r["invalid_views"] for r in rows)),
            f"{sum(r['overflows'] for r in rows)} ({sum(1 for r in rows if r['overflows'])})",
            f"{max(r['peak'] for r in rows):,}",
            f"${cost:.2f}",
            f"{cost / ref_cost:.3f}×" if ref_cost else "-",
            f"${sum(no_cache_cost(r) for r in rows):.2f}",
            f"{inp / turns:,.0f}",
            pct(cached / inp if inp else None),
            str(calls),
            per_call,
            tiers,
        ]
        for c in CATEGORIES:
            mean, kept, total = retention_mean(rows, c)
            cells.append(f"{pct(mean)} ({kept}/{total})")
        mean_us = 1e6 * sum(r["compactor_seconds"] for r in rows) / turns
        cells.append(f"{mean_us:.0f} ({max(r['compactor_ms_max'] for r in rows):.1f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goals(window: int, by_policy: dict[str, list[dict[str, Any]]]) -> str:
    """The default config against the baselines, as ratios of summed billed cost (without a
    prompt cache: against the cheapest baseline that never overflowed)."""
    if "default" not in by_policy:
        return ""

    def total(name: str, cost: Any = lambda r: r["cost"]) -> float | None:
        rows = by_policy.get(name)
        return sum(cost(r) for r in rows) if rows else None

    ours, parts = total("default"), []
    for name in ("one-threshold", "none"):
        theirs = total(name)
        if ours is not None and theirs:
            parts.append(f"default / {name} = {ours / theirs:.3f}")
    fitting = [n for n in BASELINES if n in by_policy and not any(r["overflows"] for r in by_policy[n])]
    baselines = {n: total(n, no_cache_cost) for n in fitting}
    baselines = {n: v for n, v in baselines.items() if v}
    if baselines:
        cheapest = min(baselines, key=lambda n: baselines[n])
        ours_nc = total("default", no_cache_cost) or 0.0
        parts.append(
            f"without a prompt cache: default / {cheapest} (cheapest baseline) = {ours_nc / baselines[cheapest]:.3f}"
        )
    return f"Window {window:,}: " + "; ".join(parts) + "."


def share(row: dict[str, Any], category: str) -> float:
    kept, total = row["retention"][category]
    return kept / total


def paired_table(by_policy: dict[str, list[dict[str, Any]]], pairs: list[tuple[str, str]]) -> str:
    from progressive_compactor.lab.experiment import paired_difference

    lines = [
        "| comparison (per session) | cost, USD | peak view tokens | overflow turns | "
        + " | ".join(f"{c} retention" for c in CATEGORIES)
        + " |",
        "|---|---|---|---|" + "---|" * len(CATEGORIES),
    ]
    for a, b in pairs:
        if a not in by_policy or b not in by_policy:
            continue
        ra = {r["session"]: r for r in by_policy[a]}
        rb = {r["session"]: r for r in by_policy[b]}
        common = sorted(set(ra) & set(rb))
        cells = [f"{a} − {b}"]
        for key, fmt in (("cost", "{:+.3f}"), ("peak", "{:+,.0f}"), ("overflows", "{:+.1f}")):
            e = paired_difference([ra[s][key] for s in common], [rb[s][key] for s in common])
            cells.append(f"{fmt.format(e.mean)} [{fmt.format(e.low)}, {fmt.format(e.high)}]")
        for c in CATEGORIES:
            both = [s for s in common if ra[s]["retention"].get(c, (0, 0))[1] and rb[s]["retention"].get(c, (0, 0))[1]]
            if len(both) < 2:
                cells.append("-")
                continue
            e = paired_difference([share(ra[s], c) for s in both], [share(rb[s], c) for s in both])
            cells.append(f"{100 * e.mean:+.1f} pp [{100 * e.low:+.1f}, {100 * e.high:+.1f}]")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def masking_account(masking: list[dict[str, Any]], ours: list[dict[str, Any]]) -> str:
    """Per session: where observation masking beats the default policy, and by how much."""
    prog = {r["session"]: r for r in ours}
    cheaper = [r for r in masking if r["cost"] < prog[r["session"]]["cost"]]
    cheaper_nc = [r for r in masking if no_cache_cost(r) < no_cache_cost(prog[r["session"]])]
    smaller = [r for r in masking if r["input_tokens"] < prog[r["session"]]["input_tokens"]]
    fits = [r for r in masking if not r["overflows"]]
    return (
        f"Masking vs default, per session: cheaper with prompt caching in {len(cheaper)}/{len(masking)} "
        f"({', '.join(r['session'][:24] for r in cheaper) or 'none'}); cheaper without a cache in "
        f"{len(cheaper_nc)}/{len(masking)}; fewer input tokens in {len(smaller)}/{len(masking)}; never "
        f"overflowed in {len(fits)}/{len(masking)}; masking called the summarizer 0 times, default "
        f"{sum(r['summarizer_calls'] for r in ours)} times."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=corpus_default())
    parser.add_argument("--windows", default="16000,32000,64000,128000,200000")
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    parser.add_argument("--reference", default="one-threshold", help="policy the cost column compares against")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit", type=int, help="first N sessions only")
    parser.add_argument("--summarizer-url", default=os.environ.get("COMPACTOR_SUMMARIZER_URL"))
    parser.add_argument("--json", type=Path, help="write every per-session row here")
    args = parser.parse_args(argv)

    files = sorted(args.corpus.glob("*.jsonl"))[: args.limit or None]
    if not files:
        print(f"no *.jsonl sessions in {args.corpus} (set COMPACTOR_CORPUS or --corpus)", file=sys.stderr)
        return 2
    policies = {**POLICIES, **CANDIDATES}
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    if args.summarizer_url:
        policies["default-http"] = http_policy(args.summarizer_url)
        if "default-http" not in names:
            names.append("default-http")
    unknown = [n for n in names if n not in policies]
    if unknown:
        print(f"unknown policies {unknown}; known: {', '.join(policies)}", file=sys.stderr)
        return 2
    windows = [int(w) for w in args.windows.split(",")]
    jobs = [(n, *policies[n], w, str(f)) for w in windows for n in names for f in files]

    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    if args.workers <= 1:
        rows = [run_one(*job) for job in jobs]
    else:
        with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(run_one, *job) for job in jobs]
            for i, future in enumerate(futures, 1):
                rows.append(future.result())
                print(f"\r{i}/{len(jobs)} replays", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    elapsed = time.perf_counter() - started

    print(f"# Replay benchmark: {len(files)} sessions, windows {windows}, policies {names}")
    print(
        f"(offline extractive summarizer unless noted; default price table; {elapsed:.0f} s on {args.workers} workers)\n"
    )
    for w in windows:
        by_policy = {n: [r for r in rows if r["window"] == w and r["policy"] == n] for n in names}
        print(f"## Window {w:,} tokens\n")
        print(window_table(w, by_policy, args.reference))
        print()
        pairs = [(n, args.reference) for n in names if n != args.reference]
        if "default" in names and "masking" in names:
            pairs.append(("masking", "default"))
        print(paired_table(by_policy, pairs))
        print()
        if "default" in names and "masking" in names:
            print(masking_account(by_policy["masking"], by_policy["default"]))
            print()
        line = goals(w, by_policy)
        if line:
            print(line + "\n")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), "utf-8")
        print(f"per-session rows: {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
