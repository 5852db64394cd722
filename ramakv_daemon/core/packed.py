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
from collections import deque
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import overload

_LOW = -(1 << 63)
_HIGH = (1 << 63) - 1
# One canonical hash: no leading zero, no "-0", inside int64 (16 digits only up to 7fff...,
# and the one 16-digit negative past it, -8000000000000000).
_ONE = r"(?:-?(?:[1-7][0-9a-f]{15}|[1-9a-f][0-9a-f]{0,14})|-8000000000000000|0)"
_MANY = re.compile(rf"{_ONE}(?:\n{_ONE})*")
_FIRST = re.compile(_ONE)
_HEX = "{:x}".format  # one hash
_SPELLING = b"0123456789abcdef-\n"
_X = repeat("x")  # map(format, codes, _X): twice as fast as map(_HEX, codes)
_NATIVE = sys.byteorder == "little"
# The hashes whose strings the newest maps keep: 64 Ki hashes is ~5 MiB of strings, enough for
# the maps of a thousand sessions at 64 chunks (the 256 of the throughput benchmark four times).
TEXT_KEPT_HASHES = 1 << 16


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
    first = hashes[0]
    # A map of names ("s3-c17") is refused at its first hash, before any work on the rest.
    if not isinstance(first, str) or _FIRST.fullmatch(first) is None:
        return None
    try:
        joined = "\n".join(hashes)
    except TypeError:
        return None
    raw = joined.encode()
    # Only hex digits, "-" and the separators, all ASCII (about a tenth of the regex's cost);
    # a hash holding a newline would read as two: the count of separators says it did.
    if (
        len(raw) != len(joined)
        or raw.translate(None, _SPELLING)
        or (raw.count(b"\n") != len(hashes) - 1)
    ):
        return None
    # What int() takes beyond that: a leading zero, "-0", "--": rare, so the full check
    # runs only when one may be there. int() refuses a misplaced "-" or an empty hash, and
    # the int64 array a value outside int64.
    if (raw[:1] == b"0" or b"\n0" in raw or b"-0" in raw or b"--" in raw) and (
        _MANY.fullmatch(joined) is None
    ):
        return None
    try:
        return array("q", map(int, hashes, repeat(16))).tobytes()
    except (ValueError, OverflowError):
        return None


def _common_prefix(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """How many leading hashes ``a`` and ``b`` share (a binary search over slice compares,
    which run in C: pointer compares when they are the same string objects)."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:  # one map holds the whole other (a grown map): one compare
        return hi
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def repacked(codes: bytes, old: tuple[str, ...], new: tuple[str, ...]) -> bytes | None:
    """``new``'s codes, reusing ``old``'s (``codes``) where ``new`` keeps them in order.

    The turns of an agent keep runs of the last map: a grown map keeps all of it, a slid
    window keeps a prefix (the system prompt) and a later run. Those runs are copied as
    bytes; only the rest is parsed (~0.2 us a hash). None when a new hash is not canonical.
    """
    p = _common_prefix(old, new)
    if p == len(new):
        return codes[: p << 3]
    q, k = p, 0
    try:
        q = old.index(new[p], p)
    except ValueError:
        pass
    else:
        k = _common_prefix(old[q:], new[p:])
    rest = new[p + k :]
    if not rest:
        return codes[: p << 3] + codes[q << 3 : (q + k) << 3]
    tail = pack(rest)
    if tail is None:
        return None
    return codes[: p << 3] + codes[q << 3 : (q + k) << 3] + tail


class KeptText:
    """The packed maps that keep their strings: the newest, up to a budget of hashes.

    A turn_end diffs the session's held map against the engine's new one, which needs the held
    map's strings: decoding 64 hashes cost ~9 us of a ~200 us event. The map a turn makes is the
    one its session's next turn diffs against, so the newest maps keep the strings they were
    made from. Older ones drop them in the order they were made: memory stays bounded (a map
    replaced since is held here until its turn to drop comes, and counted in the budget).
    Only the event loop adds (maps are made there); a store's thread only reads ``_text``.
    """

    def __init__(self, budget: int = TEXT_KEPT_HASHES) -> None:
        self.budget = budget
        self.held = 0  # hashes of the maps in ``_order``
        self._order: deque[PackedMap] = deque()

    def add(self, m: PackedMap) -> None:
        """Keep ``m``'s strings; the oldest kept maps drop theirs past the budget."""
        self._order.append(m)
        self.held += len(m)
        while self.held > self.budget:
            old = self._order.popleft()
            self.held -= len(old)
            old.drop_text()

    def clear(self) -> None:
        """Every kept map drops its strings."""
        while self._order:
            self._order.popleft().drop_text()
        self.held = 0


class PackedMap(Sequence[str]):
    """A chunk map as int64 codes; reads as the tuple of hash strings it stands for.

    Immutable like the tuple it replaces; equal to (and hashes like) that tuple, so a stored
    session compares equal however it is held. Decoding costs ~0.15 us a hash: a map made from
    strings keeps them while it is among the newest (:class:`KeptText`), so the store's write
    of a turn's new map and the session's next turn read them without a decode.
    """

    __slots__ = ("codes", "_text")

    def __init__(self, codes: bytes, text: tuple[str, ...] | None = None) -> None:
        """``text``: the same map as strings, kept while the map is among the newest."""
        if len(codes) % 8:
            raise ValueError("packed map bytes must be a whole number of int64 codes")
        self.codes = codes
        self._text = text
        if text is not None:
            KEPT.add(self)

    @classmethod
    def of(cls, hashes: Sequence[str], keep_text: bool = False) -> PackedMap | None:
        """``hashes`` packed, or None when one is not canonical (or the map is empty)."""
        codes = pack(hashes)
        if codes is None:
            return None
        return cls(codes, tuple(hashes) if keep_text else None)

    def keeps_text(self) -> bool:
        """Whether the map holds its strings now (reading it needs no decode)."""
        return self._text is not None

    def drop_text(self) -> None:
        """Forget the strings: from then on only the codes stay in memory."""
        self._text = None

    def ints(self) -> memoryview:
        """The codes as a read-only sequence of ints (no copy)."""
        return memoryview(self.codes).cast("q")

    def __len__(self) -> int:
        return len(self.codes) >> 3

    def __iter__(self) -> Iterator[str]:
        text = self._text
        if text is not None:
            return iter(text)
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


KEPT = KeptText()


def packed_like(
    held: tuple[str, ...] | PackedMap, old_hashes: tuple[str, ...], new_map: tuple[str, ...]
) -> tuple[str, ...] | PackedMap:
    """A turn's new map held as the old one was: packed when the old map was packed (only
    what the old map did not hold in that order is encoded: :func:`repacked`) or empty (a new
    session); a tuple map stays a tuple (it held a hash that is not canonical)."""
    if isinstance(held, PackedMap):
        if new_map == old_hashes:  # the same string objects: pointer compares
            return held
        codes = repacked(held.codes, old_hashes, new_map) if new_map else None
        return new_map if codes is None else PackedMap(codes, new_map)
    if not held:
        return PackedMap.of(new_map, keep_text=True) or new_map
    return new_map


def text_for_store(m: Sequence[str]) -> tuple[str, ...]:
    """A map's strings for a store's JSON (the strings a new packed map keeps: no decode)."""
    if isinstance(m, PackedMap):
        return m.as_tuple()
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
