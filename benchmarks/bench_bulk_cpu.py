"""Bulk replay CPU per event, several source trees side by side.

    python benchmarks/bench_bulk_cpu.py TREE [TREE ...] [--records N] [--best B] [--rounds R]

Writes one log of ``--records`` lines (``bench_fold``'s generator, from this tree),
then, in ``--rounds`` interleaved rounds, runs one fresh process per tree that imports
``snerd`` from that tree (a git worktree of an older commit, say) and reports the best
of ``--best`` CPU times (``time.process_time``) of ``bulk_fold`` over the records,
decoded from JSON beforehand (fold only), in microseconds per record. CPU time is
what the load of a shared machine disturbs least.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

_CHILD = """
import gc, sys, time
tree, path, best = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, tree)
import orjson
import snerd
from snerd.projections.replay import bulk_fold
assert snerd.__file__.startswith(tree), snerd.__file__
lines = open(path, "rb").read().splitlines()
low = float("inf")
for _ in range(best):
    records = [orjson.loads(line) for line in lines]
    gc.collect()
    t0 = time.process_time()
    state = bulk_fold(records)
    low = min(low, time.process_time() - t0)
print(f"{low / len(lines) * 1e6:.2f} {len(state.tasks)}")
"""


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("trees", nargs="+", help="source trees (repository roots)")
    p.add_argument("--records", type=int, default=60_000)
    p.add_argument("--best", type=int, default=9, help="runs per process (best taken)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    args = p.parse_args()
    sys.path.insert(0, str(HERE.parent))
    from benchmarks.bench_fold import generate

    with tempfile.NamedTemporaryFile(suffix=".jsonl") as log:
        log.write(b"\n".join(generate(args.records, 3000)) + b"\n")
        log.flush()
        for round_ in range(1, args.rounds + 1):
            for tree in args.trees:
                root = str(Path(tree).resolve())
                out = subprocess.run(
                    [sys.executable, "-c", _CHILD, root, log.name, str(args.best)],
                    check=True, capture_output=True, text=True,
                ).stdout.split()  # fmt: skip
                print(f"round {round_}  {root}: {out[0]} us/event (live tasks {out[1]})")


if __name__ == "__main__":
    main()
