"""Scheduler -> worker forwarding: send one memory-API call to every worker, merge answers."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

# Per-worker budget, as in LMCache-Ascend's scheduler forwarding.
WORKER_TIMEOUT_S = 10.0
ENV_WORKER_URLS = "RAMAKV_WORKER_URLS"


@dataclass(frozen=True, slots=True)
class WorkerAnswer:
    """One worker's reply (ok: 2xx with a JSON object) or why there was none."""

    url: str
    ok: bool
    status: int
    body: dict | None
    error: str = ""


@dataclass(frozen=True, slots=True)
class GoodAnswer:
    """A worker's successful reply: its JSON object."""

    url: str
    body: dict


def worker_urls_from(host: str, port_start: int, count: int) -> list[str]:
    """Workers listen on port_start + 1 + worker_id; ``RAMAKV_WORKER_URLS`` overrides."""
    env = os.environ.get(ENV_WORKER_URLS, "").strip()
    if env:
        return [u.strip().rstrip("/") for u in env.split(",") if u.strip()]
    return [f"http://{host}:{port_start + 1 + i}" for i in range(count)]


async def forward_all(
    urls: Sequence[str], path: str, payload: dict, timeout: float = WORKER_TIMEOUT_S
) -> list[WorkerAnswer]:
    """POST payload to every worker in parallel; never raises."""
    async with httpx.AsyncClient(timeout=timeout) as client:
        return list(await asyncio.gather(*(_one(client, u, path, payload) for u in urls)))


async def _one(client: httpx.AsyncClient, url: str, path: str, payload: dict) -> WorkerAnswer:
    """One worker round trip."""
    try:
        resp = await client.post(url + path, json=payload)
    except httpx.HTTPError as exc:
        return WorkerAnswer(url, False, 0, None, f"{type(exc).__name__}: {exc}".rstrip(": "))
    try:
        body = resp.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return WorkerAnswer(url, False, resp.status_code, None, "answer is not a JSON object")
    if not resp.is_success:
        reason = body.get("error") or body.get("detail") or "error"
        error = f"HTTP {resp.status_code}: {reason}"
        return WorkerAnswer(url, False, resp.status_code, body, error)
    return WorkerAnswer(url, True, resp.status_code, body)


def merge(kind: str, answers: Sequence[WorkerAnswer], request: dict) -> tuple[int, dict]:
    """Merge worker answers into (HTTP status, body); any failed worker makes it a 500."""
    good = [GoodAnswer(a.url, a.body) for a in answers if a.ok and a.body is not None]
    if kind == "prefetch":
        merged: dict = {
            "status": "prefetch_started",
            "lookup_id": request.get("lookup_id"),
            "num_chunks": len(request.get("chunk_hashes", [])),
            "workers": [a.url for a in good],
        }
    elif kind == "cancel":
        merged = {
            "status": "success",
            "lookup_id": request.get("lookup_id"),
            "cancelled": sum(int(a.body.get("cancelled", 0)) for a in good),
            "skipped": sum(int(a.body.get("skipped", 0)) for a in good),
        }
    elif kind == "evict":
        merged = {
            "status": "success",
            "num_evicted": sum(int(a.body.get("num_evicted", 0)) for a in good),
        }
        if "generation" in request or "defer_s" in request:
            # Deferred only if every worker deferred: the daemon then relies on keeps.
            merged["deferred"] = min((int(a.body.get("deferred", 0)) for a in good), default=0)
            merged["stale"] = sorted({h for a in good for h in a.body.get("stale", [])})
            merged["expired"] = sorted({h for a in good for h in a.body.get("expired", [])})
            # The daemon relies on deadlines only if every worker honours them.
            merged["expires"] = bool(good) and all(a.body.get("expires") is True for a in good)
    elif kind == "keep":
        merged = {
            "status": "success",
            "cancelled": sum(int(a.body.get("cancelled", 0)) for a in good),
            "late": sorted({h for a in good for h in a.body.get("late", [])}),
            "expires": bool(good) and all(a.body.get("expires") is True for a in good),
        }
    elif kind == "order":
        merged = {
            "status": "success",
            "moved": sum(int(a.body.get("moved", 0)) for a in good),
            "missing": sum(int(a.body.get("missing", 0)) for a in good),
        }
    else:  # query: union of locations per hash, first-seen order
        merged = {}
        for a in good:
            for h, locs in a.body.items():
                have = merged.setdefault(h, [])
                have.extend(x for x in locs if x not in have)
    failed = {a.url: a.error for a in answers if not a.ok}
    if not failed:
        return 200, merged
    return 500, {
        "error": f"{len(failed)} of {len(answers)} workers failed",
        "failed_workers": failed,
        "partial": merged,
    }
