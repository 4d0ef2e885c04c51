"""Session state, records and offloaded results in a database: the backends of the built-in
``*-sqlite``, ``*-postgres`` and ``*-redis`` plugins.

Each backend is one class that owns its schema (tables or keys), its connection and its
migrations, with one method per thing a plugin keeps: :class:`SqliteDatabase` (the standard
library's ``sqlite3``, one file, WAL mode), :class:`PostgresDatabase` (psycopg 3 with a
connection pool, extra ``[postgres]``) and :class:`RedisDatabase` (redis-py, extra ``[redis]``).
The plugins are thin: they turn models into text, mask secrets, and call the backend. Drivers are
imported when the first connection opens, never when this package is imported.

What every backend guarantees, so that a fleet of worker processes behaves as one process:

- a state save is compare-and-set on the state's version, in one atomic statement (or script);
- a record is stored once, keyed by its id, however often a write is retried;
- an offloaded result's handle is given to the first text written under it and never rewritten
  (:func:`~progressive_compactor.tools.offload_handles`), so any worker reads back the same bytes;
- a write is a transaction (or one Lua script): a crash or a lost connection leaves the old data
  or the new, never part of it;
- a connection lost with the server (a restart, a proxy that drops it) is retried once on a new
  connection; every write is safe to repeat;
- a connection string's password is registered as a secret and masked (``***``) in every message
  and every ``where`` the plugins report;
- a connection string is read as its driver reads it, without connecting, when the plugin's block
  is checked (a value from the environment: when the plugin starts); one the driver cannot use is
  a :class:`~progressive_compactor.errors.ConfigError` naming the setting and the shape to write.
"""

from __future__ import annotations

from .common import connection_string, decode, encode, new_stamp, require_module, storable_json
from .postgres import PostgresDatabase, PostgresSettings
from .redis import RedisDatabase, RedisSettings
from .roles import DatabaseOffloader, DatabaseRecords, DatabaseState
from .sqlite import SqliteDatabase, SqliteSettings

__all__ = [
    "DatabaseOffloader",
    "DatabaseRecords",
    "DatabaseState",
    "PostgresDatabase",
    "PostgresSettings",
    "RedisDatabase",
    "RedisSettings",
    "SqliteDatabase",
    "SqliteSettings",
    "connection_string",
    "decode",
    "encode",
    "new_stamp",
    "require_module",
    "storable_json",
]
