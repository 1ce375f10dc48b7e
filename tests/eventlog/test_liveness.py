"""Daemon liveness through lock files, in one process and across processes."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import forkserver
import pytest
from logkit import child_argv, child_env

from snerd.errors import LogError
from snerd.eventlog.liveness import Liveness

HOLDER = """
import sys
from snerd.eventlog.liveness import Liveness
Liveness(sys.argv[1]).hold(sys.argv[2])
print("holding", flush=True)
sys.stdin.read()  # until killed
"""


def test_hold_is_alive_release(tmp_path: Path) -> None:
    mine, checker = Liveness(tmp_path), Liveness(tmp_path)
    assert not checker.is_alive("d1")
    mine.hold("d1")
    assert mine.holds("d1") and mine.is_alive("d1")
    assert checker.is_alive("d1")  # a separate lock: the kernel says it is held
    assert checker.list_daemons() == ["d1"]
    mine.release("d1")
    assert not checker.is_alive("d1")
    assert checker.list_daemons() == []


def test_a_held_id_cannot_be_taken_twice(tmp_path: Path) -> None:
    first, second = Liveness(tmp_path), Liveness(tmp_path)
    first.hold("d1")
    with pytest.raises(LogError, match="live process"):
        second.hold("d1")
    first.hold("d1")  # idempotent for the holder
    first.release()
    second.hold("d1")
    second.release()


def test_unsafe_ids_are_refused(tmp_path: Path) -> None:
    for bad in ("", "../x", "a/b", ".hidden"):
        with pytest.raises(LogError, match="daemon_id"):
            Liveness(tmp_path).hold(bad)


def test_confirm_takes_a_new_lock_when_the_file_was_deleted(tmp_path: Path) -> None:
    mine, checker = Liveness(tmp_path), Liveness(tmp_path)
    mine.hold("d1")
    mine.confirm("d1")  # held: nothing to do
    (tmp_path / "tasks" / "daemons" / "d1.lock").unlink()  # by hand: d1 now looks dead
    assert not checker.is_alive("d1")
    mine.confirm("d1")
    assert checker.is_alive("d1")
    with pytest.raises(LogError, match="not held"):
        mine.confirm("d2")
    mine.release()


def test_stale_file_means_dead_and_is_removed(tmp_path: Path) -> None:
    live = Liveness(tmp_path)
    live.hold("zombie")
    live.release()
    stale = tmp_path / "tasks" / "daemons" / "zombie.lock"
    stale.write_text("123\n")  # a daemon that died and left its file behind
    assert Liveness(tmp_path).list_daemons() == ["zombie"]
    assert Liveness(tmp_path).list_daemons(alive_only=True) == []
    assert not stale.exists()


def test_liveness_across_processes_and_kill_9(tmp_path: Path) -> None:
    proc = forkserver.popen(
        child_argv(HOLDER, str(tmp_path), "worker-1"),
        env=child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"holding\n"
        checker = Liveness(tmp_path)
        assert checker.is_alive("worker-1")
        assert checker.list_daemons(alive_only=True) == ["worker-1"]
        with pytest.raises(LogError):
            checker.hold("worker-1")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert not checker.is_alive("worker-1")
        assert not (tmp_path / "tasks" / "daemons" / "worker-1.lock").exists()
        checker.hold("worker-1")  # the id is free again
        checker.release()
    finally:
        proc.kill()
        proc.wait()
