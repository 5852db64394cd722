"""Helpers of the scale-out tests: two nodes on one database, each node's state checked
against what it owns, its /metrics read, the database asked directly."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import asyncpg
from prometheus_client.parser import text_string_to_metric_families

from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.manager import recompute_refcounts
from ramakv_daemon.core.session import Session
from support.daemon_proc import DaemonProcess, trace_snapshot

HANG_GUARD_S = 120.0  # a generous overall limit on each wait (loaded 2-core CI)


async def until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``condition`` until it holds (fails after HANG_GUARD_S)."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)  # polling a condition, not waiting for time


def metrics_text(d: DaemonProcess) -> str:
    with urllib.request.urlopen(d.url + "/metrics", timeout=10) as r:
        return str(r.read().decode())


def metric_types(d: DaemonProcess) -> dict[str, str]:
    """Metric family name -> its type (counter, gauge, ...), as /metrics declares them."""
    return {f.name: f.type for f in text_string_to_metric_families(metrics_text(d))}


def metric(d: DaemonProcess, name: str) -> float:
    """One unlabelled sample of the node's /metrics, by its full name."""
    for family in text_string_to_metric_families(metrics_text(d)):
        for sample in family.samples:
            if sample.name == name and not sample.labels:
                return float(sample.value)
    raise AssertionError(f"no metric {name} in /metrics")


async def held(d: DaemonProcess) -> tuple[list[Session], list[Fork], dict[str, int]]:
    """The node's sessions (open ones), open forks and refcounts, from its trace snapshot."""
    snap = await trace_snapshot(d.url)
    sessions = [
        Session(sid, tuple(s["chunk_hashes"]), suspended=s["state"] == "suspended")
        for sid, s in snap["sessions"].items()
        if s["state"] != "closed"
    ]
    forks = [
        Fork(int(f["fork_id"]), f["session_id"], tuple(f["chunk_hashes"]), 0.0)
        for f in snap["forks"].values()
    ]
    return sessions, forks, dict(snap["refcounts"])


async def check_refcounts_match_owned(d: DaemonProcess) -> tuple[list[Session], list[Fork]]:
    """The node's refcounts equal those recomputed from the sessions and forks it holds,
    and its totals (/metrics) too: a reference a released session left behind, on a chunk
    nothing held here lists, shows there."""
    sessions, forks, refcounts = await held(d)
    expected = recompute_refcounts(sessions, forks)
    assert refcounts == expected
    assert metric(d, "ramakv_chunk_references") == sum(expected.values())
    assert metric(d, "ramakv_chunks_referenced") == len(expected)
    return sessions, forks


async def sql(url: str, query: str, *args: Any) -> list[Any]:
    """One statement on the shared database, as an operator's psql would run it."""
    con = await asyncpg.connect(url)
    try:
        return list(await con.fetch(query, *args))
    finally:
        await con.close()


async def listener_pid(url: str, node: str) -> int:
    """The server process of ``node``'s LISTEN connection (named by its application_name)."""
    rows = await sql(
        url,
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
        f"ram-a-kv {node} listen",
    )
    assert len(rows) == 1, f"node {node} has {len(rows)} LISTEN connections"
    return int(rows[0]["pid"])


@contextlib.asynccontextmanager
async def unheard(url: str, node: str) -> AsyncIterator[None]:
    """Within the block ``node`` hears no notification: the server process of its LISTEN
    connection is stopped (SIGSTOP), so a takeover's notification waits there, and the node
    still sees its connection up (no reconnect, no ownership check). This holds "the old
    node has not processed the notification yet" open for as long as a test needs, instead
    of racing it. Resumed (SIGCONT) on the way out, whatever happened."""
    pid = await listener_pid(url, node)
    await stop_listener(url, pid)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


# How long a probe NOTIFY may take before the stop is taken for one that caught the server
# process holding the notification queue's lock, and how many stops are tried.
PROBE_S = 5.0
STOP_TRIES = 10


async def stop_listener(url: str, pid: int) -> None:
    """SIGSTOP the LISTEN connection's server process ``pid`` at a moment it holds none of
    the server's notification locks. Stopped while it read the queue (every commit here
    notifies, so it often does), it froze every notifying commit of every node: each
    takeover's claim then ran into its 30 s command timeout (a misroute storm answered
    "cannot take over" 503s for minutes). A NOTIFY that commits says the stop is clean;
    one that does not is let through (SIGCONT) and the stop is tried again. A slow probe
    on a loaded machine only costs another try."""
    for _ in range(STOP_TRIES):
        os.kill(pid, signal.SIGSTOP)
        con = await asyncpg.connect(url)
        try:
            probe = asyncio.ensure_future(con.execute("SELECT pg_notify('ramakv_test_probe', '')"))
            done, _ = await asyncio.wait({probe}, timeout=PROBE_S)
            if done:
                probe.result()
                return
            os.kill(pid, signal.SIGCONT)
            await probe
        finally:
            await con.close()
    raise AssertionError(f"no clean stop of the LISTEN server process {pid} in {STOP_TRIES}")


@contextlib.contextmanager
def stopped(d: DaemonProcess) -> Iterator[None]:
    """The daemon process is stopped (SIGSTOP) within the block, resumed on the way out."""
    assert d.proc is not None
    d.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        d.proc.send_signal(signal.SIGCONT)


@contextlib.asynccontextmanager
async def in_process_nodes(url: str, quiet_a: bool = False) -> AsyncIterator[tuple[Any, ...]]:
    """Two in-process daemons, nodes "a" and "b", on the database ``url`` (noop backend;
    ownership checks hourly); ``quiet_a``: node a hears b's takeovers but acts on none by
    itself (its owner checks closed: a test sends the commands)."""
    from ramakv_daemon.adapters.backends.noop import NoopBackend
    from ramakv_daemon.adapters.postgres.store import PostgresSessionStore
    from ramakv_daemon.bootstrap import build
    from ramakv_daemon.config import Config

    services = tuple(
        build(
            Config(session_store_url=url, node_id=node, ownership_check_s=3600.0),
            PostgresSessionStore(url, node),
            NoopBackend(),
        )
        for node in ("a", "b")
    )
    for svc in services:
        await svc.start()
    if quiet_a:
        await services[0].owner_checks.close()
    try:
        yield services
    finally:
        for svc in services:
            await svc.stop()
