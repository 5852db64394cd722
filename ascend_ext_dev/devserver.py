"""Development tool, not a production path: a real CPU LMCache engine behind the memory API.

    python -m ascend_ext_dev.devserver --host 127.0.0.1 --port 6999 --ddr-mb 64 \
        --disk-dir /tmp/ramakv-disk --chunk-size 16

``--workers URL,URL`` instead runs an engine-less scheduler that forwards to those workers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from types import SimpleNamespace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ascend_ext.memory_api import forget_engine, ops_for, router

# lmcache phones home on import unless told not to; a development tool stays offline.
os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")


def create_app(engine: Any | None = None, worker_urls: list[str] | None = None) -> FastAPI:
    """A FastAPI app with the memory API; a worker when given an engine, else a scheduler."""
    app = FastAPI(title="ram-a-kv LMCache devserver")
    app.include_router(router)
    # Same shape as lmcache's InternalAPIServer state, so memory_api resolves it the same way.
    app.state.lmcache_adapter = SimpleNamespace(lmcache_engine=engine)
    app.state.ramakv_port_offset = None if engine is not None else 0
    app.state.ramakv_worker_urls = list(worker_urls or [])

    @app.post("/engine/turn")
    async def engine_turn(request: Request) -> JSONResponse:
        """Play the inference engine for one prompt (see ascend_ext_dev.dev_turn)."""
        from ascend_ext_dev.dev_turn import run_turn

        if engine is None:
            return JSONResponse({"error": "the scheduler has no engine"}, status_code=503)
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError:
            body = None
        tokens = body.get("token_ids") if isinstance(body, dict) else None
        if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in tokens
        ):
            return JSONResponse(
                {"error": "field 'token_ids' must be a list of integers"}, status_code=400
            )
        return JSONResponse(await asyncio.to_thread(run_turn, ops_for(engine), tokens))

    @app.get("/health")
    async def health() -> dict:
        """Liveness and role."""
        return {"status": "running", "role": "worker" if engine is not None else "scheduler"}

    return app


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line (all optional)."""
    p = argparse.ArgumentParser(
        prog="python -m ascend_ext_dev.devserver",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=6999)
    p.add_argument("--ddr-mb", type=float, default=64.0, help="LocalCPUBackend capacity")
    p.add_argument("--disk-mb", type=float, default=1024.0, help="LocalDiskBackend capacity")
    p.add_argument("--disk-dir", default=None, help="default: a fresh temp dir")
    p.add_argument("--chunk-size", type=int, default=16)
    p.add_argument("--layers", type=int, default=2, help="KV shape: layers")
    p.add_argument("--heads", type=int, default=2, help="KV shape: kv heads")
    p.add_argument("--head-size", type=int, default=8, help="KV shape: head size")
    p.add_argument("--worker-id", type=int, default=0)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--workers", default="", help="comma-separated worker URLs: run a scheduler")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Build the engine (blake3 chunk hashes: no PYTHONHASHSEED needed), serve."""
    args = parse_args(argv)
    import uvicorn

    engine = None
    workers = [u.strip().rstrip("/") for u in args.workers.split(",") if u.strip()]
    instance_id = f"ramakv-dev-{args.port}"
    if not workers:
        from ascend_ext_dev.cpu_engine import EngineSpec, build_engine

        spec = EngineSpec(
            disk_dir=args.disk_dir or tempfile.mkdtemp(prefix="ramakv-disk-"),
            ddr_mb=args.ddr_mb,
            disk_mb=args.disk_mb,
            chunk_size=args.chunk_size,
            num_layers=args.layers,
            num_heads=args.heads,
            head_size=args.head_size,
            world_size=args.world_size,
            worker_id=args.worker_id,
            instance_id=instance_id,
        )
        engine = build_engine(spec)
        print(
            f"devserver: worker {args.worker_id} disk={spec.disk_dir} ddr={spec.ddr_mb}MB",
            flush=True,
        )
    else:
        print(f"devserver: scheduler forwarding to {workers}", flush=True)
    app = create_app(engine, workers)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        if engine is not None:
            from ascend_ext_dev.cpu_engine import destroy_engine

            forget_engine(engine)
            destroy_engine(instance_id)


if __name__ == "__main__":
    main()
