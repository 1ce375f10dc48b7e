"""benchmarks/timeline: its probes record what the process reads, writes and syncs, and
its cycles cut a task's period where the calls say (synthetic timelines)."""

from __future__ import annotations

import os

from benchmarks import timeline
from benchmarks.timeline import Call


def _task(t: int, cpu: int, *, fsyncs: int = 1) -> tuple[list[Call], list[Call]]:
    """One task's calls from ``t`` (ns): the SDK reads our ack, writes the next enqueue;
    we read it, write the log, fsync (``fsyncs`` times), and write a line that waits
    for the next sync (the caller adds the next ack)."""
    sdk = [
        Call(t + 20_000, t + 21_000, 0, 0, "R", 8, "ack"),
        Call(t + 100_000, t + 101_000, 0, 0, "W", 7, "enqueue"),
    ]
    daemon = [Call(t + 110_000, t + 112_000, cpu, cpu + 1_000, "R", 0, "enqueue")]
    at = t + 312_000  # 200 us after the read: the log write
    daemon.append(Call(at, at + 10_000, cpu + 150_000, cpu + 160_000, "W", 9, ""))
    for i in range(fsyncs):
        daemon.append(Call(at + 10_000 + i * 150_000, at + 160_000 + i * 150_000,
                           cpu + 160_000, cpu + 200_000, "F", 9, ""))  # fmt: skip
    end = daemon[-1].end  # then a line written without a sync of its own (a success)
    daemon.append(Call(end + 20_000, end + 30_000, cpu + 210_000, cpu + 215_000, "W", 9, ""))
    return daemon, sdk


def _ack(t: int, cpu: int) -> Call:
    return Call(t, t + 10_000, cpu, cpu + 5_000, "W", 1, "ack")


def test_cycles_cut_the_period_at_the_reads_writes_and_fsync() -> None:
    daemon, sdk = [_ack(0, 0)], []
    for k in range(2):
        start = k * 600_000
        d, s = _task(start, k * 1_000_000 + 100_000)  # 95 us of our CPU after the ack
        daemon += d
        sdk += s
        daemon.append(_ack(start + 600_000, k * 1_000_000 + 340_000))
    found = timeline.cycles(daemon, sdk)
    assert len(found) == 2
    first = found[0]
    assert first.period == 600.0
    assert first.sdk == 100.0  # our ack ends at 10 us; we read the enqueue at 110
    assert (first.sdk_wake, first.sdk_work, first.sdk_back) == (10.0, 79.0, 9.0)
    assert first.before == 200.0  # the read ends at 112 us; the log write starts at 312
    assert first.durable == 160.0  # the write and the fsync: 312 -> 472
    assert first.after == 128.0  # the fsync ends at 472 us; the next ack starts at 600
    assert first.ack == 10.0
    assert first.cpu_before == 149.0  # thread CPU from the read's end to the write's start
    assert first.cpu_after == 40.0
    assert first.cpu_durable == 50.0  # from the log write's start to the fsync's end
    assert first.cpu_sdk == 95.0  # from the ack's end (5 us of CPU) to the read (100 us)


def test_a_cycle_of_another_shape_is_left_out() -> None:
    daemon, sdk = [_ack(0, 0)], []
    for k, fsyncs in enumerate((2, 1)):  # the first task's batch synced twice
        start = k * 700_000
        d, s = _task(start, k * 1_000_000, fsyncs=fsyncs)
        daemon += d
        sdk += s
        daemon.append(_ack(start + 700_000, k * 1_000_000 + 240_000))
    found = timeline.cycles(daemon, sdk)
    assert [c.period for c in found] == [700.0]
    assert found[0].durable == 160.0


def test_probes_record_the_calls_and_come_out() -> None:
    calls: list[Call] = []
    read_fd, write_fd = os.pipe()
    undo = timeline.probe_os(calls)
    try:
        os.write(write_fd, b'{"action":"ack","task_id":"t1"}\n')
        assert os.read(read_fd, 100).startswith(b'{"action":"ack"')
    finally:
        undo()
        os.close(read_fd)
        os.close(write_fd)
    assert [(c.op, c.tag) for c in calls] == [("W", "ack"), ("R", "ack")]
    assert all(c.end >= c.start and c.cpu_end >= c.cpu for c in calls)
    os.write(2, b"")  # after undo, nothing more is recorded
    assert len(calls) == 2


def test_a_cycle_tells_whether_the_sdk_read_the_execute_before_its_enqueue(capsys) -> None:
    daemon, sdk = [_ack(0, 0)], []
    for k in range(3):
        start = k * 600_000
        d, s = _task(start, k * 1_000_000)
        if k == 0:  # the execute read between the ack's read and the enqueue's write
            s[0] = s[0]._replace(start=start + 12_000, end=start + 13_000)  # (woke sooner)
            s.insert(1, Call(start + 50_000, start + 51_000, 0, 0, "R", 8, "execute"))
        elif k == 1:  # after the enqueue's write: not before it
            s.append(Call(start + 105_000, start + 106_000, 0, 0, "R", 8, "execute"))
        daemon += d
        sdk += s
        daemon.append(_ack(start + 600_000, k * 1_000_000 + 240_000))
    found = timeline.cycles(daemon, sdk)
    assert [c.sdk_execute for c in found] == [True, False, False]
    timeline.report(found, 3)
    assert (
        "read our execute before writing its next enqueue in 33% of the cycles: its work "
        "87 us there, 79 us in the others"
    ) in capsys.readouterr().out


def test_an_ack_read_with_the_execute_in_it_counts_as_both() -> None:
    assert (
        timeline._tag(b'{"action":"ack","task_id":"t"}\n{"action":"execute","task_id":"t"}\n')
        == "ack+execute"
    )
    assert timeline._tag(b'{"action":"execute","task_id":"t","task_type":"enqueue"}\n') == "execute"
    daemon, sdk = [_ack(0, 0)], []
    d, s = _task(0, 0)
    s[0] = s[0]._replace(tag="ack+execute")
    daemon += d
    sdk += s
    daemon.append(_ack(600_000, 240_000))
    found = timeline.cycles(daemon, sdk)
    assert [c.sdk_execute for c in found] == [True]


def test_our_ack_written_with_an_execute_still_ends_a_cycle() -> None:
    daemon, sdk = [_ack(0, 0)], []
    for k in range(2):
        start = k * 600_000
        d, s = _task(start, k * 1_000_000)
        daemon += d
        sdk += s
        daemon.append(_ack(start + 600_000, k * 1_000_000 + 240_000)._replace(tag="ack+execute"))
    assert [c.period for c in timeline.cycles(daemon, sdk)] == [600.0, 600.0]
