"""Single reads and writes on the state's persistent maps and sets, one call each.

The state's tables and indexes are ``immutables.Map`` (a hash array mapped trie in C,
the structure behind ``contextvars``): ``get``/``assoc``/``dissoc`` are its own ``get``,
``set`` and ``delete``, a few hundred nanoseconds each (pyrsistent's ``PMap`` took 3-5
us per write through even the fast path that this module used to keep, and the fold
makes a few per event; ``benchmarks/README.md``).

The sets of ids inside the indexes (and ``doomed``) are each an :data:`IdSet`: the same
``Map``, from each id to ``True``. A set iterates, counts, tests membership and compares
as its ids do; :func:`set_add` and :func:`set_discard` are one ``set`` or ``delete``
each (~0.1 us; a pyrsistent ``PSet``, which they were, took ~1 us for either even
through the fast path on its private layout that this module used to keep).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, TypeAlias, TypeVar

from immutables import Map

K = TypeVar("K")
V = TypeVar("V")

IdSet: TypeAlias = Map[K, bool]
"""A persistent set: a map from each member to ``True``."""


# --- maps (immutables.Map) ------------------------------------------------------------------

get: Final[Callable[..., Any]] = Map.get
"""``get(m, key, default=None)``: ``m.get(key, default)``."""
assoc: Final[Callable[[Any, Any, Any], Any]] = Map.set
"""``assoc(m, key, value)``: ``m.set(key, value)``."""
has: Final[Callable[[Any, Any], bool]] = Map.__contains__
"""``has(m, key)``: ``key in m``."""


def dissoc(m: Map[K, V], key: K) -> Map[K, V]:
    """``m`` without ``key`` (``m`` itself when the key is absent: never raises)."""
    return m.delete(key) if key in m else m


# --- sets (an IdSet: a Map of member -> True) --------------------------------------------


def id_set(items: Iterable[K] = ()) -> IdSet[K]:
    """The set of ``items``."""
    return Map((item, True) for item in items)


def set_has(s: IdSet[K], item: K) -> bool:
    """``item in s``."""
    return item in s


def set_add(s: IdSet[K], item: K) -> IdSet[K]:
    """``s`` with ``item`` (``s`` itself when it already holds ``item``)."""
    return s if item in s else s.set(item, True)


def set_discard(s: IdSet[K], item: K) -> IdSet[K]:
    """``s`` without ``item`` (``s`` itself when it does not hold ``item``)."""
    return s.delete(item) if item in s else s


EMPTY_SET: Final[IdSet[Any]] = Map()
