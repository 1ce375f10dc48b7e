"""Helpers for driving the real daemon over stdio: a line-level ``Wire`` and log reading.

``Wire`` wraps a :class:`snerd.rpc.client.Client` and keeps every message the daemon
writes in an inbox; ``expect`` takes the first matching message out of it (waiting
with a timeout), ``barrier`` waits until every command sent before it has been
applied, and ``advance`` moves the daemon's test clock (``SNERD_TEST_CLOCK``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import forkserver
import orjson

from snerd.errors import SnerdError
from snerd.rpc.client import STDOUT_LIMIT, Client, RemoteDispatchError

T0 = 1_700_000_000.0
"""Where the daemons' test clock starts (2023-11-14T22:13:20Z)."""
WAIT = 10.0
"""Default seconds to wait for an expected message before failing."""
DAEMON_CODE = "import sys; from snerd.rpc.daemon import main; sys.exit(main())"
ROOT = Path(__file__).resolve().parents[2]

BARRIER = "__barrier__"
Message = dict[str, Any]


def iso(epoch: float) -> str:
    """An RFC 3339 UTC instant with milliseconds (the log's format)."""
    from snerd.projections.schedule import format_instant

    return format_instant(epoch)


def read_log(storage: Path) -> list[Message]:
    """Every parseable record of ``storage``'s tasks.log, in order."""
    path = storage / "tasks" / "tasks.log"
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def events_of(storage: Path, task_id: str, event: str | None = None) -> list[Message]:
    """The log records about ``task_id`` (optionally of one event type)."""
    return [
        r for r in read_log(storage)
        if r.get("taskId", r.get("task")) == task_id and (event is None or r.get("event") == event)
    ]  # fmt: skip


async def until(condition: Callable[[], bool], what: str, timeout: float = WAIT,
                step: float = 0.002) -> None:  # fmt: skip
    """Poll ``condition`` every ``step`` s until it holds; fail naming ``what`` after
    ``timeout`` s. The way to wait for something no message announces (never a bare
    sleep before an assertion)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(step)


DRAINING = "draining ("
"""What the daemon logs at info level once it has stopped claiming (signal or EOF)."""
INFO = {"SNERD_LOG_LEVEL": "info"}
"""``spawn(env=INFO)``: a daemon whose drain can be awaited with ``Wire.draining``."""


def shim(tmp: Path) -> Path:
    """An executable ``snerdmq`` script that runs this checkout's daemon."""
    path = tmp / "snerdmq"
    path.write_text(
        f"#!/bin/sh\nPYTHONPATH={ROOT}${{PYTHONPATH:+:$PYTHONPATH}} "
        f'exec {sys.executable} -c "{DAEMON_CODE}" "$@"\n'
    )
    path.chmod(0o755)
    return path


class ForkingClient(Client):
    """A :class:`Client` whose daemon is forked from the session's fork server (see
    ``forkserver.py``) instead of exec'd: the same ``main()`` in its own process, minus
    the interpreter start-up. A ``binary`` (or ``SNERD_TEST_SPAWN=exec``) execs."""

    async def start(self) -> None:
        if self.binary is not None or not forkserver.enabled():
            await super().start()
            return
        if self.process is not None:
            raise SnerdError("the client was already started")
        self.process = await forkserver.spawn(  # type: ignore[assignment]
            ["-c", self.storage], self._environment(), limit=STDOUT_LIMIT
        )
        loop = asyncio.get_running_loop()
        self._readers = [loop.create_task(self._read_stdout()),
                         loop.create_task(self._read_stderr())]  # fmt: skip
        for task_type in self.handlers:
            self._write({"action": "register", "task_type": task_type})


NOT_A_PROCESS = (
    "this daemon runs in the test's own process (no pid, signals or stderr of its own): "
    "mark the test @pytest.mark.process to get a forked daemon"
)


