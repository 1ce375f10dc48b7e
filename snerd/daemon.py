"""The daemon as ``snerdmq [STORAGE_DIR]`` runs it: :mod:`snerd.rpc.daemon` plus, when
``SNERD_DASHBOARD_PORT`` is set, the dashboard on the daemon's own engine.

The composition lives here, in the public face, so ``rpc/`` never imports the web
server; aiohttp and the dashboard load only when the port is set.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from snerd.dispatcher.engine import Engine
from snerd.rpc import daemon as rpc_daemon

log = logging.getLogger("snerd.daemon")


async def dashboard(engine: Engine, env: Mapping[str, str]) -> rpc_daemon.Cleanup | None:
    """Serve the dashboard on ``engine`` if ``SNERD_DASHBOARD_PORT`` says so (host and
    token from ``SNERD_DASHBOARD_HOST``/``_TOKEN``); the queue runs on without it."""
    port = env.get("SNERD_DASHBOARD_PORT")
    if not port:
        return None
    if not port.strip().isdigit() or not 0 <= int(port) < 65536:
        log.error("SNERD_DASHBOARD_PORT=%r is not a port number (0-65535); the dashboard "
                  "is not started, the queue runs on", port)  # fmt: skip
        return None
    try:
        from snerd.dashboard.server import start_dashboard, url_of

        host = env.get("SNERD_DASHBOARD_HOST", "127.0.0.1")
        token = env.get("SNERD_DASHBOARD_TOKEN") or None
        runner = await start_dashboard(engine, host=host, port=int(port), token=token)
        log.info("dashboard at %s", url_of(runner))
        return runner.cleanup
    except Exception as exc:
        log.warning("dashboard not started: %s", exc)
        return None


def main(argv: list[str] | None = None) -> int:
    """``snerdmq [STORAGE_DIR]``: the daemon the SnerdMQ SDKs spawn, with its dashboard."""
    return rpc_daemon.main(argv, extend=dashboard)
