"""ramakv-admin talking to a running daemon: is one there, and closing sessions through it."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from typing import Any, TextIO

from ramakv_daemon.config import Config
from ramakv_daemon.ports import Cleanup

EXIT_OK, EXIT_FAILED = 0, 1


def daemon_url(cfg: Config, url: str | None) -> str:
    """The daemon's base URL: --url, else listen_addr from the config."""
    if url:
        return url.rstrip("/")
    host, port = cfg.host_port
    host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def post_event(url: str, token: str, body: dict[str, Any], timeout: float = 5.0) -> Any:
    """POST one event to the daemon; its decoded JSON answer."""
    req = urllib.request.Request(
        url + "/event",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            **({"Authorization": f"Bearer {token}"} if token else {}),
        },
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - operator URL
        return json.loads(resp.read())


def daemon_alive(url: str, token: str) -> bool:
    """True when a daemon answers health at ``url``."""
    try:
        return bool(post_event(url, token, {"type": "health"}, timeout=1.0).get("ok"))
    except (OSError, ValueError, AttributeError, urllib.error.URLError):
        return False


def apply_online(url: str, token: str, plan: Cleanup, out: TextIO) -> int:
    """Close exactly the planned sessions through the running daemon's session_close (and
    end the planned forks through its session_fork_end)."""
    failed = 0
    for s in plan.sessions:
        body = post_event(
            url,
            token,
            {"type": "session_close", "session_id": s.session_id, "namespace": s.namespace},
        )
        if not body.get("ok"):
            failed += 1
            print(f"session_close {s.session_id}: {body.get('error')}", file=sys.stderr)
    for f in plan.forks:
        body = post_event(
            url,
            token,
            {
                "type": "session_fork_end",
                "session_id": f.session_id,
                "fork_id": f.fork_id,
                "namespace": f.namespace,
            },
        )
        if not body.get("ok"):
            failed += 1
            print(f"session_fork_end {f.fork_id}: {body.get('error')}", file=sys.stderr)
    print(f"closed {len(plan.sessions) - failed} sessions through the daemon at {url}", file=out)
    return EXIT_FAILED if failed else EXIT_OK