class InProcessClient(Client):
    """A :class:`Client` whose daemon is served in this process, on the test's event loop.

    It runs ``snerd.rpc.daemon.serve``, what the console script's ``main()`` runs once
    it has configured logging, with the environment a spawned daemon would get, and
    talks to it over two real pipes: the daemon's stdin reader and stdout writer are the
    same pipe transports as in a process. What it skips is the process (a fork and its
    first ~1,200 copy-on-write page faults, then the exit and the reaping): ~11 ms a
    daemon. A test about the process itself (signals, kill -9, pids, stderr, exit codes
    on fatal errors, several processes on one storage) is marked ``process`` and gets a
    forked daemon (``spawn`` in ``conftest.py``)."""

    async def start(self) -> None:
        if self.process is not None:
            raise SnerdError("the client was already started")
        from snerd.rpc.daemon import serve

        loop = asyncio.get_running_loop()
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        ends = (os.fdopen(stdin_r, "rb", 0), os.fdopen(stdout_w, "wb", 0))
        serving = loop.create_task(
            serve(self.storage, env=self._environment(), stdin=ends[0], stdout=ends[1]),
            name=f"daemon on {self.storage}",
        )
        # however serve() ends (a daemon that raised too), its ends of the pipes close
        # (a no-op where its transports closed them), so the test reads EOF, not silence
        serving.add_done_callback(lambda _: [end.close() for end in ends])
        await asyncio.sleep(0)  # serve() has installed its signal handlers: the test
        for signum in (signal.SIGTERM, signal.SIGINT):  # process keeps its own (Ctrl-C)
            loop.remove_signal_handler(signum)
        stdout = await forkserver.read_stream(stdout_r, STDOUT_LIMIT)
        stderr = asyncio.StreamReader()
        stderr.feed_eof()  # its log records go to this process's logging
        stdin = await forkserver.write_stream(stdin_w)
        self.process = _Served(serving, stdin, stdout, stderr)  # type: ignore[assignment]
        self._readers = [loop.create_task(self._read_stdout()),
                         loop.create_task(self._read_stderr())]  # fmt: skip
        for task_type in self.handlers:
            self._write({"action": "register", "task_type": task_type})


class _Served:
    """The parts of :class:`asyncio.subprocess.Process` that ``snerd.Client`` uses, for a
    daemon served in this process: its exit code is what ``serve()`` returned (a daemon
    that raised fails the test with its traceback)."""

    KILLED = -9

    def __init__(self, serving: asyncio.Task[int], stdin: asyncio.StreamWriter,
                 stdout: asyncio.StreamReader, stderr: asyncio.StreamReader) -> None:  # fmt: skip
        self._serving = serving
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr

    @property
    def pid(self) -> int:
        raise AssertionError(NOT_A_PROCESS)

    @property
    def returncode(self) -> int | None:
        if not self._serving.done():
            return None
        return self.KILLED if self._serving.cancelled() else self._serving.result()

    async def wait(self) -> int:
        try:
            await asyncio.shield(self._serving)
        except asyncio.CancelledError:
            if not self._serving.cancelled():
                raise  # this wait was cancelled (a timeout), not the daemon
        if not self.stdin.is_closing():
            self.stdin.close()
        code = self.returncode
        assert code is not None
        return code

    def send_signal(self, signum: int) -> None:
        raise AssertionError(NOT_A_PROCESS)

    def terminate(self) -> None:
        raise AssertionError(NOT_A_PROCESS)

    def kill(self) -> None:
        """The spawn fixture's last resort for a daemon that did not end on EOF."""
        self._serving.cancel()


def _matches(message: Message, action: str | None, fields: dict[str, Any]) -> bool:
    if action is not None and message.get("action") != action:
        return False
    return all(message.get(k) == v for k, v in fields.items())


