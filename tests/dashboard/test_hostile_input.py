"""Issue 12.6: the dashboard answers every malformed body with a JSON 400, every
failure under /api/ as JSON, and its same-origin check compares scheme, host and port."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from aiohttp.client_exceptions import WSServerHandshakeError
from aiohttp.test_utils import make_mocked_request

from snerd.dashboard import api
from snerd.dashboard.security import same_origin


def nested(depth: int, leaf: str = "1") -> bytes:
    return b"[" * depth + leaf.encode() + b"]" * depth


def enqueue_with(data: bytes) -> bytes:
    return b'{"task_id":"deep","task_type":"t","task_data":' + data + b"}"


MALFORMED: list[tuple[str, bytes]] = [
    ("deep array body", nested(100_000)),
    ("deep object body", b'{"a":' * 5_000 + b"1" + b"}" * 5_000),
    ("task_data nested 255 deep", enqueue_with(nested(255))),
    ("task_data nested 1000 deep", enqueue_with(nested(1_000))),
    ("invalid utf-8", b'{"task_id":"\xff\xfe","task_type":"t"}'),
    ("nul bytes", b'{"task_id":"a\x00b"\x00,"task_type":"t"}'),
    ("truncated", b'{"task_id":"a","task_type":'),
    ("not an object", b"[1, 2, 3]"),
    ("a bare string", b'"enqueue"'),
    ("number overflow", b'{"task_id":"a","task_type":"t","urgency_score":1e999}'),
    ("huge retry_after_hours", b'{"task_id":"a","task_type":"t","retry_after_hours":1e12}'),
    ("wrong types", b'{"task_id":7,"task_type":["t"]}'),
    ("missing fields", b"{}"),
    ("garbage", b"\x00\x01\x02 not json"),
]


async def expect_json_error(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json", await resp.text()
    body: dict[str, Any] = orjson.loads(await resp.read())
    assert body["status"] == status and isinstance(body["error"], str) and body["error"]
    return body


@pytest.mark.parametrize(("what", "body"), MALFORMED, ids=[w for w, _ in MALFORMED])
async def test_malformed_enqueue_bodies_get_a_json_400(client, engine, what: str, body: bytes):
    resp = await client.post(
        "/api/tasks", data=body, headers={"Content-Type": "application/json"}
    )
    await expect_json_error(resp, 400)
    assert "deep" not in engine.state.tasks and "a" not in engine.state.tasks


@pytest.mark.parametrize("body", [nested(100_000), b"\xff\xfe", b"[]", b"1e999"])
async def test_malformed_bodies_on_actions_get_a_json_400(client, engine, body: bytes):
    resp = await client.post("/api/tasks/later/cancel", data=body)
    await expect_json_error(resp, 400)
    assert "later" in engine.state.tasks


async def test_an_unexpected_failure_under_api_is_a_json_500(client, monkeypatch):
    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(api.views, "dlq_rows", explode)
    body = await expect_json_error(await client.get("/api/dlq"), 500)
    assert "a bug" not in body["error"]  # no internals leak to the page
    assert (await client.get("/api/stats")).status == 200


def origin_check(origin: str, *, host: str = "127.0.0.1:8080", secure: bool = False) -> bool:
    request = make_mocked_request(
        "POST", "/api/tasks", headers={"Host": host, "Origin": origin}
    )
    if secure:
        request = request.clone(scheme="https")
    return same_origin(request)


@pytest.mark.parametrize(
    ("origin", "secure", "allowed"),
    [
        ("http://127.0.0.1:8080", False, True),
        ("https://127.0.0.1:8080", False, False),  # the issue: scheme was ignored
        ("http://127.0.0.1:8080", True, False),
        ("https://127.0.0.1:8080", True, True),
        ("ws://127.0.0.1:8080", False, False),
        ("http://127.0.0.1:8081", False, False),
        ("http://localhost:8080", False, False),  # another host name, another origin
        ("null", False, False),
        ("http://127.0.0.1:99999", False, False),
        ("HTTP://127.0.0.1:8080", False, True),  # schemes and hosts are case-insensitive
    ],
)
def test_same_origin_compares_scheme_host_and_port(origin: str, secure: bool, allowed: bool):
    assert origin_check(origin, secure=secure) is allowed


def test_default_ports_are_filled_in_per_scheme() -> None:
    assert origin_check("http://example.test", host="example.test")
    assert origin_check("http://example.test:80", host="example.test")
    assert origin_check("https://example.test", host="example.test", secure=True)
    assert origin_check("https://example.test", host="example.test:443", secure=True)
    assert not origin_check("https://example.test:80", host="example.test", secure=False)


async def test_an_https_origin_on_the_http_port_is_refused(client, engine):
    origin = {"Origin": f"https://127.0.0.1:{client.port}"}
    resp = await client.post("/api/tasks/later/cancel", headers=origin)
    await expect_json_error(resp, 403)
    assert "later" in engine.state.tasks
    with pytest.raises(WSServerHandshakeError) as refused:
        await client.ws_connect("/ws", headers=origin)
    assert refused.value.status == 403
