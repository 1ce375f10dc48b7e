"""Webhook tasks against a real local aiohttp server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from daemonkit import INFO, T0, WAIT, Wire, events_of


@dataclass
class Hooks:
    """A local HTTP server: ``/status/<code>`` answers that code; every POST is kept."""

    base: str = ""
    posts: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, code: int) -> str:
        return f"{self.base}/status/{code}"

    async def next_post(self, timeout: float = WAIT) -> dict[str, Any]:
        return await asyncio.wait_for(self.posts.get(), timeout)


@pytest.fixture
async def hooks() -> AsyncIterator[Hooks]:
    state = Hooks()

    async def handle(request: web.Request) -> web.Response:
        state.arrived.set()
        if request.query.get("hold"):
            await state.release.wait()  # answer only when the test says so
        body = await request.json()
        await state.posts.put({"headers": dict(request.headers), "body": body,
                               "path": request.path})  # fmt: skip
        return web.Response(status=int(request.match_info["code"]), text="hi")

    app = web.Application()
    app.router.add_post("/status/{code}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.base = f"http://127.0.0.1:{port}"
    yield state
    await runner.cleanup()


async def test_2xx_webhook_is_success(daemon: Wire, hooks: Hooks) -> None:
    await daemon.ack("h1", "hook", task_data={"to": "x"}, webhook_url=hooks.url(200))
    post = await hooks.next_post()
    assert post["headers"]["X-SnerdMQ-Event"] == "Execute"
    assert post["headers"]["Content-Type"].startswith("application/json")
    assert post["body"]["task_id"] == "h1"
    assert post["body"]["task_type"] == "hook"
    assert post["body"]["task_data"] == {"to": "x"}
    await daemon.logged("h1", "succeeded")  # written once the POST has returned
    assert hooks.posts.empty()


@pytest.mark.parametrize("code", [201, 204])
async def test_any_2xx_is_success(daemon: Wire, hooks: Hooks, code: int) -> None:
    await daemon.ack("h", "hook", webhook_url=hooks.url(code), max_retries=0)
    await hooks.next_post()
    await daemon.logged("h", "succeeded")  # final: no retry, no dead-letter notice
    await daemon.quiet("max_retries_reached")
    assert hooks.posts.empty() and len(events_of(daemon.storage, "h", "claimed")) == 1


async def test_webhook_tasks_are_never_sent_to_the_sdk(spawn, hooks: Hooks) -> None:
    wire = await spawn(register=("hook",))
    await wire.ack("h", "hook", webhook_url=hooks.url(200))
    await hooks.next_post()
    await wire.quiet("execute")


async def test_500_retries_then_dead_letters_with_a_final_post(daemon: Wire, hooks: Hooks) -> None:
    await daemon.ack("h", "hook", task_data='{"n": 1}', webhook_url=hooks.url(500),
                     max_retries=1)  # fmt: skip
    first = await hooks.next_post()
    second = await hooks.next_post()
    assert [first["headers"]["X-SnerdMQ-Event"], second["headers"]["X-SnerdMQ-Event"]] == [
        "Execute", "Execute",
    ]  # fmt: skip
    final = await hooks.next_post()
    assert final["headers"]["X-SnerdMQ-Event"] == "MaxRetriesReached"
    assert final["body"]["task_id"] == "h"
    assert final["body"]["reason"] == "retries_exhausted"
    dead = await daemon.expect("max_retries_reached", task_id="h")
    assert "500" in str(dead["last_error"])
    assert dead["retry_count"] == 1
    await daemon.barrier()  # two attempts and one dead letter: two Executes and one notice
    assert len(events_of(daemon.storage, "h", "claimed")) == 2
    assert len(events_of(daemon.storage, "h", "dead_lettered")) == 1 and hooks.posts.empty()


async def test_webhook_backoff_uses_the_test_clock(daemon: Wire, hooks: Hooks) -> None:
    await daemon.ack("h", "hook", webhook_url=hooks.url(503), max_retries=1,
                     retry_after_hours=1)  # fmt: skip
    await hooks.next_post()
    await daemon.logged("h", "retry_scheduled")
    await daemon.advance(3599)  # a second early: no new attempt claimed, nothing posted
    assert len(events_of(daemon.storage, "h", "claimed")) == 1 and hooks.posts.empty()
    await daemon.advance(1)
    assert (await hooks.next_post())["headers"]["X-SnerdMQ-Event"] == "Execute"


async def test_unreachable_webhook_fails_the_attempt(daemon: Wire) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    await daemon.ack("h", "hook", webhook_url=f"http://127.0.0.1:{port}/x", max_retries=0)
    dead = await daemon.expect("max_retries_reached", task_id="h")
    assert dead["reason"] == "retries_exhausted"
    assert "webhook" in str(dead["last_error"])


async def test_webhook_task_already_due_at_start_is_posted(spawn, hooks: Hooks) -> None:
    """A daemon started on a log with due webhook work dispatches it without waiting for
    some unrelated command (no SDK registration is needed for webhooks)."""
    first = await spawn()
    await first.ack("h", "hook", webhook_url=hooks.url(200), execute_at=T0 + 100)
    await first.client.close_stdin()
    assert await first.client.wait(timeout=10) == 0
    await spawn(env={"SNERD_TEST_CLOCK": str(T0 + 200)})
    post = await hooks.next_post(timeout=5)
    assert post["body"]["task_id"] == "h"


async def test_failed_through_webhook_child_gets_its_final_post(daemon: Wire, hooks: Hooks) -> None:
    await daemon.ack("parent", max_retries=0)
    await daemon.ack("child", "hook", webhook_url=hooks.url(200), trigger_after_ids=["parent"])
    await daemon.expect("execute", task_id="parent")
    await daemon.result("parent", ok=False, error="x")
    await daemon.expect("max_retries_reached", task_id="child")
    final = await hooks.next_post()
    assert final["headers"]["X-SnerdMQ-Event"] == "MaxRetriesReached"
    assert final["body"]["task_id"] == "child"
    assert final["body"]["reason"] == "blocked_by_failed_parent"


@pytest.mark.process
@pytest.mark.parametrize("how", ["sigterm", "eof"])
async def test_a_webhook_in_flight_finishes_during_the_drain(spawn, hooks: Hooks, how: str) -> None:
    daemon = await spawn(register=("t",), env=INFO)
    await daemon.ack("slow", "hook", webhook_url=hooks.url(200) + "?hold=1")
    await asyncio.wait_for(hooks.arrived.wait(), WAIT)
    if how == "sigterm":
        daemon.client.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    else:
        await daemon.client.close_stdin()
    await daemon.draining()
    assert daemon.client.returncode is None  # waiting for the POST, not abandoning it
    hooks.release.set()
    assert await daemon.client.wait(timeout=10) == 0
    assert events_of(daemon.storage, "slow", "succeeded")


async def test_webhook_bodies_carry_snerdmqs_keys(daemon: Wire, hooks: Hooks) -> None:
    """A receiver written for SnerdMQ reads ``taskId``, ``taskType`` and ``data`` (the
    task's data as the JSON text it was enqueued with), on both events."""
    await daemon.ack("h", "hook", task_data='{"n": 1}', webhook_url=hooks.url(500),
                     max_retries=0)  # fmt: skip
    execute = (await hooks.next_post())["body"]
    final = await hooks.next_post()
    assert final["headers"]["X-SnerdMQ-Event"] == "MaxRetriesReached"
    for body in (execute, final["body"]):
        assert body["taskId"] == "h"
        assert body["taskType"] == "hook"
        assert body["data"] == '{"n": 1}'
        assert body["task_id"] == "h"  # ours stay beside them
