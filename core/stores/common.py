"""What the database backends share: text encoding, stamps, connection strings, drivers, errors."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import secrets
import threading
from typing import Any, Callable, NoReturn

from ..converters import SettingError
from ..errors import ConfigError, StorageError
from ..redaction import PASSWORD_MASK, SecretRegistry, connection_passwords, mask_passwords

MAX_TIMEOUT = 2_147_483
"""The longest ``timeout`` in seconds: PostgreSQL's ``statement_timeout`` and SQLite's busy
timeout are 32-bit numbers of milliseconds (SQLite's wraps to no wait at all past it), and an
infinite one is no timeout."""
TIMEOUT_RULE = f"timeout must be more than 0 and at most {MAX_TIMEOUT} seconds, got {{value}}"


def usable_timeout(value: float) -> bool:
    return 0 < value <= MAX_TIMEOUT  # false for NaN too


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


def storable_text(text: str) -> str:
    """A text that only describes (a tool-call id beside its handle) as a text column takes it:
    a NUL or a lone surrogate, which no UTF-8 column holds, becomes U+FFFD."""
    if is_storable(text):
        return text
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace").replace("\x00", "\ufffd")


def is_storable(text: str) -> bool:
    """Whether a text column can hold ``text`` (no NUL, no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def new_stamp() -> str:
    """A value that names one saved state: a cached state is reused only while the stored stamp
    is the same (a version number alone repeats after a session is deleted and started again)."""
    return secrets.token_hex(8)


Parse = Callable[[str], str | None]
"""A backend's reading of a connection string, without connecting: the password it holds (None:
none), or :class:`ValueError` saying what is wrong and how to write it (its password masked)."""


def shown(text: str, source: str | None = None) -> str:
    """``text`` as a message may show it: the password of every connection string in it masked,
    even of one that no driver can parse (``redis//:secret@host``, ``postgresql:/user:secret@db``),
    and, with ``source`` (the connection string a driver's message is about), every password of
    ``source`` wherever ``text`` quotes it alone (``unexpected spaces found in "pass word"``)."""
    if source:
        userinfo = source.rpartition("@")[0].partition("//")[2] if "@" in source else ""
        for password in [*connection_passwords(source), userinfo.partition(":")[2]]:
            if password and password != PASSWORD_MASK:
                text = text.replace(password, PASSWORD_MASK)
    text = mask_passwords(text)
    for word in text.split():
        userinfo = word.strip("\"'").rpartition("@")[0]  # what comes before the host
        if "//" in userinfo:
            userinfo = userinfo.partition("//")[2]
        _, colon, password = userinfo.partition(":")  # all after the user's name: more, never less
        if colon and password and password != PASSWORD_MASK:
            text = text.replace(f":{password}@", f":{PASSWORD_MASK}@")
    return text


def connection_string(
    value: str | None, env: str, what: str, plugin: str, setting: str, registry: SecretRegistry, parse: Parse
) -> str:
    """The connection string of a plugin's block, else the environment variable ``env`` names,
    checked by ``parse`` (a malformed one is a :class:`ConfigError` naming the setting or the
    variable it came from); its password is registered with ``registry`` (masked wherever text
    is written)."""
    found = value or (os.environ.get(env) if env else None)
    if not found:
        where = f"the environment variable {env}" if env else f"{setting}_env"
        raise ConfigError(
            [f"no {what} connection string: set {setting} in the block of {plugin}, or {where} @ $.config.{plugin}"]
        )
    try:
        password = parse(found)
    except ValueError as exc:
        source, path = (setting, setting) if value else (f"the environment variable {env}", f"{setting}_env")
        raise ConfigError([f"{source} {exc} @ $.config.{plugin}.{path}"]) from None
    for secret in [*connection_passwords(found), password]:
        registry.add(secret)
    return found


def connection_check(parse: Parse, module: str) -> Callable[[Any, Any, Any], None]:
    """An attrs validator: a connection string, when one is set, that ``parse`` accepts (checked
    when the driver ``module`` is installed; without it the plugin refuses to start anyway)."""

    def validate(instance: Any, attribute: Any, value: str | None) -> None:
        if value and importlib.util.find_spec(module) is not None:
            try:
                parse(value)
            except ValueError as exc:
                raise SettingError(f"{attribute.name} {exc}", attribute.name) from None

    return validate


class MaskedLogs(logging.Filter):
    """Masks connection-string passwords, and the secrets of every registry attached, in the
    records of a driver's loggers (a driver's message may repeat a connection string whole). On
    the loggers while at least one registry is attached."""

    def __init__(self, *loggers: str):
        super().__init__()
        self.loggers = loggers
        self._registries: list[SecretRegistry] = []
        self._lock = threading.Lock()

    def attach(self, registry: SecretRegistry) -> None:
        """Mask ``registry``'s secrets until :meth:`detach` is called as often as this."""
        with self._lock:
            if not self._registries:
                for name in self.loggers:
                    logging.getLogger(name).addFilter(self)
            self._registries.append(registry)

    def detach(self, registry: SecretRegistry) -> None:
        with self._lock:
            for index, attached in enumerate(self._registries):  # once: plugins may share a registry
                if attached is registry:
                    del self._registries[index]
                    break
            if not self._registries:
                for name in self.loggers:
                    logging.getLogger(name).removeFilter(self)

    def masked(self, text: str) -> str:
        text = shown(text)
        for registry in list(self._registries):
            text = registry.redact(text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - arguments that do not fit the format: logged as they are
            message = f"{record.msg} {record.args}"
        masked = self.masked(message)
        if masked != message:
            record.msg, record.args = masked, ()
        if record.exc_info:
            text = record.exc_text or logging.Formatter().formatException(record.exc_info)
            masked = self.masked(text)
            if masked != text:  # the traceback's text, masked, stands for the exception
                record.exc_text, record.exc_info = masked, None
        if record.stack_info:
            record.stack_info = self.masked(record.stack_info)
        return True


def require_module(module: str, extra: str, plugin: str) -> None:
    """Refuse to start a plugin whose driver is not installed, naming the extra to install."""
    if importlib.util.find_spec(module) is None:
        raise ConfigError(
            [f"plugin {plugin!r} needs {module}: pip install 'progressive-compactor[{extra}]' @ $.plugins"]
        )


def fail(where: str, exc: BaseException, registry: SecretRegistry, detail: str = "") -> NoReturn:
    """Raise a :class:`StorageError` that names the server (password masked) and the cause."""
    cause = f"{type(exc).__name__}: {detail or exc}".strip()
    cause = registry.redact(mask_passwords(cause))
    raise StorageError(f"{where}: {' '.join(cause.split())}", path=where) from exc
