"""``snerdmq replay``: counts, --task, --at, --verify, --json, exit codes, dispatch."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis_budget import examples

from snerd.projections.history import audit
from snerd.projections.schedule import format_instant
from snerd.projections.snapshot import snapshot_records
from snerd.projections.state import empty, fold
from snerd.tools.replay import history_of, replay

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "projections"))
import loggen

REPO = Path(__file__).resolve().parents[2]
T = 1_700_000_000.0


def ms(seconds: float) -> int:
    return round(seconds * 1000)


def event(name: str, task_id: str, at: float, **fields: Any) -> dict[str, Any]:
    return {"event": name, "taskId": task_id, "ts": ms(at), "daemon": "d1", **fields}


def full(name: str, task_id: str, at: float, **fields: Any) -> dict[str, Any]:
    return event(name, task_id, at, taskType=fields.pop("taskType", "job"), **fields)


def dag_log() -> list[dict[str, Any]]:
    """A failing DAG (p -> c -> g), a completed task (ok) and a retried task (r)."""
    records = [
        full("enqueued", "p", T, maxRetries=0),
        full("enqueued", "c", T, triggerAfterIds=["p"]),
        full("enqueued", "g", T, triggerAfterIds=["c"]),
        full("enqueued", "ok", T),
        full("enqueued", "r", T, maxRetries=2),
        event("claimed", "ok", T + 1, attempt=1, leaseUntil=ms(T + 61)),
        event("succeeded", "ok", T + 2, attempt=1),
        event("claimed", "p", T + 3, attempt=1),
        event("claimed", "r", T + 3, attempt=1),
        full("retry_scheduled", "r", T + 4, attempt=1, retryCount=1, maxRetries=2,
             LastJobError={"error": "flaky", "retry_worthy": True}, LastErrorObj="flaky"),
        full("dead_lettered", "p", T + 5, attempt=1, reason="retries_exhausted",
             LastJobError={"error": "boom", "retry_worthy": True}, LastErrorObj="boom"),
        full("dead_lettered", "c", T + 5, reason="blocked_by_failed_parent",
             triggerAfterIds=["p"], LastErrorObj="parent task failed: p"),
        full("dead_lettered", "g", T + 5, reason="blocked_by_failed_parent",
             triggerAfterIds=["c"], LastErrorObj="parent task failed: c"),
        event("claimed", "r", T + 6, attempt=2),
        event("progress", "r", T + 7, attempt=2, data={"pct": 50}),
        event("succeeded", "r", T + 8, attempt=2),
    ]  # fmt: skip
    for seq, record in enumerate(records, 1):
        record["seq"] = seq
    return records


SNERDMQ_LINES = [
    {"taskId": "mail-1", "taskType": "send_email", "taskData": '{"to":"a@x"}', "retryCount": 0,
     "maxRetries": 2, "executeAt": "2023-11-14T22:13:20Z", "deletedAt": None, "LastJobError": None},
    {"taskId": "mail-2", "taskType": "send_email", "taskData": '{"to":"b@x"}', "retryCount": 0,
     "maxRetries": 1, "executeAt": "2023-11-14T22:13:20Z", "deletedAt": None, "LastJobError": None},
    {"taskId": "mail-1", "taskType": "send_email", "taskData": '{"to":"a@x"}', "retryCount": 1,
     "maxRetries": 2, "executeAt": "2023-11-14T22:13:20Z", "deletedAt": None,
     "LastJobError": "smtp timeout"},
    {"taskId": "mail-1", "taskType": "send_email", "taskData": '{"to":"a@x"}', "retryCount": 1,
     "maxRetries": 2, "executeAt": "2023-11-14T22:13:20Z", "deletedAt": "2023-11-14T22:15:00Z",
     "LastJobError": None},
    {"taskId": "mail-2", "taskType": "send_email", "taskData": '{"to":"b@x"}', "retryCount": 1,
     "maxRetries": 1, "executeAt": "2023-11-14T22:13:20Z", "deletedAt": "2023-11-14T22:16:00Z",
     "LastJobError": "mailbox full"},
    {"taskId": "later", "taskType": "report", "taskData": "{}", "retryCount": 0,
     "maxRetries": 3, "executeAt": "2999-01-01T00:00:00Z", "deletedAt": None,
     "LastJobError": None},
]  # fmt: skip


def write_log(storage: Path, records: list[dict[str, Any]], tail: bytes = b"") -> Path:
    log = storage / "tasks" / "tasks.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records) + tail)
    return log


@pytest.fixture
def dag_storage(tmp_path: Path) -> Path:
    write_log(tmp_path / "dag", dag_log())
    return tmp_path / "dag"


@pytest.fixture
def snerdmq_log(tmp_path: Path) -> Path:
    lines = [orjson.dumps(r) for r in SNERDMQ_LINES]
    lines.insert(3, b"\x00\x01 not json at all")
    body = b"\n".join(lines) + b'\n{"taskId": "mail-3", "taskTy'  # torn tail
    path = tmp_path / "snerdmq" / "tasks" / "tasks.log"
    path.parent.mkdir(parents=True)
    path.write_bytes(body)
    return path


def run(*args: str) -> Result:
    return CliRunner().invoke(replay, [str(a) for a in args], catch_exceptions=False)


def as_json(*args: str) -> dict[str, Any]:
    result = run(*args, "--json")
    data: dict[str, Any] = orjson.loads(result.output)
    return data


# --- (i) our own log: failing DAG, completed task, retried task --------------------------


def test_counts_of_a_dag_log(dag_storage: Path) -> None:
    result = run(dag_storage)
    assert result.exit_code == 0, result.output
    assert "Replayed 16 events" in result.output
    data = as_json(dag_storage)
    assert data["counts"] == {
        "pending": 0, "scheduled": 0, "blocked": 0, "active": 0,
        "completed": 2, "dead_lettered": 3, "cancelled": 0,
    }  # fmt: skip
    assert data["events"] == 16 and data["skipped_lines"] == 0


def test_json_shape(dag_storage: Path) -> None:
    data = as_json(dag_storage)
    assert set(data) == {"tasks", "counts", "skipped_lines", "events", "ambiguous_completed"}
    assert set(data["tasks"]) == {"p", "c", "g", "ok", "r"}
    for entry in data["tasks"].values():
        assert set(entry) == {"state", "attempts", "last_error", "type", "history_len"}
    assert data["tasks"]["r"] == {
        "state": "completed", "attempts": 2, "last_error": "flaky", "type": "job",
        "history_len": 6,
    }  # fmt: skip
    assert data["tasks"]["c"]["state"] == "dead_lettered"
    assert data["tasks"]["c"]["last_error"] == "parent task failed: p"


def test_task_history_of_a_retried_task(dag_storage: Path) -> None:
    result = run(dag_storage, "--task", "r")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    events = [word for line in lines for word in line.split() if word in {
        "enqueued", "claimed", "retry_scheduled", "progress", "succeeded"}]  # fmt: skip
    assert events == ["enqueued", "claimed", "retry_scheduled", "claimed", "progress", "succeeded"]
    assert "Task r (job): completed, 2 attempt(s); last error: flaky" in result.output
    assert format_instant(T + 4) in result.output and "flaky" in result.output
    history = as_json(dag_storage, "--task", "r")["history"]
    assert [(h["event"], h["state"], h["attempt"]) for h in history] == [
        ("enqueued", "pending", None),
        ("claimed", "active", 1),
        ("retry_scheduled", "pending", 1),
        ("claimed", "active", 2),
        ("progress", "active", 2),
        ("succeeded", "completed", 2),
    ]
    assert history[1]["daemon"] == "d1" and history[2]["error"] == "flaky"


def test_task_history_shows_when_a_child_was_unblocked(tmp_path: Path) -> None:
    records = [
        full("enqueued", "p", T, seq=1),
        full("enqueued", "c", T, triggerAfterIds=["p"], seq=2),
        event("claimed", "p", T + 1, attempt=1, seq=3),
        event("succeeded", "p", T + 2, attempt=1, seq=4),
    ]
    write_log(tmp_path / "s", records)
    data = as_json(tmp_path / "s", "--task", "c")
    assert [(h["event"], h["state"], h["derived"], h["seq"]) for h in data["history"]] == [
        ("enqueued", "blocked", False, 2),
        ("unblocked", "pending", True, 4),
    ]
    assert data["history"][1]["reason"] == "succeeded of p"
    assert data["task"] == {"id": "c", "state": "pending", "attempts": 0, "last_error": None,
                            "type": "job", "history_len": 1}


def test_task_history_of_a_failed_through_child(dag_storage: Path) -> None:
    history = as_json(dag_storage, "--task", "g")["history"]
    assert [(h["event"], h["state"], h["reason"]) for h in history] == [
        ("enqueued", "blocked", None),
        ("dead_lettered", "dead_lettered", "blocked_by_failed_parent"),
    ]


def test_at_shows_the_state_as_of_an_instant(dag_storage: Path) -> None:
    before_failure = as_json(dag_storage, "--at", format_instant(T + 3.5))
    assert {k: v["state"] for k, v in before_failure["tasks"].items()} == {
        "p": "active", "c": "blocked", "g": "blocked", "ok": "completed", "r": "active",
    }  # fmt: skip
    assert before_failure["events"] == 9
    assert (
        "as of 2023-11-14T22:13:23.500Z"
        in run(dag_storage, "--at", "2023-11-14T22:13:23.5Z").output
    )
    start = as_json(dag_storage, "--at", "2023-11-14T22:13:20Z")
    assert start["counts"]["pending"] == 3 and start["counts"]["blocked"] == 2


def test_verify_passes_on_a_clean_log(dag_storage: Path) -> None:
    result = run(dag_storage, "--verify")
    assert result.exit_code == 0, result.output
    assert "no problems" in result.output
    assert as_json(dag_storage, "--verify")["problems"] == []


def test_verify_lists_impossible_transitions(tmp_path: Path) -> None:
    records = [
        full("enqueued", "a", T, seq=1),
        event("claimed", "ghost", T + 1, attempt=1, seq=2),
        event("succeeded", "a", T + 2, seq=3),  # never claimed
        full("enqueued", "b", T + 3, seq=5),
        event("claimed", "b", T + 4, attempt=1, seq=4),  # seq went backwards
        event("succeeded", "b", T + 5, seq=6, daemon="d2"),  # claimed by d1
        {"event": "teleported", "taskId": "b", "seq": 7},
        full("enqueued", "c", T + 6, seq=8, retryCount="3"),
    ]
    log = write_log(tmp_path / "s", records)
    result = run(log, "--verify")
    assert result.exit_code == 1
    problems = [p["problem"] for p in as_json(log, "--verify")["problems"]]
    assert problems == [
        "claim of unknown task 'ghost'",
        "succeeded of task 'a' without an active claim",
        "seq 4 after 5: went backwards",
        "succeeded of task 'b' by d2, but d1 holds the claim",
        "event must be a known event type, got 'teleported'",
        "unusable record: skipped by the fold",
        "retryCount must be an integer >= 0, got '3'",
    ]
    assert "5 problem(s)" not in result.output and "7 problem(s)" in result.output


def test_verify_of_a_storage_dir_sees_seq_going_backwards(tmp_path: Path) -> None:
    records = [full("enqueued", "a", T, seq=2), event("claimed", "a", T + 1, attempt=1, seq=1)]
    write_log(tmp_path / "s", records)
    data = as_json(tmp_path / "s", "--verify")
    assert data["events"] == 2
    assert [p["problem"] for p in data["problems"]] == ["seq 1 after 2: went backwards"]


# --- (ii) a SnerdMQ log: state lines, a garbage line, a torn tail ------------------------------


def test_snerdmq_log_counts_and_skipped_lines(snerdmq_log: Path) -> None:
    data = as_json(snerdmq_log)
    assert data["skipped_lines"] == 2
    assert data["events"] == 6
    assert data["counts"] == {
        "pending": 0, "scheduled": 1, "blocked": 0, "active": 0,
        "completed": 1, "dead_lettered": 1, "cancelled": 0,
    }  # fmt: skip
    assert data["tasks"]["mail-1"] == {
        "state": "completed", "attempts": 1, "last_error": "smtp timeout",
        "type": "send_email", "history_len": 3,
    }  # fmt: skip
    assert data["tasks"]["mail-2"]["state"] == "dead_lettered"
    result = run(snerdmq_log)
    assert result.exit_code == 0 and "2 skipped line(s)" in result.output


def test_snerdmq_log_task_history(snerdmq_log: Path) -> None:
    history = as_json(snerdmq_log, "--task", "mail-2")["history"]
    assert [(h["event"], h["state"], h["error"]) for h in history] == [
        ("snerdmq:upsert", "pending", None),
        ("snerdmq:deleted", "dead_lettered", "mailbox full"),
    ]


def test_snerdmq_log_at(snerdmq_log: Path) -> None:
    data = as_json(snerdmq_log, "--at", "2023-11-14T22:14:00Z")
    assert data["tasks"]["later"]["state"] == "scheduled"
    assert data["tasks"]["mail-1"]["state"] == "completed"  # no ts: every line counts


def test_snerdmq_log_fails_verify_on_garbage_and_torn_tail(snerdmq_log: Path) -> None:
    result = run(snerdmq_log, "--verify")
    assert result.exit_code == 1
    problems = as_json(snerdmq_log, "--verify")["problems"]
    assert [p["problem"].split(":")[0] for p in problems] == [
        "skipped line (invalid_json)",
        "skipped line (incomplete last line (torn, or a write in progress))",
    ]


def compacted_dag(storage: Path) -> None:
    """The DAG log written by a FileLog that compacts after its tenth record (the
    archive holds the ten, the live log a snapshot and the rest)."""
    from snerd.eventlog.filelog import FileLog

    records = dag_log()

    class Sink:
        def on_records(self, batch: Any) -> None: ...
        def on_reset(self) -> None: ...
        def on_skipped(self, skipped: Any) -> None: ...

    async def build() -> None:
        log = FileLog(storage, follow=False, fsync=False)
        await log.open(Sink())
        await log.append([{k: v for k, v in r.items() if k != "seq"} for r in records[:10]])
        state, _ = fold(empty(), records[:10])
        await log.compact(snapshot_records(state, T + 4))
        await log.append([{k: v for k, v in r.items() if k != "seq"} for r in records[10:]])
        await log.close()

    asyncio.run(build())


def test_a_storage_dir_reads_archives_then_the_live_log(tmp_path: Path) -> None:
    compacted_dag(tmp_path / "s")
    assert len(list((tmp_path / "s" / "tasks" / "archive").iterdir())) == 1
    whole = as_json(tmp_path / "s", "--verify")
    assert whole["problems"] == [] and whole["events"] == 16
    assert whole["tasks"]["r"]["history_len"] == 6
    live_only = as_json(tmp_path / "s" / "tasks" / "tasks.log")  # the snapshot + tail
    assert live_only["counts"]["dead_lettered"] == whole["counts"]["dead_lettered"] == 3
    assert "ok" not in live_only["tasks"]  # it completed before the compaction


# --- the two-pass --task path equals the full audit ---------------------------------------


@settings(max_examples=examples(300), deadline=None)
@given(logs=loggen.any_logs, now=loggen.nows)
def test_history_of_one_task_equals_the_full_audit(logs: list[dict[str, Any]], now: float) -> None:
    full = audit(logs, now)
    for task_id, entry in full.tasks.items():
        parents: set[str] = set()
        for record in logs:
            found = record.get("triggerAfterIds")
            named = (record.get("taskId"), str(record.get("dlqKey") or ""))
            if task_id in named and isinstance(found, list):
                parents.update(p for p in found if isinstance(p, str))
        focused = history_of(logs, task_id, parents, now)
        assert focused is not None
        assert focused.transitions == entry.transitions
        assert (focused.state, focused.attempts, focused.history_len) == (
            entry.state, entry.attempts, entry.history_len,
        )  # fmt: skip


# --- exit 2 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{tmp}/missing"], "does not exist"),
        (["{tmp}"], "no log in"),
        (["{log}", "--at", "yesterday"], "--at: not an RFC 3339 timestamp"),
    ],
)
def test_bad_usage_exits_2(
    dag_storage: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    fill = {"tmp": str(empty_dir), "log": str(dag_storage)}
    result = CliRunner().invoke(replay, [a.format(**fill) for a in args])
    assert result.exit_code == 2
    assert message in result.output


# --- the console script -------------------------------------------------------------------------


def python(*code_and_args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run(
        [sys.executable, "-c", *code_and_args], capture_output=True, text=True, env=environ,
        timeout=60, check=False,
    )  # fmt: skip


def test_console_script_runs_replay(dag_storage: Path) -> None:
    done = python("from snerd.cli import main; main()", "replay", str(dag_storage), "--json")
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["counts"]["dead_lettered"] == 3


def test_anything_else_runs_the_daemon_without_click_or_rich(tmp_path: Path) -> None:
    code = (
        "import sys, snerd.daemon as d\n"
        "d.main = lambda argv: print(argv, 'click' in sys.modules, 'rich' in sys.modules) or 7\n"
        "from snerd.cli import main; main()"
    )
    for argv, shown in (([str(tmp_path)], f"['{tmp_path}']"), ([], "[]")):
        done = python(code, *argv)
        assert done.returncode == 7, done.stderr
        assert done.stdout.strip() == f"{shown} False False"


def test_the_daemon_ends_without_the_interpreters_teardown_and_loses_no_output(
    tmp_path: Path,
) -> None:
    """Its exit skips the teardown (an atexit hook never runs: ~27 ms of every exit an
    SDK waits for), yet what it printed last, unterminated, arrives, and so does its
    exit code."""
    code = (
        "import atexit, sys, snerd.daemon as d\n"
        "atexit.register(lambda: print('TEARDOWN', file=sys.stderr))\n"
        "def run(argv):\n"
        "    print('last words', end='')\n"
        "    sys.stderr.write('on stderr')\n"
        "    return 3\n"
        "d.main = run\n"
        "from snerd.cli import main; main()"
    )
    done = python(code, str(tmp_path))
    assert done.returncode == 3, done.stderr
    assert done.stdout == "last words"
    assert done.stderr == "on stderr"  # no TEARDOWN


_HEAVY = ("aiohttp", "rich", "click", "croniter", "portalocker", "snerd.dashboard", "msgspec")
_LOADED = (  # printed as the daemon ends (it skips the interpreter's teardown, and atexit)
    "import sys, snerd.cli as cli\n"
    "real = cli.exit_now\n"
    "def probe(code):\n"
    f"    print('LOADED', sorted(m for m in {_HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
    "    real(code)\n"
    "cli.exit_now = probe\n"
    "cli.main()"
)


def test_the_daemon_runs_without_heavy_imports(tmp_path: Path) -> None:
    """Every SDK spawn waits for the daemon's start-up: it loads neither the web server,
    the CLI's libraries, croniter (until a cron task needs it), portalocker (POSIX
    locks go straight to flock) nor msgspec (the per-task index's reader, loaded on a
    task's first history lookup)."""
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, str(tmp_path / "store")], capture_output=True,
        text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=subprocess.DEVNULL,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _loaded(done.stderr) == "[]", done.stderr
    assert (tmp_path / "store" / "tasks").is_dir()  # it did run on the storage


