"""The benchmark scripts still run: each prints its tables on a small run (the figures themselves
are read by people, in their own runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_http_overhead_prints_its_tables():
    out = run("http_overhead.py", "--repeat", "2", "--sessions", "2", "--rounds", "1")
    assert "compaction ms" in out and "bare POST ms" in out
    assert out.count("compactions/s") == 2  # with the server answering at once, then 50 ms late


def test_fleet_prints_its_tables(corpus_dir, postgres_server, redis_server):
    out = run(
        "fleet.py",
        "--corpus",
        str(corpus_dir),
        "--postgres",
        postgres_server.dsn,
        "--redis",
        redis_server.url,
        "--sessions",
        "2",
    )
    for row in ("state-postgres", "state-redis", "4 workers, postgres", "| 4 |"):
        assert row in out, row
    assert "round trips per turn" in out and "| 1.000 |" in out  # a TierNone turn: one round trip


def test_overhead_prints_its_tables(corpus_dir):
    out = run("overhead.py", "--corpus", str(corpus_dir), "--configs", "default", "--windows", "16000", "--parts")
    assert "pooled mean" in out and "facts of the folded messages" in out
