"""Who may use the dashboard: safe by default, a token when asked for.

Rules, in order, for every request:

1. Without a token and bound to loopback, the ``Host`` header must name a loopback
   host (a page on another site that re-binds its DNS name to 127.0.0.1 is refused).
2. With a token, every request must carry it: ``Authorization: Bearer T``, ``?token=T``
   or the ``snerd_token`` cookie that a page load with a valid token sets
   (HttpOnly, SameSite=Strict), so the page's own fetches and websocket work.
3. A mutating request (POST, PUT, PATCH, DELETE) from a non-loopback peer is refused
   unless a token is configured (and was given), whatever the bind address.
4. A mutating request or a websocket upgrade whose ``Origin`` is not the origin it
   was sent to (scheme, ``Host`` name and port) is refused (cross-site requests,
   cross-site websocket hijacking, an ``https`` page talking to the ``http`` port).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

COOKIE = "snerd_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an address or a name, without port) is this machine."""
    if not host:
        return False
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split_host(value: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit("//" + value)
    try:
        port = parts.port or default_port
    except ValueError:
        port = -1
    return (parts.hostname or "").lower(), port


_DEFAULT_PORTS = {"http": 80, "https": 443}


def same_origin(request: web.Request) -> bool:
    """True when there is no ``Origin`` header or it is exactly the origin the request
    hit: the same scheme (``https`` only over TLS, ``http`` only without it), host and
    port (default ports filled in per scheme). ``Origin: null`` and any other scheme
    are refused."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    parts = urlsplit(origin.strip())
    scheme = parts.scheme.lower()
    expected = "https" if request.scheme == "https" else "http"
    if scheme != expected:
        return False
    try:
        origin_port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        return False
    host, port = _split_host(request.host, _DEFAULT_PORTS[expected])
    return (parts.hostname or "").lower() == host and origin_port == port


def _deny(status: int, message: str) -> web.Response:
    return web.json_response({"error": message, "status": status}, status=status)


class Guard:
    """The access rules above, as an aiohttp middleware (:meth:`middleware`)."""

    def __init__(self, *, token: str | None, bind_host: str) -> None:
        self.token = token or None
        self.check_host = self.token is None and is_loopback(bind_host)

    def presented(self, request: web.Request) -> tuple[str | None, bool]:
        """(the token the request carries, whether it came in the query string)."""
        auth = request.headers.get("Authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip(), False
        query = request.query.get("token")
        if query is not None:
            return query, True
        return request.cookies.get(COOKIE), False

    def _valid(self, given: str | None) -> bool:
        if self.token is None or given is None:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.check_host and not is_loopback(_split_host(request.host, 80)[0]):
            return _deny(
                403,
                f"host {request.host!r} not allowed; open the dashboard via "
                "127.0.0.1 or localhost, or configure a token",
            )
        from_query = False
        if self.token is not None:
            given, from_query = self.presented(request)
            if not self._valid(given):
                return _deny(
                    401,
                    "a token is required: send 'Authorization: Bearer <token>' "
                    "or open the page with ?token=<token>",
                )
        mutating = request.method not in SAFE_METHODS
        if mutating and self.token is None and not is_loopback(request.remote):
            return _deny(
                403,
                "changes from a non-loopback address need a token; start the "
                "dashboard with --token or SNERD_DASHBOARD_TOKEN",
            )
        if (mutating or request.path == "/ws") and not same_origin(request):
            return _deny(403, "cross-origin request refused (Origin does not match Host)")
        response = await handler(request)
        if from_query and self.token is not None and not response.prepared:
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict", path="/")
        return response


@web.middleware
async def headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Conservative response headers; no framing, no sniffing, same-origin only."""
    response = await handler(request)
    if not response.prepared:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault(
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'",
        )
    return response
