"""How the daemon and the tools log to stderr: ``SNERD_LOG_LEVEL``, ``SNERD_LOG_FORMAT``.

``SNERD_LOG_FORMAT=text`` (the default) writes ``snerdmq LEVEL logger: message`` lines;
``SNERD_LOG_FORMAT=json`` writes one JSON object per line (python-json-logger), for
journald, Docker and log shippers::

    {"timestamp": "2026-01-01T12:00:00.123000+00:00", "level": "WARNING",
     "logger": "snerd.daemon", "message": "...", "exc_info": "Traceback ..."}

``extra=`` fields of a log call become keys of the object. stdout is never touched: it
carries the wire protocol.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Final

LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS: Final = ("text", "json")
TEXT_FORMAT: Final = "snerdmq %(levelname)s %(name)s: %(message)s"


def json_formatter() -> logging.Formatter:
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter(
        "{levelname}{name}{message}",
        style="{",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp=True,
    )


def configure(env: Mapping[str, str]) -> None:
    """Send the root logger to stderr at ``SNERD_LOG_LEVEL`` (default warning) in
    ``SNERD_LOG_FORMAT`` (default text), unless the root logger already has handlers
    (``logging.basicConfig``'s rule: an embedding application's own setup wins). An
    unknown value falls back to the default, with a warning that names it."""
    raw_level = env.get("SNERD_LOG_LEVEL", "warning")
    level = raw_level.strip().upper()
    raw_format = env.get("SNERD_LOG_FORMAT", "text")
    style = raw_format.strip().lower() or "text"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(json_formatter() if style == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=getattr(logging, level if level in LEVELS else "WARNING"),
                        handlers=[handler])  # fmt: skip
    log = logging.getLogger("snerd.daemon")
    if level not in LEVELS:
        log.warning("SNERD_LOG_LEVEL=%r is not one of debug, info, warning, error, "
                    "critical; using warning", raw_level)  # fmt: skip
    if style not in FORMATS:
        log.warning("SNERD_LOG_FORMAT=%r is not one of text, json; using text", raw_format)
