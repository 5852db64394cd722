"""AsyncClient against a real daemon: every event, typed errors, config lookup."""

from __future__ import annotations

from pathlib import Path

import pytest

from ramakv_sdk import AsyncClient, DaemonUnavailable, RamAKvError
from ramakv_sdk.config import DEFAULT_DAEMON_URL, auth_token, daemon_url, load_config
from ramakv_sdk.payloads import hex_hash


async def test_original_events_round_trip(daemon_proc) -> None:
    async with AsyncClient(daemon_proc.url) as c:
        assert await c.health() == {"status": "running", "sessions_count": 0}
        listed = await c.list_events()
        specs = listed["events"]
        assert set(specs) == {
            "turn_start",
            "turn_end",
            "snapshot_restore",
            "session_map",
            "session_close",
            "session_suspend",
            "session_fork",
            "session_fork_end",
            "health",
        }
        for name in ("list_events", "list_sessions", "chunk_info", "chunk_evict", "backend_query"):
            assert name in listed["admin_events"]
        assert specs["turn_end"]["required"] == ["session_id", "kv_transfer_params"]
        assert await c.turn_start("s") == {"prefetch_sent": False, "prefetch_count": 0}
        end = await c.turn_end("s", {"chunk_hashes": ["-1a", "2b", 0x3C]})
        assert end == {"evicted_count": 0, "map_updated": True, "debug_written": False}
        assert await c.session_map("s") == {"session_id": "s", "chunk_hashes": ["-1a", "2b", "3c"]}
        assert await c.session_fork("s") == {"forked": True, "fork_id": 1}
        assert await c.session_fork("s") == {"forked": True, "fork_id": 2}
        assert await c.session_fork_end("s", 1) == {"fork_end": True, "fork_id": 1}
        assert await c.session_fork_end("s", fork_id=1) == {"fork_end": False, "fork_id": 1}
        assert await c.session_fork_end("s") == {"fork_end": True, "fork_id": 2}
        assert await c.session_suspend("s") == {"evicted_count": 3, "suspended": True}
        assert await c.snapshot_restore("s") == {"prefetch_sent": True, "prefetch_count": 3}
        assert await c.session_close("s") == {"evicted_count": 3, "closed": True}


async def test_a_turn_end_without_a_list_is_never_sent(daemon_proc) -> None:
    from ramakv_sdk.payloads import MissingChunkHashes

    async with AsyncClient(daemon_proc.url) as c:
        await c.turn_end("s", {"chunk_hashes": ["a1", "b2"]})
        for params in (None, {}, {"chunk_hashes": None}):
            with pytest.raises(MissingChunkHashes, match="kv_transfer_params.chunk_hashes"):
                await c.turn_end("s", params)
        assert (await c.session_map("s"))["chunk_hashes"] == ["a1", "b2"]
        sessions = (await c.list_sessions())["sessions"]
        assert sessions[0]["turn_count"] == 1
        # Sent anyway (by hand), the daemon refuses it with the field named.
        with pytest.raises(RamAKvError, match="'kv_transfer_params.chunk_hashes'"):
            await c.send({"type": "turn_end", "session_id": "s", "kv_transfer_params": {}})
        # An explicit [] is a list: it empties the map.
        assert (await c.turn_end("s", {"chunk_hashes": []}))["evicted_count"] == 2


async def test_resume_under_a_new_session_id(daemon_proc) -> None:
    async with AsyncClient(daemon_proc.url) as c:
        await c.turn_end("old", {"chunk_hashes": ["a1", "b2"]})
        await c.session_suspend("old")
        data = await c.snapshot_restore("new", source_session_id="old")
        assert data == {"prefetch_sent": True, "prefetch_count": 2}
        assert (await c.session_map("new"))["chunk_hashes"] == ["a1", "b2"]
        listed = await c.list_sessions(state="suspended")
        assert [s["session_id"] for s in listed["sessions"]] == ["old"]


async def test_request_ids_ride_on_the_three_request_events(daemon_proc) -> None:
    """request_id is sent when given (the trace carries it as notes.request_id), omitted
    when not; the daemon's refusal of a bad one names the field."""
    from ramakv_sdk import payloads

    assert payloads.turn_start("s", request_id="r1") == {
        "type": "turn_start",
        "session_id": "s",
        "request_id": "r1",
    }
    assert "request_id" not in payloads.turn_end("s", {"chunk_hashes": []})
    assert payloads.snapshot_restore("s", request_id="r2")["request_id"] == "r2"
    async with AsyncClient(daemon_proc.url) as c:
        await c.turn_end("s", {"chunk_hashes": ["a1"]}, request_id="r0")
        assert await c.turn_start("s", request_id="r1") == {
            "prefetch_sent": True,
            "prefetch_count": 1,
        }
        assert await c.turn_start("s", "r1b", prefetch=False) == {
            "prefetch_sent": False,
            "prefetch_count": 0,
        }
        end = await c.turn_end("s", {"chunk_hashes": ["a1"]}, request_id="r1")
        assert end["map_updated"] is True
        await c.session_suspend("s")
        restored = await c.snapshot_restore("s", request_id="r2")
        assert restored == {"prefetch_sent": True, "prefetch_count": 1}
        with pytest.raises(RamAKvError, match="'request_id' must be a string"):
            await c.turn_start("s", request_id="x" * 129)


