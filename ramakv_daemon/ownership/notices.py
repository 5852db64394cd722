"""What the store and the committer tell ownership, kept until its checker takes it."""

from __future__ import annotations

import asyncio
import logging

from ramakv_daemon.commit.record import Fenced, Subscriber

log = logging.getLogger("ramakv.ownership")


class Notices(Subscriber):
    """Sessions to check against the database: those the store heard another node took
    (or an admin closed), and those a fenced commit found changed elsewhere (stale here
    until released). Built before the committer, which tells it :meth:`fenced`, and the
    ownership that reads it: nothing is bound to either afterwards. A commit's Subscriber
    for its fences only."""

    def __init__(self) -> None:
        # Their copies here are stale until released: the next event for one releases it
        # before it claims the row.
        self.stale: set[str] = set()
        self.due: set[str] = set()  # notified, not checked yet
        self.fences = 0  # fenced commits (a session another node had changed)
        self.wake = asyncio.Event()  # ownership's checker waits on it

    def notified(self, session_id: str, _new_owner: str = "") -> None:
        """Check ``session_id`` against the database soon (notices arriving meanwhile join
        the check); the store's release callback."""
        self.due.add(session_id)
        self.wake.set()

    def on_fenced(self, event: Fenced) -> None:
        """Its part as a commit's Subscriber (nothing written, every change undone): the
        sessions' copies here are stale, each checked soon, and an event for one waits for
        that before it applies (told before any refused event resumes)."""
        self.fences += 1
        log.info("fenced write: %d sessions changed on another node", len(event.sessions))
        self.stale.update(event.sessions)
        self.due.update(event.sessions)
        self.wake.set()

    def take_due(self) -> set[str]:
        """The sessions to check now."""
        due, self.due = self.due, set()
        return due
