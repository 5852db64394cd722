"""Store contract: named rows are stored byte for byte as bare tuples were, and load back."""

from __future__ import annotations

import sqlite3

from support.store_adapters import StoreHome

from ramakv_daemon.ports import AnswerRow, EvictMode, OutboxEntry, OutboxRow, WriteBatch

# What the tuple-built rows stored before the rows were typed (the committer's plain
# pairs, orjson-written); a legacy migration wrote the standard library's spelling.
ENTRIES_JSON = '[["a","demote"],["b","delete"],["c","cold"]]'
LEGACY_JSON = '[["x", "delete"], ["y", "cold"]]'


async def raw(home: StoreHome, query: str) -> list[tuple[object, ...]]:
    if home.adapter == "sqlite":
        con = sqlite3.connect(home.location)
        try:
            rows = list(con.execute(query))
            con.commit()  # an INSERT of an older daemon's row
            return rows
        finally:
            con.close()
    import asyncpg

    pg = await asyncpg.connect(home.location)
    try:
        return [tuple(r) for r in await pg.fetch(query)]
    finally:
        await pg.close()


async def test_rows_are_stored_as_the_tuples_were(home: StoreHome) -> None:
    store = await home.opened()
    entries = (OutboxEntry("a", EvictMode.DEMOTE), ("b", EvictMode.DELETE), ("c", EvictMode.COLD))
    await store.write(
        WriteBatch(
            {},
            outbox_add=[OutboxRow(7, "ns", entries), OutboxRow(8, "", ())],
            event_ids=[AnswerRow("e", '{"ok": true, "type": "turn_end"}', 1.5, "dig")],
        )
    )
    assert await raw(home, "SELECT id, namespace, entries_json FROM evict_log ORDER BY id") == [
        (7, "ns", ENTRIES_JSON),
        (8, "", "[]"),
    ]
    assert await raw(home, "SELECT event_id, response_json, ts, request_digest FROM event_ids") == [
        ("e", '{"ok": true, "type": "turn_end"}', 1.5, "dig")
    ]


async def test_rows_stored_before_load_as_named_rows(home: StoreHome) -> None:
    store = await home.opened()
    await store.write(WriteBatch({}, outbox_add=[OutboxRow(1, "", ())]))
    await store.close()
    owner = ", owner" if home.adapter == "postgresql" else ""
    node = ", 'node-a'" if home.adapter == "postgresql" else ""
    await raw(
        home,
        f"INSERT INTO evict_log (id, namespace, entries_json{owner}) VALUES "
        f"(2, 'ns', '{ENTRIES_JSON}'{node}), (3, '', '{LEGACY_JSON}'{node})",
    )
    (_, ns_row, legacy) = await (await home.opened()).load_outbox()
    assert ns_row == OutboxRow(
        2,
        "ns",
        (
            OutboxEntry("a", EvictMode.DEMOTE),
            OutboxEntry("b", EvictMode.DELETE),
            OutboxEntry("c", EvictMode.COLD),
        ),
    )
    assert legacy == OutboxRow(
        3, "", (OutboxEntry("x", EvictMode.DELETE), OutboxEntry("y", EvictMode.COLD))
    )
    assert all(type(e) is OutboxEntry for row in (ns_row, legacy) for e in row.entries)
