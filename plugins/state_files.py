"""``state-files``: session state as one JSON file per session, shared by worker processes.

DESIGN.md "State outside the process": the summary, anchors, covered boundary and offload cache
of a session live here, so that its turns can be served by different processes on one host (or a
shared folder). Files are owner-only and replaced atomically.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from progressive_compactor.converters import state_from_json, state_to_json
from progressive_compactor.hookspecs import hookimpl
from progressive_compactor.models import SessionState
from progressive_compactor.plugin_manager import PluginContext

from .offload_files import safe_name, write_private


class FileState:
    @attrs.frozen
    class Config:
        directory: str = "~/.compactor/state"

    def __init__(self, config: Config | None = None, context: PluginContext | None = None):
        self.config = config or self.Config()
        context = context or PluginContext()
        self.directory = Path(self.config.directory.replace("{work_dir}", context.work_dir)).expanduser().absolute()

    def path_for(self, session_id: str) -> Path:
        return self.directory / f"{safe_name(session_id)}.json"

    @hookimpl(trylast=True)
    def load_state(self, session_id: str) -> SessionState | None:
        try:
            return state_from_json(self.path_for(session_id).read_text("utf-8"))
        except FileNotFoundError:
            return None

    @hookimpl(trylast=True)
    def save_state(self, session_id: str, state: SessionState) -> bool:
        write_private(self.path_for(session_id), state_to_json(state).encode("utf-8"))
        return True

    @hookimpl
    def on_delete_session(self, session_id: str) -> None:
        self.path_for(session_id).unlink(missing_ok=True)
