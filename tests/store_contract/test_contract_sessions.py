"""Store contract: sessions written, replaced, deleted and read back, across restarts."""

from __future__ import annotations

from support.store_adapters import StoreHome

from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import SessionStore, WriteBatch


def by_id(sessions: list[Session]) -> dict[str, Session]:
    return {s.session_id: s for s in sessions}


async def test_a_fresh_store_is_empty(store: SessionStore) -> None:
    assert await store.load_all() == []
    assert await store.load_forks() == ([], 1)
    assert await store.load_outbox() == []
    assert await store.load_event_ids(100) == []


async def test_every_field_of_a_session_round_trips(home: StoreHome) -> None:
    store = await home.opened()
    s = Session(
        session_id='sess-ü/1 "quoted"',
        chunk_hashes=("h1", "h2", "h1", "ha\u0301sh", "x" * 100),  # repeats kept, in order
        turn_count=2**40,
        suspended=True,
        last_event_ts=1_700_000_000.123456,
        namespace="tenant-a",
    )
    plain = Session("plain")  # defaults: empty map, default namespace
    await store.write(WriteBatch({s.session_id: s, plain.session_id: plain}))
    assert by_id(await store.load_all()) == {s.session_id: s, "plain": plain}
    await store.close()
    again = await home.opened()
    assert by_id(await again.load_all()) == {s.session_id: s, "plain": plain}


async def test_a_write_replaces_the_whole_session(store: SessionStore) -> None:
    await store.write(WriteBatch({"s": Session("s", ("a", "b"), 1, True, 1.0, "ns")}))
    newer = Session("s", ("c",), 2, False, 2.0, "ns")
    await store.write(WriteBatch({"s": newer}))
    assert await store.load_all() == [newer]


async def test_none_deletes_and_deleting_an_absent_session_is_harmless(
    home: StoreHome,
) -> None:
    store = await home.opened()
    await store.write(WriteBatch({"a": Session("a", ("x",)), "b": Session("b", ("y",))}))
    await store.write(WriteBatch({"a": None, "never-stored": None}))
    assert await store.load_all() == [Session("b", ("y",))]
    await store.close()
    assert await (await home.opened()).load_all() == [Session("b", ("y",))]


async def test_a_session_deleted_then_written_again_in_later_commits(
    store: SessionStore,
) -> None:
    await store.write(WriteBatch({"s": Session("s", ("a",), 3)}))
    await store.write(WriteBatch({"s": None}))
    await store.write(WriteBatch({"s": Session("s", ("b",), 1)}))
    assert await store.load_all() == [Session("s", ("b",), 1)]


async def test_sessions_keep_their_namespace(store: SessionStore) -> None:
    rows = {
        "d": Session("d", ("h",)),
        "a1": Session("a1", ("h",), namespace="a"),
        "b1": Session("b1", ("h",), namespace="b"),
    }
    await store.write(WriteBatch(dict(rows)))
    assert by_id(await store.load_all()) == rows


async def test_an_empty_write_is_a_no_op(store: SessionStore) -> None:
    await store.write(WriteBatch({"s": Session("s", ("a",))}))
    await store.write(WriteBatch({}))
    assert await store.load_all() == [Session("s", ("a",))]


async def test_many_sessions_in_one_write(home: StoreHome) -> None:
    store = await home.opened()
    rows = {
        f"s{i}": Session(f"s{i}", tuple(f"h{i}-{j}" for j in range(64)), i, i % 2 == 0, i)
        for i in range(300)
    }
    await store.write(WriteBatch(dict(rows)))
    await store.close()
    assert by_id(await (await home.opened()).load_all()) == rows


async def test_a_store_opened_twice_keeps_what_it_had(home: StoreHome) -> None:
    """open() on existing data migrates nothing away (schema creation is idempotent)."""
    first = await home.opened()
    await first.write(WriteBatch({"s": Session("s", ("a",), 1)}))
    await first.close()
    second = await home.opened()
    await second.close()
    assert await (await home.opened()).load_all() == [Session("s", ("a",), 1)]


async def test_an_open_store_takes_writes_and_a_closed_one_says_why_not(home: StoreHome) -> None:
    store = await home.opened()
    assert store.problem() is None
    await store.close()
    assert store.problem() == "session store is not open"


async def test_a_session_whose_map_is_unchanged_writes_only_its_state(home: StoreHome) -> None:
    """maps_unchanged (a turn_start's time, a suspend): the stored map stays as it was, the
    state is written; a session the store holds no row of gets its map all the same."""
    store = await home.opened()
    await store.write(WriteBatch({"s": Session("s", ("a", "b"), 3, False, 1.0, "ns")}))
    # The caller promises the map is the stored one: a differing map shows it is not written.
    moved = Session("s", ("zzz",), 3, True, 2.0, "ns")
    fresh = Session("new", ("c",), 1, False, 2.0, "ns")
    await store.write(WriteBatch({"s": moved, "new": fresh}, maps_unchanged={"s", "new"}))
    want = {"s": Session("s", ("a", "b"), 3, True, 2.0, "ns"), "new": fresh}
    assert by_id(await store.load_all()) == want
    await store.close()
    assert by_id(await (await home.opened()).load_all()) == want
