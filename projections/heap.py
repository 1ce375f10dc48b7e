"""A persistent pairing min-heap of comparable keys.

Immutable nodes are tuples ``(children, key)``, ``children`` a linked list of nodes
(``(node, rest)`` pairs, ``None`` at its end); ``None`` is the empty heap. A node's key
is ``node[1]``, the smallest of its subtree. Push is O(1): a key no smaller than the top
(a queue's usual order) just joins the root's children. Pop pairs the root's children
and merges the pairs (the two-pass rule), O(log n) amortized; the first pop after n
pushes with no pop between them pays for them, O(n) once (here 1.5 ms after 5,000
pushes, 62 ms after 100,000, against 0.3-0.6 us a push; over a whole drain of 100,000
keys, each version popped twice as the planner and the fold do, 3.3 us a key against
the leftist heap this replaced, 8.4 us: ``benchmarks/README.md``); the fold merges the
keys a batch adds to a lane as one sorted chain (:func:`from_sorted`, which pops in O(1)
a key), so a burst enqueued as one run leaves no such debt. Every operation returns
a new heap sharing structure with the one it came from, so an old projection state
stays valid after a new one is derived from it.

Removal of arbitrary keys is lazy: owners keep the keys they consider valid and
drop stale tops with :func:`pop` (see ``state.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

Heap = tuple[Any, Any] | None


def merge(a: Heap, b: Heap) -> Heap:
    """The union of two heaps: the root with the larger key becomes a child of the other."""
    if a is None:
        return b
    if b is None:
        return a
    if b[1] < a[1]:
        return ((a, b[0]), b[1])
    return ((b, a[0]), a[1])


def push(heap: Heap, key: Any) -> Heap:
    """A heap holding every key of ``heap`` plus ``key``."""
    if heap is None:
        return (None, key)
    if key < heap[1]:
        return ((heap, None), key)
    return (((None, key), heap[0]), heap[1])


def top(heap: Heap) -> Any:
    """The smallest key, or None for the empty heap."""
    return None if heap is None else heap[1]


def pop(heap: Heap) -> Heap:
    """The heap without its smallest key (the empty heap stays empty): the root's
    children merged in pairs from the first, then those merged from the last."""
    if heap is None:
        return None
    children = heap[0]
    pairs: list[tuple[Any, Any]] = []
    while children is not None:
        a, children = children
        if children is None:
            pairs.append(a)
            break
        b, children = children
        pairs.append(((a, b[0]), b[1]) if b[1] < a[1] else ((b, a[0]), a[1]))
    if not pairs:
        return None
    merged = pairs.pop()
    while pairs:
        a = pairs.pop()
        merged = ((a, merged[0]), merged[1]) if merged[1] < a[1] else ((merged, a[0]), a[1])
    return merged


def from_sorted(keys: list[Any]) -> Heap:
    """Build a heap from keys already in ascending order, in O(n) (a chain: each pop
    is O(1))."""
    heap: Heap = None
    for key in keys[::-1]:  # (not reversed(): mypyc fails on it)
        heap = (None if heap is None else (heap, None), key)
    return heap


def from_keys(keys: Iterable[Any]) -> Heap:
    """Build a heap from keys in any order."""
    return from_sorted(sorted(keys))


def iter_keys(heap: Heap) -> Iterator[Any]:
    """Every key in the heap, in no particular order."""
    stack = [heap]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        yield node[1]
        children = node[0]
        while children is not None:
            child, children = children
            stack.append(child)
