"""``state-redis``: session state in a Redis server that every worker reaches (``url``, else the environment variable ``url_env`` names, default ``COMPACTOR_REDIS_URL``), with an optional ``ttl``. Needs the ``[redis]`` extra.

The summary, anchors, covered boundary and offload entries of each session, so that any worker
can serve its next turn. A save is compare-and-set on the state's version in one atomic
statement: two workers that compacted the same turn cannot both win (the loser starts its turn
over from the stored state). A turn that changes nothing reads the state once; a state this
process already parsed is not parsed again. Secrets are masked before anything is written.
"""

from __future__ import annotations

from progressive_compactor.plugin import DatabaseState, RedisDatabase, RedisSettings


class RedisState(DatabaseState):
    name = "state-redis"
    backend = RedisDatabase
    Config = RedisSettings
