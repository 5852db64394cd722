"""The daemon's entry for one decoded request body: the event_id protocol or the pipeline."""

from __future__ import annotations

from ramakv_daemon.events.idempotency import EventIds, Reply
from ramakv_daemon.events.lanes import Lanes
from ramakv_daemon.events.pipeline import Pipeline


class EventService:
    """Handles one event end to end (HTTP and in-process callers alike)."""

    def __init__(self, pipeline: Pipeline, event_ids: EventIds, lanes: Lanes | None = None) -> None:
        """``lanes``: where client events are counted, so background work yields to them."""
        self.pipeline = pipeline
        self.event_ids = event_ids
        self.lanes = lanes if lanes is not None else Lanes()

    async def handle(self, payload: object) -> Reply:
        """Handle one decoded JSON body; returns (HTTP status, response envelope).

        An ``event_id`` makes the event idempotent: a retry gets the first answer back
        (remembered durably with the change, for ``idempotency_window`` ids).
        """
        if not isinstance(payload, dict):
            return 400, {"ok": False, "error": "request body must be a JSON object"}
        lanes = self.lanes
        lanes.clients += 1  # Lanes.client() inline: no generator per event
        try:
            if "event_id" not in payload:
                return await self.pipeline.run(payload, None)
            return await self.event_ids.handle(payload)
        finally:
            lanes.client_done()
