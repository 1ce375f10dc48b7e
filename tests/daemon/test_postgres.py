"""Daemons on one PostgreSQL queue (``postgresql://...?queue=name`` as their storage):
work spread without double runs, a SIGKILLed daemon's work finished by another, the
database connections cut under load without losing an acked enqueue."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pgkit
import pytest
from daemonkit import assert_sound_history, compacting_workload

FAST_HOUSEKEEPING = {"SNERD_HOUSEKEEPING_SECONDS": "0.1"}


@pytest.fixture
def queue() -> Iterator[str]:
    pgkit.require_pg()
    name = pgkit.fresh_queue()
    try:
        yield name
    finally:
        pgkit.drop_queue(name)


def url_of(queue: str, app: str = "") -> str:
    url = pgkit.queue_url(queue)
    return f"{url}&application_name={app}" if app else url


def history(queue: str) -> list[dict[str, Any]]:
    from snerd.eventlog.base import SkippedLine
    from snerd.eventlog.postgres.history import iter_pg_history

    return [r for r in iter_pg_history(url_of(queue)) if not isinstance(r, SkippedLine)]


def events_of(queue: str, task_id: str, event: str) -> list[dict[str, Any]]:
    return [r for r in history(queue)
            if r.get("taskId", r.get("task")) == task_id and r.get("event") == event]


async def wait_until(condition: Any, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_three_daemons_on_one_url_run_every_task_once_and_share_the_work(
    spawn: Any, queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wires = []
    for i in range(3):  # each in a working directory of its own: nothing shared but the URL
        (tmp_path / f"d{i}").mkdir()
        monkeypatch.chdir(tmp_path / f"d{i}")
        wires.append(await spawn(storage=url_of(queue), clock=False))
    executed: list[tuple[int, str]] = []

    def handler_for(index: int) -> Any:
        async def handle(task_id: str, data: Any) -> None:
            executed.append((index, task_id))
            await asyncio.sleep(0.005)  # a little work, so the daemons overlap

        return handle

    for index, wire in enumerate(wires):
        wire.client.register("t", handler_for(index))
    n = 300
    acks = await asyncio.wait_for(asyncio.gather(*(
        wires[i % 3].client.enqueue(f"task-{i}", "t", {"n": i}) for i in range(n)
    )), 60)  # fmt: skip
    assert all(a["action"] == "ack" for a in acks)
    await wait_until(lambda: len(executed) >= n, 60, f"{n} executions")
    for wire in wires:
        await wire.barrier()
    per_task = collections.Counter(task_id for _, task_id in executed)
    assert len(per_task) == n
    assert max(per_task.values()) == 1, [t for t, c in per_task.items() if c > 1]
    per_daemon = collections.Counter(index for index, _ in executed)
    assert len(per_daemon) == 3, per_daemon
    claims = collections.Counter(r["task"] for r in history(queue) if r.get("event") == "claimed")
    assert len(claims) == n and set(claims.values()) == {1}
    assert not list((tmp_path / "d0").iterdir())  # no storage dir was made anywhere


async def test_daemons_compacting_often_on_a_url_leave_a_sound_history(
    spawn: Any, queue: str
) -> None:
    """Three daemons on one URL compacting whenever the live log passes 4 KB: followers
    resume after the others' compactions (lines from notifications included), append
    after snapshots with no tail, and ``replay --verify`` finds the whole history sound."""
    from snerd.eventlog.postgres.history import describe

    env = {**FAST_HOUSEKEEPING, "SNERD_COMPACT_BYTES": "4096"}
    wires = [await spawn(storage=url_of(queue), clock=False, env=env) for _ in range(3)]
    await compacting_workload(wires, lambda: describe(url_of(queue))[2])
    assert_sound_history(url_of(queue))


@pytest.mark.process
async def test_a_daemon_killed_mid_task_has_its_work_finished_by_another(
    spawn: Any, queue: str
) -> None:
    url = url_of(queue)
    doomed = await spawn(storage=url, clock=False, register=("t",), env=FAST_HOUSEKEEPING)
    await doomed.ack("held", max_retries=0)
    await doomed.expect("execute", task_id="held", attempt=1)
    survivor = await spawn(storage=url, clock=False, register=("t",), env=FAST_HOUSEKEEPING)
    await survivor.quiet("execute", task_id="held")  # still claimed by a live daemon
    await doomed.kill()
    started = time.monotonic()
    execute = await survivor.expect("execute", task_id="held", timeout=10)
    assert time.monotonic() - started < 10
    assert execute["attempt"] == 2
    released = events_of(queue, "held", "claim_released")
    assert [r["reason"] for r in released] == ["owner_died"]
    await survivor.result("held")
    await wait_until(lambda: bool(events_of(queue, "held", "succeeded")), 10, "the success")
    assert not events_of(queue, "held", "dead_lettered")  # a crash is not a failure
    assert_sound_history(url)


async def test_connections_cut_under_load_lose_no_acked_enqueue(spawn: Any, queue: str) -> None:
    import psycopg

    app = f"victim-{queue}"
    victim = await spawn(storage=url_of(queue, app), clock=False, env=FAST_HOUSEKEEPING)
    acked: list[str] = []
    errors: list[str] = []
    stop = asyncio.Event()
    ids = iter(range(10**6))

    async def producer() -> None:  # enqueues without pause, before, during and after the cut
        while not stop.is_set():
            i = next(ids)
            try:
                reply = await victim.client.enqueue(f"k{i}", "t", {"i": i})
            except Exception as exc:  # a storage_error reply for what was in flight
                errors.append(str(exc))
                await asyncio.sleep(0.01)
                continue
            acked.append(reply["task_id"])

    async def cut() -> int:
        with psycopg.connect(pgkit.PG_URL, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s", (app,)
            ).fetchall()
        return len(rows)

    jobs = [asyncio.create_task(producer()) for _ in range(8)]
    await wait_until(lambda: len(acked) >= 100, 30, "some acks")
    assert await cut() >= 2  # the log's connection and the liveness one at least
    await wait_until(lambda: len(errors) > 0, 10, "a storage error")
    before = len(acked)
    await wait_until(lambda: len(acked) >= before + 100, 30, "acks after the reconnection")
    stop.set()
    await asyncio.gather(*jobs)
    assert all("storage" in e for e in errors), errors[:3]
    retry: list[int] = []
    for _ in range(100):  # the daemon came back by itself: new enqueues are acked again
        try:
            await victim.client.enqueue(f"after-{len(retry)}", "t", {})
            break
        except Exception:
            retry.append(1)
            await asyncio.sleep(0.1)
    else:
        raise AssertionError("the daemon never accepted an enqueue again")
    executed: set[str] = set()

    async def handle(task_id: str, data: Any) -> None:
        executed.add(task_id)

    victim.client.register("t", handle)
    await wait_until(lambda: set(acked) <= executed, 30, "every acked task to run")
    assert victim.client.returncode is None  # the daemon survived
    enqueued = {r["taskId"] for r in history(queue) if r.get("event") == "enqueued"}
    assert set(acked) <= enqueued
    assert_sound_history(url_of(queue))


async def running_job_and_a_peer(spawn: Any, queue: str, app: str, *, workers: int,
                                 peer: tuple[str, ...]) -> tuple[Any, Any]:  # fmt: skip
    """A daemon named ``app`` running attempt 1 of ``job`` (type ``t``), and a peer on
    the same queue registered for ``peer`` that has not run it."""
    owner = await spawn(storage=url_of(queue, app), clock=False, register=("t",),
                        workers=workers, env=FAST_HOUSEKEEPING)  # fmt: skip
    await owner.ack("job", max_retries=3)
    await owner.expect("execute", task_id="job", attempt=1)
    other = await spawn(storage=url_of(queue), clock=False, register=peer,
                        env=FAST_HOUSEKEEPING)  # fmt: skip
    await other.quiet("execute", task_id="job")
    return owner, other


def liveness_session(app: str) -> int | None:
    """The backend holding the liveness lock of the daemon named ``app``, if any."""
    import psycopg

    with psycopg.connect(pgkit.PG_URL, autocommit=True) as admin:
        (pid,) = admin.execute(
            "SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = %s",
            (app,),
        ).fetchone() or (None,)
    return pid if isinstance(pid, int) else None


def cut_liveness(app: str) -> None:
    """End the session that holds the liveness lock of the daemon named ``app``."""
    import psycopg

    pid = liveness_session(app)
    assert pid is not None
    with psycopg.connect(pgkit.PG_URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


async def test_a_daemon_taken_for_dead_claims_again_only_once_its_lock_is_back(
    spawn: Any, queue: str
) -> None:
    """Its attempt released as a dead owner's, a daemon with a free worker claims the
    task again only after taking its liveness lock back: the claim is not released a
    second time (before, it was: the daemon claimed while its lock was still free)."""
    app = f"back-{queue}"  # the peer runs other tasks: only its housekeeping acts here
    cut_off, _ = await running_job_and_a_peer(spawn, queue, app, workers=2, peer=("other",))
    cut_liveness(app)
    execute = await cut_off.expect("execute", task_id="job", timeout=10)
    assert execute["attempt"] == 2
    # claimed only once its lock was back (the keeper alone takes it back a second or so
    # after the cut; the claim came within a housekeeping round or two)
    assert liveness_session(app) is not None
    await cut_off.result("job")
    await wait_until(lambda: bool(events_of(queue, "job", "succeeded")), 10, "the success")
    assert [r["reason"] for r in events_of(queue, "job", "claim_released")] == ["owner_died"]
    assert_sound_history(url_of(queue))


async def test_a_daemon_cut_off_counts_as_dead_and_its_late_result_is_refused(
    spawn: Any, queue: str
) -> None:
    app = f"cut-{queue}"
    # one worker, busy with attempt 1 to the end: attempt 2 can only run on the other
    # daemon (a daemon back from a cut may claim released work like any other)
    cut_off, other = await running_job_and_a_peer(spawn, queue, app, workers=1, peer=("t",))
    cut_liveness(app)
    # its keeper reconnects after a second or more; the other daemon's housekeeping
    # (every 0.1 s) sees the lock free first and re-runs the attempt
    execute = await other.expect("execute", task_id="job", timeout=10)
    assert execute["attempt"] == 2
    reply = await cut_off.request("result", task_id="job", status="success")
    assert reply["code"] == "not_active"  # the late result of attempt 1
    await other.result("job")
    await wait_until(lambda: bool(events_of(queue, "job", "succeeded")), 10, "the success")
    assert len(events_of(queue, "job", "succeeded")) == 1
    assert [r["reason"] for r in events_of(queue, "job", "claim_released")] == ["owner_died"]
