"""``snerdmq worker MODULE:QUEUE`` as a subprocess, on a module this test writes: tasks
enqueued by a Queue in this process run there, two workers share the work with no
attempt run twice, and SIGTERM drains (no new claims, in-flight attempts finish, exit 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import forkserver
import pytest
from auditkit import storage_problems
from click.testing import CliRunner

import snerd
from snerd.tools.worker import worker

WAIT = 20.0

MODULE = '''
import asyncio, os, pathlib
import snerd

OUT = pathlib.Path(os.environ["WORKER_OUT"])
queue = snerd.Queue(os.environ["WORKER_STORE"], fsync=False)

def mark(name, exclusive=False):
    """A marker file holding our pid, written whole before it appears (the test reads
    it at once); ``exclusive``: fail if it exists already."""
    tmp = OUT / f".{name}.{os.getpid()}.tmp"
    tmp.write_text(str(os.getpid()))
    if exclusive:
        os.link(tmp, OUT / name)
        tmp.unlink()
    else:
        os.replace(tmp, OUT / name)

@queue.handler("quick")
async def quick(job):
    # exclusive: a second run of the same attempt would fail here (and show as attempt 2)
    mark(f"ran.{job.id}.{job.attempt}", exclusive=True)

@queue.handler("hold")
def hold(job):  # a sync handler, in a worker thread: held until the test opens the gate
    mark(f"started.{job.id}")
    while not (OUT / "gate").exists():
        __import__("time").sleep(0.01)
    mark(f"done.{job.id}")
'''


class Worker:
    """A ``snerdmq worker`` subprocess and the lines it wrote on stderr."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.lines.append(line.decode().rstrip("\n"))

    def said(self, words: str) -> bool:
        return any(words in line for line in self.lines)

    async def exit_code(self) -> int:
        code = await asyncio.wait_for(self.proc.wait(), WAIT)
        await self.reader
        return code


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "app_tasks.py").write_text(MODULE)
    (tmp_path / "out").mkdir()
    return tmp_path


