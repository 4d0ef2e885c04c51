"""The compactor's own time per call, per tier, pooled over every call of the corpus replay.

Every corpus session is replayed turn by turn (the view is computed before each assistant
message, as an agent loop would) with :func:`progressive_compactor.lab.replay.replay_session`,
one compactor per session; each call's time, minus the time spent in the summarizer (the
offline one here), is filed under the tier it ended at. "bare" is the cheapest possible look at
the same history: one pass that sums the messages' content lengths.

    python benchmarks/overhead.py                                  # default and classic, 16k to 200k
    python benchmarks/overhead.py --configs default --windows 32000
    python benchmarks/overhead.py --data-dir /dev/shm              # files on another file system
    python benchmarks/overhead.py --configs default --parts        # where the pooled time goes

Goal: the pooled mean at most 100 µs a call. Files are written where the config says (records,
offloaded results, the state when it is kept in files) under ``--data-dir``, by default a
temporary folder: their cost depends on that file system (creating a file costs from a few µs
to a millisecond depending on the machine).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

from progressive_compactor import CompactionTier, ProgressiveCompactor, load_config
from progressive_compactor.lab.replay import isolated_config, read_session, replay_session

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
TIERS = [tier.label for tier in CompactionTier]


PARTS = {
    "facts of the folded messages": ("progressive_compactor.tiers", "extract_facts"),
    "credential search": ("progressive_compactor.redaction", "credential_spans"),
    "offloaded results written": ("progressive_compactor.plugins.offload_files", "keep_private"),
    "record made JSON": ("progressive_compactor.plugins.store_jsonl", "record_to_json"),
    "record appended": ("progressive_compactor.plugins.store_jsonl", "append_line"),
}
"""Parts of a call timed by ``--parts``: a label, and the function timed (where it is looked up)."""
SUMMARIZER = ("progressive_compactor.plugin_manager", "Hooks.summarize")
"""Not counted in any part, as in no call's time: the summarizer (which bounds texts, and so
searches them for credentials too)."""


@contextlib.contextmanager
def timed_parts() -> Iterator[dict[str, float]]:
    """Seconds spent in each of :data:`PARTS` while the block runs, outside the summarizer; a
    part called inside another counts as the outer one's."""
    spent = dict.fromkeys(PARTS, 0.0)
    inside = [0]

    def timed(label: str | None, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if inside[0]:
                return function(*args, **kwargs)
            inside[0] += 1
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                inside[0] -= 1
                if label is not None:
                    spent[label] += time.perf_counter() - started

        return wrapper

    patched = []
    for label, (module, name) in [*PARTS.items(), (None, SUMMARIZER)]:
        owner: Any = importlib.import_module(module)
        *path, attribute = name.split(".")
        for step in path:
            owner = getattr(owner, step)
        patched.append((owner, attribute, getattr(owner, attribute)))
        setattr(owner, attribute, timed(label, getattr(owner, attribute)))
    try:
        yield spent
    finally:
        for owner, attribute, function in patched:
            setattr(owner, attribute, function)


def bare_pass_seconds(messages: list[dict]) -> float:
    started = time.perf_counter()
    sum(len(m.get("content") or "") for m in messages if isinstance(m.get("content"), str))
    return time.perf_counter() - started


def measure(files: list[Path], config: str, window: int, data_dir: str | None) -> dict[str, list[tuple[float, float]]]:
    """Per tier: (compactor seconds, bare-pass seconds) of every call."""
    by_tier: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for path in files:
        messages = read_session(path)
        with tempfile.TemporaryDirectory(prefix="compactor-overhead-", dir=data_dir) as root:
            base = load_config(config, context_window=window)
            with ProgressiveCompactor(isolated_config(base, Path(root))) as compactor:
                result = replay_session(messages, compactor, path.stem, probes=False)
        for turn in result.turns:
            by_tier[turn.tier.label].append((turn.compactor_seconds, bare_pass_seconds(messages[: turn.index])))
    return by_tier


def table(config: str, window: int, by_tier: dict[str, list[tuple[float, float]]]) -> str:
    every = [row for rows in by_tier.values() for row in rows]
    total = sum(t for t, _ in every)
    lines = [
        f"{config} at {window:,} tokens: pooled mean {1e6 * total / len(every):.0f} µs over {len(every)} calls",
        f"{'tier':<10}{'calls':>7}{'mean µs':>10}{'median µs':>11}{'share of time':>15}{'× bare pass':>13}",
    ]
    for tier in TIERS:
        rows = by_tier.get(tier)
        if not rows:
            continue
        times = [t for t, _ in rows]
        bare = sum(b for _, b in rows)
        lines.append(
            f"{tier:<10}{len(rows):>7}{1e6 * statistics.fmean(times):>10.0f}{1e6 * statistics.median(times):>11.0f}"
            f"{sum(times) / total:>15.0%}{sum(times) / bare if bare else 0:>13.0f}"
        )
    return "\n".join(lines)


def parts_table(by_tier: dict[str, list[tuple[float, float]]], spent: dict[str, float]) -> str:
    """Each part's time pooled over every call, as the pooled mean is: what removing it would save."""
    calls = sum(len(rows) for rows in by_tier.values())
    lines = [f"{'part (of every tier)':<32}{'µs a call':>10}"]
    lines += [f"{label:<32}{1e6 * seconds / calls:>10.1f}" for label, seconds in spent.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=Path(os.environ.get("COMPACTOR_CORPUS", DEFAULT_CORPUS)))
    parser.add_argument("--configs", default="default,classic")
    parser.add_argument("--windows", default="16000,32000,64000,128000,200000")
    parser.add_argument("--data-dir", help="where the replays write their files (default: a temporary folder)")
    parser.add_argument(
        "--parts",
        action="store_true",
        help="also the time of a few parts of the calls (facts, credential search, files written), pooled",
    )
    args = parser.parse_args()
    files = sorted(args.corpus.glob("*.jsonl"))
    if not files:
        raise SystemExit(f"no corpus at {args.corpus} (set --corpus or COMPACTOR_CORPUS)")
    print(f"{len(files)} sessions; the summarizer's time excluded\n")
    for window in (int(w) for w in args.windows.split(",")):
        for config in args.configs.split(","):
            if not args.parts:
                print(table(config, window, measure(files, config, window, args.data_dir)), end="\n\n", flush=True)
                continue
            with timed_parts() as spent:
                by_tier = measure(files, config, window, args.data_dir)
            print(table(config, window, by_tier), parts_table(by_tier, spent), sep="\n", end="\n\n", flush=True)


if __name__ == "__main__":
    main()