def _loaded(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("LOADED ")]
    assert len(lines) == 1, stderr
    return lines[0].removeprefix("LOADED ")


def test_the_daemon_loads_the_dashboard_only_when_asked(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SNERD_DASHBOARD_PORT": "0"}
    done = subprocess.run(
        [sys.executable, "-c", _LOADED, str(tmp_path / "store")], capture_output=True,
        text=True, env=env, stdin=subprocess.DEVNULL, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    loaded = _loaded(done.stderr)
    assert "'aiohttp'" in loaded and "'snerd.dashboard'" in loaded, loaded


def test_help_lists_replay() -> None:
    done = python("from snerd.cli import main; main()", "--help")
    assert done.returncode == 0 and "replay" in done.stdout


# --- --task alone: through the per-task index, no pass over the log ---------------------


def test_a_task_alone_is_read_through_the_index_and_not_the_whole_log(
    dag_storage: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import snerd.tools.replay as replay_module

    def no_pass(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a pass over the whole log, for one task's history")

    for name in ("fast_replay", "summarize", "audit"):
        monkeypatch.setattr(replay_module, name, no_pass)
    result = run(dag_storage, "--task", "r")
    assert result.exit_code == 0, result.output
    assert "Task r (job): completed, 2 attempt(s); last error: flaky" in result.output
    assert "Replayed" not in result.output  # no figures of every task
    data = as_json(dag_storage, "--task", "g")
    assert data == {
        "task": {"id": "g", "state": "dead_lettered", "attempts": 0,
                 "last_error": "parent task failed: c", "type": "job", "history_len": 2},
        "history": data["history"],
    }  # fmt: skip
    assert [h["event"] for h in data["history"]] == ["enqueued", "dead_lettered"]
    ghost = run(dag_storage, "--task", "ghost")
    assert ghost.exit_code == 1 and "no task 'ghost'" in ghost.output


def test_a_task_with_at_or_verify_still_replays_the_log(dag_storage: Path) -> None:
    at = run(dag_storage, "--task", "r", "--at", format_instant(T + 4))
    assert at.exit_code == 0 and "Replayed" in at.output  # the state as of then: a pass
    assert "retry_scheduled" in at.output and "succeeded" not in at.output
    checked = run(dag_storage, "--task", "r", "--verify")
    assert "Replayed" in checked.output and "Task r (job)" in checked.output


def test_a_task_a_compaction_restated_is_replayed_and_says_its_history_is_cut(
    tmp_path: Path,
) -> None:
    """The live log starts at a compaction whose archive was pruned: a task the snapshot
    restates (a record without ``ts``) is not read through the index alone; its replay
    says that the history before the compaction is gone."""
    compacted_dag(tmp_path / "s")
    for archive in (tmp_path / "s" / "tasks" / "archive").iterdir():
        archive.unlink()  # retention pruned it
    result = run(tmp_path / "s", "--task", "r")
    assert result.exit_code == 0, result.output
    assert "Task r (job): completed" in result.output and "succeeded" in result.output
    assert "the history up to seq 10 was compacted" in result.output
