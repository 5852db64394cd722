"""Fork holds: a snapshot of a session's chunks, held by id until fork_end or expiry."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Fork:
    """One open fork: +1 on each of ``hashes`` until its fork_end or its expiry.

    A fork belongs to the fork, not to the parent: it outlives the parent's close (the
    subagent may still be running), so it is kept apart from the session's record.

    Attributes:
        fork_id: unique in the store, increasing, never reused.
        session_id: the parent session (it may have been closed since).
        hashes: the parent's unique hashes when the fork was taken.
        created_ts: wall-clock time of the session_fork (its age decides expiry).
        namespace: the parent's namespace.
    """

    fork_id: int
    session_id: str
    hashes: tuple[str, ...]
    created_ts: float
    namespace: str = ""

    def age(self, now: float) -> float:
        """Seconds since the fork was taken (never negative)."""
        return max(0.0, now - self.created_ts)

    def summary(self) -> dict[str, object]:
        """The small JSON shape of the trace, list_sessions and the console."""
        out: dict[str, object] = {
            "fork_id": self.fork_id,
            "session_id": self.session_id,
            "created_ts": self.created_ts,
            "chunk_count": len(self.hashes),
        }
        if self.namespace:
            out["namespace"] = self.namespace
        return out


class ForkIds:
    """The store-wide fork id counter, shared by every namespace's manager.

    Never rolled back: an id handed to a change whose commit then failed is skipped, so an
    id is never given twice. The store persists the counter, so it survives restarts.
    """

    def __init__(self, next_id: int = 1) -> None:
        self.next_id = max(1, next_id)

    def take(self) -> int:
        """A fresh id."""
        fid = self.next_id
        self.next_id += 1
        return fid

    def seen(self, fork_id: int) -> None:
        """Make sure later ids are above ``fork_id`` (a loaded fork)."""
        self.next_id = max(self.next_id, fork_id + 1)


class ForkBook:
    """One namespace's open forks by id, with an index by parent session."""

    def __init__(self) -> None:
        self.by_id: dict[int, Fork] = {}
        self._by_session: dict[str, set[int]] = {}

    def __len__(self) -> int:
        return len(self.by_id)

    def __contains__(self, fork_id: object) -> bool:
        return fork_id in self.by_id

    def get(self, fork_id: int) -> Fork | None:
        """The open fork ``fork_id``, or None."""
        return self.by_id.get(fork_id)

    def values(self) -> list[Fork]:
        """Every open fork, oldest first."""
        return [self.by_id[i] for i in sorted(self.by_id)]

    def of(self, session_id: str) -> list[Fork]:
        """The session's open forks, oldest first (its parent may be closed)."""
        ids = self._by_session.get(session_id)
        return [self.by_id[i] for i in sorted(ids)] if ids else []

    def count(self, session_id: str) -> int:
        """How many forks of the session are open."""
        return len(self._by_session.get(session_id, ()))

    def parents(self) -> list[str]:
        """Every session id with an open fork."""
        return list(self._by_session)

    def put(self, fork: Fork) -> None:
        """Add or replace a fork."""
        self.by_id[fork.fork_id] = fork
        self._by_session.setdefault(fork.session_id, set()).add(fork.fork_id)

    def drop(self, fork_id: int) -> None:
        """Forget a fork (absent: nothing)."""
        fork = self.by_id.pop(fork_id, None)
        if fork is None:
            return
        ids = self._by_session[fork.session_id]
        ids.discard(fork_id)
        if not ids:
            del self._by_session[fork.session_id]
