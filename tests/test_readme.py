"""The README's examples run as written, twice in one directory (issue 9.13)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from auditkit import storage_problems

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _block_after(heading: str) -> str:
    section = README[README.index(heading):]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, heading
    return match.group(1)


def _run_twice(code: str, tmp_path: Path) -> list[str]:
    (tmp_path / "app.py").write_text(code)
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNERD_")}
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    outputs = []
    for _ in range(2):  # the second run meets the first run's storage
        done = subprocess.run([sys.executable, "app.py"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout)
    for log in tmp_path.rglob("tasks/tasks.log"):  # what the example wrote, twice, is sound
        assert storage_problems(log.parent.parent) == [], log
    return outputs


def test_the_sdk_example_runs_as_written(tmp_path: Path) -> None:
    pytest.importorskip("snerdmq", reason="snerdmq-python is not installed")
    if not (Path(sys.executable).parent / "snerdmq").exists():
        pytest.skip("the snerdmq console script is not installed in this environment")
    for out in _run_twice(_block_after("## Use it from an official SnerdMQ SDK"), tmp_path):
        assert "sending to a@example.com" in out


def test_the_embedded_example_runs_as_written(tmp_path: Path) -> None:
    for out in _run_twice(_block_after("## Embedded Python API"), tmp_path):
        assert out.count("sending to") == 2 and "0 pending" in out


def test_the_task_and_results_example_runs_as_written(tmp_path: Path) -> None:
    for out in _run_twice(_block_after("## Tasks and results"), tmp_path):
        assert "resized: {'path': 'cat.png', 'width': 320}" in out, out
        assert "words: 6" in out and "state: completed" in out, out


def test_the_testing_example_passes_under_pytest(tmp_path: Path) -> None:
    (tmp_path / "test_welcome.py").write_text(_block_after("## Testing your handlers"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNERD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # The example needs no plugin (it runs its own event loop). Autoloaded, the plugins
    # installed for this suite (Hypothesis's above all) would be imported and
    # assert-rewritten first: 1.05 s for this run instead of 0.35 s.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_welcome.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
    assert not (tmp_path / ".snerdata").exists()  # nothing touched the disk


def test_the_retry_example_runs_as_written(tmp_path: Path) -> None:
    for out in _run_twice(_block_after("### Retries: exponential backoff"), tmp_path):
        assert "done;" in out and "dead_lettered failed_permanently" in out


def test_the_worker_example_runs_as_written(tmp_path: Path) -> None:
    section = README[README.index("## Worker command"):]
    (tmp_path / "tasks.py").write_text(_block_after("## Worker command"))
    shell = re.search(r"```sh\n(.*?)```", section, re.S)
    assert shell
    start, add, stop = (line.split("#")[0].strip() for line in shell.group(1).splitlines())
    assert start.endswith("&") and stop == "kill -TERM %1"
    snerdmq = [sys.executable, "-m", "snerd.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNERD_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    pipe = subprocess.PIPE
    worker = subprocess.Popen(snerdmq + shlex.split(start[:-1])[1:], cwd=tmp_path, env=env,
                              stdout=pipe, stderr=pipe, text=True)  # fmt: skip
    watchdog = threading.Timer(60, worker.kill)  # a hung worker ends the blocking reads
    watchdog.start()
    try:
        assert worker.stderr is not None and worker.stdout is not None
        assert "task types: resize" in worker.stderr.readline()  # it says what it serves
        done = subprocess.run(snerdmq + shlex.split(add)[1:], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert worker.stdout.readline() == "resizing cat.png\n"  # blocks until it ran
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    finally:
        watchdog.cancel()
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_the_commands_are_in_the_order_a_new_user_needs() -> None:
    assert "node app.js" not in README  # no Node program of ours exists
    chromium = README.index("apt-get update && apt-get install -y chromium")
    assert chromium < README.index(".venv/bin/python -m pytest")
    assert "press Enter" in README  # the demo waits for it in a terminal