@pytest.fixture
async def start(app: Path) -> AsyncIterator[Callable[..., object]]:
    started: list[Worker] = []

    async def _start(*args: str, store: str = "store", **settings: str) -> Worker:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SNERD_")}
        env.update(WORKER_OUT=str(app / "out"), WORKER_STORE=str(app / store), **settings)
        proc = await forkserver.create_subprocess_exec(
            sys.executable, "-m", "snerd.cli", "worker", "app_tasks:queue", *args,
            cwd=app, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        w = Worker(proc)
        started.append(w)
        await until(lambda: w.said("serving") or w.proc.returncode is not None)
        assert w.said("serving"), w.lines
        return w

    yield _start
    killed = False
    for w in started:  # only the processes this test started, by their own handle
        if w.proc.returncode is None:
            w.proc.kill()
            killed = True
            await w.proc.wait()
        w.reader.cancel()
    for store in app.iterdir():  # what the workers wrote passes replay --verify
        if (store / "tasks" / "tasks.log").exists():
            assert storage_problems(store, torn_tail=killed) == []


async def until(condition: Callable[[], bool], queue: snerd.Queue | None = None) -> None:
    """Wait until ``condition()`` holds: woken by the queue's state changes, and looking
    again every 20 ms for what only the file system shows (bounded by WAIT)."""

    async def wait() -> None:
        while not condition():
            if queue is not None:
                queue.engine.changed.clear()
            with contextlib.suppress(TimeoutError):
                changed = queue.engine.changed.wait() if queue else asyncio.sleep(0.02)
                await asyncio.wait_for(changed, 0.02)

    await asyncio.wait_for(wait(), WAIT)


def runs(app: Path, prefix: str = "ran.") -> dict[str, str]:
    """Marker file name -> pid of the worker that wrote it."""
    return {p.name: p.read_text() for p in (app / "out").glob(f"{prefix}*")}


async def test_the_worker_runs_what_a_queue_elsewhere_enqueues(app: Path, start) -> None:
    w = await start("--concurrency", "3", "--pool", "slow=2,fast=1", "--pool", "bulk=4")
    banner = next(line for line in w.lines if "serving" in line)
    assert "app_tasks:queue" in banner and str(app / "store") in banner
    assert "task types: hold, quick" in banner and "concurrency 3" in banner
    assert "pools bulk=4, fast=1, slow=2" in banner
    async with snerd.Queue(str(app / "store"), fsync=False) as queue:  # no handlers here
        for i in range(5):
            await queue.enqueue(f"q{i}", "quick", {"i": i}, pool="slow" if i % 2 else None)
        await until(lambda: all(queue.get(f"q{i}") is None for i in range(5)), queue)
    assert set(runs(app)) == {f"ran.q{i}.1" for i in range(5)}
    assert set(runs(app).values()) == {str(w.proc.pid)}
    w.proc.send_signal(signal.SIGINT)
    assert await w.exit_code() == 0


async def test_two_workers_share_the_work_and_no_attempt_runs_twice(app: Path, start) -> None:
    a = await start("--concurrency", "1")
    b = await start("--concurrency", "1", "--storage", str(app / "store"), store="elsewhere")
    async with snerd.Queue(str(app / "store"), fsync=False) as queue:
        await queue.enqueue("h1", "hold")
        await queue.enqueue("h2", "hold")
        # each worker has room for one attempt: both holds running means both got one
        await until(lambda: len(runs(app, "started.")) == 2, queue)
        assert set(runs(app, "started.").values()) == {str(a.proc.pid), str(b.proc.pid)}
        for i in range(30):
            await queue.enqueue(f"q{i}", "quick")
        (app / "out" / "gate").touch()
        await until(lambda: not queue.engine.state.tasks, queue)
    assert set(runs(app)) == {f"ran.q{i}.1" for i in range(30)}  # each once, first attempt
    assert not (app / "elsewhere").exists()  # --storage won over the queue's own
    for w in (a, b):
        w.proc.send_signal(signal.SIGTERM)
        assert await w.exit_code() == 0


async def test_sigterm_drains_then_exits_zero(app: Path, start) -> None:
    w = await start(SNERD_MAX_WORKERS="2", SNERD_POOLS="slow=1")
    assert w.said("concurrency 2; pools slow=1")  # the daemon's settings, from the environment
    async with snerd.Queue(str(app / "store"), fsync=False) as queue:
        await queue.enqueue("h1", "hold")
        await until(lambda: bool(runs(app, "started.")), queue)
        w.proc.send_signal(signal.SIGTERM)
        await until(lambda: w.said("draining"))
        assert w.said("1 attempt(s) in flight")
        await queue.enqueue("late", "quick")  # the draining worker claims nothing new
        (app / "out" / "gate").touch()
        assert await w.exit_code() == 0
        assert w.said("stopped")
        await until(lambda: "h1" not in queue.engine.state.tasks, queue)
        assert (app / "out" / "done.h1").exists()  # the attempt in flight finished
        assert queue.get("h1") is None  # and its success was recorded, not released
        assert queue.get("late")["status"] == "pending"  # type: ignore[index]
    assert not runs(app)


def test_bad_targets_are_usage_errors(app: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(app)
    monkeypatch.setenv("WORKER_OUT", str(app / "out"))
    monkeypatch.setenv("WORKER_STORE", str(app / "store"))
    (app / "empty_app.py").write_text("import snerd\nqueue = snerd.Queue('s')\n")
    (app / "two_app.py").write_text("import snerd\na = snerd.Queue('s')\nb = snerd.Queue('s')\n")
    cases = {
        "no_such_module:queue": "cannot import 'no_such_module'",
        "app_tasks:nothing": "has no attribute 'nothing'",
        "app_tasks:OUT": "is a PosixPath, not a snerd.Queue",
        "two_app": "several queues (a, b): name one as two_app:ATTRIBUTE",
        "empty_app": "registers no handlers",
    }
    for target, words in cases.items():
        done = CliRunner().invoke(worker, [target])
        assert done.exit_code == 2, (target, done.output)
        assert words in done.output, (target, done.output)
    done = CliRunner().invoke(worker, ["app_tasks:queue", "--pool", "slow"])
    assert done.exit_code == 2 and "'slow' is not NAME=N" in done.output
    done = CliRunner().invoke(worker, ["app_tasks:queue", "--concurrency", "0"])
    assert done.exit_code == 2 and "--concurrency" in done.output
