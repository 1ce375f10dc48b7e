"""Safe by default: token, loopback-only changes, Origin and Host checks."""

from __future__ import annotations

import pytest
from aiohttp import WSServerHandshakeError
from dashkit import PEER_HEADER

TOKEN = "s3cret-token"
REMOTE = {PEER_HEADER: "10.1.2.3"}


async def test_token_is_required_for_every_request(make_client):
    client = await make_client(token=TOKEN)
    for path in ("/", "/static/app.js", "/api/stats", "/api/tasks", "/api/dlq"):
        resp = await client.get(path)
        assert resp.status == 401, path
        assert "token" in (await resp.json())["error"]
    assert (await client.get("/api/stats", headers={"Authorization": "Bearer nope"})).status == 401
    assert (await client.get("/api/stats?token=nope")).status == 401
    with pytest.raises(WSServerHandshakeError) as refused:
        await client.ws_connect("/ws")
    assert refused.value.status == 401


async def test_token_by_header_query_or_the_cookie_a_page_load_sets(make_client):
    client = await make_client(token=TOKEN)
    ok = await client.get("/api/stats", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status == 200
    page = await client.get(f"/?token={TOKEN}")
    assert page.status == 200
    cookie = page.cookies["snerd_token"]
    assert cookie["httponly"] and cookie["samesite"] == "Strict"
    # the page's own fetches and websocket now carry the cookie
    assert (await client.get("/api/stats")).status == 200
    assert (await client.post("/api/tasks/later/cancel")).status == 200
    ws = await client.ws_connect("/ws")
    assert (await ws.receive_json())["type"] == "hello"
    await ws.close()


async def test_changes_from_a_non_loopback_peer_need_a_token(make_client, engine):
    client = await make_client()
    assert (await client.get("/api/stats", headers=REMOTE)).status == 200  # reading is fine
    for method, path in (
        ("POST", "/api/tasks/later/cancel"),
        ("POST", "/api/dlq/doomed/requeue"),
        ("DELETE", "/api/dlq/doomed"),
        ("POST", "/api/tasks"),
    ):
        resp = await client.request(method, path, headers=REMOTE, json={})
        assert resp.status == 403, path
        assert "token" in (await resp.json())["error"]
    assert "later" in engine.state.tasks and "doomed" in engine.state.dlq
    # with a token configured and presented, a remote peer may act
    secured = await make_client(token=TOKEN)
    auth = {**REMOTE, "Authorization": f"Bearer {TOKEN}"}
    assert (await secured.post("/api/tasks/later/cancel", headers=auth)).status == 200


async def test_websocket_origin_must_match_host(client):
    with pytest.raises(WSServerHandshakeError) as refused:
        await client.ws_connect("/ws", headers={"Origin": "http://evil.example"})
    assert refused.value.status == 403
    origin = f"http://127.0.0.1:{client.port}"
    ws = await client.ws_connect("/ws", headers={"Origin": origin})
    hello = await ws.receive_json()
    assert hello["type"] == "hello" and hello["counts"]["active"] == 1
    await ws.close()
    # another port on the same host is another origin
    with pytest.raises(WSServerHandshakeError):
        await client.ws_connect("/ws", headers={"Origin": "http://127.0.0.1:1"})


async def test_cross_origin_changes_are_refused(client, engine):
    resp = await client.post("/api/tasks/later/cancel", headers={"Origin": "http://evil.example"})
    assert resp.status == 403
    assert "later" in engine.state.tasks
    same = {"Origin": f"http://127.0.0.1:{client.port}"}
    assert (await client.post("/api/tasks/later/cancel", headers=same)).status == 200


async def test_foreign_host_header_is_refused_without_a_token(make_client):
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: refuse that Host."""
    client = await make_client()
    resp = await client.get("/api/stats", headers={"Host": "evil.example:8080"})
    assert resp.status == 403
    assert (await client.get("/api/stats", headers={"Host": "localhost:8080"})).status == 200
    secured = await make_client(token=TOKEN)
    auth = {"Host": "queue.internal:8080", "Authorization": f"Bearer {TOKEN}"}
    assert (await secured.get("/api/stats", headers=auth)).status == 200


async def test_pages_carry_protective_headers(client):
    resp = await client.get("/")
    assert resp.status == 200 and "snerd" in await resp.text()
    assert resp.headers["X-Frame-Options"] == "DENY"
    assert "default-src 'self'" in resp.headers["Content-Security-Policy"]
    assert (await client.get("/static/app.js")).status == 200
    assert (await client.get("/static/../api.py")).status in (403, 404)
