"""Live updates over a websocket (``/ws``).

Messages (JSON text frames), server to page:

- ``{"type": "hello", "counts": {...}, "seq": N}`` on connect;
- ``{"type": "progress", "action": "progress", "task_id", "task_type", "data",
  "percent"}`` at once for every progress record (the SDK dashboards' shape plus ours);
- ``{"type": "changed", "ids": [...], "counts": {...}, "reset": bool, "seq": N}`` at
  most every ``interval`` seconds, naming the tasks whose state changed since the last
  one (``ids`` is capped; ``more`` tells that some were left out);
- ``{"type": "resync"}`` when this client fell behind and must refetch.

The hub owns one background task (:meth:`Hub.run`) and one sender task per client;
:meth:`Hub.close` cancels them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from snerd.dashboard.monitor import Monitor
from snerd.dispatcher.engine import Engine
from snerd.projections.views.status import counts
from snerd.projections.views.tasks import percent

log = logging.getLogger("snerd.dashboard")

MAX_IDS = 500
QUEUE_SIZE = 1000
_RESYNC = orjson.dumps({"type": "resync"}).decode()


class _Client:
    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.queue: asyncio.Queue[str] = asyncio.Queue(QUEUE_SIZE)

    def push(self, text: str) -> None:
        try:
            self.queue.put_nowait(text)
        except asyncio.QueueFull:  # too slow: drop the backlog, ask it to refetch
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(_RESYNC)

    async def pump(self) -> None:
        while True:
            text = await self.queue.get()
            await self.ws.send_str(text)


class Hub:
    """Fans the monitor's changes out to every connected page."""

    def __init__(self, engine: Engine, monitor: Monitor, *, interval: float = 0.15) -> None:
        self.engine = engine
        self.monitor = monitor
        self.interval = interval
        self.clients: set[_Client] = set()
        self._changed: dict[str, None] = {}
        self._reset = False
        self._dirty = asyncio.Event()
        self._closing = False

    # --- from the monitor (on the event loop) -----------------------------------------

    def on_change(
        self, ids: Sequence[str], progress: Sequence[tuple[str, Any]], reset: bool
    ) -> None:
        for task_id in ids:
            self._changed[task_id] = None
        self._reset = self._reset or reset
        for task_id, data in progress:
            task = self.engine.state.tasks.get(task_id)
            self._broadcast(
                {
                    "type": "progress",
                    "action": "progress",
                    "task_id": task_id,
                    "task_type": task.type if task is not None else None,
                    "data": data,
                    "percent": percent(data),
                }
            )
        if ids or reset:
            self._dirty.set()

    def _broadcast(self, message: dict[str, Any]) -> None:
        if not self.clients:
            return
        text = orjson.dumps(message, default=str).decode()
        for client in list(self.clients):
            client.push(text)

    # --- the background task ----------------------------------------------------------

    async def run(self) -> None:
        """Coalesce changes and send one ``changed`` message per interval (cancel to stop)."""
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.interval)
            self._dirty.clear()
            ids, self._changed = list(self._changed), {}
            reset, self._reset = self._reset, False
            self._broadcast(
                {
                    "type": "changed",
                    "ids": ids[:MAX_IDS],
                    "more": len(ids) > MAX_IDS,
                    "counts": counts(self.engine.state, self.engine.clock.now()),
                    "reset": reset,
                    "seq": self.engine.state.last_seq,
                }
            )

    # --- the websocket endpoint -------------------------------------------------------

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=30.0)
        await ws.prepare(request)
        if self._closing:
            await ws.close()
            return ws
        client = _Client(ws)
        client.push(
            orjson.dumps(
                {
                    "type": "hello",
                    "seq": self.engine.state.last_seq,
                    "counts": counts(self.engine.state, self.engine.clock.now()),
                }
            ).decode()
        )
        self.clients.add(client)
        sender = asyncio.get_running_loop().create_task(client.pump())
        try:
            async for message in ws:  # the page sends nothing we need; read until closed
                if message.type == WSMsgType.ERROR:
                    break
        finally:
            self.clients.discard(client)
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
        return ws

    async def close(self) -> None:
        """Close every websocket (the runner's shutdown)."""
        self._closing = True
        for client in list(self.clients):
            with contextlib.suppress(Exception):
                await client.ws.close(code=1001, message=b"server shutdown")
