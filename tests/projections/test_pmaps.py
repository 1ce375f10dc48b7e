"""The fast persistent-map functions agree with pyrsistent's public API, operation by
operation, on generated sequences (growth steps, hash collisions, absent keys)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pyrsistent import pmap, pset

from snerd.projections import pmaps


class Collides:
    """A key whose hash is shared by many others (every key lands in few buckets)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __hash__(self) -> int:
        return self.n % 3

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Collides) and other.n == self.n

    def __repr__(self) -> str:
        return f"Collides({self.n})"


keys = st.one_of(st.integers(-40, 40), st.text(max_size=3), st.builds(Collides, st.integers(0, 30)))
ops = st.lists(st.tuples(st.sampled_from(["assoc", "dissoc", "get"]), keys, st.integers()),
               max_size=300)  # fmt: skip


def test_the_fast_functions_are_in_use() -> None:
    assert pmaps.FAST  # pyrsistent's layout is the one pmaps knows: the fold is fast


@given(ops)
def test_map_operations_agree_with_the_public_api(operations: list[tuple[str, Any, int]]) -> None:
    fast: Any = pmap()
    public: Any = pmap()
    for op, key, value in operations:
        if op == "assoc":
            before = fast
            fast, public = pmaps.assoc(fast, key, value), public.set(key, value)
            if before.get(key, object()) is value:
                assert fast is before
        elif op == "dissoc":
            before = fast
            fast, public = pmaps.dissoc(fast, key), public.discard(key)
            if key not in before:
                assert fast is before
        else:
            assert pmaps.get(fast, key, "absent") == public.get(key, "absent")
            assert pmaps.has(fast, key) == (key in public)
        assert fast == public
        assert len(fast) == len(public) == len(list(fast.items()))
        assert dict(fast) == dict(public)
        assert hash(fast) == hash(public)


@given(st.lists(st.tuples(st.booleans(), keys), max_size=200))
def test_set_operations_agree_with_the_public_api(operations: list[tuple[bool, Any]]) -> None:
    fast: Any = pset()
    public: Any = pset()
    for add, item in operations:
        if add:
            fast, public = pmaps.set_add(fast, item), public.add(item)
        else:
            fast, public = pmaps.set_discard(fast, item), public.discard(item)
        assert fast == public
        assert len(fast) == len(public)
        assert pmaps.set_has(fast, item) == (item in public)


def test_the_input_map_is_never_changed() -> None:
    base = pmap({i: i for i in range(100)})
    copy = dict(base)
    pmaps.assoc(base, 5, "x")
    pmaps.assoc(base, 1000, "y")
    pmaps.dissoc(base, 7)
    assert dict(base) == copy
