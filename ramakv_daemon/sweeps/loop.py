"""What the sweeps' background loops share: stopping one."""

from __future__ import annotations

import asyncio
import contextlib


async def stop(task: asyncio.Task[None] | None) -> None:
    """Cancel a sweep's loop and wait until it has ended (None: it never started)."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
