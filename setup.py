"""Build script: everything else is in ``pyproject.toml``.

snerd is pure Python. A wheel build (``pip install .``, ``pip wheel .``) also compiles
the fold's modules (``PURE``: the typed events, the rules, the bulk folder, the
counters, the engine's incremental folder and the heaps and maps it keeps; and what
every task passes through: the task record's reader and writer, its timestamps and cron
schedules, the state's type, what a fold changed, the decisions, the queries and plan
that pick claims, the enqueue options' reader, and the wire's parser and encoders, as
pure as the core: the ``pure-wire`` contract of pyproject.toml) and the glue every task
passes through (``GLUE``: the engine with its dispatcher, the log's codec and checksum
chain, the daemon's request handlers and stdout writer) to C extensions with mypyc, the
compiler that ships with mypy (black and mypy itself are built the same way): the same
source, type-checked, about 1.5x faster where a start-up replays a long log, and about
35% fewer instructions a task (``benchmarks/README.md``). The interpreted modules stay
in the wheel, and nothing else changes. A class that must stay a Python class in a
compiled module (built by ``slots.fast_init``, subclassed) must be kept one: any
decorator mypyc does not know does that.

Not compiled:

- an editable install (``pip install -e``): an extension built in place would shadow
  later edits of its source;
- ``SNERD_PURE=1`` in the build's environment;
- a machine without a C compiler: the extensions are optional, so the build goes on
  with the interpreted modules (setuptools prints why).

``python setup.py build_ext --inplace`` builds them into a checkout (``bench_fold
--compiled`` does, in a copy of the tree); delete the ``.so`` files to go back.
``.ci/run`` runs the suite a second time against the extensions of a wheel built as
pip builds it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from setuptools import setup  # type: ignore[import-untyped]

PURE = (
    "snerd/projections/events.py",
    "snerd/projections/evolve.py",
    "snerd/projections/replay.py",
    "snerd/projections/counters.py",
    "snerd/projections/apply.py",
    "snerd/projections/attempts.py",
    "snerd/projections/enqueue.py",
    "snerd/projections/values.py",
    "snerd/projections/heap.py",
    "snerd/projections/pmaps.py",
    "snerd/projections/decide.py",
    "snerd/projections/queries.py",
    "snerd/projections/plan.py",
    "snerd/projections/options.py",
    "snerd/projections/task.py",
    "snerd/projections/schedule.py",
    "snerd/projections/delta.py",
    "snerd/projections/queue_state.py",
    "snerd/rpc/protocol.py",
    "snerd/rpc/replies.py",
    "snerd/rpc/result.py",
    "snerd/rpc/enqueue.py",
)
"""Modules a purity contract of pyproject.toml holds (``pure-core``, ``pure-wire``)."""

GLUE = (
    "snerd/dispatcher/engine.py",
    "snerd/dispatcher/dispatch.py",
    "snerd/dispatcher/runs.py",
    "snerd/dispatcher/flags.py",
    "snerd/eventlog/chain.py",
    "snerd/eventlog/codec.py",
    "snerd/eventlog/batch.py",
    "snerd/eventlog/base.py",
    "snerd/eventlog/batching.py",
    "snerd/eventlog/filelog.py",
    "snerd/eventlog/locking.py",
    "snerd/rpc/output.py",
    "snerd/rpc/handlers.py",
    "snerd/rpc/reader.py",
)
"""The glue every task passes through several times: the engine and its dispatcher (its
enqueue, claim, start and outcome; about a tenth of a task's instructions in the wheel,
``benchmarks/README.md``, eighteenth session); the log's record codec, its checksum
chain and the writer's steps over a batch that do no I/O (every line written); the
daemon's request handlers and stdout writer (every line answered). With ``replies.py``,
these last five took ~5% off the daemon's instructions a task (twenty-first session).
The log itself, ``base.py``, ``batching.py`` (its group commit) and ``filelog.py``,
another ~8% (twenty-third session): its classes stay open to interpreted subclasses
(``MemoryLog``, ``PostgresLog``, the tests' ``PatchableFileLog``), whose methods the
compiled writer calls as Python would; the generator that resumes a writer run by hand
(``types.coroutine``) lives apart, in ``eventlog/resume.py``. Its lock's ``flock`` calls
(``locking.py``), two a batch (thirty-sixth session). The daemon's reader
(``rpc/reader.py``: what it does with each line read, and its ``execute`` lines), ~2%
more (twenty-fourth session); the rest of ``rpc/daemon.py`` (start-up, signals, the
drain) runs once and stays interpreted.
Their classes are native, whose methods nothing can replace, and their calls into the
pure core are direct; the handlers take the engine and the writer themselves, no
stand-in: the tests observe them through their attributes, their observers and the log
(those that must wrap a method, ``dispatch.plan``, or stand in for one of them skip in
the compiled pass, saying why). Compiled code can evaluate a slice's bound twice (mypyc
2.4: ``view[os.write(fd, view):]`` on a memoryview wrote every line twice): no call with
an effect in a slice here. Nor the other constructs mypyc compiles differently, met when
compiling more (``benchmarks/README.md``, twenty-second session): one name bound by two
``except ... as`` clauses of different types, a class attribute without ``ClassVar``
that a subclass would set, ``types.coroutine``, and (thirty-sixth session) an
``__init__`` called with ``**options``. ``tests/test_compiled_build.py`` scans every
compiled module for all five."""

COMPILED = PURE + GLUE
_BUILDS = ("bdist_wheel", "build_ext", "build")


def ext_modules() -> list[Any]:
    if os.environ.get("SNERD_PURE") or not any(cmd in sys.argv for cmd in _BUILDS):
        return []  # metadata, sdist, editable_wheel: nothing to compile
    try:
        from mypyc.build import mypycify
    except ImportError:  # a build without mypy (pyproject's build requires name it)
        return []
    # The build environment holds the build requirements only, without the runtime
    # dependencies or their types: so none of the project's mypy settings (strict: CI
    # checks that), no complaint about a missing import, and none about the modules
    # these import (they stay interpreted).
    flags = ["--config-file=", "--ignore-missing-imports", "--follow-imports=silent"]
    extensions: list[Any] = mypycify(
        [*flags, *COMPILED], opt_level="3", group_name="snerd_core"
    )
    for extension in extensions:
        extension.optional = True
    return extensions


if __name__ == "__main__":  # as setuptools runs it (tests import COMPILED)
    setup(ext_modules=ext_modules())
