"""Cross-node reuse through LMCache's shared remote tier: node b's prefetch after taking a
session over loads into b's DDR what node a's engine stored remotely, and a's release
evicts only a's own tiers. Real daemons on real PostgreSQL; real CPU LMCache engines (mock
GPU connector) behind the memory API; lmcache 0.5.6's own remote server on loopback."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

pytest.importorskip("lmcache")
pytestmark = pytest.mark.lmcache

from support.daemon_proc import DaemonProcess  # noqa: E402
from support.lmcache_remote import CHUNK, engine_with_remote, remote_server, store_prompt  # noqa: E402
from support.memapi_rig import serve  # noqa: E402
from support.pg_nodes import check_refcounts_match_owned, until  # noqa: E402
from support.postgres import PostgresServer  # noqa: E402
from test_handover import sessions_of  # noqa: E402

from ascend_ext_dev.devserver import create_app  # noqa: E402

CPU, DISK, REMOTE = "LocalCPUBackend", "LocalDiskBackend", "RemoteBackend"
LOCAL_TIERS = [CPU, DISK]  # a node's release must not delete from the shared tier


def node(
    factory: Callable[..., DaemonProcess], tmp: Path, url: str, name: str, lmcache: str
) -> DaemonProcess:
    """A daemon steering ``lmcache`` whose evictions leave the shared tier alone."""
    path = tmp / f"{name}.toml"
    path.write_text(
        f'session_store_url = "{url}"\nnode_id = "{name}"\nlmcache_url = "{lmcache}"\n'
        f"evict_locations = {json.dumps(LOCAL_TIERS)}\n"
        f'debug_dir = "{tmp / name}"\n',
        encoding="utf-8",
    )
    return factory(noop=False, config_path=path)


async def where(memory_api: str, hashes: list[str]) -> dict[str, list[str]]:
    async with httpx.AsyncClient() as http:
        r = await http.post(memory_api + "/memory/query", json={"chunk_hashes": hashes})
        assert r.status_code == 200, r.text
        return dict(r.json())


async def test_prefetch_after_a_takeover_loads_from_the_shared_remote_tier(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
    tmp_path: Path,
) -> None:
    url = postgres_server.create_database()
    with (
        remote_server() as remote,
        engine_with_remote(tmp_path / "disk-a", remote) as engine_a,
        engine_with_remote(tmp_path / "disk-b", remote) as engine_b,
        serve(create_app(engine_a)) as lmcache_a,
        serve(create_app(engine_b)) as lmcache_b,
    ):
        a, b = (
            node(daemon_proc_factory, tmp_path, url, name, lmcache)
            for name, lmcache in (("a", lmcache_a), ("b", lmcache_b))
        )
        # Node a's engine ran the prompt: its chunks are in a's DDR and disk and, written
        # asynchronously, in the shared tier, where node b's engine sees them too.
        hashes = store_prompt(engine_a, 4 * CHUNK, fill=1.0)
        assert len(hashes) == 4

        async def shared() -> bool:
            return all(tiers == [REMOTE] for tiers in (await where(lmcache_b, hashes)).values())

        await until(shared, "node a's chunks to reach the shared remote tier")
        assert a.event("turn_end", session_id="s", kv_transfer_params={"chunk_hashes": hashes})[
            "ok"
        ]

        # The router moves s to node b: its turn_start takes s over and prefetches the map.
        started = b.event("turn_start", session_id="s")
        assert started["ok"] and started["data"]["prefetch_count"] == 4, started

        async def in_b_ddr() -> bool:
            return all(CPU in tiers for tiers in (await where(lmcache_b, hashes)).values())

        await until(in_b_ddr, "node b's prefetch to load the chunks from the remote tier")
        # The bytes node a's engine stored, now in b's DDR.
        from ascend_ext.memory_api import ops_for

        ops_b = ops_for(engine_b)
        for h in hashes:
            obj = ops_b.sm.get(ops_b.key_for(h), location=CPU)
            assert obj is not None and float(obj.tensor.float().mean()) == 1.0
            obj.ref_count_down()

        # Node a released s: its own copies went, the shared tier keeps them.
        async def a_released() -> bool:
            return "s" not in sessions_of(a) and all(
                tiers == [REMOTE] for tiers in (await where(lmcache_a, hashes)).values()
            )

        await until(a_released, "node a to release s and evict its local copies")
        assert all(REMOTE in tiers for tiers in (await where(lmcache_b, hashes)).values())
        await check_refcounts_match_owned(a)
        await check_refcounts_match_owned(b)
