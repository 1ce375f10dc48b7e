"""The thin Python client (``snerd.Client``) against the real daemon."""

from __future__ import annotations

import asyncio
import fcntl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from daemonkit import WAIT, ForkingClient, base_env, events_of, shim

from snerd.errors import DispatchError, ProtocolError
from snerd.rpc.client import (
    Client,
    DaemonExited,
    RemoteDispatchError,
    RemoteProtocolError,
)
from snerd.rpc.output import READ_SIZE


@pytest.fixture
async def client(storage: Path) -> AsyncIterator[Client]:
    """A client whose daemon is forked from the fork server: the API under test is the
    same; the tests below that build a ``Client`` themselves exec the daemon as users do."""
    c = ForkingClient(storage, env=base_env(clock=False))
    await c.start()
    yield c
    if c.returncode is None:
        assert await c.close(timeout=15) == 0


async def test_enqueue_handler_progress_and_notices(client: Client, storage: Path) -> None:
    done = asyncio.Event()
    progress: list[dict] = []
    client.on_progress(progress.append)

    async def handle(task_id: str, data: Any) -> None:
        assert data == {"to": "x"}
        await client.progress(task_id, {"pct": 50})
        await asyncio.sleep(0.05)
        done.set()

    client.register("mail", handle)
    ack = await asyncio.wait_for(client.enqueue("m1", "mail", {"to": "x"}), WAIT)
    assert ack["action"] == "ack" and ack["task_id"] == "m1"
    await asyncio.wait_for(done.wait(), WAIT)
    notice = await asyncio.wait_for(client.notices.get(), WAIT)
    assert notice["action"] == "progress" and notice["data"] == {"pct": 50}
    assert progress == [notice]
    for _ in range(200):
        if events_of(storage, "m1", "succeeded"):
            break
        await asyncio.sleep(0.02)
    assert events_of(storage, "m1", "succeeded")


async def test_registration_before_start_is_sent_on_start(storage: Path) -> None:
    got: asyncio.Queue[str] = asyncio.Queue()

    async def handle(task_id: str, data: Any) -> None:
        await got.put(task_id)

    async with Client(storage, env=base_env(clock=False)) as c:
        c.register("t", handle)  # registered while running: sent at once
        await c.enqueue("a", "t")
        assert await asyncio.wait_for(got.get(), WAIT) == "a"
    c2 = Client(storage, env=base_env(clock=False))
    c2.register("t", handle)  # before start: sent by start()
    async with c2:
        await c2.enqueue("b", "t")
        assert await asyncio.wait_for(got.get(), WAIT) == "b"


async def test_pipelined_enqueues(client: Client) -> None:
    acks = await asyncio.wait_for(
        asyncio.gather(*(client.enqueue(f"p{i}", "nobody", i) for i in range(500))), 30
    )
    assert [a["task_id"] for a in acks] == [f"p{i}" for i in range(500)]
    assert (await client.stats())["daemon"]["in_flight"] == 0


async def test_errors_raise_with_code_and_message(client: Client) -> None:
    await client.enqueue("a", "nobody")
    with pytest.raises(RemoteDispatchError) as dup:
        await client.enqueue("a", "nobody")
    assert isinstance(dup.value, DispatchError)
    assert dup.value.code == "duplicate_task" and dup.value.task_id == "a"
    assert "'a'" in dup.value.message
    with pytest.raises(RemoteProtocolError) as bad:
        await client.enqueue("b", "nobody", max_retries=-1)
    assert isinstance(bad.value, ProtocolError)
    assert bad.value.code == "invalid_field" and bad.value.field == "max_retries"
    assert bad.value.task_id == "b"
    with pytest.raises(RemoteDispatchError) as unknown:
        await client.get("nope")
    assert unknown.value.code == "unknown_task"


async def test_failing_handler_reports_the_error_and_max_retries_reached(client: Client) -> None:
    dead: asyncio.Queue[dict] = asyncio.Queue()
    client.on_max_retries_reached(dead.put_nowait)

    async def broken(task_id: str, data: Any) -> None:
        raise ValueError("kaput")

    client.register("b", broken)
    await client.enqueue("x", "b", max_retries=1)
    notice = await asyncio.wait_for(dead.get(), WAIT)
    assert notice["task_id"] == "x" and notice["retry_count"] == 1
    assert "kaput" in str(notice["last_error"])


async def test_get_cancel_requeue(client: Client) -> None:
    await client.enqueue("later", "nobody", execute_at="2999-01-01T00:00:00Z")
    task = await client.get("later")
    assert task["taskId"] == "later" and task["status"] == "scheduled"
    ok = await client.cancel("later")
    assert ok["of"] == "cancel"
    with pytest.raises(RemoteDispatchError):
        await client.requeue("later")

    async def broken(task_id: str, data: Any) -> None:
        raise RuntimeError("x")

    dead = asyncio.Event()
    client.on_max_retries_reached(lambda m: dead.set())
    client.register("b", broken)
    await client.enqueue("d", "b", max_retries=0)
    await asyncio.wait_for(dead.wait(), WAIT)
    client.handlers.pop("b")  # the requeued run is answered by hand below
    received = client.subscribe()
    assert (await client.requeue("d"))["of"] == "requeue"
    while (message := await asyncio.wait_for(received.get(), WAIT)) is not None:
        if message.get("action") == "execute" and message["task_id"] == "d":
            break
    await client.result("d", success=True)


