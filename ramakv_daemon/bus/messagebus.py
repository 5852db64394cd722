"""The bus: a command's handler, found by the command's type, runs in the background lane
(client events first) and commits what it applied through the unit of work."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, cast

from ramakv_daemon.bus.commands import Command
from ramakv_daemon.events.lanes import Lanes
from ramakv_daemon.events.unit_of_work import UnitOfWork

R = TypeVar("R")


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
