"""The nine events and list_events through HTTP: exact envelopes and whole data objects."""

from __future__ import annotations

from support.daemon_app import DaemonClient, RecordingBackend

NINE = {
    "turn_start": (["session_id"], ["prefetch", "request_id"]),
    "turn_end": (["session_id", "kv_transfer_params"], ["debug_context", "request_id"]),
    "snapshot_restore": (["session_id"], ["source_session_id", "reason", "request_id"]),
    "session_map": (["session_id"], []),
    "session_close": (["session_id"], ["if_idle_since", "reason", "inferred"]),
    "session_suspend": (["session_id"], ["if_idle_since", "reason", "inferred"]),
    "session_fork": (["session_id"], []),
    "session_fork_end": (["session_id"], ["fork_id"]),
    "health": ([], []),
}


async def test_health_fresh(daemon: DaemonClient) -> None:
    assert await daemon.ok("health") == {"status": "running", "sessions_count": 0}


async def test_quick_start_round_trip(daemon: DaemonClient) -> None:
    """The README's curl round trip, verbatim."""
    assert await daemon.ok("health") == {"status": "running", "sessions_count": 0}
    assert await daemon.ok("turn_start", session_id="s1") == {
        "prefetch_sent": False,
        "prefetch_count": 0,
    }
    assert await daemon.turn_end("s1", ["h-a", "h-b", "h-c"]) == {
        "evicted_count": 0,
        "map_updated": True,
        "debug_written": False,
    }
    assert await daemon.ok("session_map", session_id="s1") == {
        "session_id": "s1",
        "chunk_hashes": ["h-a", "h-b", "h-c"],
    }
    assert await daemon.ok("health") == {"status": "running", "sessions_count": 1}
    assert await daemon.ok("session_close", session_id="s1") == {
        "evicted_count": 3,
        "closed": True,
    }
    assert await daemon.ok("health") == {"status": "running", "sessions_count": 0}
    assert daemon.refcounts() == {}


async def test_turn_start_prefetches_unique_hashes_in_order(
    rec_daemon: tuple[DaemonClient, RecordingBackend],
) -> None:
    d, backend = rec_daemon
    await d.turn_end("s1", ["c", "a", "c", "b"])
    assert await d.ok("turn_start", session_id="s1") == {
        "prefetch_sent": True,
        "prefetch_count": 3,
    }
    await d.settle()
    assert backend.calls == [("prefetch", ["c", "a", "b"])]


