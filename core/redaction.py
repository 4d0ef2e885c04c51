"""Secrets that must never be written anywhere: records, logs, offloaded files, session state.

A plugin that reads an API key registers it with the compactor's :class:`SecretRegistry`; every
writer passes its text through :meth:`SecretRegistry.redact` before it leaves the process. Keys
reach text in more ways than verbatim: an ``env`` dump in a tool result, a provider that echoes
the ``Authorization`` header (sometimes upper-cased), a truncation that cut the key in two and
kept its start before the cut and its end after it. So a key is masked wherever it appears in any
letter case, and so is any piece of it of at least :data:`MIN_PIECE` characters that starts or
ends it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import unquote

import attrs

MASK = "[REDACTED]"
MIN_SECRET = 4
"""Shorter values are not registered: masking them would mangle ordinary text."""
MIN_PIECE = 10
"""A start or an end of a key this long is masked too (truncation may have cut the rest)."""


class SecretRegistry:
    """Values that must never be written anywhere (API keys); :meth:`redact` masks them."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: list[str] = []
        self._pattern: re.Pattern[str] | None = None
        for value in values:
            self.add(value)

    def add(self, value: str | None) -> None:
        """Register ``value`` (shorter than :data:`MIN_SECRET` characters: ignored)."""
        if value and len(value) >= MIN_SECRET and value not in self._values:
            self._values.append(value)
            pieces = set()
            for secret in self._values:
                piece = min(MIN_PIECE, len(secret))
                pieces.add(re.escape(secret[:piece]))
                pieces.add(re.escape(secret[-piece:]))
            self._pattern = re.compile("|".join(sorted(pieces, key=len, reverse=True)), re.IGNORECASE)

    def __bool__(self) -> bool:
        return bool(self._values)

    def __len__(self) -> int:
        """How many secrets are registered (text masked with fewer may need masking again)."""
        return len(self._values)

    def redact(self, text: str) -> str:
        """``text`` with every registered secret, and every start or end of one, masked."""
        if self._pattern is None or not text or self._pattern.search(text) is None:
            return text
        lowered = text.lower()
        if len(lowered) != len(text):  # a few characters lower-case to two: keep positions
            lowered = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
        spans: list[tuple[int, int]] = []
        for secret in self._values:
            key = secret.lower()
            piece = min(MIN_PIECE, len(key))
            spans += _prefix_spans(lowered, key, piece)
            spans += _suffix_spans(lowered, key, piece)
        if not spans:
            return text
        out, last = [], 0
        for start, end in _merged(spans):
            out.append(text[last:start])
            out.append(MASK)
            last = end
        out.append(text[last:])
        return "".join(out)


def _prefix_spans(text: str, key: str, piece: int) -> list[tuple[int, int]]:
    """Spans of ``text`` that are a start of ``key`` at least ``piece`` long (the whole key too)."""
    spans = []
    start = text.find(key[:piece])
    while start != -1:
        length = piece
        while length < len(key) and start + length < len(text) and text[start + length] == key[length]:
            length += 1
        spans.append((start, start + length))
        start = text.find(key[:piece], start + 1)
    return spans


