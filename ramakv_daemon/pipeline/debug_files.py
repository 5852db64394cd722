"""Debug files for turn_end: one JSON per turn, named so no session id escapes debug_dir."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.telemetry.log_text import loggable

log = logging.getLogger("ramakv")

MAX_NAME_ID = 120


def safe_id(session_id: str) -> str:
    """Percent-encode everything but [A-Za-z0-9_.-]; long ids keep a prefix plus a digest.

    "/" and "\\" are always encoded, and the result is used only inside a fixed file
    name prefix, so "../../x" or "/etc/passwd" can never leave debug_dir.
    """
    encoded = quote(session_id, safe="-_")
    if len(encoded) > MAX_NAME_ID:
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        encoded = f"{encoded[: MAX_NAME_ID - 17]}~{digest}"
    return encoded


def debug_path(debug_dir: str, session_id: str, turn: int) -> Path:
    """<debug_dir>/kvcache_debug_<safe id>_<turn>.json."""
    return Path(debug_dir) / f"kvcache_debug_{safe_id(session_id)}_{turn}.json"


def wants_debug_file(debug_context: JsonObject | None) -> bool:
    """True when the context carries messages or timing."""
    return debug_context is not None and ("messages" in debug_context or "timing" in debug_context)


def write_debug_file(
    debug_dir: str,
    session_id: str,
    turn: int,
    chunk_hashes: list[str],
    debug_context: JsonObject,
) -> Path:
    """Write the file atomically (a private temp file + rename), mode 0600 in a 0700
    directory; returns its path. Raises OSError."""
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
    _private_dir(path.parent)
    text = json.dumps(body, ensure_ascii=False, indent=2).encode("utf-8")
    # mkstemp: a fresh random name opened O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, so a file or
    # symlink planted under a predictable ".tmp" name is never followed or written through.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        # rename() replaces a symlink at the final name; it never writes through it.
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def _private_dir(directory: Path) -> None:
    """Create ``directory`` 0700 (debug files hold prompts). An existing one is kept as the
    operator made it."""
    if directory.is_dir():
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        return
    os.chmod(directory, 0o700)  # the umask may have taken bits off, never added: set it


class DebugWriter:
    """Writes a turn's debug file off the event loop; its result is the reply's
    ``debug_written``. A failure is logged and answered ``debug_written: false``, never an
    error: the event itself succeeded."""

    def __init__(self, debug_dir: str) -> None:
        self.debug_dir = debug_dir

    def start(
        self, session_id: str, turn: int, chunk_hashes: list[str], context: object
    ) -> asyncio.Future[bool] | None:
        """Start the write (None when ``context`` asks for no file): the map and turn are
        taken now, right after the apply."""
        if not isinstance(context, dict) or not wants_debug_file(context):
            return None
        return asyncio.ensure_future(self._write(session_id, turn, chunk_hashes, context))

    async def _write(
        self, session_id: str, turn: int, chunk_hashes: list[str], context: JsonObject
    ) -> bool:
        try:
            path = await asyncio.to_thread(
                write_debug_file, self.debug_dir, session_id, turn, chunk_hashes, context
            )
        except (OSError, ValueError, RecursionError) as err:  # ValueError: not UTF-8
            log.warning(
                "debug file write failed for session %s: %s",
                loggable(session_id),
                loggable(str(err), 500),
            )
            return False
        log.info("ram-a-kv debug file written path=%s", path)
        return True
