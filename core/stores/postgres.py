"""PostgreSQL: session state, records and offloaded results on a server every worker reaches
(psycopg 3 and its connection pool: ``pip install 'progressive-compactor[postgres]'``).

Connections are autocommit and pooled (``pool_size`` per plugin and process), so a turn that
changes nothing costs one statement, one round trip: the state's version and stamp, its data only
when it changed since this process last read it. A save is one ``UPDATE ... WHERE version = v -
1`` (or ``INSERT ... ON CONFLICT DO NOTHING`` for a new session): compare-and-set in one atomic
statement. A record is inserted ``ON CONFLICT (id) DO NOTHING``. An offload is one transaction;
its text is stored once however many handles name it (``compactor_texts``, keyed by its
sha256). ``timeout`` bounds connecting, waiting for a pooled connection, and every statement on
the server (``statement_timeout``). A transaction left idle for 2 x (``timeout`` + 1 s), which no
running worker's ever is (a worker stopped inside one: SIGSTOP, a debugger, a frozen VM, a network
lost without a reset), is ended by the server (``idle_in_transaction_session_timeout``), and the
row locks the other workers wait for go with it. A statement whose connection was lost (a server
restart, a proxy that drops it) is run again once on a fresh connection; every write is safe to
repeat.

Schema, in the ``schema`` setting's namespace (created if missing), created on first use and
versioned in ``compactor_schema``; :data:`MIGRATIONS` step *n* takes version *n* to *n + 1*,
applied in one transaction under an advisory lock so that two workers starting together never
both migrate; a database whose version is newer than this release knows is refused, never
changed::

    compactor_schema   (component text PRIMARY KEY, version integer, migrated timestamptz)
    compactor_state    (session_id text PRIMARY KEY, version bigint, stamp text, data bytea, updated timestamptz)
    compactor_records  (seq bigserial PRIMARY KEY, id text UNIQUE, session_id text, created timestamptz, data text)
    compactor_texts    (sha256 text PRIMARY KEY, data bytea)
    compactor_offloads (handle text PRIMARY KEY, session_id text, tool_call_id text,
                        sha256 text REFERENCES compactor_texts, chars bigint, created timestamptz)
"""

from __future__ import annotations

import math
import os
import re
import threading
from typing import TYPE_CHECKING, Any, Callable, NoReturn, TypeVar

import attrs

from ..converters import setting_check
from ..errors import StorageError
from ..forks import INHERITED, renew_lock_after_fork
from ..redaction import mask_passwords
from .common import (
    ANSWER_GRACE,
    TIMEOUT_RULE,
    WATCHDOG,
    MaskedLogs,
    Pauses,
    connection_check,
    connection_string,
    fail,
    is_storable,
    require_module,
    shown,
    storable_id,
    storable_text,
    usable_timeout,
)

if TYPE_CHECKING:
    from ..plugin_manager import PluginContext

T = TypeVar("T")
COMPONENT = "progressive-compactor"
SCHEMA_VERSION = 1
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE {s}.compactor_state (session_id text PRIMARY KEY, version bigint NOT NULL,"
        " stamp text NOT NULL, data bytea NOT NULL, updated timestamptz NOT NULL DEFAULT now())",
        "CREATE TABLE {s}.compactor_records (seq bigserial PRIMARY KEY, id text NOT NULL UNIQUE,"
        " session_id text NOT NULL, created timestamptz NOT NULL DEFAULT now(), data text NOT NULL)",
        "CREATE INDEX compactor_records_session ON {s}.compactor_records (session_id, seq)",
        "CREATE TABLE {s}.compactor_texts (sha256 text PRIMARY KEY, data bytea NOT NULL)",
        "CREATE TABLE {s}.compactor_offloads (handle text PRIMARY KEY, session_id text NOT NULL,"
        " tool_call_id text NOT NULL, sha256 text NOT NULL REFERENCES {s}.compactor_texts (sha256),"
        " chars bigint NOT NULL, created timestamptz NOT NULL DEFAULT now())",
        "CREATE INDEX compactor_offloads_session ON {s}.compactor_offloads (session_id)",
        "CREATE INDEX compactor_offloads_sha256 ON {s}.compactor_offloads (sha256)",
    ),
)
"""Step *n* takes the schema from version *n* to *n + 1*; append a step to change it."""
MIGRATION_LOCK = 0x636F6D70  # pg_advisory_xact_lock key while migrating ("comp")
_UNREACHABLE = Pauses("unreachable")
"""Servers (by connection string) that could not be reached lately."""
TABLES = {"state": "compactor_state", "records": "compactor_records", "offloads": "compactor_offloads"}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
DSN_SHAPE = "postgresql://user:password@host:5432/dbname, or host=... port=5432 dbname=... user=..."
DRIVER_LOGS = MaskedLogs("psycopg", "psycopg.pool")
"""On psycopg's loggers while a pool is open: what the pool logs never holds a password."""


