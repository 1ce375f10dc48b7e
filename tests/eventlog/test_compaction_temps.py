"""Issue 12.6: temp files of compactions killed mid-way are removed at start.

A compaction holds an flock on its temp file for as long as it works on it; opening
a log deletes every temp file nobody holds locked, and leaves a live one alone.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import forkserver
from logkit import Recorder, child_argv, child_env

from snerd.eventlog import compaction
from snerd.eventlog.filelog import FileLog
from snerd.eventlog.layout import resolve


def temps(storage: Path) -> list[str]:
    return sorted(p.name for p in (storage / "tasks").glob(".tasks.log.*.tmp"))


async def holding(code: str, *args: str) -> asyncio.subprocess.Process:
    """A child process running ``code`` (which prints ``ready`` once it holds its temp
    file locked, then sleeps), once it is ready."""
    proc = await forkserver.create_subprocess_exec(
        *child_argv(code, *args), env=child_env(), stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"ready\n"
    return proc


async def open_and_close(storage: Path) -> Recorder:
    log = FileLog(storage, fsync=False, follow=False)
    rec = Recorder()
    await log.open(rec)
    await log.append([{"event": "put", "k": "after"}])
    await log.close()
    return rec


async def test_a_killed_compactions_temp_file_is_removed_at_open(tmp_path: Path) -> None:
    storage = tmp_path / "s"
    layout = resolve(storage)
    layout.ensure()
    tmp = layout.temp_path("compact-1")
    code = """
        import os, sys, time
        from pathlib import Path
        from snerd.eventlog import compaction
        fd = compaction.open_temp(Path(sys.argv[1]))
        os.write(fd, b'{"event":"snapshot","seq":1}\\n{"half":')
        print("ready", flush=True)
        time.sleep(60)
    """
    proc = await holding(code, str(tmp))
    await open_and_close(storage)
    assert temps(storage) == [tmp.name], "a live compaction's temp file was removed"
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    rec = await open_and_close(storage)
    assert temps(storage) == []
    assert [r["k"] for r in rec.records] == ["after", "after"]


async def test_temp_files_of_older_versions_and_other_pids_are_removed(tmp_path: Path) -> None:
    storage = tmp_path / "s"
    (storage / "tasks").mkdir(parents=True)
    for name in (".tasks.log.compact-123.4242.tmp", ".tasks.log.compact-9.1.tmp"):
        (storage / "tasks" / name).write_bytes(b'{"event":"snapshot"}\n')
    (storage / "tasks" / "unrelated.tmp").write_bytes(b"keep")
    await open_and_close(storage)
    assert temps(storage) == []
    assert (storage / "tasks" / "unrelated.tmp").exists()


async def test_a_temp_file_locked_in_this_process_stays(tmp_path: Path) -> None:
    storage = tmp_path / "s"
    layout = resolve(storage)
    layout.ensure()
    fd = compaction.open_temp(layout.temp_path("compact-7"))
    try:
        await open_and_close(storage)
        assert len(temps(storage)) == 1
    finally:
        os.close(fd)
    await open_and_close(storage)
    assert temps(storage) == []


async def test_compaction_still_works_and_leaves_no_temp(tmp_path: Path) -> None:
    storage = tmp_path / "s"
    log = FileLog(storage, fsync=True, follow=False)
    rec = Recorder()
    await log.open(rec)
    await log.append([{"event": "put", "k": "a"}, {"event": "put", "k": "b"}])
    await log.compact([{"event": "put", "k": "b"}])
    await log.append([{"event": "put", "k": "c"}])
    await log.close()
    assert temps(storage) == []
    lines = (storage / "tasks" / "tasks.log").read_bytes().splitlines()
    assert b'"snapshot"' in lines[0] and b'"c"' in lines[-1]


async def test_a_killed_index_writes_temp_file_is_removed_at_open(tmp_path: Path) -> None:
    """The per-task index is written to a temp file locked while written, too."""
    storage = tmp_path / "s"
    resolve(storage).ensure()
    code = """
        import os, sys, time
        from pathlib import Path
        from snerd.eventlog import compaction
        from snerd.eventlog.layout import index_temp_name
        tasks = Path(sys.argv[1]) / "tasks"
        fd = compaction.open_temp(tasks / index_temp_name("4242.1"))
        os.write(fd, b'{"snerdIndex":1')
        print("ready", flush=True)
        time.sleep(60)
    """
    proc = await holding(code, str(storage))
    index_temps = lambda: sorted(p.name for p in (storage / "tasks").glob(".tasks.idx.*.tmp"))  # noqa: E731
    await open_and_close(storage)
    assert index_temps() == [".tasks.idx.4242.1.tmp"], "a live index write's temp was removed"
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    await open_and_close(storage)
    assert index_temps() == []
