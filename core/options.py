"""The compactor's keyword options (a todo injector, a memory extractor, a record store), each
turned into a small plugin, so that the core calls every extension the same way: through hooks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .hookspecs import hookimpl
from .models import CompactionRecord, Message


class TodoInjector:
    """``todo_injector``: text (a todo list, a plan) carried in every compaction message."""

    def __init__(self, fn: Callable[[], str | None]):
        self.fn = fn

    @hookimpl
    def todo_context(self, session_id: str) -> str | None:
        return self.fn()


class MemoryExtractor:
    """``memory_extractor``: called with the messages about to be summarized."""

    def __init__(self, fn: Callable[[Sequence[Message]], Any]):
        self.fn = fn

    @hookimpl
    def extract_memory(self, messages: Sequence[Message], session_id: str) -> None:
        self.fn(messages)


class RecordStore:
    """``record_store``: an object with ``save(record)`` or ``append(record)``, or a callable."""

    def __init__(self, store: Any):
        self.store = store

    @hookimpl
    def persist_record(self, record: CompactionRecord) -> None:
        save = getattr(self.store, "save", None) or getattr(self.store, "append", None) or self.store
        save(record)


def keyword_plugins(
    todo_injector: Callable[[], str | None] | None,
    memory_extractor: Callable[[Sequence[Message]], Any] | None,
    record_store: Any,
    offloader: Any,
) -> list[tuple[str, Any]]:
    """The ``(name, plugin)`` pairs for the keyword options that were given."""
    plugins: list[tuple[str, Any]] = []
    if todo_injector is not None:
        plugins.append(("todo-injector", TodoInjector(todo_injector)))
    if memory_extractor is not None:
        plugins.append(("memory-extractor", MemoryExtractor(memory_extractor)))
    if record_store is not None:
        plugins.append(("record-store", RecordStore(record_store)))
    if offloader is not None:
        plugins.append(("offloader", offloader))
    return plugins
