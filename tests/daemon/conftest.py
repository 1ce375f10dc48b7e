"""Fixtures that run the real daemon on a temporary storage directory.

``spawn(**options)`` starts one daemon and returns a :class:`daemonkit.Wire`; by
default it runs on the test clock (``SNERD_TEST_CLOCK``). The daemon is the same
``serve()`` over real stdio pipes either way; it runs in the test's process
(:class:`daemonkit.InProcessClient`) unless the test is about the process, which is
said with ``@pytest.mark.process`` (signals, kill -9, pids, stderr, several processes
on one storage): then it is forked from the session's fork server, or exec'd with a
``binary``. ``SNERD_TEST_SPAWN=fork`` forks every daemon, ``=exec`` execs every one.

At teardown every daemon still running gets stdin EOF and must exit 0, every line it
wrote on stdout must be a JSON protocol message, and every storage directory the
daemons wrote must pass
``snerdmq replay --verify`` (checksum chain and audit), unless the test is marked
``damaged_log``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from daemonkit import (
    ForkingClient,
    InProcessClient,
    Wire,
    assert_sound_history,
    base_env,
    check_stdout,
)

Spawn = Callable[..., Awaitable[Wire]]


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
async def spawn(storage: Path, request: pytest.FixtureRequest) -> AsyncIterator[Spawn]:
    """``await spawn(storage=..., clock=True, workers=None, env={}, register=())``."""
    wires: list[Wire] = []
    in_process = (request.node.get_closest_marker("process") is None
                  and os.environ.get("SNERD_TEST_SPAWN", "auto") == "auto")  # fmt: skip

    async def _spawn(
        *, storage: Path = storage, clock: bool = True, workers: int | None = None,
        env: dict[str, str] | None = None, register: tuple[str, ...] = (),
        binary: str | None = None,
    ) -> Wire:  # fmt: skip
        kind = InProcessClient if in_process and binary is None else ForkingClient
        client = kind(storage, env=base_env(clock=clock, workers=workers, **(env or {})),
                      keep_transcript=True, binary=binary)  # fmt: skip
        await client.start()
        wire = Wire(client, storage, clock=clock)
        wires.append(wire)
        await wire.register(*register)
        return wire

    yield _spawn
    problems: list[str] = []
    for wire in wires:
        if wire.client.returncode is None:
            await wire.client.close_stdin()
            try:
                code = await wire.client.wait(timeout=15)
            except TimeoutError:
                code = await wire.client.kill()
                problems.append(f"{wire.name} did not exit on stdin EOF")
            if code != 0 and not wire.killed:
                problems.append(f"{wire.name} exited {code}: {list(wire.client.stderr_tail)}")
        check_stdout(wire.stdout_lines())
    assert not problems, problems
    if request.node.get_closest_marker("damaged_log") is None:
        killed = any(wire.killed for wire in wires)
        for path in {wire.storage for wire in wires if isinstance(wire.storage, Path)}:
            if (path / "tasks" / "tasks.log").exists():  # (a URL's test audits it itself)
                assert_sound_history(path, torn_tail=killed, chained=False)


@pytest.fixture
async def daemon(spawn: Spawn) -> Wire:
    """One daemon on the test clock with task type ``t`` registered."""
    return await spawn(register=("t",))


@pytest.fixture
def one_worker(spawn: Spawn) -> Callable[..., Awaitable[Wire]]:
    async def _spawn(**kwargs: Any) -> Wire:
        return await spawn(workers=1, **kwargs)

    return _spawn
