"""The official SDK (snerdmq-python 0.4.2) drives our daemon, unchanged, as its binary."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from daemonkit import DRAINING, WAIT, events_of, read_log, shim, until

snerdmq = pytest.importorskip("snerdmq", reason="snerdmq-python is not installed")
SnerdQueue = snerdmq.SnerdQueue if hasattr(snerdmq, "SnerdQueue") else None
if SnerdQueue is None:  # pragma: no cover - the package layout of 0.4.2
    from snerdmq.queue import SnerdQueue


class FakeSocket:
    """Stands in for a dashboard websocket in the SDK's ``progress_listeners``."""

    def __init__(self) -> None:
        self.received: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def send_json(self, message: dict[str, Any]) -> None:
        await self.received.put(message)


def binary(tmp_path: Path) -> str:
    """The console script if installed into this venv, else a shim that execs the daemon."""
    script = Path(sys.executable).parent / "snerdmq"
    try:
        import snerd.cli  # noqa: F401  (the console script needs it)
    except ImportError:
        return str(shim(tmp_path))
    return str(script) if script.exists() else str(shim(tmp_path))


@pytest.fixture
async def queue(tmp_path: Path) -> AsyncIterator[Any]:
    q = SnerdQueue(binary_path=binary(tmp_path), storage_path=str(tmp_path / "store"))
    yield q
    await asyncio.wait_for(q.shutdown(), 40)


async def test_round_trip_with_progress(queue: Any, tmp_path: Path) -> None:
    seen: asyncio.Queue[Any] = asyncio.Queue()

    async def send_email(data: Any) -> None:
        queue.yield_progress({"pct": 50})  # sent by a task the SDK schedules...
        await asyncio.sleep(0.05)  # ...while the handler works
        await queue.yield_progress_async({"pct": 100})
        await asyncio.sleep(0.05)
        await seen.put(data)

    socket_ = FakeSocket()
    queue.progress_listeners.add(socket_)
    queue.register_handler("send_email", send_email)
    await queue.start_listening()
    await asyncio.wait_for(queue.enqueue("email-1", "send_email", {"to": "u@x.io"}), WAIT)
    assert await asyncio.wait_for(seen.get(), WAIT) == {"to": "u@x.io"}
    first = await asyncio.wait_for(socket_.received.get(), WAIT)
    second = await asyncio.wait_for(socket_.received.get(), WAIT)
    assert first == {"action": "progress", "task_id": "email-1", "task_type": "send_email",
                     "data": {"pct": 50}}  # fmt: skip
    assert second["data"] == {"pct": 100}
    storage = tmp_path / "store"
    for _ in range(200):
        if events_of(storage, "email-1", "succeeded"):
            break
        await asyncio.sleep(0.02)
    assert events_of(storage, "email-1", "succeeded")
    assert [r["data"] for r in events_of(storage, "email-1", "progress")][-1] == {"pct": 100}


async def test_progress_just_before_the_handler_returns_reaches_the_sdk(queue: Any) -> None:
    socket_ = FakeSocket()
    queue.progress_listeners.add(socket_)

    async def handle(data: Any) -> None:
        await queue.yield_progress_async("done")

    queue.register_handler("quick", handle)
    await queue.start_listening()
    await asyncio.wait_for(queue.enqueue("q-1", "quick", {}), WAIT)
    message = await asyncio.wait_for(socket_.received.get(), 5)
    assert message["task_id"] == "q-1" and message["data"] == "done"


async def test_failing_handler_ends_in_the_max_retry_handler(queue: Any) -> None:
    attempts: list[Any] = []
    dead: asyncio.Queue[Any] = asyncio.Queue()

    async def flaky(data: Any) -> None:
        attempts.append(data)
        raise ValueError("always broken")

    async def on_dead(data: Any) -> None:
        await dead.put(data)

    queue.register_handler("flaky", flaky)
    queue.register_max_retry_handler("flaky", on_dead)
    await queue.start_listening()
    await asyncio.wait_for(queue.enqueue("f-1", "flaky", {"n": 7}, max_retries=2), WAIT)
    assert await asyncio.wait_for(dead.get(), WAIT) == {"n": 7}
    assert attempts == [{"n": 7}] * 3


