"""Typed events: one frozen msgspec Struct per event, tagged by its wire ``type``; decoding is
validation, and today's field checks give the words of what a decode refuses."""

from __future__ import annotations

from typing import ClassVar, Self, TypeVar

import msgspec

from ramakv_daemon.core.catalogue import JsonObject, Limits, chunk_hashes_of, chunk_hashes_value
from ramakv_daemon.core.change import as_data as as_data  # the handlers' name for it


class Message(msgspec.Struct, frozen=True, tag_field="type"):
    """One event as its handler takes it (fields beyond the declared ones, such as
    ``namespace`` or ``event_id``, are read by the pipeline from the payload, as before).

    A subclass names its tag (the event's ``type``) and defines ``check`` (the rules its
    field types do not say: lengths, limits, NUL, finite numbers) and ``parse`` (the
    payload checked field by field, in the order and with the error texts clients have
    always had). A fast decode that fails is never answered with msgspec's words: the
    handler then runs ``parse``, which raises today's error or, where msgspec was the
    stricter of the two (``"prefetch": null``), returns the message after all.
    """

    # Fields the handler reads but list_events never listed (list_sessions' namespace,
    # which the pipeline resolves for every event): the spec leaves them out.
    UNLISTED: ClassVar[frozenset[str]] = frozenset()

    def check(self, limits: Limits) -> None:
        """Raise InvalidEvent on a value the field types let through."""

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        """The message of ``payload`` by today's checks (their texts, their order)."""
        raise NotImplementedError(cls.__name__)


class ChunkListMessage(Message, frozen=True):
    """An admin event that names chunks and nothing else (chunk_info, backend_query)."""

    chunk_hashes: tuple[str, ...]

    def check(self, limits: Limits) -> None:
        chunk_hashes_value(self.chunk_hashes, limits, "chunk_hashes")

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        return cls(tuple(chunk_hashes_of(payload.get("chunk_hashes"), limits)))


M = TypeVar("M", bound=Message)


def decode(cls: type[M], payload: JsonObject, limits: Limits) -> M | None:
    """``payload`` as a ``cls``, or None when the fast decode refuses it: then
    ``cls.parse`` decides where the handler's checks have always run, so an error's text
    and its precedence over the pipeline's own checks (the namespace, a takeover) stay."""
    try:
        msg = msgspec.convert(payload, cls)
        msg.check(limits)
    except Exception:  # noqa: BLE001
        # Whatever it was (a ValidationError, a rule's InvalidEvent, msgspec failing to
        # word an error about a lone surrogate), today's checks answer it.
        return None
    return msg


def tag_of(cls: type[Message]) -> str:
    """The wire ``type`` of a message class."""
    tag = cls.__struct_config__.tag
    if not isinstance(tag, str):
        raise TypeError(f"{cls.__name__} has no string tag")
    return tag


def fields_of(cls: type[Message]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(required, optional) field names of a message, in their declared order: what
    ``list_events`` says of the event."""
    fields = [f for f in msgspec.structs.fields(cls) if f.encode_name not in cls.UNLISTED]
    return (
        tuple(f.encode_name for f in fields if f.required),
        tuple(f.encode_name for f in fields if not f.required),
    )


class Bare(Message, frozen=True):
    """An event with no fields of its own (health, list_events, list_namespaces)."""

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        return cls()
