"""How deeply a message's values may nest: 63 levels of arrays and objects, refused from
64 (``MAX_DEPTH``), whether the data comes over the wire (``parse_line``) or from the
embedded API (``enqueue_command``). Both skip the walk over the value when the JSON
text opens fewer arrays and objects than that, so the tests sit on the boundary."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_budget import examples

from snerd.projections.options import MAX_DEPTH, OptionError, enqueue_command
from snerd.rpc import protocol as p


def nest(levels: int, kinds: list[bool], leaf: Any = 1) -> Any:
    """``leaf`` inside ``levels`` arrays or objects (``kinds[i]``: an object at level i)."""
    value = leaf
    for i in range(levels):
        value = {"k": value} if kinds[i % len(kinds)] else [value]
    return value


def wire(data: Any, **more: Any) -> bytes:
    return orjson.dumps({"action": "enqueue", "task_id": "t", "task_type": "x",
                         "task_data": data, **more})  # fmt: skip


def accepted_on_the_wire(line: bytes) -> bool:
    try:
        p.parse_line(line)
    except p.InvalidMessage as exc:
        assert "nests deeper than 63 levels" in str(exc), exc
        return False
    return True


def accepted_embedded(data: Any) -> bool:
    try:
        enqueue_command("t", "x", data)
    except OptionError as exc:
        assert "nests deeper than 63 levels" in str(exc), exc
        return False
    return True


@settings(max_examples=examples(200))
@given(levels=st.integers(MAX_DEPTH - 8, MAX_DEPTH + 8),
       kinds=st.lists(st.booleans(), min_size=1, max_size=5),
       padding=st.integers(0, 3))  # fmt: skip
def test_the_boundary_is_the_same_on_both_paths(levels: int, kinds: list[bool],
                                                padding: int) -> None:  # fmt: skip
    data = nest(levels, kinds)
    for _ in range(padding):  # siblings that open more brackets without nesting deeper
        data = [*data, [[1]], {"a": {}}] if isinstance(data, list) else {**data, "z": [[]]}
    assert accepted_on_the_wire(wire(data)) == (levels < MAX_DEPTH)
    assert accepted_embedded(data) == (levels < MAX_DEPTH)


def test_brackets_inside_strings_only_cost_a_walk() -> None:
    text = "[" * 200 + "{" * 200  # opens nothing: a string
    assert accepted_on_the_wire(wire({"s": text}))
    assert accepted_embedded({"s": text})
    assert not accepted_on_the_wire(wire(nest(MAX_DEPTH, [False]), note=text))


def test_any_field_nested_too_deep_is_named() -> None:
    with pytest.raises(p.InvalidMessage, match="idempotency_key nests deeper"):
        p.parse_line(wire(1, idempotency_key=nest(MAX_DEPTH, [True])))


def test_too_deep_and_unencodable_says_too_deep() -> None:
    deep = nest(MAX_DEPTH + 300, [False], leaf=2**70)  # past orjson's own limit, too
    assert not accepted_embedded(deep)
    with pytest.raises(OptionError, match="cannot be encoded"):
        enqueue_command("t", "x", nest(3, [True], leaf=2**70))
    cycle: list[Any] = []
    cycle.append(cycle)
    assert not accepted_embedded(cycle)
