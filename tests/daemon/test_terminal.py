"""``snerdmq DIR`` typed at by a person in a terminal, and a mistyped subcommand (9.7, 9.8)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import forkserver
from daemonkit import ROOT, WAIT


def _read_until(fd: int, needle: bytes, deadline: float) -> bytes:
    seen = b""
    while needle not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {needle!r} from the terminal; saw {seen[-500:]!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed its side
                break
            if not chunk:
                break
            seen += chunk
    return seen


def test_the_daemon_works_on_an_interactive_terminal(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SNERD_LOG_LEVEL": "warning"}
    proc = forkserver.popen(
        [sys.executable, "-m", "snerd.cli", str(tmp_path / "store")],
        stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env, close_fds=True,
    )  # fmt: skip
    os.close(slave)
    try:
        deadline = time.monotonic() + WAIT
        os.write(master, b'{"action":"enqueue","task_id":"typed","task_type":"t"}\n')
        _read_until(master, b'"action":"ack"', deadline)
        os.write(master, b'{"action":"stats"}\n')
        _read_until(master, b'"action":"stats"', deadline)
        os.write(master, b"\x04")  # Ctrl-D: end of input, the daemon exits
        assert proc.wait(timeout=WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert proc.stderr is not None
    assert b"BlockingIOError" not in proc.stderr.read()


def _run_on_a_terminal(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``snerdmq ARGS`` with stdin on a terminal and stdin's EOF sent at once."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SNERD_LOG_LEVEL": "warning"}
    proc = forkserver.popen([sys.executable, "-m", "snerd.cli", *args], cwd=cwd, stdin=slave,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)  # fmt: skip
    os.close(slave)
    try:
        os.write(master, b"\x04")
        _, err = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return proc.returncode, err.decode()


def test_a_mistyped_subcommand_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    code, err = _run_on_a_terminal(["stat"], tmp_path)
    assert code == 2
    assert "did you mean `snerdmq stats`" in err and "./stat" in err
    assert not (tmp_path / "stat").exists()
    code, _ = _run_on_a_terminal(["./stat"], tmp_path)  # the explicit path form
    assert code == 0 and (tmp_path / "stat" / "tasks").is_dir()
    code, _ = _run_on_a_terminal(["stat"], tmp_path)  # now it exists: a storage path
    assert code == 0


def test_sdks_spawn_any_storage_name_on_pipes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = forkserver.run([sys.executable, "-m", "snerd.cli", "stat"], cwd=tmp_path,
                          stdin=subprocess.DEVNULL, capture_output=True, env=env,
                          timeout=WAIT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "stat" / "tasks").is_dir()
