"""The tree at a git revision, for the benchmarks that measure a revision against now."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import NoReturn

REPO = Path(__file__).resolve().parents[1]


def extract(rev: str, into: str | os.PathLike[str], tool: str) -> None:
    """Write the tree at ``rev`` under ``into`` (``git archive``); exit naming ``tool``
    when git cannot."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev],
                             capture_output=True, check=False)  # fmt: skip
    if archive.returncode != 0:
        sys.exit(f"{tool}: git archive {rev} failed: "
                 f"{archive.stderr.decode(errors='replace').strip()}")  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="tar")


def compiled_copy(into: str | os.PathLike[str], tool: str, source: Path = REPO) -> Path:
    """A copy of the tree at ``source`` (this one by default) under ``into`` with the
    modules its wheel compiles (``setup.py``'s ``COMPILED``, with mypyc) built in place,
    as ``pip install .`` runs them; exit naming ``tool`` when the build fails."""
    tree = Path(into) / "tree"
    shutil.copytree(source, tree, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "*.so", "__pycache__", ".hypothesis"))  # fmt: skip
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                          cwd=tree, capture_output=True, check=False)  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"{tool}: the compiled build failed: {done.stderr.decode()[-2000:]}")
    return tree


def rerun_compiled(parent: str, module: str) -> NoReturn:
    """``--compiled``: this run of ``module`` (its other options as given) again in a
    copy of this tree built as ``pip install .`` builds it (:func:`compiled_copy`), so
    that the daemon, the embedded queue and the read paths import its compiled modules;
    exit with that run's status."""
    argv = [arg for arg in sys.argv[1:] if arg != "--compiled"]
    with tempfile.TemporaryDirectory(dir=parent, prefix="snerd-built-") as raw_tmp:
        tree = compiled_copy(raw_tmp, module.rsplit(".", 1)[-1])
        print("this tree as a wheel builds it (setup.py's COMPILED modules built with mypyc)",
              flush=True)  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run([sys.executable, "-m", module, *argv], cwd=tree, env=env,
                              check=False)  # fmt: skip
    sys.exit(done.returncode)
