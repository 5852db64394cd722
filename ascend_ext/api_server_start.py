"""Start LMCache's internal API server (the memory API's home) or fail the engine's start-up.

lmcache runs uvicorn on a daemon thread; when the port is taken uvicorn logs the error and
exits that thread, and the engine went on serving with no memory API (every daemon call
then failed, "1 of 1 workers failed"). This start waits until the server listens and
raises, naming the port, when it cannot.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

START_GUARD_S = 120.0  # a hang guard only: uvicorn listens or gives up within moments


class MemoryApiBindError(RuntimeError):
    """The internal API server (and with it the memory API) cannot listen."""


def start_or_raise(server: Any) -> None:
    """``InternalAPIServer.start``, returning once it listens.

    Raises:
        MemoryApiBindError: it stopped before listening (the port is in use, say), naming
            the port and the operating system's reason.
    """
    if not getattr(server, "enable", False):
        return
    uv = server.server

    def serve() -> None:
        try:
            asyncio.run(server.run())
        except SystemExit:  # uvicorn's way of giving up at start-up (it logged why)
            return

    thread = threading.Thread(target=serve, daemon=True, name="api-server-thread")
    thread.start()
    give_up = time.monotonic() + START_GUARD_S
    while not uv.started and thread.is_alive() and time.monotonic() < give_up:
        thread.join(0.02)  # wakes at once when the thread ends (uvicorn gave up)
    if uv.started:
        return
    uv.should_exit = True
    where = server.server_log_info
    config = uv.config
    reason = "" if config.uds else _bind_error(config.host, config.port)
    raise MemoryApiBindError(
        f"ascend_ext memory API: LMCache's internal API server cannot listen on {where}"
        f"{' (' + reason + ')' if reason else ''}; without it the ram-a-kv daemon cannot "
        "steer this engine: free the port or change internal_api_server_port_start"
    )


def _bind_error(host: str, port: int) -> str:
    """Why ``host:port`` cannot be bound now (the OS's words), or "" when it can."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as err:
            return f"port {port}: {err.strerror or err}"
    return ""
