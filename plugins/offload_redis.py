"""``offload-redis``: large tool results kept in a Redis server that every worker reaches (``url``, else the environment variable ``url_env`` names, default ``COMPACTOR_REDIS_URL``), with an optional ``ttl``. Needs the ``[redis]`` extra.

The handle is ``{session}/{call}`` and the placeholder the same as ``offload-files`` writes, so
a view does not depend on where results are kept. The first writer of a handle keeps it: a tool
call id that comes back with other text gets ``{call}.{sha12}``, and a handle is never rewritten,
so every worker reads back the same bytes. Secrets are masked before anything is written.

With a ``ttl``, the results of an active session are kept alive by ``state-redis``: each turn's
load renews them. So a ``ttl`` here needs ``state-redis`` on the same server and ``prefix``, with
a ``ttl`` of its own; any other state store would let results expire under a session that still
names them, and the plugin refuses to start with it.
"""

from __future__ import annotations

from typing import Any

import attrs

from progressive_compactor.plugin import (
    ConfigError,
    DatabaseOffloader,
    PluginContext,
    RedisDatabase,
    RedisSettings,
    setting_check,
)


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

    def __init__(self, config: Any = None, context: PluginContext | None = None):
        super().__init__(config, context)
        if self.config.ttl > 0:
            self._check_renewal()

    def _check_renewal(self) -> None:
        """A ``ttl`` needs ``state-redis`` (same server and prefix, a ``ttl`` too) to renew the
        results of active sessions (see the module docstring)."""
        core = self.context.config
        state = core.config.get("state-redis", {}) if core.plugins.state == "state-redis" else None
        c = self.config
        if (
            state is not None
            and (state.get("url"), state.get("url_env", "COMPACTOR_REDIS_URL")) == (c.url, c.url_env)
            and state.get("prefix", "compactor:") == c.prefix
            and (state.get("ttl") or 0) > 0
        ):
            return
        raise ConfigError(
            [
                f"offload-redis has a ttl ({c.ttl:g} s), but only state-redis on the same url and prefix, with "
                "a ttl of its own, renews the results of active sessions: without it, results expire while "
                "their handles are still in the view. Choose plugins.state: state-redis with that ttl, or set "
                "ttl: 0 @ $.config.offload-redis.ttl"
            ]
        )
