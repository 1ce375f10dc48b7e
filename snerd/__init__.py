"""snerd: an embedded, event-sourced background-job queue.

The public face: ``snerd.Queue`` for the in-process engine (with ``@queue.task``,
``snerd.tasks``), ``snerd.Client`` for a daemon spawned over stdio, ``snerd.testing``
for testing handlers on memory with a manual clock. Heavy modules load lazily so the
daemon starts fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the real types for users' type checkers; loaded lazily at run time
    from snerd.embedded import Queue as Queue
    from snerd.rpc.client import Client as Client

from snerd.errors import Fail as Fail  # light: no other module loads with it

__version__ = "0.1.0"
__all__ = ["Client", "Fail", "Queue", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Queue":
        from snerd.embedded import Queue

        return Queue
    if name == "Client":
        from snerd.rpc.client import Client

        return Client
    raise AttributeError(name)
