"""Bad input through HTTP: exact error texts, wrong types, limits, body size; state unchanged."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support.daemon_app import DaemonClient

SID_EVENTS = [
    "turn_start",
    "snapshot_restore",
    "session_map",
    "session_close",
    "session_suspend",
    "session_fork",
    "session_fork_end",
]


async def seed(d: DaemonClient) -> dict[str, Any]:
    """Some state to keep: an active session with a fork, a suspended one; return the state."""
    await d.turn_end("s1", ["a", "b", "shared"])
    await d.ok("session_fork", session_id="s1")
    await d.turn_end("s2", ["shared", "c"])
    await d.turn_end("s3", ["d"])
    await d.ok("session_suspend", session_id="s3")
    return d.state()


async def expect_error(
    d: DaemonClient, payload: Any, error: str, *, status: int = 200, exact: bool = True
) -> None:
    """Post ``payload``; the answer must be ok:false with ``error`` and the state unchanged."""
    before = d.state()
    got_status, body = await d.post(payload)
    assert got_status == status, body
    assert body["ok"] is False and "data" not in body, body
    if exact:
        assert body["error"] == error, body
    else:
        assert error in body["error"], body
    if isinstance(payload, dict) and isinstance(payload.get("type"), str) and payload["type"]:
        assert body["type"] == payload["type"], body
    assert d.state() == before
    d.assert_consistent()


@pytest.mark.parametrize(
    "payload",
    [{}, {"type": ""}, {"type": None}, {"type": 5}, {"type": ["turn_end"]}, {"session_id": "s1"}],
)
async def test_missing_or_empty_type(daemon: DaemonClient, payload: dict[str, Any]) -> None:
    await seed(daemon)
    await expect_error(daemon, payload, "missing or empty 'type' field")


async def test_unknown_event_type(daemon: DaemonClient) -> None:
    await seed(daemon)
    await expect_error(daemon, {"type": "turn_middle", "session_id": "s1"}, "unknown event type")


@pytest.mark.parametrize("type_", [*SID_EVENTS, "turn_end"])
async def test_missing_session_id(daemon: DaemonClient, type_: str) -> None:
    await seed(daemon)
    payload: dict[str, Any] = {"type": type_}
    if type_ == "turn_end":
        payload["kv_transfer_params"] = {"chunk_hashes": ["x"]}
    await expect_error(daemon, payload, "missing required field 'session_id'")


async def test_turn_end_missing_kv_transfer_params(daemon: DaemonClient) -> None:
    await seed(daemon)
    await expect_error(
        daemon,
        {"type": "turn_end", "session_id": "s1"},
        "missing required field 'kv_transfer_params'",
    )


@pytest.mark.parametrize("type_", [*SID_EVENTS, "turn_end"])
async def test_empty_session_id(daemon: DaemonClient, type_: str) -> None:
    await seed(daemon)
    payload: dict[str, Any] = {"type": type_, "session_id": ""}
    if type_ == "turn_end":
        payload["kv_transfer_params"] = {"chunk_hashes": ["x"]}
    await expect_error(daemon, payload, "session_id must not be empty")


@pytest.mark.parametrize(
    "type_", ["session_map", "session_fork", "session_fork_end", "snapshot_restore"]
)
async def test_session_not_found(daemon: DaemonClient, type_: str) -> None:
    await seed(daemon)
    await expect_error(daemon, {"type": type_, "session_id": "ghost"}, "session 'ghost' not found")


async def test_snapshot_restore_unknown_source(daemon: DaemonClient) -> None:
    await seed(daemon)
    await expect_error(
        daemon,
        {"type": "snapshot_restore", "session_id": "s1", "source_session_id": "ghost"},
        "session 'ghost' not found",
    )


@pytest.mark.parametrize("sid", [5, None, ["s1"], {"id": "s1"}, True, 1.5])
@pytest.mark.parametrize("type_", ["session_map", "turn_end", "session_close"])
async def test_session_id_not_a_string(daemon: DaemonClient, type_: str, sid: Any) -> None:
    await seed(daemon)
    payload: dict[str, Any] = {"type": type_, "session_id": sid}
    if type_ == "turn_end":
        payload["kv_transfer_params"] = {"chunk_hashes": ["x"]}
    await expect_error(daemon, payload, "session_id must be a string")


async def test_session_id_with_nul(daemon: DaemonClient) -> None:
    await seed(daemon)
    await expect_error(
        daemon,
        {"type": "turn_end", "session_id": "a\x00b", "kv_transfer_params": {"chunk_hashes": []}},
        "session_id must not contain NUL",
    )


@pytest.mark.parametrize(
    ("hashes", "error"),
    [
        ("a,b", "'kv_transfer_params.chunk_hashes' must be a list of strings"),
        ({"a": 1}, "'kv_transfer_params.chunk_hashes' must be a list of strings"),
        (5, "'kv_transfer_params.chunk_hashes' must be a list of strings"),
        (["a", 5], "'kv_transfer_params.chunk_hashes[1]' must be a non-empty string"),
        (["a", None], "'kv_transfer_params.chunk_hashes[1]' must be a non-empty string"),
        ([["a"]], "'kv_transfer_params.chunk_hashes[0]' must be a non-empty string"),
        (["a", ""], "'kv_transfer_params.chunk_hashes[1]' must be a non-empty string"),
    ],
)
async def test_chunk_hashes_wrong_type(daemon: DaemonClient, hashes: Any, error: str) -> None:
    await seed(daemon)
    await expect_error(
        daemon,
        {"type": "turn_end", "session_id": "s1", "kv_transfer_params": {"chunk_hashes": hashes}},
        error,
    )


@pytest.mark.parametrize("params", ["chunk_hashes", ["a", "b"], 1, True])
async def test_kv_transfer_params_not_an_object(daemon: DaemonClient, params: Any) -> None:
    await seed(daemon)
    await expect_error(
        daemon,
        {"type": "turn_end", "session_id": "s1", "kv_transfer_params": params},
        "'kv_transfer_params' must be an object",
    )


async def test_debug_context_not_an_object(daemon: DaemonClient) -> None:
    await seed(daemon)
    await expect_error(
        daemon,
        {
            "type": "turn_end",
            "session_id": "s1",
            "kv_transfer_params": {"chunk_hashes": []},
            "debug_context": "hi",
        },
        "'debug_context' must be an object",
    )


async def test_source_session_id_wrong_type(daemon: DaemonClient) -> None:
    await seed(daemon)
    await expect_error(
        daemon,
        {"type": "snapshot_restore", "session_id": "s1", "source_session_id": 7},
        "source_session_id must be a string",
    )


async def test_too_many_hashes(daemon: DaemonClient) -> None:
    await seed(daemon)
    hashes = [f"h{i}" for i in range(1001)]
    await expect_error(
        daemon,
        {"type": "turn_end", "session_id": "s1", "kv_transfer_params": {"chunk_hashes": hashes}},
        "'kv_transfer_params.chunk_hashes' has 1001 hashes, more than the limit of 1000",
    )
    # A new session is not created by the rejected event either.
    await expect_error(
        daemon,
        {"type": "turn_end", "session_id": "new", "kv_transfer_params": {"chunk_hashes": hashes}},
        "more than the limit of 1000",
        exact=False,
    )
    # Exactly at the limit is fine.
    assert (await daemon.turn_end("s1", hashes[:1000]))["map_updated"] is True
    daemon.assert_consistent()


@pytest.mark.parametrize(
    "long_hash",
    ["x" * 101, "é" * 51, "\U0001f600" * 26, "a" * 99 + "é"],
    ids=["ascii101", "2byte102", "4byte104", "mixed101"],
)
async def test_hash_too_long(daemon: DaemonClient, long_hash: str) -> None:
    await seed(daemon)
    await expect_error(
        daemon,
        {
            "type": "turn_end",
            "session_id": "s1",
            "kv_transfer_params": {"chunk_hashes": ["ok", long_hash]},
        },
        "'kv_transfer_params.chunk_hashes[1]' is longer than 100 bytes",
    )


@pytest.mark.parametrize("edge", ["x" * 100, "é" * 50, "\U0001f600" * 25])
async def test_hash_at_byte_limit_accepted(daemon: DaemonClient, edge: str) -> None:
    assert (await daemon.turn_end("s1", [edge]))["map_updated"] is True
    assert (await daemon.ok("session_map", session_id="s1"))["chunk_hashes"] == [edge]


async def test_configured_limits(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    d = await start_daemon(make_config(max_hashes_per_event=2, max_hash_bytes=4))
    await d.turn_end("s1", ["abcd", "efgh"])
    await expect_error(
        d,
        {
            "type": "turn_end",
            "session_id": "s1",
            "kv_transfer_params": {"chunk_hashes": ["a", "b", "c"]},
        },
        "'kv_transfer_params.chunk_hashes' has 3 hashes, more than the limit of 2",
    )
    await expect_error(
        d,
        {"type": "turn_end", "session_id": "s1", "kv_transfer_params": {"chunk_hashes": ["abcde"]}},
        "'kv_transfer_params.chunk_hashes[0]' is longer than 4 bytes",
    )


@pytest.mark.parametrize(
    "raw",
    [b"{", b"not json", b"", b'{"type": "health",}', b"\xff\xfe", b"[" * 100000],
    ids=["open-brace", "text", "empty", "trailing-comma", "bad-utf8", "deep-nesting"],
)
async def test_malformed_json(daemon: DaemonClient, raw: bytes) -> None:
    await seed(daemon)
    before = daemon.state()
    status, body = await daemon.post(raw)
    assert status == 400
    assert body["ok"] is False and "data" not in body
    assert body["error"].startswith("malformed JSON"), body
    assert daemon.state() == before
    assert (await daemon.ok("health"))["status"] == "running"


@pytest.mark.parametrize("raw", ["[]", '["turn_end"]', '"health"', "42", "null", "true"])
async def test_non_object_body(daemon: DaemonClient, raw: str) -> None:
    await seed(daemon)
    await expect_error(daemon, raw, "request body must be a JSON object", status=400)


async def test_body_over_8_mib_with_content_length(daemon: DaemonClient) -> None:
    await seed(daemon)
    before = daemon.state()
    limit = 8 * 1024 * 1024
    hashes = ["h" * 90] * (limit // 90)
    body = json.dumps(
        {"type": "turn_end", "session_id": "s1", "kv_transfer_params": {"chunk_hashes": hashes}}
    ).encode()
    assert len(body) > limit
    status, answer = await daemon.post(body)
    assert status == 413
    assert answer == {"ok": False, "error": f"request body larger than {limit} bytes"}
    assert daemon.state() == before
    assert (await daemon.ok("health"))["sessions_count"] == 3


async def test_body_over_8_mib_chunked(daemon: DaemonClient) -> None:
    """No Content-Length (chunked upload): the limit still holds while reading."""
    await seed(daemon)
    before = daemon.state()
    limit = 8 * 1024 * 1024

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"type": "turn_end", "session_id": "s1", "pad": "'
        for _ in range(9):
            yield b"x" * (1024 * 1024)
        yield b'"}'

    resp = await daemon.client.post("/event", data=chunks())
    assert resp.status == 413
    answer = await resp.json()
    assert answer == {"ok": False, "error": f"request body larger than {limit} bytes"}
    assert daemon.state() == before


async def test_body_just_under_limit_is_read(daemon: DaemonClient) -> None:
    """A big but legal body is parsed (and then judged on its fields)."""
    pad = "x" * (8 * 1024 * 1024 - 200)
    status, body = await daemon.post({"type": "health", "pad": pad})
    assert status == 200 and body["ok"] is True


async def test_fork_end_without_fork(daemon: DaemonClient) -> None:
    await daemon.turn_end("solo", ["a"])
    await seed(daemon)
    await expect_error(
        daemon,
        {"type": "session_fork_end", "session_id": "solo"},
        "session 'solo' has no open fork",
    )


async def test_fork_of_suspended_session(daemon: DaemonClient) -> None:
    await seed(daemon)
    await expect_error(
        daemon, {"type": "session_fork", "session_id": "s3"}, "session 's3' is suspended"
    )


async def test_errors_never_stop_the_daemon(daemon: DaemonClient) -> None:
    """A run of bad requests, then good ones: every answer is ok:false, then ok:true."""
    state = await seed(daemon)
    bad: list[Any] = [b"{", "[]", {"type": "x"}, {"type": "turn_end"}, {"type": ""}]
    for payload in bad * 3:
        status, body = await daemon.post(payload)
        assert body["ok"] is False and status in (200, 400)
    assert daemon.state() == state
    assert (await daemon.turn_end("s1", ["a"]))["map_updated"] is True


@pytest.mark.parametrize(
    "raw",
    [
        '{"type": "turn_end", "session_id": "s1", '
        '"kv_transfer_params": {"chunk_hashes": ["ok", "h\\ud800"]}}',
        '{"type": "turn_end", "session_id": "s1", '
        '"kv_transfer_params": {"chunk_hashes": ["ok", "\\udfff"]}}',
    ],
)
async def test_lone_surrogate_hash_rejected(daemon: DaemonClient, raw: str) -> None:
    """SQLite (and the backend's JSON) cannot carry it: accepted, it broke later commits."""
    await seed(daemon)
    await expect_error(
        daemon,
        raw,
        "'kv_transfer_params.chunk_hashes[1]' must be valid Unicode (no lone surrogates)",
    )
    assert (await daemon.turn_end("s1", ["ok"]))["map_updated"] is True


async def test_lone_surrogate_session_id_rejected(daemon: DaemonClient) -> None:
    await seed(daemon)
    await expect_error(
        daemon,
        '{"type": "turn_end", "session_id": "x\\ud800", "kv_transfer_params": {}}',
        "session_id must be valid Unicode (no lone surrogates)",
    )


async def test_session_id_too_long(daemon: DaemonClient) -> None:
    await seed(daemon)
    await expect_error(
        daemon,
        {"type": "session_map", "session_id": "x" * 1025},
        "session_id longer than 1024 bytes",
    )
    status, body = await daemon.post({"type": "session_map", "session_id": "x" * 1024})
    assert body["error"] == f"session '{'x' * 1024}' not found"


@pytest.mark.parametrize("type_", ["turn_start", "snapshot_restore", "turn_end"])
@pytest.mark.parametrize("bad", [5, True, ["r"], {"id": "r"}, "", "r" * 129])
async def test_bad_request_id_is_refused(daemon: DaemonClient, type_: str, bad: Any) -> None:
    await seed(daemon)
    payload: dict[str, Any] = {"type": type_, "session_id": "s1", "request_id": bad}
    if type_ == "turn_end":
        payload["kv_transfer_params"] = {"chunk_hashes": ["x"]}
    await expect_error(daemon, payload, "'request_id' must be a string of 1 to 128 characters")


async def test_a_request_id_of_128_characters_is_taken(daemon: DaemonClient) -> None:
    await seed(daemon)
    rid = "r" * 128
    assert (await daemon.ok("turn_start", session_id="s1", request_id=rid))["prefetch_count"] == 3
    await daemon.turn_end("s1", ["a"], request_id=rid)
    await daemon.ok("turn_start", session_id="s1", request_id=None)  # null: none given
