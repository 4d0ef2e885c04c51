"""``store-redis``: CompactionRecords in a Redis server that every worker reaches (``url``, else the environment variable ``url_env`` names, default ``COMPACTOR_REDIS_URL``), with an optional ``ttl``. Needs the ``[redis]`` extra.

One entry per record, keyed by its id: a record is stored once however often its write is
retried, and read back oldest first by ``compactor records``, ``ProgressiveCompactor.records()``
and the other readers of ``read_records``. Records of tier None are skipped unless
``record_none`` is set. Secrets are masked before anything is written.
"""

from __future__ import annotations

import attrs

from progressive_compactor.plugin import DatabaseRecords, RedisDatabase, RedisSettings


class RedisStore(DatabaseRecords):
    name = "store-redis"
    backend = RedisDatabase

    @attrs.frozen
    class Config(RedisSettings):
        record_none: bool = False
        """Also store the records of turns that compacted nothing (for cost over every turn)."""
