"""The daemon the SDKs spawn serves the dashboard when SNERD_DASHBOARD_PORT is set."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _get_json(session: aiohttp.ClientSession, url: str, attempts: int = 100) -> object:
    for _ in range(attempts):
        try:
            async with session.get(url) as resp:
                if resp.status == 200:
                    return await resp.json()
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} never answered")


async def test_daemon_serves_the_dashboard_on_its_own_engine(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "SNERD_DASHBOARD_PORT": str(port), "SNERD_DASHBOARD_TOKEN": "t0k"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    daemon = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "snerd.cli", str(tmp_path / "store"), env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert daemon.stdin is not None and daemon.stdout is not None
    try:
        enqueue = {"action": "enqueue", "task_id": "via-sdk", "task_type": "nobody",
                   "task_data": "{}"}  # fmt: skip
        daemon.stdin.write(orjson.dumps(enqueue) + b"\n")
        await daemon.stdin.drain()
        ack = orjson.loads(await asyncio.wait_for(daemon.stdout.readline(), 10))
        assert ack["action"] == "ack"
        base = f"http://127.0.0.1:{port}"
        headers = {"Authorization": "Bearer t0k"}
        async with aiohttp.ClientSession(headers=headers) as session:
            rows = await _get_json(session, f"{base}/api/tasks")
            assert [(r["id"], r["state"]) for r in rows] == [("via-sdk", "pending")]
        async with aiohttp.ClientSession() as anonymous, anonymous.get(f"{base}/api/tasks") as resp:
            assert resp.status == 401  # the token from the environment is enforced
    finally:
        daemon.stdin.close()
        assert await asyncio.wait_for(daemon.wait(), 15) == 0
