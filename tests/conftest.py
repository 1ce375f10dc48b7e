"""Suite-wide settings. Under CI (``CI`` set) hypothesis runs derandomized: the same
examples every run, so a landing never depends on the draw; locally each run draws
new examples and keeps failures in its database. Example counts: hypothesis_budget.py.

With bytecode writing off (``PYTHONDONTWRITEBYTECODE``, as on the development VMs),
every daemon the suite spawns would compile snerd's sources again (~0.1 s CPU per
spawn, a few hundred spawns): the package is compiled once here instead, into the
``__pycache__`` directories Python itself would write (git ignores them). Only
timestamps-checked bytecode of this checkout is written; what runs is unchanged.
"""

from __future__ import annotations

import compileall
import gc
import itertools
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import forkserver
import pytest
from hypothesis import settings
from hypothesis_budget import examples

from snerd.dispatcher.engine import collector_paused

# Tests that write no count draw examples(100) (see hypothesis_budget.py).
settings.register_profile("suite", max_examples=examples(100))
settings.register_profile("ci", settings.get_profile("suite"), derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "suite")


# PostgreSQL: the suite's sessions (and those of the daemons it starts, which inherit the
# environment) commit without waiting for the server's WAL flush. No test crashes the
# server, so that wait proves nothing here: what the tests check (a batch is committed
# before its ack, a cut connection, a lost COMMIT reply, a killed daemon) is the same
# either way; it is the PostgreSQL manual's advice for throwaway test clusters. The
# product never sets it (a durable batch commits with the server's setting, "on" by
# default). PGOPTIONS set by the caller is left alone.
os.environ.setdefault("PGOPTIONS", "-c synchronous_commit=off")


def _compile_package() -> None:
    package = Path(__file__).resolve().parents[1] / "snerd"
    for folder, _, files in os.walk(package, followlinks=True):  # layers are symlinks
        for name in files:
            if name.endswith(".py"):
                compileall.compile_file(os.path.join(folder, name), quiet=2)


if sys.dont_write_bytecode:
    _compile_package()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the fork server (``forkserver.py``), in the background, and keep the cyclic
    garbage collector off what lives for the whole session.

    The server's interpreter and imports (~0.3 s) overlap the tests that run before the
    first forked child instead of delaying it. Everything collection made (modules,
    test items, strategies) is frozen out of the collector's sight, and the thresholds
    are raised: with the defaults, each of the suite's ~30 full collections walked that
    heap again (5.3 s of the 6.9 s the suite spent collecting garbage); frozen and
    raised, 2.6 s in all. What the tests run is unchanged.
    """
    import gc

    if forkserver.enabled() and session.items:
        forkserver.server()
    gc.collect()
    gc.freeze()
    gc.set_threshold(5_000, 10, 50)


_TMP_NUMBERS = itertools.count()


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh directory for each test, under the session's base directory, as pytest's
    own ``tmp_path`` makes it (named after the test, kept after the run), but numbered
    by a counter: pytest's lists the whole base directory to find the next number, once
    per test, and with ~1,700 directories made per session that scan was the bulk of the
    suite's 0.7 s in ``mktemp``."""
    name = re.sub(r"\W", "_", request.node.name)[:30]
    path = tmp_path_factory.getbasetemp() / f"{name}{next(_TMP_NUMBERS)}"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def collector_off() -> Iterator[None]:
    """Python's cyclic collector off for the test (a pass first: what was left before
    is not counted), then as it was: for tests that count what the collector finds
    after some work (``gc.collect()``'s return)."""
    gc.collect()
    with collector_paused():
        yield
