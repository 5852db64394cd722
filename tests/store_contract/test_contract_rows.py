"""Store contract: what the loads return are named rows, with modes as EvictMode."""

from __future__ import annotations

from support.store_adapters import StoreHome

from ramakv_daemon.core.fork import Fork
from ramakv_daemon.ports import (
    AnswerRow,
    EvictMode,
    LoadedForks,
    OutboxEntry,
    OutboxRow,
    StoredAnswer,
    WriteBatch,
)


async def test_loads_return_named_rows(home: StoreHome) -> None:
    store = await home.opened()
    fork = Fork(3, "s", ("a",), 1.0)
    await store.write(
        WriteBatch(
            {},
            # a named entry, or a plain pair of its shape (as the committer zips them)
            outbox_add=[
                OutboxRow(7, "ns", (OutboxEntry("a", EvictMode.DEMOTE), ("b", EvictMode.DELETE)))
            ],
            event_ids=[AnswerRow("e", '{"ok": true}', 1.0, "dig")],
            forks={3: fork},
            next_fork_id=4,
        )
    )
    await store.close()
    store = await home.opened()
    (row,) = await store.load_outbox()
    assert isinstance(row, OutboxRow) and (row.row_id, row.namespace) == (7, "ns")
    assert row.entries == (OutboxEntry("a", EvictMode.DEMOTE), OutboxEntry("b", EvictMode.DELETE))
    assert all(isinstance(e, OutboxEntry) and type(e.mode) is EvictMode for e in row.entries)
    (answer,) = await store.load_event_ids(10)
    assert answer == StoredAnswer("e", '{"ok": true}', "dig") and answer.request_digest == "dig"
    loaded = await store.load_forks()
    assert isinstance(loaded, LoadedForks) and loaded == LoadedForks([fork], 4)
    forks, next_id = loaded  # callers may still unpack
    assert (forks, next_id) == ([fork], 4)