class Wire:
    """A daemon under test, spoken to line by line."""

    def __init__(self, client: Client, storage: Path, *, clock: bool) -> None:
        self.client = client
        self.storage = storage
        self.clock = clock
        self.now = T0
        self.inbox: list[Message] = []
        self.seen: list[Message] = []
        self._queue = client.subscribe()
        self._ids = itertools.count(1)
        self.killed = False

    # --- sending --------------------------------------------------------------------

    async def send(self, message: Message) -> None:
        await self.client.send(message)

    async def raw(self, line: bytes) -> None:
        await self.client.send_line(line)

    async def register(self, *task_types: str) -> None:
        for task_type in task_types:
            await self.send({"action": "register", "task_type": task_type})

    async def enqueue(self, task_id: str, task_type: str = "t", **fields: Any) -> Message:
        """Enqueue and return the reply (``ack`` or ``error``), matched by request id."""
        rid = f"e{next(self._ids)}"
        msg = {"action": "enqueue", "task_id": task_id, "task_type": task_type, **fields}
        await self.send({**msg, "request_id": rid})
        return await self.expect(None, request_id=rid)

    async def ack(self, task_id: str, task_type: str = "t", **fields: Any) -> Message:
        """Enqueue and insist on an ``ack``."""
        reply = await self.enqueue(task_id, task_type, **fields)
        assert reply["action"] == "ack", reply
        return reply

    async def result(self, task_id: str, ok: bool = True, error: str | None = None,
                     **extra: Any) -> None:  # fmt: skip
        msg: Message = {"action": "result", "task_id": task_id,
                        "status": "success" if ok else "error", **extra}  # fmt: skip
        if error is not None:
            msg["error_msg"] = error
        await self.send(msg)

    async def request(self, action: str, **fields: Any) -> Message:
        """Send with a request id and return the reply."""
        rid = f"r{next(self._ids)}"
        await self.send({"action": action, **fields, "request_id": rid})
        return await self.expect(None, request_id=rid)

    async def get(self, task_id: str) -> Message:
        reply = await self.request("get", task_id=task_id)
        assert reply["action"] == "task", reply
        return dict(reply["task"])

    async def stats(self) -> Message:
        await self.barrier()
        reply = await self.request("stats")
        return dict(reply["stats"])

    async def barrier(self) -> None:
        """Return once every command sent before it went through the log's writer.

        A ``cancel`` of an unknown id is a log transaction with nothing to write;
        transactions run in order, so its reply comes after theirs.
        """
        try:
            await asyncio.wait_for(self.client.cancel(BARRIER), WAIT)
        except RemoteDispatchError as exc:
            assert exc.code == "unknown_task"
        await asyncio.sleep(0)

    async def logged(self, task_id: str, event: str, timeout: float = WAIT) -> list[Message]:
        """Wait (round trip by round trip) until the log has ``event`` for ``task_id``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not (found := events_of(self.storage, task_id, event)):
            assert loop.time() < deadline, f"no {event} of {task_id} in the log"
            await self.barrier()
            await asyncio.sleep(0.002)
        return found

    async def advance(self, seconds: float) -> None:
        """Move the daemon's clock after every earlier command has been applied."""
        assert self.clock, "this daemon runs on the real clock"
        await self.barrier()
        self.now += seconds
        await self.send({"action": "_clock", "advance": seconds})
        await self.barrier()
        await self.barrier()

    async def draining(self, timeout: float = WAIT) -> None:
        """Wait until the daemon has begun its drain (it must run with ``env=INFO``)."""
        assert not isinstance(self.client, InProcessClient), NOT_A_PROCESS
        await until(
            lambda: any(DRAINING in line for line in self.client.stderr_tail),
            f"{self.name} to begin draining (spawned with env=INFO?)", timeout,
        )  # fmt: skip

    # --- receiving ------------------------------------------------------------------

    def _keep(self, message: Message) -> None:
        self.seen.append(message)
        if message.get("task_id") != BARRIER:
            self.inbox.append(message)

    def _pump(self) -> None:
        while not self._queue.empty():
            message = self._queue.get_nowait()
            if message is not None:
                self._keep(message)

    async def expect(self, action: str | None, timeout: float = WAIT, **fields: Any) -> Message:
        """Take the first message matching ``action`` and ``fields`` out of the inbox."""

        async def find() -> Message:
            while True:
                self._pump()
                for i, message in enumerate(self.inbox):
                    if _matches(message, action, fields):
                        return self.inbox.pop(i)
                message = await self._queue.get()
                if message is None:
                    raise AssertionError(f"daemon exited; no {action} {fields}")
                self._keep(message)

        try:
            return await asyncio.wait_for(find(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"no {action} {fields} within {timeout}s; inbox: {self.inbox[-10:]}; "
                f"stderr: {list(self.client.stderr_tail)[-5:]}"
            ) from None

    async def expect_n(self, action: str, n: int, timeout: float = WAIT,
                       **fields: Any) -> list[Message]:  # fmt: skip
        return [await self.expect(action, timeout, **fields) for _ in range(n)]

    def taken(self, action: str | None = None, **fields: Any) -> list[Message]:
        """Matching messages still in the inbox (without taking them)."""
        self._pump()
        return [m for m in self.inbox if _matches(m, action, fields)]

    async def quiet(self, action: str = "execute", **fields: Any) -> None:
        """Assert that no matching message arrived (after a barrier)."""
        await self.barrier()
        await self.barrier()
        assert not self.taken(action, **fields), self.taken(action, **fields)

    def drop(self, predicate: Callable[[Message], bool] | None = None) -> None:
        """Forget inbox messages (all, or those matching ``predicate``)."""
        self._pump()
        self.inbox = [m for m in self.inbox if predicate is not None and not predicate(m)]

    # --- process ----------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.client.pid

    @property
    def name(self) -> str:
        """How failures name this daemon: its pid, or that it runs in the test's process."""
        if isinstance(self.client, InProcessClient):
            return f"the in-process daemon on {self.storage}"
        return f"daemon {self.pid}"

    async def kill(self) -> None:
        assert not isinstance(self.client, InProcessClient), NOT_A_PROCESS
        self.killed = True
        await self.client.kill()

    def stdout_lines(self) -> list[bytes]:
        assert self.client.transcript is not None
        return self.client.transcript


def check_stdout(lines: Iterable[bytes]) -> None:
    """Every stdout line is one JSON object with a string ``action``."""
    for line in lines:
        assert line.endswith(b"\n"), line[:200]
        message = orjson.loads(line)
        assert isinstance(message, dict), line[:200]
        assert isinstance(message.get("action"), str), line[:200]


def base_env(*, clock: bool, workers: int | None = None, **extra: str) -> dict[str, str]:
    env = {"SNERD_LOG_LEVEL": "warning", "SNERD_DRAIN_TIMEOUT": "5"}
    if clock:
        env["SNERD_TEST_CLOCK"] = str(T0)
    if workers is not None:
        env["SNERD_MAX_WORKERS"] = str(workers)
    env.update(extra)
    return env


def environ_without_snerd() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SNERD_")}


def assert_sound_history(storage: Path | str, *, torn_tail: bool = False,
                         chained: bool = True) -> None:  # fmt: skip
    """``snerdmq replay --verify`` finds nothing wrong with a storage dir's or a
    PostgreSQL queue's whole history: checksum chain and audit (``torn_tail``: but a
    line a killed writer left unfinished, sealed by the next writer; ``chained``: and
    some line carries a checksum)."""
    from auditkit import TORN, verify_report

    report, code = verify_report(storage)
    problems = [p for p in report["problems"] if not (torn_tail and p["problem"].startswith(TORN))]
    assert report["chain"]["breaks"] == [] and problems == [], problems
    assert report["chain"]["older_links"] == 0 and (report["chain"]["chained"] > 0 or not chained)
    assert code == (1 if report["problems"] else 0)


async def compacting_workload(wires: list[Wire], archives: Callable[[], int],
                              n: int = 150) -> None:  # fmt: skip
    """Enqueue ``n`` tasks of type ``t`` on ``wires`` in turns (their clients run them),
    and after every 25 (~25 KB of log) wait until they ran and a compaction happened
    (``archives()`` grew; the daemons were started with a small SNERD_COMPACT_BYTES):
    each daemon then appends after the others' compactions. Every daemon exits 0."""
    done: set[str] = set()

    async def handle(task_id: str, data: Any) -> None:
        done.add(task_id)

    for wire in wires:
        wire.client.register("t", handle)
    before = 0
    for i in range(n):
        if i % 25 == 0:
            before = archives()
        await wires[i % len(wires)].client.enqueue(f"task-{i}", "t", {"n": i})
        if i % 25 == 24:  # a compaction during or after these 25
            sent = i + 1
            await until(lambda s=sent: len(done) == s, f"{sent} executions", 30)
            await until(lambda b=before: archives() > b, "a compaction", 30)
    await until(lambda: len(done) == n, f"{n} executions", 30)
    for wire in wires:
        await wire.client.close_stdin()
        assert await wire.client.wait(timeout=15) == 0
