"""A session's changing events as the daemon's trace shows them (type, notes.reason)."""

from __future__ import annotations

from typing import Any

import aiohttp

#: Read-only events (the proxy's restore wait asks these); left out of the lists.
READS = frozenset({"session_map", "backend_query", "list_sessions", "chunk_info"})

#: Only a guard against a hang: the reads below end on a condition, never on silence.
HANG_GUARD_S = 120.0


async def _head_seq(http: aiohttp.ClientSession, daemon_url: str) -> int:
    """The daemon's last trace seq now (a fresh snapshot's header says it)."""
    async with http.ws_connect(f"{daemon_url}/trace?protocol=2") as ws:
        while True:
            msg = await ws.receive_json(timeout=HANG_GUARD_S)
            if msg.get("kind") == "snapshot":
                return int(msg["seq"])


async def head_seq(daemon_url: str) -> int:
    """The daemon's last trace seq now: read a replay up to it to have everything so far."""
    async with aiohttp.ClientSession() as http:
        return await _head_seq(http, daemon_url)


def _concerns(msg: dict[str, Any], session_id: str) -> bool:
    """The record is the session's own or changes it (what ``?session=`` would send)."""
    delta = msg.get("delta") or {}
    return msg.get("session_id") == session_id or session_id in (delta.get("sessions") or {})


async def session_records(
    daemon_url: str, session_id: str, count: int = 0, wanted: Any = None
) -> list[dict[str, Any]]:
    """The session's trace event records from seq 0 (the replay ring).

    The replay is read up to the daemon's last seq at the call (a definite end, not a
    pause in the stream) and, when ``count`` is given, on until that many records for which
    ``wanted(record)`` holds came (one still being applied is waited for, never guessed
    to be absent).
    """
    out: list[dict[str, Any]] = []
    taken = 0
    async with aiohttp.ClientSession() as http:
        head = await _head_seq(http, daemon_url)
        if head == 0 and count == 0:
            return out
        async with http.ws_connect(f"{daemon_url}/trace?protocol=2&since=0") as ws:
            seen = 0
            while seen < head or taken < count:
                msg = await ws.receive_json(timeout=HANG_GUARD_S)
                if msg.get("kind") == "snapshot":
                    raise AssertionError("the replay ring no longer holds the session's start")
                seen = max(seen, int(msg.get("seq", 0)))
                if msg.get("kind") == "event" and _concerns(msg, session_id):
                    out.append(msg)
                    taken += wanted is None or bool(wanted(msg))
    return out


def _changing(msg: dict[str, Any]) -> bool:
    return msg["type"] not in READS


async def lifecycle_events(
    daemon_url: str, session_id: str, count: int = 0
) -> list[tuple[str, Any]]:
    """(type, notes.reason or None) of the session's trace event records, reads left out
    (``count``: how many to wait for, see session_records)."""
    records = await session_records(daemon_url, session_id, count, _changing)
    return [(m["type"], (m.get("notes") or {}).get("reason")) for m in records if _changing(m)]
