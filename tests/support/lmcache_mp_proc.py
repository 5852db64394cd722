"""Starts the real stock LMCache multiprocess server (lmcache 0.5.6) as a child process
(bench.stock_stack's, which the benchmark and ``make demo`` share)."""

from __future__ import annotations

from bench.stock_stack import MPServer, free_port, mp_server, server_args

__all__ = ["MPServer", "free_port", "mp_server", "server_args"]
