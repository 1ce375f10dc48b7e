"""PostgreSQL storage URLs: ``postgresql://user@host:port/db?queue=name``.

The ``queue`` query parameter names the queue (default ``default``); every other part
is handed to libpq unchanged, so passwords may come from its usual places
(``PGPASSWORD``, a password file) instead of the URL. :attr:`PgTarget.display` is the
URL without its password: the only form that is ever printed or logged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from snerd.errors import LogError

SCHEMES = ("postgresql", "postgres")
DEFAULT_QUEUE = "default"
QUEUE_PARAM = "queue"
_QUEUE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

KEEPALIVES: dict[str, str | int] = {
    "keepalives": 1,
    "keepalives_idle": 3,
    "keepalives_interval": 1,
    "keepalives_count": 3,
    "tcp_user_timeout": 6000,
    "connect_timeout": 5,
}
"""libpq settings on every connection: a vanished peer is noticed within seconds (TCP
keepalives, and an unacknowledged write gives up after ``tcp_user_timeout`` ms). The
URL's own parameters win over these."""


def is_url(storage: str) -> bool:
    """Whether ``storage`` names a PostgreSQL database rather than a storage dir."""
    return storage.split("://", 1)[0].lower() in SCHEMES and "://" in storage


@dataclass(frozen=True, slots=True)
class PgTarget:
    """Where a queue lives: libpq's connection string, the queue name, a safe display."""

    conninfo: str = field(repr=False)
    queue: str
    display: str

    def connect_kwargs(self) -> dict[str, str | int]:
        """The keepalive settings the URL does not set itself."""
        given = {k for k, _ in parse_qsl(urlsplit(self.conninfo).query)}
        return {k: v for k, v in KEEPALIVES.items() if k not in given}


def parse(url: str) -> PgTarget:
    """Split ``url`` into a :class:`PgTarget`; LogError (never echoing a password) on bad input."""
    if not is_url(url):
        raise LogError("a PostgreSQL storage URL starts with postgresql:// or postgres://")
    parts = urlsplit(url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    queues = [v for k, v in params if k == QUEUE_PARAM]
    if len(queues) > 1:
        raise LogError("the storage URL names more than one queue (?queue= given twice)")
    queue = queues[0] if queues else DEFAULT_QUEUE
    if not _QUEUE_RE.match(queue):
        raise LogError(f"queue must match {_QUEUE_RE.pattern}: {queue!r}")
    rest = urlencode([(k, v) for k, v in params if k != QUEUE_PARAM])
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, ""))
    return PgTarget(conninfo, queue, _display(parts.scheme, parts.netloc, parts.path, queue))


def _display(scheme: str, netloc: str, path: str, queue: str) -> str:
    userinfo, at, hostport = netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    safe = f"{user}@{hostport}" if at else hostport
    return f"{scheme}://{safe}{path}?{QUEUE_PARAM}={queue}"


def redact(storage: str) -> str:
    """``storage`` as it may be printed: a URL loses its password, a path stays."""
    if not is_url(storage):
        return storage
    try:
        return parse(storage).display
    except (LogError, ValueError):
        return "postgresql://(unparsable URL)"
