"""The disk (fs L2) budget: the file layout, the plan (dead chunks only, oldest first, just
enough), and the sweep against a folder laid out as lmcache's fs adapter lays it out."""

from __future__ import annotations

import os
from pathlib import Path

from support.lmcache_mp_server import FakeLMCacheMPServer

from ramakv_daemon.adapters.backends.lmcache_fs_l2 import file_name, parse_name, scan
from ramakv_daemon.adapters.backends.lmcache_mp import LMCacheMPBackend, kv_rank
from ramakv_daemon.core.l2_budget import plan_l2
from ramakv_daemon.sweeps.l2_budget import L2BudgetSweep, deployment_scan

MODEL = "org/model-7b"
RANK = kv_rank(1, 0)


def put(folder: Path, h: str, mtime: float, size: int = 100, model: str = MODEL, **kw) -> Path:
    """One object file as the fs adapter writes it, with a chosen write time."""
    path = folder / file_name(model, kw.get("rank", RANK), h, kw.get("salt", ""))
    path.write_bytes(b"\0" * size)
    os.utime(path, (mtime, mtime))
    return path


def test_names_are_the_adapters_and_reverse() -> None:
    name = file_name("a/b/c", kv_rank(2, 1), "AB12", "s1")
    assert name == "a-SEP-b-SEP-c@0x02010201@0@ab12@s1.data"
    assert parse_name(name) == ("a/b/c", kv_rank(2, 1), 0, "ab12", "s1")
    assert parse_name(file_name("m", 1, "00ff")) == ("m", 1, 0, "00ff", "")
    for junk in ("m@0x1@0@ab12.tmp", "m@0x1@ab12.data", "m@zz@0@ab12.data", "m@1@0@abc.data"):
        assert parse_name(junk) is None


def test_scan_counts_temporary_and_foreign_files(tmp_path: Path) -> None:
    put(tmp_path, "aa", 10.0)
    put(tmp_path, "bb", 11.0, model="other")
    (tmp_path / "x@0x1@0@cc.tmp").write_bytes(b"1")
    (tmp_path / "notes.txt").write_bytes(b"12345")
    (tmp_path / "sub").mkdir()
    mine, others = deployment_scan(tmp_path, MODEL)
    assert [f.chunk_hash for f in mine.files] == ["aa"]
    assert [f.chunk_hash for f in others.files] == ["bb"]
    assert (mine.temporary, mine.other, mine.other_bytes) == (1, 2, 5)
    assert scan(tmp_path).bytes == 200


def test_plan_deletes_dead_oldest_first_just_enough(tmp_path: Path) -> None:
    for i, h in enumerate(["d1", "e1", "d2", "d3"]):
        put(tmp_path, h, 100.0 + i)
    put(tmp_path, "d1", 100.0, rank=kv_rank(2, 1))  # a second rank of d1: one chunk, 200 B
    files = scan(tmp_path).files
    referenced = {"e1"}.__contains__
    plan = plan_l2(files, referenced, budget=300)
    assert (plan.bytes, plan.chunks, plan.dead_chunks, plan.referenced_bytes) == (500, 4, 3, 100)
    assert [c.chunk_hash for c in plan.delete] == ["d1"]  # oldest, and 500-200 fits 300
    assert plan.bytes_after == 300 and plan.over and not plan.still_over
    assert plan_l2(files, referenced, budget=0).delete == []  # no budget: nothing
    assert plan_l2(files, referenced, budget=500).delete == []  # within it: nothing


def test_referenced_chunks_are_never_deleted_even_over_budget(tmp_path: Path) -> None:
    put(tmp_path, "e1", 1.0)
    put(tmp_path, "d1", 2.0)
    plan = plan_l2(scan(tmp_path).files, {"e1"}.__contains__, budget=50)
    assert [c.chunk_hash for c in plan.delete] == ["d1"]
    assert plan.still_over and plan.bytes_after == 100


