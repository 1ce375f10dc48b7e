"""The daemon the SDKs spawn serves the dashboard when SNERD_DASHBOARD_PORT is set."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import aiohttp
import forkserver
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
    daemon = await forkserver.create_subprocess_exec(
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


async def test_daemon_serves_metrics_and_healthz_and_logs_json(tmp_path: Path) -> None:
    """A daemon with SNERD_DASHBOARD_PORT answers /metrics and /healthz, and with
    SNERD_LOG_FORMAT=json every stderr line is one JSON object."""
    from prometheus_client.parser import text_string_to_metric_families

    port = _free_port()
    env = {**os.environ, "SNERD_DASHBOARD_PORT": str(port), "SNERD_LOG_FORMAT": "json",
           "SNERD_LOG_LEVEL": "info"}  # fmt: skip
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    daemon = await forkserver.create_subprocess_exec(
        sys.executable, "-m", "snerd.cli", str(tmp_path / "store"), env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert daemon.stdin is not None and daemon.stdout is not None and daemon.stderr is not None
    try:
        for task_id in ("m1", "m2"):  # the second is a duplicate of the first
            enqueue = {"action": "enqueue", "task_id": task_id, "task_type": "mail",
                       "task_data": "{}", "auto_dedupe": True}  # fmt: skip
            daemon.stdin.write(orjson.dumps(enqueue) + b"\n")
        await daemon.stdin.drain()
        acks = [orjson.loads(await asyncio.wait_for(daemon.stdout.readline(), 10))
                for _ in range(2)]  # fmt: skip
        assert acks[1].get("duplicate_of") == "m1", acks
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:
            health = await _get_json(session, f"{base}/healthz")
            assert isinstance(health, dict) and health["status"] == "ok"
            async with session.get(f"{base}/metrics") as resp:
                assert resp.status == 200
                text = await resp.text()
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
        }  # fmt: skip
        assert samples[("snerd_tasks_enqueued_total", (("type", "mail"),))] == 1
        assert samples[("snerd_tasks_deduplicated_total", (("type", "mail"),))] == 1
        assert samples[("snerd_tasks", (("state", "pending"),))] == 1
        assert samples[("snerd_daemons_live", ())] == 1  # this daemon's liveness lock
        assert samples[("snerd_log_group_commits_total", ())] >= 1
    finally:
        daemon.stdin.close()
        assert await asyncio.wait_for(daemon.wait(), 15) == 0
    lines = (await daemon.stderr.read()).decode().splitlines()
    records = [orjson.loads(line) for line in lines]  # each line is one JSON object
    assert all({"timestamp", "level", "logger", "message"} <= r.keys() for r in records)
    messages = [r["message"] for r in records]
    assert any(m.startswith("dashboard at http://") for m in messages), messages
    assert any(m.startswith("draining") for m in messages), messages
