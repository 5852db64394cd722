"""The bus: a command's handler, found by the command's type, runs in the background lane
(client events first) and commits what it applied through the unit of work."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from ramakv_daemon.bus.commands import Command
from ramakv_daemon.commit.committer import GroupCommitter
from ramakv_daemon.commit.record import ChangeRecord, Reply
from ramakv_daemon.core.change import Change
from ramakv_daemon.events.lanes import Lanes
from ramakv_daemon.routing.namespaces import Namespace

R = TypeVar("R")


class UnitOfWork:
    """Commits one applied change: the keep it needs, its record, the commit it awaits
    (StoreError: rolled back, memory as the database holds it). What it commits is told
    by the committer's Committed (delivery's rows, the trace records of ``replies``)."""

    def __init__(self, committer: GroupCommitter) -> None:
        self.committer = committer

    async def settled(self) -> None:
        """Wait for every change in doubt: what follows decides from committed state."""
        if self.committer.busy:
            await self.committer.barrier()

    async def commit(self, ns: Namespace, change: Change, replies: Sequence[Reply] = ()) -> None:
        """Commit ``change`` of ``ns`` just applied (before any await: its rows as they
        stand now are its own). A chunk it references again while its evict may still act
        gets a keep, which the commit waits for."""
        keep = ns.dispatcher.keep_for(change.prev_counts) if change.durable else None
        record = ChangeRecord.of(
            ns.key,
            change,
            ns.manager,
            kept=keep[1] if keep is not None else (),
            replies=replies,
            gate=keep[0] if keep is not None else None,
        )
        await self.committer.submit(record)


# A command's handler: applies it (synchronously, so no read sees it half done), commits
# through the unit of work, and answers.
Handler = Callable[[Any, UnitOfWork], Awaitable[Any]]


class MessageBus:
    """``handle(command)``: its handler in the background lane, ``in_flight`` at a time,
    after the changes in doubt when the command says ``settled``. Built by the composition
    root with every handler; nothing is registered later."""

    def __init__(
        self, handlers: Mapping[type[Command[Any]], Handler], lanes: Lanes, uow: UnitOfWork
    ):
        self.handlers = dict(handlers)
        self.lanes = lanes
        self.uow = uow

    async def handle(self, command: Command[R]) -> R:
        """Run ``command``'s handler; its answer (KeyError: no handler for its type)."""
        handler = self.handlers[type(command)]
        async with self.lanes.background():
            if command.settled:
                await self.uow.settled()  # never decide from a change still in doubt
            return cast(R, await handler(command, self.uow))
