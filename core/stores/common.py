"""What the database backends share: text encoding, stamps, connection strings, drivers, errors."""

from __future__ import annotations

import json
import os
import secrets
from typing import NoReturn

from ..errors import ConfigError, StorageError
from ..redaction import SecretRegistry, connection_passwords, mask_passwords

INHERITED: list[object] = []
"""Connections and pools a forked process inherited from its parent: kept referenced, never used
and never closed (closing them from the child could end the parent's sessions)."""


def encode(text: str) -> bytes:
    """Text as bytes for a binary column: any Python string, lone surrogates included."""
    return text.encode("utf-8", "surrogatepass")


def decode(data: bytes | memoryview) -> str:
    return bytes(data).decode("utf-8", "surrogatepass")


def storable_json(text: str) -> str:
    """JSON text that a text column accepts: as it is, or with non-ASCII characters escaped when
    it holds a lone surrogate (valid JSON that no UTF-8 column can store)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(json.loads(text), ensure_ascii=True, separators=(",", ":"))
    return text


def storable_id(session_id: str) -> str:
    """A session id as a text column takes it; an id no UTF-8 column can hold is refused."""
    try:
        session_id.encode("utf-8")
    except UnicodeEncodeError:
        raise StorageError(f"session id {session_id!r} is not valid Unicode text (a lone surrogate)") from None
    if "\x00" in session_id:
        raise StorageError(f"session id {session_id!r} holds a NUL character")
    return session_id


def new_stamp() -> str:
    """A value that names one saved state: a cached state is reused only while the stored stamp
    is the same (a version number alone repeats after a session is deleted and started again)."""
    return secrets.token_hex(8)


def connection_string(
    value: str | None, env: str, what: str, plugin: str, setting: str, registry: SecretRegistry
) -> str:
    """The connection string of a plugin's block, else the environment variable ``env`` names;
    its password is registered with ``registry`` (masked wherever text is written)."""
    found = value or (os.environ.get(env) if env else None)
    if not found:
        where = f"the environment variable {env}" if env else f"{setting}_env"
        raise ConfigError(
            [f"no {what} connection string: set {setting} in the block of {plugin}, or {where} @ $.config.{plugin}"]
        )
    for password in connection_passwords(found):
        registry.add(password)
    return found


def require_module(module: str, extra: str, plugin: str) -> None:
    """Refuse to start a plugin whose driver is not installed, naming the extra to install."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ConfigError(
            [f"plugin {plugin!r} needs {module}: pip install 'progressive-compactor[{extra}]' @ $.plugins"]
        )


def fail(where: str, exc: BaseException, registry: SecretRegistry, detail: str = "") -> NoReturn:
    """Raise a :class:`StorageError` that names the server (password masked) and the cause."""
    cause = f"{type(exc).__name__}: {detail or exc}".strip()
    cause = registry.redact(mask_passwords(cause))
    raise StorageError(f"{where}: {' '.join(cause.split())}", path=where) from exc
