"""The commands that are plain classes (``Finish``, ``Claim``: native in the wheel)
behave as the frozen dataclasses they were: the same signature, equal and hashed field
by field, shown and pickled with their fields, and immutable."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snerd.projections.commands import Claim, Finish
from snerd.projections.fields import REASON_MAX_RETRIES

_TEXT = st.text(max_size=4)
_FINISHES = st.builds(
    Finish, _TEXT, st.integers(0, 9), st.booleans(), error=st.none() | _TEXT,
    reason=st.sampled_from([REASON_MAX_RETRIES, "timeout"]),
    result=st.none() | st.integers() | _TEXT, retry=st.booleans(),
    jitter=st.floats(0.0, 1.0),
)  # fmt: skip
_CLAIMS = st.builds(Claim, st.tuples(_TEXT), st.floats(0.0, 10.0), st.floats(0.0, 2.0))
_FIELDS = {Finish: ("task_id", "attempt", "success", "error", "reason", "result", "retry",
                    "jitter"),
           Claim: ("task_ids", "lease_seconds", "timeout_grace")}  # fmt: skip


def _values(command: Any) -> tuple[Any, ...]:
    return tuple(getattr(command, name) for name in _FIELDS[type(command)])


@given(st.one_of(_FINISHES, _CLAIMS), st.one_of(_FINISHES, _CLAIMS))
def test_equal_and_hashed_field_by_field(a: Any, b: Any) -> None:
    same = type(a) is type(b) and _values(a) == _values(b)
    assert (a == b) is same and (a != b) is not same
    assert a == copy.copy(a) and hash(a) == hash(copy.deepcopy(a))
    assert pickle.loads(pickle.dumps(a)) == a and type(pickle.loads(pickle.dumps(a))) is type(a)


@given(st.one_of(_FINISHES, _CLAIMS))
def test_shown_as_a_dataclass_shows_its_fields(command: Any) -> None:
    shown = ", ".join(f"{name}={getattr(command, name)!r}" for name in _FIELDS[type(command)])
    assert repr(command) == f"{type(command).__name__}({shown})"


@given(st.one_of(_FINISHES, _CLAIMS), st.data())
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
