"""What a user's type checker sees of ``snerd`` (issue 9.12): the real ``Queue`` and
``Client``, and task functions that keep their parameter and return types.

Not a test module: ``.ci/run``'s mypy step checks this file (``mypy --strict``, so an
``assert_type`` that does not hold fails, and so does a ``# type: ignore[...]`` whose
error went away: ``warn_unused_ignores``). Each ignore marks an error a user must get.
"""

from __future__ import annotations

from typing import assert_type

import snerd
from snerd.embedded import Queue
from snerd.rpc.client import Client
from snerd.tasks import TaskHandle

queue = snerd.Queue(".snerdata")
assert_type(queue, Queue)
assert_type(snerd.Client(".snerdata"), Client)
wrong: int = queue.stats()  # type: ignore[assignment]


async def main() -> None:
    await queue.enqueue("a", "t", {}, urgency=10)  # type: ignore[call-arg]


@queue.task(max_retries=3)
async def resize(path: str, width: int = 640) -> dict[str, int]:
    return {"width": width}


@queue.task(name="count")
def count(text: str) -> int:
    return len(text)


async def tasks() -> None:
    handle = await resize.enqueue("a.png", width=320)
    assert_type(handle, TaskHandle[dict[str, int]])
    assert_type(await handle.result(timeout=5), dict[str, int])
    assert_type(await count.options(id="c1").delay("abc"), TaskHandle[int])
    await resize.enqueue(5)  # type: ignore[arg-type]
    await resize.enqueue("a.png", height=3)  # type: ignore[call-arg]
    await queue.result("a", timeout=5)
