"""The trace and metrics wire as tests read it: trace records, a raw websocket, /metrics text."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from ramakv_daemon.trace.protocol import MAX_MESSAGE_BYTES

TRACE_TIMEOUT = 10.0


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text -> (sample name, sorted labels) -> value, via prometheus-client's parser."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def recv_raw(ws: aiohttp.ClientWebSocketResponse, timeout: float = TRACE_TIMEOUT) -> dict:
    """The next JSON trace message as sent (fails on close or timeout)."""
    msg = await ws.receive(timeout=timeout)
    assert msg.type == aiohttp.WSMsgType.TEXT, (msg.type, msg.data, msg.extra)
    assert len(msg.data) <= MAX_MESSAGE_BYTES
    return json.loads(msg.data)


async def recv(ws: aiohttp.ClientWebSocketResponse, timeout: float = TRACE_TIMEOUT) -> dict:
    """The next trace record; a snapshot comes back whole: its header with ``sessions``
    (id -> summary) and ``refcounts`` gathered from its ``snapshot_sessions`` parts."""
    rec = await recv_raw(ws, timeout)
    if rec["kind"] != "snapshot":
        return rec
    snap = {**rec, "sessions": {}, "refcounts": {}, "forks": {}}
    while True:
        part = await recv_raw(ws, timeout)
        assert part["kind"] == "snapshot_sessions" and part["seq"] == rec["seq"], part
        snap["sessions"].update((row["session_id"], row) for row in part["sessions"])
        snap["refcounts"].update(part["refcounts"])
        snap["forks"].update((str(f["fork_id"]), f) for f in part["forks"])
        if part["last"]:
            return snap


async def recv_n(ws: aiohttp.ClientWebSocketResponse, n: int) -> list[dict]:
    """The next ``n`` trace messages."""
    return [await recv(ws) for _ in range(n)]


def apply_record(state: dict[str, Any], record: dict[str, Any]) -> None:
    """Fold a (whole) snapshot or an event record into ``state``: ``sessions`` (summaries),
    ``refcounts`` (those the snapshot and the deltas told), ``totals``."""
    if record["kind"] == "snapshot":
        state["sessions"] = {k: dict(v) for k, v in record["sessions"].items()}
        state["refcounts"] = dict(record["refcounts"])
        state["seq"] = record["seq"]
        state["totals"] = dict(record["totals"])
        return
    assert record["kind"] == "event", record
    assert record["seq"] == state["seq"] + 1, (state["seq"], record["seq"])
    state["seq"] = record["seq"]
    for sid, value in record["delta"]["sessions"].items():
        if value is None:
            state["sessions"].pop(sid, None)
        else:
            state["sessions"][sid] = dict(value)
    for h, n in record["delta"]["refcounts"].items():
        if n == 0:
            state["refcounts"].pop(h, None)
        else:
            state["refcounts"][h] = n
    if "totals" in record:
        state["totals"] = dict(record["totals"])


class RawWebSocket:
    """A websocket client on a bare socket, so a test decides when (if ever) bytes are read."""

    def __init__(self, host: str, port: int, path: str, rcvbuf: int = 4096) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # A small receive window makes the server's writes back up quickly.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(TRACE_TIMEOUT)
        self.sock.connect((host, port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            assert chunk, "server closed during the handshake"
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head

    def _need(self, n: int) -> None:
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("server closed the socket")
            self.buf += chunk

    def frame(self) -> tuple[int, bytes]:
        """Read one (unfragmented) frame: (opcode, payload)."""
        self._need(2)
        opcode, length = self.buf[0] & 0x0F, self.buf[1] & 0x7F
        pos = 2
        if length == 126:
            self._need(4)
            length, pos = struct.unpack(">H", self.buf[2:4])[0], 4
        elif length == 127:
            self._need(10)
            length, pos = struct.unpack(">Q", self.buf[2:10])[0], 10
        self._need(pos + length)
        payload, self.buf = self.buf[pos : pos + length], self.buf[pos + length :]
        return opcode, payload

    def read_until_close(self, max_frames: int = 100000) -> tuple[list[dict], int, str]:
        """Read text frames until the close frame: (messages, close code, close reason)."""
        messages: list[dict] = []
        for _ in range(max_frames):
            opcode, payload = self.frame()
            if opcode == 0x1:
                messages.append(json.loads(payload))
            elif opcode == 0x8:
                code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else 1005
                return messages, code, payload[2:].decode("utf-8", "replace")
        raise AssertionError("no close frame")

    def close(self) -> None:
        """Drop the socket."""
        self.sock.close()
