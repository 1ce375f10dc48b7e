"""An ``fsync`` that runs while its caller works: Linux kernel AIO's ``IOCB_CMD_FSYNC``.

The log's writer syncs a batch on the loop's thread while fsyncs are fast (``filelog``),
and whatever it must do after the write waits for the disk. The fold of what a batch
wrote needs no durability (only the answers do): with :class:`AioFsync` the writer
submits the sync, folds, then waits for the sync's completion, so the fold runs during
the disk's wait rather than after it: the embedded queue's awaited enqueues went from
3,291 to 3,915 a second on the VM where this was measured (``benchmarks/README.md``,
twenty-ninth session). The daemon's batches, whose acks leave the moment the sync ends
and whose fold follows them, keep the inline ``fsync``: with AIO they went slower.

Linux on x86-64 and arm64, through the raw system calls (``ctypes``; the kernel's ABI,
no library to link). :func:`open_fsync` returns None wherever it cannot be had (another
system, ``io_setup`` refused); a kernel that knows AIO but not its ``fsync`` (before
4.18) refuses the first submit with ``EINVAL``, which :meth:`AioFsync.submit` reports as
:class:`Unsupported`. The caller then syncs inline, as it does everywhere else.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import struct
import sys
from typing import Any, Final

_SYSCALLS: Final = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
"""io_setup, io_destroy, io_getevents and io_submit, by machine."""

_IOCB_CMD_FSYNC: Final = 2
_IOCB: Final = struct.Struct("<QIiHhI40x")
"""struct iocb (64 bytes): data, key, rw_flags, opcode, reqprio, fildes; the rest zero."""
_RES_OFFSET: Final = 16
"""Where struct io_event (32 bytes: data, obj, res, res2) holds the result."""


class Unsupported(OSError):
    """The kernel has AIO but no AIO ``fsync``: sync another way from now on."""


class AioFsync:
    """One ``fsync`` of ``fd`` at a time through a kernel AIO context of its own:
    :meth:`submit`, the caller's work, :meth:`wait` (which raises the sync's error as
    ``fsync`` would). Not thread-safe: one writer's, under its lock. :meth:`close`
    releases the context (a context never closed lasts as long as the process)."""

    def __init__(self, fd: int, syscall: Any, numbers: tuple[int, int, int, int]) -> None:
        self.fd = fd
        self._syscall = syscall
        _, self._destroy, self._getevents, self._submit = numbers
        self._ctx = ctypes.c_ulong(0)
        if syscall(numbers[0], ctypes.c_long(1), ctypes.byref(self._ctx)) != 0:
            raise OSError(ctypes.get_errno(), f"io_setup: {os.strerror(ctypes.get_errno())}")
        self._iocb = ctypes.create_string_buffer(_IOCB.size)
        _IOCB.pack_into(self._iocb, 0, 0, 0, 0, _IOCB_CMD_FSYNC, 0, fd)
        self._iocbs = (ctypes.c_void_p * 1)(ctypes.addressof(self._iocb))
        self._event = ctypes.create_string_buffer(32)
        self._one = ctypes.c_long(1)
        self.pending = False

    def submit(self) -> None:
        """Start the sync (:class:`Unsupported` when the kernel has no AIO fsync)."""
        if self._syscall(self._submit, self._ctx, self._one, self._iocbs) != 1:
            code = ctypes.get_errno()
            if code == errno.EINVAL:
                raise Unsupported(code, "io_submit: no AIO fsync in this kernel")
            raise OSError(code, f"io_submit: {os.strerror(code)}")
        self.pending = True

    def wait(self) -> None:
        """Wait for the sync submitted; raise its error (``EIO``, ``ENOSPC``...)."""
        while self._syscall(self._getevents, self._ctx, self._one, self._one,
                            self._event, None) != 1:  # fmt: skip
            code = ctypes.get_errno()
            if code != errno.EINTR:
                raise OSError(code, f"io_getevents: {os.strerror(code)}")
        self.pending = False
        result: int = struct.unpack_from("<q", self._event, _RES_OFFSET)[0]
        if result < 0:
            raise OSError(-result, os.strerror(-result))

    def close(self) -> None:
        """Release the context (a sync still pending is waited for first, its error
        dropped: the caller that submitted it is gone)."""
        if self._ctx.value:
            if self.pending:
                with contextlib.suppress(OSError):
                    self.wait()
            self._syscall(self._destroy, self._ctx)
            self._ctx.value = 0


def open_fsync(fd: int) -> AioFsync | None:
    """An :class:`AioFsync` of ``fd``, or None where the system has none."""
    numbers = _SYSCALLS.get(platform.machine()) if sys.platform == "linux" else None
    if numbers is None:
        return None
    try:
        return AioFsync(fd, _libc_syscall(), numbers)
    except OSError:  # (EAGAIN: the system's AIO contexts are all taken; ENOSYS)
        return None


@functools.cache
def _libc_syscall() -> Any:
    """libc's ``syscall``, returning a long (looked up once)."""
    function = ctypes.CDLL(None, use_errno=True).syscall
    function.restype = ctypes.c_long
    return function
