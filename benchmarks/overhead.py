"""Time per ``compact_with_record`` call at each tier, next to one bare pass over the messages.

Every corpus session is replayed turn by turn (the view is computed before each assistant
message, as an agent loop would) at one context window; each call is timed and filed under the
tier it ended at. Next to it, the same turn's history gets the cheapest possible look: one pass
that sums the messages' content lengths. The ratio of the two is the compactor's cost in units of
"reading the history once". The offline summarizer is used, so Soft/Full include its (cheap) work.

    python benchmarks/overhead.py                 # every corpus session at 32k tokens
    python benchmarks/overhead.py --window 16000 --corpus /path/to/corpus

Goal: at TierNone the decision costs at most 2x the bare pass.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from progressive_compactor import CompactionTier, ProgressiveCompactor

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def bare_pass(messages: list[dict]) -> int:
    return sum(len(m.get("content") or "") for m in messages)


def time_bare(messages: list[dict], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        bare_pass(messages)
        best = min(best, time.perf_counter() - t0)
    return best


def replay(path: Path, window: int, root: str, cold: bool) -> list[tuple[CompactionTier, float, float, int]]:
    messages = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    overrides = {"context_window": window, "data_dir": root}
    compactor = ProgressiveCompactor("default", **overrides)
    rows = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        history = messages[:i]
        if cold:  # a compactor that has never seen this session: the first call's cost
            compactor = ProgressiveCompactor("default", **overrides)
        t0 = time.perf_counter()
        _, record = compactor.compact_with_record(history, path.stem)
        elapsed = time.perf_counter() - t0
        rows.append((record.tier, elapsed, time_bare(history), len(history)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=Path(os.environ.get("COMPACTOR_CORPUS", DEFAULT_CORPUS)))
    parser.add_argument("--window", type=int, default=32_000)
    args = parser.parse_args()
    files = sorted(args.corpus.glob("*.jsonl"))
    if not files:
        raise SystemExit(f"no corpus at {args.corpus} (set --corpus or COMPACTOR_CORPUS)")
    with tempfile.TemporaryDirectory() as root:
        for label, cold, window in (
            ("steady state: one compactor per session, turn after turn", False, args.window),
            ("cold: a fresh compactor for every call (no cache), window large enough for TierNone", True, 10**7),
        ):
            by_tier: dict[CompactionTier, list[tuple[float, float, int]]] = defaultdict(list)
            for path in files:
                for tier, t, bare, n in replay(path, window, root, cold):
                    by_tier[tier].append((t, bare, n))
            print(f"\n{label} (window {window:,} tokens, {len(files)} sessions)")
            print(
                f"{'tier':<10}{'calls':>7}{'median msgs':>13}{'call µs (median)':>18}"
                f"{'bare µs (median)':>18}{'ratio (sum/sum)':>17}"
            )
            for tier in sorted(by_tier):
                print_row(tier.label, by_tier[tier])
            none = by_tier.get(CompactionTier.NONE, [])
            if none:
                print("TierNone by history length (messages):")
                for low, high in ((0, 50), (50, 100), (100, 200), (200, 400), (400, 10**9)):
                    rows = [r for r in none if low <= r[2] < high]
                    if rows:
                        print_row(f"{low}-{high if high < 10**9 else ''}", rows)


def print_row(label: str, rows: list[tuple[float, float, int]]) -> None:
    calls = [r[0] for r in rows]
    bares = [r[1] for r in rows]
    print(
        f"{label:<10}{len(rows):>7}{statistics.median(r[2] for r in rows):>13.0f}"
        f"{statistics.median(calls) * 1e6:>18.1f}{statistics.median(bares) * 1e6:>18.1f}"
        f"{sum(calls) / sum(bares):>17.2f}"
    )


if __name__ == "__main__":
    main()
