"""The task class: what its constructor and copies set, its equality, and that no
field of it can be assigned; and the fast constructors of the other hot classes."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pyrsistent import pmap

from snerd.projections.slots import freeze
from snerd.projections.task import FIELDS, Claim, Task, rebooked, with_

FULL: dict[str, Any] = {
    "id": "t1", "type": "mail", "data": '{"a": 1}', "max_retries": 5, "retry_after_hours": 0.5,
    "retry_count": 2, "urgency": 3.0, "execute_at": 10.0, "retry_after_time": 20.0,
    "cron": "* * * * *", "webhook_url": "http://x", "max_execution_seconds": 9.5, "pool": "p",
    "rate_group": "g", "max_per_minute": 7, "auto_dedupe": True, "fingerprint": "ff",
    "parents": ("a", "b"), "last_error": "boom", "created_at": 1.0, "retry_backoff": "exponential",
    "retry_max_delay": 60.0, "extra": pmap({"x": 1}), "order": 42, "phase": "active",
    "attempt": 3, "claim": Claim("d", 3, 5.0, 9.0), "progress": {"p": 1},
}  # fmt: skip
DEFAULTS: dict[str, Any] = {
    "data": "null", "max_retries": 3, "retry_after_hours": 0.0, "retry_count": 0,
    "urgency": 0.0, "execute_at": None, "retry_after_time": None, "cron": None,
    "webhook_url": None, "max_execution_seconds": None, "pool": None, "rate_group": None,
    "max_per_minute": None, "auto_dedupe": False, "fingerprint": None, "parents": (),
    "last_error": None, "created_at": None, "retry_backoff": None, "retry_max_delay": None,
    "extra": pmap(), "order": 0, "phase": "ready", "attempt": 0, "claim": None, "progress": None,
}  # fmt: skip
OTHER: dict[str, Any] = {
    "id": "t2", "type": "sms", "data": "[]", "max_retries": 6, "retry_after_hours": 1.5,
    "retry_count": 3, "urgency": 4.0, "execute_at": 11.0, "retry_after_time": 21.0,
    "cron": "0 * * * *", "webhook_url": "http://y", "max_execution_seconds": 8.5, "pool": "q",
    "rate_group": "h", "max_per_minute": 8, "auto_dedupe": False, "fingerprint": "ee",
    "parents": ("c",), "last_error": "bang", "created_at": 2.0, "retry_backoff": None,
    "retry_max_delay": 61.0, "extra": pmap(), "order": 43, "phase": "ready",
    "attempt": 4, "claim": None, "progress": 6,
}  # fmt: skip
"""A value of the right type for every field, each unlike FULL's."""
BOOKKEEPING = ("order", "phase", "attempt", "claim", "progress")


def _every_field(task: Task) -> tuple[Any, ...]:
    return tuple(getattr(task, name) for name in FIELDS)


def test_the_fields_are_the_constructors_parameters_in_order() -> None:
    assert (*FULL,) == FIELDS
    assert FIELDS[-len(BOOKKEEPING):] == BOOKKEEPING
    by_name, in_order = Task(**FULL), Task(*FULL.values())
    assert _every_field(by_name) == _every_field(in_order) == tuple(FULL.values())


def test_the_constructor_sets_what_it_is_given_and_the_defaults() -> None:
    assert _every_field(Task(**FULL)) == tuple(FULL.values())
    assert _every_field(Task(*FULL.values())) == tuple(FULL.values())
    assert _every_field(Task(id="a", type="b")) == ("a", "b", *DEFAULTS.values())


@given(st.sets(st.sampled_from(sorted(FULL)), max_size=len(FULL)))
def test_with_changes_exactly_the_named_fields(names: set[str]) -> None:
    base = Task(id="a", type="b")
    changes = {name: FULL[name] for name in names}
    expected = tuple(changes.get(name, getattr(base, name)) for name in FIELDS)
    assert _every_field(with_(base, **changes)) == expected


@given(st.integers(), st.sampled_from(("ready", "active", "delayed")), st.integers(0, 9),
       st.none() | st.just(Claim("d", 1, 2.0, None)), st.none() | st.integers())  # fmt: skip
