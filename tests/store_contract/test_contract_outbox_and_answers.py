"""Store contract: the eviction outbox and the remembered idempotency answers."""

from __future__ import annotations

from support.store_adapters import StoreHome

from ramakv_daemon.ports import AnswerRow, EvictMode, OutboxRow, SessionStore, WriteBatch


async def test_outbox_rows_round_trip_in_commit_order(home: StoreHome) -> None:
    store = await home.opened()
    await store.write(
        WriteBatch(
            {}, outbox_add=[OutboxRow(2, "", (("a", EvictMode.DELETE), ("b", EvictMode.DEMOTE)))]
        )
    )
    await store.write(
        WriteBatch(
            {}, outbox_add=[OutboxRow(5, "ns", (("c", EvictMode.DELETE),)), OutboxRow(3, "", ())]
        )
    )
    expected = [
        (2, "", (("a", "delete"), ("b", "demote"))),
        (3, "", ()),
        (5, "ns", (("c", "delete"),)),
    ]
    assert await store.load_outbox() == expected
    await store.close()
    assert await (await home.opened()).load_outbox() == expected


async def test_done_rows_leave_the_outbox(store: SessionStore) -> None:
    await store.write(
        WriteBatch(
            {},
            outbox_add=[
                OutboxRow(1, "", (("a", EvictMode.DELETE),)),
                OutboxRow(2, "", (("b", EvictMode.DELETE),)),
            ],
        )
    )
    await store.write(WriteBatch({}, outbox_done=[1, 99]))  # an unknown id is harmless
    assert await store.load_outbox() == [(2, "", (("b", "delete"),))]


async def test_a_row_added_and_done_in_one_write_is_gone(store: SessionStore) -> None:
    await store.write(
        WriteBatch({}, outbox_add=[OutboxRow(1, "", (("a", EvictMode.DELETE),))], outbox_done=[1])
    )
    assert await store.load_outbox() == []


async def test_answers_round_trip_newest_kept_oldest_first(home: StoreHome) -> None:
    store = await home.opened()
    await store.write(
        WriteBatch(
            {},
            event_ids=[
                AnswerRow("e1", '{"ok": true, "n": 1}', 1.0, "d1"),
                AnswerRow("e2", '{"ok": true, "n": 2}', 2.0, "d2"),
            ],
        )
    )
    await store.write(WriteBatch({}, event_ids=[AnswerRow("e3", '{"ok": false}', 3.0, "")]))
    assert await store.load_event_ids(10) == [
        ("e1", '{"ok": true, "n": 1}', "d1"),
        ("e2", '{"ok": true, "n": 2}', "d2"),
        ("e3", '{"ok": false}', ""),
    ]
    assert await store.load_event_ids(2) == [
        ("e2", '{"ok": true, "n": 2}', "d2"),
        ("e3", '{"ok": false}', ""),
    ]
    await store.close()
    assert len(await (await home.opened()).load_event_ids(10)) == 3


async def test_an_answer_written_again_replaces_the_old_one(store: SessionStore) -> None:
    await store.write(WriteBatch({}, event_ids=[AnswerRow("e", '{"n": 1}', 1.0, "first")]))
    await store.write(WriteBatch({}, event_ids=[AnswerRow("e", '{"n": 2}', 2.0, "second")]))
    assert await store.load_event_ids(10) == [("e", '{"n": 2}', "second")]


async def test_pruning_forgets_answers_older_than_the_cut(store: SessionStore) -> None:
    await store.write(
        WriteBatch(
            {},
            event_ids=[
                AnswerRow("old", "{}", 1.0, ""),
                AnswerRow("cut", "{}", 5.0, ""),
                AnswerRow("new", "{}", 9.0, ""),
            ],
        )
    )
    await store.write(WriteBatch({}, prune_event_ids_before=5.0))
    assert [e[0] for e in await store.load_event_ids(10)] == ["cut", "new"]


async def test_answers_written_and_pruned_in_one_write(store: SessionStore) -> None:
    """The committer writes this commit's answers and prunes old ones together."""
    await store.write(WriteBatch({}, event_ids=[AnswerRow("old", "{}", 1.0, "")]))
    await store.write(
        WriteBatch({}, event_ids=[AnswerRow("new", "{}", 10.0, "")], prune_event_ids_before=5.0)
    )
    assert [e[0] for e in await store.load_event_ids(10)] == ["new"]
