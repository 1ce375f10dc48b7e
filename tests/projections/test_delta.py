"""What one fold changed (``Delta``): immutable, equal field by field, and what it says
to the dispatcher."""

from __future__ import annotations

import pytest

from snerd.projections.delta import FIELDS, NO_CHANGE, Delta, DeltaBuilder


def test_a_delta_refuses_assignment_and_deletion() -> None:
    delta = Delta(ready=("a",))
    with pytest.raises(AttributeError):  # FrozenInstanceError, or a compiled read-only
        delta.ready = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del delta.claimed  # type: ignore[misc]
    assert delta.ready == ("a",)


def test_equal_when_every_field_is() -> None:
    assert Delta() == NO_CHANGE
    assert hash(Delta(ready=("a",))) == hash(Delta(ready=("a",)))
    for name in FIELDS:
        changed = Delta(**{name: True if name == "reset" else ("x",)})
        assert changed != NO_CHANGE, name
        assert changed == Delta(**{name: True if name == "reset" else ("x",)})


def test_truth_and_what_wakes_the_dispatcher() -> None:
    assert not NO_CHANGE and not NO_CHANGE.wakes_dispatch
    waking = {"ready", "delayed", "released", "finished", "doomed", "dead"}
    for name in FIELDS:
        delta = Delta(**{name: True if name == "reset" else ("x",)})
        assert bool(delta), name
        assert delta.wakes_dispatch == (name in waking), name


def test_merge_and_the_builder() -> None:
    first = Delta(ready=("a",), counted=(("enqueued", 1),))
    second = Delta(ready=("b",), claimed=("a",), reset=True)
    merged = first.merge(second)
    assert merged == Delta(ready=("a", "b"), claimed=("a",), counted=(("enqueued", 1),),
                           reset=True)  # fmt: skip
    builder = DeltaBuilder()
    assert builder.freeze() is NO_CHANGE
    builder.claimed.append("t")
    builder.progress.append(("t", 50))
    assert builder.freeze() == Delta(claimed=("t",), progress=(("t", 50),))
    assert repr(Delta(dead=("k",))).startswith("Delta(ready=(), delayed=(), blocked=(),")
