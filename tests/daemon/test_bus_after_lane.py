"""A background command's commit is awaited outside its lane (the bus's AfterLane): the
next background command applies while the first's commit is still being written."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ramakv_daemon.bus.commands import Command
from ramakv_daemon.bus.messagebus import AfterLane, MessageBus
from ramakv_daemon.pipeline.lanes import Lanes


@dataclass(frozen=True, slots=True)
class Step(Command[str]):
    """Background work: applied in the lane, its answer once ``done`` resolves."""

    name: str
    done: asyncio.Future[None]


async def test_a_commit_is_awaited_outside_the_lane() -> None:
    applied: list[str] = []

    async def step(command: Step, uow: Any) -> AfterLane[str]:
        applied.append(command.name)

        async def committed() -> str:
            await command.done
            return command.name

        return AfterLane(committed())

    lanes = Lanes(in_flight=1)
    bus = MessageBus(lambda dispatch: {Step: step}, lanes, uow=None)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    first_done, second_done = loop.create_future(), loop.create_future()
    first = asyncio.create_task(bus.handle(Step("a", first_done)))
    second = asyncio.create_task(bus.handle(Step("b", second_done)))
    # The first's commit is pending; the lane is free and the second has applied.
    while applied != ["a", "b"]:
        await asyncio.sleep(0)
    assert lanes.background_running == 0 and not first.done()
    second_done.set_result(None)
    assert await second == "b"
    first_done.set_result(None)
    assert await first == "a"


async def test_an_answer_without_after_lane_is_returned_in_the_lane() -> None:
    async def plain(command: Step, uow: Any) -> str:
        return command.name

    lanes = Lanes(in_flight=1)
    bus = MessageBus(lambda dispatch: {Step: plain}, lanes, uow=None)  # type: ignore[arg-type]
    assert await bus.handle(Step("x", asyncio.get_running_loop().create_future())) == "x"
