"""The persistent-map functions agree with a plain dict, and the fast set functions
with pyrsistent's public API, operation by operation, on generated sequences (growth
steps, hash collisions, absent keys)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from immutables import Map
from pyrsistent import pset

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
def test_map_operations_agree_with_a_dict(operations: list[tuple[str, Any, int]]) -> None:
    m: Any = Map()
    model: dict[Any, int] = {}
    for op, key, value in operations:
        before, kept = m, dict(m.items())
        if op == "assoc":
            m = pmaps.assoc(m, key, value)
            model[key] = value
        elif op == "dissoc":
            m = pmaps.dissoc(m, key)
            if key not in model:
                assert m is before  # an absent key: the same map, no error
            model.pop(key, None)
        else:
            assert pmaps.get(m, key, "absent") == model.get(key, "absent")
            assert pmaps.has(m, key) == (key in model)
        assert dict(before.items()) == kept  # the map written from stays as it was
        assert len(m) == len(model) and dict(m.items()) == model


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
    base = Map({i: i for i in range(100)})
    copy = dict(base)
    pmaps.assoc(base, 5, "x")
    pmaps.assoc(base, 1000, "y")
    pmaps.dissoc(base, 7)
    assert dict(base) == copy
