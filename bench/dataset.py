"""Synthetic stored sessions with realistic sharing, written straight into a SQLite file."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

from ramakv_daemon.adapters.sqlite.store import SCHEMA


def chunk_hash(rng: random.Random) -> str:
    """A hash in the engine's format: signed 64-bit, lowercase hex, "-" for negatives."""
    v = rng.getrandbits(64) - (1 << 63)
    return f"-{-v:x}" if v < 0 else f"{v:x}"


def session_maps(n_sessions: int, chunks: int, seed: int = 1) -> list[list[str]]:
    """Maps of ``chunks`` hashes: a 16-chunk system prompt shared by all, and every fourth
    session a fork of an earlier one sharing its first half; the rest private."""
    rng = random.Random(seed)
    system = [chunk_hash(rng) for _ in range(16)]
    maps: list[list[str]] = []
    for i in range(n_sessions):
        own = chunks - len(system)
        if i % 4 == 3 and maps:
            parent = maps[rng.randrange(len(maps))]
            shared = parent[len(system) : len(system) + own // 2]
            body = shared + [chunk_hash(rng) for _ in range(own - len(shared))]
        else:
            body = [chunk_hash(rng) for _ in range(own)]
        maps.append(system + body)
    return maps


def write_store(path: Path, maps: list[list[str]], schema: str = SCHEMA) -> None:
    """Create the daemon's schema (this tree's, or ``schema``) and store every map as an
    active session."""
    con = sqlite3.connect(path)
    try:
        con.executescript(schema)
        con.executemany(
            "INSERT INTO sessions (session_id, map_json, turn_count) VALUES (?, ?, ?)",
            ((f"sess-{i}", json.dumps(m), 3) for i, m in enumerate(maps)),
        )
        con.commit()
    finally:
        con.close()