def test_last_use_orders_dead_chunks_and_cleanup_takes_all(tmp_path: Path) -> None:
    put(tmp_path, "0dd0", 1.0)
    put(tmp_path, "0eee", 2.0)
    files = scan(tmp_path).files
    # "0dd0" (old) was written first but referenced later: it is the younger of the two.
    plan = plan_l2(files, lambda h: False, 150, last_used={"0dd0": 5.0}.get)
    assert [c.chunk_hash for c in plan.delete] == ["0eee"]
    every = plan_l2(files, lambda h: False, 0, all_dead=True)
    assert [c.chunk_hash for c in every.delete] == ["0dd0", "0eee"]
    assert [
        c.chunk_hash for c in plan_l2(files, lambda h: False, 0, all_dead=True, before=2.0).delete
    ] == ["0dd0"]


async def test_sweep_deletes_through_the_server_and_the_folder(tmp_path: Path) -> None:
    """The stand-in's delete unlinks its keys' files; a file of another rank the server
    does not delete for this deployment is removed from the folder; a chunk named again
    between the plan and the delete is kept."""
    async with FakeLMCacheMPServer(l2_dir=tmp_path) as server:
        backend = LMCacheMPBackend(server.url, MODEL)
        await backend.start()
        for i, h in enumerate(["d1", "d2", "e1", "d3"]):
            put(tmp_path, h, 100.0 + i)
            server.l2.add((h, MODEL, RANK, 0, ""))
        put(tmp_path, "d2", 101.0, rank=kv_rank(2, 1))
        put(tmp_path, "ff", 1.0, model="other")  # another model's: never this budget's
        named = {"e1"}
        sweep = L2BudgetSweep(str(tmp_path), MODEL, 100, 60.0, named.__contains__, backend)
        result = await sweep.sweep()
        assert [c.chunk_hash for c in result.plan.delete] == ["d1", "d2", "d3"]
        assert result.deleted.chunks == 3 and result.deleted.files == 4
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left == sorted([file_name("other", RANK, "ff"), file_name(MODEL, RANK, "e1")])
        deletes = [b for m, p, b in server.requests if m == "DELETE" and b["keys"]]
        assert [k["chunk_hash_hex"] for k in deletes[0]["keys"]] == ["d1", "d2", "d3"]
        assert deletes[0]["tier"] == "all"
        await backend.close()


async def test_sweep_keeps_what_is_named_again_and_works_without_a_server(tmp_path: Path) -> None:
    put(tmp_path, "d1", 1.0)
    put(tmp_path, "d2", 2.0)
    asked: dict[str, int] = {}

    def referenced(h: str) -> bool:
        # d1 is named again once the plan is made: the delete asks again and keeps it.
        asked[h] = asked.get(h, 0) + 1
        return h == "d1" and asked[h] > 1

    sweep = L2BudgetSweep(str(tmp_path), MODEL, 1, 60.0, referenced, None)
    result = await sweep.sweep()
    assert result.deleted.skipped_referenced == 1 and result.deleted.chunks == 1
    assert [p.name for p in tmp_path.iterdir()] == [file_name(MODEL, RANK, "d1")]
    assert not L2BudgetSweep(str(tmp_path), MODEL, 0, 60.0, referenced, None).on