def test_rebooked_changes_the_bookkeeping_only(
    order: int, phase: str, attempt: int, claim: Claim | None, progress: Any
) -> None:
    base = Task(**FULL)
    got = rebooked(base, order, phase, attempt, claim, progress)
    values = dict(zip(BOOKKEEPING, (order, phase, attempt, claim, progress), strict=True))
    assert _every_field(got) == _every_field(with_(base, **values))
    assert type(got) is Task


def test_no_field_can_be_assigned_or_deleted() -> None:
    for task in (Task(**FULL), with_(Task(id="a", type="b"), order=3),
                 rebooked(Task(id="a", type="b"), 1, "ready", 0, None, None)):  # fmt: skip
        assert type(task) is Task
        with pytest.raises(AttributeError):  # FrozenInstanceError, or a compiled read-only
            task.order = 5  # type: ignore[misc]
        with pytest.raises(AttributeError):
            del task.order  # type: ignore[misc]
        assert task.order != 5


def test_with_refuses_a_field_the_class_has_not() -> None:
    with pytest.raises(AttributeError):
        with_(Task(id="a", type="b"), colour="red")


def test_equal_when_every_field_but_extra_is() -> None:
    full = {**FULL, "progress": 5}  # (a dict's progress is unhashable, as in a dataclass)
    assert Task(**full) == Task(**{**full, "extra": pmap({"y": 2})})
    assert hash(Task(**full)) == hash(Task(**{**full, "extra": pmap()}))
    for name in FIELDS:
        if name != "extra":
            other = with_(Task(**full), **{name: OTHER[name]})
            assert Task(**full) != other, name
    assert Task(id="a", type="b") != ("a", "b")
    assert Task(id="a", type="b").__eq__(("a", "b")) is NotImplemented


def test_repr_pickle_and_copies() -> None:
    import copy
    import pickle

    task = Task(**{**FULL, "progress": None})
    assert repr(task).startswith("Task(id='t1', type='mail', data='{\"a\": 1}', max_retries=5,")
    assert repr(task).endswith("attempt=3, claim=Claim(daemon='d', attempt=3, at=5.0, "
                               "lease_until=9.0), progress=None)")  # fmt: skip
    for again in (pickle.loads(pickle.dumps(task)), copy.copy(task), copy.deepcopy(task)):
        assert _every_field(again) == _every_field(task)
        assert type(again) is Task


def test_freeze_keeps_the_signature_and_refuses_assignment() -> None:
    class Point:
        __slots__ = ("x", "y")

        def __init__(self, x: int, y: int = 7) -> None:
            self.x = x
            self.y = y

    before = inspect.signature(Point.__init__)
    freeze(Point)
    assert inspect.signature(Point.__init__) == before
    p = Point(1)
    assert (type(p), p.x, p.y) == (Point, 1, 7)
    assert Point(y=2, x=3).y == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.y
    assert (p.x, p.y) == (1, 7)


def test_freeze_inlines_only_an_init_that_stores_its_parameters() -> None:
    class Plain:
        __slots__ = ("x", "y")

        def __init__(self, x: int, y: int = 7) -> None:
            self.x = x
            self.y = y

    class Converting:
        __slots__ = ("x",)

        def __init__(self, x: str) -> None:
            self.x = int(x)

    class Swapping:
        __slots__ = ("x", "y")

        def __init__(self, x: int, y: int) -> None:
            self.x = y
            self.y = x

    freeze(Plain, inline=True)
    assert "_init" not in Plain.__init__.__code__.co_names  # the stores themselves
    assert (Plain(1).x, Plain(1).y, Plain(2, y=3).y) == (1, 7, 3)
    for cls in (Converting, Swapping):
        with pytest.raises(TypeError, match="does more than store"):
            freeze(cls, inline=True)
    freeze(Converting)  # not inlined: its own __init__ runs, on the twin
    assert Converting("5").x == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        Converting("5").x = 6


def test_freeze_refuses_an_init_it_cannot_forward() -> None:
    class Starred:
        __slots__ = ("x",)

        def __init__(self, *x: int) -> None:
            self.x = x

    with pytest.raises(TypeError, match="plain parameters"):
        freeze(Starred)


