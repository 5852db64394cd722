"""Answers to events that carried an ``event_id``, kept for a bounded window."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any


class AnswerCache:
    """event_id -> first answer (LRU-bounded), plus the futures of ids still in flight."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._answers: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.inflight: dict[str, asyncio.Future[tuple[int, dict[str, Any]]]] = {}

    def get(self, event_id: str) -> dict[str, Any] | None:
        """The remembered answer, or None."""
        return self._answers.get(event_id)

    def remember(self, event_id: str, body: dict[str, Any]) -> None:
        """Keep ``body`` as the answer to ``event_id``; forget the oldest past capacity."""
        self._answers[event_id] = body
        self._answers.move_to_end(event_id)
        while len(self._answers) > self.capacity:
            self._answers.popitem(last=False)

    def __len__(self) -> int:
        return len(self._answers)
