"""benchmarks/opcodes: the tracer counts each bytecode a function runs, a task's count is
the difference of two runs, and every module lands in the part the report says."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pyrsistent
import pytest

import snerd.embedded
import snerd.projections.task
from benchmarks import opcodes
from benchmarks.opcodes import Tracer, module_of, part_of, per_task, totals

REPO = Path(__file__).resolve().parents[1]


def _loop(k: int) -> int:
    total = 0
    for i in range(k):
        total += i * 2
    return total


def _traced(k: int) -> collections.Counter[tuple[str, str]]:
    with Tracer() as tracer:
        _loop(k)
    return tracer.counts


def test_the_tracer_counts_each_bytecode_a_loop_runs() -> None:
    if not opcodes.opcodes_traced():  # (the tool refuses to run there, saying so)
        pytest.skip(f"Python {sys.version.split()[0]} delivers no opcode events to a "
                    "trace function: CPython 3.12.1 did not")  # fmt: skip
    key = ("tests/test_bench_opcodes.py", "_loop")
    c10, c20, c30 = (_traced(k)[key] for k in (10, 20, 30))
    assert c10 > 0
    assert c30 - c20 == c20 - c10 > 0  # the same opcodes each turn of the loop
    assert per_task(collections.Counter({key: c10}), collections.Counter({key: c30}), 20) == {
        key: (c20 - c10) / 10
    }
    assert sys.gettrace() is None  # uninstalled on leaving


def test_a_tasks_count_is_the_difference_of_two_runs() -> None:
    small = collections.Counter({("a.py", "f"): 10, ("a.py", "start"): 7, ("c.py", "h"): 3})
    large = collections.Counter({("a.py", "f"): 40, ("a.py", "start"): 7, ("b.py", "g"): 6})
    rows = per_task(small, large, 3)
    assert rows == {("a.py", "f"): 10.0, ("a.py", "start"): 0.0, ("b.py", "g"): 2.0,
                    ("c.py", "h"): -1.0}  # fmt: skip
    assert totals(rows, lambda module: module[0]) == {"a": 10.0, "b": 2.0, "c": -1.0}


def test_every_module_lands_in_its_part() -> None:
    cases = {
        REPO / "snerd" / "projections" / "apply.py": ("projections/apply.py", "core"),
        REPO / "snerd" / "eventlog" / "chain.py": ("eventlog/chain.py", "core"),
        REPO / "snerd" / "eventlog" / "batching.py": ("eventlog/batching.py", "glue"),
        Path(snerd.embedded.__file__): ("snerd/embedded.py", "glue"),
        REPO / "benchmarks" / "bench_hotpath.py": ("benchmarks/bench_hotpath.py", "other"),
        Path(collections.__file__): ("stdlib:collections/__init__.py", "stdlib"),
    }
    for filename, (name, part) in cases.items():
        assert module_of(str(filename)) == name
        assert part_of(name) == part, name
    library = module_of(pyrsistent.__file__)
    assert library == "site:pyrsistent/__init__.py" and part_of(library) == "libraries"
    assert part_of(module_of("<string>")) == "generated"


def test_a_run_of_the_embedded_queue_counts_the_core_and_restores_the_config() -> None:
    built = snerd.embedded.EngineConfig
    rows = per_task(opcodes.count("sequential", 12), opcodes.count("sequential", 36), 24)
    assert snerd.embedded.EngineConfig is built
    parts = totals(rows, part_of)
    if snerd.projections.task.__file__.endswith(".py"):  # (the README's suite)
        assert parts["glue"] > 500
        assert parts["core"] > 1000
        assert rows[("projections/task.py", "task_from_record")] > 0
    else:  # the compiled pass: the core's bytecode is what the wheel leaves interpreted
        assert parts["glue"] > 200  # the queue's face, its executors (the log is compiled)
        assert ("eventlog/batching.py", "_run_batch") not in rows
        assert ("projections/task.py", "task_from_record") not in rows
        # the core is counted (its interpreted modules run at start-up), and none of it
        # runs as bytecode a task (since the thirty-fifth session: the fold's entry and
        # the commands every task builds are compiled)
        assert any(part_of(module) == "core" for module, _ in rows)
        assert parts["core"] == 0
