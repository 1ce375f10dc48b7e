"""Fast construction and copy of frozen, slotted dataclasses (the fold's hot objects).

A frozen dataclass's ``__init__`` writes each field through ``object.__setattr__``, and
``dataclasses.replace`` goes through ``__init__`` again; the fold builds a
:class:`~snerd.projections.task.Task` on every enqueue and copies one on every claim,
and a :class:`~snerd.projections.state.QueueState` on every fold. :func:`fast_init`
generates, for such a class, a copy (``with_(obj, field=value, ...)``) and a
constructor (keyword-only, the same defaults), as ``namedtuple`` generates its code.

Both fill a *twin*: a plain class with the very same ``__slots__`` (so the same memory
layout), whose slots take ordinary attribute stores, the interpreter's fastest write;
then the object becomes an instance of the frozen class (``__class__`` assignment,
which CPython allows between classes of one layout). The result is the same object
``cls(...)`` builds, in about a third of the time of writing each slot through its
descriptor. Where an interpreter refuses the class change, both fall back to the
descriptors. Fields with a ``default_factory`` are required by the constructor.
Neither runs ``__post_init__``: use them only on classes without one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any


def fast_init(cls: type, *, twin: bool = True) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(with_, build)`` for the frozen, slotted dataclass ``cls`` (``twin=False``: write
    through the descriptors, as where the class change is refused)."""
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__: build it the usual way")
    names = [f.name for f in fields(cls)]
    if tuple(getattr(cls, "__slots__", ())) != tuple(names):
        raise TypeError(f"{cls.__name__} must be a dataclass with slots=True")
    defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
    fill_class = type(f"_{cls.__name__}Fill", (), {"__slots__": tuple(names)})
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    namespace.update({f"_d_{n}": v for n, v in defaults.items()})
    if twin and _twin_works(cls, fill_class, names):
        namespace["_twin"] = fill_class
        store, start = "    new.{0} = {1}", "    new = _new(_twin)"
        finish = ["    new.__class__ = _cls"]
        apply = "        setattr(new, name, value)"  # unknown names: AttributeError
    else:
        namespace.update({f"_s_{n}": getattr(cls, n).__set__ for n in names})
        store, start, finish = "    _s_{0}(new, {1})", "    new = _new(_cls)", []
        apply = "        getattr(_cls, name).__set__(new, value)"
    fill = [store.format(n, n) for n in names]
    copy = [store.format(n, f"obj.{n}") for n in names]
    params = [n if n not in defaults else f"{n}=_d_{n}" for n in names]
    lines = ["def build(*, " + ", ".join(params) + "):", start, *fill, *finish, "    return new"]
    lines += ["def with_(obj, /, **changes):", start, *copy,
              "    for name, value in changes.items():", apply, *finish,
              "    return new"]  # fmt: skip
    exec("\n".join(lines), namespace)  # our own field names, checked by dataclasses
    return namespace["with_"], namespace["build"]


def _twin_works(cls: type, twin: type, names: list[str]) -> bool:
    """Whether an instance of ``twin`` can become one of ``cls`` with its slots intact."""
    probe: Any = object.__new__(twin)
    for i, name in enumerate(names):
        setattr(probe, name, i)
    try:
        probe.__class__ = cls
    except TypeError:
        return False
    return type(probe) is cls and [getattr(probe, n) for n in names] == list(range(len(names)))
