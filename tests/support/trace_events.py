"""A session's changing events as the daemon's trace shows them (type, notes.reason)."""

from __future__ import annotations

from typing import Any

import aiohttp

#: Read-only events (the proxy's restore wait asks these); left out of the lists.
READS = frozenset({"session_map", "backend_query", "list_sessions", "chunk_info"})


async def lifecycle_events(daemon_url: str, session_id: str) -> list[tuple[str, Any]]:
    """(type, notes.reason or None) of the session's trace event records, from seq 0
    (the replay ring), reads left out."""
    out: list[tuple[str, Any]] = []
    url = f"{daemon_url}/trace?protocol=2&since=0&session={session_id}"
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(url) as ws:
            while True:
                try:
                    msg = await ws.receive_json(timeout=0.5)
                except TimeoutError:
                    return out
                if msg.get("kind") == "event" and msg["type"] not in READS:
                    out.append((msg["type"], (msg.get("notes") or {}).get("reason")))
