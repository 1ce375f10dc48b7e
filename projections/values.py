"""The base of the plain command classes every task builds or reads (:class:`Value`):
``attempts.py``'s ``Finish`` and ``Claim``, ``enqueue.py``'s ``Enqueue`` and the wire's
``Result`` and ``Enqueue``.

Compiled with them (a native class takes only a native base): what a frozen dataclass
gave them, written once over the fields each names in ``FIELDS``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from snerd.projections.slots import field_repr, field_values, rebuilt


class Value:
    """Equal and hashed field by field (``FIELDS``, its fields in the order the dataclass
    had them), shown and pickled with its fields (rebuilt by name), as a frozen
    dataclass; only to an instance of its very class."""

    FIELDS: ClassVar[tuple[str, ...]] = ()

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        names = type(self).FIELDS
        return field_values(self, names) == field_values(other, names)

    def __hash__(self) -> int:
        return hash(field_values(self, type(self).FIELDS))

    def __repr__(self) -> str:
        return field_repr(self, type(self).FIELDS)

    def __reduce__(self) -> tuple[Any, ...]:
        names = type(self).FIELDS
        return rebuilt, (type(self), names, field_values(self, names))
