"""turn_end debug files: when they are written, what they hold, and that ids stay in debug_dir."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.daemon_app import DaemonClient

DEBUG_CTX = {
    "messages": [{"role": "user", "content": "hi"}],
    "timing": {"ttft_ms": 12.5, "total_time_ms": 80, "tpot_ms": 3.1},
}


def all_files(root: Path) -> set[Path]:
    return {Path(dp) / f for dp, _, fs in os.walk(root) for f in fs}


@pytest.fixture
async def debug_daemon(start_daemon, make_config) -> DaemonClient:  # type: ignore[no-untyped-def]
    return await start_daemon(make_config(debug_enabled=True))


async def test_debug_file_written(debug_daemon: DaemonClient) -> None:
    d = debug_daemon
    debug_dir = Path(d.config.debug_dir)
    await d.turn_end("s1", ["a"])  # turn 1, no context: no file
    assert not debug_dir.exists() or not list(debug_dir.iterdir())
    data = await d.turn_end("s1", ["a", "b"], debug_context=DEBUG_CTX)
    assert data == {"evicted_count": 0, "map_updated": True, "debug_written": True}
    path = debug_dir / "kvcache_debug_s1_2.json"
    assert [p.name for p in debug_dir.iterdir()] == [path.name]
    body = json.loads(path.read_text())
    assert body["session_id"] == "s1" and body["turn"] == 2
    assert body["chunk_hashes"] == ["a", "b"]
    assert body["messages"] == DEBUG_CTX["messages"]
    assert body["timing"] == DEBUG_CTX["timing"]


@pytest.mark.parametrize(
    "ctx",
    [{"messages": []}, {"timing": {}}, {"timing": {"ttft_ms": 1}}],
)
async def test_messages_or_timing_alone_suffice(
    debug_daemon: DaemonClient, ctx: dict[str, object]
) -> None:
    data = await debug_daemon.turn_end("s1", ["a"], debug_context=ctx)
    assert data["debug_written"] is True
    body = json.loads((Path(debug_daemon.config.debug_dir) / "kvcache_debug_s1_1.json").read_text())
    assert set(body["timing"]) == {"ttft_ms", "total_time_ms", "tpot_ms"}


@pytest.mark.parametrize("ctx", [{}, {"other": 1}, None])
async def test_no_file_without_messages_or_timing(
    debug_daemon: DaemonClient, ctx: dict[str, object] | None
) -> None:
    extra = {} if ctx is None else {"debug_context": ctx}
    data = await debug_daemon.turn_end("s1", ["a"], **extra)
    assert data["debug_written"] is False
    debug_dir = Path(debug_daemon.config.debug_dir)
    assert not debug_dir.exists() or not list(debug_dir.iterdir())


async def test_no_file_when_debug_disabled(daemon: DaemonClient) -> None:
    data = await daemon.turn_end("s1", ["a"], debug_context=DEBUG_CTX)
    assert data["debug_written"] is False
    assert not Path(daemon.config.debug_dir).exists()


@pytest.mark.parametrize(
    "sid", ["../../x", "/etc/passwd", "..", "a/../../b", "..\\..\\w", "~root", "x" * 900]
)
async def test_session_id_cannot_escape_debug_dir(
    debug_daemon: DaemonClient, tmp_path: Path, sid: str
) -> None:
    d = debug_daemon
    debug_dir = Path(d.config.debug_dir).resolve()
    before = all_files(tmp_path)
    data = await d.turn_end(sid, ["a"], debug_context=DEBUG_CTX)
    assert data["debug_written"] is True
    new = all_files(tmp_path) - before
    assert len(new) == 1, new
    (written,) = new
    assert written.resolve().parent == debug_dir
    assert written.name.startswith("kvcache_debug_") and written.name.endswith("_1.json")
    assert "/" not in written.name and "\\" not in written.name
    assert json.loads(written.read_text())["session_id"] == sid
    # Nothing appeared outside tmp_path either (e.g. /etc/passwd_1.json or ../../x).
    assert not Path("/etc/passwd_1.json").exists()


async def test_distinct_ids_get_distinct_files(debug_daemon: DaemonClient) -> None:
    d = debug_daemon
    for sid in ["a/b", "a%2Fb", "a_b"]:
        await d.turn_end(sid, ["x"], debug_context=DEBUG_CTX)
    assert len(list(Path(d.config.debug_dir).iterdir())) == 3


async def test_unwritable_debug_dir_does_not_fail_the_event(
    start_daemon,
    make_config,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    d = await start_daemon(make_config(debug_enabled=True, debug_dir=str(blocker / "sub")))
    data = await d.turn_end("s1", ["a"], debug_context=DEBUG_CTX)
    assert data == {"evicted_count": 0, "map_updated": True, "debug_written": False}
    assert (await d.ok("session_map", session_id="s1"))["chunk_hashes"] == ["a"]


async def test_unencodable_debug_context_does_not_fail_the_event(
    debug_daemon: DaemonClient,
) -> None:
    """A lone surrogate in messages cannot be written as UTF-8: no file, but the turn is ok."""
    raw = (
        '{"type": "turn_end", "session_id": "s1", "kv_transfer_params": {"chunk_hashes": ["a"]},'
        ' "debug_context": {"messages": [{"role": "user", "content": "\\udc00"}]}}'
    )
    status, body = await debug_daemon.post(raw)
    assert status == 200, body
    assert body == {
        "ok": True,
        "type": "turn_end",
        "data": {"evicted_count": 0, "map_updated": True, "debug_written": False},
    }
    assert (await debug_daemon.ok("session_map", session_id="s1"))["chunk_hashes"] == ["a"]
