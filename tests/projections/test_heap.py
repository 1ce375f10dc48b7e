"""The persistent heap: the unrolled merge builds exactly the nodes the textbook
recursion builds, and pops come out sorted."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from snerd.projections import heap


def _rank(h: Any) -> int:
    return 0 if h is None else int(h[0])


def reference_merge(a: Any, b: Any) -> Any:
    """The recursive leftist-heap merge (what ``heap.merge`` unrolls)."""
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


keys = st.tuples(st.integers(-5, 5), st.integers(0, 50), st.text(max_size=2))


@given(st.lists(st.tuples(st.booleans(), keys), max_size=120))
def test_merge_builds_the_same_heap_as_the_recursion(ops: list[tuple[bool, Any]]) -> None:
    fast: Any = None
    slow: Any = None
    for push, key in ops:
        if push or fast is None:
            fast = heap.push(fast, key)
            slow = reference_merge(slow, (1, key, None, None))
        else:
            fast = heap.pop(fast)
            slow = reference_merge(slow[2], slow[3])
        assert fast == slow


@given(st.lists(keys, max_size=80), st.lists(keys, max_size=80))
def test_merge_of_two_heaps_pops_every_key_in_order(xs: list[Any], ys: list[Any]) -> None:
    merged = heap.merge(heap.from_keys(xs), heap.from_keys(ys))
    out = []
    while merged is not None:
        out.append(heap.top(merged))
        merged = heap.pop(merged)
    assert out == sorted(xs + ys)
