"""Hostile files and headers against a real daemon process: planted symlinks in debug_dir,
newlines in session ids, a lying Content-Encoding, a non-UTF-8 Authorization header."""

from __future__ import annotations

import http.client
import json
import os
import stat
from pathlib import Path

import pytest
from support.daemon_proc import DaemonProcess

CTX = {"messages": [{"role": "user", "content": "a secret prompt"}]}


def te(sid: str, hashes: list[str], **extra: object) -> dict:
    return {
        "type": "turn_end",
        "session_id": sid,
        "kv_transfer_params": {"chunk_hashes": hashes},
        **extra,
    }


def raw_post(
    d: DaemonProcess, body: bytes, headers: dict[str, bytes | str]
) -> tuple[int, str, bytes]:
    """POST /event with headers exactly as given (bytes are sent as they are)."""
    conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
    try:
        conn.putrequest("POST", "/event")
        for name, value in {"Content-Length": str(len(body)), **headers}.items():
            conn.putheader(name, value)
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read()
    finally:
        conn.close()


@pytest.fixture
def debug_daemon(daemon_proc_factory) -> DaemonProcess:  # type: ignore[no-untyped-def]
    return daemon_proc_factory(config={"debug_enabled": True})


def test_planted_symlinks_are_never_followed(debug_daemon: DaemonProcess, tmp_path: Path) -> None:
    d = debug_daemon
    ddir = d.workdir / "kvcache_debug"
    ddir.mkdir(mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    # The old predictable temp name, and the final name of the next turn, both planted.
    (ddir / "kvcache_debug_s_1.json.tmp").symlink_to(victim)
    (ddir / "kvcache_debug_s_2.json").symlink_to(victim)
    for turn in (1, 2):
        body = d.post(te("s", ["a", f"t{turn}"], debug_context=CTX))[1]
        assert body["data"]["debug_written"] is True
    assert victim.read_text() == "untouched"
    final = ddir / "kvcache_debug_s_2.json"
    assert not final.is_symlink() and json.loads(final.read_text())["turn"] == 2
    assert (ddir / "kvcache_debug_s_1.json.tmp").is_symlink()  # left alone, not used
    assert not [p for p in ddir.iterdir() if p.name.startswith(".")]  # no temp left over


def test_debug_files_are_private(debug_daemon: DaemonProcess) -> None:
    d = debug_daemon
    assert d.post(te("s", ["a"], debug_context=CTX))[1]["data"]["debug_written"] is True
    ddir = d.workdir / "kvcache_debug"
    assert stat.S_IMODE(ddir.stat().st_mode) == 0o700
    files = list(ddir.iterdir())
    assert len(files) == 1 and stat.S_IMODE(files[0].stat().st_mode) == 0o600


FORGED = "2030-01-01 00:00:00,000 ERROR ramakv: forged line"


def test_newlines_in_session_ids_cannot_forge_log_lines(daemon_proc_factory) -> None:
    d = daemon_proc_factory(config={"trace_events": True, "debug_enabled": True})
    # debug_dir is a file: the debug write fails and is logged with the session id.
    (d.workdir / "kvcache_debug").write_text("not a directory")
    sid = "evil\n" + FORGED + "\r\n" + FORGED
    assert d.post(te(sid, ["a"], debug_context=CTX))[1]["ok"] is True
    d.event("session_close", session_id=sid + "x")
    log = d.log()
    assert "debug file write failed for session" in log and "[trace] session map" in log
    lines = log.splitlines()
    assert not any(line.startswith(FORGED) for line in lines)
    assert any(repr(sid)[:60] in line for line in lines if "[trace] session map" in line)


def test_a_lying_content_encoding_gets_a_json_answer(daemon_proc: DaemonProcess) -> None:
    body = json.dumps(te("s", ["a"])).encode()
    status, ctype, raw = raw_post(
        daemon_proc, body, {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    )
    assert status == 400 and ctype.startswith("application/json")
    answer = json.loads(raw)
    assert answer["ok"] is False and "Content-Encoding 'gzip'" in answer["error"]
    assert daemon_proc.event("session_map", session_id="s")["ok"] is False  # nothing applied
    assert daemon_proc.event("health")["ok"] is True
    # A body that really is gzip is read as before.
    import gzip

    status, _, raw = raw_post(daemon_proc, gzip.compress(body), {"Content-Encoding": "gzip"})
    assert status == 200 and json.loads(raw)["ok"] is True


def test_a_non_utf8_authorization_header_gets_a_json_401(daemon_proc_factory) -> None:
    d = daemon_proc_factory(config={"auth_token": "s3cret"})
    body = json.dumps({"type": "health"}).encode()
    for value in (b"Bearer \xff\xfe", b"\xc3\x28", b"Bearer s3cret" + b"\x80"):
        status, ctype, raw = raw_post(d, body, {"Authorization": value})
        assert status == 401 and ctype.startswith("application/json"), raw
        assert json.loads(raw) == {"ok": False, "error": "missing or wrong bearer token"}
    assert d.event("health")["ok"] is True


def test_wrong_method_and_route_answer_json(daemon_proc: DaemonProcess) -> None:
    import urllib.error
    import urllib.request

    for req in (
        urllib.request.Request(f"{daemon_proc.url}/event"),  # GET: 405
        urllib.request.Request(f"{daemon_proc.url}/nope", data=b"{}"),
    ):
        try:
            urllib.request.urlopen(req, timeout=10)
        except urllib.error.HTTPError as err:
            assert err.code in (404, 405)
            assert err.headers["Content-Type"].startswith("application/json")
            assert json.loads(err.read())["ok"] is False
        else:
            raise AssertionError("expected an error status")


def test_umask_does_not_loosen_the_debug_dir(daemon_proc_factory) -> None:
    old = os.umask(0)
    try:
        d = daemon_proc_factory(config={"debug_enabled": True})
    finally:
        os.umask(old)
    assert d.post(te("u", ["a"], debug_context=CTX))[1]["data"]["debug_written"] is True
    ddir = d.workdir / "kvcache_debug"
    assert stat.S_IMODE(ddir.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in ddir.iterdir())
