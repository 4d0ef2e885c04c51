"""Every exception the library raises on purpose derives from :class:`CompactorError`::

CompactorError
├── ConfigError           a config file or block is invalid (every problem, with its path)
├── PluginError           a plugin cannot be found, imported or started
├── InvalidMessagesError  what was passed is not a chat history
├── SummarizerError       a summarizer failed (the turn falls back to truncation)
├── StorageError          a file or record cannot be written or read safely
│   └── OffloadError      an offloaded tool result cannot be written or read
├── StateConflictError    another turn of the same session is running
└── FallbackError         the essential truncation fallback broke its contract
"""

from __future__ import annotations

from typing import Any


class CompactorError(Exception):
    """Root of the library's exceptions."""


class ConfigError(CompactorError):
    """A config file or block is invalid. ``problems`` holds one line per problem, each with its
    path (``@ $.config.policy-thresholds.soft``) and, where there is one, the fix; ``source`` is
    the file or bundled name."""

    def __init__(self, problems: list[str], source: str | None = None):
        self.problems = list(problems)
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(where + "; ".join(self.problems))

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its problems, not its message: an error raised in a worker process (``ab
        # replay`` with several workers) arrives whole, not as the letters of its message.
        return (type(self), (self.problems, self.source))


class PluginError(CompactorError):
    """A plugin could not be found, imported or started. ``plugin`` names it, ``distribution``
    the package that declares it."""

    def __init__(self, message: str, plugin: str | None = None, distribution: str | None = None):
        self.plugin = plugin
        self.distribution = distribution
        super().__init__(message)


class InvalidMessagesError(CompactorError):
    """The messages given to the compactor are not a chat history. ``index`` is the position of
    the bad message and ``value`` the message itself."""

    def __init__(self, message: str, index: int | None = None, value: Any = None):
        self.index = index
        self.value = value
        super().__init__(message)


class SummarizerError(CompactorError):
    """A summarizer failed; ``cause`` is a short readable reason that goes into the record's
    ``errors``. ``retryable`` says whether asking again could help; ``status`` is the HTTP status,
    if there was one. ``tokens_in``, ``tokens_out`` and ``tokens_in_cached`` are the usage the
    provider reported for a reply that was rejected (cut off, refused, too large): it is billed
    all the same, so it goes into the record."""

    def __init__(
        self,
        cause: str,
        *,
        retryable: bool = False,
        status: int | None = None,
        tokens_in: int | None = None,
        tokens_out: int | None = None,
        tokens_in_cached: int | None = None,
    ):
        self.cause = cause
        self.retryable = retryable
        self.status = status
        self.tokens_in = tokens_in
        self.tokens_out = tokens_out
        self.tokens_in_cached = tokens_in_cached
        super().__init__(cause)

    def with_cause(self, cause: str, *, retryable: bool | None = None) -> SummarizerError:
        """The same failure with another ``cause`` (and ``retryable``, if given): the status and
        the usage stay."""
        return SummarizerError(
            cause,
            retryable=self.retryable if retryable is None else retryable,
            status=self.status,
            tokens_in=self.tokens_in,
            tokens_out=self.tokens_out,
            tokens_in_cached=self.tokens_in_cached,
        )


class StorageError(CompactorError):
    """A file could not be written or read, or was refused because it would leave its folder (a
    symbolic link, a path outside the root). ``path`` is the file or folder."""

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        super().__init__(message)


class OffloadError(StorageError):
    """Writing or reading an offloaded tool result failed. ``handle`` names the result. When
    writing fails, the compactor keeps the original text and records the error."""

    def __init__(self, message: str, handle: str | None = None, path: str | None = None):
        self.handle = handle
        super().__init__(message, path)


class StateConflictError(CompactorError):
    """Another turn of the same session changed its state first (two workers, or two concurrent
    calls on one compactor). ``session_id`` names the session."""

    def __init__(self, message: str, session_id: str | None = None):
        self.session_id = session_id
        super().__init__(message)


class FallbackError(CompactorError):
    """The essential truncation fallback gave no answer or an answer that breaks its contract."""
