"""shared_count is current at every seq: deltas, shared_changed, list_sessions and a fresh
snapshot agree with a model, on a real daemon process over a real websocket."""

from __future__ import annotations

from typing import Any

import aiohttp
from support.trace_wire import apply_record, recv


class Model:
    """Maps, suspension and open forks as the test sent them; shared_count from them."""

    def __init__(self) -> None:
        self.maps: dict[str, list[str]] = {}
        self.suspended: set[str] = set()
        self.forks: dict[int, tuple[str, set[str]]] = {}

    def own(self, sid: str, h: str) -> int:
        held = int(sid not in self.suspended and h in self.maps[sid])
        return held + sum(1 for s, hs in self.forks.values() if s == sid and h in hs)

    def total(self, h: str) -> int:
        maps = sum(1 for sid, m in self.maps.items() if sid not in self.suspended and h in m)
        return maps + sum(1 for _, hs in self.forks.values() if h in hs)

    def shared(self) -> dict[str, int]:
        return {
            sid: sum(1 for h in set(m) if self.total(h) > self.own(sid, h))
            for sid, m in self.maps.items()
        }


async def post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(f"{url}/event", json=body) as resp:
        answer = await resp.json()
    assert answer["ok"], answer
    return answer["data"]


async def test_every_seq_agrees_with_the_model(daemon_proc: Any) -> None:
    url = daemon_proc.url
    model = Model()

    def turn_end(sid: str, hashes: list[str]) -> dict[str, Any]:
        return {
            "type": "turn_end",
            "session_id": sid,
            "kv_transfer_params": {"chunk_hashes": hashes},
        }

    def applied(body: dict[str, Any], data: dict[str, Any]) -> None:
        """The model after ``body`` (answered ``data``)."""
        sid = body["session_id"]
        if body["type"] == "turn_end":
            model.maps[sid] = body["kv_transfer_params"]["chunk_hashes"]
            model.suspended.discard(sid)
        elif body["type"] == "session_suspend":
            model.suspended.add(sid)
        elif body["type"] == "snapshot_restore":
            model.suspended.discard(sid)
        elif body["type"] == "session_fork":
            model.forks[data["fork_id"]] = (sid, set(model.maps[sid]))
        elif body["type"] == "session_fork_end":
            del model.forks[body["fork_id"]]
        elif body["type"] == "session_close":
            del model.maps[sid]

    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(f"{url.replace('http', 'ws')}/trace?protocol=2") as ws:
            state: dict[str, Any] = {}
            apply_record(state, await recv(ws))
            assert state["sessions"] == {}

            async def fold_to(seq: int) -> list[dict[str, Any]]:
                recs = []
                while state["seq"] < seq:
                    rec = await recv(ws)
                    apply_record(state, rec)
                    recs.append(rec)
                return recs

            async def listed() -> tuple[dict[str, int], int]:
                rows = (await post(http, url, {"type": "list_sessions"}))["sessions"]
                # the list_sessions record follows its answer: its seq is the next one
                rec = (await fold_to(state["seq"] + 1))[-1]
                assert rec["type"] == "list_sessions"
                return {r["session_id"]: r["shared_count"] for r in rows}, rec["seq"]

            async def step(body: dict[str, Any]) -> dict[str, Any]:
                before = model.shared()
                data = await post(http, url, body)
                applied(body, data)
                recs = await fold_to(state["seq"] + 1)
                rec = recs[-1]
                assert rec["type"] == body["type"] and rec["ok"]
                want = model.shared()
                delta = rec["delta"]
                for sid, summary in delta["sessions"].items():
                    if summary is not None:
                        assert summary["shared_count"] == want[sid], (body, sid)
                moved = {
                    sid
                    for sid in want
                    if sid in before and want[sid] != before[sid] and sid not in delta["sessions"]
                }
                # Sessions the record does not list but whose value moved: it says so.
                assert not moved or delta.get("shared_changed") is True, (body, moved)
                if delta.get("shared_changed"):
                    # What a reader does with the flag: re-read the values it shows.
                    rows = (
                        await post(
                            http,
                            url,
                            {"type": "list_sessions", "session_ids": sorted(state["sessions"])},
                        )
                    )["sessions"]
                    await fold_to(state["seq"] + 1)
                    for r in rows:
                        state["sessions"][r["session_id"]]["shared_count"] = r["shared_count"]
                folded = {sid: s["shared_count"] for sid, s in state["sessions"].items()}
                assert folded == want, body
                values, _ = await listed()
                assert values == want, body
                async with http.ws_connect(
                    f"{url.replace('http', 'ws')}/trace?protocol=2"
                ) as fresh_ws:
                    fresh = await recv(fresh_ws)
                assert {sid: s["shared_count"] for sid, s in fresh["sessions"].items()} == want
                return data

            # agent-1 first: nobody shares its sys chunk; then 11 more take it.
            await step(turn_end("agent-1", ["sys", "a1", "a2"]))
            for i in range(2, 13):
                await step(turn_end(f"agent-{i}", ["sys", f"p{i}"]))
            # A pair sharing a private chunk (1 -> 2, agent-3 not in the record)...
            await step(turn_end("agent-4", ["sys", "p4", "p3"]))
            # ...and back (2 -> 1).
            await step(turn_end("agent-4", ["sys", "p4"]))
            # own 0: a suspended map lists a chunk another session then takes.
            await step({"type": "session_suspend", "session_id": "agent-5"})
            await step(turn_end("agent-6", ["sys", "p6", "p5"]))
            await step({"type": "snapshot_restore", "session_id": "agent-5"})
            # own 2: agent-1 forks; agent-2 then takes a1 (count 2 -> 3).
            fork = await step({"type": "session_fork", "session_id": "agent-1"})
            await step(turn_end("agent-2", ["sys", "p2", "a1"]))
            await step(
                {"type": "session_fork_end", "session_id": "agent-1", "fork_id": fork["fork_id"]}
            )
            # Everyone but agent-1 leaves the sys chunk.
            for i in range(2, 13):
                await step({"type": "session_close", "session_id": f"agent-{i}"})
            assert state["sessions"]["agent-1"]["shared_count"] == 0


def test_list_sessions_session_ids_filters_and_refuses_bad_lists(daemon_proc: Any) -> None:
    for sid in ("a", "b", "c"):
        daemon_proc.post(
            {"type": "turn_end", "session_id": sid, "kv_transfer_params": {"chunk_hashes": ["s"]}}
        )
    data = daemon_proc.event("list_sessions", session_ids=["c", "a", "nobody"])["data"]
    assert data["total"] == 2
    assert [(r["session_id"], r["shared_count"]) for r in data["sessions"]] == [("a", 1), ("c", 1)]
    for bad, error in (
        ("a", "'session_ids' must be a list of strings"),
        (["a", 1], "'session_ids' must be a list of strings"),
        ([f"s{i}" for i in range(10001)], "'session_ids' has 10001 ids, more than 10000"),
    ):
        answer = daemon_proc.event("list_sessions", session_ids=bad)
        assert answer == {"ok": False, "type": "list_sessions", "error": error}
