"""parse and TraceReader: one method per kind, unknown kinds to ``other``."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from ramakv_protocol.dispatch import (
    MARKER_KINDS,
    RECORD_KINDS,
    TraceReader,
    as_message,
    is_kind,
    parse,
)
from ramakv_protocol.records import EventRecord, SnapshotHeader


class Names(TraceReader[str]):
    """Says which method read a message."""

    def on_snapshot(self, msg: SnapshotHeader) -> str:
        return f"snapshot {msg['seq']}"

    def on_event(self, msg: EventRecord) -> str:
        return f"event {msg['type']}"

    def other(self, msg: Mapping[str, object]) -> str:
        return f"other {msg.get('kind')}"


def test_read_calls_the_subclass_method_for_the_kind() -> None:
    r = Names()
    assert r.read({"kind": "snapshot", "seq": 3}) == "snapshot 3"
    assert r.read({"kind": "event", "type": "turn_end"}) == "event turn_end"
    assert r.read({"kind": "budget"}) == "other budget"  # not overridden
    assert r.read({"kind": "_status"}) == "other _status"  # not the protocol's
    assert r.read({}) == "other None"


def test_a_reader_without_other_refuses_what_it_does_not_read() -> None:
    class Events(TraceReader[int]):
        def on_event(self, msg: EventRecord) -> int:
            return 1

    assert Events().read({"kind": "event"}) == 1
    with pytest.raises(NotImplementedError, match="'snapshot'"):
        Events().read({"kind": "snapshot"})


def test_every_kind_has_a_method() -> None:
    for kind in RECORD_KINDS | MARKER_KINDS:
        assert callable(getattr(TraceReader, f"on_{kind}"))


def test_parse_and_as_message() -> None:
    assert parse('{"kind": "event"}') == {"kind": "event"}
    assert parse(b"[1]") == [1]
    assert parse("{broken") is None
    assert parse('{"a": 1}', loads=lambda t: json.loads(t) | {"b": 2}) == {"a": 1, "b": 2}
    assert as_message({"kind": "x"}) == {"kind": "x"}
    assert as_message([1]) is None and as_message("text") is None
    assert is_kind({"kind": "event"}, "event") and not is_kind({"kind": "event"}, "snapshot")
