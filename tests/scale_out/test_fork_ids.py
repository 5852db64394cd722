"""Two real daemons on one PostgreSQL database forking at once: every fork id unique."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from support.daemon_proc import DaemonProcess
from support.postgres import PostgresServer
from test_handover import check_refcounts_match_owned, two_nodes

FORKS_PER_THREAD = 30  # two threads a node: 60 open forks, under the limit of 64


def _fork_many(d: DaemonProcess, session_id: str) -> list[dict]:
    return [d.event("session_fork", session_id=session_id) for _ in range(FORKS_PER_THREAD)]


async def test_two_daemons_forking_at_once_never_hand_out_one_id_twice(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
) -> None:
    a, b = two_nodes(daemon_proc_factory, postgres_server.create_database())
    for d, sid in ((a, "pa"), (b, "pb")):
        assert d.event(
            "turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": ["sys", f"{sid}-1"]}
        )["ok"]

    # Both nodes fork at the same time, each on its own session, from two threads each.
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = [pool.submit(_fork_many, d, sid) for d, sid in ((a, "pa"), (b, "pb")) * 2]
        answers = [r for run in runs for r in run.result()]
    assert all(r["ok"] for r in answers), [r for r in answers if not r["ok"]][:3]
    ids = [r["data"]["fork_id"] for r in answers]
    assert len(set(ids)) == len(ids) == 4 * FORKS_PER_THREAD

    # Each node keeps its own forks across a restart, and ends each by its id.
    for d in (a, b):
        d.kill()
        d.start()
    for d, sid, mine in ((a, "pa", runs[0::2]), (b, "pb", runs[1::2])):
        for r in (r for run in mine for r in run.result()):
            ended = d.event("session_fork_end", session_id=sid, fork_id=r["data"]["fork_id"])
            assert ended["ok"] and ended["data"]["fork_end"], ended
        await check_refcounts_match_owned(d)
    # A fork after the restart still gets an id above every one handed out before.
    again = b.event("session_fork", session_id="pb")
    assert again["ok"] and again["data"]["fork_id"] > max(ids), again
