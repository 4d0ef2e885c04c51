"""Example plugins for progressive-compactor: a headline summarizer and a SQLite record store.

Each plugin is a class declared as an entry point in the ``progressive_compactor`` group (see
``pyproject.toml``); the compactor imports it only when a config selects it by that name.
"""

from .headline import HeadlineSummarizer
from .sqlite_store import SqliteStore

__all__ = ["HeadlineSummarizer", "SqliteStore"]
