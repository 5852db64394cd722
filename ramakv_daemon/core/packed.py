"""Stored chunk maps held as 8 bytes a hash: the signed 64-bit integer each canonical hash spells.

LMCache names a chunk by a signed 64-bit integer written in lowercase hex (``-742f18cebc2f4c4d``,
``77b73c60858dca07``). A Python string of that costs 66-72 bytes, the integer 8: at 50,000
sessions x 512 hashes the strings alone were 1.6 GiB. A map whose every hash has that canonical
form is held packed (:class:`PackedMap`); any other string keeps the map a tuple. The codec is a
bijection: ``code_of(text_of(v)) == v`` for every int64 and ``text_of(code_of(h)) == h`` for
every canonical ``h``, so nothing a host sent is ever rewritten.
"""

from __future__ import annotations

import re
import sys
from array import array
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import overload

_LOW = -(1 << 63)
_HIGH = (1 << 63) - 1
# One canonical hash: no leading zero, no "-0", inside int64 (16 digits only up to 7fff...,
# and the one 16-digit negative past it, -8000000000000000).
_ONE = r"(?:-?(?:[1-7][0-9a-f]{15}|[1-9a-f][0-9a-f]{0,14})|-8000000000000000|0)"
_MANY = re.compile(rf"{_ONE}(?:\n{_ONE})*")
_HEX = "{:x}".format  # one hash
_X = repeat("x")  # map(format, codes, _X): twice as fast as map(_HEX, codes)
_NATIVE = sys.byteorder == "little"


def code_of(h: str) -> int | None:
    """The int64 a canonical hash spells, or None when ``h`` is not canonical."""
    try:
        v = int(h, 16)
    except ValueError:
        return None
    # int() also takes "0x1f", "+1", " 1", "1_f", "01", "1F": only the exact spelling counts.
    if _LOW <= v <= _HIGH and _HEX(v) == h:
        return v
    return None


def text_of(code: int) -> str:
    """The hash an int64 spells (the inverse of :func:`code_of`)."""
    return _HEX(code)


def pack(hashes: Sequence[str]) -> bytes | None:
    """The map's codes as native int64 bytes, or None when a hash is not canonical."""
    if not hashes:
        return None
    try:
        joined = "\n".join(hashes)
    except TypeError:
        return None
    # A hash holding a newline would read as two: the count of separators says it did.
    if _MANY.fullmatch(joined) is None or joined.count("\n") != len(hashes) - 1:
        return None
    return array("q", map(int, hashes, repeat(16))).tobytes()


class PackedMap(Sequence[str]):
    """A chunk map as int64 codes; reads as the tuple of hash strings it stands for.

    Immutable like the tuple it replaces; equal to (and hashes like) that tuple, so a stored
    session compares equal however it is held. Iterating decodes each hash (~0.15 us), which
    the event that touches a session pays once for its map.
    """

    __slots__ = ("codes", "_text")

    def __init__(self, codes: bytes, text: tuple[str, ...] | None = None) -> None:
        """``text``: the same map as strings, kept until :meth:`take_text` (the store's
        write of a turn's new map then needs no decode)."""
        if len(codes) % 8:
            raise ValueError("packed map bytes must be a whole number of int64 codes")
        self.codes = codes
        self._text = text

    @classmethod
    def of(cls, hashes: Sequence[str], keep_text: bool = False) -> PackedMap | None:
        """``hashes`` packed, or None when one is not canonical (or the map is empty)."""
        codes = pack(hashes)
        if codes is None:
            return None
        return cls(codes, tuple(hashes) if keep_text else None)

    def take_text(self) -> tuple[str, ...]:
        """The map as strings, dropping the strings this map was made from if it kept them:
        from then on only the codes stay in memory."""
        text = self.as_tuple()
        self._text = None
        return text

    def ints(self) -> memoryview:
        """The codes as a read-only sequence of ints (no copy)."""
        return memoryview(self.codes).cast("q")

    def __len__(self) -> int:
        return len(self.codes) >> 3

    def __iter__(self) -> Iterator[str]:
        return map(format, memoryview(self.codes).cast("q"), _X)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        view = memoryview(self.codes).cast("q")
        if isinstance(index, slice):
            return tuple(map(_HEX, view[index]))
        return _HEX(view[index])

    def __contains__(self, value: object) -> bool:
        code = code_of(value) if isinstance(value, str) else None
        return code is not None and code in memoryview(self.codes).cast("q")

    def as_tuple(self) -> tuple[str, ...]:
        """The map as the tuple of strings it stands for."""
        text = self._text
        if text is not None:
            return text
        return tuple(map(format, memoryview(self.codes).cast("q"), _X))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedMap):
            return self.codes == other.codes
        if isinstance(other, tuple):
            return self.as_tuple() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.as_tuple())

    def __add__(self, other: Sequence[str]) -> tuple[str, ...]:
        return self.as_tuple() + tuple(other)

    def __repr__(self) -> str:
        return f"PackedMap({self.as_tuple()!r})"


def packed_like(
    held: tuple[str, ...] | PackedMap, old_hashes: tuple[str, ...], new_map: tuple[str, ...]
) -> tuple[str, ...] | PackedMap:
    """A turn's new map held as the old one was: packed when the old map was packed (only
    the new tail is encoded when the map grew, an agent's usual turn) or empty (a new
    session); a tuple map stays a tuple (it held a hash that is not canonical)."""
    if isinstance(held, PackedMap):
        n = len(old_hashes)
        if new_map[:n] == old_hashes:  # the same string objects: pointer compares
            if len(new_map) == n:
                return held
            tail = pack(new_map[n:])
            return new_map if tail is None else PackedMap(held.codes + tail, new_map)
        return PackedMap.of(new_map, keep_text=True) or new_map
    if not held:
        return PackedMap.of(new_map, keep_text=True) or new_map
    return new_map


def text_for_store(m: Sequence[str]) -> tuple[str, ...]:
    """A map's strings for a store's JSON; a packed map drops the strings it kept."""
    if isinstance(m, PackedMap):
        return m.take_text()
    return m if isinstance(m, tuple) else tuple(m)


def packed_from_store(blob: bytes) -> PackedMap:
    """A map as a store keeps it (little-endian int64 codes), on this machine's byte order."""
    if _NATIVE:
        return PackedMap(blob)
    codes = array("q", blob)
    codes.byteswap()
    return PackedMap(codes.tobytes())


def pack_for_store(hashes: Sequence[str]) -> bytes | None:
    """``hashes`` as a store keeps them (little-endian int64), or None (see :func:`pack`)."""
    codes = pack(hashes)
    if codes is None or _NATIVE:
        return codes
    return store_bytes(PackedMap(codes))


def store_bytes(m: PackedMap) -> bytes:
    """The little-endian form of ``m``'s codes, as stores keep them."""
    if _NATIVE:
        return m.codes
    codes = array("q", m.codes)
    codes.byteswap()
    return codes.tobytes()
