"""The TypeScript client's copies of the wire constants agree with ramakv_protocol.wire."""

from __future__ import annotations

import re
from pathlib import Path

from ramakv_protocol import wire

TRACE_TS = Path(__file__).resolve().parents[2] / "clients" / "typescript" / "src" / "trace.ts"


def ts_constant(text: str, name: str) -> int:
    """The value of ``export const NAME = <int or 1 << n>;``."""
    m = re.search(rf"export const {name} = ([^;]+);", text)
    assert m is not None, f"{name} not in {TRACE_TS.name}"
    expr = m.group(1).strip()
    shift = re.fullmatch(r"(\d+)\s*<<\s*(\d+)", expr)
    return int(shift.group(1)) << int(shift.group(2)) if shift else int(expr)


def test_typescript_constants_match_the_protocol() -> None:
    text = TRACE_TS.read_text()
    assert ts_constant(text, "TRACE_PROTOCOL") == wire.PROTOCOL
    assert ts_constant(text, "TRACE_MAX_MESSAGE_BYTES") == wire.MAX_MESSAGE_BYTES
    assert ts_constant(text, "TRACE_SLOW_CLOSE") == wire.SLOW_CLOSE_CODE
    assert ts_constant(text, "TRACE_PROTOCOL_CLOSE") == wire.PROTOCOL_CLOSE_CODE