async def test_handler_registered_after_start(queue: Any) -> None:
    done: asyncio.Queue[Any] = asyncio.Queue()

    async def handle(data: Any) -> None:
        await done.put(data)

    await queue.start_listening()
    await asyncio.wait_for(queue.enqueue("late-1", "late", "plain"), WAIT)
    queue.register_handler("late", handle)
    assert await asyncio.wait_for(done.get(), WAIT) == "plain"


async def test_duplicate_enqueue_raises_with_the_daemon_message(queue: Any) -> None:
    await queue.start_listening()
    await asyncio.wait_for(queue.enqueue("dup", "nobody", {}), WAIT)
    with pytest.raises(RuntimeError, match="dup"):
        await asyncio.wait_for(queue.enqueue("dup", "nobody", {}), WAIT)


async def test_sdk_enqueue_options_are_accepted(queue: Any, tmp_path: Path) -> None:
    await queue.start_listening()
    # naive, in UTC: the SDK sends no offset (utcnow's value, without its deprecation)
    later = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(hours=1)
    await asyncio.wait_for(queue.enqueue(
        "opts", "nobody", {"a": 1}, max_retries=5, retry_after_hours=0.25,
        rate_limit_group="g", max_per_minute=10, auto_dedupe=True, urgency_score=3.5,
        execute_at=later, max_execution_seconds=30, pool="p", trigger_after_ids=["x"],
    ), WAIT)  # fmt: skip
    await asyncio.wait_for(queue.enqueue("cron", "nobody", None, cron="*/5 * * * * *"), WAIT)
    [record] = events_of(tmp_path / "store", "opts", "enqueued")
    assert record["taskData"] == '{"a": 1}'  # the SDK's json.dumps text, verbatim
    assert record["maxRetries"] == 5 and record["urgencyScore"] == 3.5
    assert record["executeAt"].startswith(later.strftime("%Y-%m-%dT%H:%M"))


async def test_sdk_timeout_reports_its_own_error_first(queue: Any, tmp_path: Path) -> None:
    started = asyncio.Event()

    async def slow(data: Any) -> None:
        started.set()
        await asyncio.sleep(30)

    queue.register_handler("slow", slow)
    await queue.start_listening()
    await asyncio.wait_for(queue.enqueue("s", "slow", {}, max_retries=0,
                                         max_execution_seconds=0.25), WAIT)  # fmt: skip
    await asyncio.wait_for(started.wait(), WAIT)
    storage = tmp_path / "store"
    for _ in range(300):
        if events_of(storage, "s", "dead_lettered"):
            break
        await asyncio.sleep(0.02)
    [dead] = events_of(storage, "s", "dead_lettered")
    assert "timed out" in str(dead.get("LastErrorObj") or dead.get("LastJobError"))


async def test_shutdown_stops_the_daemon(tmp_path: Path) -> None:
    q = SnerdQueue(binary_path=binary(tmp_path), storage_path=str(tmp_path / "store"))
    await q.start_listening()
    await asyncio.wait_for(q.enqueue("x", "nobody", {}), WAIT)
    await asyncio.wait_for(q.shutdown(), 10)
    assert q.process.returncode == 0
    with pytest.raises(RuntimeError):
        await q.enqueue("y", "nobody", {})


