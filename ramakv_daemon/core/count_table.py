"""A hash -> count table held mostly as two flat arrays: the bulk a start-up loads, 12 bytes a hash.

A dict of 22 M hash strings costs ~100 bytes an entry (the string, the entry, the index); a
start-up at 50,000 sessions x 512 hashes then held 3.2 GiB. The loaded hashes' int64 codes
(core.packed) go into a sorted array with an int32 count beside each (0 = absent, the key
kept so the hash can come back); every other hash (a later one, or one that is not canonical)
goes into a plain dict. A hash lives in exactly one of the two, so every count is read in one
place. A lookup bisects the array (~1 us hot, ~3 us on a large table's cold memory); a step
over many hashes at once (a suspend's 512) searches them together, each in its bucket of ~8
keys (:meth:`CountTable.add_one`, :meth:`CountTable.take_one`). The table behaves as the
dict it stands in for.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import Any

from ramakv_daemon.core.packed import PackedMap, code_of, pack, text_of

_MISSING: Any = object()
# From this many hashes on, a step over them looks their slots up at once (numpy): a
# Python bisect per hash on the arrays of a large start-up costs ~3 us (a 512-hash suspend
# spent 2 ms in them), the vectorised search ~0.4 us a hash, the hashes' parse included.
BULK = 32
# Slots remembered by hash string: an event looks each of its hashes up several times (the
# change, its trace delta, its delivery), and a slot never changes (the keys are fixed).
# Emptied whole when full: freeing 65,536 strings at once took ~1.4 ms, the p99 of a
# restart's idle sweep steps (one in 128 of its 512-hash suspends); 16,384 (32 suspends,
# 256 turn_ends of 64 hashes) still outlives an event's delivery.
SLOT_CACHE = 1 << 14


class CountTable(MutableMapping[str, int]):
    """hash -> positive count; zero counts are absent, as in the dict it replaces.

    Args:
        keys: sorted, distinct int64 codes (any buffer: a numpy array, bytes).
        counts: an int32 count per key, writable (a numpy array, a bytearray).
        extra: counts of hashes outside ``keys``; adopted, not copied.
        live: how many of ``counts`` are not zero, when the caller knows (else counted).
    """

    __slots__ = (
        "_extra",
        "_keys",
        "_counts",
        "_kv",
        "_cv",
        "_live",
        "_codes",
        "_filter",
        "_shift",
        "_starts",
        "_slots",
        "_last",
    )

    def __init__(
        self,
        keys: object,
        counts: object,
        extra: dict[str, int] | None = None,
        live: int | None = None,
    ) -> None:
        self._keys, self._counts = keys, counts  # the buffers the views read
        self._kv = memoryview(keys).cast("B").cast("q")  # type: ignore[arg-type]
        self._cv = memoryview(counts).cast("B").cast("i")  # type: ignore[arg-type]
        if len(self._kv) != len(self._cv):
            raise ValueError("a count table needs one count per key")
        self._extra = extra if extra is not None else {}
        self._live = len(self._cv) - self._cv.tolist().count(0) if live is None else live
        # Built by the first bulk read, then kept up to date (a table never read in bulk
        # pays nothing on the event path): the codes of the dict's canonical hashes, a
        # bitmap of every code ever held (code_filter), the keys' buckets (bucket_starts).
        self._codes: set[int] | None = None
        self._filter: bytearray | None = None
        self._shift = 0
        self._starts: tuple[Any, int] | None = None  # see bucket_starts
        self._slots: dict[str, int] = {}  # hash -> _slot's answer, at most SLOT_CACHE
        # The last bulk search by codes: [codes, slots]. A suspend steps the parked table
        # and the refcounts (beside it: the same keys) over the same codes; one search.
        self._last: list[Any] = [None, None]

    def _slot(self, h: str) -> int:
        """Index of ``h``'s code among the keys, or -1 (not canonical, or not a key)."""
        slots = self._slots
        i = slots.get(h)
        if i is not None:
            return i
        code = code_of(h)
        if code is None:
            i = -1
        else:
            kv = self._kv
            i = bisect_left(kv, code)
            if i >= len(kv) or kv[i] != code:
                i = -1
        if len(slots) >= SLOT_CACHE:
            slots.clear()  # the hashes of the events since: cheaper than an LRU's upkeep
        slots[h] = i
        return i

    def _bulk_slots(self, hashes: Sequence[str], codes: bytes | None) -> Any:
        """Each hash's index among the keys, or -1 (a numpy array, in order), or None when
        a hash is not canonical or is listed twice (the per-hash path then). ``codes``:
        the hashes' int64 codes when the caller has them (else parsed here)."""
        import numpy as np

        if codes is None:
            codes = hashes.codes if isinstance(hashes, PackedMap) else pack(hashes)
        if codes is None:
            return None
        last = self._last
        if codes is last[0]:  # the same bytes object: the same hashes, already remembered
            return last[1]
        keys = self._keys_array()
        if not len(keys):
            return None
        wanted = np.frombuffer(codes, dtype=np.int64)
        if len(np.unique(wanted)) != len(wanted):
            return None  # a hash listed twice: each listing sees the one before it
        at = self.positions(wanted)
        slots = np.where(keys[at] == wanted, at, -1)
        if not isinstance(hashes, PackedMap):
            # The event reads these hashes again one at a time (its trace delta, the
            # delivery of what it released): each then finds its slot remembered.
            remembered = self._slots
            if len(remembered) + len(slots) > SLOT_CACHE:
                remembered.clear()
            remembered.update(zip(hashes, slots.tolist(), strict=True))
        last[0], last[1] = codes, slots
        return slots

    def beside(self, counts: object | None = None, live: int = 0) -> CountTable:
        """A table over the same keys: ``counts`` (int32, one per key; None: all zero,
        memory the OS hands out as pages are first written), this table's remembered slots
        and buckets shared (a hash's slot is the same in both, so a lookup through either
        serves both). The parked table of a start-up sits beside the refcount table: a
        sweep that suspends every loaded session then counts into its arrays, where a dict
        grew by ~100 bytes a chunk (+474 MiB at 10,000 x 512)."""
        import numpy as np

        if counts is None:
            counts = np.zeros(len(self._kv), dtype=np.int32)
        table = CountTable(self._keys, counts, {}, live=live)
        table._slots = self._slots
        table._last = self._last
        table._starts = self.bucket_starts()
        return table

    def _keys_array(self) -> Any:
        import numpy as np

        return np.frombuffer(memoryview(self._keys).cast("B"), dtype=np.int64)  # type: ignore[arg-type]

    def _counts_array(self) -> Any:
        import numpy as np

        return np.frombuffer(memoryview(self._counts).cast("B"), dtype=np.int32)  # type: ignore[arg-type]

    def _bulk_read(
        self, hashes: Sequence[str], codes: bytes | None
    ) -> tuple[Any, Any, list[int], list[int]] | None:
        """``(counts, at, before, rest)`` for a bulk step, or None (go hash by hash): the
        count array, the hashes' slots in it, every hash's count before (the arrays' read
        here, the others' 0 until the caller reads the dict) and the positions of the hashes
        the arrays do not hold."""
        if len(hashes) < BULK:
            return None
        import numpy as np

        slots = self._bulk_slots(hashes, codes)
        if slots is None:
            return None
        counts = self._counts_array()
        mine = slots >= 0
        before: list[int] = np.where(mine, counts[slots], 0).tolist()
        return counts, slots[mine], before, np.flatnonzero(~mine).tolist()

    def add_one(self, hashes: Sequence[str], codes: bytes | None = None) -> list[int] | None:
        """Add one to each hash's count, all at once; the counts before, in order. None
        (nothing changed) when the step must go hash by hash: fewer than ``BULK`` hashes,
        one not canonical, or one listed twice. ``codes``: see _bulk_slots."""
        read = self._bulk_read(hashes, codes)
        if read is None:
            return None
        import numpy as np

        counts, at, out, rest = read
        self._live += int(np.count_nonzero(counts[at] == 0))
        counts[at] += 1
        extra = self._extra
        for i in rest:
            h = hashes[i]
            old = extra.get(h, 0)
            out[i] = old
            extra[h] = old + 1
            if not old:
                self._noted(h)
        return out

    def take_one(self, hashes: Sequence[str], codes: bytes | None = None) -> list[int] | None:
        """Take one from each hash's count, all at once; the counts before, in order (a
        count reaching 0 is absent from then on). None (nothing changed) when the step must
        go hash by hash: fewer than ``BULK`` hashes, one not canonical or listed twice, or
        one not counted (the per-hash path raises for it). ``codes``: see _bulk_slots."""
        read = self._bulk_read(hashes, codes)
        if read is None:
            return None
        import numpy as np

        counts, at, out, rest = read
        if not counts[at].all():
            return None
        extra = self._extra
        for i in rest:
            old = extra.get(hashes[i], 0)
            if not old:
                return None
            out[i] = old
        counts[at] -= 1
        self._live -= int(np.count_nonzero(counts[at] == 0))
        for i in rest:
            h = hashes[i]
            if out[i] == 1:
                del self[h]  # through __delitem__: the codes follow
            else:
                self._extra[h] = out[i] - 1
        return out

    @property
    def arrays(self) -> tuple[object, object]:
        """The key and count buffers as given (for bulk passes; write only through the table)."""
        return self._keys, self._counts

    @property
    def extra_codes(self) -> set[int]:
        """The codes of the dict's canonical hashes (read it, never write it); built on
        first use (a pass over the dict), then kept as the dict changes."""
        if self._codes is None:
            self._codes = {c for c in map(code_of, self._extra) if c is not None}
        return self._codes

    @property
    def indexed(self) -> bool:
        """True once a bulk read built :meth:`code_filter` and :meth:`bucket_starts`."""
        return self._filter is not None and self._starts is not None

    @property
    def bucketed(self) -> bool:
        """True once :meth:`bucket_starts` was built (a bulk read or a bulk refcount step)."""
        return self._starts is not None

    def code_filter(self) -> tuple[bytearray, int]:
        """``(bitmap, shift)``: no false negatives for "is this code held here": bit
        ``(code >> shift) + half`` (``half``: the bitmap's bits / 2) is set for every key
        of the arrays and every code ever put in the dict (bits are never cleared: a code
        gone is a false positive).

        Built on first use, ~8-16 bits a key, at most 16 MiB (2**27 bits, ~7 % false
        positives at 10 M keys), from the keys' top bits: the keys are sorted, so each
        block of them sets a run of bits, packed in one pass. A bulk read filters millions
        of codes with it at a probe each instead of a binary search each
        (trace.shared_counts).
        """
        if self._filter is not None:
            return self._filter, self._shift
        import numpy as np

        bits = min(27, max(16, (len(self._kv) * 8).bit_length()))
        shift, half = 64 - bits, 1 << (bits - 1)
        f = bytearray(1 << (bits - 3))
        view = np.frombuffer(f, dtype=np.uint8)
        keys = self._keys_array()
        step = 1 << 18  # a block's bits span ~2-4 M bools: bounded temporaries
        for start in range(0, len(keys), step):
            # An arithmetic shift keeps the keys' order: the block's bits are one run.
            top = (keys[start : start + step] >> shift) + half
            lo = int(top[0]) & ~7
            run = np.zeros(int(top[-1]) - lo + 1, dtype=bool)
            run[top - lo] = True
            packed = np.packbits(run, bitorder="little")
            view[lo >> 3 : (lo >> 3) + len(packed)] |= packed
        for code in self.extra_codes:
            b = (code >> shift) + half
            f[b >> 3] |= 1 << (b & 7)
        self._filter, self._shift = f, shift
        return f, shift

    def positions(self, codes: Any) -> Any:
        """Where each of ``codes`` (an int64 numpy array) is, or would go, among the keys
        (clipped to the last): a binary search inside each code's bucket
        (:meth:`bucket_starts`), all codes a step at a time. A handful of steps (a bucket
        holds ~8 keys) against numpy's searchsorted, which walks the whole array a code at
        a time: ~20 cache misses each, 2 us a code on a large start-up's arrays."""
        import numpy as np

        keys = self._keys_array()
        starts, shift = self.bucket_starts()
        b = (codes >> shift) + (len(starts) >> 1)
        lo = starts[b].astype(np.int64)
        hi = starts[b + 1].astype(np.int64)
        last = len(keys) - 1
        while True:
            open_ = lo < hi
            if not open_.any():
                break
            mid = (lo + hi) >> 1
            below = keys[np.minimum(mid, last)] < codes
            lo = np.where(open_ & below, mid + 1, lo)
            hi = np.where(open_ & ~below, mid, hi)
        return np.minimum(lo, last)

    def bucket_starts(self) -> tuple[Any, int]:
        """``(starts, shift)``: the keys whose code ``c`` has ``(c >> shift) + half == b``
        (``half``: ``len(starts) // 2``) are ``keys[starts[b]:starts[b + 1]]``.

        About 8 keys a bucket (int32 starts: ~0.5-1 byte a key, 8 MiB at 10 M keys), built
        on first use: a bulk read searches a code among its bucket's few keys, all codes
        at once, instead of through the whole array (trace.shared_counts).
        """
        if self._starts is not None:
            return self._starts
        import numpy as np

        bits = max(1, (len(self._kv) >> 3).bit_length())
        shift = 64 - bits
        keys = self._keys_array()
        sizes = np.zeros(1 << bits, dtype=np.int64)
        step = 1 << 22  # bounded temporaries
        for start in range(0, len(keys), step):
            # An arithmetic shift keeps the keys' order: bucket numbers run sorted.
            b = (keys[start : start + step] >> shift) + (1 << (bits - 1))
            sizes += np.bincount(b, minlength=1 << bits)
        starts = np.zeros((1 << bits) + 1, dtype=np.int32 if len(keys) < 1 << 31 else np.int64)
        np.cumsum(sizes, out=starts[1:])
        self._starts = (starts, shift)
        return starts, shift

    @property
    def extra(self) -> dict[str, int]:
        """The counts kept outside the arrays (read it, never write it)."""
        return self._extra

    def get(self, h: str, default: Any = None) -> Any:
        n = self._extra.get(h)
        if n is not None:
            return n
        i = self._slot(h)
        if i >= 0:
            n = self._cv[i]
            if n:
                return n
        return default

    def __getitem__(self, h: str) -> int:
        n = self.get(h, _MISSING)
        if n is _MISSING:
            raise KeyError(h)
        return int(n)

    def counts_searched(self, codes: bytes) -> Any:
        """Each code's count (a numpy array, in order) when ``codes`` is the bytes object
        the last bulk step searched (an event's record reads the map it just stepped over),
        else None. Its codes are distinct (a bulk step refuses a repeat)."""
        last = self._last
        if codes is not last[0]:
            return None

        view = memoryview(codes).cast("q")
        return self._counts_at(last[1], lambda i: text_of(view[i]))

    def get_many(self, hashes: Sequence[str]) -> list[int]:
        """Each hash's count (0 when absent), in order: the remembered slots read at once,
        where :meth:`get` a hash at a time reads a numpy scalar each (an event's trace
        delta reads every hash it changed: 512 for a suspend)."""
        if len(hashes) < BULK or not len(self._kv):
            return [self.get(h, 0) for h in hashes]
        import numpy as np

        remembered = self._slots
        at = [remembered.get(h, -2) for h in hashes]
        for i, slot in enumerate(at):
            if slot == -2:  # not remembered (evicted from the cache): looked up alone
                at[i] = self._slot(hashes[i])
        out: list[int] = self._counts_at(np.array(at, dtype=np.int64), hashes.__getitem__).tolist()
        return out

    def _counts_at(self, slots: Any, text: Callable[[int], str]) -> Any:
        """The count at each of ``slots`` (a numpy array); at a -1 slot, the dict's count
        of the hash ``text(i)`` spells (0 when absent)."""
        import numpy as np

        out = np.where(slots >= 0, self._counts_array()[slots], 0)
        extra = self._extra
        if extra:
            for i in np.flatnonzero(slots < 0).tolist():
                out[i] = extra.get(text(i), 0)
        return out

    def __contains__(self, h: object) -> bool:  # the dict and the arrays, not __getitem__
        return isinstance(h, str) and self.get(h, 0) > 0

    def __setitem__(self, h: str, n: int) -> None:
        extra = self._extra
        if h in extra:
            extra[h] = n
            return
        i = self._slot(h)
        if i < 0:
            extra[h] = n
            self._noted(h)
            return
        if not self._cv[i]:
            self._live += 1
        self._cv[i] = n

    def _noted(self, h: str) -> None:
        """``h`` was just put in the dict: its code joins the bulk reads' indexes."""
        codes = self._codes
        code = code_of(h) if codes is not None else None
        if codes is not None and code is not None:
            codes.add(code)
            f = self._filter  # built after the codes: None or kept up to date here
            if f is not None:
                bit = (code >> self._shift) + (len(f) << 2)
                f[bit >> 3] |= 1 << (bit & 7)

    def __delitem__(self, h: str) -> None:
        extra = self._extra
        if h in extra:
            del extra[h]
            codes = self._codes
            code = code_of(h) if codes is not None else None
            if codes is not None and code is not None:
                codes.discard(code)
            return
        i = self._slot(h)
        if i < 0 or not self._cv[i]:
            raise KeyError(h)
        self._cv[i] = 0
        self._live -= 1

    def pop(self, h: str, default: Any = _MISSING) -> Any:
        n = self.get(h, _MISSING)
        if n is _MISSING:
            if default is _MISSING:
                raise KeyError(h)
            return default
        del self[h]
        return n

    def setdefault(self, h: str, default: int) -> int:
        n = self.get(h)
        if n is None:
            self[h] = default
            return default
        return int(n)

    def __len__(self) -> int:
        return len(self._extra) + self._live

    def __bool__(self) -> bool:
        return bool(self._extra) or self._live > 0

    def items(self) -> Iterator[tuple[str, int]]:  # type: ignore[override]
        """(hash, count) pairs: the dict's, then the arrays' counted ones (decoded; the
        zero counts skipped in bulk: a table beside another's keys is mostly zeros)."""
        yield from self._extra.items()
        import numpy as np

        counts = self._counts_array()
        held = np.flatnonzero(counts)
        kv = self._kv
        for i, n in zip(held.tolist(), counts[held].tolist(), strict=True):
            yield text_of(kv[i]), n

    def __iter__(self) -> Iterator[str]:
        return (h for h, _ in self.items())

    def keys(self) -> Iterator[str]:  # type: ignore[override]
        return iter(self)

    def values(self) -> Iterator[int]:  # type: ignore[override]
        return (n for _, n in self.items())

    def total(self) -> int:
        """The sum of every count (a C-level pass over the arrays)."""
        return sum(self._extra.values()) + sum(self._cv)

    def at_least(self, n: int) -> set[str]:
        """The hashes counted ``n`` times or more."""
        out = {h for h, c in self._extra.items() if c >= n}
        kv = self._kv
        out.update(text_of(kv[i]) for i, c in enumerate(self._cv) if c >= n)
        return out

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CountTable | dict):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"CountTable({len(self)} hashes, {len(self._kv)} in arrays)"
