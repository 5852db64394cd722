"""The reference: a bare aiohttp server that parses the same JSON body and answers a constant."""

from __future__ import annotations

import json
import sys

from aiohttp import web

ANSWER = json.dumps(
    {
        "ok": True,
        "type": "turn_end",
        "data": {"evicted_count": 0, "map_updated": True, "debug_written": False},
    }
)


async def handle(request: web.Request) -> web.Response:
    """Parse the body like the daemon does, answer a constant."""
    payload = json.loads(await request.read())
    if not isinstance(payload, dict):
        raise web.HTTPBadRequest()
    return web.Response(text=ANSWER, content_type="application/json")


def main() -> None:
    """bare_server.py PORT."""
    app = web.Application()
    app.router.add_post("/event", handle)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()
