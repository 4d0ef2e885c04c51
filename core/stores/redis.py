"""Redis: session state, records and offloaded results on a server every worker reaches
(redis-py: ``pip install 'progressive-compactor[redis]'``).

Every operation that reads and writes is one Lua script, atomic on the server and one round trip:
a turn that changes nothing costs one ``EVALSHA`` (the state's version and stamp, its data only
when it changed since this process last read it). A save is compare-and-set on the version; a
record is appended once (its id is kept in a set beside the list); an offloaded result's handle
is taken by the first text written under it. Each script is safe to run twice, so a command whose
connection was lost (a restart, a dropped connection) is run again once on a new connection. With
``ttl`` set, a session's keys expire that many seconds after its last write, except its state and
its offloaded results: a load (every turn) renews the state's TTL, and, when the session's
``offloads:`` set has less than ``ttl`` left, gives the set and every handle it names ``2 * ttl``
(at most once per ``ttl`` of activity, one ``PEXPIRE`` per handle; a turn stays one round trip).
A handle starts with its session's name, so it is in that session's set only; the set never
outlives a handle it names (an offload gives a new handle the set's expiry), so an active
session never loses a result its view names, and an idle one's expire between ``ttl`` and ``2 *
ttl`` after its last turn. The load renews the offloads under its own prefix, with its own
``ttl``: ``offload-redis`` on the same database and ``prefix`` as ``state-redis``, which has a
``ttl`` too (as the bundled ``fleet-redis`` has it).

A session's offloaded results are deleted by one script, with the handles its ``offloads:`` set
names at that moment (one another worker adds meanwhile is either deleted too or added after);
its state and records in one ``MULTI``/``EXEC``. Nothing another worker writes meanwhile makes a
delete start over.

Keys, under ``prefix`` (default ``compactor:``; session ids and handles as they are)::

    state:{session}        hash  v (version), s (stamp), d (the state's JSON), u (updated)
    records:{session}      list  one record's JSON per entry, oldest first
    record-ids:{session}   set   the ids of those records
    offload:{handle}       hash  sha (of the text), data, session, call
    offloads:{session}     set   the session's handles
    sessions:{kind}        zset  session -> when last written, by the server's clock (kind: state,
                                 records, offloads);
                                 with ``ttl``, each write forgets a few expired sessions

The layout's version is kept under ``schema`` (:data:`SCHEMA_VERSION`); a server holding a newer
one is refused. Scripts touch keys of several sessions' sets, so use a single Redis server (or a
primary with replicas, or Sentinel), not Redis Cluster.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import attrs

from ..converters import setting_check
from ..errors import StorageError
from ..forks import INHERITED, renew_lock_after_fork
from ..redaction import mask_passwords
from .common import (
    ANSWER_GRACE,
    TIMEOUT_RULE,
    WATCHDOG,
    Pauses,
    connection_check,
    connection_string,
    fail,
    require_module,
    shown,
    usable_timeout,
)

if TYPE_CHECKING:
    from ..plugin_manager import PluginContext

T = TypeVar("T")
SCHEMA_VERSION = 1
_UNREACHABLE = Pauses("unreachable")
"""Servers (by connection string) that could not be reached lately."""
KEYS = {"state": "state:", "records": "records:", "offloads": "offloads:"}
URL_SHAPE = "redis://[[user]:password@]host:6379/0, rediss://... for TLS, or unix:///path/to/redis.sock"


@functools.cache
def watched(base: type) -> type:
    """``base`` (the connection class a URL asks for: TCP, TLS or a Unix socket) whose replies are
    each given up, the connection cut (:data:`~progressive_compactor.stores.common.WATCHDOG`), when
    one has not come whole ``socket_timeout`` + 1 s after it was awaited: the socket timeout limits
    each read of the socket, so a reply that trickles in a byte at a time would keep a turn
    waiting as long as its size makes it."""
    import redis

    class Watched(base):
        def read_response(self, *args: Any, **kwargs: Any) -> Any:
            sock = getattr(self, "_sock", None)
            if sock is None or not self.socket_timeout:
                return super().read_response(*args, **kwargs)
            with WATCHDOG.watch(sock, self.socket_timeout + ANSWER_GRACE) as cut:
                try:
                    return super().read_response(*args, **kwargs)
                except redis.ConnectionError as exc:
                    if cut[0]:
                        raise redis.TimeoutError(
                            f"no complete reply within {self.socket_timeout:g} s; the connection was given up"
                        ) from exc
                    raise

    Watched.__name__ = Watched.__qualname__ = f"Watched{base.__name__}"
    return Watched


def url_password(url: str) -> str | None:
    """The password of a Redis URL, read as redis-py reads it, without connecting. Raises
    :class:`ValueError` (the password masked) for one that redis-py cannot use: no
    ``redis://``, ``rediss://`` or ``unix://`` scheme, a port that is not a number up to 65535,
    an option it cannot read."""
    from redis.connection import parse_url

    try:
        params = parse_url(url)
    except ValueError as exc:  # redis-py quotes what it could not read: a piece of a password, maybe
        said = re.sub(r"'[^']*'", "'...'", str(exc))
        why = " ".join(f"{shown(said, url)} in {shown(url, url)!r}".split())
        raise ValueError(f"is not a Redis URL: {why}; write it as {URL_SHAPE}") from None
    password = params.get("password")
    return str(password) if password else None


RENEW_OFFLOADS = """
local function renew(set, ttl, under)
  redis.call('PEXPIRE', set, 2 * ttl)
  for _, handle in ipairs(redis.call('SMEMBERS', set)) do redis.call('PEXPIRE', under .. handle, 2 * ttl) end
