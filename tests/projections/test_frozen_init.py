"""slots.frozen_init: a frozen dataclass built by the fast ``__init__`` is the object the
dataclass's own ``__init__`` builds (same fields, same signature, still frozen), for the
progress reports a running task may send many of, and for any class it takes (the
commands every task builds are plain classes: ``test_plain_commands.py``)."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snerd.projections import commands
from snerd.projections.slots import frozen_init
from snerd.rpc import messages

HOT = (messages.Progress, commands.ReportProgress)


def _fields(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _dataclass_built(cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """What the dataclass's own ``__init__`` sets: the given values over the defaults."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in kwargs:
            out[f.name] = kwargs[f.name]
        elif f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        else:
            out[f.name] = f.default_factory()  # type: ignore[misc]
    return out


@pytest.mark.parametrize("cls", HOT)
def test_the_classes_every_task_builds_take_the_fast_init(cls: type) -> None:
    assert "_twin" in cls.__init__.__globals__  # (the dataclass's own has no twin)


_VALUE = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                   st.text(max_size=5), st.tuples(st.text(max_size=3)))  # fmt: skip


@given(st.data())
def test_an_instance_holds_what_the_dataclass_init_would_and_stays_frozen(data: Any) -> None:
    cls = data.draw(st.sampled_from(HOT))
    names = [f.name for f in dataclasses.fields(cls)]
    missing = dataclasses.MISSING
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is missing and f.default_factory is missing]  # fmt: skip
    chosen = data.draw(st.lists(st.sampled_from(names), unique=True))
    kwargs = {name: data.draw(_VALUE) for name in {*required, *chosen}}
    made = cls(**kwargs)
    assert type(made) is cls
    assert _fields(made) == _dataclass_built(cls, kwargs)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, names[-1], "changed")
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(made, names[0])
    assert pickle.loads(pickle.dumps(made)) == made
    assert made == cls(**kwargs)


def test_any_frozen_slotted_dataclass_keeps_its_signature_and_factories() -> None:
    @dataclass(frozen=True, slots=True)
    class Plain:
        a: int
        b: str = "b"
        _: KW_ONLY
        c: list[int] = field(default_factory=list)
        d: float = 1.5

    before = inspect.signature(Plain.__init__)
    fast = frozen_init(Plain)
    assert fast is Plain and "_twin" in Plain.__init__.__globals__
    assert [(p.name, p.kind) for p in inspect.signature(Plain.__init__).parameters.values()] == [
        (p.name, p.kind) for p in before.parameters.values()]  # fmt: skip
    one, two = Plain(1), Plain(2, "x", c=[3], d=2.5)
    assert (one.a, one.b, one.c, one.d) == (1, "b", [], 1.5)
    assert (two.a, two.b, two.c, two.d) == (2, "x", [3], 2.5)
    assert one.c is not Plain(1).c  # a fresh list each time, as the factory gives


def test_a_class_it_cannot_take_is_left_as_it_is() -> None:
    @dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("negative")

    @dataclass(frozen=True)
    class Unslotted:  # no slots: no twin has its layout
        a: int

    for cls in (Checked, Unslotted):
        init = cls.__init__
        assert frozen_init(cls) is cls and cls.__init__ is init
    with pytest.raises(ValueError):
        Checked(-1)
