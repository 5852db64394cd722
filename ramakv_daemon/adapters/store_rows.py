"""Reading stored rows: sessions as the daemon loads them, and the outbox in any format."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.packed import PackedMap, pack_for_store, packed_from_store, store_bytes
from ramakv_daemon.core.session import ChunkMap, Session, share_prefix
from ramakv_daemon.ports import OutboxEntry, OutboxRow, mode_of

if TYPE_CHECKING:
    from ramakv_daemon.admin_port import PendingEviction

log = logging.getLogger("ramakv.store")


def outbox_view(con: sqlite3.Connection) -> dict[tuple[str, str], str]:
    """(namespace, hash) -> mode of every eviction still on disk, in any of the formats.

    For tools and tests; a row kept for one waiting entry may list delivered ones too
    (delivering those again is harmless: they are re-checked against the refcounts).
    """
    out: dict[tuple[str, str], str] = {}
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "evict_outbox" in tables:
        rows = con.execute("SELECT chunk_hash, mode FROM evict_outbox")
        out.update({("", h): m for h, m in rows})
    if "ns_evict_outbox" in tables:
        out.update(
            {
                (ns, h): m
                for ns, h, m in con.execute(
                    "SELECT namespace, chunk_hash, mode FROM ns_evict_outbox"
                )
            }
        )
    if "evict_log" in tables:
        for ns, entries in con.execute("SELECT namespace, entries_json FROM evict_log ORDER BY id"):
            out.update({(ns, h): m for h, m in json.loads(entries)})
    return out


def pending_evictions(con: sqlite3.Connection) -> list[PendingEviction]:
    """:func:`outbox_view` as rows, in (namespace, hash) order; unknown modes left out."""
    # Here, not at the top: the daemon's start-up reads rows with this module, and only
    # ramakv-admin needs the admin port's types (1.5 ms of imports).
    from ramakv_daemon.admin_port import PendingEviction

    out: list[PendingEviction] = []
    for (ns, h), m in sorted(outbox_view(con).items()):
        mode = mode_of(m)
        if mode is not None:
            out.append(PendingEviction(ns, h, mode))
    return out


def _pair(value: object) -> tuple[str, str]:
    if isinstance(value, OutboxEntry):  # orjson writes no tuple subclass by itself
        return (value.chunk_hash, value.mode.value)
    raise TypeError(f"not an outbox entry: {value!r}")


def dump_entries(entries: Sequence[tuple[str, str]]) -> str:
    """An outbox row's entries as stored: ``[[hash, mode], ...]`` (a tuple of plain pairs
    is written as a list, in C; a named entry goes through ``_pair``)."""
    listed = entries if type(entries) in (list, tuple) else list(entries)
    return orjson.dumps(listed, default=_pair).decode()


def decode_outbox_row(row_id: Any, ns: str | None, entries_json: str) -> OutboxRow | None:
    """A stored evict_log row; None (logged) when its JSON is not a list of pairs. An entry
    of an unknown mode is left out (logged): the rest of its row still waits."""
    try:
        loaded = loads_json(entries_json)
        if not isinstance(loaded, list):
            raise TypeError("entries_json is not a list of [hash, mode] pairs")
        pairs = [(str(h), str(m)) for h, m in loaded]
    except (ValueError, TypeError) as err:
        log.warning("skipping corrupt outbox row %s: %s", row_id, err)
        return None
    entries: list[OutboxEntry] = []
    for h, m in pairs:
        mode = mode_of(m)
        if mode is None:
            log.warning("outbox row %s: skipping %s of unknown mode %r", row_id, h, m)
        else:
            entries.append(OutboxEntry(h, mode))
    return OutboxRow(int(row_id), ns or "", tuple(entries))


def loads_json(text: str) -> object:
    """orjson, falling back to json for what only the standard decoder takes (files
    written by other tools may hold lone surrogate escapes or NaN)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def decode_sessions(
    rows: Iterable[Sequence[Any]],
    anchors: dict[str, tuple[str, ...]] | None = None,
    packed_from_json: list[Session] | None = None,
) -> list[Session]:
    """Stored rows as sessions; rows whose JSON is corrupt are skipped with a warning.

    ``anchors``: kept by the caller across batches of one load; maps sharing a prefix
    then share its strings (core.session.share_prefix). ``packed_from_json``: gets each
    session whose map came as JSON and packed (a store that has no codes for it yet).
    """
    out: list[Session] = []
    decode = loads_json  # start-up decodes every stored map: the fast decoder pays
    for sid, map_json, turn_count, suspended, ts, ns in rows:
        try:
            if isinstance(map_json, bytes):  # the map's stored codes (core.packed)
                if not map_json or len(map_json) % 8:
                    raise ValueError(f"stored codes of {len(map_json)} bytes")
                stored = packed_from_store(map_json)
                out.append(_session(sid, stored, turn_count, suspended, ts, ns))
                continue
            hashes = decode(map_json)
            if not isinstance(hashes, list):
                raise ValueError("map_json is not a list of strings")
            as_tuple = tuple(hashes)
            # str.join raises TypeError on a non-string: one C-level check per list.
            "".join(as_tuple)
            # Held as 8 bytes a hash when every hash is canonical (core.packed); else the
            # strings, and maps that begin alike share their common prefix's strings.
            chunk_hashes: ChunkMap | None = PackedMap.of(as_tuple)
            if chunk_hashes is None:
                chunk_hashes = as_tuple if anchors is None else share_prefix(as_tuple, anchors)
        except (ValueError, TypeError) as err:
            log.warning("skipping stored session %r: %s", sid, err)
            continue
        session = _session(sid, chunk_hashes, turn_count, suspended, ts, ns)
        out.append(session)
        if packed_from_json is not None and isinstance(chunk_hashes, PackedMap):
            packed_from_json.append(session)
    return out


