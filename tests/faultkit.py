"""Storage faults on demand: a log class whose next batch finds the storage gone."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from snerd.eventlog.base import StorageUnavailable


def refuse_one_batch(monkeypatch: pytest.MonkeyPatch, log_class: type, *,
                     armed: bool = True) -> list[bool]:  # fmt: skip
    """Make the next batch of any ``log_class`` log, once ``flag[0]`` is true, fail
    where it takes the lock (:class:`StorageUnavailable`, as a lost disk or connection
    does); the flag returned is cleared when that fault happened. ``armed=False``: set
    ``flag[0] = True`` when the fault is due."""
    real = log_class._exclusive
    flag = [armed]

    @contextlib.asynccontextmanager
    async def exclusive(self: Any) -> Any:
        if flag[0]:
            flag[0] = False
            raise StorageUnavailable("the disk went away")
        async with real(self):
            yield

    monkeypatch.setattr(log_class, "_exclusive", exclusive)
    return flag