async def test_shutdown_lets_a_running_handler_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SNERD_LOG_LEVEL", "info")  # the SDK passes its environment on
    q = SnerdQueue(binary_path=binary(tmp_path), storage_path=str(tmp_path / "store"))
    release = asyncio.Event()
    running = asyncio.Event()

    async def handle(data: Any) -> None:
        running.set()
        await release.wait()

    q.register_handler("t", handle)
    await q.start_listening()
    await asyncio.wait_for(q.enqueue("busy", "t", {}), WAIT)
    await asyncio.wait_for(running.wait(), WAIT)
    stopping = asyncio.create_task(q.shutdown())
    stderr: list[str] = []  # the SDK prints the daemon's stderr lines on its own

    def drain_began() -> bool:
        stderr.append(capsys.readouterr().err)
        return DRAINING in "".join(stderr)

    await until(drain_began, "the daemon to log the start of its drain")
    release.set()
    await asyncio.wait_for(stopping, 10)
    assert q.process.returncode == 0
    assert events_of(tmp_path / "store", "busy", "succeeded")


async def test_the_sdk_dashboard_reads_our_log(queue: Any, tmp_path: Path) -> None:
    """SnerdMQ's own tools read our log: the SDK's /api/stats and /api/tasks."""

    async def ok(data: Any) -> None:
        return None

    async def bad(data: Any) -> None:
        raise RuntimeError("nope")

    queue.register_handler("ok", ok)
    queue.register_handler("bad", bad)
    dead: asyncio.Queue[Any] = asyncio.Queue()

    async def on_dead(data: Any) -> None:
        await dead.put(data)

    queue.register_max_retry_handler("bad", on_dead)
    await queue.start_listening()
    await asyncio.wait_for(queue.enqueue("good-1", "ok", {}), WAIT)
    await asyncio.wait_for(queue.enqueue("bad-1", "bad", {}, max_retries=0), WAIT)
    await asyncio.wait_for(queue.enqueue("waiting", "nobody", {}), WAIT)
    await asyncio.wait_for(dead.get(), WAIT)
    for _ in range(200):
        if events_of(tmp_path / "store", "good-1", "succeeded"):
            break
        await asyncio.sleep(0.02)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the SDK dashboard resolves storage_path from the cwd
    try:
        queue.start_dashboard(port=port)
        async with aiohttp.ClientSession() as http:
            for _ in range(200):
                try:
                    async with http.get(f"http://127.0.0.1:{port}/api/tasks") as resp:
                        tasks = {t["id"]: t for t in await resp.json()}
                    break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.02)
            async with http.get(f"http://127.0.0.1:{port}/api/stats") as resp:
                stats = await resp.json()
    finally:
        os.chdir(cwd)
        if queue.dashboard_runner is not None:
            await queue.dashboard_runner.cleanup()
    assert tasks["good-1"]["status"] == "completed"
    assert tasks["bad-1"]["status"] == "dead_letter"
    assert tasks["waiting"]["status"] in ("active", "queued")
    assert stats == {"enqueued": 3, "processed": 1, "failed": 1}
    assert {r["taskId"] for r in read_log(tmp_path / "store") if "taskId" in r} >= set(tasks)


async def test_the_sdk_spawns_our_daemon_with_a_postgresql_url_as_storage(
    tmp_path: Path,
) -> None:
    import pgkit

    pgkit.require_pg()
    name = pgkit.fresh_queue()
    url = pgkit.queue_url(name)
    q = SnerdQueue(binary_path=binary(tmp_path), storage_path=url)
    seen: asyncio.Queue[Any] = asyncio.Queue()

    async def handle(data: Any) -> None:
        await seen.put(data)

    try:
        q.register_handler("pg_job", handle)
        await q.start_listening()
        await asyncio.wait_for(q.enqueue("pg-1", "pg_job", {"n": 1}), WAIT)
        assert await asyncio.wait_for(seen.get(), WAIT) == {"n": 1}
    finally:
        await asyncio.wait_for(q.shutdown(), 40)
    try:
        from snerd.eventlog.postgres.history import iter_pg_history

        events = [r.get("event") for r in iter_pg_history(url)
                  if isinstance(r, dict) and r.get("taskId", r.get("task")) == "pg-1"]
        assert events[0] == "enqueued" and "succeeded" in events, events
        assert not Path("postgresql:").exists()  # the URL was not taken for a path
    finally:
        pgkit.drop_queue(name)