async def test_turn_start_prefetch_disabled(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    d = await start_daemon(make_config(turn_start_prefetch=False))
    await d.turn_end("s1", ["a"])
    assert await d.ok("turn_start", session_id="s1") == {
        "prefetch_sent": False,
        "prefetch_count": 0,
    }


async def test_turn_end_diffs_and_evicts_zeros(
    rec_daemon: tuple[DaemonClient, RecordingBackend],
) -> None:
    d, backend = rec_daemon
    assert (await d.turn_end("s1", ["a", "b", "c"]))["evicted_count"] == 0
    assert await d.turn_end("s1", ["b", "c", "d"]) == {
        "evicted_count": 1,
        "map_updated": True,
        "debug_written": False,
    }
    assert d.refcounts() == {"b": 1, "c": 1, "d": 1}
    await d.settle()
    assert backend.of("delete") == ["a"] and backend.of("demote") == []
    assert await d.ok("session_map", session_id="s1") == {
        "session_id": "s1",
        "chunk_hashes": ["b", "c", "d"],
    }
    d.assert_consistent()


async def test_turn_end_duplicates_hold_one_reference(daemon: DaemonClient) -> None:
    await daemon.turn_end("s1", ["a", "a", "b", "a"])
    assert daemon.refcounts() == {"a": 1, "b": 1}
    # The map keeps the engine's order and repeats.
    assert (await daemon.ok("session_map", session_id="s1"))["chunk_hashes"] == [
        "a",
        "a",
        "b",
        "a",
    ]
    assert (await daemon.turn_end("s1", ["b"]))["evicted_count"] == 1
    assert daemon.refcounts() == {"b": 1}


async def test_turn_end_without_a_list_is_refused_and_changes_nothing(
    daemon: DaemonClient,
) -> None:
    """The original's later contract: a missing list is a host or engine bug."""
    await daemon.turn_end("s1", ["a", "b"])
    before = daemon.refcounts()
    for params in ({"chunk_hashes": None}, {}, None, {"other": 1}):
        error = await daemon.err("turn_end", session_id="s1", kv_transfer_params=params)
        assert error == "missing required field 'kv_transfer_params.chunk_hashes'"
        assert (await daemon.ok("session_map", session_id="s1"))["chunk_hashes"] == ["a", "b"]
        assert daemon.refcounts() == before
    assert daemon.daemon.default.manager.sessions["s1"].turn_count == 1  # no turn counted
    # Nor does a refused turn_end create a session.
    await daemon.err("turn_end", session_id="new", kv_transfer_params={})
    assert "new" not in daemon.daemon.default.manager.sessions


async def test_turn_end_empty_list_clears_map(daemon: DaemonClient) -> None:
    await daemon.turn_end("s1", ["a", "b"])
    assert await daemon.turn_end("s1", []) == {
        "evicted_count": 2,
        "map_updated": True,
        "debug_written": False,
    }
    assert await daemon.ok("session_map", session_id="s1") == {
        "session_id": "s1",
        "chunk_hashes": [],
    }


async def test_snapshot_restore_counts_unique_passes_client_order(
    rec_daemon: tuple[DaemonClient, RecordingBackend],
) -> None:
    d, backend = rec_daemon
    await d.turn_end("s1", ["z", "y", "z", "x"])
    await d.ok("session_suspend", session_id="s1")
    await d.settle()
    backend.calls.clear()
    assert await d.ok("snapshot_restore", session_id="s1") == {
        "prefetch_sent": True,
        "prefetch_count": 3,
    }
    await d.settle()
    assert backend.calls == [("prefetch", ["z", "y", "x"])]
    assert d.refcounts() == {"z": 1, "y": 1, "x": 1}


async def test_snapshot_restore_from_source_session(daemon: DaemonClient) -> None:
    await daemon.turn_end("parent", ["a", "b"])
    assert await daemon.ok("snapshot_restore", session_id="child", source_session_id="parent") == {
        "prefetch_sent": True,
        "prefetch_count": 2,
    }
    assert (await daemon.ok("session_map", session_id="child"))["chunk_hashes"] == ["a", "b"]
    assert daemon.refcounts() == {"a": 2, "b": 2}
    daemon.assert_consistent()


async def test_snapshot_restore_of_active_session_is_idempotent(daemon: DaemonClient) -> None:
    await daemon.turn_end("s1", ["a", "b"])
    for _ in range(2):
        assert await daemon.ok("snapshot_restore", session_id="s1") == {
            "prefetch_sent": True,
            "prefetch_count": 2,
        }
    assert daemon.refcounts() == {"a": 1, "b": 1}


async def test_suspend_data_and_unknown_session(daemon: DaemonClient) -> None:
    await daemon.turn_end("s1", ["a", "b"])
    assert await daemon.ok("session_suspend", session_id="s1") == {
        "evicted_count": 2,
        "suspended": True,
    }
    # Suspending again releases nothing more.
    assert await daemon.ok("session_suspend", session_id="s1") == {
        "evicted_count": 0,
        "suspended": True,
    }
    assert await daemon.ok("session_suspend", session_id="nope") == {
        "evicted_count": 0,
        "suspended": False,
    }


async def test_close_unknown_session(daemon: DaemonClient) -> None:
    assert await daemon.ok("session_close", session_id="nope") == {
        "evicted_count": 0,
        "closed": False,
    }


async def test_fork_and_fork_end_data(daemon: DaemonClient) -> None:
    await daemon.turn_end("s1", ["a"])
    first = await daemon.ok("session_fork", session_id="s1")
    assert first == {"forked": True, "fork_id": 1}
    assert await daemon.ok("session_fork", session_id="s1") == {"forked": True, "fork_id": 2}
    assert await daemon.ok("session_fork_end", session_id="s1", fork_id=1) == {
        "fork_end": True,
        "fork_id": 1,
    }
    # A retry of a released id, or an unknown one: ok, fork_end false, nothing changes.
    before = daemon.refcounts()
    for fid in (1, 77):
        assert await daemon.ok("session_fork_end", session_id="s1", fork_id=fid) == {
            "fork_end": False,
            "fork_id": fid,
        }
    assert daemon.refcounts() == before
    # Without an id: the newest open fork.
    assert await daemon.ok("session_fork_end", session_id="s1") == {
        "fork_end": True,
        "fork_id": 2,
    }
    for bad in (0, -1, "1", 1.5, True):
        assert await daemon.err("session_fork_end", session_id="s1", fork_id=bad) == (
            "'fork_id' must be a positive integer"
        )


async def test_turn_start_unknown_session_prefetches_nothing(daemon: DaemonClient) -> None:
    assert await daemon.ok("turn_start", session_id="never-seen") == {
        "prefetch_sent": False,
        "prefetch_count": 0,
    }
    assert await daemon.ok("health") == {"status": "running", "sessions_count": 0}


async def test_turn_start_prefetch_false_marks_the_turn_without_prefetching(
    daemon: DaemonClient,
) -> None:
    kv = {"chunk_hashes": ["h-a", "h-b"]}
    await daemon.ok("turn_end", session_id="p", kv_transfer_params=kv)
    assert await daemon.ok("turn_start", session_id="p") == {
        "prefetch_sent": True,
        "prefetch_count": 2,
    }
    assert await daemon.ok("turn_start", session_id="p", prefetch=False) == {
        "prefetch_sent": False,
        "prefetch_count": 0,
    }
    assert await daemon.err("turn_start", session_id="p", prefetch="no") == (
        "'prefetch' must be true or false"
    )


async def test_lifecycle_events_take_a_reason(daemon: DaemonClient) -> None:
    kv = {"chunk_hashes": ["h-a"]}
    await daemon.ok("turn_end", session_id="r", kv_transfer_params=kv)
    for bad in ("", "x" * 65, 5, "two\nlines"):
        assert "'reason' must be" in await daemon.err("session_suspend", session_id="r", reason=bad)
    assert (await daemon.ok("session_suspend", session_id="r", reason="tool_pause"))["suspended"]
    assert (await daemon.ok("snapshot_restore", session_id="r", reason="next_request"))[
        "prefetch_count"
    ] == 1
    assert (await daemon.ok("session_close", session_id="r", reason="idle"))["closed"]


async def test_list_events_reads_the_registry(daemon: DaemonClient) -> None:
    data = await daemon.ok("list_events")
    assert set(data) == {"events", "admin_events"}
    events = data["events"]
    assert set(events) == set(NINE)  # exactly the nine, as the original's clients count
    for name, (required, optional) in NINE.items():
        assert name in events, name
        spec = events[name]
        assert set(spec) == {"description", "required", "optional"}, spec
        assert isinstance(spec["description"], str) and spec["description"]
        assert spec["required"] == required, name
        assert spec["optional"] == optional, name
    admin = data["admin_events"]
    assert admin["list_events"]["required"] == []
    assert {"chunk_info", "chunk_evict", "list_sessions", "list_namespaces"} <= set(admin)
    for spec in admin.values():  # the same spec shape
        assert set(spec) == {"description", "required", "optional"}, spec
    # Every listed event is served (none is a stale copy), and nothing else is.
    registry = daemon.daemon.registry
    assert set(events) | set(admin) == {s.name for s in registry.specs()}
    assert not set(events) & set(admin)
    for name in [*events, *admin]:
        assert name in registry
