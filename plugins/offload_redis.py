"""``offload-redis``: large tool results kept in a Redis server that every worker reaches (``url``, else the environment variable ``url_env`` names, default ``COMPACTOR_REDIS_URL``), with an optional ``ttl``. Needs the ``[redis]`` extra.

The handle is ``{session}/{call}`` and the placeholder the same as ``offload-files`` writes, so
a view does not depend on where results are kept. The first writer of a handle keeps it: a tool
call id that comes back with other text gets ``{call}.{sha12}``, and a handle is never rewritten,
so every worker reads back the same bytes. Secrets are masked before anything is written.
"""

from __future__ import annotations

import attrs

from progressive_compactor.plugin import DatabaseOffloader, RedisDatabase, RedisSettings, setting_check


class RedisOffloader(DatabaseOffloader):
    name = "offload-redis"
    backend = RedisDatabase

    @attrs.frozen
    class Config(RedisSettings):
        preview_lines: int = attrs.field(
            default=10, validator=setting_check(lambda v: v >= 0, "preview_lines must be 0 or more, got {value}")
        )
        preview_chars: int = attrs.field(
            default=1500, validator=setting_check(lambda v: v >= 0, "preview_chars must be 0 or more, got {value}")
        )