async def test_raw_lines_and_send_line(client: Client) -> None:
    received = client.subscribe()
    await client.send_line(b'{"action":"stats","request_id":"raw"}\n')
    message = await asyncio.wait_for(received.get(), WAIT)
    assert message is not None and message["action"] == "stats"
    assert message["request_id"] == "raw"

    async def first_error() -> dict:
        async for msg in client.lines():
            if msg.get("action") == "error":
                return msg
        raise AssertionError("no error line")

    waiting = asyncio.create_task(first_error())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    await client.send_line(b"not json\n")
    assert (await asyncio.wait_for(waiting, WAIT))["code"] == "invalid_json"


async def test_manual_results_for_raw_registrations(client: Client) -> None:
    received = client.subscribe()
    await client.send({"action": "register", "task_type": "manual"})
    await client.enqueue("m", "manual")
    while True:
        message = await asyncio.wait_for(received.get(), WAIT)
        assert message is not None
        if message.get("action") == "execute":
            break
    await client.result("m", success=False, error="by hand", attempt=message["attempt"])
    while True:
        message = await asyncio.wait_for(received.get(), WAIT)
        assert message is not None
        if message.get("action") == "execute":
            assert message["attempt"] == 2
            break
    await client.result("m", success=True, attempt=2)


async def test_kill_and_requests_after_exit(client: Client) -> None:
    code = await client.kill()
    assert code == -9
    with pytest.raises(DaemonExited):
        await client.stats()


async def test_pending_requests_fail_when_the_daemon_dies(client: Client) -> None:
    await client.send({"action": "register", "task_type": "t"})
    pending = asyncio.create_task(client.request({"action": "enqueue", "task_id": "z",
                                                 "task_type": "t"}))  # fmt: skip
    await client.kill()
    done, _ = await asyncio.wait({pending}, timeout=WAIT)
    assert done, "a request must not hang once the daemon is gone"
    error = pending.exception()
    assert error is None or isinstance(error, DaemonExited)


async def test_binary_path(tmp_path: Path, storage: Path) -> None:
    async with Client(storage, binary=shim(tmp_path), env=base_env(clock=False)) as c:
        stats = await c.stats()
        assert stats["daemon"]["pid"] != 0
    assert c.returncode == 0


async def test_close_returns_zero(storage: Path) -> None:
    c = Client(storage, env=base_env(clock=False))
    await c.start()
    await c.enqueue("a", "nobody")
    assert await c.close(timeout=10) == 0
    assert c.returncode == 0


async def test_an_oversized_request_is_refused_before_sending(client: Client) -> None:
    with pytest.raises(ProtocolError) as info:
        await asyncio.wait_for(client.enqueue("huge", "t", "x" * (1 << 20)), WAIT)
    assert info.value.task_id == "huge"
    assert (await client.enqueue("small", "nobody", "x" * 1000))["action"] == "ack"


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="Linux pipes only")
async def test_the_daemons_output_is_read_in_chunks_the_heap_serves(tmp_path: Path) -> None:
    """A daemon whose stdout pipe holds more than asyncio's 256 KiB read size is still
    read READ_SIZE at a time (a larger buffer comes from mmap: three syscalls a read)."""
    daemon = tmp_path / "loud-daemon"
    daemon.write_text(
        f"#!{sys.executable}\n"
        "import fcntl, os, sys\n"
        "fcntl.fcntl(1, fcntl.F_SETPIPE_SZ, 1 << 20)\n"
        "sys.stdin.readline()\n"  # the client is listening by now
        "os.write(1, (b'[\"' + b'x' * 998 + b'\"]\\n') * 500)\n"
        "sys.stdin.readline()\n"
    )
    daemon.chmod(0o755)
    client = Client(tmp_path / "storage", binary=daemon)
    await client.start()
    assert client.process is not None and client.process.stdout is not None
    stdout = client.process.stdout
    sizes: list[int] = []
    feed = stdout.feed_data
    stdout.feed_data = lambda data: (sizes.append(len(data)), feed(data))[1]  # type: ignore[method-assign]
    client.register("anything", lambda task_id, data: None)
    for _ in range(500):
        if sum(sizes) >= 500 * 1003:
            break
        await asyncio.sleep(0.01)
    client.process.kill()
    await client.process.wait()
    assert sum(sizes) == 500 * 1003  # 500 lines of 1,003 bytes
    assert max(sizes) == READ_SIZE < 128 << 10  # glibc's default mmap threshold
