"""chunk_top and backend_query over POST /event: bad input's texts and the replies' shape."""

from __future__ import annotations

from typing import Any

import pytest
from support.daemon_app import DaemonClient

# Captured from the handlers as they were before their typed messages (468db6b^, when each
# parsed its payload itself): the typed decode must answer every one of them word for word,
# including which of two bad fields is named first and the namespace's precedence.
LIMIT = "'limit' must be an integer from 0 to 500"
OFFSET = "'offset' must be an integer from 0 to 100000"
PREFIX = "'prefix' must be a string of at most 100 characters"
CHUNK_TOP = [
    ({"limit": -1}, LIMIT),
    ({"limit": 501}, LIMIT),
    ({"limit": "10"}, LIMIT),
    ({"limit": True}, LIMIT),
    ({"limit": 1.0}, LIMIT),
    ({"limit": 2**70}, LIMIT),
    ({"offset": -1}, OFFSET),
    ({"offset": 100_001}, OFFSET),
    ({"offset": [0]}, OFFSET),
    ({"prefix": "x" * 101}, PREFIX),
    ({"prefix": ["a"]}, PREFIX),
    ({"prefix": 7}, PREFIX),
    ({"prefix": True}, PREFIX),
    ({"limit": -1, "offset": -1}, LIMIT),
    ({"limit": 501, "prefix": 7}, LIMIT),
    ({"offset": -1, "prefix": 7}, OFFSET),
    ({"namespace": 5, "limit": -1}, "'namespace' must be a string"),
    ({"namespace": "nope", "prefix": 7}, "unknown namespace 'nope'"),
]
BACKEND_QUERY = [
    ({}, "missing required field 'chunk_hashes'"),
    ({"chunk_hashes": "a"}, "'chunk_hashes' must be a list of strings"),
    ({"chunk_hashes": [True]}, "'chunk_hashes[0]' must be a non-empty string"),
    ({"chunk_hashes": [["a"]]}, "'chunk_hashes[0]' must be a non-empty string"),
    ({"chunk_hashes": ["ok", None]}, "'chunk_hashes[1]' must be a non-empty string"),
    (
        {"chunk_hashes": ["a", "\ud800"]},
        "'chunk_hashes[1]' must be valid Unicode (no lone surrogates)",
    ),
    ({"chunk_hashes": ["é" * 51]}, "'chunk_hashes[0]' is longer than 100 bytes"),
    (
        {"chunk_hashes": [f"h{i}" for i in range(1001)] + [7]},
        "'chunk_hashes' has 1002 hashes, more than the limit of 1000",
    ),
    ({"namespace": 5, "chunk_hashes": "a"}, "'namespace' must be a string"),
    ({"namespace": "nope"}, "missing required field 'chunk_hashes'"),
    ({"namespace": "nope", "chunk_hashes": 1}, "unknown namespace 'nope'"),
]


@pytest.mark.parametrize(
    ("type_", "fields", "error"),
    [("chunk_top", f, e) for f, e in CHUNK_TOP]
    + [("backend_query", f, e) for f, e in BACKEND_QUERY],
)
async def test_bad_input_is_answered_with_the_texts_it_always_had(
    daemon: DaemonClient, type_: str, fields: dict[str, Any], error: str
) -> None:
    assert await daemon.err(type_, **fields) == error


async def test_replies_keep_their_keys_in_their_order(daemon: DaemonClient) -> None:
    d = daemon
    await d.turn_end("a", ["sys", "a1"])
    await d.turn_end("b", ["sys"])
    top = await d.ok("chunk_top", limit=1, prefix=None)
    assert list(top) == ["total", "total_exact", "offset", "prefix", "chunks"]
    assert top == {
        "total": 2,
        "total_exact": True,
        "offset": 0,
        "prefix": "",
        "chunks": [{"hash": "sys", "refcount": 2}],
    }
    got = await d.ok("backend_query", chunk_hashes=["sys", "nope"])
    assert list(got) == ["backend", "ok", "error", "locations"]
    assert got["ok"] is True and got["error"] is None
    assert got["locations"] == {"sys": [], "nope": []}