end
"""
"""Lua: a session's handles and their set live ``2 * ttl`` from now. The set never outlives one of
its handles (an offload gives a new handle the set's expiry), so while the set has ``ttl`` left,
so has every handle it names, and renewing them once per ``ttl`` of activity is enough."""
SERVER_TIME = """
local function server_time()
  local t = redis.call('TIME')
  return t[1] .. '.' .. string.format('%06d', tonumber(t[2]))
end
"""
"""Lua: the server's clock as seconds (a string, to the microsecond): when a session was written
is the one server's time, never a worker's (workers on several hosts disagree)."""
FORGET_EXPIRED = """
local function forget(index, under, now)
  local count = redis.call('ZCARD', index)
  if count == 0 then return end
  local start = math.floor(tonumber(now) * 1000000) % count
  for j = 0, 2 do
    local member = redis.call('ZRANGE', index, (start + j) % count, (start + j) % count)[1]
    if member and redis.call('EXISTS', under .. member) == 0 then redis.call('ZREM', index, member) end
  end
end
"""
"""Lua: with ``ttl``, a session's keys expire and nothing removes it from ``sessions:{kind}``
but a listing; so each write looks at three of the index's sessions (at ranks picked by the
clock) and forgets those whose key is gone: the index stays within a few times the sessions
alive, listed or not."""
LOAD_STATE = (
    RENEW_OFFLOADS
    + """
local r = redis.call('HMGET', KEYS[1], 'v', 's')
if not r[1] then return false end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  local left = redis.call('PTTL', KEYS[2])
  if left >= 0 and left < ttl then renew(KEYS[2], ttl, ARGV[3]) end
end
if r[2] == ARGV[1] then return {r[1], r[2]} end
return {r[1], r[2], redis.call('HGET', KEYS[1], 'd')}
"""
)
SAVE_STATE = (
    SERVER_TIME
    + FORGET_EXPIRED
    + """
