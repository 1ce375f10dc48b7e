"""The commands that are plain classes (``Enqueue``, ``Finish``, ``Claim``, and the wire's
``Enqueue`` and ``Result``: native in the wheel) behave as the frozen dataclasses they
were: the same signature, equal and hashed field by field, shown and pickled with their
fields, and immutable."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snerd.projections import commands
from snerd.projections.commands import Claim, Finish
from snerd.projections.fields import REASON_MAX_RETRIES
from snerd.rpc import messages
from snerd.rpc.messages import Result
from snerd.rpc.protocol import encode_command, parse_line

_TEXT = st.text(max_size=4)
_FINISHES = st.builds(
    Finish, _TEXT, st.integers(0, 9), st.booleans(), error=st.none() | _TEXT,
    reason=st.sampled_from([REASON_MAX_RETRIES, "timeout"]),
    result=st.none() | st.integers() | _TEXT, retry=st.booleans(),
    jitter=st.floats(0.0, 1.0),
)  # fmt: skip
_CLAIMS = st.builds(Claim, st.tuples(_TEXT), st.floats(0.0, 10.0), st.floats(0.0, 2.0))
_RESULTS = st.builds(
    Result, _TEXT, st.booleans(), error=st.none() | _TEXT, attempt=st.none() | st.integers(1, 9),
    retry=st.booleans(), request_id=st.none() | st.integers(0, 9) | _TEXT,
    result=st.none() | st.integers(-(2**53), 2**53) | _TEXT,
)  # fmt: skip
_OPTIONS: dict[str, Any] = {
    "task_data": st.sampled_from(["null", "{}", '{"n":1}']), "max_retries": st.integers(0, 9),
    "retry_after_hours": st.floats(0.0, 2.0), "retry_backoff": st.none() | st.just("exponential"),
    "retry_max_delay": st.none() | st.floats(1.0, 60.0), "auto_dedupe": st.booleans(),
    "urgency_score": st.floats(-5.0, 5.0), "rate_limit_group": st.none() | _TEXT,
    "max_per_minute": st.none() | st.integers(1, 9), "execute_at": st.none() | st.floats(0, 1e9),
    "cron": st.none() | st.just("* * * * *"), "webhook_url": st.none() | st.just("http://h/"),
    "max_execution_seconds": st.none() | st.floats(0.5, 9.0), "pool": st.none() | _TEXT,
    "trigger_after_ids": st.lists(_TEXT, max_size=2).map(tuple),
}  # fmt: skip


def _enqueues(cls: type, *positional: Any) -> Any:
    """``cls`` built with drawn positional fields and a drawn subset of the options."""
    return st.fixed_dictionaries({}, optional=_OPTIONS).flatmap(
        lambda options: st.builds(cls, *positional, **{
            name: st.just(value) for name, value in options.items()}))  # fmt: skip


_CORE_ENQUEUES = _enqueues(commands.Enqueue, _TEXT, _TEXT)
_WIRE_ENQUEUES = _enqueues(messages.Enqueue, _TEXT, _TEXT, st.none() | st.integers(0, 9) | _TEXT)
_ENQUEUE_FIELDS = ("task_id", "task_type", *_OPTIONS)
_FIELDS = {commands.Enqueue: _ENQUEUE_FIELDS,
           messages.Enqueue: (*_ENQUEUE_FIELDS, "request_id"),
           Finish: ("task_id", "attempt", "success", "error", "reason", "result", "retry",
                    "jitter"),
           Claim: ("task_ids", "lease_seconds", "timeout_grace"),
           Result: ("task_id", "success", "error", "attempt", "retry", "request_id",
                    "result")}  # fmt: skip
_ANY = st.one_of(_FINISHES, _CLAIMS, _RESULTS, _CORE_ENQUEUES, _WIRE_ENQUEUES)


def _values(command: Any) -> tuple[Any, ...]:
    return tuple(getattr(command, name) for name in _FIELDS[type(command)])


@given(_ANY, _ANY)
def test_equal_and_hashed_field_by_field(a: Any, b: Any) -> None:
    same = type(a) is type(b) and _values(a) == _values(b)
    assert (a == b) is same and (a != b) is not same
    assert a == copy.copy(a) and hash(a) == hash(copy.deepcopy(a))
    assert pickle.loads(pickle.dumps(a)) == a and type(pickle.loads(pickle.dumps(a))) is type(a)


@given(_ANY)
def test_shown_as_a_dataclass_shows_its_fields(command: Any) -> None:
    shown = ", ".join(f"{name}={getattr(command, name)!r}" for name in _FIELDS[type(command)])
    assert repr(command) == f"{type(command).__name__}({shown})"


@given(_ANY, st.data())
def test_immutable(command: Any, data: Any) -> None:
    name = data.draw(st.sampled_from(_FIELDS[type(command)]))
    before = _values(command)
    with pytest.raises(AttributeError):  # FrozenInstanceError, or a compiled read-only
        setattr(command, name, "changed")
    with pytest.raises(AttributeError):
        delattr(command, name)
    assert _values(command) == before


def test_the_signatures_are_the_dataclasses() -> None:
    """Every field by its name, the options by name only, the defaults the dataclasses
    had (asked of the calls: a compiled class's ``inspect.signature`` shows every
    parameter as positional-only)."""
    named = Finish(task_id="t", attempt=2, success=False, error="e", reason="r", result=[1],
                   retry=False, jitter=0.5)  # fmt: skip
    assert _values(named) == ("t", 2, False, "e", "r", [1], False, 0.5)
    assert _values(Claim(task_ids=("a",), lease_seconds=5.0, timeout_grace=0.5)) == (
        ("a",), 5.0, 0.5)  # fmt: skip
    assert _values(Claim(("a",))) == (("a",), 3600.0, 1.0)
    assert _values(Finish("t", 2, False)) == (
        "t", 2, False, None, REASON_MAX_RETRIES, None, True, 0.0)  # fmt: skip
    with pytest.raises(TypeError):
        Finish("t", 1)  # type: ignore[call-arg]  # success is required
    for option in ("e", "r", [1], False, 0.5):
        with pytest.raises(TypeError):
            Finish("t", 1, False, option)  # type: ignore[misc]  # the options by name only


_NAMES = st.text("abc-_1", min_size=1, max_size=4)
_WIRE_RESULTS = st.builds(
    Result, _NAMES, st.booleans(), error=st.none() | _NAMES, attempt=st.none() | st.integers(1, 9),
    retry=st.booleans(), request_id=st.none() | st.integers(0, 9) | _NAMES,
    result=st.none() | st.integers(-(2**53), 2**53) | _NAMES,
)  # fmt: skip


@given(_WIRE_RESULTS)
def test_a_result_line_parses_back_equal(result: Result) -> None:
    """``encode_command`` writes a plain class's fields as a dataclass's (a success's
    ``error`` and a failure's ``result`` are not read back: the parser drops them)."""
    line = encode_command(result)
    again = parse_line(line)
    assert isinstance(again, Result) and again.action == "result"
    assert (again.task_id, again.success, again.attempt, again.retry, again.request_id) == (
        result.task_id, result.success, result.attempt, result.retry, result.request_id)
    assert again.error == (None if result.success else result.error)
    assert again.result == (result.result if result.success else None)


def test_an_enqueue_takes_what_the_dataclass_took() -> None:
    """The task's id and type by position (the wire's ``request_id`` after them), every
    option by name only, with the dataclass's defaults."""
    bare = commands.Enqueue("t", "mail")
    assert _values(bare) == ("t", "mail", "null", commands.DEFAULT_MAX_RETRIES, 0.0, None, None,
                             False, 0.0, None, None, None, None, None, None, None, ())  # fmt: skip
    wire = messages.Enqueue("t", "mail", 7, task_data="{}", pool="p")
    assert (wire.task_id, wire.request_id, wire.task_data, wire.pool) == ("t", 7, "{}", "p")
    assert messages.Enqueue("t", "mail").request_id is None
    named = messages.Enqueue(task_id="t", task_type="mail", request_id="r", max_retries=0)
    assert (named.request_id, named.max_retries) == ("r", 0)
    with pytest.raises(TypeError):
        commands.Enqueue("t", "mail", "{}")  # type: ignore[misc]  # task_data by name only
    with pytest.raises(TypeError):
        messages.Enqueue("t", "mail", 7, "{}")  # type: ignore[call-arg]  # likewise
    with pytest.raises(TypeError):
        messages.Enqueue("t", "mail", colour="red")  # no such option
    assert isinstance(wire, commands.Enqueue) and wire != commands.Enqueue("t", "mail")


@given(st.one_of(_CORE_ENQUEUES, _WIRE_ENQUEUES), st.data())
def test_replace_changes_exactly_the_named_fields(command: Any, data: Any) -> None:
    names = _FIELDS[type(command)]
    changed = data.draw(st.lists(st.sampled_from(names), unique=True))
    kinds = {**_OPTIONS, "task_id": _TEXT, "task_type": _TEXT, "request_id": st.integers()}
    values = {name: data.draw(kinds[name]) for name in changed}  # (each of its type: a
    before = _values(command)  # compiled class checks them)
    again = command.replace(**values)
    assert type(again) is type(command)
    assert _values(again) == tuple(values.get(n, getattr(command, n)) for n in names)
    assert _values(command) == before
    with pytest.raises(TypeError, match="no field colour"):
        command.replace(colour="red")


_WIRE_LINES = st.builds(
    messages.Enqueue, _NAMES, _NAMES, st.none() | st.integers(0, 9) | _NAMES,
    task_data=st.sampled_from(["null", "{}", '{"n":1}']), max_retries=st.integers(0, 9),
    urgency_score=st.floats(-5.0, 5.0), pool=st.none() | _NAMES,
    trigger_after_ids=st.lists(_NAMES, max_size=2, unique=True).map(tuple),
    auto_dedupe=st.booleans(),
).filter(lambda enqueue: enqueue.task_id not in enqueue.trigger_after_ids)  # fmt: skip


@given(_WIRE_LINES)
def test_an_enqueue_line_parses_back_equal(enqueue: messages.Enqueue) -> None:
    """``encode_command`` writes the wire's ``Enqueue`` (every field, its own
    ``request_id`` with them) as the dataclass's; the parser builds it again."""
    line = encode_command(enqueue)
    assert parse_line(line) == enqueue
    assert (b'"request_id"' in line) is (enqueue.request_id is not None)
