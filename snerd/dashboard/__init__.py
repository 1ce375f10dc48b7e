"""The web dashboard: overview, tasks, timelines, DAGs and the DLQ, live over a websocket.

``start_dashboard(engine, host=, port=, token=)`` serves it from any started engine;
``snerdmq dashboard STORAGE`` runs it on a read-only engine over a storage directory.
This package's names (``__all__``) are the dashboard's public API: the CLI tools that
serve it use only these, never its modules (an import-linter contract).
aiohttp is imported only when the server is used. What the dashboard shows comes from
the read models in :mod:`snerd.projections.views`, the same ones the daemon's replies
and the CLI use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app", "is_loopback", "start_dashboard", "url_of"]


def __getattr__(name: str) -> Any:
    if name == "is_loopback":
        from snerd.dashboard import security

        return security.is_loopback
    if name in __all__:
        from snerd.dashboard import server

        return getattr(server, name)
    raise AttributeError(name)
