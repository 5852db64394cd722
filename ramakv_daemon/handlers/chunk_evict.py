"""chunk_evict (admin): evict unreferenced chunks; referenced ones only with force."""

from __future__ import annotations

from typing import Self

from ramakv_daemon.core.catalogue import (
    JsonObject,
    Limits,
    bool_of,
    chunk_hashes_of,
    chunk_hashes_value,
)
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent
from ramakv_daemon.handlers.messages import Message
from ramakv_daemon.handlers.registry import HandlerContext, typed_event


class ChunkEvict(Message, frozen=True, tag="chunk_evict"):
    """chunk_evict's message: at least one hash."""

    chunk_hashes: tuple[str, ...]
    dry_run: bool = False
    force: bool = False

    def check(self, limits: Limits) -> None:
        chunk_hashes_value(self.chunk_hashes, limits, "chunk_hashes")
        if not self.chunk_hashes:
            raise InvalidEvent("'chunk_hashes' must not be empty")

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        hashes = chunk_hashes_of(payload.get("chunk_hashes"), limits)
        dry_run = bool_of(payload, "dry_run")
        force = bool_of(payload, "force")
        if not hashes:
            raise InvalidEvent("'chunk_hashes' must not be empty")
        return cls(tuple(hashes), dry_run, force)


@typed_event(
    ChunkEvict,
    "Admin: delete chunks from every cache tier. Referenced chunks are refused (with their "
    "holders) unless force=true, which first drops them from the holders' maps and fork "
    "holds. dry_run=true reports and changes nothing",
)
def chunk_evict(ctx: HandlerContext, msg: ChunkEvict, now: float) -> Change:
    force, dry_run = msg.force, msg.dry_run
    change = ctx.manager.chunk_evict(msg.chunk_hashes, force=force, dry_run=dry_run, now=now)
    if force and change.data["released"] and not dry_run:
        change.facts.forced = True
    return change
