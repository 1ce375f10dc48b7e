"""Engine settings from the environment (``SNERD_*``), with clear warnings on bad values."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

from snerd.dispatcher.engine import EngineConfig

log = logging.getLogger("snerd.settings")


def _number(env: Mapping[str, str], name: str, default: float, *, minimum: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = minimum - 1
    if not math.isfinite(value) or value < minimum:
        log.warning("%s=%r is not a number >= %g; using %g", name, raw, minimum, default)
        return default
    return value


def _pools(raw: str) -> dict[str, int]:
    """``SNERD_POOLS="urgent=2,slow=4"``: at most N attempts of that pool at once."""
    pools: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, _, size = item.partition("=")
        if not name or not size.isdigit() or int(size) < 1:
            log.warning("SNERD_POOLS entry %r is not NAME=N (N >= 1); ignored", item)
            continue
        pools[name.strip()] = int(size)
    return pools


def _whole(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if not raw.strip().isdigit() or int(raw) < 1:
        log.warning("%s=%r is not a whole number >= 1; using %d", name, raw, default)
        return default
    return int(raw)


def _optional(env: Mapping[str, str], name: str, unit: float) -> float | None:
    """A retention setting: unset means keep everything."""
    if not env.get(name):
        return None
    value = _number(env, name, -1.0, minimum=0)
    return None if value < 0 else value * unit


def _optional_int(env: Mapping[str, str], name: str) -> int | None:
    value = _optional(env, name, 1.0)
    return None if value is None else int(value)


def engine_config(env: Mapping[str, str]) -> EngineConfig:
    return EngineConfig(
        max_workers=_whole(env, "SNERD_MAX_WORKERS", 8),
        pools=_pools(env.get("SNERD_POOLS", "")),
        lease_seconds=_number(env, "SNERD_LEASE_SECONDS", 3600.0, minimum=1),
        drain_seconds=_number(env, "SNERD_DRAIN_TIMEOUT", 30.0, minimum=0),
        housekeeping_seconds=_number(env, "SNERD_HOUSEKEEPING_SECONDS", 1.0, minimum=0.05),
        compact_min_bytes=int(_number(env, "SNERD_COMPACT_BYTES", 1 << 20, minimum=0)),
        compact_dead_records=_whole(env, "SNERD_COMPACT_DEAD_RECORDS", 10_000),
        archive_max_age_seconds=_optional(env, "SNERD_ARCHIVE_MAX_AGE_DAYS", 86400.0),
        archive_max_bytes=_optional_int(env, "SNERD_ARCHIVE_MAX_BYTES"),
    )
