"""One import name per module: the layers are snerd.<layer>, never their bare names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("eventlog", "projections", "dispatcher", "rpc")


@pytest.mark.parametrize("layer", LAYERS)
def test_a_bare_layer_name_is_refused_with_the_name_to_use(layer: str) -> None:
    code = f"import {layer}.base" if layer == "eventlog" else f"import {layer}"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert f"ImportError: import snerd.{layer}, not {layer}" in done.stderr


def test_the_snerd_names_import_and_are_one_class() -> None:
    from snerd.eventlog import FileLog
    from snerd.eventlog.filelog import FileLog as Same

    assert FileLog is Same
    assert FileLog.__module__ == "snerd.eventlog.filelog"