async def test_the_daemon_keeps_what_sessions_and_forks_name(tmp_path: Path) -> None:
    """Wired by the daemon: a live map, a suspended session's stored map, an open fork and
    a prefix two sessions shared within retain_unreferenced_s keep their chunks on disk
    over budget; a closed session's private chunk is deleted, after older dead ones."""
    from support.ns_rig import Rig

    from ramakv_daemon.config import Config

    l2 = tmp_path / "l2"
    l2.mkdir()
    cfg = Config(
        session_store_path=str(tmp_path / "s.db"),
        backend="lmcache_mp",
        model_name=MODEL,
        lmcache_mp_l2_path=str(l2),
        l2_budget_bytes=1,
        idle_suspend_s=0,
        idle_close_s=0,
    )
    async with Rig(cfg) as r:
        (sweep,) = r.svc.l2_budgets
        assert sweep.backend is None  # the rig steers no server
        await sweep.close()  # its loop stopped: only the passes below run
        await r.turn_end("live", ["a1"])
        await r.turn_end("parked", ["b1"])
        await r.ev("session_suspend", session_id="parked")
        await r.turn_end("forked", ["c1"])
        await r.ev("session_fork", session_id="forked")
        await r.turn_end("forked", ["c2"])  # the map moves on: the fork still holds c1
        await r.turn_end("closed", ["d1"])
        # an inferred close only orders d1 cold: the evidence stamps its last reference
        await r.ev("session_close", session_id="closed", inferred=True)
        for sid in ("x", "y"):  # both hold 5e at once: a shared prefix
            await r.turn_end(sid, ["5e"])
        for sid in ("x", "y"):
            await r.ev("session_close", session_id=sid)
        for i, h in enumerate(["a1", "b1", "c1", "c2", "d1", "d2", "5e"]):
            put(l2, h, 100.0 + i)
        await sweep.sweep()
        left = {p.name for p in l2.iterdir()}
        assert left == {file_name(MODEL, RANK, h) for h in ("a1", "b1", "c1", "c2", "5e")}
        assert sweep.last is not None and sweep.last.plan.still_over
        # d1's file is older, but it was referenced until its close (the evidence): d2 first
        assert [c.chunk_hash for c in sweep.last.plan.delete] == ["d2", "d1"]


def test_no_sweep_without_a_budget(tmp_path: Path) -> None:
    from ramakv_daemon.bootstrap import build
    from ramakv_daemon.config import Config

    cfg = Config(session_store_path=str(tmp_path / "s.db"), lmcache_mp_l2_path=str(tmp_path))
    assert build(cfg).l2_budgets == []


async def test_a_budget_per_deployment_folder(tmp_path: Path) -> None:
    """Each deployment with its own folder gets its own sweep and budget, judged by its own
    namespace's sessions: a chunk named in one deployment is dead in the other's folder."""
    from support.ns_rig import Rig, ident

    from ramakv_daemon.config import from_mapping

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    deps = [
        {"name": "qa", **ident(), "lmcache_mp_l2_path": str(a)},
        {"name": "qb", **ident(model_id="other/m"), "lmcache_mp_l2_path": str(b)},
    ]
    raw = {
        "session_store_path": str(tmp_path / "s.db"),
        "model_name": MODEL,
        "l2_budget_bytes": 1,
        "idle_suspend_s": 0,
        "idle_close_s": 0,
        "deployments": deps,
    }
    cfg, warnings = from_mapping(raw)
    assert warnings == []
    async with Rig(cfg) as r:
        assert sorted(s.path for s in r.svc.l2_budgets) == [str(a), str(b)]
        for sweep in r.svc.l2_budgets:
            await sweep.close()
        await r.turn_end("s", ["a1"], namespace="qa")
        for folder in (a, b):
            put(folder, "a1", 1.0)
        for sweep in r.svc.l2_budgets:
            await sweep.sweep()
        assert [p.name for p in a.iterdir()] == [file_name(MODEL, RANK, "a1")]
        assert list(b.iterdir()) == []
    deps[1]["l2_budget_bytes"] = 0  # its own: no budget there
    cfg, _ = from_mapping(raw)
    from ramakv_daemon.bootstrap import build

    assert [s.path for s in build(cfg).l2_budgets] == [str(a)]


async def test_a_fresh_chunk_has_its_grace(tmp_path: Path) -> None:
    """A chunk written within grace_s may belong to a turn whose turn_end has not named it
    yet: kept, even over budget."""
    put(tmp_path, "d1", 1000.0)
    put(tmp_path, "d2", 1990.0)
    sweep = L2BudgetSweep(
        str(tmp_path), MODEL, 1, 60.0, lambda h: False, None, grace_s=60.0, clock=lambda: 2000.0
    )
    result = await sweep.sweep()
    assert [c.chunk_hash for c in result.plan.delete] == ["d1"]
    assert [p.name for p in tmp_path.iterdir()] == [file_name(MODEL, RANK, "d2")]