def test_freeze_takes_a_subclass_that_calls_its_base() -> None:
    """A frozen class's subclass, frozen with its own slot, whose ``__init__`` calls the
    base's (the wire's ``Enqueue``): built whole, both refuse assignment, and the base's
    instances are built as before."""

    class Base:
        __slots__ = ("x", "y")

        def __init__(self, x: int, *, y: int = 7) -> None:
            self.x = x
            self.y = y

    class Sub(Base):
        __slots__ = ("z",)

        def __init__(self, x: int, z: int = 0, *, y: int = 7) -> None:
            super().__init__(x, y=y)
            self.z = z

    freeze(Base, inline=True)
    freeze(Sub)
    for made in (Sub(1, 2, y=3), Sub(x=1, y=3, z=2)):
        assert (type(made), made.x, made.y, made.z) == (Sub, 1, 3, 2)
    assert (type(Base(4)), Base(4).x, Base(4).y) == (Base, 4, 7)
    assert Sub(5).y == 7
    for obj, name in ((Sub(1), "x"), (Sub(1), "z"), (Base(1), "y")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, 9)
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(obj, name)
    with pytest.raises(TypeError):
        Sub(1, w=2)  # the base takes no such option


def test_the_state_holds_what_it_is_given_refuses_assignment_and_copies() -> None:
    import pickle

    from immutables import Map

    from snerd.projections import heap
    from snerd.projections.queue_state import FIELDS as STATE_FIELDS
    from snerd.projections.queue_state import with_state
    from snerd.projections.state import QueueState

    given = {name: getattr(QueueState(), name) for name in STATE_FIELDS}
    given.update(n=7, last_seq=9, invalid=2, timers=heap.from_keys([(0.0, 1, "a")]),
                 tasks=Map({"a": Task(id="a", type="b")}))  # fmt: skip
    state = QueueState(**given)
    assert all(getattr(state, name) is value for name, value in given.items())
    assert QueueState(*given.values()) == state
    assert state != QueueState() and hash(QueueState()) == hash(QueueState())
    with pytest.raises(AttributeError):  # FrozenInstanceError, or a compiled read-only
        state.n = 8  # type: ignore[misc]
    assert with_state(state, n=3) == QueueState(**{**given, "n": 3})
    with pytest.raises(AttributeError):
        with_state(state, colour="red")
    assert pickle.loads(pickle.dumps(state)) == state
    assert repr(QueueState()).startswith("QueueState(tasks=immutables.Map({}), dlq=")


def test_classes_with_post_init_are_refused() -> None:
    from snerd.projections.slots import fast_init

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            assert self.x > 0

    with pytest.raises(TypeError, match="__post_init__"):
        fast_init(Checked)


@dataclasses.dataclass(frozen=True, slots=True)
class _Pair:
    x: int
    y: str = "y"


def test_the_descriptor_fallback_builds_the_same_objects() -> None:
    from snerd.projections.slots import fast_init

    for twin in (True, False):
        fast_with, fast_build = fast_init(_Pair, twin=twin)
        assert (fast_build(x=1), fast_build(x=2, y="z")) == (_Pair(1), _Pair(2, "z"))
        assert fast_with(_Pair(1), y="w") == _Pair(1, "w")
        assert type(fast_build(x=1)) is _Pair


@given(st.none() | st.floats(allow_nan=False), st.none() | st.floats(allow_nan=False))
@example(0.0, -0.0)  # equal times: the first, as max() gives (here -0.0 != 0.0 in sign)
@example(-0.0, 0.0)
def test_not_before_is_the_later_of_the_two_times(execute_at: Any, retry_at: Any) -> None:
    task = Task(id="t", type="x", execute_at=execute_at, retry_after_time=retry_at)
    times = [t for t in (execute_at, retry_at) if t is not None]
    expected = max(times) if times else None
    got = task.not_before
    # the very value, sign included (-0.0 == 0.0); a compiled core returns an equal float
    assert (got, repr(got)) == (expected, repr(expected))
