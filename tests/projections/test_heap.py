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


def test_a_batch_of_enqueues_enters_its_lane_as_one_chain() -> None:
    """The fold merges the keys one batch adds to a lane as one sorted chain: after a
    burst of 1,000 enqueues folded at once the lane's root has one child, so popping
    it (which the planner, the claim's check and the next fold each do, on their own
    copies) pairs up nothing, where 1,000 single pushes would leave 1,000 children."""
    from snerd.projections.state import empty, fold

    records = [
        {"event": "enqueued", "taskId": f"t{i:04d}", "taskType": "x", "taskData": "{}",
         "seq": i + 1, "ts": 1_760_000_000_000 + i, "daemon": "d"}
        for i in range(1000)
    ]  # fmt: skip
    state, _ = fold(empty(), records)
    (lane,) = state.lanes.values()
    children, count = lane[0], 0
    while children is not None:
        count, children = count + 1, children[1]
    assert count == 1
    assert [key[2] for key in _drain(lane)] == [f"t{i:04d}" for i in range(1000)]
