"""Namespaces in the daemon: per-namespace refcounts, routing, persistence, migration."""

from __future__ import annotations

import sqlite3

from support.ns_rig import Rig, config, ident

from ramakv_daemon.adapters.backends.lmcache import LMCacheBackend
from ramakv_daemon.adapters.sqlite.store import outbox_view
from ramakv_daemon.core.identity import namespace_of

NS_A = namespace_of(ident())
NS_B = namespace_of(ident(model_id="meta-llama/Llama-3.1-8B", tokenizer_name="llama"))


def two_deployments(tmp_path, fa, fb, **top):
    return config(
        tmp_path,
        [
            {"name": "qwen", **ident(), "lmcache_url": fa.url},
            {
                "name": "llama",
                **ident(model_id="meta-llama/Llama-3.1-8B", tokenizer_name="llama"),
                "lmcache_url": fb.url,
            },
        ],
        **top,
    )


def evicted(fake) -> list[str]:
    return [h for body in fake.calls("evict") for h in body["chunk_hashes"]]


def prefetched(fake) -> list[str]:
    return [h for body in fake.calls("prefetch") for h in body["chunk_hashes"]]


async def test_same_hash_in_two_namespaces_is_two_chunks(tmp_path, two_fakes) -> None:
    fa, fb = two_fakes
    default = LMCacheBackend("http://127.0.0.1:9")  # must never be called
    async with Rig(two_deployments(tmp_path, fa, fb), default) as r:
        await r.turn_end("a1", ["0a01", "0a02"], namespace="qwen")
        await r.turn_end("b1", ["0a01", "0a03"], namespace=NS_B)
        mgr = r.svc.namespaces.managers
        assert mgr[NS_A].refcounts.as_dict() == {"0a01": 1, "0a02": 1}
        assert mgr[NS_B].refcounts.as_dict() == {"0a01": 1, "0a03": 1}
        assert await r.ev("session_close", session_id="a1") == {"evicted_count": 2, "closed": True}
        await r.settle()
        assert sorted(evicted(fa)) == ["0a01", "0a02"] and evicted(fb) == []
        assert mgr[NS_B].refcounts.as_dict() == {"0a01": 1, "0a03": 1}
        await r.ev("turn_start", session_id="b1")  # no namespace: the session's own
        await r.settle()
        assert prefetched(fb) == ["0a01", "0a03"] and prefetched(fa) == []
        assert r.svc.default.manager is mgr[""]  # several deployments: the default stays unnamed
        assert r.svc.default.manager.refcounts.as_dict() == {}


async def test_session_in_another_namespace_is_an_error_naming_both(tmp_path, two_fakes) -> None:
    fa, fb = two_fakes
    async with Rig(two_deployments(tmp_path, fa, fb)) as r:
        await r.turn_end("s", ["0a01"], namespace="qwen")
        err = await r.err(
            "turn_end",
            session_id="s",
            namespace="llama",
            kv_transfer_params={"chunk_hashes": ["x"]},
        )
        assert NS_A in err and NS_B in err and "'s'" in err
        err = await r.err(
            "snapshot_restore", session_id="t", source_session_id="s", namespace="llama"
        )
        assert NS_A in err and NS_B in err
        assert await r.err("health", namespace="nope") == "unknown namespace 'nope'"
        assert await r.err("health", namespace=3) == "'namespace' must be a string"
        assert r.svc.namespaces.managers[NS_B].sessions == {}
        # list_sessions rows show the namespace; list_namespaces describes each one.
        rows = (await r.ev("list_sessions"))["sessions"]
        assert rows[0]["namespace"] == NS_A
        assert (await r.ev("list_sessions", namespace="llama"))["total"] == 0
        info = {row["deployment"]: row for row in (await r.ev("list_namespaces"))["namespaces"]}
        assert info["qwen"]["sessions"] == {"active": 1, "suspended": 0}
        assert info["qwen"]["steered"] and info[None]["namespace"] == ""
        assert (await r.ev("health"))["sessions_count"] == 1


async def test_single_deployment_is_the_default_and_nine_events_keep_shape(
    tmp_path, two_fakes
) -> None:
    fa, _ = two_fakes
    cfg = config(
        tmp_path,
        [{"name": "qwen", **ident(), "lmcache_url": fa.url}],
        evict_locations=["LocalCPUBackend", "LocalDiskBackend"],
    )
    async with Rig(cfg) as r:
        assert r.svc.namespaces.default == NS_A and r.svc.default.manager.namespace == NS_A
        assert await r.turn_end("s", ["0a01", "0a02"]) == {
            "evicted_count": 0,
            "map_updated": True,
            "debug_written": False,
        }
        assert await r.ev("turn_start", session_id="s") == {
            "prefetch_sent": True,
            "prefetch_count": 2,
        }
        assert await r.turn_end("s", ["0a02"]) == {
            "evicted_count": 1,
            "map_updated": True,
            "debug_written": False,
        }
        await r.settle()
        assert [{k: b[k] for k in ("chunk_hashes", "locations")} for b in fa.calls("evict")] == [
            {"chunk_hashes": ["0a01"], "locations": ["LocalCPUBackend", "LocalDiskBackend"]}
        ]
        assert r.svc.default.manager.sessions["s"].namespace == NS_A


