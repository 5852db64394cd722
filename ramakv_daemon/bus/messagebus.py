"""The bus: a command's handler, found by the command's type, runs in its lane (client
events first: background work waits for the background lane) and commits what it applied
through the unit of work; a handler that sends commands of its own sends them here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar, cast

from ramakv_daemon.bus.commands import Command
from ramakv_daemon.pipeline.lanes import Lanes
from ramakv_daemon.pipeline.unit_of_work import UnitOfWork

R = TypeVar("R")


# A command's handler: applies it (synchronously, so no read sees it half done), commits
# through the unit of work, and answers.
Handler = Callable[[Any, UnitOfWork], Awaitable[Any]]


class Dispatch(Protocol):
    """The bus's ``handle``, all a handler that sends commands of its own is given (a
    check's releases, a client event's release check and adopt)."""

    def __call__(self, command: Command[R]) -> Awaitable[R]: ...


# What builds every handler, given the bus's dispatch: the bus calls it once, as it is
# built, so a handler holds the bus from its construction and nothing is set later.
Handlers = Callable[[Dispatch], Mapping[type[Command[Any]], Handler]]


class MessageBus:
    """``handle(command)``: a client's command at once (counted in the lanes: background
    work yields to it), an immediate one (ownership's releases) at once in no lane,
    background work in the background lane, ``in_flight`` at a time,
    after the changes in doubt when the command says ``settled``. Built by the composition
    root; ``handlers`` builds every handler here, given ``handle`` (the handlers that send
    commands need the bus, the bus needs the handlers: neither is bound after the other is
    built); nothing is registered later."""

    def __init__(self, handlers: Handlers, lanes: Lanes, uow: UnitOfWork) -> None:
        self.lanes = lanes
        self.uow = uow
        self.handlers = dict(handlers(self.handle))

    async def handle(self, command: Command[R]) -> R:
        """Run ``command``'s handler; its answer (KeyError: no handler for its type)."""
        handler = self.handlers[type(command)]
        if command.immediate:  # no lane: a client's event may wait for it
            return cast(R, await handler(command, self.uow))
        if command.client:
            lanes = self.lanes
            lanes.clients += 1  # Lanes.client() inline: no generator per event
            try:
                return cast(R, await handler(command, self.uow))
            finally:
                lanes.client_done()
        async with self.lanes.background():
            if command.settled:
                await self.uow.settled()  # never decide from a change still in doubt
            return cast(R, await handler(command, self.uow))
