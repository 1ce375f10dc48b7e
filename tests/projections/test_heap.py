"""The persistent heap: under any interleaving of pushes and pops it keeps exactly the
keys a sorted list would, its top is their minimum, and every earlier version still
holds what it held (the projection keeps old states valid)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from snerd.projections import heap

keys = st.tuples(st.integers(-5, 5), st.integers(0, 50), st.text(max_size=2))


def _drain(h: Any) -> list[Any]:
    out = []
    while h is not None:
        out.append(heap.top(h))
        h = heap.pop(h)
    return out


@given(st.lists(st.tuples(st.booleans(), keys), max_size=150))
def test_any_interleaving_keeps_the_keys_a_sorted_list_keeps(ops: list[tuple[bool, Any]]) -> None:
    h: Any = None
    model: list[Any] = []
    versions: list[tuple[Any, list[Any]]] = []
    for push, key in ops:
        if push or h is None:
            h = heap.push(h, key)
            model.append(key)
        else:
            assert heap.top(h) == min(model)
            model.remove(min(model))
            h = heap.pop(h)
        versions.append((h, sorted(model)))
        assert sorted(heap.iter_keys(h)) == sorted(model)
        assert heap.top(h) == (min(model) if model else None)
    for version, held in versions:  # each version is untouched by what came after it
        assert _drain(version) == held


@given(st.lists(keys, max_size=80), st.lists(keys, max_size=80))
def test_merge_of_two_heaps_pops_every_key_in_order(xs: list[Any], ys: list[Any]) -> None:
    merged = heap.merge(heap.from_keys(xs), heap.from_keys(ys))
    assert _drain(merged) == sorted(xs + ys)


@given(st.lists(keys, max_size=80), st.lists(keys, max_size=20))
def test_a_built_heap_takes_pushes_like_any_other(built: list[Any], pushed: list[Any]) -> None:
    h = heap.from_keys(built)
    for key in pushed:
        h = heap.push(h, key)
    assert _drain(h) == sorted(built + pushed)
    assert heap.pop(None) is None and heap.top(None) is None
