"""The dashboard web server: one aiohttp app over a running :class:`Engine`.

    runner = await start_dashboard(engine, port=8080)   # the engine is started
    ...
    await runner.cleanup()   # stops the server, its background tasks and observer

The engine can be a daemon's, an embedded ``snerd.Queue``'s, or a read-only engine
on a storage directory (``snerdmq dashboard``): the dashboard reads the projection the
engine folds from the shared log, so it sees every process's work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import quote

from aiohttp import web

from snerd.dashboard import metrics, security
from snerd.dashboard.api import Api, errors, storage_of
from snerd.dashboard.live import Hub
from snerd.dashboard.monitor import Figures, Monitor, scan
from snerd.dispatcher.engine import Engine
from snerd.eventlog.base import Record, SkippedLine
from snerd.eventlog.storage import open_history

STATIC = Path(__file__).parent / "static"
log = logging.getLogger("snerd.dashboard")

ENGINE_KEY = web.AppKey("engine", Engine)
MONITOR_KEY = web.AppKey("monitor", Monitor)
HUB_KEY = web.AppKey("hub", Hub)


async def _metrics(request: web.Request) -> web.Response:
    return await metrics.metrics(request, request.app[ENGINE_KEY])


async def _healthz(request: web.Request) -> web.Response:
    ready, details = metrics.health(request.app[ENGINE_KEY])
    return web.json_response(details, status=200 if ready else 503)


async def _index(request: web.Request) -> web.FileResponse:
    response = web.FileResponse(STATIC / "index.html")
    response.headers["Cache-Control"] = "no-store"
    return response


def _stoppable(
    items: Iterator[Record | SkippedLine], stop: threading.Event
) -> Iterator[Record | SkippedLine]:
    for n, item in enumerate(items):
        if n % 4096 == 0 and stop.is_set():
            return
        yield item


async def _scan_history(app: web.Application, stop: threading.Event) -> None:
    """Count the stored history (older than what the monitor observes) in a thread."""
    engine, monitor = app[ENGINE_KEY], app[MONITOR_KEY]
    storage = storage_of(engine)
    if storage is None or (isinstance(storage, Path) and not storage.is_dir()):
        monitor.history_ready = True
        return

    def work() -> Figures:
        items = _stoppable(open_history(storage), stop)
        return scan(items, upto_seq=monitor.scan_upto, now=engine.clock.now())

    try:
        figures = await asyncio.to_thread(work)
    except Exception:  # an unreadable archive must not take the dashboard down
        log.exception("history scan failed; totals cover this session only")
        monitor.history_ready = True
        return
    if not stop.is_set():
        monitor.merge_scan(figures)


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    """Observer and background tasks live exactly as long as the app."""
    engine, monitor, hub = app[ENGINE_KEY], app[MONITOR_KEY], app[HUB_KEY]
    engine.observers.append(monitor.observe)
    stop = threading.Event()
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(hub.run()), loop.create_task(_scan_history(app, stop))]
    yield
    stop.set()
    with contextlib.suppress(ValueError):
        engine.observers.remove(monitor.observe)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _shutdown(app: web.Application) -> None:
    await app[HUB_KEY].close()


def create_app(
    engine: Engine, *, token: str | None = None, bind_host: str = "127.0.0.1"
) -> web.Application:
    """The dashboard application (routes, guard, live hub) for a started engine."""
    guard = security.Guard(token=token, bind_host=bind_host)
    app = web.Application(
        middlewares=[security.headers, guard.middleware, errors], client_max_size=1 << 20
    )
    monitor = Monitor(now=engine.clock.now, watermark=engine.state.last_seq)
    hub = Hub(engine, monitor)
    monitor.listeners.append(hub.on_change)
    app[ENGINE_KEY] = engine
    app[MONITOR_KEY] = monitor
    app[HUB_KEY] = hub
    app.add_routes(Api(engine, monitor).routes())
    app.router.add_get("/", _index)
    app.router.add_get("/ws", hub.handle)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_static("/static", STATIC, follow_symlinks=False)
    app.cleanup_ctx.append(_lifecycle)
    app.on_shutdown.append(_shutdown)
    return app


async def start_dashboard(
    engine: Engine, *, host: str = "127.0.0.1", port: int = 8080, token: str | None = None
) -> web.AppRunner:
    """Serve the dashboard for ``engine`` on ``host:port`` (port 0 picks a free one).

    Returns the runner; ``await runner.cleanup()`` stops everything it started. Raises
    OSError when the address is in use.
    """
    app = create_app(engine, token=token, bind_host=host)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


def url_of(runner: web.AppRunner, *, token: str | None = None) -> str:
    """The http URL the runner listens on (first address), with ``?token=`` if given."""
    host, port = runner.addresses[0][:2]
    if ":" in host:
        host = f"[{host}]"
    if host in ("0.0.0.0", "[::]"):
        host = "127.0.0.1"
    suffix = f"/?token={quote(token, safe='')}" if token else "/"
    return f"http://{host}:{port}{suffix}"
