"""Fixtures that run the real daemon as a subprocess on a temporary storage directory.

``spawn(**options)`` starts one daemon and returns a :class:`daemonkit.Wire`; by
default it runs on the test clock (``SNERD_TEST_CLOCK``). At teardown every daemon
still running gets stdin EOF and must exit 0, every line it wrote on stdout must be a
JSON protocol message, and every storage directory the daemons wrote must pass
``snerdmq replay --verify`` (checksum chain and audit), unless the test is marked
``damaged_log``.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from daemonkit import ForkingClient, Wire, assert_sound_history, base_env, check_stdout

Spawn = Callable[..., Awaitable[Wire]]


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
async def spawn(storage: Path, request: pytest.FixtureRequest) -> AsyncIterator[Spawn]:
    """``await spawn(storage=..., clock=True, workers=None, env={}, register=())``."""
    wires: list[Wire] = []

    async def _spawn(
        *, storage: Path = storage, clock: bool = True, workers: int | None = None,
        env: dict[str, str] | None = None, register: tuple[str, ...] = (),
        binary: str | None = None,
    ) -> Wire:  # fmt: skip
        client = ForkingClient(storage, env=base_env(clock=clock, workers=workers, **(env or {})),
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
                problems.append(f"daemon {wire.pid} did not exit on stdin EOF")
            if code != 0 and not wire.killed:
                problems.append(f"daemon {wire.pid} exited {code}: {list(wire.client.stderr_tail)}")
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
