"""Seeded storages and a started dashboard engine, for the API and browser tests.

The seed is written with the dispatcher's own pure commands (no clock, no handler
timing), so the state it folds to is exact:

============  ==========  =============================================================
id            state       how
============  ==========  =============================================================
fetch-a       completed   enqueued, claimed, succeeded with result {"rows": 3}
fetch-b       active      claimed by worker-1, progress {"pct": 40}
aggregate     blocked     waits on fetch-a (absent: done) and fetch-b (running)
flaky         scheduled   failed once ("card declined"), retry in an hour
later         scheduled   execute_at an hour ahead
doomed        dead        max_retries 0, failed ("import exploded")
report        dead        child of doomed: blocked_by_failed_parent
email-1, -2   completed   rate group smtp (2/min), both dispatched just now
email-3       pending     rate group smtp, waiting for a slot
pending-1     pending     plain
============  ==========  =============================================================
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from snerd.dispatcher.clock import Clock
from snerd.dispatcher.engine import Engine, EngineConfig
from snerd.eventlog.base import Record
from snerd.eventlog.filelog import FileLog
from snerd.projections import decide as cmds
from snerd.projections.state import QueueState, empty, fold
from snerd.rpc.protocol import Enqueue, parse_message

WORKER = "worker-1"
PEER_HEADER = "X-Test-Peer"
EXPECTED_COUNTS = {"pending": 2, "scheduled": 2, "blocked": 1, "active": 1, "dead_lettered": 2}
COMPLETED = ("fetch-a", "email-1", "email-2")


class Seeder:
    """Decides records with the real commands against a folded state."""

    def __init__(self, now: float | None = None) -> None:
        self.now = time.time() if now is None else now
        self.state: QueueState = empty()
        self.records: list[Record] = []

    def _add(self, records: list[Record]) -> None:
        self.state, _ = fold(self.state, records)
        self.records.extend(records)

    def enqueue(self, task_id: str, task_type: str, data: Any = None, **fields: Any) -> None:
        message = {
            "action": "enqueue",
            "task_id": task_id,
            "task_type": task_type,
            "task_data": data if data is not None else {"id": task_id},
            **fields,
        }
        command = parse_message(message)
        assert isinstance(command, Enqueue)
        records, outcome = cmds.enqueue(self.state, command, now=self.now, daemon="seed")
        assert outcome is None, outcome
        self._add(records)

    def claim(self, task_id: str) -> None:
        task = self.state.tasks[task_id]
        self._add([cmds.claim(task, now=self.now, daemon=WORKER, lease_seconds=3600)])

    def progress(self, task_id: str, data: Any) -> None:
        self._add([progress_record(self.state, task_id, data, self.now)])

    def succeed(self, task_id: str, result: Any = None) -> None:
        task = self.state.tasks[task_id]
        self._add(cmds.succeed(task, now=self.now, daemon=WORKER, result=result))

    def fail(self, task_id: str, error: str) -> None:
        records, _ = cmds.fail(
            self.state, self.state.tasks[task_id], error, now=self.now, daemon=WORKER
        )
        self._add(records)


def progress_record(state: QueueState, task_id: str, data: Any, now: float) -> Record:
    return cmds.progress(state.tasks[task_id], data, now=now, daemon=WORKER)


def seed_records(now: float | None = None) -> list[Record]:
    s = Seeder(now)
    s.enqueue("fetch-a", "fetch", {"source": "a"})
    s.enqueue("fetch-b", "fetch", {"source": "b"})
    s.enqueue("aggregate", "aggregate", trigger_after_ids=["fetch-a", "fetch-b"])
    s.claim("fetch-a")
    s.succeed("fetch-a", result={"rows": 3})
    s.claim("fetch-b")
    s.progress("fetch-b", {"pct": 40})
    s.enqueue("flaky", "charge", max_retries=1, retry_after_hours=1)
    s.claim("flaky")
    s.fail("flaky", "card declined")
    s.enqueue("later", "email", execute_at=s.now + 3600)
    s.enqueue("doomed", "import", max_retries=0)
    s.enqueue("report", "report", trigger_after_ids=["doomed"])
    s.claim("doomed")
    s.fail("doomed", "import exploded")
    for n in (1, 2, 3):
        s.enqueue(f"email-{n}", "email", rate_limit_group="smtp", max_per_minute=2)
    for n in (1, 2):
        s.claim(f"email-{n}")
        s.succeed(f"email-{n}")
    s.enqueue("pending-1", "email")
    return s.records


def reader_engine(storage: Path | str, clock: Clock | None = None) -> Engine:
    """The read-only engine ``snerdmq dashboard`` runs: follows the log, claims nothing
    (on ``clock``, the system's by default)."""
    config = EngineConfig(daemon_id="dashboard-test", compact_min_bytes=1 << 62)
    if isinstance(storage, str) and storage.startswith("postgresql://"):
        from snerd.eventlog.postgres.log import PostgresLog

        return Engine(PostgresLog(storage, fsync=False, poll_interval=0.02), executors=[],
                      config=config, clock=clock)  # fmt: skip
    log = FileLog(storage, fsync=False, poll_interval=0.02)
    return Engine(log, executors=[], config=config, clock=clock)


async def seed_storage(storage: Path | str, now: float | None = None) -> None:
    """Write the seed into ``storage`` through a short-lived engine."""
    engine = reader_engine(storage)
    await engine.start()
    try:
        await engine.log.append(seed_records(now))
    finally:
        await engine.drain(0)


@web.middleware
async def fake_peer(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Tests only: pretend the request came from the address in ``X-Test-Peer``."""
    peer = request.headers.get(PEER_HEADER)
    if peer:
        request = request.clone(remote=peer)
    return await handler(request)
