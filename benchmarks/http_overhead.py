"""What the compactor itself costs around one LLM summary, and how many sessions per second the
async API compacts concurrently; both against the local fake provider (tests/fake_provider.py).

1. Overhead: the time of one summarizing compaction (``compact_with_record`` on a history at
   ~82 % of the window: offload check, prompt, HTTP call, parsing, anchors, state, record written
   to JSONL) next to a bare ``httpx`` POST of the very same request body to the same server, on a
   pooled connection. Overhead = compaction - bare request; ratio = compaction / bare request.
   The fake server answers at once, so the ratio is the worst case: against a real model that
   takes seconds, the same overhead in milliseconds is a rounding error.
2. Throughput: N sessions compacted at once through one compactor with ``acompact_with_record``
   (one pooled ``httpx.AsyncClient``), next to N bare async POSTs, with the server answering at
   once and after a simulated 50 ms model latency.

Run: python benchmarks/http_overhead.py [--repeat 30] [--sessions 1,10,50,100]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fake_provider import FULL_ROUNDS, Behaviour, FakeProvider, compactor_settings, synthetic_history
from progressive_compactor import CompactionTier, ProgressiveCompactor


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def overhead_rows(fake: FakeProvider, root: Path, repeat: int) -> list[tuple[str, float, float]]:
    """(protocol, median compaction ms, median bare request ms) for each protocol."""
    import httpx

    rows = []
    history = synthetic_history("SESSION-MARKER-bench", FULL_ROUNDS)
    for protocol in ("openai", "anthropic"):
        compactor = ProgressiveCompactor("default", **compactor_settings(fake.base_url, protocol, root / protocol))
        fake.requests.clear()
        _, record = compactor.compact_with_record(history, "warm-up")
        assert record.tier is CompactionTier.FULL and not record.errors, record.errors
        sent = fake.requests[0]
        url = fake.base_url.rsplit("/v1", 1)[0] + sent.path
        headers = {k: v for k, v in sent.headers.items() if k not in ("host", "content-length")}
        compaction, bare = [], []
        with httpx.Client() as client:
            client.post(url, headers=headers, content=sent.raw)
            for i in range(repeat):  # interleaved, so that load on the machine hits both alike
                started = time.perf_counter()
                _, record = compactor.compact_with_record(history, f"s{i}")
                compaction.append(time.perf_counter() - started)
                assert record.summarizer_calls == 1 and not record.errors
                started = time.perf_counter()
                client.post(url, headers=headers, content=sent.raw).json()
                bare.append(time.perf_counter() - started)
        compactor.close()
        rows.append((protocol, median_ms(compaction), median_ms(bare)))
    return rows


def extractive_ms(root: Path, repeat: int) -> float:
    """The same compaction with the offline summarizer: the core's cost without any HTTP."""
    history = synthetic_history("SESSION-MARKER-bench", FULL_ROUNDS)
    compactor = ProgressiveCompactor(
        "default",
        context_window=2000,
        config={
            "offload-files": {"root": str(root / "x-offload")},
            "store-jsonl": {"directory": str(root / "x-records")},
        },
    )
    compactor.compact_with_record(history, "warm-up")
    samples = []
    for i in range(repeat):
        started = time.perf_counter()
        compactor.compact_with_record(history, f"s{i}")
        samples.append(time.perf_counter() - started)
    return median_ms(samples)


async def throughput(fake: FakeProvider, root: Path, sessions: int, rounds: int) -> tuple[float, float]:
    """(compactions per second, bare requests per second) for ``sessions`` at once; best of ``rounds``."""
    import httpx

    history = synthetic_history("SESSION-MARKER-bench", FULL_ROUNDS)
    best_compact, best_bare = 0.0, 0.0
    async with ProgressiveCompactor(
        "default", **compactor_settings(fake.base_url, "openai", root / "async")
    ) as compactor:
        await compactor.acompact_with_record(history, "warm-up")
        body = fake.requests[-1].raw
        for r in range(rounds):
            started = time.perf_counter()
            results = await asyncio.gather(
                *(compactor.acompact_with_record(history, f"r{r}-{sessions}-{i}") for i in range(sessions))
            )
            elapsed = time.perf_counter() - started
            assert all(rec.summarizer_calls == 1 and not rec.errors for _, rec in results)
            best_compact = max(best_compact, sessions / elapsed)
    url = fake.base_url + "/chat/completions"
    async with httpx.AsyncClient(timeout=30) as client:
        await client.post(url, content=body, headers={"content-type": "application/json"})
        for _ in range(rounds):
            started = time.perf_counter()
            responses = await asyncio.gather(
                *(client.post(url, content=body, headers={"content-type": "application/json"}) for _ in range(sessions))
            )
            elapsed = time.perf_counter() - started
            assert all(resp.status_code == 200 for resp in responses)
            best_bare = max(best_bare, sessions / elapsed)
    return best_compact, best_bare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30, help="compactions per protocol (median taken)")
    parser.add_argument("--sessions", default="1,10,50,100", help="concurrent session counts")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds (best taken)")
    args = parser.parse_args()
    counts = [int(n) for n in args.sessions.split(",")]

    with tempfile.TemporaryDirectory() as tmp, FakeProvider() as fake:
        root = Path(tmp)
        rows = overhead_rows(fake, root, args.repeat)
        offline = extractive_ms(root, args.repeat)
        print(
            f"Summarizing compaction vs a bare httpx POST of the same body ({args.repeat} runs, median; "
            f"history of {2 * FULL_ROUNDS + 3} messages at ~82 % of a 2000-token window)"
        )
        print(f"{'protocol':<11}{'compaction ms':>15}{'bare POST ms':>14}{'overhead ms':>13}{'ratio':>8}")
        for protocol, compaction, bare in rows:
            print(f"{protocol:<11}{compaction:>15.2f}{bare:>14.2f}{compaction - bare:>13.2f}{compaction / bare:>8.2f}")
        print(f"{'extractive':<11}{offline:>15.2f}{'-':>14}{'-':>13}{'-':>8}   (offline summarizer, no HTTP)")
        print()
        for delay in (0.0, 0.05):
            fake.requests.clear()
            fake.default = Behaviour(delay=delay)
            print(
                f"Concurrent async sessions, one compactor, server latency {delay * 1000:.0f} ms (best of {args.rounds})"
            )
            print(f"{'sessions':<10}{'compactions/s':>15}{'bare POSTs/s':>14}{'ratio':>8}")
            for n in counts:
                compact_rate, bare_rate = asyncio.run(throughput(fake, root, n, args.rounds))
                print(f"{n:<10}{compact_rate:>15.1f}{bare_rate:>14.1f}{bare_rate / compact_rate:>8.2f}")
            print()


if __name__ == "__main__":
    main()
