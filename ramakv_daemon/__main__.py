"""Command line: ``ram-a-kv`` / ``python -m ramakv_daemon``."""

from __future__ import annotations

import argparse
import gc
import ipaddress
import logging
import sys
from typing import TYPE_CHECKING

from ramakv_protocol.version import add_version_flag, package_version

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger("ramakv")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The daemon's flags; each overrides the config file."""
    p = argparse.ArgumentParser(prog="ram-a-kv", description="ram-a-kv KV-cache steering daemon")
    p.add_argument(
        "--config",
        help="TOML config (else $RAM_A_KV_CONFIG, else /etc/ram-a-kv/config.toml)",
    )
    p.add_argument("--listen", help="HOST:PORT to bind (overrides listen_addr)")
    p.add_argument("--store", help="SQLite file (overrides session_store_path)")
    p.add_argument("--noop", action="store_true", help="use the noop backend (steer nothing)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    p.add_argument(
        "--check-config",
        action="store_true",
        help="print the effective config (file + flags) as TOML and exit: 0 valid, 2 not",
    )
    add_version_flag(p)
    return p.parse_args(argv)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def main(argv: list[str] | None = None) -> int:
    """Load config, start the daemon, serve until SIGINT/SIGTERM.

    Exit codes: 0 stopped cleanly, 1 the store or the port could not be used (the log
    names the file or address), 2 bad config or flags.
    """
    # No collections while the modules load and the daemon's parts are built: everything
    # made then lives as long as the process, so the ~100 passes over it found next to
    # nothing (about 1800 objects) and cost 2-3 % of the instructions to listening. On
    # again (after a freeze) before the store opens: restoring a large store allocates
    # and frees a lot.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _main(argv)
    finally:
        (gc.enable if enabled else gc.disable)()  # as the caller had it


def _main(argv: list[str] | None) -> int:
    args = parse_args(argv)  # --version and --help exit here, before any import below
    from ramakv_daemon import config as config_mod
    from ramakv_daemon.config import ConfigError

    logging.basicConfig(
        stream=sys.stderr if args.check_config else sys.stdout,
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        cfg, warnings = config_mod.load_for_cli(args.config)
    except ConfigError as err:
        log.error("%s; refusing to start", err)
        return EXIT_USAGE
    for w in warnings:
        log.warning("%s", w)
    cfg = cfg.with_overrides(
        listen_addr=args.listen, session_store_path=args.store, noop_backend=args.noop or None
    )
    problem = config_mod.listen_problem(cfg.listen_addr)
    if problem is not None:
        log.error("listen_addr %s", problem)
        return EXIT_USAGE
    host, port = cfg.host_port
    if not is_loopback(host) and not cfg.auth_token:
        log.error(
            "refusing to bind %s: a non-loopback listen_addr needs auth_token in the config",
            cfg.listen_addr,
        )
        return EXIT_USAGE
    if args.check_config:
        import tomli_w

        sys.stdout.write(
            f"# effective config of ram-a-kv {package_version()} "
            f"(file: {config_mod.resolve_path(args.config)})\n"
        )
        sys.stdout.write(tomli_w.dumps(config_mod.effective(cfg)))
        return EXIT_OK
    # The version is logged once listening (Daemon.listening): looking it up costs ~8 ms.
    log.info(
        "ram-a-kv daemon starting addr=%s noop=%s store=%s lmcache_url=%s",
        cfg.listen_addr,
        cfg.noop_backend,
        cfg.store_shown,
        cfg.lmcache_url,
    )
    # Imported here, not above: --check-config and a refused config need none of the
    # daemon's serving side.
    from aiohttp import web

    from ramakv_daemon.http.app import init_app
    from ramakv_daemon.http.keys import DAEMON_KEY
    from ramakv_daemon.ports import StoreError

    app = init_app(cfg)
    app[DAEMON_KEY].sweep_after_listening = True
    app.on_startup.append(_tune_gc)  # after the service's start-up (cleanup_ctx runs first)
    # Frozen first: enabled with everything made so far still young, the first collection
    # would scan all of it (as much as the passes saved above).
    gc.freeze()
    gc.enable()
    try:
        web.run_app(
            app,
            host=host,
            port=port,
            # aiohttp calls ``print`` once every site listens (with its "Running on"
            # line): the daemon's cue for what start-up left until then.
            print=lambda _running_on: app[DAEMON_KEY].listening(),
            access_log=None,
            shutdown_timeout=5,
        )
    except StoreError as err:
        log.error("cannot start: %s", err)
        return EXIT_FAILED
    except OSError as err:
        log.error("cannot listen on %s: %s", cfg.listen_addr, err)
        return EXIT_FAILED
    log.info("ram-a-kv daemon stopped (store %s closed)", cfg.session_store_path)
    return EXIT_OK


async def _tune_gc(app: web.Application) -> None:
    """Garbage-collector settings for a long-lived daemon process (not for library users).

    Everything alive after start-up (modules, the app, the restored state) lives as long
    as the process: frozen, a full collection no longer rescans it. Young collections run
    10x less often: an event allocates a few hundred tracked objects and frees nearly all
    by refcount, so most passes found nothing, and each stalls the loop. Measured at half
    the max turn_end rate, 4 interleaved pairs: p99 1.8-5.2 ms against 3.4-12.7 ms with
    the default of 700.
    """
    gc.freeze()
    gc.set_threshold(7000, 10, 10)


if __name__ == "__main__":
    sys.exit(main())
