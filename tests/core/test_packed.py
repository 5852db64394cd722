"""Packed maps: the int64 codec is a bijection on canonical hashes and a packed map reads,
compares and hashes as the tuple it stands for."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ramakv_daemon.core.packed import (
    KeptText,
    PackedMap,
    code_of,
    pack,
    pack_for_store,
    packed_from_store,
    packed_like,
    repacked,
    store_bytes,
    text_of,
)

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
CANONICAL = INT64.map(text_of)
# Spellings int(h, 16) takes that are not the hash's one canonical form, and other strings.
NOT_CANONICAL = st.sampled_from(
    ["", "0x1f", "+1", " 1", "1 ", "1_f", "01", "1F", "-0", "8000000000000000", "g", "a\nb"]
    + ["-8000000000000001", "10000000000000000", "h1", "é"]
)


@given(INT64)
def test_every_int64_spells_one_canonical_hash(v: int) -> None:
    assert code_of(text_of(v)) == v


@given(st.text(max_size=20))
def test_a_string_is_canonical_only_as_the_exact_spelling_of_its_code(h: str) -> None:
    code = code_of(h)
    assert code is None or text_of(code) == h


@given(NOT_CANONICAL)
def test_other_spellings_are_not_canonical(h: str) -> None:
    assert code_of(h) is None


@given(st.lists(CANONICAL, min_size=1, max_size=40))
def test_a_canonical_map_packs_and_reads_back_as_its_tuple(hashes: list[str]) -> None:
    m = PackedMap.of(hashes)
    assert m is not None
    t = tuple(hashes)
    assert m == t and t == m and hash(m) == hash(t)
    assert list(m) == hashes and len(m) == len(hashes) and m.as_tuple() == t
    assert m[0] == t[0] and m[-1] == t[-1] and m[1:3] == t[1:3]
    assert all(h in m for h in hashes) and "not-a-hash" not in m
    assert m + ("x",) == t + ("x",)
    assert packed_from_store(store_bytes(m)) == m
    assert pack_for_store(hashes) == store_bytes(m)


@given(st.lists(CANONICAL, max_size=10), NOT_CANONICAL, st.lists(CANONICAL, max_size=10))
def test_one_hash_that_is_not_canonical_keeps_the_map_a_tuple(
    before: list[str], odd: str, after: list[str]
) -> None:
    assert pack([*before, odd, *after]) is None
    assert PackedMap.of([*before, odd, *after]) is None


def test_an_empty_map_or_non_strings_do_not_pack() -> None:
    assert pack([]) is None
    assert pack(["a", 1]) is None  # type: ignore[list-item]


def test_codes_must_be_whole_int64s() -> None:
    with pytest.raises(ValueError, match="whole number"):
        PackedMap(b"1234567")


@given(
    st.lists(CANONICAL, min_size=1, max_size=12),
    st.lists(st.one_of(CANONICAL, NOT_CANONICAL), max_size=6),
    st.booleans(),
)
def test_a_turns_map_stays_packed_as_it_grows(
    old: list[str], tail: list[str], rewrite: bool
) -> None:
    held = PackedMap.of(old)
    assert held is not None
    new = tuple(reversed(old)) + tuple(tail) if rewrite else tuple(old) + tuple(tail)
    out = packed_like(held, held.as_tuple(), new)
    assert out == new
    assert isinstance(out, PackedMap) == (pack(new) is not None)


def test_a_tuple_map_stays_a_tuple_and_a_new_session_packs() -> None:
    assert packed_like(("h1",), ("h1",), ("h1", "a")) == ("h1", "a")
    assert isinstance(packed_like(("h1",), ("h1",), ("a",)), tuple)
    assert isinstance(packed_like((), (), ("a", "-b")), PackedMap)


# Strings close to canonical: the spelling pack()'s fast check lets through to int().
NEAR = st.text(alphabet="0123456789abcdef-\n", max_size=18)


@given(st.lists(st.one_of(CANONICAL, NOT_CANONICAL, NEAR), min_size=1, max_size=12))
def test_pack_agrees_with_the_per_hash_codec(hashes: list[str]) -> None:
    codes = [code_of(h) for h in hashes]
    packed = pack(hashes)
    if None in codes:
        assert packed is None
    else:
        assert packed is not None and list(memoryview(packed).cast("q")) == codes


@given(
    st.lists(CANONICAL, min_size=1, max_size=16),
    st.integers(0, 16),
    st.integers(0, 16),
    st.integers(0, 16),
    st.lists(st.one_of(CANONICAL, NOT_CANONICAL), max_size=6),
    st.lists(st.integers(0, 15), max_size=4),
)
def test_a_new_map_reuses_the_old_codes_it_keeps_in_order(
    old: list[str], p: int, q: int, k: int, fresh: list[str], picks: list[int]
) -> None:
    """A prefix, a later run and new hashes (an agent's slid window), and any other mix:
    the codes are those of the new map packed from scratch."""
    held = PackedMap.of(old)
    assert held is not None
    o = held.as_tuple()
    new = o[:p] + o[q : q + k] + tuple(fresh) + tuple(o[i % len(o)] for i in picks)
    assert repacked(held.codes, o, new) == pack(new) if new else True
    out = packed_like(held, o, new)
    assert out == new
    assert isinstance(out, PackedMap) == (pack(new) is not None or new == o)


def test_a_slid_window_parses_only_its_new_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    old = tuple(text_of(v) for v in range(1, 65))
    held = PackedMap.of(old)
    assert held is not None
    new = old[:8] + old[36:] + tuple(text_of(v) for v in range(100, 128))
    parsed: list[int] = []
    real = pack
    monkeypatch.setattr(
        "ramakv_daemon.core.packed.pack", lambda hs: parsed.append(len(hs)) or real(hs)
    )
    assert repacked(held.codes, old, new) == real(new)
    assert parsed == [28]


def test_the_newest_maps_keep_their_strings_up_to_the_budget() -> None:
    kept = KeptText(budget=10)
    maps = [PackedMap(PackedMap.of([text_of(v), text_of(v + 1)]).codes) for v in range(8)]  # type: ignore[union-attr]
    for m in maps:
        m._text = m.as_tuple()
        kept.add(m)
    assert kept.held == 10
    assert [m.keeps_text() for m in maps] == [False] * 3 + [True] * 5
    assert all(m == (text_of(v), text_of(v + 1)) for v, m in enumerate(maps))  # still reads
    kept.clear()
    assert kept.held == 0 and not any(m.keeps_text() for m in maps)