local r = redis.call('HMGET', KEYS[1], 'v', 's')
local stored = tonumber(r[1] or '0')
local version = tonumber(ARGV[1])
if stored == version and r[2] == ARGV[2] then return 1 end
if stored ~= version - 1 then return 0 end
local now = server_time()
redis.call('HSET', KEYS[1], 'v', ARGV[1], 's', ARGV[2], 'd', ARGV[3], 'u', now)
local ttl = tonumber(ARGV[4])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
redis.call('ZADD', KEYS[2], now, ARGV[5])
if ttl > 0 then forget(KEYS[2], ARGV[6], now) end
return 1
"""
)
ADD_RECORD = (
    SERVER_TIME
    + FORGET_EXPIRED
    + """
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[2])
local now = server_time()
local ttl = tonumber(ARGV[3])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl); redis.call('PEXPIRE', KEYS[2], ttl) end
redis.call('ZADD', KEYS[3], now, ARGV[4])
if ttl > 0 then forget(KEYS[3], ARGV[5], now) end
return 1
"""
)
OFFLOAD = (
    RENEW_OFFLOADS
    + SERVER_TIME
    + FORGET_EXPIRED
    + """
local now = server_time()
for i = 1, 2 do
  local held = redis.call('HGET', KEYS[i], 'sha')
  if not held then
    redis.call('HSET', KEYS[i], 'sha', ARGV[1], 'data', ARGV[2], 'session', ARGV[3], 'call', ARGV[4])
  end
  if (not held) or held == ARGV[1] then
    redis.call('SADD', KEYS[3], ARGV[5 + i])
    redis.call('ZADD', KEYS[4], now, ARGV[3])
    local ttl = tonumber(ARGV[5])
    if ttl > 0 then
      local left = redis.call('PTTL', KEYS[3])
      if left >= ttl then redis.call('PEXPIRE', KEYS[i], left) else renew(KEYS[3], ttl, ARGV[8]) end
      forget(KEYS[4], ARGV[9], now)
    end
    return i
  end
end
return 0
"""
)


DELETE_OFFLOADS = """
local handles = redis.call('SMEMBERS', KEYS[1])
for _, handle in ipairs(handles) do redis.call('DEL', ARGV[1] .. handle) end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return #handles
"""
"""Lua: a session's offloaded results, the set that names them, and its entry in the index."""


@attrs.frozen
class RedisSettings:
    """The server, the key prefix, how long a session's keys live, and the time an operation may take."""

    url: str | None = attrs.field(default=None, validator=connection_check(url_password, "redis"))
    """``redis://[:password@]host:6379/0`` (``rediss://`` for TLS), checked without connecting;
    default: the environment variable ``url_env`` names (checked when the plugin starts). Its
    password is masked everywhere."""
    url_env: str = "COMPACTOR_REDIS_URL"
    prefix: str = "compactor:"
    """Put before every key, so that several applications (or test runs) share one server."""
    ttl: float = attrs.field(
        default=0.0,
        validator=setting_check(
            lambda v: v == 0 or v >= 0.001,
            "ttl must be 0 (kept until deleted) or at least 0.001 seconds (Redis counts milliseconds), got {value}",
        ),
    )
    """Seconds a session's keys live after its last write (state: after its last turn; offloaded
    results: at least that, at most twice, after the last turn that loaded its state); 0: until deleted."""
    timeout: float = attrs.field(default=10.0, validator=setting_check(usable_timeout, TIMEOUT_RULE))
    """Seconds to connect and to wait for any one reply (one still coming in, a byte now and then,
    ``timeout`` + 1 s after it was awaited is given up)."""


