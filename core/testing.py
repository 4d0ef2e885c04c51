"""Helpers for testing progressive-compactor and plugins written for it.

A plugin author's ``conftest.py`` needs one line::

    pytest_plugins = ["progressive_compactor.testing"]

and then gets the ``compactor_factory`` fixture, which builds a compactor whose files (offloaded
tool results, JSONL records, session state) all live in the test's ``tmp_path`` (its
``data_dir``), never in the home directory::

    def test_my_summarizer_is_used(compactor_factory):
        compactor = compactor_factory(plugins={"summarizer": "my-summarizer"}, context_window=4000)
        view, record = compactor.compact_with_record(build_history([3000] * 12))
        assert record.plugins["summarizer"] == "my-summarizer"

The module also ships small plugins that tests keep needing (a summarizer that records what it is
asked and can be told to fail, a store that keeps records in a list) and builders of synthetic
histories whose tool results have the sizes a test asks for. It imports pytest, so import it from
tests only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import pytest

from .compactor import ProgressiveCompactor
from .config import CompactorConfig, config_to_dict, deep_merge
from .errors import SummarizerError
from .hookspecs import hookimpl
from .messages import carried_result, char_count, message_from_dict, view_problems
from .models import CompactionRecord, CompactionTier, Message, SummaryRequest, SummaryResult
from .redaction import SecretRegistry
from .validation import config_from_dict, load_config

KEYWORD_OPTIONS = ("todo_injector", "memory_extractor", "record_store", "offloader")
"""Keyword options of :class:`ProgressiveCompactor` that are objects, not config overrides."""


def make_config(
    tmp_path: str | os.PathLike[str],
    config: CompactorConfig | str | Mapping[str, Any] | None = "default",
    *,
    base: str = "default",
    **overrides: Any,
) -> CompactorConfig:
    """A checked config with ``overrides`` applied whose files all live under ``tmp_path``.

    ``config`` is the config to start from (a bundled name, a path or a ``CompactorConfig``); a
    mapping there is taken as the ``config:`` section of plugin blocks over ``base``.
    ``data_dir`` is set to ``tmp_path``; a test's own ``data_dir`` or folder settings still win.
    Plugin objects the config selects by name go in ``extra_plugins`` (a mapping).
    """
    if isinstance(config, Mapping):
        overrides = {**overrides, "config": dict(config)}
        config = base
    extra = overrides.pop("extra_plugins", None)
    overrides = deep_merge({"data_dir": str(tmp_path)}, overrides)
    if isinstance(config, CompactorConfig):
        return config_from_dict(deep_merge(config_to_dict(config), overrides), extra_plugins=extra)
    return load_config(config, extra_plugins=extra, **overrides)


def make_compactor(
    tmp_path: str | os.PathLike[str],
    config: CompactorConfig | str | Mapping[str, Any] | None = "default",
    *,
    extra_plugins: Sequence[tuple[str, Any]] = (),
    session_id: str = "test-session",
    base: str = "default",
    **overrides: Any,
) -> ProgressiveCompactor:
    """A :class:`ProgressiveCompactor` for a test: files under ``tmp_path``, ``overrides`` applied.

    ``overrides`` are top-level config keys (``context_window=8000``, ``plugins={...}``,
    ``config={"offload-files": {...}}``) and the compactor's keyword options (``todo_injector``,
    ``memory_extractor``, ``record_store``, ``offloader``). ``extra_plugins`` are ``(name, object)``
    pairs registered as they are: the way to try a plugin class before it is packaged (the config
    may select one by its name, e.g. ``plugins={"summarizer": "mine"}``).
    """
    options = {k: overrides.pop(k) for k in KEYWORD_OPTIONS if k in overrides}
    cfg = make_config(tmp_path, config, base=base, extra_plugins=dict(extra_plugins), **overrides)
    return ProgressiveCompactor(cfg, session_id=session_id, extra_plugins=extra_plugins, **options)


@pytest.fixture
def compactor_factory(tmp_path: Path) -> Iterator[Callable[..., ProgressiveCompactor]]:
    """``compactor_factory(**overrides)``: :func:`make_compactor` bound to the test's ``tmp_path``.

    Every compactor it built is closed when the test ends.
    """
    built: list[ProgressiveCompactor] = []

    def factory(
        config: CompactorConfig | str | Mapping[str, Any] | None = "default", **overrides: Any
    ) -> ProgressiveCompactor:
        compactor = make_compactor(tmp_path, config, **overrides)
        built.append(compactor)
        return compactor

    yield factory
    for compactor in built:
        compactor.close()


# --- plugins tests keep needing ----------------------------------------------------------------


class RecordingSummarizer:
    """A summarizer that records every request; it answers with ``text``, raises ``fail``, or
    (by default) delegates to the offline extractive summarizer.

    Registered without ``trylast``, so it wins over the selected summarizer.
    """

    def __init__(self, text: str | Callable[[SummaryRequest], str] | None = None, fail: Exception | None = None):
        self.text = text
        self.fail = fail
        self.requests: list[SummaryRequest] = []

    @property
    def calls(self) -> int:
        return len(self.requests)

    @hookimpl
    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        if self.fail is not None:
            raise self.fail
        if self.text is None:
            from .plugins.summarize_extractive import ExtractiveSummarizer

            return ExtractiveSummarizer().summarize(request)
        text = self.text(request) if callable(self.text) else self.text
        return SummaryResult(text=text, tokens_in=request.replaced_tokens, tokens_out=len(text) // 4, model="recording")


class FixedPolicy:
    """A policy that answers the tier it is set to (``policy.tier = ...`` between turns).

    Registered without ``trylast``, it wins over the selected policy: the way to put a turn at a
    given tier whatever the window.
    """

    def __init__(self, tier: CompactionTier = CompactionTier.NONE):
        self.tier = tier

    @hookimpl
    def determine_tier(self) -> CompactionTier:
        return self.tier


def failing_summarizer(cause: str = "HTTP 503 from the summarizer") -> RecordingSummarizer:
    return RecordingSummarizer(fail=SummarizerError(cause))


class ListStore:
    """A record store that keeps records in a list, and notes which sessions were deleted."""

    def __init__(self) -> None:
        self.records: list[CompactionRecord] = []
        self.deleted: list[str] = []

    @hookimpl
    def persist_record(self, record: CompactionRecord) -> None:
        self.records.append(record)

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        self.deleted.append(session_id)


# --- synthetic histories -----------------------------------------------------------------------


def filler(chars: int, seed: str = "") -> str:
    """Exactly ``chars`` characters of numbered lines (about 80 wide) that differ for each seed."""
    lines: list[str] = []
    total = -1  # n lines joined take n - 1 newlines
    number = 1
    while total < chars:
        line = f"{seed} line {number}: " + "lorem ipsum dolor sit amet " * 3
        lines.append(line[:79])
        total += len(lines[-1]) + 1
        number += 1
    return "\n".join(lines)[:chars]


def tool_call(call_id: str, command: str, name: str = "bash") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps({"command": command})},
    }


def tool_turn(
    call_id: str, result_chars: int, *, text: str = "", command: str | None = None, name: str = "bash"
) -> list[dict[str, Any]]:
    """An assistant message with one tool call and the tool result of ``result_chars`` characters."""
    return [
        {
            "role": "assistant",
            "content": text,
            "tool_calls": [tool_call(call_id, command or f"cat file_{call_id}.py", name)],
        },
        {"role": "tool", "tool_call_id": call_id, "content": filler(result_chars, call_id)},
    ]


def build_history(
    result_sizes: Sequence[int],
    *,
    system: str | None = "You are a careful coding agent.",
    request: str = "Please fix the failing test in tests/test_parser.py without changing the public API.",
    id_prefix: str = "call_",
) -> list[dict[str, Any]]:
    """``[system?, user request, (assistant with a tool call, tool result) per size]``."""
    history: list[dict[str, Any]] = []
    if system is not None:
        history.append({"role": "system", "content": system})
    history.append({"role": "user", "content": request})
    for i, size in enumerate(result_sizes):
        history += tool_turn(f"{id_prefix}{i}", size, text=f"Step {i}: let me look at file_{id_prefix}{i}.py.")
    return history


def estimate(messages: Iterable[Mapping[str, Any] | Message]) -> int:
    """Tokens of ``messages`` as the default ``tokens-chars`` counts them (characters ÷ 4, per message)."""
    total = 0
    for i, m in enumerate(messages):
        message = m if isinstance(m, Message) else message_from_dict(m, i)
        total += int(char_count(message) / 4 + 0.999)
    return total


def window_for(history: Sequence[Mapping[str, Any]], ratio: float) -> int:
    """The context window at which ``history`` fills ``ratio`` of it (rounded so it is not below)."""
    return max(int(estimate(history) / ratio), 1)


def fallback_bound(view: Sequence[Mapping[str, Any]], compactor: ProgressiveCompactor) -> int:
    """The most tokens a view made by the truncation fallback may take: the budget, or, when the
    newest exchange alone is larger, the pinned messages and that exchange (it stays whenever it
    fits the window); never more than the window."""
    from .anchors import COMPACTION_MARKER

    def compaction(index: int) -> bool:
        return index < len(view) and str(view[index].get("content") or "").startswith(COMPACTION_MARKER)

    def apart(index: int) -> bool:
        return view[index]["role"] == "user" and carried_result(message_from_dict(view[index])) is not None

    config = compactor.config
    pinned = 0  # the system message, the user's request pinned before the compaction message, that message
    while pinned < len(view) and (
        view[pinned]["role"] in ("system", "developer") or compaction(pinned) or compaction(pinned + 1)
    ):
        pinned += 1
    start = len(view)  # the newest exchange: a message, the results (and those apart from a call) after it
    while start > pinned and (view[start - 1]["role"] == "tool" or apart(start - 1)):
        start -= 1
    start = max(start - 1, pinned)
    budget = int(config.fallback_budget * config.context_window)
    return min(max(budget, estimate(view[:pinned]) + estimate(view[start:])), config.context_window)


def compaction_message(view: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The ``[Context Compaction]`` message of ``view``. It follows the system message and, once
    a summary covers the user's request, that request as a message of its own."""
    from .anchors import COMPACTION_MARKER

    for m in view:
        if str(m.get("content") or "").startswith(COMPACTION_MARKER):
            return m
    raise AssertionError("the view has no [Context Compaction] message")


def problems(view: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the OpenAI chat API would reject in ``view``; empty when it is valid."""
    return view_problems([message_from_dict(m, i) for i, m in enumerate(view)])


__all__ = [
    "FixedPolicy",
    "ListStore",
    "RecordingSummarizer",
    "SecretRegistry",
    "build_history",
    "compaction_message",
    "compactor_factory",
    "estimate",
    "failing_summarizer",
    "fallback_bound",
    "filler",
    "make_compactor",
    "make_config",
    "problems",
    "tool_call",
    "tool_turn",
    "window_for",
]
