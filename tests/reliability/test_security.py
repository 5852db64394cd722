"""Security: bearer token on every route, loopback-only without a token, no secrets in logs."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support.daemon_proc import DaemonProcess, free_port, run_to_exit, write_config

TOKEN = "s3cr3t-T0ken-for-tests-only-9f2c"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WRONG = [
    {},
    {"Authorization": "Bearer"},
    {"Authorization": "Bearer "},
    {"Authorization": f"Bearer {TOKEN}x"},
    {"Authorization": f"Bearer {TOKEN[:-1]}"},
    {"Authorization": f"bearer {TOKEN}"},
    {"Authorization": TOKEN},
    {"Authorization": f"Basic {TOKEN}"},
    {"X-Auth-Token": TOKEN},
]


@pytest.fixture
async def guarded(start_daemon: Any, make_config: Any) -> Any:
    return await start_daemon(make_config(auth_token=TOKEN))


@pytest.mark.parametrize("headers", WRONG)
async def test_every_route_needs_the_token(guarded: Any, headers: dict[str, str]) -> None:
    c = guarded.client
    resp = await c.post(
        "/event",
        data=json.dumps(
            {"type": "turn_end", "session_id": "s", "kv_transfer_params": {"chunk_hashes": ["a"]}}
        ),
        headers=headers,
    )
    assert resp.status == 401
    body = await resp.json()
    assert body == {"ok": False, "error": "missing or wrong bearer token"}
    assert "s" not in guarded.daemon.default.manager.sessions
    assert (await c.get("/metrics", headers=headers)).status == 401
    assert (await c.get("/trace", headers=headers)).status == 401
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await c.ws_connect("/trace", headers=headers)
    assert err.value.status == 401


async def test_right_token_opens_every_route(guarded: Any) -> None:
    c = guarded.client
    resp = await c.post("/event", data=json.dumps({"type": "health"}), headers=AUTH)
    assert resp.status == 200 and (await resp.json())["ok"] is True
    resp = await c.get("/metrics", headers=AUTH)
    assert resp.status == 200 and "ramakv_events" in await resp.text()
    ws = await c.ws_connect("/trace?protocol=2", headers=AUTH)
    assert (await ws.receive_json(timeout=120))["kind"] == "snapshot"
    await ws.close()


async def test_no_token_configured_means_open_on_loopback(start_daemon: Any) -> None:
    d = await start_daemon()
    assert (await d.ok("health"))["status"] == "running"


def run_daemon(
    tmp_path: Path, listen: str, config: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """Run the daemon expecting it to refuse to start; returns the finished process."""
    cfg = write_config(tmp_path / "refuse.toml", {"debug_dir": str(tmp_path / "d"), **config})
    return run_to_exit(tmp_path / "refuse.db", cfg, listen, timeout=30)


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]", "192.0.2.10", "example.com"])
def test_non_loopback_bind_without_token_refuses_to_start(tmp_path: Path, host: str) -> None:
    proc = run_daemon(tmp_path, f"{host}:{free_port()}", {})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "refusing to bind" in out and "needs auth_token" in out, out
    assert not (tmp_path / "refuse.db").exists()  # refused before touching anything


def test_mistyped_token_is_not_echoed_and_still_refuses(tmp_path: Path) -> None:
    # auth_token = 123456789 (not a string): the warning must not print the value.
    proc = run_daemon(tmp_path, f"0.0.0.0:{free_port()}", {"auth_token": 123456789})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "123456789" not in out, out
    assert "auth_token" in out


def test_token_never_in_logs(daemon_proc_factory: Callable[..., DaemonProcess]) -> None:
    d = daemon_proc_factory(
        start=False,
        config={"auth_token": TOKEN, "trace_events": True},
        extra_args=["--log-level", "DEBUG"],
    )
    d.start()  # DaemonProcess.post sends the config's token: health polls and events below
    assert d.event("turn_end", session_id="s", kv_transfer_params={"chunk_hashes": ["a"]})["ok"]
    for headers in WRONG:
        req = urllib.request.Request(f"{d.url}/event", data=b'{"type":"health"}', headers=headers)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)
        assert err.value.code == 401
    # Clients that put the token in the wrong place must not have it logged either.
    d.event("turn_end", session_id=TOKEN, kv_transfer_params={"chunk_hashes": ["b"]})
    d.stop()
    log = d.log()
    assert "ram-a-kv event completed" in log
    assert log.count(TOKEN) == log.count(f"session_id={TOKEN}"), [
        line for line in log.splitlines() if TOKEN in line and "session_id=" not in line
    ]
    assert "Bearer" not in log and "Authorization" not in log


async def test_debug_files_never_escape_debug_dir(
    start_daemon: Any, make_config: Any, tmp_path: Path
) -> None:
    debug_dir = tmp_path / "dbg"
    d = await start_daemon(make_config(debug_enabled=True, debug_dir=str(debug_dir)))
    evil = ["../../../../tmp/evil", "/etc/passwd", "..\\..\\x", "a/../../b", "\u2025/x", "."]
    for sid in evil:
        await d.turn_end(sid, ["a"], debug_context={"messages": [{"role": "user"}]})
    written = [p for p in tmp_path.rglob("*") if p.is_file() and "kvcache_debug" in p.name]
    assert len(written) == len(evil)
    assert all(p.parent == debug_dir for p in written), written
