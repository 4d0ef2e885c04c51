"""Cost per turn of exact token counts (``tokens-tiktoken``) against ``tokens-chars``.

Every corpus session is replayed turn by turn (a view before each assistant message, as an agent
loop asks for one) twice, side by side in one run: once with ``tokens-chars`` (characters ÷ 4)
and once with ``tokens-tiktoken`` (o200k_base, the chat format's overhead). Each call is timed;
the table gives the mean and median time per turn for both, their ratio, the one-off cost of
loading the encoding, and how far characters ÷ 4 was from the exact count of the views sent
(the error that provider usage anchoring corrects).

    python benchmarks/tokens.py                       # every corpus session at 32k tokens
    python benchmarks/tokens.py --window 16000 --corpus /path/to/corpus --encoding cl100k_base
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from progressive_compactor import ProgressiveCompactor
from progressive_compactor.messages import message_from_dict
from progressive_compactor.plugins.tokens_chars import CharTokens
from progressive_compactor.plugins.tokens_tiktoken import TiktokenTokens, encoding

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def replay(path: Path, window: int, root: str, tokens: str, encoding_name: str) -> tuple[list[float], list[list]]:
    messages = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    compactor = ProgressiveCompactor(
        "default",
        context_window=window,
        data_dir=root,
        plugins={"tokens": tokens},
        config={"tokens-tiktoken": {"encoding": encoding_name}},
    )
    times, views = [], []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        t0 = time.perf_counter()
        view, _ = compactor.compact_with_record(messages[:i], path.stem)
        times.append(time.perf_counter() - t0)
        views.append(view)
    return times, views


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=Path(os.environ.get("COMPACTOR_CORPUS", DEFAULT_CORPUS)))
    parser.add_argument("--window", type=int, default=32_000)
    parser.add_argument("--encoding", default="o200k_base", choices=["o200k_base", "cl100k_base"])
    args = parser.parse_args()
    files = sorted(args.corpus.glob("*.jsonl"))
    if not files:
        raise SystemExit(f"no corpus at {args.corpus}: set COMPACTOR_CORPUS or pass --corpus")
    t0 = time.perf_counter()
    encoding(args.encoding)
    load = time.perf_counter() - t0
    exact = TiktokenTokens(TiktokenTokens.Config(encoding=args.encoding))
    chars_times: list[float] = []
    exact_times: list[float] = []
    errors: list[float] = []
    with tempfile.TemporaryDirectory() as root:
        for path in files:
            times, _ = replay(path, args.window, os.path.join(root, "chars"), "tokens-chars", args.encoding)
            chars_times += times
            times, views = replay(path, args.window, os.path.join(root, "exact"), "tokens-tiktoken", args.encoding)
            exact_times += times
            for view in views[-1:]:  # the last view of each session: how far ÷ 4 was from exact
                msgs = [message_from_dict(m, i) for i, m in enumerate(view)]
                true = sum(exact.estimate_tokens(msgs))
                approx = sum(CharTokens().estimate_tokens(msgs))
                errors.append(approx / true - 1)
    ms = 1000
    rows = [
        ("turns replayed", f"{len(chars_times):,}", f"{len(exact_times):,}", ""),
        (
            "mean time per turn",
            f"{statistics.mean(chars_times) * ms:.3f} ms",
            f"{statistics.mean(exact_times) * ms:.3f} ms",
            f"{statistics.mean(exact_times) / statistics.mean(chars_times):.2f}x",
        ),
        (
            "median time per turn",
            f"{statistics.median(chars_times) * ms:.3f} ms",
            f"{statistics.median(exact_times) * ms:.3f} ms",
            f"{statistics.median(exact_times) / statistics.median(chars_times):.2f}x",
        ),
        (
            "p95 time per turn",
            f"{sorted(chars_times)[int(0.95 * len(chars_times))] * ms:.3f} ms",
            f"{sorted(exact_times)[int(0.95 * len(exact_times))] * ms:.3f} ms",
            "",
        ),
        (
            "total replay time",
            f"{sum(chars_times):.2f} s",
            f"{sum(exact_times):.2f} s",
            f"{sum(exact_times) / sum(chars_times):.2f}x",
        ),
        ("loading the encoding (once per process)", "", f"{load * ms:.0f} ms", ""),
        (
            "chars ÷ 4 vs exact, last view of each session",
            "",
            f"{min(errors):+.0%} .. {max(errors):+.0%} (median {statistics.median(errors):+.0%})",
            "",
        ),
    ]
    print(f"{len(files)} sessions at {args.window:,} tokens, encoding {args.encoding}")
    widths = [max(len(r[i]) for r in [("", "tokens-chars", "tokens-tiktoken", "ratio"), *rows]) for i in range(4)]
    header = ("", "tokens-chars", "tokens-tiktoken", "ratio")
    print(" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
