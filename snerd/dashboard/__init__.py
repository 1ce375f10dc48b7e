"""The web dashboard: overview, tasks, timelines, DAGs and the DLQ, live over a websocket.

``start_dashboard(engine, host=, port=, token=)`` serves it from any started engine;
``snerdmq dashboard STORAGE`` runs it on a read-only engine over a storage directory.
aiohttp is imported only when this package is.
"""

from __future__ import annotations

from snerd.dashboard.server import create_app, start_dashboard, url_of

__all__ = ["create_app", "start_dashboard", "url_of"]