def _session(
    sid: str, chunk_hashes: ChunkMap, turn_count: Any, suspended: Any, ts: Any, ns: Any
) -> Session:
    return Session(
        session_id=sid,
        chunk_hashes=chunk_hashes,
        turn_count=int(turn_count or 0),
        suspended=bool(suspended),
        last_event_ts=float(ts or 0.0),
        namespace=ns or "",
    )


def codes_rows(sessions: Iterable[Session]) -> list[tuple[str, bytes]]:
    """(session_id, stored codes) of each session whose map is packed or packs."""
    out: list[tuple[str, bytes]] = []
    for s in sessions:
        m = s.chunk_hashes
        codes = store_bytes(m) if isinstance(m, PackedMap) else pack_for_store(m)
        if codes is not None:
            out.append((s.session_id, codes))
    return out


def fold_legacy_outbox(con: sqlite3.Connection) -> None:
    """Move per-chunk outbox rows (written by ramakv-admin) into evict_log, atomically."""
    legacy: dict[str, list[tuple[str, str]]] = {}
    for h, m in con.execute("SELECT chunk_hash, mode FROM evict_outbox"):
        legacy.setdefault("", []).append((h, m))
    for ns, h, m in con.execute("SELECT namespace, chunk_hash, mode FROM ns_evict_outbox"):
        legacy.setdefault(ns, []).append((h, m))
    if not legacy:
        return
    con.execute("BEGIN IMMEDIATE")
    try:
        for ns, entries in legacy.items():
            con.execute(
                "INSERT INTO evict_log (namespace, entries_json) VALUES (?, ?)",
                (ns, json.dumps(entries)),
            )
        con.execute("DELETE FROM evict_outbox")
        con.execute("DELETE FROM ns_evict_outbox")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def decode_fork(fid: Any, sid: str, ns: str | None, hashes_json: str, ts: Any) -> Fork | None:
    """A stored fork row as a Fork; None (logged) when its hashes are not a list of strings,
    so one damaged row never stops a start-up."""
    try:
        hashes = loads_json(hashes_json)
        if not isinstance(hashes, list):
            raise ValueError("hashes_json is not a list of strings")
        held = tuple(hashes)
        "".join(held)
    except (ValueError, TypeError) as err:
        log.warning("skipping stored fork %s of session %r: %s", fid, sid, err)
        return None
    return Fork(int(fid), sid, held, float(ts), ns or "")
