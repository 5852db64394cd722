"""The resume policy without a network: backoff, ?since=&epoch=, markers, close codes."""

from __future__ import annotations

from ramakv_protocol.resume import Backoff, Resume, close_meaning, drop_words
from ramakv_protocol.wire import (
    PROTOCOL_CLOSE_CODE,
    SHUTDOWN_CLOSE_CODE,
    SLOW_CLOSE_CODE,
    TOO_LARGE_CLOSE_CODE,
)


def top(lo: float, hi: float) -> float:
    """A jitter draw that always takes the whole delay."""
    return hi


def test_each_close_code_has_one_meaning() -> None:
    assert close_meaning(SLOW_CLOSE_CODE).error == "slow"
    assert close_meaning(SLOW_CLOSE_CODE).keeps_place
    assert not close_meaning(PROTOCOL_CLOSE_CODE).retry
    assert close_meaning(TOO_LARGE_CLOSE_CODE).error == "too_large"
    assert close_meaning(SHUTDOWN_CLOSE_CODE).error == "shutdown"
    for code in (None, 1000, 1006, 1011):
        meaning = close_meaning(code)
        assert meaning.error == "dropped" and meaning.retry and not meaning.keeps_place
    assert drop_words("slow") == "fell behind" and drop_words("whatever") == "connection lost"


def test_backoff_doubles_to_its_cap_and_only_reset_starts_it_over() -> None:
    b = Backoff(cap=1.0, uniform=top)
    assert b.delay() == 0.0  # the first try goes at once
    delays = []
    for _ in range(6):
        b.failed()
        delays.append(b.delay())
    assert delays == [0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    b.reset()
    assert b.delay() == 0.0
    half = Backoff(uniform=lambda lo, hi: lo)
    half.failed()
    assert half.delay() == 0.1  # jitter draws from half to all of it


def test_a_handshake_alone_does_not_reset_the_backoff() -> None:
    r = Resume(backoff=Backoff(uniform=top))
    r.connected()
    r.dropped(1011, "boom")
    r.connected()
    r.dropped(1011, "boom")
    assert r.backoff.failures == 2 and r.delay() == 0.4
    r.received({"kind": "event", "seq": 1})
    assert r.delay() == 0.0


def test_markers_once_per_outage() -> None:
    r = Resume()
    assert r.connected() is None  # no outage yet: nothing to say
    first = r.connect_failed("unreachable", "refused")
    assert first == {
        "kind": "disconnected",
        "code": None,
        "error": "unreachable",
        "reason": "refused",
        "last_seq": None,
    }
    assert r.connect_failed("unreachable", "refused") is None  # quiet while retrying
    back = r.connected()
    assert back == {"kind": "reconnected", "since": None, "attempts": 3}
    assert r.reconnects == 1


def test_the_query_resumes_after_the_last_seq_of_its_epoch() -> None:
    r = Resume(session="s", history=50)
    assert r.query() == {"protocol": "2", "history": "50", "session": "s"}
    r.received({"kind": "snapshot", "seq": 4, "epoch": "e1"})
    r.received({"kind": "event", "seq": 5, "epoch": "e1"})
    marker = r.dropped(1006, "abnormal closure")
    assert marker["last_seq"] == 5 and marker["error"] == "dropped"
    # history goes along: the daemon uses it only if it must send a fresh snapshot
    assert r.query() == {
        "protocol": "2",
        "history": "50",
        "since": "5",
        "epoch": "e1",
        "session": "s",
    }


def test_without_an_epoch_only_a_slow_close_keeps_the_place() -> None:
    r = Resume()
    r.received({"kind": "event", "seq": 7})
    r.dropped(SLOW_CLOSE_CODE, "subscriber too slow")
    assert r.query() == {"protocol": "2", "since": "7"}
    r.received({"kind": "event", "seq": 8})
    marker = r.dropped(1006, "gone")
    assert marker["last_seq"] == 8  # the marker says where it was ...
    assert r.query() == {"protocol": "2"}  # ... the next connect asks for a snapshot


def test_a_record_without_seq_or_epoch_moves_nothing() -> None:
    r = Resume(since=3)
    r.received({"kind": "backend", "seq": True, "epoch": 5})  # not an int, not a str
    assert (r.last_seq, r.epoch) == (3, None)
