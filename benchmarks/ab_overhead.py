"""The compactor's own time, this tree against an earlier commit, in alternating rounds.

A shared machine's speed drifts by a quarter from one minute to the next, so two trees are only
compared in the same rounds: each round runs ``overhead.py`` (this tree's) once on the commit's
code, then once on this tree's, and the table gives every round's pooled mean and the median of
the rounds' ratios.

    python benchmarks/ab_overhead.py 033e0d1                       # 3 rounds at 16k and 64k
    python benchmarks/ab_overhead.py HEAD~3 --rounds 5 --windows 16000,32000,64000,128000,200000

The commit's ``core``, ``plugins`` and ``configs`` are laid out as the package in a temporary
folder that goes first on ``PYTHONPATH`` (the entry points of the installed tree name the same
modules, so they load the commit's). The commit must have the functions ``overhead.py`` uses.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POOLED = re.compile(r"^\S+ at ([\d,]+) tokens: pooled mean (\d+) µs")


def lay_out(rev: str, folder: Path) -> None:
    """``rev``'s package in ``folder/progressive_compactor`` (core, with plugins and configs in it)."""
    archive = folder / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", rev, "core", "plugins", "configs"], cwd=ROOT, stdout=out, check=True)
    source = folder / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(source, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    package = folder / "progressive_compactor"
    shutil.copytree(source / "core", package)
    shutil.copytree(source / "plugins", package / "plugins")
    shutil.copytree(source / "configs", package / "configs")


def pooled(config: str, windows: str, pythonpath: str | None) -> dict[int, int]:
    """One run of ``overhead.py``: the pooled mean (µs) per window."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    command = [sys.executable, str(ROOT / "benchmarks" / "overhead.py"), "--configs", config, "--windows", windows]
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return {int(m[1].replace(",", "")): int(m[2]) for m in map(POOLED.match, output.splitlines()) if m}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev", help="the commit to compare with (anything git names)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--windows", default="16000,64000")
    parser.add_argument("--config", default="default")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compactor-ab-") as folder:
        lay_out(args.rev, Path(folder))
        rounds = []
        for number in range(1, args.rounds + 1):
            base = pooled(args.config, args.windows, folder)
            now = pooled(args.config, args.windows, None)
            rounds.append((base, now))
            print(f"round {number}: " + ", ".join(f"{w:,}: {base[w]} → {now[w]} µs" for w in base), flush=True)
    print(f"\n{args.config}, pooled mean µs, {args.rev} → this tree")
    print(f"{'window':>8}  {'rounds':<40}{'median ratio':>14}")
    for window in rounds[0][0]:
        pairs = [(base[window], now[window]) for base, now in rounds]
        shown = ", ".join(f"{b}→{n}" for b, n in pairs)
        print(f"{window:>8,}  {shown:<40}{statistics.median(n / b for b, n in pairs):>14.2f}")


if __name__ == "__main__":
    main()
