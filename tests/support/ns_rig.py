"""Helpers for namespace, budget and admin tests: identities, configs, an in-process service."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ramakv_daemon.adapters.backends.noop import NoopBackend
from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.bootstrap import build
from ramakv_daemon.config import Config, from_mapping
from ramakv_daemon.ports import Backend


def ident(**over: Any) -> dict[str, Any]:
    """A complete deployment identity; ``over`` changes or (None) removes fields."""
    base: dict[str, Any] = {
        "model_id": "Qwen/Qwen3-8B",
        "model_revision": "0123456789abcdef0123456789abcdef01234567",
        "tokenizer_name": "Qwen/Qwen3-8B",
        "tokenizer_version": "0.21.1",
        "kv_dtype": "bfloat16",
        "block_size": 256,
        "kv_heads": 8,
        "head_dim": 128,
        "tensor_parallel_size": 4,
        "connector_name": "LMCacheConnectorV1",
        "connector_build_id": "lmcache-0.5.6",
        "max_model_len": 32768,
        "chat_template_sha256": "ab" * 32,
    }
    for k, v in over.items():
        if v is None:
            base.pop(k, None)
        else:
            base[k] = v
    return base


def config(tmp_path: Path, deployments: list[dict[str, Any]] | None = None, **top: Any) -> Config:
    """A Config parsed from TOML-shaped data (so the parser is exercised too)."""
    data: dict[str, Any] = {"session_store_path": str(tmp_path / "sessions.db"), **top}
    if deployments is not None:
        data["deployments"] = deployments
    cfg, warnings = from_mapping(data, "test")
    assert not [w for w in warnings if "unknown" in w], warnings
    return cfg


class Rig:
    """A daemon (no HTTP) on a tmp SQLite file; ``ev`` sends one event."""

    def __init__(self, cfg: Config, backend: Backend | None = None) -> None:
        self.cfg = cfg
        self.backend = backend or NoopBackend()
        self.svc = build(cfg, SqliteSessionStore(cfg.session_store_path), self.backend)

    async def __aenter__(self) -> Rig:
        await self.svc.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.svc.stop()

    async def send(self, type_: str, **fields: Any) -> dict[str, Any]:
        """The whole answer."""
        _, body = await self.svc.handle({"type": type_, **fields})
        return body

    async def ev(self, type_: str, **fields: Any) -> dict[str, Any]:
        """An event that must succeed: its data."""
        body = await self.send(type_, **fields)
        assert body["ok"] is True, body
        return body["data"]

    async def err(self, type_: str, **fields: Any) -> str:
        """An event that must fail: its error."""
        body = await self.send(type_, **fields)
        assert body["ok"] is False, body
        return body["error"]

    async def turn_end(self, sid: str, hashes: list[str], **fields: Any) -> dict[str, Any]:
        return await self.ev(
            "turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": hashes}, **fields
        )

    async def settle(self, timeout: float = 120.0) -> None:
        """Wait for background backend calls and for every deliverable outbox to empty."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            busy = [
                ns.dispatcher
                for ns in self.svc.namespaces
                if ns.dispatcher.prefetcher.tasks or (ns.delivers and ns.dispatcher.backlog)
            ]
            if not busy:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("backend calls did not settle")
