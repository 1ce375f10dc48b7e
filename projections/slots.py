"""Fast construction and copy of frozen, slotted classes (the fold's hot objects).

A frozen dataclass's ``__init__`` writes each field through ``object.__setattr__``, and
``dataclasses.replace`` goes through ``__init__`` again; every task builds a handler's
job. :func:`fast_init` generates, for such a class, a copy (``with_(obj, field=value,
...)``) and a constructor (keyword-only, the same defaults), as ``namedtuple``
generates its code. :func:`freeze` makes a plain slotted class (the task, the queue
state, a fold's delta: native classes in a wheel's compiled build) frozen the same way
where it is interpreted.

Both fill a *twin*: a class of the very same memory layout (:func:`fast_init`'s has the
same ``__slots__``; :func:`freeze`'s is a subclass of the class that adds none), whose
slots take ordinary attribute stores, the interpreter's fastest write; then the object
becomes an instance of the frozen class (``__class__`` assignment, which CPython allows
between classes of one layout). The result is the same object
``cls(...)`` builds, in about a third of the time of writing each slot through its
descriptor. Where an interpreter refuses the class change, both fall back to the
descriptors. Fields with a ``default_factory`` are required by the constructor.
Neither runs ``__post_init__``: use them only on classes without one.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from dataclasses import MISSING, FrozenInstanceError, fields, is_dataclass
from typing import Any, TypeVar

T = TypeVar("T")


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


def freeze(cls: type, *, inline: bool = False) -> None:
    """Make a plain slotted class's instances refuse assignment, as a frozen dataclass's
    do (``dataclasses.FrozenInstanceError``), while its own ``__init__`` keeps writing
    its slots with plain stores: the ``__init__`` runs on a *twin* (the same slots,
    ordinary attribute writes) and the instance becomes one of ``cls`` after, as
    :func:`fast_init` does. ``inline``: the class's ``__init__`` does nothing but store
    each parameter in the slot of its name, so the frozen ``__init__`` makes those
    stores itself, without calling it (checked once, on a probe: ``TypeError`` when it
    stores anything else). The ``__init__`` takes plain parameters, those after a ``*``
    by keyword only (``commands.Finish``'s options).

    A subclass of a frozen class is frozen the same way, with its own slots: its
    ``__init__`` (not ``inline``) may call the base's, which then stores on the
    subclass's twin as it is (the wire's ``Enqueue``). The twin is a subclass of
    ``cls`` that adds no slot, so ``super()`` works in the ``__init__``. For a class
    whose fields are ``Final`` (mypy refuses an assignment). A native class (a wheel's
    compiled build: its ``Final`` fields are read-only already), or one whose instances
    cannot change class, is left as it is."""
    names = [str(name) for name in cls.__dict__.get("__slots__", ())]
    if not names or not isinstance(cls.__dict__.get(names[0]), types.MemberDescriptorType):
        return  # native: its slots are not member descriptors
    twin = type(f"_{cls.__name__}Fill", (cls,), {
        "__slots__": (), "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__})  # fmt: skip
    if not _twin_works(cls, twin, names, fresh=True):
        return
    init = cls.__dict__["__init__"]
    params, args = [], []
    namespace: dict[str, Any] = {"_cls": cls, "_twin": twin, "_init": init,
                                 "_set": object.__setattr__, "_type": type}  # fmt: skip
    keywords: set[str] = set()  # the keyword-only parameters
    for p in list(inspect.signature(init).parameters.values())[1:]:
        if p.kind is p.KEYWORD_ONLY and not keywords:
            params.append("*")
        if p.kind is p.KEYWORD_ONLY:
            keywords.add(p.name)
        elif p.kind is not p.POSITIONAL_OR_KEYWORD or keywords:
            raise TypeError(f"{cls.__name__}.__init__ must take plain parameters only")
        if p.default is p.empty:
            params.append(p.name)
        else:
            namespace[f"_d_{p.name}"] = p.default
            params.append(f"{p.name}=_d_{p.name}")
        args.append(p.name)
    if inline and not _stores_only(init, twin, args, names, keywords):
        raise TypeError(f"{cls.__name__}.__init__ does more than store its parameters")
    if inline:
        body = "".join(f"    self.{name} = {name}\n" for name in args)
    else:
        passed = ", ".join(f"{a}={a}" if a in keywords else a for a in args)
        body = f"    _init(self, {passed})\n"
    exec(  # our own parameter names, read from the signature
        f"def __init__(self, {', '.join(params)}):\n"
        "    mine = _type(self) is _cls  # (else a subclass's, on its twin already)\n"
        "    if mine: _set(self, '__class__', _twin)\n"
        f"{body}"
        "    if mine: self.__class__ = _cls\n",
        namespace,
    )
    frozen_init = functools.update_wrapper(namespace["__init__"], init)  # its signature
    setattr(cls, "__init__", frozen_init)  # noqa: B010 (class attributes, set once)
    setattr(cls, "__setattr__", _refuse_set)  # noqa: B010
    setattr(cls, "__delattr__", _refuse_delete)  # noqa: B010


def field_values(obj: object, names: tuple[str, ...]) -> tuple[Any, ...]:
    """The values of ``obj``'s fields ``names``, in that order (a plain value class's
    equality, hash and pickle)."""
    return tuple(getattr(obj, name) for name in names)


def field_repr(obj: object, names: tuple[str, ...]) -> str:
    """``Class(name=value, ...)``, as a dataclass's ``repr`` shows its fields."""
    shown = ", ".join(f"{name}={getattr(obj, name)!r}" for name in names)
    return f"{type(obj).__name__}({shown})"


