"""The default backend factory: each deployment's cache at its own URL (the configured
`backend` adapter), or noop."""

from __future__ import annotations

from ramakv_daemon.config import Config
from ramakv_daemon.ports import Backend, BackendFactory


def lmcache_factory(config: Config) -> BackendFactory:
    """Builds a deployment's own backend: ascend_ext's memory API (``backend = "lmcache"``)
    or the stock LMCache multiprocess server (``"lmcache_mp"``) at its URL; noop when
    noop_backend."""

    def make(url: str, evict_locations: tuple[str, ...]) -> Backend:
        if config.noop_backend:
            from ramakv_daemon.adapters.backends.noop import NoopBackend

            return NoopBackend()
        if config.backend == "lmcache_mp":
            from ramakv_daemon.adapters.backends.lmcache_mp import LMCacheMPBackend

            # Tiers are the server's own (l1 / all): evict_locations does not apply.
            return LMCacheMPBackend(
                url,
                config.model_name,
                config.world_size,
                config.cache_salt,
                timeout=config.backend_timeout_s,
            )
        from ramakv_daemon.adapters.backends.lmcache import LMCacheBackend

        return LMCacheBackend(
            url, timeout=config.backend_timeout_s, delete_locations=evict_locations or None
        )

    return make