def _suffix_spans(text: str, key: str, piece: int) -> list[tuple[int, int]]:
    """Spans of ``text`` that are an end of ``key`` at least ``piece`` long."""
    spans = []
    tail = key[-piece:]
    found = text.find(tail)
    while found != -1:
        end = found + piece
        length = piece
        while length < len(key) and end - length - 1 >= 0 and text[end - length - 1] == key[-length - 1]:
            length += 1
        spans.append((end - length, end))
        found = text.find(tail, found + 1)
    return spans


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def redact_data(value: Any, redact: Callable[[str], str]) -> Any:
    """``value`` with ``redact`` applied to every string in it: the values of mappings, lists and
    tuples and the fields of attrs instances, walked recursively (mapping keys and other values
    as they are). Data is redacted this way *before* it is serialised: JSON escapes ``"`` and
    ``\\``, HTML ``& < > " '``, and a secret holding one no longer matches once escaped."""
    if type(value) is str:
        return redact(value)
    if isinstance(value, Mapping):
        return {k: redact_data(v, redact) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(redact_data(v, redact) for v in value)
    if attrs.has(type(value)):
        fields = attrs.fields(type(value))
        return attrs.evolve(value, **{f.alias: redact_data(getattr(value, f.name), redact) for f in fields if f.init})
    return value


URL_PASSWORD = re.compile(r"://[^:/@\s]*:([^@\s]+)@")
"""The password of a connection string (``postgresql://user:secret@host/db``)."""
KEY_PASSWORD = re.compile(r"""(?i)\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&'"]+)""")
"""A ``password=...`` setting: libpq's ``host=db password=secret`` or a URL's ``?password=secret``."""
PASSWORD_MASK = "***"  # noqa: S105 - the mask, not a password


def connection_passwords(text: str) -> list[str]:
    """The passwords a connection string holds (URL ``user:password@`` and ``password=``)."""
    found = []
    for value in URL_PASSWORD.findall(text):
        found += [value, unquote(value)] if unquote(value) != value else [value]
    for value in KEY_PASSWORD.findall(text):
        found.append(value[1:-1].replace("\\'", "'").replace("\\\\", "\\") if value.startswith("'") else value)
    return [p for p in found if p]


def mask_passwords(text: str) -> str:
    """``text`` with the password of every connection string in it replaced by ``***``, for
    messages and where-strings that name a server (``postgresql://app:***@db:5432/agents``)."""
    text = URL_PASSWORD.sub(lambda m: m.group(0).replace(f":{m.group(1)}@", f":{PASSWORD_MASK}@"), text)
    return KEY_PASSWORD.sub(lambda m: m.group(0)[: m.start(1) - m.start(0)] + PASSWORD_MASK, text)


SECRET_KEY = re.compile(r"(?i)^(?:.*[_-])?(?:api[_-]?key|key|secret|password|passwd|token|credentials?|authorization)$")
"""Setting (and header) names whose values are secrets: registered by :func:`config_secrets`,
masked by ``config show``. ``api_key_env`` is not one: such settings hold the *name* of an
environment variable, never its value."""


def secret_setting(key: str, parent: str = "") -> bool:
    """Whether the setting ``key`` of the mapping ``parent`` holds a secret: a secret-looking name
    (:data:`SECRET_KEY`), or any header of ``extra_headers`` (an Azure ``api-key``, a proxy's
    ``Authorization``, whatever its name)."""
    return parent == "extra_headers" or bool(SECRET_KEY.match(key))


_AUTH_SCHEME = re.compile(r"(?i)^(?:bearer|basic)\s+")


def _credential(value: str) -> str:
    """A header or setting value without its ``Bearer ``/``Basic `` scheme: the key itself."""
    return _AUTH_SCHEME.sub("", value.strip())


def config_secrets(config: Any) -> list[str]:
    """The secrets a config names: the values of the environment variables its plugin blocks
    name in ``*_env`` settings (``api_key_env: OPENAI_API_KEY``, ``dsn_env: ...``), the values of
    secret settings (:func:`secret_setting`: a secret-looking name, or any ``extra_headers``
    entry; without a ``Bearer``/``Basic`` scheme), and the passwords of connection strings
    written in it. Registered by every compactor, so that they
    are masked even where the plugin that reads them is not loaded (a command that only reads
    records)."""
    found: list[str] = []

    def walk(value: Any, key: str = "", parent: str = "") -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, str(k), key)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v, key, parent)
        elif isinstance(value, str):
            if key.endswith("_env") and os.environ.get(value):
                found.append(os.environ[value])
                found.extend(connection_passwords(os.environ[value]))
            if secret_setting(key, parent):
                found.append(_credential(value))
            found.extend(connection_passwords(value))

    walk(getattr(config, "config", {}))
    return found


__all__ = [
    "MASK",
    "SECRET_KEY",
    "SecretRegistry",
    "config_secrets",
    "connection_passwords",
    "mask_passwords",
    "redact_data",
    "secret_setting",
]
