"""Work done in a forked child while the caller reads on: what ``snerdmq replay`` runs
on a second core as it folds a large log (the checksum chain's check, the per-task
index's build), each reading the files itself.

A fork of a process that holds a large state costs more than the work on a small log,
and some platforms have no ``fork``: :func:`worth_aside` says when a caller should do
the work itself instead.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

ASIDE_BYTES = 4 << 20
"""Below this many bytes of log, the work is done in the caller: a fork of a large
process costs more than checking or indexing a few megabytes."""


def worth_aside(files: Sequence[Path]) -> bool:
    """Whether work over ``files`` should run in a forked child (:func:`fork_aside`)."""
    return hasattr(os, "fork") and _size(files) >= ASIDE_BYTES


def fork_aside(work: Callable[[], bytes]) -> Callable[[], bytes | None]:
    """Run ``work`` in a forked child, which leaves without cleanup when it is done; the
    function returned waits for the child (call it exactly once) and gives the bytes
    ``work`` returned, or None when the child failed (``work`` raised, or the child was
    killed)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            os.close(read_end)
            view = memoryview(work())
            while view:
                n = os.write(write_end, view)  # (not in the slice: compiled, it ran twice)
                view = view[n:]
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)

    def result() -> bytes | None:
        with open(read_end, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(pid, 0)
        return data if os.waitstatus_to_exitcode(status) == 0 else None

    return result


def _size(files: Sequence[Path]) -> int:
    total = 0
    for path in files:
        with contextlib.suppress(OSError):  # gone since listed: the work says so
            total += path.stat().st_size
    return total
