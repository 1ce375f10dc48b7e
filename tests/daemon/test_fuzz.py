"""Random input over stdio: one reply per request, no crash, and a log of valid records."""

from __future__ import annotations

import random
import string
from typing import Any

import orjson
from daemonkit import Wire, read_log

FIELDS = [
    "task_id", "task_type", "task_data", "max_retries", "retry_after_hours", "auto_dedupe",
    "urgency_score", "rate_limit_group", "max_per_minute", "execute_at", "cron",
    "webhook_url", "max_execution_seconds", "pool", "trigger_after_ids",
]  # fmt: skip


def value(rng: random.Random) -> Any:
    choices = [
        None, True, False, 0, -1, 1, 3, 2**63, 1.5, -0.5, 1e308, "", "x", "30s",
        "*/5 * * * *", "2024-01-01T00:00:00Z", "not a time", "http://127.0.0.1:1/x",
        [], ["p"], [1], {"a": 1}, "".join(rng.choices(string.printable, k=rng.randint(0, 20))),
    ]  # fmt: skip
    return rng.choice(choices)


def random_enqueue(rng: random.Random, i: int) -> dict[str, Any]:
    message: dict[str, Any] = {"action": "enqueue", "task_id": f"fz-{i}", "task_type": "fuzz"}
    for name in rng.sample(FIELDS, rng.randint(1, 5)):
        message[name] = value(rng)
    return message


def random_other(rng: random.Random) -> dict[str, Any]:
    action = rng.choice(["get", "cancel", "requeue", "stats", "result", "bogus", 5, None])
    message: dict[str, Any] = {"action": action}
    for name in rng.sample(["task_id", "status", "success", "error", "attempt"], 2):
        message[name] = value(rng)
    return message


def may_be_silent(message: dict[str, Any]) -> bool:
    """A well-formed ``result`` (no reply when accepted)."""
    if message["action"] != "result" or not isinstance(message.get("task_id"), str):
        return False
    return message.get("status") in ("success", "error") or isinstance(message.get("success"), bool)


async def test_random_messages_each_get_exactly_one_reply(spawn) -> None:
    wire: Wire = await spawn()  # nothing registered: only replies come back
    rng = random.Random(20240101)
    sent: list[dict[str, Any]] = []
    for i in range(300):
        message = random_enqueue(rng, i) if rng.random() < 0.7 else random_other(rng)
        message["request_id"] = i
        sent.append(message)
    await wire.raw(b"".join(orjson.dumps(m) + b"\n" for m in sent))
    replies = {}
    for message in sent:
        if may_be_silent(message):
            continue  # an accepted result has no reply
        reply = await wire.expect(None, request_id=message["request_id"])
        replies[message["request_id"]] = reply
    await wire.barrier()
    assert len({r["request_id"] for r in wire.seen if "request_id" in r}) >= len(replies)
    for rid, reply in replies.items():
        assert reply["action"] in ("ack", "error", "task", "ok", "stats"), reply
        if reply["action"] == "error":
            assert reply["code"] and reply["message"]
        duplicates = [m for m in wire.seen if m.get("request_id") == rid]
        assert len(duplicates) == 1, duplicates
    acked = {r["task_id"] for r in replies.values() if r["action"] == "ack"}
    enqueued = {r["taskId"] for r in read_log(wire.storage) if r.get("event") == "enqueued"}
    assert acked == enqueued
    assert wire.client.returncode is None


async def test_random_bytes_never_kill_the_daemon(daemon: Wire) -> None:
    rng = random.Random(7)
    lines = []
    for _ in range(200):
        raw = bytes(rng.randrange(256) for _ in range(rng.randint(1, 80)))
        lines.append(raw.replace(b"\n", b" ") + b"\n")
    await daemon.raw(b"".join(lines))
    await daemon.barrier()
    await daemon.ack("still-alive")
    await daemon.expect("execute", task_id="still-alive")
    errors = daemon.taken("error")
    assert all(e["code"] in ("invalid_json", "unknown_action", "missing_field",
                             "invalid_field") for e in errors)  # fmt: skip
