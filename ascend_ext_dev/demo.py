"""``make demo``: the whole stack on a laptop CPU, driven by a short scripted agent conversation.

    python -m ascend_ext_dev.demo [--rounds N] [--pause S] [--no-console]

Development tool, not a production path. Starts the tiny vLLM-CPU engine (LMCache +
ascend_ext), the daemon steering its memory API, ramakv-proxy in front, and the console in
the foreground; a background thread plays three agents sharing a system prompt (streamed
chats through the proxy, a tool pause with suspend and restore, a close), so the console's
sessions, chunk maps and refcounts move with a real engine's chunk hashes. Quitting the
console stops everything. ``--no-console`` plays the script once and prints what the daemon
and the engine's tiers hold. ``serve`` and ``converse`` are the topology's-agnostic part:
``python -m bench.stock_demo`` (``make demo TOPOLOGY=stock``) runs them on the stock stack.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from ascend_ext_dev.tiny_engine import EngineProcess, EngineSettings, free_ports, vllm_available

SYSTEM = (
    "You are a careful coding agent. Read the repository, run the tests and report. "
    "Tools return JSON documents, logs, stack traces, diffs and lists of files. "
) * 12
TASKS = {
    "agent-alpha": "List the files in the repository, then summarise what each module does.",
    "agent-beta": "Run the test suite and explain the first failure you find in the logs.",
    "agent-gamma": "Find where the daemon counts references per chunk hash and describe it.",
}
TIMEOUT = httpx.Timeout(300.0)


@dataclass(frozen=True, slots=True)
class Narration:
    """What the script says the cache does at each lifecycle event (a topology's own tiers)."""

    suspend: str
    restore: str
    close: str


IN_PROCESS = Narration(
    suspend="agent-beta waits for a long tool: suspend (its chunks go DDR -> disk)",
    restore="agent-beta's tool answered: snapshot_restore (prefetch disk -> DDR)",
    close="agent-gamma is done: session_close (its own chunks leave every tier, the shared "
    "system prompt stays)",
)


def tell(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def _event(daemon_url: str, **body: object) -> dict:
    return httpx.post(daemon_url + "/event", json=body, timeout=TIMEOUT).json()


def _stream_chat(proxy_url: str, sid: str, messages: list[dict[str, str]]) -> str:
    """One streamed turn through the proxy; the reply text."""
    body = {
        "model": "tiny",
        "messages": messages,
        "max_tokens": 12,
        "temperature": 0,
        "stream": True,
    }
    text = []
    with httpx.stream(
        "POST",
        proxy_url + "/v1/chat/completions",
        json=body,
        headers={"X-Session-Id": sid},
        timeout=TIMEOUT,
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0].get("delta", {})
                text.append(delta.get("content") or "")
    return "".join(text)


def converse(
    proxy_url: str,
    daemon_url: str,
    rounds: int = 2,
    pause_s: float = 0.0,
    say: Callable[[str], None] = tell,
    narration: Narration = IN_PROCESS,
) -> dict[str, list[dict[str, str]]]:
    """The scripted conversation; returns each agent's messages (tests replay it)."""
    chats = {
        sid: [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
        for sid, task in TASKS.items()
    }
    for rnd in range(rounds):
        for sid, messages in chats.items():
            reply = _stream_chat(proxy_url, sid, messages)
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": f"Tool result {rnd}: " + "ok " * 60},
            ]
            # The proxy reports a turn after answering it: its map may not be there yet.
            answer = _event(daemon_url, type="session_map", session_id=sid)
            mapped = (answer.get("data") or {}).get("chunk_hashes", []) if answer.get("ok") else []
            say(f"{sid} turn {rnd + 1}: map of {len(mapped)} chunks")
            time.sleep(pause_s)
        say(narration.suspend)
        _event(daemon_url, type="session_suspend", session_id="agent-beta")
        time.sleep(pause_s * 2)
        say(narration.restore)
        _event(daemon_url, type="snapshot_restore", session_id="agent-beta")
        time.sleep(pause_s)
    say(narration.close)
    _event(daemon_url, type="session_close", session_id="agent-gamma")
    return chats


def _start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _wait(url: str, proc: subprocess.Popen[bytes], what: str, post: bool = False) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            if post:
                httpx.post(url, json={"type": "health"}, timeout=2).raise_for_status()
            else:
                httpx.get(url, timeout=2).raise_for_status()
            return
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.2)


def parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """The demo's command line (both topologies')."""
    p = argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--pause", type=float, default=2.0, help="seconds between turns")
    p.add_argument("--no-console", action="store_true")
    return p


def serve(
    work: Path,
    engine_url: str,
    daemon_config: str,
    proxy_flags: list[str],
    args: argparse.Namespace,
    narration: Narration = IN_PROCESS,
) -> int:
    """The daemon (``daemon_config``: its backend's lines) and ramakv-proxy in front of a
    ready engine, then the console with the script in the background (or, with
    ``--no-console``, the script once and what the daemon holds); stops both after."""
    first = free_ports(2)
    daemon_url, proxy_url = f"http://127.0.0.1:{first}", f"http://127.0.0.1:{first + 1}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        cfg = work / "daemon.toml"
        cfg.write_text(
            f'listen_addr = "127.0.0.1:{first}"\nnoop_backend = false\n{daemon_config}'
            f'session_store_path = "{work / "sessions.db"}"\n'
        )
        procs.append(
            _start(
                [sys.executable, "-m", "ramakv_daemon", "--config", str(cfg)], work / "daemon.log"
            )
        )
        _wait(daemon_url + "/event", procs[-1], "the daemon", post=True)
        procs.append(
            _start(
                [
                    sys.executable,
                    "-m",
                    "ramakv_proxy",
                    "--upstream",
                    engine_url,
                    "--daemon",
                    daemon_url,
                    "--listen",
                    f"127.0.0.1:{first + 1}",
                    *proxy_flags,
                ],
                work / "proxy.log",
            )
        )
        _wait(proxy_url + "/_ramakv/stats", procs[-1], "ramakv-proxy")
        tell(f"engine {engine_url}, daemon {daemon_url}, proxy {proxy_url}")
        if args.no_console:
            chats = converse(proxy_url, daemon_url, min(args.rounds, 2), 0.0, tell, narration)
            for sid in chats:
                hashes = _event(daemon_url, type="session_map", session_id=sid)
                tell(f"{sid}: {json.dumps(hashes.get('data', hashes))[:200]}")
            return 0
        script = threading.Thread(
            target=converse,
            daemon=True,
            args=(proxy_url, daemon_url, args.rounds, args.pause, lambda m: None, narration),
        )
        script.start()
        return subprocess.call([sys.executable, "-m", "ramakv_console", "--url", daemon_url])
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(15)


def main(argv: list[str] | None = None) -> int:
    args = parser("python -m ascend_ext_dev.demo", __doc__).parse_args(argv)
    why = vllm_available()
    if why is not None:
        print(f"make demo needs the real engine: {why}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="ramakv-demo-"))
    first = free_ports(3)
    engine = EngineProcess(EngineSettings(work_dir=work, port=first, api_port_start=first + 1))
    try:
        tell(f"starting the tiny vLLM-CPU engine (20-90 s; log {engine.log_path})")
        engine.start().wait_ready(900)
        tell(f"memory API {engine.memory_url}")
        config = f'lmcache_url = "{engine.memory_url}"\n'
        return serve(work, engine.url, config, [], args)
    finally:
        engine.stop()
        tell(f"stopped; logs in {work}")


if __name__ == "__main__":
    sys.exit(main())
