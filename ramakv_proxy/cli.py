"""The ``ramakv-proxy`` command line: flags, the SDK config, and serving the app."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from aiohttp import web

from ramakv_proxy.app import make_app
from ramakv_proxy.naming import SOURCES
from ramakv_proxy.pending import default_state_dir
from ramakv_proxy.settings import TURN_START_PREFETCH, ProxySettings
from ramakv_sdk.config import DEFAULT_DAEMON_URL, load_config
from ramakv_sdk.version import add_version_flag

log = logging.getLogger("ramakv_proxy")

_DEFAULTS = ProxySettings(upstream="")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="ramakv-proxy",
        description="OpenAI-compatible reverse proxy that reports the turns of requests "
        "naming a session to ram-a-kv (" + ", then ".join(SOURCES) + ") and infers the "
        "session's lifecycle: a tool call then a pause suspends it, its next request "
        "restores it, an agent's final answer suspends it (inferred), a client leaving or a "
        "long idle closes it.",
    )
    p.add_argument("--upstream", required=True, help="engine base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--listen", default="127.0.0.1:8001", help="HOST:PORT (127.0.0.1:8001)")
    p.add_argument(
        "--daemon",
        help="ram-a-kv URL (default: daemon_url from "
        "~/.config/ram-a-kv/config.toml, else " + DEFAULT_DAEMON_URL + ")",
    )
    p.add_argument("--token", help="daemon bearer token (default: auth_token from the config)")
    p.add_argument(
        "--session-header",
        default=_DEFAULTS.session_header,
        help=f"request header carrying the session id ({_DEFAULTS.session_header})",
    )
    p.add_argument(
        "--chunk-size",
        type=int,
        default=256,
        help="LMCache chunk_size of the engine, to hash streamed turns (256)",
    )
    p.add_argument(
        "--save-unfull-chunk",
        action="store_true",
        help="the engine's LMCache has save_unfull_chunk: true",
    )
    p.add_argument(
        "--tool-pause-suspend-s",
        type=float,
        default=_DEFAULTS.tool_pause_suspend_s,
        help="suspend a session this long after an answer calling a tool, when no new "
        f"request came (0 = never; {_DEFAULTS.tool_pause_suspend_s})",
    )
    p.add_argument(
        "--restore-wait-ms",
        type=int,
        default=_DEFAULTS.restore_wait_ms,
        help="a restored session's request waits at most this long for its chunks to be in "
        f"DDR (0 = do not wait; {_DEFAULTS.restore_wait_ms})",
    )
    p.add_argument(
        "--session-idle-close-s",
        type=float,
        default=_DEFAULTS.session_idle_close_s,
        help="close a session after this long without a request "
        f"(0 = never; {_DEFAULTS.session_idle_close_s:g})",
    )
    p.add_argument(
        "--run-end-grace-s",
        "--run-end-close-s",  # its name before the run end suspended instead of closing
        dest="run_end_grace_s",
        type=float,
        default=_DEFAULTS.run_end_grace_s,
        help="suspend a session (inferred: its chunks are ordered cold, never deleted) this "
        "long after an agent's final answer (an answer calling no tool, to a request that "
        "offered tools and carried a tool's use) when no new request came; the grace then "
        "follows the 0.9 quantile of recent run ends' return gaps, a run end with no "
        "return within 60 s counting 0, in [0.5, 60] s "
        f"(0 = never; {_DEFAULTS.run_end_grace_s:g})",
    )
    p.add_argument(
        "--daemon-wait-ms",
        type=int,
        default=_DEFAULTS.daemon_wait_ms,
        help="the most a request waits on the daemon's answers; a timeout opens a circuit "
        f"breaker (no waits, backing off) ({_DEFAULTS.daemon_wait_ms})",
    )
    p.add_argument(
        "--state-dir",
        default=str(default_state_dir()),
        help="where pending suspends and closes are kept over a restart, one file per "
        "listen port ('' = not kept; default: %(default)s)",
    )
    p.add_argument(
        "--scope-sessions-by-key",
        action="store_true",
        help="prefix each session id with a hash of the caller's API key (Authorization: "
        "Bearer), so a client can name only its own key's sessions (SECURITY.md)",
    )
    p.add_argument(
        "--no-close-on-disconnect",
        dest="close_on_disconnect",
        action="store_false",
        help="keep a session whose client left mid-answer (default: close it)",
    )
    p.add_argument(
        "--turn-start-prefetch",
        choices=TURN_START_PREFETCH,
        default=_DEFAULTS.turn_start_prefetch,
        help="off: turn_start asks for no prefetch (a prefetch nobody waits for only races the "
        "prefill); wait: prefetch and wait as after a restore (off)",
    )
    p.add_argument(
        "--lmcache-mp-url",
        default="",
        help="the stock stack (docs/stock-stack.md): the LMCache multiprocess server's HTTP "
        "URL; turns are keyed as it keys them and restores prefetch their own tokens",
    )
    p.add_argument(
        "--lmcache-mp-model",
        default="",
        help="vLLM's --model string, the server's key (default: the engine's /v1/models root)",
    )
    p.add_argument("--lmcache-mp-world-size", type=int, default=1, help="engine world size (1)")
    p.add_argument("--lmcache-mp-cache-salt", default="", help="the requests' cache_salt ('')")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (INFO)")
    add_version_flag(p)
    return p.parse_args(argv)


def settings_from(args: argparse.Namespace) -> ProxySettings:
    """ProxySettings from the flags and the SDK config (its token only for its own URL)."""
    cfg = load_config()
    daemon = (args.daemon or (cfg.daemon_url if cfg else DEFAULT_DAEMON_URL)).rstrip("/")
    token = args.token
    if token is None and cfg is not None and cfg.auth_token and daemon == cfg.daemon_url:
        token = cfg.auth_token
    return ProxySettings(
        upstream=args.upstream.rstrip("/"),
        daemon_url=daemon,
        token=token,
        session_header=args.session_header,
        chunk_size=args.chunk_size,
        save_unfull_chunk=args.save_unfull_chunk,
        tool_pause_suspend_s=args.tool_pause_suspend_s,
        restore_wait_ms=args.restore_wait_ms,
        session_idle_close_s=args.session_idle_close_s,
        run_end_grace_s=args.run_end_grace_s,
        daemon_wait_ms=args.daemon_wait_ms,
        state_file=_state_file(args.state_dir, args.listen),
        scope_sessions_by_key=args.scope_sessions_by_key,
        close_on_disconnect=args.close_on_disconnect,
        turn_start_prefetch=args.turn_start_prefetch,
        lmcache_mp_url=args.lmcache_mp_url.rstrip("/"),
        lmcache_mp_model=args.lmcache_mp_model,
        lmcache_mp_world_size=args.lmcache_mp_world_size,
        lmcache_mp_cache_salt=args.lmcache_mp_cache_salt,
    )


def _state_file(state_dir: str, listen: str) -> str | None:
    """One file per listen address, so two proxies on one host keep apart."""
    if not state_dir:
        return None
    port = listen.rpartition(":")[2] or "default"
    return str(Path(state_dir) / f"pending-{port}.json")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ramakv-proxy`` console script."""
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        print(f"ramakv-proxy: --listen must be HOST:PORT, got {args.listen!r}", file=sys.stderr)
        return 2
    try:
        settings = settings_from(args)
    except ValueError as err:
        print(f"ramakv-proxy: {err}", file=sys.stderr)
        return 2
    log.info(
        "ramakv-proxy on %s -> %s, reporting to %s; tool pause suspend %gs, restore wait "
        "%d ms, idle close %gs, run end grace %gs (adaptive), daemon wait %d ms",
        args.listen,
        settings.upstream,
        settings.daemon_url,
        settings.tool_pause_suspend_s,
        settings.restore_wait_ms,
        settings.session_idle_close_s,
        settings.run_end_grace_s,
        settings.daemon_wait_ms,
    )
    try:
        web.run_app(
            make_app(settings), host=host.strip("[]"), port=int(port), print=None, access_log=None
        )
    except OSError as err:
        log.error("cannot listen on %s: %s", args.listen, err)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
