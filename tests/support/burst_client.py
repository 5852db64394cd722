"""A separate-process load client: many sessions send turn_end concurrently, acks are logged.

Run: ``python tests/support/burst_client.py URL ACK_FILE [--sessions N] [--turns T]``.
Each session sends its turns one after another (turn t carries :func:`expected_map`), all
sessions at once. Every ok:true answer is appended to ACK_FILE as ``<session_id> <turn>``
and flushed before the next request, so the file lists exactly the acknowledged events even
if the daemon is killed. A session stops at its first failed request. The last stdout line
is a JSON summary ``{"acked": n, "failed": m, "finished": k}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import IO

SHARED = "shared-system-prompt"


def session_ids(n: int) -> list[str]:
    """The ids the client uses for ``n`` sessions."""
    return [f"burst-{i:03d}" for i in range(n)]


def expected_map(session_id: str, turn: int) -> list[str]:
    """The chunk map sent with ``turn`` (1-based) of ``session_id``.

    A hash shared by every session, one shared by half of them, a per-session base and a
    rolling window of this session's last six turns, so each turn adds one chunk and drops
    one (after the sixth) and shared chunks are referenced by many sessions at once.
    """
    group = f"group-{int(session_id.rsplit('-', 1)[1]) % 2}"
    window = [f"{session_id}-t{k}" for k in range(max(1, turn - 5), turn + 1)]
    return [SHARED, group, f"{session_id}-base", *window]


async def run_session(
    http: object, url: str, sid: str, turns: int, acks: IO[str], stats: dict[str, int]
) -> None:
    import aiohttp

    assert isinstance(http, aiohttp.ClientSession)
    for turn in range(1, turns + 1):
        body = {
            "type": "turn_end",
            "session_id": sid,
            "kv_transfer_params": {"chunk_hashes": expected_map(sid, turn)},
        }
        try:
            async with http.post(f"{url}/event", json=body) as resp:
                answer = await resp.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError, ValueError):
            stats["failed"] += 1
            return
        if not (isinstance(answer, dict) and answer.get("ok") is True):
            stats["failed"] += 1
            return
        acks.write(f"{sid} {turn}\n")
        acks.flush()
        stats["acked"] += 1
    stats["finished"] += 1


async def run(url: str, ack_path: str, sessions: int, turns: int) -> dict[str, int]:
    """Drive every session to ``turns`` turns or its first failure."""
    import aiohttp

    stats = {"acked": 0, "failed": 0, "finished": 0}
    timeout = aiohttp.ClientTimeout(total=10)
    connector = aiohttp.TCPConnector(limit=sessions)
    with open(ack_path, "a", encoding="utf-8") as acks:
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
            await asyncio.gather(
                *(run_session(http, url, sid, turns, acks, stats) for sid in session_ids(sessions))
            )
    return stats


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url")
    p.add_argument("ack_file")
    p.add_argument("--sessions", type=int, default=32)
    p.add_argument("--turns", type=int, default=500)
    args = p.parse_args(argv)
    stats = asyncio.run(run(args.url, args.ack_file, args.sessions, args.turns))
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
