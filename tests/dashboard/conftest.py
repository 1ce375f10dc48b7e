"""Fixtures: a seeded storage, a read-only engine on it, and API clients."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from auditkit import storage_problems
from dashkit import fake_peer, reader_engine, seed_storage

from snerd.dashboard.server import MONITOR_KEY, create_app
from snerd.dispatcher.clock import ManualClock
from snerd.dispatcher.engine import Engine

MakeClient = Callable[..., Awaitable[TestClient[web.Request, web.Application]]]


@pytest.fixture
def seed_now() -> float:
    """The instant the seed is written at and the dashboard's clock then stays at: the
    seed's completions are in the current minute of its throughput and its claims in
    the rate window, however long the test runs and whatever minute it starts in (on
    the system's clock, a minute that turned between the seed and a read moved them
    into the past)."""
    return time.time()


@pytest.fixture(params=["file", "postgres"])
async def storage(
    request: pytest.FixtureRequest, tmp_path: Path, seed_now: float
) -> AsyncIterator[Path | str]:
    """The seeded queue: a storage dir, or a queue in PostgreSQL (the API reads its
    stored history from the database alike)."""
    if request.param == "file":
        path = tmp_path / "store"
        await seed_storage(path, seed_now)
        yield path
        assert storage_problems(path) == []  # what the API wrote passes replay --verify
        return
    import pgkit

    pgkit.require_pg()
    queue = pgkit.fresh_queue()
    try:
        url = pgkit.queue_url(queue)
        await seed_storage(url, seed_now)
        yield url
        assert storage_problems(url) == []
    finally:
        pgkit.drop_queue(queue)


@pytest.fixture
async def engine(storage: Path | str, seed_now: float) -> AsyncIterator[Engine]:
    eng = reader_engine(storage, ManualClock(seed_now))
    await eng.start()
    yield eng
    await eng.drain(0)


@pytest.fixture
async def make_client(engine: Engine) -> AsyncIterator[MakeClient]:
    clients: list[TestClient[web.Request, web.Application]] = []

    async def make(token: str | None = None) -> TestClient[web.Request, web.Application]:
        app = create_app(engine, token=token)
        app.middlewares.insert(0, fake_peer)
        client = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        clients.append(client)
        for _ in range(5000):  # the stored history is counted in the background (a
            if app[MONITOR_KEY].history_ready:  # few ms): polled finely, not in 10 ms steps
                break
            await asyncio.sleep(0.001)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
async def client(make_client: MakeClient) -> TestClient[web.Request, web.Application]:
    return await make_client()
