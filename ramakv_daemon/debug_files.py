"""Debug files for turn_end: one JSON per turn, named so no session id escapes debug_dir."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from urllib.parse import quote

MAX_NAME_ID = 120


def safe_id(session_id: str) -> str:
    """Percent-encode everything but [A-Za-z0-9_.-]; long ids keep a prefix plus a digest.

    "/" and "\\" are always encoded, and the result is used only inside a fixed file
    name prefix, so "../../x" or "/etc/passwd" can never leave debug_dir.
    """
    encoded = quote(session_id, safe="-_")
    if len(encoded) > MAX_NAME_ID:
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        encoded = f"{encoded[:MAX_NAME_ID - 17]}~{digest}"
    return encoded


def debug_path(debug_dir: str, session_id: str, turn: int) -> Path:
    """<debug_dir>/kvcache_debug_<safe id>_<turn>.json."""
    return Path(debug_dir) / f"kvcache_debug_{safe_id(session_id)}_{turn}.json"


def wants_debug_file(debug_context: dict | None) -> bool:
    """True when the context carries messages or timing."""
    return bool(debug_context) and (
        "messages" in debug_context or "timing" in debug_context  # type: ignore[operator]
    )


def write_debug_file(
    debug_dir: str, session_id: str, turn: int, chunk_hashes: list[str], debug_context: dict
) -> Path:
    """Write the file atomically (temp + rename); returns its path. Raises OSError."""
    timing = debug_context.get("timing") or {}
    if not isinstance(timing, dict):
        timing = {}
    messages = debug_context.get("messages")
    body = {
        "session_id": session_id,
        "turn": turn,
        "chunk_hashes": chunk_hashes,
        "messages": messages if isinstance(messages, list) else [],
        "timing": {k: timing.get(k) for k in ("ttft_ms", "total_time_ms", "tpot_ms")},
        "written_at": time.time(),
    }
    path = debug_path(debug_dir, session_id, turn)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(body, ensure_ascii=False, indent=2), encoding="utf-8")
    os.replace(tmp, path)
    return path
