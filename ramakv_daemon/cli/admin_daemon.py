"""ramakv-admin talking to a running daemon: is it the one holding the store, and closing
sessions through it, each close guarded by the planned state."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from typing import Any, TextIO

from ramakv_daemon.admin_port import Cleanup
from ramakv_daemon.config import Config
from ramakv_daemon.core.catalogue import JsonObject

EXIT_OK, EXIT_FAILED = 0, 1


def daemon_url(cfg: Config, url: str | None) -> str:
    """The daemon's base URL: --url, else listen_addr from the config."""
    if url:
        return url.rstrip("/")
    host, port = cfg.host_port
    host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def post_event(url: str, token: str, body: JsonObject, timeout: float = 5.0) -> Any:
    """POST one event to the daemon; its decoded JSON answer."""
    req = urllib.request.Request(
        url + "/event",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **_headers(token)},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # operator URL
        return json.loads(resp.read())


def holding_problem(url: str, token: str, lock_token: str) -> str | None:
    """None when the daemon answering at ``url`` is the one holding the store's lock (its
    ``GET /healthz`` says the token the lock file holds), else why it is not."""
    req = urllib.request.Request(url + "/healthz", headers=_headers(token))
    try:
        with urllib.request.urlopen(req, timeout=2.0) as resp:  # operator URL
            body = json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return f"the daemon at {url} answers HTTP {err.code} to GET /healthz"
    except (OSError, ValueError):
        return f"no daemon answers at {url}"
    if not isinstance(body, dict) or body.get("ok") is not True:
        return f"no daemon answers at {url}"
    if not lock_token:
        return "its lock file names no token to check the daemon against"
    if body.get("store_lock") != lock_token:
        return (
            f"the daemon at {url} is not the one holding it (it holds another store, "
            "or none); give the --url of the daemon that runs on this store"
        )
    return None


def apply_online(url: str, token: str, plan: Cleanup, out: TextIO) -> int:
    """Close the planned sessions through the running daemon, each only if no event
    reached it since the plan (session_close with ``if_idle_since``, the planned
    last_event_ts), and end the planned forks through its session_fork_end. Counts only
    what the daemon closed."""
    failed, closed, left, ended = 0, 0, 0, 0
    for s in plan.sessions:
        event = {
            "type": "session_close",
            "session_id": s.session_id,
            "namespace": s.namespace,
            "if_idle_since": s.last_event_ts,
        }
        try:
            body = post_event(url, token, event)
        except (OSError, ValueError) as err:
            print(f"session_close {s.session_id}: no answer from {url}: {err}", file=sys.stderr)
            failed += 1
            continue
        data = body.get("data") or {}
        if body.get("ok") and data.get("closed") is True:
            closed += 1
        elif body.get("ok"):  # closed:false: an event reached it since the plan, or it is gone
            left += 1
            print(
                f"session {s.session_id}: an event reached it since the plan (or it is gone): "
                "left as it is",
                file=sys.stderr,
            )
        else:
            failed += 1
            print(f"session_close {s.session_id}: {body.get('error')}", file=sys.stderr)
    for f in plan.forks:
        event = {
            "type": "session_fork_end",
            "session_id": f.session_id,
            "fork_id": f.fork_id,
            "namespace": f.namespace,
        }
        try:
            body = post_event(url, token, event)
        except (OSError, ValueError) as err:
            print(f"session_fork_end {f.fork_id}: no answer from {url}: {err}", file=sys.stderr)
            failed += 1
            continue
        if body.get("ok") and (body.get("data") or {}).get("fork_end") is True:
            ended += 1
        elif not body.get("ok"):
            failed += 1
            print(f"session_fork_end {f.fork_id}: {body.get('error')}", file=sys.stderr)
    forks = f", ended {ended} forks" if plan.forks else ""
    rest = f"; {left} left as they are" if left else ""
    print(f"closed {closed} sessions{forks} through the daemon at {url}{rest}", file=out)
    return EXIT_FAILED if failed else EXIT_OK