async def test_inferred_rides_on_close_and_suspend_only_when_set(daemon_proc) -> None:
    """A host that guessed the pause or the end says so (the daemon never deletes on it);
    the default stays a declared event, sent without the field."""
    async with AsyncClient(daemon_proc.url) as c:
        sent: list[dict] = []
        real = c.send

        async def spy(event: dict) -> dict:
            sent.append(dict(event))
            return await real(event)

        c.send = spy  # type: ignore[method-assign]
        await c.turn_end("guessed", {"chunk_hashes": ["a1", "b2"]})
        await c.turn_end("declared", {"chunk_hashes": ["c3"]})
        assert await c.session_suspend("guessed", inferred=True) == {
            "evicted_count": 2,
            "suspended": True,
        }
        assert (await c.session_close("guessed", inferred=True))["closed"] is True
        assert (await c.session_close("declared"))["closed"] is True
        ends = [e for e in sent if e["type"] in ("session_suspend", "session_close")]
        assert [e.get("inferred") for e in ends] == [True, True, None]
        with pytest.raises(RamAKvError, match="inferred"):
            await real({"type": "session_close", "session_id": "x", "inferred": "yes"})


async def test_admin_events(daemon_proc) -> None:
    async with AsyncClient(daemon_proc.url) as c:
        await c.turn_end("a", {"chunk_hashes": ["11", "22"]})
        await c.turn_end("b", {"chunk_hashes": ["22"]})
        page = await c.list_sessions(limit=1, offset=1)
        assert page["total"] == 2 and len(page["sessions"]) == 1
        row = (await c.list_sessions())["sessions"][0]
        assert set(row) >= {
            "session_id",
            "state",
            "turn_count",
            "chunk_count",
            "fork_holds",
            "last_event_ts",
        }
        info = await c.chunk_info(["22"])
        assert info["chunks"]["22"]["refcount"] == 2
        assert sorted(info["chunks"]["22"]["holders"]) == ["a", "b"]
        dry = await c.chunk_evict(["22"], dry_run=True)
        assert dry["dry_run"] is True and dry["evicted"] == []
        assert sorted(dry["refused"]["22"]) == ["a", "b"]
        q = await c.backend_query(["11"])
        assert q["backend"] == "noop" and q["ok"] is True and "11" in q["locations"]


async def test_errors_carry_the_daemons_text(daemon_proc) -> None:
    async with AsyncClient(daemon_proc.url) as c:
        with pytest.raises(RamAKvError) as err:
            await c.session_map("nobody")
        assert err.value.message == "session 'nobody' not found"
        assert err.value.type == "session_map"
        assert not isinstance(err.value, DaemonUnavailable)
        with pytest.raises(RamAKvError, match="unknown event type"):
            await c.send({"type": "no_such_event"})
        env = await c.raw({"type": "session_map", "session_id": "nobody"})
        assert env == {"ok": False, "type": "session_map", "error": "session 'nobody' not found"}


async def test_unreachable_daemon_raises_daemon_unavailable(daemon_proc) -> None:
    url = daemon_proc.url
    daemon_proc.kill()
    async with AsyncClient(url, timeout=1.0) as c:
        with pytest.raises(DaemonUnavailable) as err:
            await c.health()
        assert err.value.type == "health"
        with pytest.raises(DaemonUnavailable):
            await c.raw({"type": "health"})


async def test_bearer_token(daemon_proc_factory) -> None:
    d = daemon_proc_factory(config={"auth_token": "s3cret"})  # its health poll sends the token
    async with AsyncClient(d.url) as c:
        with pytest.raises(RamAKvError, match="bearer token"):
            await c.health()
    async with AsyncClient(d.url, token="s3cret") as c:
        assert (await c.health())["status"] == "running"


def test_hex_hash_keeps_strings_and_signs_ints() -> None:
    assert hex_hash("-00ff") == "-00ff"
    assert hex_hash(-255) == "-ff"
    assert hex_hash(255) == "ff"


def test_config_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert daemon_url() == DEFAULT_DAEMON_URL
    cfg = tmp_path / "ram-a-kv" / "config.toml"
    cfg.parent.mkdir()
    cfg.write_text('daemon_url = "http://127.0.0.1:7777/"\nauth_token = "t"\n')
    assert daemon_url() == "http://127.0.0.1:7777"
    assert auth_token() == "t"
    cfg.write_text("daemon_url = [broken")
    assert load_config() is None and daemon_url() == DEFAULT_DAEMON_URL
    cfg.write_text('auth_token = "only"\n')
    assert load_config() is None


def test_from_config_reads_url_and_token(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('daemon_url = "http://127.0.0.1:7777"\nauth_token = "t"\n')
    c = AsyncClient.from_config(str(cfg))
    assert c.base_url == "http://127.0.0.1:7777" and c.token == "t"


def test_one_client_across_two_event_loops(daemon_proc) -> None:
    import asyncio

    c = AsyncClient(daemon_proc.url)
    assert asyncio.run(c.health())["status"] == "running"
    assert asyncio.run(c.health())["status"] == "running"  # a new loop: a new pool
    asyncio.run(c.aclose())
