"""Every conversation of the shared corpus, compacted turn by turn (a view before each assistant
message, as an agent loop asks for one) at context windows of 16k, 32k and 64k tokens.

Every view must be valid for the OpenAI chat API, fit the target of its tier, and carry the user's
first request; every offloaded file must hold the original tool result byte for byte.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from conftest import corpus_path
from progressive_compactor import CompactionTier
from progressive_compactor.facts import first_user_request
from progressive_compactor.messages import messages_from_dicts
from progressive_compactor.testing import estimate, fallback_bound, make_compactor, problems

pytestmark = pytest.mark.corpus

WINDOWS = (16_000, 32_000, 64_000)
_OMITTED = re.compile(r"\n\[\.\.\. \d+ characters omitted \.\.\.\]\n")
FILES = sorted(p.name for p in corpus_path().glob("*.jsonl")) or ["(corpus missing)"]


def request_in(request: str, view) -> bool:
    """The request, or both ends of a bounded one, inside a single message of the view."""
    parts = [p for p in _OMITTED.split(request) if p]
    return any(isinstance(m.get("content"), str) and all(p in m["content"] for p in parts) for m in view)


@pytest.mark.parametrize("window", WINDOWS, ids=[f"{w // 1000}k" for w in WINDOWS])
@pytest.mark.parametrize("name", FILES)
def test_corpus_turn_by_turn(corpus_dir: Path, tmp_path, name, window):
    messages = [json.loads(line) for line in (corpus_dir / name).read_text("utf-8").splitlines() if line.strip()]
    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    compactor = make_compactor(tmp_path, context_window=window, session_id=Path(name).stem)
    config = compactor.config
    request = None
    tiers: Counter[CompactionTier] = Counter()
    offloaded = 0
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        history = messages[:i]
        view, record = compactor.compact_with_record(history)
        tiers[record.tier] += 1
        where = f"{name} at message {i}, {record.tier.label}: {record.errors} {record.escalations}"
        assert problems(view) == [], where
        tokens = estimate(view)
        if record.tier is CompactionTier.EMERGENCY:
            assert tokens <= fallback_bound(view, compactor), where
        else:
            assert tokens < 0.70 * window, where
        if request is None:
            request = first_user_request(messages_from_dicts(history), config.intent_max_chars)
        if request is not None:
            assert request_in(request, view), where
        for entry in record.offloaded:
            assert Path(entry.path).read_bytes() == results[entry.tool_call_id].encode("utf-8"), where
            offloaded += 1
    assert sum(tiers.values()) > 0
    if window == WINDOWS[0] and sum(len(str(m.get("content") or "")) for m in messages) > 8 * window:
        assert tiers[CompactionTier.NONE] < sum(tiers.values()), "a long session must be compacted at 16k"


@pytest.mark.parametrize("window", (4_000, 8_000), ids=["4k", "8k"])
@pytest.mark.parametrize("name", FILES)
def test_the_newest_message_stays_at_small_windows(corpus_dir: Path, tmp_path, name, window):
    """At windows this small the compaction message and the newest exchange compete for room:
    the newest message (what the model must answer) is in every view, every view is valid and
    none is over the window."""
    messages = [json.loads(line) for line in (corpus_dir / name).read_text("utf-8").splitlines() if line.strip()]
    compactor = make_compactor(tmp_path, context_window=window, session_id=Path(name).stem)
    turns = 0
    for i, message in enumerate(messages):
        if message["role"] != "assistant" or i == 0:
            continue
        history = messages[:i]
        view, record = compactor.compact_with_record(history)
        where = f"{name} at message {i}, {record.tier.label}"
        assert problems(view) == [], where
        assert estimate(view) <= window, where
        newest, last = history[-1], view[-1]
        assert (last["role"], last.get("tool_call_id")) == (newest["role"], newest.get("tool_call_id")), where
        turns += 1
    assert turns > 0
