"""Hypothesis fuzz of POST /event on a real app: always a well-formed answer, never a crash."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections import Counter
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ramakv_daemon.config import Config
from ramakv_daemon.core.manager import recompute_refcounts
from ramakv_daemon.http.app import init_app
from ramakv_daemon.http.keys import DAEMON_KEY

ANSWER_TIMEOUT = 120.0  # a hang guard: a hang fails the test; nothing is timed
CASES: Counter[str] = Counter()

# The nine original events' data fields (DESIGN.md): compared whole.
DATA_FIELDS = {
    "turn_start": {"prefetch_sent", "prefetch_count"},
    "turn_end": {"evicted_count", "map_updated", "debug_written"},
    "snapshot_restore": {"prefetch_sent", "prefetch_count"},
    "session_map": {"session_id", "chunk_hashes"},
    "session_close": {"evicted_count", "closed"},
    "session_suspend": {"evicted_count", "suspended"},
    "session_fork": {"forked"},
    "session_fork_end": {"fork_end"},
    "health": {"status", "sessions_count"},
}
TYPES = [*DATA_FIELDS, "list_events", "list_sessions", "chunk_info", "chunk_evict", "backend_query"]
SESSIONS = [f"s{i}" for i in range(5)] + ["ü-ß-😀", "a b", "x" * 1024]
HASHES = [f"h{i}" for i in range(20)] + ["😀", "é" * 25]


class LiveDaemon:
    """A real app behind aiohttp's TestServer/TestClient, on its own loop thread."""

    def __init__(self, config: Config) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.app = init_app(config)
        self.client: TestClient = self.run(self._start())

    async def _start(self) -> TestClient:
        client = TestClient(TestServer(self.app))
        await client.start_server()
        return client

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = ANSWER_TIMEOUT) -> Any:
        """Run ``coro`` on the daemon's loop; a hang raises TimeoutError."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _post(self, data: bytes, headers: dict[str, str]) -> tuple[int, str]:
        resp = await self.client.post("/event", data=data, headers=headers)
        return resp.status, await resp.text()

    def post(self, data: bytes, content_type: str = "application/json") -> tuple[int, Any]:
        """POST raw bytes; returns (status, decoded JSON answer) — the answer must be JSON."""
        headers = {"Content-Type": content_type} if content_type else {}
        status, text = self.run(self._post(data, headers))
        try:
            body = json.loads(text)
        except ValueError:
            raise AssertionError(f"answer is not JSON: {status} {text[:300]!r}") from None
        return status, body

    async def _invariant(self) -> tuple[dict[str, int], dict[str, int], int]:
        m = self.app[DAEMON_KEY].default.manager
        expected = recompute_refcounts(m.sessions.values(), m.forks.values())
        return expected, m.refcounts.as_dict(), len(m.sessions)

    def check_invariant(self) -> None:
        recomputed, counts, _ = self.run(self._invariant())
        assert recomputed == counts

    def close(self) -> None:
        self.run(self.client.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaemon]:
    """One daemon for the whole fuzz module (state accumulates across cases)."""
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    cfg = Config(
        session_store_path=str(tmp / "s.db"),
        noop_backend=True,
        debug_dir=str(tmp / "dbg"),
        max_body_bytes=2 * 1024 * 1024,
        max_sessions=50,
    )
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0002)  # two busy threads (Hypothesis, the daemon) hand over fast
    d = LiveDaemon(cfg)
    yield d
    sys.setswitchinterval(switch)
    d.check_invariant()
    status, body = d.post(b'{"type": "health"}')
    assert status == 200 and body["ok"] is True
    print(f"\nfuzz: {sum(CASES.values())} cases tried: {dict(CASES)}")
    d.close()


def check_answer(status: int, body: Any, sent: Any) -> None:
    """A well-formed ok:false with an error, or a correct ok:true."""
    assert isinstance(body, dict), body
    assert status in (200, 400, 413), (status, body)
    if body.get("ok") is True:
        assert status == 200
        assert isinstance(sent, dict) and body["type"] == sent["type"], body
        assert set(body) == {"ok", "type", "data"} and isinstance(body["data"], dict), body
        if sent["type"] in DATA_FIELDS:
            assert set(body["data"]) == DATA_FIELDS[sent["type"]], body
    else:
        assert body.get("ok") is False, body
        assert "data" not in body, body
        assert isinstance(body.get("error"), str) and body["error"], body


# ---- strategies ------------------------------------------------------------------------
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=25,
)
session_ids = st.sampled_from(SESSIONS) | st.text(max_size=40) | json_values
hash_lists = st.lists(st.sampled_from(HASHES) | st.text(max_size=120), max_size=30)
events = st.fixed_dictionaries(
    {"type": st.sampled_from(TYPES) | st.text(max_size=20) | json_values},
    optional={
        "session_id": session_ids,
        "source_session_id": session_ids,
        "kv_transfer_params": st.fixed_dictionaries(
            {}, optional={"chunk_hashes": hash_lists | json_values}
        )
        | json_values,
        "chunk_hashes": hash_lists | json_values,
        "event_id": st.text(max_size=8) | json_values,
        "debug_context": json_values,
        "force": json_values,
        "dry_run": st.booleans() | json_values,
        "limit": st.integers(-5, 20000) | json_values,
        "offset": json_values,
        "state": st.sampled_from(["active", "suspended"]) | json_values,
    },
)
content_types = st.sampled_from(
    [
        "application/json",
        "text/plain",
        "application/x-www-form-urlencoded",
        "",
        "multipart/form-data; boundary=xyz",
        "application/json; charset=latin-1",
        "image/png",
    ]
)

EXAMPLES = int(os.environ.get("RAMAKV_FUZZ_EXAMPLES", "250"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@FUZZ
@given(body=events, ctype=content_types)
def test_event_shaped_payloads(live: LiveDaemon, body: dict[str, Any], ctype: str) -> None:
    CASES["event-shaped"] += 1
    status, answer = live.post(json.dumps(body).encode(), ctype)
    check_answer(status, answer, body)
    live.check_invariant()


@FUZZ
@given(body=json_values)
def test_any_json_value(live: LiveDaemon, body: Any) -> None:
    CASES["any-json"] += 1
    status, answer = live.post(json.dumps(body).encode())
    check_answer(status, answer, body)


@FUZZ
@given(raw=st.binary(max_size=300), body=events, cut=st.integers(0, 200))
@example(raw=b'{"type":"health"}', body={"type": "turn_start"}, cut=0)  # raw bytes, valid event
def test_raw_and_invalid_utf8_bytes(live: LiveDaemon, raw: bytes, body: Any, cut: int) -> None:
    CASES["raw-bytes"] += 1
    status, answer = live.post(raw)
    try:  # Hypothesis also tries constants from the source, such as a whole valid event
        sent = json.loads(raw)
    except ValueError:
        sent = None
    check_answer(status, answer, sent)
    CASES["invalid-utf8"] += 1
    data = json.dumps(body, ensure_ascii=False).encode()
    cut = min(cut, len(data))
    status, answer = live.post(data[:cut] + b"\xff\xfe\xc3" + data[cut:])
    assert status == 400 and answer["ok"] is False, answer


@settings(FUZZ, max_examples=max(10, EXAMPLES // 10))
@given(n=st.integers(1001, 150_000), where=st.sampled_from(["kv", "chunk_info", "restore"]))
def test_huge_arrays(live: LiveDaemon, n: int, where: str) -> None:
    CASES["huge-array"] += 1
    hashes = [f"h{i % 1000}" for i in range(n)]
    if where == "kv":
        body = {
            "type": "turn_end",
            "session_id": "s0",
            "kv_transfer_params": {"chunk_hashes": hashes},
        }
    elif where == "chunk_info":
        body = {"type": "chunk_info", "chunk_hashes": hashes}
    else:
        body = {"type": "snapshot_restore", "session_id": hashes}
    status, answer = live.post(json.dumps(body).encode())
    check_answer(status, answer, body)
    assert answer["ok"] is False
    live.check_invariant()


@settings(FUZZ, max_examples=max(10, EXAMPLES // 10))
@given(depth=st.integers(10, 200_000), shape=st.sampled_from(["list", "dict", "in-event"]))
def test_deep_nesting(live: LiveDaemon, depth: int, shape: str) -> None:
    CASES["deep-nesting"] += 1
    if shape == "list":
        raw = "[" * depth + "]" * depth
    elif shape == "dict":
        raw = '{"a":' * depth + "1" + "}" * depth
    else:
        raw = (
            f'{{"type":"turn_end","session_id":"s1","event_id":"deep{depth}","debug_context":'
            + "[" * depth
            + "]" * depth
            + ',"kv_transfer_params":'
            + "[" * depth
            + "]" * depth
            + "}"
        )
    status, answer = live.post(raw.encode())
    check_answer(status, answer, None)
    live.check_invariant()


async def test_slow_bodies_do_not_block_other_requests(start_daemon: Any) -> None:
    """Ordinary events are answered while 20 bodies are still half sent: the tricklers hold
    their last bytes until every event was answered, so a server that waited for a body
    before serving others would hang into the guard instead."""
    d = await start_daemon()
    host, port = d.client.server.host, d.client.server.port
    body = json.dumps(
        {
            "type": "turn_end",
            "session_id": "slow",
            "kv_transfer_params": {"chunk_hashes": ["a", "b"]},
        }
    ).encode()
    head = (
        f"POST /event HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    half = len(body) // 2
    mid_body = 0  # tricklers that have sent the head and half the body
    mid_body_all, release = asyncio.Event(), asyncio.Event()

    async def trickle(i: int, finish: bool) -> bytes:
        nonlocal mid_body
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(head)
        for b in range(half):  # a byte at a time, each one drained
            writer.write(body[b : b + 1])
            await writer.drain()
            await asyncio.sleep(0)
        mid_body += 1
        if mid_body == 20:
            mid_body_all.set()
        await release.wait()
        if not finish:
            writer.close()  # gave up mid-body
            return b""
        for b in range(half, len(body)):
            writer.write(body[b : b + 1])
            await writer.drain()
        answer = await asyncio.wait_for(reader.read(65536), ANSWER_TIMEOUT)
        writer.close()
        return answer

    tricklers = [asyncio.create_task(trickle(i, i % 2 == 0)) for i in range(20)]
    await asyncio.wait_for(mid_body_all.wait(), ANSWER_TIMEOUT)
    for i in range(40):  # meanwhile, ordinary requests are answered
        await asyncio.wait_for(d.turn_end(f"fast{i % 4}", [f"h{i}"]), ANSWER_TIMEOUT)
    assert not any(t.done() for t in tricklers)  # all 20 still mid-body, none answered
    # The server holds all 20 connections open, waiting for their bodies.
    assert len(d.client.server.runner.server.connections) >= 20
    release.set()
    answers = await asyncio.wait_for(asyncio.gather(*tricklers), ANSWER_TIMEOUT)
    finished = [a for a in answers if a]
    assert len(finished) == 10
    assert all(b"200 OK" in a and b'"ok": true' in a for a in finished), finished[0]
    assert (await d.ok("list_sessions"))["total"] == 5
    d.assert_consistent()
    CASES["slow-body"] += 20
