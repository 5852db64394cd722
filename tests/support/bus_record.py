"""Record the commands a daemon's bus handles, with their answers, in the order they start."""

from __future__ import annotations

from typing import Any

from ramakv_daemon.bootstrap import Daemon
from ramakv_daemon.bus.commands import Command
from ramakv_daemon.pipeline.unit_of_work import UnitOfWork


def record_commands(d: Daemon, *types: type[Command[Any]]) -> list[tuple[str, Any]]:
    """The commands of ``types`` ``d``'s bus handles from now on, in the order they start:
    (name, answer; None until the handler returns)."""
    handled: list[tuple[str, Any]] = []
    for type_ in types:
        real = d.bus.handlers[type_]

        async def counted(command: Any, uow: UnitOfWork, real: Any = real) -> Any:
            at = len(handled)
            handled.append((type(command).__name__, None))
            answer = await real(command, uow)
            handled[at] = (handled[at][0], answer)
            return answer

        d.bus.handlers[type_] = counted
    return handled
