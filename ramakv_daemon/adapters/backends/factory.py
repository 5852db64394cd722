"""The default backend factory: each deployment's LMCache at its own URL, or noop."""

from __future__ import annotations

from ramakv_daemon.config import Config
from ramakv_daemon.ports import Backend, BackendFactory


def lmcache_factory(config: Config) -> BackendFactory:
    """Builds a deployment's own backend: LMCache at its URL (noop when noop_backend)."""

    def make(url: str, evict_locations: tuple[str, ...]) -> Backend:
        if config.noop_backend:
            from ramakv_daemon.adapters.backends.noop import NoopBackend

            return NoopBackend()
        from ramakv_daemon.adapters.backends.lmcache import LMCacheBackend

        return LMCacheBackend(
            url, timeout=config.backend_timeout_s, delete_locations=evict_locations or None
        )

    return make
