"""The fast Task constructor and copier build exactly what the dataclass builds."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st
from pyrsistent import pmap

from snerd.projections.task import Claim, Task, build, with_

FULL: dict[str, Any] = {
    "id": "t1", "type": "mail", "data": '{"a": 1}', "max_retries": 5, "retry_after_hours": 0.5,
    "retry_count": 2, "urgency": 3.0, "execute_at": 10.0, "retry_after_time": 20.0,
    "cron": "* * * * *", "webhook_url": "http://x", "max_execution_seconds": 9.5, "pool": "p",
    "rate_group": "g", "max_per_minute": 7, "auto_dedupe": True, "fingerprint": "ff",
    "parents": ("a", "b"), "last_error": "boom", "created_at": 1.0, "retry_backoff": "exponential",
    "retry_max_delay": 60.0, "extra": pmap({"x": 1}), "order": 42, "phase": "active",
    "attempt": 3, "claim": Claim("d", 3, 5.0, 9.0), "progress": {"p": 1},
}  # fmt: skip


def _every_field(task: Task) -> tuple[Any, ...]:
    return tuple(getattr(task, f.name) for f in dataclasses.fields(Task))


def test_build_sets_every_field_as_the_dataclass_does() -> None:
    assert _every_field(build(**FULL)) == _every_field(Task(**FULL))
    assert _every_field(build(id="a", type="b")) == _every_field(Task(id="a", type="b"))
    assert build(**FULL) == Task(**FULL)
    assert hash(build(id="a", type="b")) == hash(Task(id="a", type="b"))


@given(st.sets(st.sampled_from(sorted(FULL)), max_size=len(FULL)))
def test_with_changes_exactly_the_named_fields(names: set[str]) -> None:
    base = Task(id="a", type="b")
    changes = {name: FULL[name] for name in names}
    expected = dataclasses.replace(base, **changes)
    assert _every_field(with_(base, **changes)) == _every_field(expected)


def test_build_state_sets_every_field_as_the_dataclass_does() -> None:
    from snerd.projections.state import QueueState, build_state

    given = {f.name: getattr(QueueState(), f.name) for f in dataclasses.fields(QueueState)}
    given.update(n=7, last_seq=9, invalid=2, timers=(1, (0.0, 1, "a"), None, None))
    built, expected = build_state(**given), QueueState(**given)
    assert built == expected
    assert all(getattr(built, name) is value for name, value in given.items())


def test_classes_with_post_init_are_refused() -> None:
    import pytest

    from snerd.projections.slots import fast_init

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            assert self.x > 0

    with pytest.raises(TypeError, match="__post_init__"):
        fast_init(Checked)


def test_the_descriptor_fallback_builds_the_same_objects() -> None:
    from snerd.projections.slots import fast_init

    slow_with, slow_build = fast_init(Task, twin=False)
    assert _every_field(slow_build(**FULL)) == _every_field(Task(**FULL))
    changed = slow_with(Task(id="a", type="b"), phase="active", attempt=2)
    assert _every_field(changed) == _every_field(Task(id="a", type="b", phase="active", attempt=2))


def test_built_objects_are_frozen_instances_of_the_class() -> None:
    import pytest

    for task in (build(**FULL), with_(Task(id="a", type="b"), order=3)):
        assert type(task) is Task
        with pytest.raises(dataclasses.FrozenInstanceError):
            task.order = 5  # type: ignore[misc]


def test_with_refuses_a_field_the_class_has_not() -> None:
    import pytest

    with pytest.raises(AttributeError):
        with_(Task(id="a", type="b"), colour="red")


def test_built_objects_pickle_copy_and_replace_like_the_dataclass() -> None:
    import copy
    import pickle

    built = with_(build(**{**FULL, "extra": {}}), order=7)
    made = Task(**{**FULL, "extra": {}, "order": 7})
    assert pickle.loads(pickle.dumps(built)) == made
    assert copy.deepcopy(built) == made
    assert dataclasses.replace(built, phase="ready") == dataclasses.replace(made, phase="ready")
    assert hash(build(id="a", type="b", order=3)) == hash(Task(id="a", type="b", order=3))


@given(st.none() | st.floats(allow_nan=False), st.none() | st.floats(allow_nan=False))
@example(0.0, -0.0)  # equal times: the first, as max() gives (here -0.0 != 0.0 in sign)
@example(-0.0, 0.0)
def test_not_before_is_the_later_of_the_two_times(execute_at: Any, retry_at: Any) -> None:
    task = build(id="t", type="x", execute_at=execute_at, retry_after_time=retry_at)
    times = [t for t in (execute_at, retry_at) if t is not None]
    expected = max(times) if times else None
    got = task.not_before
    # the very value, sign included (-0.0 == 0.0); a compiled core returns an equal float
    assert (got, repr(got)) == (expected, repr(expected))
