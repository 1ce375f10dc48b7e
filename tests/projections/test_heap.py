"""The persistent leftist heap: a model check against a sorted list, the leftist
invariants, persistence, and the exact shape the recursive textbook merge builds."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from snerd.projections import heap


def _rank(h: heap.Heap) -> int:
    return 0 if h is None else h[0]


def reference_merge(a: heap.Heap, b: heap.Heap) -> heap.Heap:
    """The recursive merge, as textbooks write it (and as this module once did)."""
    if a is None:
        return b
    if b is None:
        return a
    if b[1] < a[1]:
        a, b = b, a
    merged = reference_merge(a[3], b)
    left = a[2]
    if _rank(left) < _rank(merged):
        left, merged = merged, left
    return (_rank(merged) + 1, a[1], left, merged)


def _check(h: heap.Heap) -> None:
    if h is None:
        return
    rank, key, left, right = h
    assert _rank(left) >= _rank(right) and rank == _rank(right) + 1
    for child in (left, right):
        assert child is None or not child[1] < key
        _check(child)


ops = st.lists(st.one_of(st.integers(0, 50), st.none()), max_size=200)  # None: pop


@given(ops)
def test_a_heap_behaves_as_a_sorted_list_and_stays_leftist(script: list[Any]) -> None:
    h: heap.Heap = None
    model: list[int] = []
    versions: list[tuple[heap.Heap, list[int]]] = []
    for op in script:
        if op is None:
            assert heap.top(h) == (model[0] if model else None)
            h = heap.pop(h)
            model = model[1:]
        else:
            h = heap.push(h, op)
            model = sorted([*model, op])
        _check(h)
        versions.append((h, model))
    for old, keys in versions:  # every older version is intact
        assert sorted(heap.iter_keys(old)) == keys


@given(st.lists(st.integers(0, 30), max_size=60), st.lists(st.integers(0, 30), max_size=60))
def test_merge_builds_the_shape_the_recursive_merge_builds(xs: list[int], ys: list[int]) -> None:
    a = b = ra = rb = None
    for x in xs:
        a, ra = heap.merge(a, (1, x, None, None)), reference_merge(ra, (1, x, None, None))
    for y in ys:
        b, rb = heap.merge(b, (1, y, None, None)), reference_merge(rb, (1, y, None, None))
    assert a == ra and b == rb
    assert heap.merge(a, b) == reference_merge(ra, rb)