class RedisDatabase:
    """A client (its own connection pool) per process, opened on first use and again after a fork."""

    def __init__(self, settings: RedisSettings, context: PluginContext, plugin: str):
        require_module("redis", "redis", plugin)
        self.url = connection_string(
            settings.url, settings.url_env, "Redis", plugin, "url", context.secrets, url_password
        )
        self.settings = settings
        self.secrets = context.secrets
        self.safe_url = mask_passwords(self.url)
        self.server_key = self.url
        self.prefix = settings.prefix.encode("utf-8", "surrogatepass")
        self.ttl_ms = round(settings.ttl * 1000)
        self._client: Any = None
        self._scripts: dict[str, Any] = {}
        self._pid = 0
        self._lock = threading.Lock()
        renew_lock_after_fork(self)

    def where(self, kind: str) -> str:
        return f"{self.safe_url} {self.settings.prefix}{KEYS[kind]}*"

    def _key(self, *parts: str) -> bytes:
        return self.prefix + "".join(parts).encode("utf-8", "surrogatepass")

    # --- the client --------------------------------------------------------------------------

    def _ready(self) -> Any:
        with self._lock:
            if self._client is not None and self._pid == os.getpid():
                return self._client
            self._not_down()  # again: the connection this call waited behind may have failed
            if self._client is not None:  # inherited through fork: never used, nor closed, here
                INHERITED.append(self._client)
            import redis
            from redis.backoff import NoBackoff
            from redis.connection import Connection, parse_url
            from redis.retry import Retry

            timeout = self.settings.timeout
            kind = parse_url(self.url).get("connection_class", Connection)
            pool = redis.ConnectionPool.from_url(  # retries are ours: once, on a new connection
                self.url,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 0),
                connection_class=watched(kind),
            )
            client = redis.Redis(connection_pool=pool)
            scripts = {
                name: client.register_script(source)
                for name, source in (
                    ("load_state", LOAD_STATE),
                    ("save_state", SAVE_STATE),
                    ("add_record", ADD_RECORD),
                    ("offload", OFFLOAD),
                    ("delete_offloads", DELETE_OFFLOADS),
                )
            }
            self._check_schema(client)
            self._client, self._scripts, self._pid = client, scripts, os.getpid()
            return client

    def _check_schema(self, client: Any) -> None:
        import redis

        key = self._key("schema")
        try:
            client.set(key, SCHEMA_VERSION, nx=True)
            version = int(client.get(key) or 0)
        except redis.RedisError:
            client.close()
            raise
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"Redis {self.safe_url} keys under {self.settings.prefix!r} have layout version {version}, newer than"
                f" this release knows ({SCHEMA_VERSION}): upgrade progressive-compactor"
            )

    def _run(self, work: Callable[[Any], T]) -> T:
        """``work(client)``; once more on a new connection when the connection was lost. A
        server that cannot be reached (or does not answer in time) fails every call at once for a
        few seconds (:class:`.common.Pauses`)."""
        import redis

        where = f"Redis {self.safe_url}"
        self._not_down()
        try:
            client = self._ready()
        except redis.RedisError as exc:
            self._unreachable(exc)
            fail(where, exc, self.secrets)
        for attempt in (1, 2):
            try:
                return work(client)
            except redis.ConnectionError as exc:
                if attempt == 1:
                    client.connection_pool.disconnect(inuse_connections=False)
                    continue
                self._unreachable(exc)
                fail(where, exc, self.secrets)
            except redis.TimeoutError as exc:
                self._unreachable(exc)
                fail(where, exc, self.secrets)
            except redis.RedisError as exc:
                fail(where, exc, self.secrets)
        raise AssertionError("unreachable")

    def _not_down(self) -> None:
        _UNREACHABLE.check(self.server_key, f"Redis {self.safe_url}")

    def _unreachable(self, exc: BaseException) -> None:
        text = self.secrets.redact(mask_passwords(" ".join(f"{type(exc).__name__}: {exc}".split())))
        _UNREACHABLE.start(self.server_key, self.settings.timeout, text)

    def _script(self, name: str, keys: list[bytes], args: list[Any]) -> Any:
        return self._run(lambda client: self._scripts[name](keys=keys, args=args, client=client))

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._pid == os.getpid():
            client.close()
            client.connection_pool.disconnect()

    # --- state -------------------------------------------------------------------------------

    def load_state(self, session_id: str, stamp: str | None) -> tuple[int, str, bytes | None] | None:
        keys = [self._key("state:", session_id), self._key("offloads:", session_id)]
        found = self._script("load_state", keys, [stamp or "", self.ttl_ms, self._key("offload:")])
        if not found:
            return None
        return int(found[0]), found[1].decode(), found[2] if len(found) > 2 else None

    def save_state(self, session_id: str, version: int, stamp: str, data: bytes) -> bool:
        keys = [self._key("state:", session_id), self._key("sessions:state")]
        sid = session_id.encode("utf-8", "surrogatepass")
        args = [version, stamp, data, self.ttl_ms, sid, self._key(KEYS["state"])]
        return bool(self._script("save_state", keys, args))

    # --- records -----------------------------------------------------------------------------

    def add_record(self, record_id: str, session_id: str, text: str) -> bool:
        keys = [self._key("records:", session_id), self._key("record-ids:", session_id), self._key("sessions:records")]
        args = [
            record_id,
            text.encode("utf-8"),
            self.ttl_ms,
            session_id.encode("utf-8", "surrogatepass"),
            self._key(KEYS["records"]),
        ]
        return bool(self._script("add_record", keys, args))

    def read_records(self, session_id: str) -> list[str]:
        found = self._run(lambda c: c.lrange(self._key("records:", session_id), 0, -1))
        return [item.decode("utf-8") for item in found]

    # --- offloaded results -------------------------------------------------------------------

    def offload(
        self, session_id: str, tool_call_id: str, handles: tuple[str, ...], sha: str, data: bytes, chars: int
    ) -> str | None:
        """The handle that holds ``data``: the first of ``handles`` that is free (now taken) or
        already holds this very text; None when each holds another text."""
        first, second = handles
        keys = [
            self._key("offload:", first),
            self._key("offload:", second),
            self._key("offloads:", session_id),
            self._key("sessions:offloads"),
        ]
        sid = session_id.encode("utf-8", "surrogatepass")
        call = tool_call_id.encode("utf-8", "surrogatepass")
        args = [sha, data, sid, call, self.ttl_ms, first, second]
        args += [self._key("offload:"), self._key(KEYS["offloads"])]
        taken = int(self._script("offload", keys, args))
        return handles[taken - 1] if taken else None

    def read_offloaded(self, handle: str) -> bytes | None:
        found = self._run(lambda c: c.hget(self._key("offload:", handle), "data"))
        return None if found is None else bytes(found)

    # --- sessions ----------------------------------------------------------------------------

    def sessions(self, kind: str) -> list[tuple[str, float]]:
        index = self._key("sessions:", kind)

        def listed(client: Any) -> list[tuple[str, float]]:
            members = client.zrange(index, 0, -1, withscores=True)
            if not members:
                return []
            pipe = client.pipeline(transaction=False)
            for member, _ in members:
                pipe.exists(self.prefix + KEYS[kind].encode() + member)
            alive = pipe.execute()
            gone = [member for (member, _), exists in zip(members, alive, strict=True) if not exists]
            if gone:  # expired (ttl): forget them
                client.zrem(index, *gone)
            return [
                (member.decode("utf-8", "surrogatepass"), float(score))
                for (member, score), exists in zip(members, alive, strict=True)
                if exists
            ]

        return self._run(listed)

    def delete(self, kind: str, session_id: str) -> None:
        sid = session_id.encode("utf-8", "surrogatepass")
        listed = self._key(KEYS[kind], session_id)
        index = self._key("sessions:", kind)
        if kind == "offloads":  # the handles read and deleted at once: none another worker adds is missed
            self._script("delete_offloads", [listed, index], [self._key("offload:"), sid])
            return
        keys = [listed, self._key("record-ids:", session_id)] if kind == "records" else [listed]
        self._run(lambda client: client.pipeline(transaction=True).delete(*keys).zrem(index, sid).execute())
