"""Live updates, the server lifecycle, and counting every record exactly once."""

from __future__ import annotations

import asyncio

import aiohttp
from dashkit import progress_record, reader_engine, seed_records

from snerd.dashboard import start_dashboard, url_of
from snerd.dispatcher.engine import Engine
from snerd.eventlog.memory import MemoryLog, MemoryStore


async def _receive(ws, kind, timeout=3.0):
    """The next message of type ``kind`` (others are skipped)."""
    async with asyncio.timeout(timeout):
        while True:
            message = await ws.receive_json()
            if message["type"] == kind:
                return message


async def test_progress_and_changes_are_pushed(client, engine):
    ws = await client.ws_connect("/ws")
    assert (await ws.receive_json())["type"] == "hello"
    record = progress_record(engine.state, "fetch-b", {"pct": 75}, engine.clock.now())
    await engine.log.append([record], durable=False)
    progress = await _receive(ws, "progress")
    assert progress["action"] == "progress"  # the SDK dashboards' shape
    assert (progress["task_id"], progress["data"], progress["percent"]) == (
        "fetch-b", {"pct": 75}, 75.0,
    )  # fmt: skip
    await client.post("/api/tasks/pending-1/cancel")
    changed = await _receive(ws, "changed")
    while "pending-1" not in changed["ids"]:
        changed = await _receive(ws, "changed")
    assert changed["counts"]["pending"] == 1
    await ws.close()


async def test_another_process_appends_are_seen(client, storage):
    """A second engine on the same storage (another process's daemon) writes; we see it."""
    other = reader_engine(storage)
    await other.start()
    try:
        await other.cancel("later")
    finally:
        await other.drain(0)
    for _ in range(150):
        row = await (await client.get("/api/tasks/later")).json()
        if row.get("state") == "cancelled":
            break
        await asyncio.sleep(0.02)
    assert row["state"] == "cancelled"


async def test_records_are_counted_once_across_scan_observe_and_compaction(client, engine):
    before = (await (await client.get("/api/stats")).json())["totals"]
    await client.post("/api/tasks/pending-1/cancel")
    await engine.compact()  # the log restarts with a snapshot: nothing new to count
    await client.post("/api/dlq/doomed/requeue")
    after = (await (await client.get("/api/stats")).json())["totals"]
    assert after["cancelled"] == before["cancelled"] + 1
    assert after["enqueued"] == before["enqueued"]  # a requeue is not a new enqueue
    assert after["completed"] == before["completed"]
    history = await (await client.get("/api/tasks/fetch-a/history")).json()
    assert [e["event"] for e in history["entries"]] == ["enqueued", "claimed", "succeeded"]


async def test_start_dashboard_serves_and_cleans_up(engine):
    runner = await start_dashboard(engine, port=0)
    assert len(engine.observers) == 1
    url = url_of(runner)
    assert url.startswith("http://127.0.0.1:")
    async with aiohttp.ClientSession() as session:
        async with session.get(url + "api/stats") as resp:
            assert resp.status == 200
        ws = await session.ws_connect(url + "ws")
        assert (await ws.receive_json())["type"] == "hello"
        await runner.cleanup()
        closed = await ws.receive()
        assert closed.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    assert engine.observers == []


async def test_in_memory_engine_has_history_from_what_it_observed():
    engine = Engine(MemoryLog(MemoryStore()), executors=[])
    await engine.start()
    runner = await start_dashboard(engine, port=0)
    try:
        await engine.log.append(seed_records())
        async with aiohttp.ClientSession() as session:
            url = url_of(runner)
            async with session.get(url + "api/tasks/flaky/history") as resp:
                history = await resp.json()
            async with session.get(url + "api/stats") as resp:
                stats = await resp.json()
        assert history["source"] == "recent"
        assert [e["event"] for e in history["entries"]] == [
            "enqueued",
            "claimed",
            "retry_scheduled",
        ]
        assert stats["storage"] is None and stats["processed"] == 3
    finally:
        await runner.cleanup()
        await engine.drain(0)


async def test_timeline_shows_a_child_unblocked_by_its_parent(client, engine):
    from snerd.projections import decide as cmds

    done = cmds.succeed(engine.state.tasks["fetch-b"], now=engine.clock.now(), daemon="worker-1")
    await engine.log.append(done)
    history = await (await client.get("/api/tasks/aggregate/history")).json()
    steps = [(e["event"], e["state"]) for e in history["entries"]]
    assert steps == [("enqueued", "blocked"), ("unblocked", "pending")]
    assert "fetch-b" in history["entries"][-1]["reason"]
