"""Shared helpers for the event-log tests: a recording listener and backends."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import forkserver
from faultkit import PatchableFileLog

from snerd.eventlog.base import EventLog, Record, SkippedLine
from snerd.eventlog.memory import MemoryLog, MemoryStore

WAIT = 10.0
"""Safety-net timeout for waits on something another task or process does."""

REPO = Path(__file__).resolve().parents[2]

OpenLog = Callable[..., Any]
"""``await open_log(**kwargs) -> (log, Recorder)`` (the ``open_log`` fixture)."""


class Recorder:
    """A listener that keeps everything it is told, plus a key/value fold.

    The fold (``state``) maps each record's ``k`` to the record without ``seq``;
    a ``{"del": k}`` record deletes the key. Snapshot headers are ignored.
    """

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.skipped: list[SkippedLine] = []
        self.resets = 0
        self.state: dict[str, Record] = {}
        self._changed = asyncio.Event()

    def on_records(self, records: Sequence[Record]) -> None:
        self.records.extend(records)
        for r in records:
            if "k" in r:
                self.state[r["k"]] = r
            elif "del" in r:
                self.state.pop(r["del"], None)
        self._changed.set()

    def on_reset(self) -> None:
        self.records.clear()
        self.skipped.clear()
        self.state.clear()
        self.resets += 1
        self._changed.set()

    def on_skipped(self, skipped: SkippedLine) -> None:
        self.skipped.append(skipped)
        self._changed.set()

    def data(self) -> list[Record]:
        """Records other than snapshot headers."""
        return [r for r in self.records if r.get("event") != "snapshot"]

    def snapshot(self) -> list[Record]:
        """The fold as records to compact into."""
        return list(self.state.values())

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
        """Wait until ``predicate()`` holds, re-checking whenever the listener is told
        something; ``timeout`` is only a safety net."""
        async with asyncio.timeout(timeout):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()


class Backend:
    """Makes logs that share one store (memory) or one storage dir (file)."""

    name = ""

    def new(self, **kwargs: Any) -> EventLog:
        raise NotImplementedError

    def inject(self, raw: bytes) -> None:
        """Append raw complete lines, bypassing the log."""
        raise NotImplementedError

    def chain_breaks(self) -> list[Any] | None:
        """What ``replay --verify`` finds wrong with the checksum chain of everything
        written (archives, then the live log); None where lines are not kept as bytes."""
        return None


class MemoryBackend(Backend):
    name = "memory"

    def __init__(self) -> None:
        self.store = MemoryStore()

    def new(self, **kwargs: Any) -> EventLog:
        kwargs.pop("fsync", None)
        return MemoryLog(self.store, **kwargs)

    def inject(self, raw: bytes) -> None:
        self.store.inject(raw)


class FileBackend(Backend):
    name = "file"

    def __init__(self, storage: Path) -> None:
        self.storage = storage

    def new(self, **kwargs: Any) -> EventLog:
        """A :class:`PatchableFileLog`: the contract's tests stand in for its steps."""
        kwargs.setdefault("fsync", False)
        return PatchableFileLog(self.storage, **kwargs)

    def chain_breaks(self) -> list[Any] | None:
        from snerd.eventlog.chain import verify
        from snerd.eventlog.history import history_files

        report = verify(history_files(self.storage))
        return [*report.breaks, *(["an older writer's link"] * report.older_links)]

    def inject(self, raw: bytes) -> None:
        path = self.storage / "tasks" / "tasks.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            f.write(raw)


class PostgresBackend(Backend):
    """Logs on one fresh PostgreSQL queue (dropped by :meth:`drop`)."""

    name = "postgres"

    def __init__(self) -> None:
        import pgkit

        self.queue = pgkit.fresh_queue()
        self.url = pgkit.queue_url(self.queue)

    def new(self, **kwargs: Any) -> EventLog:
        from snerd.eventlog.postgres.log import PostgresLog

        kwargs.setdefault("fsync", False)
        return PostgresLog(self.url, **kwargs)

    def inject(self, raw: bytes) -> None:
        import pgkit

        pgkit.inject(self.queue, raw)

    def chain_breaks(self) -> list[Any] | None:
        from snerd.eventlog.chain import verify_logs
        from snerd.eventlog.storage import chain_logs

        report = verify_logs(chain_logs(self.url))
        return [*report.breaks, *(["an older writer's link"] * report.older_links)]

    def drop(self) -> None:
        import pgkit

        pgkit.drop_queue(self.queue)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return env


def child_argv(code: str, *args: str) -> list[str]:
    """argv running ``code`` (dedented) in a fresh Python with the repo importable."""
    return [sys.executable, "-c", textwrap.dedent(code), *args]


async def run_child(code: str, *args: str, timeout: float = 30.0) -> str:
    """Run ``code`` in a child process to completion; return its stdout."""
    proc = await forkserver.create_subprocess_exec(
        *child_argv(code, *args),
        env=child_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, err.decode()
    return out.decode()
