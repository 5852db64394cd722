"""The global refcount table: how many live references each chunk has."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import compress, repeat
from typing import TYPE_CHECKING

from ramakv_daemon.core.count_table import CountTable
from ramakv_daemon.core.packed import code_of

if TYPE_CHECKING:
    from ramakv_daemon.core.rebuild import Built

#: A hash -> count table: a dict, or a CountTable (arrays + dict) that behaves as one.
Counts = dict[str, int] | CountTable


class SharedChunks(set[str]):
    """The chunks counted twice or more, beside the int64 codes of the canonical ones: a
    packed map's overlap with it is counted on its codes, without decoding the map (15 us
    for 512 chunks against 70 us decoded). Changed only through add/discard (crossings)."""

    __slots__ = ("codes",)

    def __init__(self, hashes: Iterable[str] = (), codes: set[int] | None = None) -> None:
        super().__init__(hashes)
        if codes is None:
            codes = {c for c in map(code_of, self) if c is not None}
        self.codes = codes

    def add(self, h: str) -> None:
        super().add(h)
        code = code_of(h)
        if code is not None:
            self.codes.add(code)

    def discard(self, h: object) -> None:
        super().discard(h)
        code = code_of(h) if isinstance(h, str) else None
        if code is not None:
            self.codes.discard(code)


class RefcountTable:
    """Chunk hash -> reference count; entries at zero are removed, never stored.

    A reference is one session's active map containing the hash (once, however many
    times it repeats) or one open fork hold containing it.

    It also keeps the set of hashes counted twice or more, changed only when a count
    crosses 1 <-> 2: a session's shared_count is the size of its map's intersection with
    that set, which walks the map against a small table instead of looking every hash up
    in the big one (measured at 50,000 x 512: 12 us a session against 0.9 ms).
    """

    __slots__ = ("_counts", "_shared", "_total")

    def __init__(self) -> None:
        # A dict, or after a large start-up a CountTable (arrays + dict) that behaves as one.
        self._counts: Counts = {}
        self._shared = SharedChunks()  # the hashes whose count is 2 or more
        # The sum of all counts, kept as they change: summing millions of entries for a
        # trace snapshot or /metrics would stall the event loop.
        self._total = 0

    @property
    def counts(self) -> Mapping[str, int]:
        """The live table, for hot loops that must not pay a method call per hash.

        Read it, never write it: every change goes through incr/decr/restore.
        """
        return self._counts

    @property
    def shared(self) -> SharedChunks:
        """The hashes counted twice or more (live; read it, never write it)."""
        return self._shared

    def get(self, chunk_hash: str) -> int:
        """Current count, 0 when absent."""
        return self._counts.get(chunk_hash, 0)

    def __len__(self) -> int:
        return len(self._counts)

    def __contains__(self, chunk_hash: object) -> bool:
        return chunk_hash in self._counts

    def items(self) -> Iterable[tuple[str, int]]:
        """(hash, count) pairs."""
        return self._counts.items()

    def as_dict(self) -> dict[str, int]:
        """A copy of the table."""
        return dict(self._counts.items())

    def total_references(self) -> int:
        """Sum of all counts (kept up to date, O(1))."""
        return self._total

    def incr(self, hashes: Sequence[str], changed: dict[str, int]) -> None:
        """Add one reference per listing of each hash; record previous counts in ``changed``."""
        counts = self._counts
        remember = changed.setdefault
        shared = self._shared
        olds = counts.add_one(hashes) if type(counts) is CountTable else None
        if olds is not None:
            _remember_all(changed, hashes, olds)
            for h in compress(hashes, map((1).__eq__, olds)):
                shared.add(h)
            self._total += len(hashes)
            return
        get = counts.get
        # A plain loop: measured 2x faster than map/zip/dict.update batches on 28 hashes.
        for h in hashes:
            old = get(h, 0)
            remember(h, old)
            counts[h] = old + 1
            if old == 1:
                shared.add(h)
        self._total += len(hashes)

    def decr(
        self, hashes: Sequence[str], changed: dict[str, int], codes: bytes | None = None
    ) -> list[str]:
        """Drop one reference from each hash; return the hashes that reached zero.
        ``codes``: the hashes' int64 codes, in order, when the caller has them (a packed
        map's): a large table's bulk lookup then parses no string.

        Raises:
            ValueError: a hash has no reference (a bookkeeping bug upstream); the
                table is left as it was.
        """
        counts = self._counts
        remember = changed.setdefault
        shared = self._shared
        olds = counts.take_one(hashes, codes) if type(counts) is CountTable else None
        if olds is not None:
            _remember_all(changed, hashes, olds)
            for h in compress(hashes, map((2).__eq__, olds)):
                shared.discard(h)
            self._total -= len(hashes)
            return list(compress(hashes, map((1).__eq__, olds)))
        zeros: list[str] = []
        known = len(changed)  # remember() appends: the entries from ``known`` on are ours
        done = 0
        try:
            for h in hashes:
                old = counts[h]  # absent: a reference too few (rolled back below)
                remember(h, old)
                if old == 1:
                    del counts[h]
                    zeros.append(h)
                else:
                    counts[h] = old - 1
                    if old == 2:
                        shared.discard(h)
                done += 1
        except KeyError:
            # Not checked up front (a pass more over every hash): put back what this call
            # took, so the table and ``changed`` are left as they were.
            for h in reversed(hashes[:done]):
                n = counts.get(h, 0) + 1
                counts[h] = n
                if n == 2:
                    shared.add(h)
            for h in list(changed)[known:]:
                del changed[h]
            need = _listings(hashes)
            missing = [h for h, n in need.items() if counts.get(h, 0) < n]
            raise ValueError(f"refcount underflow for {missing[:3]}") from None
        self._total -= len(hashes)
        return zeros

    def restore(self, previous: dict[str, int]) -> None:
        """Put back counts recorded by incr/decr (undo)."""
        counts = self._counts
        shared = self._shared
        for h, n in previous.items():
            self._total += n - counts.get(h, 0)
            if n:
                counts[h] = n
            else:
                counts.pop(h, None)
            if n >= 2:
                shared.add(h)
            else:
                shared.discard(h)

    def replace_all(self, counts: dict[str, int] | Built) -> None:
        """Take over a whole table (start-up rebuild); every count must be positive.

        A plain dict is adopted, not copied: at start-up it holds millions of entries. A
        subclass (a Counter) is copied, because its ``__delitem__`` is Python code and
        would run for every chunk that drops to zero. A rebuilt table (core.rebuild.Built)
        comes with its total and shared set, computed over its arrays in bulk.
        """
        if not isinstance(counts, dict):
            self._counts, self._total = counts.table, counts.total
            self._shared = SharedChunks(counts.shared, counts.shared_codes)
            return
        self._counts = counts if type(counts) is dict else dict(counts)
        self._total = sum(self._counts.values())
        # C-level passes over the values (no key is read): ~1 s at 22 M chunks.
        self._shared = SharedChunks(compress(self._counts, map((1).__lt__, self._counts.values())))


def counts_of(table: Mapping[str, int], hashes: Sequence[str]) -> list[int]:
    """Each hash's count in ``table`` (0 when absent), in order: a large start-up's arrays
    read at once (CountTable.get_many), where a lookup a hash cost ~0.5 us (an event's
    trace delta and delivery read every hash a suspend let go: 512)."""
    if type(table) is CountTable:
        return table.get_many(hashes)
    return list(map(table.get, hashes, repeat(0)))  # get(h, 0) called from C


def counted(table: Mapping[str, int], hashes: Sequence[str]) -> list[str]:
    """Those of ``hashes`` with a count in ``table``, in order (:func:`counts_of`)."""
    return list(compress(hashes, counts_of(table, hashes)))


def _remember_all(changed: dict[str, int], hashes: Sequence[str], olds: list[int]) -> None:
    """``changed.setdefault(h, old)`` for each pair: at C speed when ``changed`` holds none
    of them yet (an event's first step over them: a suspend's 512, a Python loop ~0.15 ms)."""
    if not changed or changed.keys().isdisjoint(hashes):
        changed.update(zip(hashes, olds, strict=True))  # a bulk step's are distinct
        return
    deque(map(changed.setdefault, hashes, olds), maxlen=0)


def take_each(
    table: Counts, hashes: Sequence[str], changed: dict[str, int], codes: bytes | None = None
) -> list[int] | None:
    """One less on each hash's count in ``table``, all at once on a large start-up's arrays,
    remembering each count before in ``changed`` (first value wins); the counts before, in
    order. None (nothing changed) when the step must go hash by hash: ``table`` is a dict, or
    :meth:`CountTable.take_one` refuses (``codes``: see RefcountTable.decr). A resumed
    512-hash map unparked a hash at a time: ~1.5 ms of lookups."""
    olds = table.take_one(hashes, codes) if type(table) is CountTable else None
    if olds is not None:
        _remember_all(changed, hashes, olds)
    return olds


def add_each(
    table: Counts,
    hashes: Sequence[str],
    remember: Callable[[str, int], object],
    codes: bytes | None = None,
) -> None:
    """One more on each hash's count in ``table``, calling ``remember(hash, count before)``
    for each; in bulk on a large start-up's arrays (``codes``: see RefcountTable.decr)."""
    olds = table.add_one(hashes, codes) if type(table) is CountTable else None
    if olds is not None:
        deque(map(remember, hashes, olds), maxlen=0)
        return
    get = table.get
    for h in hashes:
        old = get(h, 0)
        remember(h, old)
        table[h] = old + 1


def _listings(hashes: Sequence[str]) -> dict[str, int]:
    """hash -> how many times ``hashes`` lists it."""
    need: dict[str, int] = {}
    for h in hashes:
        need[h] = need.get(h, 0) + 1
    return need
