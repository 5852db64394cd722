"""The config schema's documents: the README's config table and the check of
config.example.toml, both drawn from :data:`~ramakv_protocol.config_schema.KEYS`.
``python -m ramakv_protocol.config_docs --markdown`` prints the table; ``--write README.md``
replaces it in place."""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

from ramakv_protocol.config_schema import BY_NAME, KEYS, Key, toml_value

# The README's table lies between these lines (regenerate it with --write README.md).
TABLE_BEGIN = "<!-- config table: python -m ramakv_protocol.config_docs --write README.md -->"
TABLE_END = "<!-- end of config table -->"


def _default_cell(key: Key) -> str:
    if key.default_doc:
        return key.default_doc
    if key.kind == "tables":
        return "none"
    if isinstance(key.default, str):
        return f"`{key.default}`" if key.default else '""'
    text = toml_value(key.default)
    return f"`{text}`" if key.kind == "list" else text


def markdown_table() -> str:
    """The README's config table: key, default, meaning (0's meaning where 0 is allowed)."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for key in KEYS:
        meaning = key.doc + (f"; 0 = {key.zero_means}" if key.zero_means else "")
        rows.append(f"| {key.name} | {_default_cell(key)} | {meaning} |")
    return "\n".join(rows) + "\n"


def with_table(readme: str) -> str:
    """``readme`` with the text between the table markers replaced by :func:`markdown_table`."""
    head, begin, rest = readme.partition(TABLE_BEGIN)
    _, end, tail = rest.partition(TABLE_END)
    if not begin or not end:
        raise ValueError(f"no {TABLE_BEGIN!r} ... {TABLE_END!r} markers")
    return f"{head}{TABLE_BEGIN}\n{markdown_table()}{TABLE_END}{tail}"


def _comment_above(lines: list[str], name: str) -> str:
    """The comment block right above the line setting (or showing) ``name``."""
    for i, line in enumerate(lines):
        if line.startswith((f"{name} = ", f"# {name} = ")):
            block: list[str] = []
            for above in reversed(lines[:i]):
                if not above.startswith("#"):
                    break
                block.append(above)
            return " ".join(reversed(block))
    return ""


def example_problems(text: str) -> list[str]:
    """How a config.example.toml text strays from the schema (empty when it does not).

    Every key is set to its default, or (host-dependent defaults and optional features)
    shown commented out as ``# name = example``; arrays of tables as ``# [[name]]``. Where
    0 is allowed, the comment above the key says what it means ("0 = ...").
    """
    data = tomllib.loads(text)
    raw_lines = [line.strip() for line in text.splitlines()]
    lines = set(raw_lines)
    problems = [f"unknown key '{name}'" for name in data if name not in BY_NAME]
    for key in KEYS:
        if key.zero_means is not None and "0 = " not in _comment_above(raw_lines, key.name):
            problems.append(f"the comment above '{key.name}' does not say what 0 means")
    for key in KEYS:
        if key.kind == "tables":
            if f"# [[{key.name}]]" not in lines and key.name not in data:
                problems.append(f"'{key.name}' has no example table '# [[{key.name}]]'")
        elif key.example is not None:
            line = f"# {key.name} = {toml_value(key.example)}"
            if line not in lines:
                problems.append(f"'{key.name}' must be shown as '{line}'")
            if key.name in data:
                problems.append(f"'{key.name}' is set; its default depends on the host")
        elif key.name not in data:
            problems.append(f"'{key.name}' is missing (default {toml_value(key.default)})")
        else:
            value = data[key.name]
            if isinstance(value, list):
                value = tuple(value)
            if value != key.default or type(value) is not type(key.default):
                problems.append(
                    f"'{key.name}' = {value!r}, not its default {toml_value(key.default)}"
                )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """--markdown prints the README table; --write FILE replaces it between the markers."""
    parser = argparse.ArgumentParser(prog="python -m ramakv_protocol.config_docs")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--markdown", action="store_true", help="print the README config table")
    group.add_argument("--write", metavar="README", help="regenerate the table in this file")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown_table())
        return 0
    path = Path(args.write)
    path.write_text(with_table(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
