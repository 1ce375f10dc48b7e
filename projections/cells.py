"""Mutable handles over persistent maps and sets, local to one fold.

pyrsistent's evolvers lack ``get`` and iteration; these handles keep the mapping
API the fold needs while every write still produces a new persistent value, so
the state a fold started from is never touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from pyrsistent.typing import PMap, PSet

K = TypeVar("K")
V = TypeVar("V")


class MapCell(Generic[K, V]):
    """A persistent map behind a mutable handle."""

    __slots__ = ("value",)

    def __init__(self, value: PMap[K, V]) -> None:
        self.value = value

    def get(self, key: K, default: V | None = None) -> V | None:
        return self.value.get(key, default)

    def __getitem__(self, key: K) -> V:
        return self.value[key]

    def __setitem__(self, key: K, item: V) -> None:
        self.value = self.value.set(key, item)

    def __delitem__(self, key: K) -> None:
        self.value = self.value.remove(key)

    def __contains__(self, key: object) -> bool:
        return key in self.value

    def __iter__(self) -> Iterator[K]:
        return iter(self.value)

    def persistent(self) -> PMap[K, V]:
        return self.value


class SetCell(Generic[K]):
    """A persistent set behind a mutable handle."""

    __slots__ = ("value",)

    def __init__(self, value: PSet[K]) -> None:
        self.value = value

    def add(self, item: K) -> None:
        self.value = self.value.add(item)

    def remove(self, item: K) -> None:
        self.value = self.value.remove(item)

    def __contains__(self, item: object) -> bool:
        return item in self.value

    def persistent(self) -> PSet[K]:
        return self.value
