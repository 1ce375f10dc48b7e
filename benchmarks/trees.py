"""The tree at a git revision, for the benchmarks that measure a revision against now."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

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
