"""Command line: ``ramakv-console`` / ``python -m ramakv_console``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ramakv_console.daemon_link import default_url
from ramakv_sdk.version import add_version_flag


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The console's flags."""
    p = argparse.ArgumentParser(prog="ramakv-console", description="ram-a-kv operator console")
    p.add_argument(
        "--url",
        help="daemon base URL (default: the SDK config's daemon_url, else http://127.0.0.1:6998)",
    )
    p.add_argument(
        "--token",
        help="bearer token for a daemon with auth_token (default: the "
        "SDK config's auth_token when its daemon_url is this URL)",
    )
    p.add_argument(
        "--config",
        help="daemon config file to edit (default: the daemon's "
        "lookup: $RAM_A_KV_CONFIG, else /etc/ram-a-kv/config.toml)",
    )
    p.add_argument(
        "--sdk-config", help="SDK config file to edit (default ~/.config/ram-a-kv/config.toml)"
    )
    p.add_argument("--theme", help="theme name (themes/*.toml or a built-in Textual theme)")
    p.add_argument("--themes-dir", help="load themes from this folder instead")
    add_version_flag(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the console until the operator quits."""
    args = parse_args(argv)
    from ramakv_console.app import ConsoleApp

    app = ConsoleApp(
        args.url or default_url(),
        daemon_config=Path(args.config) if args.config else None,
        sdk_config=Path(args.sdk_config) if args.sdk_config else None,
        theme=args.theme,
        token=args.token,
        theme_dirs=[Path(args.themes_dir)] if args.themes_dir else None,
    )
    app.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
