"""Typed messages at the pipeline's entry: the fast msgspec decode accepts only what today's
field checks accept, with the same values, and whatever it refuses is answered by those
checks (their texts); every event has a message type."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ramakv_daemon.core.catalogue import Limits
from ramakv_daemon.core.errors import RamAKvError
from ramakv_daemon.handlers import DEFAULT_REGISTRY
from ramakv_daemon.handlers.list_events import CONTRACT_EVENTS
from ramakv_daemon.handlers.messages import Message, decode, tag_of
from ramakv_daemon.handlers.turn_end import TurnEnd

LIMITS = Limits(max_hashes_per_event=4, max_hash_bytes=12)

# Values that sit on each rule's edges: types, emptiness, NUL, lone surrogates, lengths,
# non-finite and negative numbers, booleans posing as numbers, nesting.
SCALARS: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2**70,
    1.5,
    math.nan,
    math.inf,
    "",
    "a",
    "s-1",
    "a\x00b",
    "\ud800",
    "x" * 13,
    "x" * 129,
    "é" * 7,
    "tool_pause",
    "not\nprintable",
]
HASH_LISTS: list[Any] = [
    [],
    ["a"],
    ["a", "b", "c", "d"],
    ["a"] * 5,
    ["a", ""],
    ["a", 1],
    ["x" * 13],
    ["é" * 7],
    ["\ud800"],
    "a",
    None,
]
nested: Any = {"k": 1}
for _ in range(70):
    nested = {"k": nested}
OBJECTS: list[Any] = [{}, {"a": [1, {"b": 2}]}, nested, [], "ctx"]

values = st.one_of(st.sampled_from(SCALARS), st.sampled_from(OBJECTS))
params = st.one_of(
    values,
    st.fixed_dictionaries(
        {}, optional={"chunk_hashes": st.sampled_from(HASH_LISTS), "other": values}
    ),
)
# Each field valid two times in three, so whole payloads pass as well as fail.
VALID: dict[str, list[Any]] = {
    "session_id": ["s", "s-1", "é" * 3],
    "source_session_id": ["s", "other"],
    "kv_transfer_params": [{"chunk_hashes": ["a", "b"]}, {"chunk_hashes": [], "x": 1}],
    "debug_context": [{}, {"messages": [{"role": "user"}]}],
    "request_id": ["r1"],
    "prefetch": [True, False],
    "reason": ["tool_pause"],
    "inferred": [True, False],
    "if_idle_since": [0, 1, 1.5, 1e9],
    "fork_id": [1, 7],
    "chunk_hashes": [["a"], ["a", "b"]],
    "dry_run": [True, False],
    "force": [True, False],
    "namespace": ["n"],
    "unknown_field": [1],
    # The admin reads' paging and filters.
    "state": ["active", "suspended", "closed"],
    "limit": [0, 1, 200, 500, 1000, 10000],
    "offset": [0, 3, 100_000, 2**31],
    "session_ids": [[], ["s"], ["s", "s-1"]],
    "forks": [True, False],
    "prefix": ["", "a", "x" * 100],
}
FIELDS = {
    name: st.one_of(
        st.sampled_from(ok),
        st.sampled_from(ok),
        params if name == "kv_transfer_params" else values,
        st.sampled_from(HASH_LISTS),
    )
    for name, ok in VALID.items()
}
TYPED = sorted(s.name for s in DEFAULT_REGISTRY.specs() if DEFAULT_REGISTRY.get(s.name).message)


def message_of(name: str) -> type[Message]:
    cls = DEFAULT_REGISTRY.get(name).message
    assert cls is not None
    return cls


def test_every_contract_event_is_typed() -> None:
    assert CONTRACT_EVENTS <= set(TYPED)
    assert set(TYPED) == {s.name for s in DEFAULT_REGISTRY.specs()}
    for name in TYPED:
        assert tag_of(message_of(name)) == name


# What list_events said of each event before the messages (their fields now say it).
SPECS = {
    "turn_start": (("session_id",), ("prefetch", "request_id")),
    "turn_end": (("session_id", "kv_transfer_params"), ("debug_context", "request_id")),
    "snapshot_restore": (("session_id",), ("source_session_id", "reason", "request_id")),
    "session_map": (("session_id",), ()),
    "session_close": (("session_id",), ("if_idle_since", "reason", "inferred")),
    "session_suspend": (("session_id",), ("if_idle_since", "reason", "inferred")),
    "session_fork": (("session_id",), ()),
    "session_fork_end": (("session_id",), ("fork_id",)),
    "health": ((), ()),
    "list_events": ((), ()),
    "list_namespaces": ((), ()),
    "chunk_info": (("chunk_hashes",), ()),
    "chunk_evict": (("chunk_hashes",), ("dry_run", "force")),
    "list_sessions": ((), ("state", "limit", "offset", "session_ids")),
    "session_chunks": (("session_id",), ("offset", "limit", "forks")),
    "chunk_top": ((), ("limit", "offset", "prefix")),
    "backend_query": (("chunk_hashes",), ()),
}


def test_specs_read_from_the_messages_are_unchanged() -> None:
    got = {n: (s.required, s.optional) for n in TYPED for s in [DEFAULT_REGISTRY.get(n).spec]}
    assert got == SPECS


def test_a_turn_end_takes_the_fast_decode() -> None:
    payload = {
        "type": "turn_end",
        "session_id": "s",
        "kv_transfer_params": {"chunk_hashes": ["a", "b"], "engine": 1},
        "namespace": "n",
    }
    msg = decode(TurnEnd, payload, LIMITS)
    assert msg == TurnEnd.parse(payload, LIMITS)
    assert msg is not None and msg.chunk_hashes == ("a", "b")


@settings(max_examples=600, deadline=None)  # ~35 payloads per event, as before
@given(name=st.sampled_from(TYPED), data=st.data())
def test_fast_decode_agrees_with_todays_checks(name: str, data: st.DataObject) -> None:
    """Accepted by the fast decode => today's checks accept it, with equal values; refused
    by today's checks => the fast decode refuses it too (so today's text answers)."""
    body = data.draw(st.fixed_dictionaries({}, optional=FIELDS))
    payload = {"type": name, **body}
    cls = message_of(name)
    fast = decode(cls, payload, LIMITS)
    try:
        slow = cls.parse(payload, LIMITS)
    except RamAKvError:
        assert fast is None, payload
        return
    if fast is not None:
        assert _same(fast, slow), (fast, slow)


def _same(a: Message, b: Message) -> bool:
    """Equal, NaN aside (a NaN never passes either way, but equality would say no)."""
    return bool(a == b)


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "turn_start", "session_id": "s", "prefetch": None},
        {"type": "session_close", "session_id": "s", "inferred": None},
        {"type": "list_sessions", "limit": None, "offset": None},
        {"type": "session_chunks", "session_id": "s", "limit": None},
        {"type": "chunk_top", "prefix": 0},
        {"type": "chunk_top", "prefix": None, "limit": None},
    ],
)
def test_what_only_msgspec_refuses_still_parses(payload: dict[str, Any]) -> None:
    """A null where today's checks read the default: the fast decode refuses it, the
    handler's parse still answers the message."""
    cls = message_of(payload["type"])
    assert decode(cls, payload, LIMITS) is None
    assert isinstance(cls.parse(payload, LIMITS), cls)


def test_list_sessions_reads_the_namespace_it_never_lists() -> None:
    """Whether the event names a namespace decides its rows; the spec still lists only
    the filters (list_events says what it always said)."""
    msg = decode(message_of("list_sessions"), {"type": "list_sessions", "namespace": "n"}, LIMITS)
    assert msg is not None and msg.namespace == "n"  # type: ignore[attr-defined]
    assert "namespace" not in DEFAULT_REGISTRY.get("list_sessions").spec.optional


@pytest.mark.parametrize("name", ["chunk_top", "backend_query"])
def test_a_query_decodes_where_it_is_handed_the_payload(name: str) -> None:
    """The pipeline hands a query the payload (after resolving the namespace), so its
    entry decodes nothing: the query's own wrapper does, once."""
    handler = DEFAULT_REGISTRY.get(name)
    assert handler.query is not None and handler.message is not None
    assert handler.decode({"type": name, "chunk_hashes": ["a"]}, LIMITS) is None
