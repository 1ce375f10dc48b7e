"""Single reads and writes on the state's persistent maps and sets, one call each.

The state's tables and indexes are ``immutables.Map`` (a hash array mapped trie in C,
the structure behind ``contextvars``): ``get``/``assoc``/``dissoc`` are its own ``get``,
``set`` and ``delete``, a few hundred nanoseconds each (pyrsistent's ``PMap`` took 3-5
us per write through even the fast path that this module used to keep, and the fold
makes a few per event; ``benchmarks/README.md``).

The sets of ids inside the indexes (and ``doomed``) stay pyrsistent ``PSet``s: small,
and written one element at a time. Through pyrsistent's public API a read is four
Python calls and a write builds an evolver; :func:`set_add`, :func:`set_discard` and
:func:`set_has` do exactly what pyrsistent 0.20's own code does on the set's map (same
hash table, same bucket order, same growth rule, so the sets they return equal, and
are laid out like, the ones ``add``/``discard`` return) in one call each, on its
``_buckets``/``_size`` slots. A growth step is left to pyrsistent itself.

These slots are private: at import, :func:`_agrees` checks the fast functions against
the public API on sample maps, and if pyrsistent ever changes its layout the module
falls back to the public methods (slower, never wrong). ``tests/projections`` checks
the same agreement with generated operations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

from immutables import Map
from pyrsistent import PMap, PSet, pmap, pset

K = TypeVar("K")
V = TypeVar("V")

_MISSING: Final = object()
_PSet: Any = PSet
_new = object.__new__
_set_size: Any = getattr(PMap.__dict__.get("_size"), "__set__", None)
_set_buckets: Any = getattr(PMap.__dict__.get("_buckets"), "__set__", None)


def _pmap_of(size: int, buckets: Any) -> Any:
    """``PMap(size, buckets)`` without its Python-level ``__new__`` (two slot writes)."""
    m = _new(PMap)
    _set_size(m, size)
    _set_buckets(m, buckets)
    return m


# --- the fast versions (pyrsistent's layout) -----------------------------------------------


def _fast_get(m: PMap[Any, Any], key: Any, default: Any = None) -> Any:
    buckets = m._buckets
    bucket = buckets[hash(key) % len(buckets)]
    if bucket:
        for k, v in bucket:
            if k == key:
                return v
    return default


def _fast_assoc(m: Any, key: Any, value: Any) -> Any:
    buckets = m._buckets
    index = hash(key) % len(buckets)
    bucket = buckets[index]
    if bucket:
        for k, v in bucket:
            if k == key:
                if v is value:
                    return m
                if len(bucket) == 1:
                    new = [(k, value)]
                else:
                    new = [(k2, value) if k2 == key else (k2, v2) for k2, v2 in bucket]
                return _pmap_of(m._size, buckets.set(index, new))
    size = m._size
    if len(buckets) < 0.67 * size:  # pyrsistent grows the table here: let it
        return m.set(key, value)
    new = [(key, value)]
    if bucket:
        new.extend(bucket)
    return _pmap_of(size + 1, buckets.set(index, new))


def _fast_dissoc(m: Any, key: Any) -> Any:
    """``m`` without ``key`` (``m`` itself when the key is absent: never raises)."""
    buckets = m._buckets
    index = hash(key) % len(buckets)
    bucket = buckets[index]
    if bucket:
        new = [(k, v) for k, v in bucket if not (k == key)]  # noqa: SIM201  (as pyrsistent: no __ne__)
        removed = len(bucket) - len(new)
        if removed:
            return _pmap_of(m._size - removed, buckets.set(index, new or None))
    return m


# --- the check of the fast versions against pyrsistent's public API -----------------------


def _agrees() -> bool:
    """Whether the fast functions give what the public API gives, on a sample map that
    grows its table several times and removes keys on the way (well under 1 ms)."""
    try:
        m: PMap[Any, Any] = pmap()
        reference: PMap[Any, Any] = pmap()
        for i in range(120):
            key = (i * 7919) % 211
            m, reference = _fast_assoc(m, key, i), reference.set(key, i)
            if i % 3 == 0:
                m, reference = _fast_dissoc(m, i % 50), reference.discard(i % 50)
        if m != reference or len(m) != len(reference) or dict(m.items()) != dict(reference):
            return False
        return all(_fast_get(m, k, _MISSING) == reference.get(k, _MISSING) for k in range(-5, 215))
    except Exception:  # any surprise: use the public API
        return False


FAST: Final = (
    _set_size is not None and _set_buckets is not None and hasattr(PSet, "_map") and _agrees()
)
"""Whether the sets' fast functions are in use (pyrsistent's layout is the one they know)."""


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


# --- sets (a PSet is a PMap of element -> True) ------------------------------------------


def set_has(s: Any, item: Any) -> bool:
    """``item in s``."""
    if not FAST:
        return item in s
    return _fast_get(s._map, item, _MISSING) is not _MISSING


def set_add(s: Any, item: K) -> PSet[K]:
    """``s.add(item)`` (``s`` itself when it already holds ``item``)."""
    if not FAST:
        return cast("PSet[K]", s.add(item))
    m = s._map
    new = _fast_assoc(m, item, True)
    return cast("PSet[K]", s if new is m else _PSet(new))


def set_discard(s: Any, item: K) -> PSet[K]:
    """``s.discard(item)`` (``s`` itself when it does not hold ``item``)."""
    if not FAST:
        return cast("PSet[K]", s.discard(item))
    m = s._map
    new = _fast_dissoc(m, item)
    return cast("PSet[K]", s if new is m else _PSet(new))


EMPTY_SET: Final[PSet[Any]] = pset()
