"""Suite-wide settings. Under CI (``CI`` set) hypothesis runs derandomized: the same
examples every run, so a landing never depends on the draw; locally each run draws
new examples and keeps failures in its database."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
