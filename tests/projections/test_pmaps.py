"""The persistent-map functions agree with a plain dict, and the set functions with a
plain set, operation by operation, on generated sequences (hash collisions, absent
keys), leaving what they were given as it was."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from immutables import Map

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
def test_set_operations_agree_with_a_set(operations: list[tuple[bool, Any]]) -> None:
    s: Any = pmaps.EMPTY_SET
    model: set[Any] = set()
    for add, item in operations:
        before, kept = s, set(s)
        s = pmaps.set_add(s, item) if add else pmaps.set_discard(s, item)
        if (item in model) == add:
            assert s is before  # nothing to change: the same set, as the fold relies on
        model = model | {item} if add else model - {item}
        assert set(before) == kept  # the set written from stays as it was
        assert set(s) == model and len(s) == len(model) and bool(s) == bool(model)
        assert pmaps.set_has(s, item) == (item in model) == (item in s)
        assert s == pmaps.id_set(model)  # equal whatever order it was built in


def test_the_input_map_is_never_changed() -> None:
    base = Map({i: i for i in range(100)})
    copy = dict(base)
    pmaps.assoc(base, 5, "x")
    pmaps.assoc(base, 1000, "y")
    pmaps.dissoc(base, 7)
    assert dict(base) == copy
