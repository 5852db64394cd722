"""ascend_ext.install() hooks the memory API into lmcache 0.5.6's own internal API server."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("lmcache")
pytestmark = pytest.mark.lmcache

import httpx  # noqa: E402
from support.daemon_proc import free_port  # noqa: E402
from support.memapi_rig import cpu_engine, serve, tokens  # noqa: E402


def test_worker_internal_api_server_serves_memory_routes(tmp_path):
    from lmcache.v1.internal_api_server.api_server import InternalAPIServer

    import ascend_ext
    from ascend_ext.memory_api import ops_for
    from ascend_ext_dev.dev_turn import run_turn

    active = ascend_ext.install(vllm=False)
    assert active["memory_api"] is True
    with cpu_engine(tmp_path / "disk") as engine:
        engine.config.internal_api_server_enabled = True
        engine.config.internal_api_server_port_start = free_port() - 1
        manager = SimpleNamespace(
            lmcache_engine=engine, config=engine.config, lmcache_engine_metadata=engine.metadata
        )
        server = InternalAPIServer(manager)  # builds its app through the hooked _build_app
        assert server.app.state.ramakv_port_offset == 1  # worker 0

        hashes = run_turn(ops_for(engine), tokens(2))["kv_transfer_params"]["chunk_hashes"]
        with serve(server.app) as url:
            assert httpx.get(url + "/lmc_version").status_code == 200  # lmcache's routes stay
            q = httpx.post(url + "/memory/query", json={"chunk_hashes": hashes})
            assert all("LocalCPUBackend" in v for v in q.json().values())  # disk write may lag
            r = httpx.post(
                url + "/memory/evict",
                json={"chunk_hashes": hashes, "locations": ["LocalCPUBackend"]},
            )
            assert r.status_code == 200 and r.json()["num_evicted"] == 2


def test_scheduler_internal_api_server_knows_its_workers():
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.internal_api_server.api_server import InternalAPIServer

    from ascend_ext.memory_api import install

    install()
    start = free_port()
    config = LMCacheEngineConfig.from_defaults(
        internal_api_server_enabled=True, internal_api_server_port_start=start
    )
    manager = SimpleNamespace(
        lmcache_engine=None,
        config=config,
        lmcache_engine_metadata=SimpleNamespace(world_size=2, local_world_size=2),
    )
    server = InternalAPIServer(manager)
    assert server.app.state.ramakv_port_offset == 0
    assert server.app.state.ramakv_worker_urls == [
        f"http://127.0.0.1:{start + 1}",
        f"http://127.0.0.1:{start + 2}",
    ]


def _scheduler_server(port_start: int):  # type: ignore[no-untyped-def]
    from lmcache.v1.config import LMCacheEngineConfig
    from lmcache.v1.internal_api_server.api_server import InternalAPIServer

    from ascend_ext.memory_api import install

    install()
    config = LMCacheEngineConfig.from_defaults(
        internal_api_server_enabled=True,
        internal_api_server_port_start=port_start,
        internal_api_server_host="127.0.0.1",
    )
    manager = SimpleNamespace(
        lmcache_engine=None,
        config=config,
        lmcache_engine_metadata=SimpleNamespace(world_size=1, local_world_size=1),
    )
    return InternalAPIServer(manager)


def test_a_memory_api_port_in_use_fails_the_start_naming_it():
    """The port held by a real listening socket: start() raises naming it, instead of the
    engine serving on with no memory API."""
    import socket

    from ascend_ext.api_server_start import MemoryApiBindError

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = _scheduler_server(port)  # the scheduler listens on port_start itself
        with pytest.raises(MemoryApiBindError, match=f"cannot listen on port {port} "):
            server.start()


def test_a_free_memory_api_port_is_listening_when_start_returns():
    port = free_port()
    server = _scheduler_server(port)
    server.start()
    try:
        r = httpx.post(f"http://127.0.0.1:{port}/memory/query", json={"chunk_hashes": []})
        assert r.status_code != 0  # answered: it was listening when start() returned
    finally:
        server.stop()