async def test_unresolved_deployment_records_but_steers_nothing(
    tmp_path, two_fakes, caplog
) -> None:
    fa, _ = two_fakes
    cfg = config(tmp_path, [{"name": "half", **ident(kv_dtype="auto"), "lmcache_url": fa.url}])
    async with Rig(cfg) as r:
        assert "NO prefetch or evict is sent" in caplog.text and "kv_dtype" in caplog.text
        assert caplog.text.count("has no valid identity") == 1
        await r.turn_end("s", ["0a01"])
        await r.ev("turn_start", session_id="s")
        await r.ev("session_close", session_id="s")
        await r.settle()
        assert fa.requests == []
        assert r.svc.namespaces.default == "unresolved:half"
        info = (await r.ev("list_namespaces"))["namespaces"]
        assert [row["steered"] for row in info if row["deployment"] == "half"] == [False]


async def test_namespace_survives_restart_with_its_outbox(tmp_path, two_fakes) -> None:
    fa, fb = two_fakes
    cfg = two_deployments(tmp_path, fa, fb)
    await fb.refuse()
    async with Rig(cfg) as r:
        await r.turn_end("a", ["0a01"], namespace="qwen")
        await r.turn_end("b", ["0a01", "0a02"], namespace="llama")
        await r.ev("session_close", session_id="b")  # llama's backend is down
        await r.ev("session_suspend", session_id="a")
    db = sqlite3.connect(cfg.session_store_path)
    assert set(db.execute("SELECT session_id, namespace FROM session_state")) == {("a", NS_A)}
    assert sorted((ns, h, m) for (ns, h), m in outbox_view(db).items()) == [
        (NS_B, "0a01", "delete"),
        (NS_B, "0a02", "delete"),
    ]
    db.close()
    await fb.accept()
    async with Rig(cfg) as r:
        assert r.svc.namespaces.managers[NS_A].sessions["a"].suspended
        assert r.svc.namespaces[NS_B].dispatcher.backlog == 2
        await r.settle()
        assert sorted(evicted(fb)) == ["0a01", "0a02"]
        await r.ev("snapshot_restore", session_id="a")
        await r.settle()
        assert prefetched(fa) == ["0a01"]


async def test_old_database_migrates_and_keeps_its_data(tmp_path) -> None:
    path = tmp_path / "sessions.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE sessions (session_id TEXT PRIMARY KEY, map_json TEXT NOT NULL,
                               turn_count INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE session_state (session_id TEXT PRIMARY KEY,
            suspended INTEGER NOT NULL DEFAULT 0, fork_holds_json TEXT NOT NULL DEFAULT '[]',
            last_event_ts REAL NOT NULL DEFAULT 0);
        INSERT INTO sessions VALUES ('old', '["0a01","0a02"]', 3);
        INSERT INTO session_state VALUES ('old', 0, '[]', 5.0);
    """)
    db.commit()
    db.close()
    cfg = config(tmp_path, [{"name": "qwen", **ident()}])
    async with Rig(cfg) as r:
        # The old session stays in the unnamed namespace; events without one still reach it.
        assert r.svc.namespaces.managers[""].sessions["old"].turn_count == 3
        assert await r.ev("session_map", session_id="old") == {
            "session_id": "old",
            "chunk_hashes": ["0a01", "0a02"],
        }
        await r.turn_end("old", ["0a01"])
        await r.turn_end("new", ["0a01"])
        assert r.svc.namespaces.managers[NS_A].refcounts.as_dict() == {"0a01": 1}
        assert r.svc.namespaces.managers[""].refcounts.as_dict() == {"0a01": 1}
    db = sqlite3.connect(path)
    assert sorted(db.execute("SELECT session_id, namespace FROM session_state")) == [
        ("new", NS_A),
        ("old", ""),
    ]
    assert sorted(db.execute("SELECT * FROM sessions")) == [
        ("new", '["0a01"]', 1),
        ("old", '["0a01"]', 4),
    ]
    db.close()


async def test_unconfigured_namespace_from_the_database_is_kept_not_sent(tmp_path, two_fakes):
    fa, fb = two_fakes
    async with Rig(two_deployments(tmp_path, fa, fb)) as r:
        await r.turn_end("b", ["0a01"], namespace="llama")
    cfg = config(tmp_path, [{"name": "qwen", **ident(), "lmcache_url": fa.url}])
    async with Rig(cfg) as r:
        # Still there, closable, but nothing is sent and its outbox is kept.
        assert await r.ev("session_close", session_id="b") == {"evicted_count": 1, "closed": True}
        await r.settle()
        # (The configured namespace's start-up keep probe names no chunk.)
        assert [x for x in fa.requests + fb.requests if (x.body or {}).get("chunk_hashes")] == []
        assert r.svc.namespaces[NS_B].dispatcher.backlog == 1
        rows = {row["namespace"]: row for row in (await r.ev("list_namespaces"))["namespaces"]}
        assert rows[NS_B]["configured"] is False and rows[NS_B]["steered"] is False
