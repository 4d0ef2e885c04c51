"""The hooks of a state, record or offload plugin, written once over any backend.

A built-in database plugin is a subclass that names itself, its backend and its settings::

    class PostgresState(DatabaseState):
        name = "state-postgres"
        backend = PostgresDatabase
        Config = PostgresSettings

Models become text here (``state_to_json``, ``record_to_json``), secrets are masked here, and the
backend stores bytes and text. A backend implements ``load_state``, ``save_state``,
``add_record``, ``read_records``, ``offload``, ``read_offloaded``, ``sessions``, ``delete``,
``where`` and ``close`` (see :class:`~progressive_compactor.stores.SqliteDatabase`).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, ClassVar

import attrs

from ..converters import record_from_dict, record_to_json, state_from_json, state_to_json, unreadable
from ..errors import OffloadError, StorageError
from ..forks import renew_lock_after_fork
from ..hookspecs import hookimpl
from ..models import CompactionRecord, Message, OffloadEntry, SessionInfo, SessionState
from ..notice import changed_view
from ..plugin_manager import PluginContext
from ..tools import offload_handles, offload_text
from .common import decode, encode, new_stamp, storable_json

log = logging.getLogger("progressive_compactor")
CACHED_STATES = 10_000
"""Parsed states a state plugin keeps, one per session, to skip parsing an unchanged state."""


class _DatabasePlugin:
    name: ClassVar[str]
    backend: ClassVar[type]
    Config: ClassVar[type]
    kind: ClassVar[str]

    def __init__(self, config: Any = None, context: PluginContext | None = None):
        self.config = config or self.Config()
        self.context = context or PluginContext()
        self.db = self.backend(self.config, self.context, self.name)

    @hookimpl
    def list_sessions(self) -> list[SessionInfo]:
        where = self.db.where(self.kind)
        return [SessionInfo(sid, updated, self.name, where) for sid, updated in self.db.sessions(self.kind)]

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        self.db.delete(self.kind, session_id)

    def close(self) -> None:
        self.db.close()


class DatabaseState(_DatabasePlugin):
    """``load_state`` / ``save_state``: one row (or hash) per session, compare-and-set on its
    version. A state that has not changed since this process last read it is not parsed again
    (its stamp is compared in the same round trip)."""

    kind = "state"

    def __init__(self, config: Any = None, context: PluginContext | None = None):
        super().__init__(config, context)
        self._cache: dict[str, tuple[str, SessionState]] = {}
        self._lock = threading.Lock()
        renew_lock_after_fork(self)

    def _remember(self, session_id: str, stamp: str, state: SessionState) -> None:
        with self._lock:
            self._cache.pop(session_id, None)
            if len(self._cache) >= CACHED_STATES:
                self._cache.pop(next(iter(self._cache)))
            self._cache[session_id] = (stamp, state)

    @hookimpl(trylast=True)
    def load_state(self, session_id: str) -> SessionState | None:
        cached = self._cache.get(session_id)
        found = self.db.load_state(session_id, cached[0] if cached else None)
        if found is None:
            self._cache.pop(session_id, None)
            return None
        version, stamp, data = found
        if data is None and cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            state = state_from_json(decode(data or b""))
        except Exception as exc:  # noqa: BLE001 - unreadable: start over at the stored version
            log.warning(
                "session state of %r in %s is unreadable (%s); starting over from the history",
                session_id,
                self.db.where(self.kind),
                type(exc).__name__,
            )
            return SessionState(version=version)
        if state.version != version:  # the column is the truth
            state = attrs.evolve(state, version=version)
        self._remember(session_id, stamp, state)
        return state

    @hookimpl(trylast=True)
    def save_state(self, session_id: str, state: SessionState) -> bool:
        raw = state_to_json(state)
        text = self.context.secrets.redact_registered(raw)  # the core masked its texts
        stamp = new_stamp()
        if not self.db.save_state(session_id, state.version, stamp, encode(text)):
            return False
        self._remember(session_id, stamp, state if text == raw else state_from_json(text))
        return True


class DatabaseRecords(_DatabasePlugin):
    """``persist_record`` / ``read_records``: one row (or list entry) per record, keyed by the
    record's id, so a retried write never stores it twice. The records of calls that changed
    nothing and reported no error (tier None, a Warn with no result worth offloading) are skipped
    unless the plugin's ``record_none`` setting is on."""

    kind = "records"

    @hookimpl
    def persist_record(self, record: CompactionRecord) -> None:
        if not (getattr(self.config, "record_none", False) or changed_view(record)):
            return
        text = storable_json(self.context.secrets.redact_registered(record_to_json(record)))
        self.db.add_record(record.id, record.session_id, text)

    @hookimpl(trylast=True)
    def read_records(self, session_id: str) -> list[CompactionRecord] | None:
        texts = self.db.read_records(session_id)
        if not texts:
            return None
        found = []
        for number, text in enumerate(texts, 1):
            try:
                found.append(record_from_dict(json.loads(text)))
            except Exception as exc:  # noqa: BLE001 - one unreadable record does not hide the others
                log.warning(
                    "record %d of session %r in %s is unreadable (%s); skipped",
                    number,
                    session_id,
                    self.db.where(self.kind),
                    unreadable(exc),
                )
        return found


class DatabaseOffloader(_DatabasePlugin):
    """``offload`` / ``read_offloaded``: a large tool result's text (secrets masked) stored under
    the handle :func:`~progressive_compactor.tools.offload_handles` gives it, with the same
    placeholder as ``offload-files``. The first writer of a handle keeps it; a reused tool-call
    id with other text gets ``{call}.{sha12}``."""

    kind = "offloads"

    @hookimpl(trylast=True)
    def offload(self, message: Message, session_id: str, threshold: int) -> OffloadEntry | None:
        kept = offload_text(message, threshold, self.context.secrets.redact)
        if kept is None:
            return None
        handles = offload_handles(session_id, kept.tool_call_id, kept.sha256)
        where = self.db.where(self.kind)
        try:
            handle = self.db.offload(session_id, kept.tool_call_id, handles, kept.sha256, kept.data, kept.chars)
        except StorageError as exc:
            raise OffloadError(str(exc), handle=handles[0], path=where) from exc
        if handle is None:
            raise OffloadError(
                f"cannot keep the result of {kept.tool_call_id!r}: {where} holds other texts under "
                f"{' and '.join(handles)}",
                handle=handles[0],
                path=where,
            )
        preview_lines = getattr(self.config, "preview_lines", 10)
        preview_chars = getattr(self.config, "preview_chars", 1500)
        return kept.entry(handle, where, preview_lines, preview_chars)

    @hookimpl(trylast=True)
    def read_offloaded(self, handle: str) -> str | None:
        data = self.db.read_offloaded(handle.strip())
        return None if data is None else decode(data)
