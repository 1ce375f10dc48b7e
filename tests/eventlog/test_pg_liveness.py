"""Daemon liveness on PostgreSQL: a session advisory lock per daemon, across
processes, SIGKILL, and a liveness connection cut by the server."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import forkserver
import pgkit
import pytest
from logkit import child_argv, child_env

from snerd.errors import LogError

HOLDER = """
import sys
from snerd.eventlog.postgres.liveness import PgLiveness
PgLiveness(sys.argv[1]).hold(sys.argv[2])
print("holding", flush=True)
sys.stdin.read()  # until killed
"""


@pytest.fixture
def url() -> Iterator[str]:
    pgkit.require_pg()
    name = pgkit.fresh_queue()
    try:
        yield pgkit.queue_url(name)
    finally:
        pgkit.drop_queue(name)


def eventually(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll ``condition`` until it holds (the server acts on its own schedule)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_hold_is_alive_release(url: str) -> None:
    from snerd.eventlog.postgres.liveness import PgLiveness

    mine, checker = PgLiveness(url), PgLiveness(url)
    try:
        assert not checker.is_alive("d1")
        mine.hold("d1")
        assert mine.holds("d1") and mine.is_alive("d1")
        assert checker.is_alive("d1")  # another session: the server says it is held
        assert checker.list_daemons() == ["d1"]
        assert checker.list_daemons(alive_only=True) == ["d1"]
        mine.release("d1")
        assert not checker.is_alive("d1")
        assert checker.list_daemons() == []
    finally:
        mine.release()
        checker.release()


def test_a_held_id_cannot_be_taken_twice_and_queues_are_apart(url: str) -> None:
    from snerd.eventlog.postgres.liveness import PgLiveness

    first, second = PgLiveness(url), PgLiveness(url)
    other_name = pgkit.fresh_queue()
    other_queue = PgLiveness(pgkit.queue_url(other_name))
    try:
        first.hold("d1")
        with pytest.raises(LogError, match="live process"):
            second.hold("d1")
        first.hold("d1")  # idempotent for the holder
        assert not other_queue.is_alive("d1")  # the same id on another queue
        first.release()
        second.hold("d1")
    finally:
        for one in (first, second, other_queue):
            one.release()
        pgkit.drop_queue(other_name)
    with pytest.raises(LogError, match="daemon_id"):
        PgLiveness(url).hold("../x")


def test_liveness_across_processes_and_kill_9(url: str) -> None:
    from snerd.eventlog.postgres.liveness import PgLiveness

    proc = forkserver.popen(child_argv(HOLDER, url, "worker-1"), env=child_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    checker = PgLiveness(url)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"holding\n"
        assert checker.is_alive("worker-1")
        with pytest.raises(LogError):
            checker.hold("worker-1")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        eventually(lambda: not checker.is_alive("worker-1"), "the server to drop the lock")
        assert checker.list_daemons() == []  # the dead one's registration went too
        checker.hold("worker-1")  # the id is free again
    finally:
        checker.release()
        proc.kill()
        proc.wait()


def test_a_cut_liveness_connection_is_dead_until_the_keeper_reconnects(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from snerd.eventlog.postgres import liveness
    from snerd.eventlog.postgres.liveness import PgLiveness

    monkeypatch.setattr(liveness, "KEEP_SECONDS", 0.05)  # the keeper's rounds, quicker

    mine, checker = PgLiveness(url), PgLiveness(url)
    try:
        mine.hold("d1")
        assert mine._conn is not None
        pid = mine._conn.info.backend_pid
        with psycopg.connect(pgkit.PG_URL, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        # the holder's session is gone: the lock with it (others may release its claims)
        eventually(lambda: not checker.is_alive("d1") or mine._conn is None
                   or mine._conn.info.backend_pid != pid, "the cut to be seen")  # fmt: skip
        eventually(lambda: mine._conn is not None and not mine._conn.closed
                   and mine._conn.info.backend_pid != pid, "the keeper to reconnect")  # fmt: skip
        assert checker.is_alive("d1")  # held again on the new connection
    finally:
        mine.release()
        checker.release()


def test_confirm_takes_a_lost_lock_again_at_once(url: str) -> None:
    import psycopg

    from snerd.eventlog.postgres.liveness import PgLiveness

    mine, checker = PgLiveness(url), PgLiveness(url)
    try:
        mine.hold("d1")
        mine.confirm("d1")  # held: nothing to do
        assert mine._conn is not None
        pid = mine._conn.info.backend_pid
        assert mine._conn.info.backend_pid == pid
        with psycopg.connect(pgkit.PG_URL, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        eventually(lambda: not checker.is_alive("d1"), "the server to drop the lock")
        mine.confirm("d1")  # does not wait for the keeper's next round
        assert mine._conn is not None and mine._conn.info.backend_pid != pid
        assert checker.is_alive("d1")
        with pytest.raises(LogError, match="not held"):
            mine.confirm("d2")
    finally:
        mine.release()
        checker.release()