def rebuilt(cls: type[T], names: tuple[str, ...], values: tuple[Any, ...]) -> T:
    """``cls`` built from its fields ``names`` and their ``values``, each passed by
    name (the pickle of a plain value class whose constructor takes some by keyword
    only: ``__reduce__`` returns ``rebuilt, (cls, names, values)``)."""
    return cls(**dict(zip(names, values, strict=True)))


def replaced(obj: T, names: tuple[str, ...], changes: dict[str, Any]) -> T:
    """``obj``'s class built again from its fields ``names`` (its constructor's order),
    ``changes`` over them; ``AttributeError`` for a name it has not (a value class's
    rare copy: its hot copies name their fields)."""
    unknown = set(changes).difference(names)
    if unknown:
        raise AttributeError(f"{type(obj).__name__} has no field {', '.join(sorted(unknown))}")
    values = [changes[name] if name in changes else getattr(obj, name) for name in names]
    return type(obj)(*values)


def _stores_only(init: Callable[..., Any], twin: type, args: list[str], names: list[str],
                 keywords: set[str]) -> bool:  # fmt: skip
    """Whether ``init`` does nothing but store each parameter in the slot of its name
    (asked of it once, with a fresh object for each parameter, on a twin; ``keywords``:
    the parameters it takes by keyword only)."""
    if sorted(args) != sorted(names):
        return False
    probe: Any = object.__new__(twin)
    given = [object() for _ in args]
    try:
        init(probe, *[v for a, v in zip(args, given, strict=True) if a not in keywords],
             **{a: v for a, v in zip(args, given, strict=True) if a in keywords})  # fmt: skip
    except Exception:
        return False
    return all(getattr(probe, name) is value for name, value in zip(args, given, strict=True))


def _refuse_set(self: object, name: str, value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_delete(self: object, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _twin_works(cls: type, twin: type, names: list[str], *, fresh: bool = False) -> bool:
    """Whether an instance of ``twin`` can become one of ``cls`` with its slots intact
    (``fresh``: and an instance of ``cls`` one of ``twin`` first)."""
    probe: Any = object.__new__(cls if fresh else twin)
    try:
        if fresh:
            object.__setattr__(probe, "__class__", twin)
        for i, name in enumerate(names):
            setattr(probe, name, i)
        probe.__class__ = cls
    except (TypeError, AttributeError):
        return False
    return type(probe) is cls and [getattr(probe, n) for n in names] == list(range(len(names)))


def frozen_init(cls: type[T]) -> type[T]:
    """Decorator (above ``@dataclass(frozen=True, slots=True)``): the class's
    ``__init__``, with the very signature and defaults the dataclass gave it, writing
    the fields as plain stores on a *twin* instead of through ``object.__setattr__``
    one by one (what a frozen dataclass's ``__init__`` does: three times the cost).

    The twin is the class's base plus the class's own slots, with the plain attribute
    writes of ``object``; the instance becomes a twin for the writes and the class
    again after them (``__class__`` assignment, as :func:`fast_init`), so the object is
    the one the dataclass's ``__init__`` builds, frozen as before. Where the
    interpreter refuses the class change, or the class has what this ``__init__`` does
    not do (``__post_init__``, fields left out of ``__init__``), the class is left as
    it is."""
    if not is_dataclass(cls) or hasattr(cls, "__post_init__"):
        return cls
    own = tuple(cls.__dict__.get("__slots__", ()))
    every = fields(cls)
    init_fields = [f for f in every if f.init]
    if len(init_fields) != len(every) or not set(own) <= {f.name for f in init_fields}:
        return cls
    twin = type(f"_{cls.__name__}Fill", (cls.__base__ or object,), {
        "__slots__": own, "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__})  # fmt: skip
    if not _twin_works(cls, twin, [f.name for f in init_fields], fresh=True):
        return cls
    namespace: dict[str, Any] = {"_cls": cls, "_twin": twin, "_set": object.__setattr__,
                                 "_factory": _FACTORY}  # fmt: skip
    params: list[str] = []
    body = ["    _set(self, '__class__', _twin)"]
    starred = False
    # the dataclass's order: the fields taken by position first, the keyword-only after
    for f in sorted(init_fields, key=lambda f: bool(f.kw_only)):
        if f.kw_only and not starred:
            params.append("*")
            starred = True
        if f.default is not MISSING:
            namespace[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
        elif f.default_factory is not MISSING:
            namespace[f"_f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_factory")
            body.append(f"    if {f.name} is _factory: {f.name} = _f_{f.name}()")
        else:
            params.append(f.name)
    body += [f"    self.{f.name} = {f.name}" for f in init_fields]
    body.append("    self.__class__ = _cls")
    source = "def __init__(self, " + ", ".join(params) + "):\n" + "\n".join(body)
    exec(source, namespace)  # our own field names, checked by dataclasses
    init = namespace["__init__"]
    if _signature(init) != _signature(cls.__init__):  # (never, but then: as it was)
        return cls
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    setattr(cls, "__init__", init)  # noqa: B010 (a class attribute, set once)
    return cls


def _signature(init: Callable[..., Any]) -> list[tuple[str, Any, bool]]:
    """(name, kind, has a default) of each parameter: what callers of it can pass."""
    return [(p.name, p.kind, p.default is not p.empty)
            for p in inspect.signature(init).parameters.values()]  # fmt: skip


class _Factory:
    def __repr__(self) -> str:
        return "<factory>"  # as the dataclass's own signature shows it


_FACTORY: Any = _Factory()
"""The default of a field with a ``default_factory`` in :func:`frozen_init`'s signature."""
