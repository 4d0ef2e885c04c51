"""What shared state costs: time per turn at TierNone with each state store against
``state-memory``, round trips to the server per such turn, and turns per second of a 4-worker fleet.

1. **TierNone.** Every corpus session is replayed turn by turn at a window so large that no turn
   compacts, once per store, the stores taking turns session by session (same process, same
   moment). Each store comes with its backend's record store and offloader
   (``state-postgres`` with ``store-postgres`` and ``offload-postgres``, ...), as a fleet would run.
2. **Round trips.** The same replay through a TCP proxy on 127.0.0.1 that counts requests (a
   client message that follows the server's answer) for PostgreSQL and Redis.
3. **Fleet.** 4 worker processes serve every turn of 20 corpus sessions (16k window: every tier
   happens), sessions side by side, each turn on a random idle worker; next to it, one process with
   its state in memory serving the same turns one after the other.
4. **Async sessions, a distant server.** 50 sessions' next turns at once through the async API
   of one compactor on PostgreSQL, through the proxy holding every answer back 5 ms (a server
   across a network), with ``async_threads`` 1 and 4: turns per second.

PostgreSQL and Redis are started from the machine's binaries in a temporary folder (as
``tests/servers.py`` does for the tests), unless given::

    python benchmarks/fleet.py
    python benchmarks/fleet.py --postgres postgresql://u:p@host/db --redis redis://:p@host:6379/0

Goal: a turn that changes nothing costs at most one round trip to the server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

from fleet_workers import Fleet, load_session, turn_points  # noqa: E402
from progressive_compactor import CompactionTier, ProgressiveCompactor  # noqa: E402
from servers import TcpProxy, start_servers  # noqa: E402

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
HUGE = 10**8


def plugins(kind: str) -> dict[str, Any]:
    if kind == "memory":
        return {}
    if kind == "files":
        return {"plugins": {"state": "state-files"}}
    return {"plugins": {"state": f"state-{kind}", "offload": f"offload-{kind}", "stores": [f"store-{kind}"]}}


def blocks(kind: str, conn: dict[str, str]) -> dict[str, Any]:
    if kind not in conn:
        return {}
    name = f"b{uuid.uuid4().hex[:10]}"
    block = {"dsn": conn[kind], "schema": name} if kind == "postgres" else {"url": conn[kind], "prefix": f"{name}:"}
    if kind == "sqlite":
        block = {}
    return {"config": {f"{role}-{kind}": dict(block) for role in ("state", "store", "offload")}}


def compactor(kind: str, conn: dict[str, str], data_dir: str, window: int) -> ProgressiveCompactor:
    """A compactor on ``kind``'s stores. At a window no history reaches, ``classic`` (thresholds
    alone) never compacts; ``default`` would, once compacting pays for itself."""
    config = "classic" if window == HUGE else "default"
    return ProgressiveCompactor(config, context_window=window, data_dir=data_dir, **plugins(kind), **blocks(kind, conn))


def tier_none(files: list[Path], kinds: list[str], conn: dict[str, str], root: Path) -> dict[str, list[float]]:
    """Seconds of every TierNone call, per store; the stores take turns session by session."""
    compactors = {k: compactor(k, conn, str(root / f"none-{k}"), HUGE) for k in kinds}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for path in files:
        messages = load_session(path)
        points = turn_points(messages)
        for kind in kinds:
            c = compactors[kind]
            for upto in points:
                history = messages[:upto]
                t0 = time.perf_counter()
                _, record = c.compact_with_record(history, path.stem)
                times[kind].append(time.perf_counter() - t0)
                assert record.tier is CompactionTier.NONE and not record.errors, record.errors
    for c in compactors.values():
        c.close()
    return times


def round_trips(files: list[Path], kind: str, conn: dict[str, str], root: Path) -> tuple[int, int]:
    """(requests to the server, TierNone turns) for one replay of ``files`` through a proxy."""
    port = int(re.search(r"@[^:/]+:(\d+)", conn[kind]).group(1))  # type: ignore[union-attr]
    proxy = TcpProxy(port)
    via = {kind: conn[kind].replace(f":{port}/", f":{proxy.port}/")}
    c = compactor(kind, via, str(root / f"rt-{kind}"), HUGE)
    c.state("warm-up")  # the pool's connection and the schema check, before counting
    turns = 0
    before = proxy.round_trips
    for path in files:
        messages = load_session(path)
        for upto in turn_points(messages):
            c.compact_with_record(messages[:upto], path.stem)
            turns += 1
    counted = proxy.round_trips - before
    c.close()
    proxy.close()
    return counted, turns


def async_turns_per_second(kind: str, conn: dict[str, str], root: Path, threads: int, delay: float) -> float:
    """Turns per second of 50 sessions' next turns at once (the async API, one compactor), with
    every answer of the server held back ``delay`` seconds."""
    port = int(re.search(r"@[^:/]+:(\d+)", conn[kind]).group(1))  # type: ignore[union-attr]
    proxy = TcpProxy(port)
    via = {kind: conn[kind].replace(f":{port}/", f":{proxy.port}/")}
    history = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(3):
        call = {"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
        history += [{"role": "assistant", "content": None, "tool_calls": [call]}]
        history += [{"role": "tool", "tool_call_id": f"call_{i}", "content": "ok " * 100}]
    later = [*history, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "Go on."}]
    sessions = [f"async-{i}" for i in range(50)]

    async def run() -> float:
        c = ProgressiveCompactor(
            "default",
            data_dir=str(root / f"async-{threads}"),
            async_threads=threads,
            **plugins(kind),
            **blocks(kind, via),
        )
        async with c:
            await asyncio.gather(*(c.acompact_with_record(history, s) for s in sessions))  # connected, saved
            proxy.delay = delay
            t0 = time.perf_counter()
            results = await asyncio.gather(*(c.acompact_with_record(later, s) for s in sessions))
            seconds = time.perf_counter() - t0
            proxy.delay = 0
        assert all(not record.errors for _, record in results), [r.errors for _, r in results if r.errors][:1]
        return len(sessions) / seconds

    try:
        return asyncio.run(run())
    finally:
        proxy.close()


def fleet(corpus: Path, kind: str, conn: dict[str, str], root: Path, sessions: int) -> tuple[int, float]:
    files = sorted(corpus.glob("*.jsonl"))[:sessions]
    turns = {f.stem: turn_points(load_session(f)) for f in files}
    overrides = {
        "context_window": 16_000,
        "data_dir": str(root / f"fleet-{kind}"),
        **plugins(kind),
        **blocks(kind, conn),
    }
    with Fleet(4, overrides, corpus, seed=3) as workers:
        results, seconds = workers.serve(turns)
    assert all(not r["problems"] for r in results.values())
    return len(results), seconds


def one_process(corpus: Path, root: Path, sessions: int) -> tuple[int, float]:
    files = sorted(corpus.glob("*.jsonl"))[:sessions]
    c = ProgressiveCompactor("default", context_window=16_000, data_dir=str(root / "one"))
    n, t0 = 0, time.perf_counter()
    for path in files:
        messages = load_session(path)
        for upto in turn_points(messages):
            c.compact_with_record(messages[:upto], path.stem)
            n += 1
    return n, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=Path(os.environ.get("COMPACTOR_CORPUS", DEFAULT_CORPUS)))
    parser.add_argument("--postgres", help="a DSN (default: start a server)")
    parser.add_argument("--redis", help="a URL (default: start a server)")
    parser.add_argument("--sessions", type=int, default=20)
    args = parser.parse_args()
    files = sorted(args.corpus.glob("*.jsonl"))
    if not files:
        raise SystemExit(f"no corpus at {args.corpus} (set --corpus or COMPACTOR_CORPUS)")
    root = Path(tempfile.mkdtemp(prefix="compactor-bench-"))
    os.chmod(root, 0o755)  # the servers may run as another user (PostgreSQL refuses root)
    started: dict[str, Any] = {}
    try:
        conn: dict[str, str] = {}
        wanted = tuple(k for k, given in (("postgres", args.postgres), ("redis", args.redis)) if not given)
        if wanted:
            started = start_servers(root / "servers", wanted)
        conn["postgres"] = args.postgres or started["postgres"].dsn
        conn["redis"] = args.redis or started["redis"].url
        conn["sqlite"] = ""
        kinds = ["memory", "files", "sqlite", "postgres", "redis"]

        times = tier_none(files, kinds, conn, root)
        trips = {k: round_trips(files, k, conn, root) for k in ("postgres", "redis")}
        base = statistics.median(times["memory"])
        print(f"\nTierNone: {len(times['memory'])} turns of {len(files)} corpus sessions per store, one process")
        print(
            "| state store (with its backend's records and offloads) | median µs per turn | mean µs | vs state-memory | round trips per turn |"
        )
        print("|---|---|---|---|---|")
        names = {"memory": "state-memory", "files": "state-files", "sqlite": "state-sqlite (one file, WAL)",
                 "postgres": "state-postgres (127.0.0.1)", "redis": "state-redis (127.0.0.1)"}  # fmt: skip
        for kind in kinds:
            median = statistics.median(times[kind])
            mean = statistics.fmean(times[kind])
            rt = f"{trips[kind][0] / trips[kind][1]:.3f}" if kind in trips else "0 (no server)"
            print(f"| {names[kind]} | {median * 1e6:.1f} | {mean * 1e6:.1f} | {median / base:.2f}x | {rt} |")

        print(f"\nFleet: every turn of {args.sessions} corpus sessions at a 16k window (all tiers)")
        print("| who serves | turns | seconds | turns per second |")
        print("|---|---|---|---|")
        n, secs = one_process(args.corpus, root, args.sessions)
        print(f"| one process, state-memory | {n} | {secs:.2f} | {n / secs:.0f} |")
        for kind in ("files", "sqlite", "postgres", "redis"):
            n, secs = fleet(args.corpus, kind, conn, root, args.sessions)
            label = "state-files (+ files)" if kind == "files" else f"{kind} (state, records, offloads)"
            print(f"| 4 workers, {label} | {n} | {secs:.2f} | {n / secs:.0f} |")

        print("\nAsync sessions: 50 next turns at once, one compactor, PostgreSQL with every answer 5 ms late")
        print("| async_threads | turns per second |")
        print("|---|---|")
        for threads in (1, 4):
            print(f"| {threads} | {async_turns_per_second('postgres', conn, root, threads, 0.005):.0f} |")
        print(f"\n{os.cpu_count()} CPU cores on this machine; the servers run on it too.")
    finally:
        for server in started.values():
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
