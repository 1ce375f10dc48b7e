"""Settings from the environment: bad values are reported and replaced by defaults."""

from __future__ import annotations

import pytest

from snerd.dispatcher.settings import engine_config


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "2.5", "0", "-3", "lots", " "])
def test_a_bad_worker_count_falls_back_to_the_default(raw: str) -> None:
    assert engine_config({"SNERD_MAX_WORKERS": raw}).max_workers == 8


@pytest.mark.parametrize("name", ["SNERD_LEASE_SECONDS", "SNERD_HOUSEKEEPING_SECONDS"])
@pytest.mark.parametrize("raw", ["nan", "inf", "-1"])
def test_bad_durations_fall_back_to_defaults(name: str, raw: str) -> None:
    config = engine_config({name: raw})
    assert config.lease_seconds == 3600.0 and config.housekeeping_seconds == 1.0


def test_good_values_and_pools_are_read() -> None:
    config = engine_config({"SNERD_MAX_WORKERS": "32", "SNERD_POOLS": "slow=2, fast=8, bad, x=0"})
    assert config.max_workers == 32
    assert config.pools == {"slow": 2, "fast": 8}
