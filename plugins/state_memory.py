"""``state-memory``: session state kept in this process (the default: one worker per session)."""

from __future__ import annotations

from progressive_compactor.hookspecs import hookimpl
from progressive_compactor.models import SessionState


class MemoryState:
    def __init__(self) -> None:
        self.states: dict[str, SessionState] = {}

    @hookimpl(trylast=True)
    def load_state(self, session_id: str) -> SessionState | None:
        return self.states.get(session_id)

    @hookimpl(trylast=True)
    def save_state(self, session_id: str, state: SessionState) -> bool:
        self.states[session_id] = state
        return True

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        self.states.pop(session_id, None)
