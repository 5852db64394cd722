"""Pending suspends and closes that outlive the proxy: the sessions' states and deadlines
as one JSON file, written atomically (a temporary file, fsync, rename), deadlines as
wall-clock times so a restarted proxy arms what is still due."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from ramakv_protocol.log_text import loggable
from ramakv_sdk.lifecycle.machine import SessionMachine, State

log = logging.getLogger("ramakv_proxy")

VERSION = 1
#: States worth keeping: something is pending, or the next request restores.
_KEPT = (State.IDLE, State.TOOL_PAUSE, State.RUN_END, State.SUSPENDED)


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/ram-a-kv/proxy``, else ``~/.local/state/ram-a-kv/proxy``."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(base) / "ram-a-kv" / "proxy"


def dump(
    machines: dict[str, SessionMachine], mono_now: float, wall_now: float, idle_s: float
) -> dict[str, Any]:
    """The sessions to keep; a request in flight is kept as idle (it dies with the proxy)."""
    out: dict[str, Any] = {}
    for sid, m in machines.items():
        if m.branch:
            continue
        if m.state is State.IN_FLIGHT:
            deadlines = {"idle": mono_now + idle_s} if idle_s > 0 else {}
            state = State.IDLE
        elif m.state in _KEPT:
            deadlines, state = m.deadlines, m.state
        else:
            continue
        if not deadlines and state is not State.SUSPENDED:
            continue
        out[sid] = {
            "state": state.value,
            "suspended_by": m.suspended_by,
            "final_at": None if m.final_at is None else m.final_at - mono_now + wall_now,
            "deadlines": {k: at - mono_now + wall_now for k, at in deadlines.items()},
        }
    return {"version": VERSION, "sessions": out}


def load(doc: Any, mono_now: float, wall_now: float) -> dict[str, SessionMachine]:
    """Machines from a dumped document (wall times back on the monotonic clock); rows
    that do not parse are skipped, logged."""
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        return {}
    machines: dict[str, SessionMachine] = {}
    for sid, row in (doc.get("sessions") or {}).items():
        try:
            final = row.get("final_at")
            state = State(row["state"])
            if state not in _KEPT:
                raise ValueError(f"state {state.value} is never kept")
            machines[str(sid)] = SessionMachine(
                state=state,
                suspended_by=row.get("suspended_by"),
                final_at=None if final is None else float(final) - wall_now + mono_now,
                deadlines={
                    str(k): float(at) - wall_now + mono_now
                    for k, at in (row.get("deadlines") or {}).items()
                },
            )
        except (AttributeError, KeyError, TypeError, ValueError) as err:
            log.warning("pending state of session %s skipped: %s", loggable(str(sid)), err)
    return machines


def write(path: Path, doc: dict[str, Any]) -> None:
    """Replace ``path`` with ``doc`` atomically: a crash leaves the old file or the new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read(path: Path) -> Any:
    """The document at ``path``; None when absent or unreadable (logged)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        log.warning("pending state file %s unreadable, starting empty: %s", path, err)
        return None
