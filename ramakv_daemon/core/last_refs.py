"""Evidence for deletes: when each unreferenced chunk was last referenced, and which chunks
several sessions shared recently (a system prompt); the retention sweep reads it."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence


class LastRefs:
    """The retention window's bookkeeping (seconds; 0 = a chunk no one names is dead at
    once, and nothing counts as shared).

    ``released`` holds hash -> (time of its last reference, the session that held it) for
    the chunks no live map or fork references and no suspended map names, in release
    order: the retention sweep looks at its oldest entries only. ``shared_at`` holds hash
    -> the last time two sessions referenced it (both held it at once, or one took it up
    within the window after another let it go).

    Advisory like a session's last_event_ts: an undone change leaves its stamps (the sweep
    checks the refcounts and the parked table before it deletes anything), and a restart
    knows only the chunks its sessions name, stamped at the load (``loaded``).
    """

    __slots__ = ("window_s", "released", "shared_at")

    def __init__(self, window_s: float = 0.0) -> None:
        self.window_s = window_s
        self.released: dict[str, tuple[float, str]] = {}
        self.shared_at: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self.released)

    def referenced(
        self,
        hashes: Collection[str],
        session_id: str,
        now: float,
        held: Mapping[str, int],
        parked: Mapping[str, int],
    ) -> None:
        """``session_id`` takes up ``hashes`` (before their counts go up): a chunk someone
        else holds or names, or let go of within the window, is shared from now on."""
        released, window = self.released, self.window_s
        if window <= 0:
            if released:
                for h in hashes:
                    released.pop(h, None)
            return
        shared = self.shared_at
        if not released or released.keys().isdisjoint(hashes):
            # Usually so (none was let go of): only those held by someone else now count.
            for h in [h for h in hashes if h in held]:
                shared.pop(h, None)  # re-inserted: the dict stays in time order
                shared[h] = now
            return
        for h in hashes:
            last = released.pop(h, None)
            if h in held or (
                last is not None and last[1] != session_id and now - last[0] <= window
            ):
                shared.pop(h, None)  # re-inserted: the dict stays in time order
                shared[h] = now

    def holding(self, hashes: Iterable[str], now: float) -> None:
        """``hashes`` are held by two or more right now (about to lose one holder)."""
        if self.window_s <= 0:
            return
        shared = self.shared_at
        for h in hashes:
            shared.pop(h, None)
            shared[h] = now

    def released_now(self, hashes: Collection[str], session_id: str, now: float) -> None:
        """``hashes`` lost their last name now (kept in the cache, cold)."""
        released = self.released
        if released and not released.keys().isdisjoint(hashes):
            for h in hashes:
                released.pop(h, None)  # re-inserted: the dict stays in release order
        released.update(dict.fromkeys(hashes, (now, session_id)))

    def named(self, hashes: Collection[str]) -> None:
        """``hashes`` are named again (a suspended map lists them): not dead."""
        released = self.released
        if released and not released.keys().isdisjoint(hashes):
            for h in hashes:
                released.pop(h, None)

    def shared_recently(self, h: str, now: float) -> bool:
        """True when two sessions referenced ``h`` within the window."""
        at = self.shared_at.get(h)
        return at is not None and now - at <= self.window_s

    def unshared(self, hashes: Sequence[str], now: float) -> Sequence[str]:
        """Those of ``hashes`` not shared recently (:meth:`shared_recently`), in order."""
        shared = self.shared_at
        if not shared or shared.keys().isdisjoint(hashes):
            return hashes
        return [h for h in hashes if not self.shared_recently(h, now)]

    def forget(self, hashes: Collection[str]) -> None:
        """``hashes`` are deleted from the cache: no evidence is kept for them any more."""
        for table in (self.released, self.shared_at):
            if table and not table.keys().isdisjoint(hashes):
                for h in hashes:
                    table.pop(h, None)

    def dead(
        self,
        now: float,
        limit: int,
        refcounts: Collection[str],
        parked: Collection[str],
    ) -> list[str]:
        """Up to ``limit`` chunks dead by evidence: no one names them and their last
        reference is older than the window (oldest first). Stale entries (a chunk named
        again through an undo) are dropped on the way."""
        cutoff = now - self.window_s
        out: list[str] = []
        stale: list[str] = []
        for h, (ts, _sid) in self.released.items():
            if ts > cutoff or len(out) >= limit:
                break
            if h in refcounts or h in parked:
                stale.append(h)
            elif not self.shared_recently(h, now):
                out.append(h)
        for h in stale:
            del self.released[h]
        return out

    def prune_shared(self, now: float, limit: int) -> int:
        """Forget up to ``limit`` shared stamps older than the window; how many went."""
        cutoff = now - self.window_s
        shared = self.shared_at
        old: list[str] = []
        for h, at in shared.items():
            if at > cutoff or len(old) >= limit:
                break
            old.append(h)
        for h in old:
            del shared[h]
        return len(old)

    def loaded(self, shared: Iterable[str], now: float) -> None:
        """After a restart: every chunk the loaded sessions and forks hold twice or more
        counts as shared at the load ("last reference = load time"); a chunk no one
        named at the restart is unknown here (the cache's own LRU ages it out)."""
        self.released = {}
        self.shared_at = dict.fromkeys(shared, now) if self.window_s > 0 else {}