def _refused(why: str) -> ValueError:
    return ValueError(f"is not a libpq connection string: {why}; write it as {DSN_SHAPE}")


def dsn_password(dsn: str) -> str | None:
    """The password of a libpq connection string, read as libpq reads it, without connecting.
    Raises :class:`ValueError` (the password masked) for one that libpq cannot use: another
    URL scheme (an SQLAlchemy ``postgresql+psycopg://``, ``http://``), text that is neither a
    URL nor ``key=value`` pairs, an unknown option, a port that is not 1 to 65535."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    scheme = _URL_SCHEME.match(dsn.strip())
    if scheme and scheme.group(0) not in ("postgresql:", "postgres:"):
        why = f"{shown(dsn, dsn)!r} starts with {scheme.group(0)!r}; libpq reads only postgresql:// and postgres://"
        if scheme.group(0).startswith(("postgresql+", "postgres+")):
            why += " (an SQLAlchemy URL: drop its +driver)"
        raise _refused(why)
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        why = " ".join(shown(str(exc), dsn).split())
        raise _refused(why) from None
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            # the port is not named: libpq reads a piece of a password holding a / as the port
            why = f"a port is not a number from 1 to 65535 in {shown(dsn, dsn)!r}"
            raise _refused(why)
    password = params.get("password")
    return str(password) if password else None


@attrs.frozen
class PostgresSettings:
    """The server, the namespace, the pool and the time any one operation may take."""

    dsn: str | None = attrs.field(default=None, validator=connection_check(dsn_password, "psycopg"))
    """A libpq connection string (``postgresql://user:password@host:5432/db`` or ``host=...``),
    checked without connecting; default: the environment variable ``dsn_env`` names (checked when
    the plugin starts). Its password is masked everywhere."""
    dsn_env: str = "COMPACTOR_POSTGRES_DSN"
    schema: str = attrs.field(
        default="public",
        validator=setting_check(
            lambda v: bool(_IDENTIFIER.fullmatch(v)),
            "schema must be a plain SQL name (letters, digits, _), got {value!r}",
        ),
    )
    """The namespace of the tables; created on first use when missing."""
    pool_size: int = attrs.field(
        default=4, validator=setting_check(lambda v: v >= 1, "pool_size must be 1 or more, got {value}")
    )
    """Connections kept per plugin and process (one serves a turn; more serve threads at once)."""
    timeout: float = attrs.field(default=10.0, validator=setting_check(usable_timeout, TIMEOUT_RULE))
    """Seconds to connect, to wait for a pooled connection, and for any statement on the server."""


class PostgresDatabase:
    """A connection pool per process (opened on first use, opened again after a fork) and the
    schema, migrated on first use."""

    def __init__(self, settings: PostgresSettings, context: PluginContext, plugin: str):
        require_module("psycopg", "postgres", plugin)
        self.dsn = connection_string(
            settings.dsn, settings.dsn_env, "PostgreSQL", plugin, "dsn", context.secrets, dsn_password
        )
        self.settings = settings
        self.secrets = context.secrets
        self.plugin = plugin
        self.safe_dsn = mask_passwords(self.dsn)
        self.server_key = self.dsn
        self.schema = f'"{settings.schema}"'
        self._pool: Any = None
        self._pid = 0
        self._migrated = False
        self._masking = False
        self._lock = threading.Lock()
        renew_lock_after_fork(self)

    def where(self, kind: str) -> str:
        return f"{self.safe_dsn} {self.settings.schema}.{TABLES[kind]}"

    def _sql(self, text: str) -> str:
        return text.replace("{s}", self.schema)

    # --- the pool and the schema -------------------------------------------------------------

    def _ready(self) -> Any:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._not_down()  # again: the connection this call waited behind may have failed
                import psycopg
                from psycopg_pool import ConnectionPool

                timeout = self.settings.timeout
                if self._pool is not None:  # inherited through fork: never used, nor closed, here
                    INHERITED.append(self._pool)
                if not self._masking:  # before the pool exists: its first attempt may log
                    DRIVER_LOGS.attach(self.secrets)
                    self._masking = True
                self._pool = None
                # One connection first: a server it cannot reach says why within ``timeout``, once
                # (a pool that waited in vain says only that it waited, and learning why would
                # mean waiting again).
                try:
                    psycopg.connect(self.dsn, **self._connection_settings()).close()
                except psycopg.Error as exc:
                    where = f"PostgreSQL {self.safe_dsn}"
                    fail(where, exc, self.secrets, detail=self._unreachable(f"connecting: {exc}"))
                pool = ConnectionPool(
                    self.dsn,
                    min_size=1,
                    max_size=self.settings.pool_size,
                    kwargs=self._connection_settings(),
                    configure=self._configure,
                    timeout=timeout,
                    name=self.plugin,
                    num_workers=1,
                    open=False,
                )
                try:  # connected before it is first used: no login in the background races a turn
                    pool.open(wait=True, timeout=timeout)
                except BaseException:
                    pool.close()
                    raise
                self._pool, self._pid, self._migrated = pool, os.getpid(), False
            pool = self._pool
        if not self._migrated:
            self._run(self._migrate, pool)
            self._migrated = True
        return pool

    def _connection_settings(self) -> dict[str, Any]:
        """How every connection is made, pooled or not."""
        return {
            "autocommit": True,
            "connect_timeout": max(2, math.ceil(self.settings.timeout)),
            "application_name": "progressive-compactor",
            "prepare_threshold": None,  # one round trip per statement, always
        }

    def _configure(self, conn: Any) -> None:
        """Every new connection's ``statement_timeout`` and ``idle_in_transaction_session_timeout``,
        in one statement: sent before the server can cancel it, so watched (a server that stops
        answering would keep the pool's thread waiting forever)."""
        statement = max(1, round(self.settings.timeout * 1000))
        # A running worker's transaction never lasts past ``timeout`` + 1 s (the watchdog cuts it);
        # one idle twice that long is a stopped worker's (see the module's docstring): the server
        # ends it, and its row locks go with it. At most PostgreSQL's 32-bit limit.
        idle = min(round(2 * self._patience * 1000), 2**31 - 1)
        with WATCHDOG.watch(conn, self._patience):
            conn.execute(
                "SELECT set_config('statement_timeout', %s, false),"
                " set_config('idle_in_transaction_session_timeout', %s, false)",
                (f"{statement}ms", f"{idle}ms"),
            )

    def _migrate(self, conn: Any) -> None:
        import psycopg

        try:
            row = conn.execute(
                self._sql("SELECT version FROM {s}.compactor_schema WHERE component = %s"), (COMPONENT,)
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            row = None
        if row is not None and row[0] == SCHEMA_VERSION:
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            if (
                conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.settings.schema,)).fetchone()
                is None
            ):
                conn.execute(self._sql("CREATE SCHEMA {s}"))
            conn.execute(
                self._sql(
                    "CREATE TABLE IF NOT EXISTS {s}.compactor_schema (component text PRIMARY KEY,"
                    " version integer NOT NULL, migrated timestamptz NOT NULL DEFAULT now())"
                )
            )
            row = conn.execute(
                self._sql("SELECT version FROM {s}.compactor_schema WHERE component = %s FOR UPDATE"), (COMPONENT,)
            ).fetchone()
            version = 0 if row is None else int(row[0])
            if version > SCHEMA_VERSION:
                raise StorageError(
                    f"{self.safe_dsn} schema {self.settings.schema} has version {version}, newer than this release "
                    f"knows ({SCHEMA_VERSION}): upgrade progressive-compactor"
                )
            for step in MIGRATIONS[version:]:
                for statement in step:
                    conn.execute(self._sql(statement))
            conn.execute(
                self._sql(
                    "INSERT INTO {s}.compactor_schema (component, version) VALUES (%s, %s) ON CONFLICT (component)"
                    " DO UPDATE SET version = EXCLUDED.version, migrated = now()"
                ),
                (COMPONENT, SCHEMA_VERSION),
            )

    def _run(self, work: Callable[[Any], T], pool: Any = None) -> T:
        """``work(connection)`` on a pooled connection; once more on a fresh one when the
        connection turns out to be lost (a server restart, a dropped connection). A server that
        cannot be reached fails every call at once for a few seconds (:class:`.common.Pauses`)."""
        import psycopg
        from psycopg_pool import PoolTimeout

        where = f"PostgreSQL {self.safe_dsn}"
        self._not_down()
        for attempt in (1, 2):
            conn = None
            cut = [False]
            try:
                with (pool or self._ready()).connection() as conn, WATCHDOG.watch(conn, self._patience) as cut:
                    return work(conn)
            except PoolTimeout as exc:
                return self._run_direct(work, where, exc)
            except psycopg.Error as exc:
                if cut[0]:
                    self._no_answer(where, exc)
                if attempt == 1 and conn is not None and (conn.closed or getattr(conn, "broken", False)):
                    # The others were likely lost too: replace them first, without a word to them
                    # (checking each one waits, without a limit, on a server that stopped answering).
                    lost = pool or self._pool
                    if lost is not None:
                        lost.drain()
                    continue
                fail(where, exc, self.secrets)
        raise AssertionError("unreachable")

    def _not_down(self) -> None:
        _UNREACHABLE.check(self.server_key, f"PostgreSQL {self.safe_dsn}")

    def _unreachable(self, cause: str) -> str:
        text = self.secrets.redact(mask_passwords(" ".join(cause.split())))
        _UNREACHABLE.start(self.server_key, self.settings.timeout, text)
        return text

    def _run_direct(self, work: Callable[[Any], T], where: str, waited: BaseException) -> T:
        """``work`` on a connection of its own, when the pool waited in vain. The pool only says
        it waited: connect once to learn why. A server that is back while the pool still waits
        before its next try (it backs off after failed ones) does the work at once; one that
        cannot be reached is said so, and fails every call at once for a few seconds."""
        import psycopg

        try:
            conn = psycopg.connect(self.dsn, **self._connection_settings())
        except psycopg.Error as exc:
            fail(where, waited, self.secrets, detail=self._unreachable(f"{waited}; connecting: {exc}"))
        cut = [False]
        try:
            with conn, WATCHDOG.watch(conn, self._patience) as cut:
                self._configure(conn)
                return work(conn)
        except psycopg.Error as exc:
            if cut[0]:
                self._no_answer(where, exc)
            fail(where, exc, self.secrets)

    @property
    def _patience(self) -> float:
        return self.settings.timeout + ANSWER_GRACE

    def _no_answer(self, where: str, exc: BaseException) -> NoReturn:
        """A statement the watchdog cut: the server is as good as unreachable, for a few seconds."""
        why = f"no answer within {self.settings.timeout:g} s; the connection was given up"
        fail(where, exc, self.secrets, detail=self._unreachable(why))

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.close()
        if self._masking:
            self._masking = False
            DRIVER_LOGS.detach(self.secrets)

    # --- state -------------------------------------------------------------------------------

    def load_state(self, session_id: str, stamp: str | None) -> tuple[int, str, bytes | None] | None:
        sid = storable_id(session_id)
        sql = self._sql(
            "SELECT version, stamp, CASE WHEN stamp = %s THEN NULL ELSE data END FROM {s}.compactor_state"
            " WHERE session_id = %s"
        )
        row = self._run(lambda c: c.execute(sql, (stamp, sid)).fetchone())
        return None if row is None else (int(row[0]), str(row[1]), None if row[2] is None else bytes(row[2]))

    def save_state(self, session_id: str, version: int, stamp: str, data: bytes) -> bool:
        sid = storable_id(session_id)
        # The same save again (its stamp: a retry whose first reply was lost) is no conflict.
        if version == 1:
            sql = self._sql(
                "INSERT INTO {s}.compactor_state AS held (session_id, version, stamp, data) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (session_id) DO UPDATE SET updated = now()"
                " WHERE held.version = EXCLUDED.version AND held.stamp = EXCLUDED.stamp"
            )
            params: tuple[Any, ...] = (sid, version, stamp, data)
        else:
            sql = self._sql(
                "UPDATE {s}.compactor_state SET version = %s, stamp = %s, data = %s, updated = now()"
                " WHERE session_id = %s AND (version = %s OR (version = %s AND stamp = %s))"
            )
            params = (version, stamp, data, sid, version - 1, version, stamp)
        return bool(self._run(lambda c: c.execute(sql, params).rowcount))

    # --- records -----------------------------------------------------------------------------

    def add_record(self, record_id: str, session_id: str, text: str) -> bool:
        sid = storable_id(session_id)
        sql = self._sql(
            "INSERT INTO {s}.compactor_records (id, session_id, data) VALUES (%s, %s, %s) ON CONFLICT (id) DO NOTHING"
        )
        return bool(self._run(lambda c: c.execute(sql, (record_id, sid, text)).rowcount))

    def read_records(self, session_id: str) -> list[str]:
        sid = storable_id(session_id)
        sql = self._sql("SELECT data FROM {s}.compactor_records WHERE session_id = %s ORDER BY seq")
        return [row[0] for row in self._run(lambda c: c.execute(sql, (sid,)).fetchall())]

    # --- offloaded results -------------------------------------------------------------------

    def offload(
        self, session_id: str, tool_call_id: str, handles: tuple[str, ...], sha: str, data: bytes, chars: int
    ) -> str | None:
        """The handle that holds ``data``: the first of ``handles`` that is free (now taken) or
        already holds this very text; None when each holds another text."""
        sid = storable_id(session_id)
        call = storable_text(tool_call_id)  # the handle names it already (a safe name)
        add_text = self._sql(
            "INSERT INTO {s}.compactor_texts (sha256, data) VALUES (%s, %s)"
            " ON CONFLICT (sha256) DO UPDATE SET sha256 = EXCLUDED.sha256"  # locked: no delete takes it meanwhile
        )
        add_handle = self._sql(
            "INSERT INTO {s}.compactor_offloads (handle, session_id, tool_call_id, sha256, chars)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (handle) DO NOTHING RETURNING handle"
        )
        holder = self._sql("SELECT sha256 FROM {s}.compactor_offloads WHERE handle = %s")

        class Taken(Exception):
            """Every handle holds another text: roll the text back."""

        def store(c: Any) -> str | None:
            try:
                with c.transaction():
                    c.execute(add_text, (sha, data))
                    for handle in handles:
                        if c.execute(add_handle, (handle, sid, call, sha, chars)).fetchone() is not None:
                            return handle
                        row = c.execute(holder, (handle,)).fetchone()
                        if row is not None and row[0] == sha:
                            return handle
                    raise Taken
            except Taken:
                return None

        return self._run(store)

    def read_offloaded(self, handle: str) -> bytes | None:
        if not is_storable(handle):  # no handle holds it
            return None
        sql = self._sql(
            "SELECT t.data FROM {s}.compactor_offloads o JOIN {s}.compactor_texts t ON t.sha256 = o.sha256"
            " WHERE o.handle = %s"
        )
        row = self._run(lambda c: c.execute(sql, (handle,)).fetchone())
        return None if row is None else bytes(row[0])

    # --- sessions ----------------------------------------------------------------------------

    def sessions(self, kind: str) -> list[tuple[str, float]]:
        column = "updated" if kind == "state" else "created"
        sql = self._sql(
            f"SELECT session_id, extract(epoch FROM max({column})) FROM {{s}}.{TABLES[kind]}"  # noqa: S608 - fixed names
            " GROUP BY session_id ORDER BY session_id"
        )
        return [(str(sid), float(updated)) for sid, updated in self._run(lambda c: c.execute(sql).fetchall())]

    def delete(self, kind: str, session_id: str) -> None:
        sid = storable_id(session_id)
        if kind == "offloads":  # texts no other session's result shares go with it
            gone = self._sql("DELETE FROM {s}.compactor_offloads WHERE session_id = %s RETURNING sha256")
            lock = self._sql("SELECT 1 FROM {s}.compactor_texts WHERE sha256 = ANY(%s) ORDER BY sha256 FOR UPDATE")
            unshared = self._sql(  # a statement of its own: it sees what an offload that held a lock just added
                "DELETE FROM {s}.compactor_texts t WHERE t.sha256 = ANY(%s) AND NOT EXISTS"
                " (SELECT 1 FROM {s}.compactor_offloads o WHERE o.sha256 = t.sha256)"
            )

            def delete(c: Any) -> None:
                with c.transaction():
                    shas = sorted({row[0] for row in c.execute(gone, (sid,)).fetchall()})
                    if shas:
                        c.execute(lock, (shas,))
                        c.execute(unshared, (shas,))

            self._run(delete)
            return
        sql = self._sql(f"DELETE FROM {{s}}.{TABLES[kind]} WHERE session_id = %s")  # noqa: S608 - fixed names
        self._run(lambda c: c.execute(sql, (sid,)))
