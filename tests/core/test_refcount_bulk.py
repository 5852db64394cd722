"""A refcount step over many hashes on a start-up's array table (one vectorised lookup) leaves
the same counts, previous values, zeros, shared set and total as the per-hash path on a dict,
and an underflow raises with nothing changed."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ramakv_daemon.core.count_table import BULK, CountTable
from ramakv_daemon.core.packed import PackedMap, code_of, text_of
from ramakv_daemon.core.rebuild import Built
from ramakv_daemon.core.refcount import RefcountTable, counted

IN_ARRAYS = [text_of(c) for c in range(-40, 600, 7)]  # 92 keys, negative ones included
ELSEWHERE = [text_of(c) for c in range(1_000, 1_040, 3)] + ["not-hex", "0x1f"]
POOL = IN_ARRAYS + ELSEWHERE
STEP = st.tuples(
    st.sampled_from(["incr", "decr"]),
    st.one_of(  # distinct hashes (the bulk path), or any (repeats go hash by hash)
        st.lists(st.sampled_from(POOL), min_size=BULK, max_size=3 * BULK, unique=True),
        st.lists(st.sampled_from(POOL), max_size=3 * BULK),
    ),
    st.booleans(),  # as a packed map (codes known) where it can be one
)


def _tables(start: dict[str, int]) -> tuple[RefcountTable, RefcountTable]:
    """The same counts twice: on a CountTable (arrays + dict) and on a plain dict."""
    keys = sorted(int(h, 16) for h in IN_ARRAYS)
    table = CountTable(array("q", keys), array("i", [0] * len(keys)), {})
    for h, n in start.items():
        table[h] = n
    fast, model = RefcountTable(), RefcountTable()
    fast.replace_all(Built(table, sum(start.values()), {h for h, n in start.items() if n > 1}))
    model.replace_all(dict(start))
    return fast, model


def _same(fast: RefcountTable, model: RefcountTable) -> None:
    assert dict(fast.items()) == dict(model.items())
    assert set(fast.shared) == set(model.shared)
    assert fast.shared.codes == model.shared.codes
    assert fast.total_references() == model.total_references() == sum(model.counts.values())
    table = fast.counts
    assert isinstance(table, CountTable)
    assert len(table) == len(model)
    # The dict's codes (kept for bulk reads) follow the bulk steps too.
    assert table.extra_codes == {c for c in map(code_of, table.extra) if c is not None}


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(POOL), st.integers(1, 3)), st.lists(STEP, max_size=12))
def test_bulk_steps_match_the_per_hash_path(
    start: dict[str, int], steps: list[tuple[str, list[str], bool]]
) -> None:
    _run(start, steps)


def _run(start: dict[str, int], steps: list[tuple[str, list[str], bool]]) -> None:
    fast, model = _tables(start)
    table = fast.counts
    assert isinstance(table, CountTable)
    assert table.extra_codes is not None  # built now: the bulk steps must keep it
    for op, hashes, packed in steps:
        pm = PackedMap.of(hashes) if packed else None
        seq = pm or hashes
        # A decr of a packed map's strings is given its codes (as a suspend does).
        codes = pm.codes if pm is not None and op == "decr" else None
        if codes is not None:
            seq = tuple(hashes)
        got: dict[str, int] = {}
        want: dict[str, int] = {}
        if op == "incr":
            fast.incr(seq, got)
            model.incr(hashes, want)
        else:
            try:
                want_zeros = model.decr(hashes, want)
            except ValueError as err:
                with pytest.raises(ValueError) as caught:
                    fast.decr(seq, got, codes)
                assert str(caught.value) == str(err) and got == want == {}
                _same(fast, model)
                continue
            assert fast.decr(seq, got, codes) == want_zeros
        assert got == want and list(got) == list(want)
        _same(fast, model)
        fast.restore(got)
        model.restore(want)
        _same(fast, model)
        # Again, kept this time.
        if op == "incr":
            fast.incr(seq, {})
            model.incr(hashes, {})
        else:
            fast.decr(seq, {}, codes)
            model.decr(hashes, {})
        _same(fast, model)


def test_a_large_step_takes_the_bulk_path_and_a_small_one_does_not() -> None:
    fast, _ = _tables({})
    table = fast.counts
    assert isinstance(table, CountTable)
    many = IN_ARRAYS[:BULK]
    assert table.add_one(many) == [0] * BULK
    assert table.add_one(many[: BULK - 1]) is None  # below the bulk size: per hash
    assert table.add_one([*many, many[0]]) is None  # listed twice: per hash
    assert table.take_one([*many[1:], "not-hex"]) is None  # not canonical: per hash
    assert table.take_one([*many[1:], ELSEWHERE[0]]) is None  # not counted: per hash
    assert dict(table.items()) == dict.fromkeys(many, 1)  # the refusals changed nothing
    assert table.take_one(many) == [1] * BULK
    assert len(table) == 0 and not table


def test_the_property_test_reaches_the_bulk_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above, on steps that do go through add_one/take_one's bulk answers."""
    taken: list[str] = []
    for name in ("add_one", "take_one"):
        real = getattr(CountTable, name)

        def spy(
            self: CountTable, hashes: object, codes: object = None, real=real, name=name
        ) -> object:
            out = real(self, hashes, codes)
            if out is not None:
                taken.append(name)
            return out

        monkeypatch.setattr(CountTable, name, spy)
    many = IN_ARRAYS[: 2 * BULK] + ELSEWHERE[:5]  # in the arrays and in the dict
    _run(
        dict.fromkeys(IN_ARRAYS[:BULK], 1),
        [("incr", many, True), ("incr", many, False), ("decr", many, True), ("decr", many, False)],
    )
    assert {"add_one", "take_one"} <= set(taken)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.sampled_from(POOL), st.integers(1, 3)),
    st.lists(st.sampled_from([*POOL, text_of(99_999)]), max_size=3 * BULK),
    st.booleans(),
)
def test_get_many_reads_what_get_reads(
    start: dict[str, int], hashes: list[str], cold: bool
) -> None:
    fast, _ = _tables(start)
    table = fast.counts
    assert isinstance(table, CountTable)
    if not cold:  # the slots remembered by a bulk step, as after an event's own step
        table.add_one(list(dict.fromkeys(hashes)))
    assert table.get_many(hashes) == [table.get(h, 0) for h in hashes]
    # What delivery asks before it sends: the ones still referenced, read at once.
    assert counted(table, hashes) == [h for h in hashes if h in table]


