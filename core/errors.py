"""Every exception the library raises on purpose derives from :class:`CompactorError`."""

from __future__ import annotations

from typing import Any


class CompactorError(Exception):
    """Root of the library's exceptions."""


class ConfigError(CompactorError):
    """A config file or block is invalid. ``problems`` holds one line per problem, with its path."""

    def __init__(self, problems: list[str], source: str | None = None):
        self.problems = list(problems)
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(where + "; ".join(self.problems))


class PluginError(CompactorError):
    """A plugin could not be found, imported or registered. ``plugin`` names it."""

    def __init__(self, message: str, plugin: str | None = None, distribution: str | None = None):
        self.plugin = plugin
        self.distribution = distribution
        super().__init__(message)


class InvalidMessagesError(CompactorError):
    """The messages given to the compactor are not a chat history. ``index`` is the bad message."""

    def __init__(self, message: str, index: int | None = None, value: Any = None):
        self.index = index
        self.value = value
        super().__init__(message)


class SummarizerError(CompactorError):
    """A summarizer failed; ``cause`` is a short readable reason that goes into ``record.error``."""

    def __init__(self, cause: str, *, retryable: bool = False, status: int | None = None):
        self.cause = cause
        self.retryable = retryable
        self.status = status
        super().__init__(cause)


class OffloadError(CompactorError):
    """Writing or reading an offloaded tool result failed. ``handle`` names the result."""

    def __init__(self, message: str, handle: str | None = None):
        self.handle = handle
        super().__init__(message)


class FallbackError(CompactorError):
    """The essential truncation fallback gave no answer or an answer that breaks its contract."""
