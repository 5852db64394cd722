"""``async with`` for the SDK's objects that close with ``aclose()``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self


class AsyncClosing(ABC):
    """``async with obj:`` yields ``obj`` and awaits ``obj.aclose()`` on the way out."""

    @abstractmethod
    async def aclose(self) -> None:
        """Release what the object holds."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
