"""Issue 12 "done when": a bounded ``kill -9`` loop under load.

Two lanes share one storage. In each round a lane spawns a daemon, pipelines a burst
of enqueues, answers every ``execute`` with a success at once, and SIGKILLs the daemon
at a random point (after a random number of messages). The other lane's daemon
releases the dead one's claims (liveness). At the end one daemon runs what is left.

Asserted, over the full history (archives included):

* **no acked enqueue lost:** every id acked in any round has its ``enqueued`` record
  and, in the end, exactly one ``succeeded`` record;
* **no re-run after a durable success:** no ``execute`` for an attempt after the one
  whose success is in the log, and no ``execute`` at all of a task after the moment its
  success was seen in the log file (a kill -9 keeps every written byte).

``SNERD_KILLS`` sets the number of kills (default 50, the CI figure); the seed is fixed.
Each daemon is forked from the suite's fork server (``forkserver.py``): its own process
with its own pipes, killed with a real SIGKILL, minus the interpreter start-up
(``SNERD_TEST_SPAWN=exec`` execs them instead).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from daemonkit import ForkingClient, base_env

from snerd.eventlog.base import SkippedLine
from snerd.eventlog.history import iter_history
from snerd.rpc.client import Client, DaemonExited

KILLS = int(os.environ.get("SNERD_KILLS", "50"))
LANES = 2
BURST = 8
WAIT = 30.0
ENV = {"SNERD_HOUSEKEEPING_SECONDS": "0.05", "SNERD_LEASE_SECONDS": "3600"}


@dataclass
class Ledger:
    acked: set[str] = field(default_factory=set)
    executions: list[tuple[float, str, int]] = field(default_factory=list)
    """(when received, task id, attempt)."""
    done_seen: list[tuple[float, set[str]]] = field(default_factory=list)
    """(when the log was read, ids with a success in it) after each kill."""
    kills: int = 0
    ids: Any = field(default_factory=lambda: itertools.count())


def history(storage: Path) -> list[dict[str, Any]]:
    return [r for r in iter_history(storage) if not isinstance(r, SkippedLine)]


def succeeded(storage: Path) -> set[str]:
    return {str(r["taskId"]) for r in history(storage) if r.get("event") == "succeeded"}


async def serve(client: Client, ledger: Ledger, queue: asyncio.Queue[Any],
                seen: list[int]) -> None:  # fmt: skip
    """Answer every execute with a success; note acks and executions."""
    while (message := await queue.get()) is not None:
        seen[0] += 1
        if message.get("action") == "ack":
            ledger.acked.add(str(message["task_id"]))
        elif message.get("action") == "execute":
            task_id, attempt = str(message["task_id"]), int(message["attempt"])
            ledger.executions.append((time.monotonic(), task_id, attempt))
            try:
                await client.send({"action": "result", "task_id": task_id,
                                   "status": "success", "attempt": attempt})  # fmt: skip
            except DaemonExited:
                return


async def one_round(storage: Path, ledger: Ledger, rng: random.Random, lane: int) -> None:
    client = ForkingClient(storage, env=base_env(clock=False, workers=4, **ENV))
    await client.start()
    queue = client.subscribe()
    seen = [0]
    server = asyncio.ensure_future(serve(client, ledger, queue, seen))
    try:
        await client.send({"action": "register", "task_type": "t"})
        burst = b"".join(
            orjson.dumps({"action": "enqueue", "task_id": f"k{lane}-{n}", "task_type": "t",
                          "request_id": n}) + b"\n"
            for n in (next(ledger.ids) for _ in range(BURST))
        )  # fmt: skip
        await client.send_line(burst)
        target = rng.randint(0, 2 * BURST)  # kill after this many messages (or sooner)
        deadline = time.monotonic() + WAIT
        while seen[0] < target and time.monotonic() < deadline and not server.done():
            await asyncio.sleep(0.002)
        await asyncio.sleep(rng.random() * 0.01)  # anywhere, also mid-write
    finally:
        await client.kill()
        ledger.kills += 1
        server.cancel()
    ledger.done_seen.append((time.monotonic(), succeeded(storage)))


async def lane(storage: Path, ledger: Ledger, rounds: int, lane_no: int) -> None:
    rng = random.Random(1000 + lane_no)
    for _ in range(rounds):
        await one_round(storage, ledger, rng, lane_no)


async def test_kill_9_under_load_loses_no_acked_enqueue_and_reruns_no_durable_success(
    tmp_path: Path,
) -> None:
    storage = tmp_path / "store"
    ledger = Ledger()
    per_lane = -(-KILLS // LANES)
    await asyncio.gather(*(lane(storage, ledger, per_lane, n) for n in range(LANES)))
    assert ledger.kills >= KILLS
    assert ledger.acked, "no enqueue was ever acked: the kills came too early to test"

    # the survivor runs what is left
    final = ForkingClient(storage, env=base_env(clock=False, workers=8, **ENV))
    await final.start()
    queue = final.subscribe()
    server = asyncio.ensure_future(serve(final, ledger, queue, [0]))
    await final.send({"action": "register", "task_type": "t"})
    deadline = time.monotonic() + WAIT
    while not ledger.acked <= succeeded(storage):
        assert time.monotonic() < deadline, sorted(ledger.acked - succeeded(storage))[:10]
        await asyncio.sleep(0.02)
    await final.stats()  # it is up (a SIGTERM before its interpreter started would kill it)
    assert await final.close() == 0
    server.cancel()

    records = history(storage)
    enqueued = {str(r["taskId"]) for r in records if r.get("event") == "enqueued"}
    lost = ledger.acked - enqueued
    assert not lost, f"acked enqueues lost: {sorted(lost)[:10]}"
    successes: dict[str, list[int]] = defaultdict(list)
    for r in records:
        if r.get("event") == "succeeded":
            successes[str(r["taskId"])].append(int(r.get("attempt") or 0))
    twice = {t: a for t, a in successes.items() if len(a) > 1}
    assert not twice, f"succeeded twice: {twice}"
    for when, task_id, attempt in ledger.executions:
        done = successes.get(task_id)
        assert done is None or attempt <= done[0], (
            f"{task_id} attempt {attempt} ran after attempt {done[0]} had succeeded"
        )
        for seen_at, finished in ledger.done_seen:
            assert not (when > seen_at and task_id in finished), (
                f"{task_id} attempt {attempt} ran after its success was in the log"
            )
