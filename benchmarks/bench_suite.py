"""The whole test suite of this tree against the suite of a baseline revision, side by side.

    python -m benchmarks.bench_suite [--baseline 4eb887a] [--rounds 2]

Issue 7 asks the suite to run in at most half the time it took when the issue was filed
(main at 4eb887a), on the same 2-core machine, without parallel test runners. This runs
both suites in one invocation, alternating baseline/now ``--rounds`` times, and prints
each run's wall time (the whole command) and pytest's own figure, then the ratio of the
medians. Each run is what ``.ci/run`` runs, ``python -m pytest -q -p no:cacheprovider``
with ``CI=true`` (so Hypothesis is derandomized) and ``SNERD_TEST_PG_URL`` passed through:

- the baseline tree is ``git archive REV`` in a temporary directory, its own ``snerd``
  first on ``PYTHONPATH``, run with this environment's interpreter and libraries;
- before every run the trees' test bytecode is removed, as on a fresh clone where
  ``PYTHONDONTWRITEBYTECODE=1`` keeps pytest from caching its rewritten test modules;
- every run gets its own ``--basetemp``, deleted after the clock stops (pytest's own
  clean-up of older runs' directories is not counted, nor left to the next run), then
  the disk is synced and left alone a few seconds, so that no run pays for the last
  one's deletions.

Runs take minutes each; a failing run is reported, and its time is still shown.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.trees import extract

REPO = Path(__file__).resolve().parents[1]
SETTLE_SECONDS = 5.0  # after each run's clean-up, before the next run (not timed)
SUMMARY = re.compile(
    r"^=*\s*(?P<counts>\d+ (?:passed|failed|errors?|skipped|deselected)[^\n]*?)"
    r" in (?P<seconds>[\d.]+)s\b", re.M
)


@dataclass(frozen=True, slots=True)
class Run:
    tree: str
    wall: float  # seconds, the whole command
    pytest: float | None  # seconds, pytest's own figure
    counts: str  # "1270 passed, 1 skipped", or what went wrong
    ok: bool


def summary(output: str) -> tuple[str, float] | None:
    """(the counts, pytest's seconds) of pytest's last summary line, if it printed one."""
    found = SUMMARY.findall(output)
    if not found:
        return None
    counts, seconds = found[-1]
    return counts.strip(" ="), float(seconds)


def _drop_test_bytecode(tree: Path) -> None:
    for folder in ("tests", "benchmarks"):
        for cache in (tree / folder).rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)


def run_suite(name: str, tree: Path, scratch: Path, baseline: bool) -> Run:
    _drop_test_bytecode(tree)
    env = {**os.environ, "CI": "true"}
    if baseline:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH")]))
    basetemp = Path(tempfile.mkdtemp(dir=scratch, prefix=f"{name}-"))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--basetemp={basetemp}"]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    wall = time.perf_counter() - start
    shutil.rmtree(basetemp, ignore_errors=True)
    os.sync()  # the next run starts on a quiet disk: deleting a suite's files queues
    time.sleep(SETTLE_SECONDS)  # work (ext4 with ``discard`` trims them) it would pay
    found = summary(done.stdout)
    if found is None:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        return Run(name, wall, None, f"no summary (exit {done.returncode}): {tail}", False)
    counts, seconds = found
    return Run(name, wall, seconds, counts, done.returncode == 0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--baseline", default="4eb887a", help="git revision (default 4eb887a)")
    parser.add_argument("--rounds", type=int, default=2, help="baseline/now pairs (default 2)")
    args = parser.parse_args(argv)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="snerd-suite-") as raw:
        scratch = Path(raw)
        base = scratch / "baseline"
        base.mkdir()
        extract(args.baseline, base, "bench_suite")
        print(f"the suite, {args.baseline} against this tree, {args.rounds} interleaved "
              f"round(s) (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)",
              flush=True)  # fmt: skip
        for round_ in range(1, args.rounds + 1):
            for name, tree, baseline in ((args.baseline, base, True), ("now", REPO, False)):
                run = run_suite(name, tree, scratch, baseline)
                runs.append(run)
                shown = "" if run.pytest is None else f" (pytest {run.pytest:.1f} s)"
                mark = "" if run.ok else "  FAILED"
                print(f"  round {round_} {name:>10}: {run.wall:7.1f} s{shown}  {run.counts}{mark}",
                      flush=True)  # fmt: skip
    old = statistics.median(r.wall for r in runs if r.tree == args.baseline)
    new = statistics.median(r.wall for r in runs if r.tree == "now")
    print(f"median wall: {args.baseline} {old:.1f} s, now {new:.1f} s: "
          f"now/{args.baseline} = {new / old:.2f}x (issue 7 asks <= 0.5x)")
    if not all(r.ok for r in runs):
        sys.exit(1)


if __name__ == "__main__":
    main()
