"""Outcomes the storage refused: kept, and written once the log takes writes again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from embeddedkit import WAIT
from faultkit import patchable_file_logs, refuse_one_batch, refuse_one_write

from snerd.dispatcher.executors import Job
from snerd.embedded import Queue
from snerd.eventlog.history import read_records
from snerd.projections import events as ev


async def test_a_run_of_successes_refused_by_a_storage_fault_is_written_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Successes that end in one turn are decided as one run and share its batch: when
    the storage refuses that batch, every one of them is kept and written once the log
    replays and takes writes again (``Engine._write_later``). No attempt runs twice, no
    success is written twice."""
    log_class = patchable_file_logs(monkeypatch)  # before the queue opens its log
    queue = Queue(str(tmp_path / "s"), fsync=False, max_workers=3)
    gate = asyncio.Event()
    ran: list[str] = []

    @queue.handler("t")
    async def work(job: Job) -> None:
        ran.append(job.id)
        await gate.wait()

    failing = refuse_one_batch(monkeypatch, log_class, armed=False)
    async with queue:
        for i in range(3):
            await queue.enqueue(f"k{i}", "t", {})
        for _ in range(500):
            if len(ran) == 3:
                break
            await asyncio.sleep(0.01)
        failing[0] = True  # the next batch: the three successes' run
        gate.set()
        await queue.join(timeout=WAIT)
        assert not failing[0]  # the fault did happen
    assert sorted(ran) == ["k0", "k1", "k2"]
    log = tmp_path / "s" / "tasks" / "tasks.log"
    events = [(r.get(ev.F_EVENT), r.get(ev.F_TASK_ID)) for r in read_records(log)]
    assert sorted(t for e, t in events if e == ev.SUCCEEDED) == ["k0", "k1", "k2"]


async def test_a_success_and_an_enqueue_refused_together_keep_their_promises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt's success and the next enqueue share one run (one request, one batch).
    When the storage refuses that batch, the enqueue's waiter gets the error (nothing
    was acked: a retry enqueues it, once), and the success is kept and written later."""
    from snerd.errors import LogError

    log_class = patchable_file_logs(monkeypatch)  # before the queue opens its log
    queue = Queue(str(tmp_path / "s"), fsync=False)
    ran: list[str] = []

    @queue.handler("t")
    async def work(job: Job) -> None:
        ran.append(job.id)

    failing = refuse_one_batch(monkeypatch, log_class, armed=False)
    async with queue:
        await queue.enqueue("k0", "t", {})  # its attempt ends before this returns
        assert ran == ["k0"]
        failing[0] = True  # the next batch: k0's success and k1's enqueue
        with pytest.raises(LogError):
            await queue.enqueue("k1", "t", {})
        assert not failing[0]  # the fault did happen
        for _ in range(500):  # the log backs off, then takes writes again
            try:
                await queue.enqueue("k1", "t", {})
                break
            except LogError:
                await asyncio.sleep(0.01)
        await queue.join(timeout=WAIT)
    assert ran == ["k0", "k1"]
    log = tmp_path / "s" / "tasks" / "tasks.log"
    events = [(r.get(ev.F_EVENT), r.get(ev.F_TASK_ID)) for r in read_records(log)]
    assert sorted(t for e, t in events if e == ev.SUCCEEDED) == ["k0", "k1"]
    assert [t for e, t in events if e == ev.ENQUEUED] == ["k0", "k1"]


@pytest.mark.parametrize("where", ["lock", "write"])
async def test_a_dead_letter_refused_by_a_storage_fault_is_noticed_once_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A failure that dead-letters, in a batch the storage refuses (at the lock, before
    anything is decided, or at the write, after), is kept and written later
    (``Engine._write_later``): its notice goes out once, after that write, and ``join``
    waits for it (a decision refused at the write owes no notice of its own)."""
    import snerd

    log_class = patchable_file_logs(monkeypatch)  # before the queue opens its log
    queue = Queue(str(tmp_path / "s"), fsync=False)
    dead: list[str] = []
    queue.on_dead_letter(lambda record: dead.append(record[ev.F_TASK_ID]))
    gate = asyncio.Event()
    started = asyncio.Event()

    @queue.handler("t")
    async def work(job: Job) -> None:
        started.set()
        await gate.wait()
        raise snerd.Fail("no")

    refuse = refuse_one_batch if where == "lock" else refuse_one_write
    failing = refuse(monkeypatch, log_class, armed=False)
    async with queue:
        await queue.enqueue("k0", "t", {})
        await asyncio.wait_for(started.wait(), WAIT)
        failing[0] = True  # the next batch: the failure that dead-letters k0
        gate.set()
        await queue.join(timeout=WAIT)
        assert not failing[0]  # the fault did happen
        assert dead == ["k0"]
        assert queue.engine._notices == 0 and not queue.engine.settling
    log = tmp_path / "s" / "tasks" / "tasks.log"
    events = [(r.get(ev.F_EVENT), r.get(ev.F_TASK_ID)) for r in read_records(log)]
    assert events.count((ev.DEAD_LETTERED, "k0")) == 1
