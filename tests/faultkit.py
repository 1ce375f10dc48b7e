"""Storage faults on demand: a log class whose next batch finds the storage gone."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from snerd.eventlog import filelog
from snerd.eventlog.base import StorageUnavailable
from snerd.eventlog.filelog import FileLog


class PatchableFileLog(FileLog):
    """A :class:`FileLog` whose methods a test may replace, on the class
    (``monkeypatch.setattr(PatchableFileLog, "_exclusive", ...)``) or on an instance
    (``log._flush = slow_flush``), in either pass of the suite.

    In the build a wheel makes, ``FileLog`` is compiled (``setup.py``): its own calls to
    its methods go straight to the compiled ones, past anything set on the class or the
    instance. An interpreted subclass's calls are looked up as Python looks them up, so
    a replacement is heard there too; all that is not replaced still runs compiled."""


def patchable_file_logs(monkeypatch: pytest.MonkeyPatch) -> type[PatchableFileLog]:
    """Have every file log opened from now on through ``storage.open_log`` (the
    embedded queue's, the daemon's) be a :class:`PatchableFileLog`; returns the class,
    for :func:`refuse_one_batch`."""
    monkeypatch.setattr(filelog, "FileLog", PatchableFileLog)
    return PatchableFileLog


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


def refuse_one_write(monkeypatch: pytest.MonkeyPatch, log_class: type, *,
                     armed: bool = True) -> list[bool]:  # fmt: skip
    """Make the next batch of any ``log_class`` log, once ``flag[0]`` is true, fail
    where it writes, after its commands were decided (:class:`StorageUnavailable`, as a
    full disk does: nothing of the batch is kept); the flag returned is cleared when
    that fault happened. (:func:`refuse_one_batch` fails before anything is decided.)"""
    real = log_class._flush
    flag = [armed]

    async def flush(self: Any, durable: bool) -> None:
        if flag[0]:
            flag[0] = False
            self._staged.clear()  # as the real one: written, then cut back
            raise StorageUnavailable("no space left on the disk")
        await real(self, durable)

    monkeypatch.setattr(log_class, "_flush", flush)
    return flag
