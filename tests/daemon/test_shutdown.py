"""Shutdown: SIGTERM drains (results still accepted), stdin EOF releases, exit code 0."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import forkserver
import orjson
import pytest
from daemonkit import DAEMON_CODE, INFO, ROOT, Wire, events_of


def sigterm(wire: Wire) -> None:
    wire.client.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]


async def exit_code(wire: Wire, within: float) -> int:
    return await wire.client.wait(timeout=within)


async def exit_or_kill(wire: Wire, within: float) -> int:
    """The exit code within ``within`` s; on a timeout kill the daemon and fail."""
    try:
        return await exit_code(wire, within)
    except TimeoutError:
        await wire.kill()
        raise AssertionError(f"the daemon did not exit within {within}s") from None


@pytest.mark.process
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_signal_with_nothing_in_flight_exits_zero_at_once(daemon: Wire, signum) -> None:
    await daemon.ack("queued", "unregistered")
    started = time.monotonic()
    daemon.client.process.send_signal(signum)  # type: ignore[union-attr]
    assert await exit_code(daemon, 5) == 0
    assert time.monotonic() - started < 3
    assert events_of(daemon.storage, "queued", "enqueued")  # still there for later


@pytest.mark.process
async def test_result_is_accepted_during_the_drain(spawn) -> None:
    daemon = await spawn(register=("t",), env=INFO)
    await daemon.ack("a")
    await daemon.expect("execute", task_id="a")
    sigterm(daemon)
    await daemon.draining()  # the signal has landed; the daemon must wait for us
    await daemon.barrier()
    assert daemon.client.returncode is None
    await daemon.result("a")
    assert await exit_code(daemon, 5) == 0
    assert events_of(daemon.storage, "a", "succeeded")
    assert not events_of(daemon.storage, "a", "claim_released")
    assert not daemon.taken("error")


@pytest.mark.process
async def test_no_new_executes_during_the_drain_but_enqueues_are_acked(spawn) -> None:
    daemon = await spawn(register=("t",), env=INFO)
    await daemon.ack("a")
    await daemon.expect("execute", task_id="a")
    sigterm(daemon)
    await daemon.draining()
    reply = await daemon.enqueue("b")
    assert reply["action"] == "ack"
    stats = await daemon.stats()
    assert stats["daemon"]["draining"] is True
    await daemon.quiet("execute", task_id="b")
    await daemon.send({"action": "progress", "task_id": "a", "data": "still going"})
    await daemon.expect("progress", task_id="a")
    await daemon.result("a")
    assert await exit_code(daemon, 5) == 0
    assert events_of(daemon.storage, "b", "enqueued")


@pytest.mark.process
async def test_drain_timeout_releases_the_attempt_for_another_run(spawn, storage) -> None:
    first = await spawn(register=("t",), env={"SNERD_DRAIN_TIMEOUT": "0.3"})
    await first.ack("a", max_retries=0)
    await first.expect("execute", task_id="a", attempt=1)
    started = time.monotonic()
    sigterm(first)
    assert await exit_code(first, 10) == 0
    assert 0.25 < time.monotonic() - started < 6  # it waited out the drain timeout
    [released] = events_of(storage, "a", "claim_released")
    assert released["reason"] == "drain"
    second = await spawn(register=("t",))
    execute = await second.expect("execute", task_id="a")
    assert execute["attempt"] == 2  # a new attempt; the release was not a failure
    assert (await second.get("a"))["retryCount"] == 0


@pytest.mark.process
async def test_second_sigterm_ends_the_drain_at_once(spawn) -> None:
    wire = await spawn(register=("t",), env={"SNERD_DRAIN_TIMEOUT": "30", **INFO})
    await wire.ack("a")
    await wire.expect("execute", task_id="a")
    sigterm(wire)
    await wire.draining()
    started = time.monotonic()
    sigterm(wire)
    assert await exit_or_kill(wire, 5) == 0
    assert time.monotonic() - started < 5
    assert events_of(wire.storage, "a", "claim_released")


@pytest.mark.process
async def test_stdin_eof_during_a_drain_releases_at_once(spawn) -> None:
    """§8.4: after EOF no result can arrive, so waiting out the drain is pointless."""
    wire = await spawn(register=("t",), env={"SNERD_DRAIN_TIMEOUT": "30", **INFO})
    await wire.ack("a")
    await wire.expect("execute", task_id="a")
    sigterm(wire)
    await wire.draining()
    await wire.client.close_stdin()
    assert await exit_or_kill(wire, 5) == 0
    assert events_of(wire.storage, "a", "claim_released")


async def test_stdin_eof_exits_zero_and_releases_the_claim(spawn, storage) -> None:
    first = await spawn(register=("t",))
    await first.ack("a")
    await first.expect("execute", task_id="a")
    started = time.monotonic()
    await first.client.close_stdin()
    assert await exit_code(first, 10) == 0
    assert time.monotonic() - started < 5
    [released] = events_of(storage, "a", "claim_released")
    assert released["attempt"] == 1
    second = await spawn(register=("t",))
    await second.expect("execute", task_id="a")
    await second.result("a")
    await second.barrier()
    assert events_of(storage, "a", "succeeded")


@pytest.mark.process
async def test_liveness_lock_file_is_removed_on_clean_exit(daemon: Wire) -> None:
    daemons_dir = daemon.storage / "tasks" / "daemons"
    await daemon.barrier()
    assert list(daemons_dir.glob("*.lock"))
    sigterm(daemon)
    assert await exit_code(daemon, 5) == 0
    assert not list(daemons_dir.glob("*.lock"))


@pytest.mark.process
async def test_client_close_drains_and_returns_the_exit_code(spawn) -> None:
    wire = await spawn(register=("t",), env=INFO)
    await wire.ack("a")
    await wire.expect("execute", task_id="a")
    closing = asyncio.create_task(wire.client.close(timeout=10))
    await wire.draining()
    await wire.result("a")
    assert await asyncio.wait_for(closing, 10) == 0
    assert events_of(wire.storage, "a", "succeeded")


async def test_stdin_eof_sends_no_new_executes_and_exits_promptly(spawn) -> None:
    """After EOF nothing can answer: released attempts must not be claimed again here."""
    wire = await spawn(register=("t",), workers=2, env={"SNERD_DRAIN_TIMEOUT": "30"})
    for task_id in "abc":
        await wire.ack(task_id)
    await wire.expect_n("execute", 2)
    await wire.client.close_stdin()
    assert await exit_or_kill(wire, 5) == 0
    assert not wire.taken("execute"), wire.taken("execute")
    for task_id in "abc":
        assert not [r for r in events_of(wire.storage, task_id, "claimed") if r["attempt"] > 1]


async def run_with_stdin(storage, stdin) -> tuple[int, bytes, bytes]:
    """Run the daemon with ``stdin`` (a file object or DEVNULL) and wait at most 5 s."""
    process = await forkserver.create_subprocess_exec(
        sys.executable, "-c", DAEMON_CODE, str(storage), stdin=stdin,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), 5)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError("the daemon did not exit on stdin EOF") from None
    assert process.returncode is not None
    return process.returncode, out, err


async def test_stdin_from_dev_null_is_an_immediate_eof(storage) -> None:
    """Started with no input (``< /dev/null``), the daemon must see EOF and exit 0."""
    code, out, err = await run_with_stdin(storage, asyncio.subprocess.DEVNULL)
    assert (code, out) == (0, b""), err[-500:]


async def test_stdin_from_a_file_is_read_then_eof(storage, tmp_path) -> None:
    """``snerdmq STORE < commands.ndjson``: the lines are answered, then a clean exit."""
    commands = tmp_path / "commands.ndjson"
    commands.write_bytes(
        b'{"action":"enqueue","task_id":"f","task_type":"t","request_id":1}\n'
        b'{"action":"stats","request_id":2}\n'
    )
    with commands.open("rb") as stdin:
        code, out, err = await run_with_stdin(storage, stdin)
    assert code == 0, err[-500:]
    replies = [orjson.loads(line) for line in out.splitlines()]
    assert {r["action"] for r in replies} == {"ack", "stats"}
    assert events_of(storage, "f", "enqueued")
