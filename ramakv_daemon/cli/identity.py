"""``ramakv-identity --from FILE``: print a deployment's compatibility namespace."""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import TextIO

from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.core.identity import (  # noqa: F401  (re-exported)
    IDENTITY_FIELDS,
    canonical_json,
    is_namespace,
    namespace_of,
    problems,
)
from ramakv_protocol.version import add_version_flag


def read_fields(path: str) -> JsonObject:
    """Identity fields from a JSON, TOML or KEY=VALUE (.env) file; ``-`` reads stdin."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        data = json.loads(text)
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            data = _env_pairs(text)
    if not isinstance(data, dict):
        raise ValueError("the file must hold one object of identity fields")
    deployments = data.get("deployments")
    if isinstance(deployments, list) and len(deployments) == 1:
        data = deployments[0]  # a daemon config with one [[deployments]] entry
    return {k.lower(): v for k, v in data.items()}


def _env_pairs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        key = key.strip()
        if key.upper().startswith("KVP_"):
            key = key[4:]
        out[key.lower()] = value.strip().strip("'\"")
    return out


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Print the namespace (exit 0), or why there is none (exit 1); usage errors exit 2."""
    out = out or sys.stdout
    p = argparse.ArgumentParser(
        prog="ramakv-identity",
        description="Print the kvp-<32 hex> compatibility namespace of a deployment identity "
        "(fields: " + ", ".join(IDENTITY_FIELDS) + ").",
    )
    p.add_argument(
        "--from",
        dest="path",
        required=True,
        help="JSON, TOML or KEY=VALUE file with the identity fields (- = stdin)",
    )
    p.add_argument("--json", action="store_true", help="also print the canonical JSON")
    add_version_flag(p)
    args = p.parse_args(argv)
    try:
        fields = read_fields(args.path)
    except (OSError, ValueError) as err:
        print(f"ramakv-identity: cannot read {args.path}: {err}", file=sys.stderr)
        return 2
    ns = namespace_of(fields)
    if ns is None:
        print("no namespace: the daemon will not steer this deployment's cache", file=sys.stderr)
        for line in problems(fields):
            print(f"  {line}", file=sys.stderr)
        return 1
    print(ns, file=out)
    if args.json:
        print(canonical_json(fields), file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
