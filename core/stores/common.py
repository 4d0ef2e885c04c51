"""What the database backends share: text encoding, stamps, connection strings, drivers, errors,
and the watchdog that gives up an answer that does not come in time."""

from __future__ import annotations

import heapq
import importlib.util
import json
import logging
import os
import secrets
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, NoReturn

from ..converters import SettingError
from ..errors import ConfigError, StorageError
from ..forks import renew_lock_after_fork, reset_after_fork
from ..redaction import PASSWORD_MASK, SecretRegistry, connection_passwords, mask_passwords

MAX_TIMEOUT = 2_147_483
"""The longest ``timeout`` in seconds: PostgreSQL's ``statement_timeout`` and SQLite's busy
timeout are 32-bit numbers of milliseconds (SQLite's wraps to no wait at all past it), and an
infinite one is no timeout."""
TIMEOUT_RULE = f"timeout must be more than 0 and at most {MAX_TIMEOUT} seconds, got {{value}}"


def usable_timeout(value: float) -> bool:
    return 0 < value <= MAX_TIMEOUT  # false for NaN too


ANSWER_GRACE = 1.0
"""Seconds past ``timeout`` an answer may take before its connection is cut (:data:`WATCHDOG`):
PostgreSQL cancels a statement at ``timeout`` itself, but a server that stops answering (frozen,
or a network that lost the way back) cannot, and psycopg would wait for it forever; a driver's
socket timeout limits each read of the socket, not an answer that trickles in a byte at a time."""


class _Watchdog:
    """One thread per process that cuts (shuts down the socket of) a connection whose statement
    or command has not answered by its deadline, so that the driver's wait ends with a lost
    connection."""

    def __init__(self) -> None:
        self._deadlines: list[tuple[float, int]] = []
        self._watched: dict[int, tuple[Any, list[bool]]] = {}
        self._lock = threading.Condition()
        self._pid = 0
        self._count = 0
        reset_after_fork(self, _Watchdog._forked)  # a child never waits for a lock its parent's thread held

    def _forked(self) -> None:
        self._deadlines, self._watched, self._lock, self._pid = [], {}, threading.Condition(), 0

    @contextmanager
    def watch(self, conn: Any, seconds: float) -> Iterator[list[bool]]:
        """Within the block, ``conn`` (anything with a ``fileno()``: a connection, a socket) is cut
        ``seconds`` from now; yields ``[cut]``, true once it was."""
        cut = [False]
        with self._lock:
            if self._pid != os.getpid():  # none yet, or the parent's (not running after a fork)
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="compactor-watchdog", daemon=True).start()
            self._count += 1
            token = self._count
            self._watched[token] = (conn, cut)
            heapq.heappush(self._deadlines, (time.monotonic() + seconds, token))
            if self._deadlines[0][1] == token:
                self._lock.notify()
        try:
            yield cut
        finally:
            with self._lock:
                del self._watched[token]

    def _run(self) -> None:
        with self._lock:
            while True:
                while self._deadlines and self._deadlines[0][1] not in self._watched:
                    heapq.heappop(self._deadlines)  # answered in time
                if not self._deadlines:
                    self._lock.wait()
                    continue
                deadline, token = self._deadlines[0]
                if time.monotonic() < deadline:
                    self._lock.wait(deadline - time.monotonic())
                    continue
                heapq.heappop(self._deadlines)
                conn, cut = self._watched[token]
                cut[0] = True
                try:
                    with socket.socket(fileno=os.dup(conn.fileno())) as sock:
                        sock.shutdown(socket.SHUT_RDWR)
                except Exception:  # noqa: BLE001, S110 - closed meanwhile: nothing to cut
                    pass


WATCHDOG = _Watchdog()


PAUSE = 3.0
"""Seconds (at most the store's ``timeout``) every call fails at once after one waited in vain."""


class Pauses:
    """What failed lately, by key (a server's connection string, a database file), and why: while
    its pause lasts every call fails at once, so a turn waits for a server that cannot be reached
    (or a lock that is not let go) once, not once per write, nor once per thread queued behind it.
    Shared by the plugins of a process."""

    def __init__(self, what: str):
        self.what = what
        """What the error says the key is: ``unreachable``, ``locked``."""
        self._until: dict[str, tuple[float, str]] = {}

    def start(self, key: str, timeout: float, why: str) -> None:
        self._until[key] = (time.monotonic() + min(timeout, PAUSE), why)

    def check(self, key: str, where: str, path: str | None = None) -> None:
        """Raise :class:`StorageError` while ``key``'s pause lasts."""
        paused = self._until.get(key)
        if paused is not None and time.monotonic() < paused[0]:
            message = f"{where}: {self.what}, not tried again for a few seconds ({paused[1]})"
            raise StorageError(message, path=path or where)


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
        renew_lock_after_fork(self)

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