def test_a_table_beside_another_searches_the_same_codes_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A suspend parks its map and drops its references with the same codes: the parked
    table sits beside the refcounts (the same keys), so one search serves both steps."""
    fast, _ = _tables(dict.fromkeys(IN_ARRAYS[: 2 * BULK], 1))
    table = fast.counts
    assert isinstance(table, CountTable)
    parked = table.beside()
    searched: list[int] = []
    real = CountTable.positions

    def spy(self: CountTable, codes: object) -> object:
        searched.append(len(codes))  # type: ignore[arg-type]
        return real(self, codes)

    monkeypatch.setattr(CountTable, "positions", spy)
    pm = PackedMap.of(IN_ARRAYS[: 2 * BULK])
    hashes, codes = tuple(pm), pm.codes
    assert parked.add_one(hashes, codes) == [0] * (2 * BULK)
    assert table.take_one(hashes, codes) == [1] * (2 * BULK)
    assert searched == [2 * BULK]
    assert dict(parked.items()) == dict.fromkeys(hashes, 1) and not table
    # Other codes are searched again.
    other = PackedMap.of(IN_ARRAYS[BULK : 2 * BULK])
    parked.add_one(tuple(other), other.codes)
    assert searched == [2 * BULK, BULK]


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.sampled_from(POOL), st.integers(1, 3)),
    st.lists(
        st.sampled_from([h for h in POOL if code_of(h) is not None]),
        min_size=BULK,
        unique=True,
    ),
    st.integers(0, 2),
)
def test_a_record_of_the_map_just_stepped_over_counts_what_a_search_counts(
    start: dict[str, int], hashes: list[str], own: int
) -> None:
    """trace.shared_counts.counted_above reads the counts of the map a bulk step just
    searched from that search; a fresh search of the same codes counts the same."""
    from ramakv_daemon.trace.shared_counts import counted_above, counts_above

    fast, _ = _tables(start)
    table = fast.counts
    assert isinstance(table, CountTable)
    pm = PackedMap.of(hashes)
    assert pm is not None
    fast.incr(tuple(hashes), {})
    fast.decr(tuple(hashes), {}, pm.codes)  # searched: its slots are the last search's
    assert table.counts_searched(pm.codes) is not None
    got = counted_above(pm, table, own)
    copy = PackedMap(bytes(bytearray(pm.codes)))  # another bytes object: searched afresh
    assert table.counts_searched(copy.codes) is None
    assert got == counts_above([copy], table, own)[0]
    assert got == sum(1 for h in hashes if table.get(h, 0) > own)
