"""The rest of a coroutine run by hand until its first wait, as a task's coroutine.

Kept apart from ``batching.py``, which a wheel compiles: mypyc compiles a
``types.coroutine`` generator into one whose task never resumes
(``tests/test_compiled_build.py``)."""

from __future__ import annotations

import types
from collections.abc import Coroutine, Generator
from typing import Any


@types.coroutine
def resumed(
    drain: Coroutine[Any, Any, None], awaited: Any
) -> Generator[Any, None, None]:  # fmt: skip
    """The rest of a coroutine that :meth:`BatchingLog._start_writer` ran by hand until
    it awaited ``awaited`` (what it yielded to the loop): a task runs this as it would
    have run the coroutine from there, cancellation included."""
    while True:
        try:
            yield awaited
        except BaseException as exc:  # thrown in by the task (a cancellation)
            try:
                awaited = drain.throw(exc)
            except StopIteration:
                return
            continue
        try:
            awaited = drain.send(None)
        except StopIteration:
            return
