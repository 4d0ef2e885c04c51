"""Run an A/B experiment live, as an agent loop would, on recorded sessions.

Every session (``*.jsonl``, one chat message per line) of a folder is played through a ``Session``
on an ``ExperimentCompactor``: the view is taken before each assistant message (the LLM call),
tool results arrive through ``add_tool_result``. Each session runs under the one variant it is
given at its first turn, and keeps it for life; the records land in the data folder, for
``compactor ab report``::

    python examples/ab_live.py examples/sessions -e ab-example --data-dir ab-live -w 16000
    compactor ab report ab-live/records -e ab-example
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from progressive_compactor import Session
from progressive_compactor.lab.experiment import ExperimentCompactor


def play(session: Session, messages: list[dict]) -> None:
    """The recorded messages in order; a view before every assistant message but the first."""
    for i, message in enumerate(messages):
        if message.get("role") == "assistant" and i > 0:
            session.view()  # what the agent would send to its model now
        if message.get("role") == "tool" and isinstance(message.get("content"), str):
            extra = {k: v for k, v in message.items() if k not in ("role", "tool_call_id", "content")}
            session.add_tool_result(message["tool_call_id"], message["content"], **extra)
        else:
            session.append(message)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sessions", type=Path, help="folder of *.jsonl recorded sessions")
    parser.add_argument("-e", "--experiment", default="ab-example", help="experiment YAML or bundled name")
    parser.add_argument("--data-dir", type=Path, required=True, help="where state, offloads and records go")
    parser.add_argument("-w", "--context-window", type=int, help="context window (overrides the file)")
    args = parser.parse_args()
    overrides = {"data_dir": str(args.data_dir.resolve())}
    if args.context_window:
        overrides["context_window"] = args.context_window
    with ExperimentCompactor(args.experiment, **overrides) as compactor:
        for path in sorted(args.sessions.glob("*.jsonl")):
            lines = path.read_text("utf-8").splitlines()
            play(Session(compactor, path.stem), [json.loads(line) for line in lines if line.strip()])
        placed = Counter(compactor.state(path.stem).variant for path in args.sessions.glob("*.jsonl"))
    print(", ".join(f"{variant}: {n} sessions" for variant, n in sorted(placed.items())))


if __name__ == "__main__":
    main()
