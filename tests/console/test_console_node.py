"""The console says which node it watches when the daemon's store is shared (PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.console_rig import until
from support.daemon_proc import DaemonProcess
from support.postgres import PostgresServer

from ramakv_console.widgets.stats_header import StatsHeader

SIZE = (160, 30)


def _app(url: str, tmp_path: Path) -> Any:
    from ramakv_console.app import ConsoleApp

    return ConsoleApp(url, daemon_config=tmp_path / "daemon.toml", sdk_config=tmp_path / "sdk.toml")


async def test_the_header_names_the_node_of_a_daemon_on_a_shared_store(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    d = daemon_proc_factory(
        config={"session_store_url": postgres_server.create_database(), "node_id": "node-west-2"}
    )
    assert d.event("turn_end", session_id="s", kv_transfer_params={"chunk_hashes": ["sys", "h1"]})[
        "ok"
    ]
    health = d.event("health")["data"]
    assert health["node_id"] == "node-west-2" and health["sessions_count"] == 1
    app = _app(d.url, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        header = app.screen.query_one(StatsHeader)
        await until(
            pilot,
            lambda: app.state.node_id == "node-west-2" and app.state.seq > 0,
            what="the snapshot of node-west-2",
            timeout=60.0,
        )
        await until(
            pilot,
            lambda: "node-west-2" in str(header.render()),
            what="the header to name the node",
            timeout=60.0,
        )
        line = str(header.render())
        # The session count and the trace seq still come first.
        assert line.index("sessions 1") < line.index("seq ") < line.index("node node-west-2")


async def test_a_daemon_on_its_own_sqlite_file_names_no_node(
    daemon_proc: DaemonProcess,
    tmp_path: Path,
) -> None:
    assert "node_id" not in daemon_proc.event("health")["data"]
    app = _app(daemon_proc.url, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        header = app.screen.query_one(StatsHeader)
        await until(
            pilot,
            lambda: app.connection[0] and not app.state.loading,
            what="the snapshot",
            timeout=60.0,
        )
        assert app.state.node_id == "" and "node" not in str(header.render())
