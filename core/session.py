"""A session: the full history an agent keeps, and the compacted view it sends each turn.

The history is never changed by compaction (it is what the agent would store); the view is
derived from it on every turn.

```python
session = Session(ProgressiveCompactor("default"), "ticket-42")
session.append({"role": "user", "content": "Fix the flaky test"})
view = session.view()            # send this to the LLM
session.append(reply)            # the history keeps everything; the view is derived
```

``session.records`` holds the records of the session's newest calls, oldest first, and
``session.last_record`` the newest: ``keep_records`` of them (100 unless given; ``None`` keeps
every one, which a long-running loop should not), so that a loop of thousands of calls does not
keep every summary in memory. Every record is also given to the record store
(``ProgressiveCompactor.records(session_id)`` reads them back).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from .compactor import ProgressiveCompactor
from .messages import message_from_dict
from .models import CompactionRecord
from .tools import handle_read_tool_call

KEEP_RECORDS = 100
"""How many of its newest records a session keeps in memory unless told otherwise."""


class _SessionBase:
    def __init__(
        self,
        compactor: ProgressiveCompactor,
        session_id: str | None = None,
        *,
        keep_records: int | None = KEEP_RECORDS,
    ):
        if keep_records is not None and keep_records < 1:
            raise ValueError(f"keep_records must be at least 1 (the last record is kept), got {keep_records}")
        self.compactor = compactor
        self.session_id = compactor._session_id(session_id)  # None: the compactor's; "" is refused
        self.history: list[dict[str, Any]] = []
        self.keep_records = keep_records
        self.records: list[CompactionRecord] = []
        """The newest records, oldest first (a list: slices work)."""

    def append(self, *messages: Mapping[str, Any]) -> None:
        """Add messages to the history; each is checked first (a bad one adds none of them), none
        is ever changed afterwards."""
        for i, m in enumerate(messages):
            message_from_dict(m, len(self.history) + i)
        self.history.extend(dict(m) for m in messages)

    def extend(self, messages: Iterable[Mapping[str, Any]]) -> None:
        self.append(*messages)

    def add_tool_result(self, tool_call_id: str, content: str, **extra: Any) -> dict[str, Any]:
        """Append a tool result, offloading it first when it is over ``tool_result_threshold``:
        an oversized result never enters the history, only its placeholder and handle do."""
        message = {"role": "tool", "tool_call_id": tool_call_id, "content": content, **extra}
        message = self.compactor.offload_tool_result(message, self.session_id)
        self.append(message)
        return message

    def read_tool_call(self, arguments: str | dict[str, Any]) -> str:
        """Answer the model's ``read_tool_result`` call: one of this session's offloaded results
        (errors come back as text the model can read)."""
        return handle_read_tool_call(self.compactor, arguments, self.session_id)

    def observe_usage(self, input_tokens: int) -> float | None:
        """The provider's reported input tokens for the last view this session gave: anchors the
        session's token counts (see :meth:`ProgressiveCompactor.observe_usage`), paired with that
        view even when other callers of the session id had views made since."""
        return self.compactor.observe_usage(self.session_id, input_tokens, self.last_record)

    @property
    def last_record(self) -> CompactionRecord | None:
        return self.records[-1] if self.records else None

    def _keep(self, record: CompactionRecord) -> None:
        """Add ``record``, the oldest dropped beyond ``keep_records``."""
        self.records.append(record)
        if self.keep_records is not None and len(self.records) > self.keep_records:
            del self.records[: len(self.records) - self.keep_records]

    def delete(self) -> list[str]:
        """Delete the session everywhere (offloads, records, state); returns the errors, if any."""
        self.history.clear()
        self.records.clear()
        return self.compactor.delete_session(self.session_id)


class Session(_SessionBase):
    def view(self) -> list[dict[str, Any]]:
        """The compacted view to send to the LLM for the next turn."""
        view, record = self.compactor.compact_with_record(self.history, self.session_id)
        self._keep(record)
        return view

    def compact_now(self) -> list[dict[str, Any]]:
        """A manual ``/compact``: force the Emergency tier (its record is the last one)."""
        view, record = self.compactor._run_sync(self.history, self.session_id, force=True)
        self._keep(record)
        return view


class AsyncSession(_SessionBase):
    async def view(self) -> list[dict[str, Any]]:
        view, record = await self.compactor.acompact_with_record(self.history, self.session_id)
        self._keep(record)
        return view

    async def compact_now(self) -> list[dict[str, Any]]:
        view, record = await self.compactor._run_async(self.history, self.session_id, force=True)
        self._keep(record)
        return view
