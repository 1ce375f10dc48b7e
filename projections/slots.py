"""Fast construction and copy of frozen, slotted dataclasses (the fold's hot objects).

A frozen dataclass's ``__init__`` writes each field through ``object.__setattr__``, and
``dataclasses.replace`` goes through ``__init__`` again; the fold builds a
:class:`~snerd.projections.task.Task` on every enqueue and copies one on every claim,
and a :class:`~snerd.projections.state.QueueState` on every fold. :func:`fast_init`
generates, for such a class, a copy (``with_(obj, field=value, ...)``) and a
constructor (keyword-only, the same defaults) that write each slot through its own
descriptor: the same object, built in about half the time (generated code, as
``namedtuple`` does). Fields with a ``default_factory`` are required by the
constructor. Neither runs ``__post_init__``: use them only on classes without one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any


def fast_init(cls: type) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(with_, build)`` for the frozen, slotted dataclass ``cls``."""
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__: build it the usual way")
    names = [f.name for f in fields(cls)]
    defaults = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
    lines = ["def with_(obj, *, " + ", ".join(f"{n}=_KEEP" for n in names) + "):",
             "    new = _new(_cls)"]  # fmt: skip
    lines += [f"    _s_{n}(new, obj.{n} if {n} is _KEEP else {n})" for n in names]
    lines.append("    return new")
    params = [n if n not in defaults else f"{n}=_d_{n}" for n in names]
    lines += ["def build(*, " + ", ".join(params) + "):", "    new = _new(_cls)"]
    lines += [f"    _s_{n}(new, {n})" for n in names]
    lines.append("    return new")
    namespace: dict[str, Any] = {"_KEEP": object(), "_new": object.__new__, "_cls": cls}
    namespace.update({f"_s_{n}": getattr(cls, n).__set__ for n in names})
    namespace.update({f"_d_{n}": v for n, v in defaults.items()})
    exec("\n".join(lines), namespace)  # our own field names, checked by dataclasses
    return namespace["with_"], namespace["build"]
