"""A persistent leftist min-heap of comparable keys.

Immutable nodes are tuples ``(rank, key, left, right)``; ``None`` is the empty heap.
Push and pop are O(log n) and share structure with the heap they came from, so an
old projection state stays valid after a new one is derived from it.

Removal of arbitrary keys is lazy: owners keep the keys they consider valid and
drop stale tops with :func:`pop` (see ``state.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

Heap = tuple[int, Any, Any, Any] | None


def merge(a: Heap, b: Heap) -> Heap:
    """The union of two heaps.

    The textbook recursion (merge the smaller root's right child with the other heap,
    then keep the higher-ranked child on the left), unrolled: walk down the right
    spines, then rebuild the path bottom-up. Same nodes, no Python call per level.
    """
    spine = []
    while a is not None and b is not None:
        if b[1] < a[1]:
            a, b = b, a
        spine.append(a)
        a = a[3]
    merged = a if b is None else b
    for node in reversed(spine):
        left = node[2]
        left_rank = 0 if left is None else left[0]
        merged_rank = 0 if merged is None else merged[0]
        if left_rank < merged_rank:
            merged = (left_rank + 1, node[1], merged, left)
        else:
            merged = (merged_rank + 1, node[1], left, merged)
    return merged


def push(heap: Heap, key: Any) -> Heap:
    """A heap holding every key of ``heap`` plus ``key``."""
    return merge(heap, (1, key, None, None))


def top(heap: Heap) -> Any:
    """The smallest key, or None for the empty heap."""
    return None if heap is None else heap[1]


def pop(heap: Heap) -> Heap:
    """The heap without its smallest key (the empty heap stays empty)."""
    return None if heap is None else merge(heap[2], heap[3])


def from_sorted(keys: list[Any]) -> Heap:
    """Build a heap from keys already in ascending order, in O(n)."""
    heap: Heap = None
    for key in keys[::-1]:  # (not reversed(): mypyc fails on it)
        heap = (1, key, heap, None)
    return heap


def from_keys(keys: Iterable[Any]) -> Heap:
    """Build a heap from keys in any order."""
    return from_sorted(sorted(keys))


def iter_keys(heap: Heap) -> Iterator[Any]:
    """Every key in the heap, in no particular order."""
    stack = [heap]
    while stack:
        node = stack.pop()
        if node is not None:
            yield node[1]
            stack.append(node[2])
            stack.append(node[3])
