"""``state-memory``: session state kept in this process (the default: one worker per session)."""

from __future__ import annotations

import threading
import time

from progressive_compactor.plugin import SessionInfo, SessionState, hookimpl, renew_lock_after_fork


class MemoryState:
    def __init__(self) -> None:
        self.states: dict[str, SessionState] = {}
        self.updated: dict[str, float] = {}
        self._lock = threading.Lock()
        renew_lock_after_fork(self)

    @hookimpl(trylast=True)
    def load_state(self, session_id: str) -> SessionState | None:
        return self.states.get(session_id)

    @hookimpl(trylast=True)
    def save_state(self, session_id: str, state: SessionState) -> bool:
        with self._lock:  # compare-and-set: only over the version this state replaces
            current = self.states.get(session_id)
            if (current.version if current is not None else 0) != state.version - 1:
                return False
            self.states[session_id] = state
            self.updated[session_id] = time.time()
        return True

    @hookimpl
    def list_sessions(self) -> list[SessionInfo]:
        return [SessionInfo(sid, self.updated.get(sid, 0.0), "state-memory", "memory") for sid in self.states]

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        self.states.pop(session_id, None)
        self.updated.pop(session_id, None)
