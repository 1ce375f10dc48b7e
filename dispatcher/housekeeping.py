"""Housekeeping, off the dispatch path: claims of dead daemons, and compaction.

Every ``housekeeping_seconds`` (one second by default) a daemon releases the claims
of daemons whose liveness lock is free (they died, even by ``kill -9``), or, where
no liveness facility exists, claims whose lease ran out; then it compacts the log
once it is large and mostly dead lines. A live owner keeps its claims: its own
timeouts are what bound a stuck attempt.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from snerd.dispatcher.clock import Timer
from snerd.errors import LogError
from snerd.projections import events as ev
from snerd.projections import queries
from snerd.projections.commands import Release
from snerd.projections.plan import plan

if TYPE_CHECKING:
    from snerd.dispatcher.engine import Engine, EngineConfig

log = logging.getLogger("snerd.housekeeping")


class Housekeeper:
    """Runs the rounds for one engine; :meth:`stop` when the engine drains."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.rounds = 0
        self._timer: Timer | None = None
        self._stopped = False

    def start(self) -> None:
        self._tick()

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()

    def _tick(self) -> None:
        if self._stopped:
            return
        engine = self.engine
        asyncio.get_running_loop().create_task(self._round())
        when = engine.clock.now() + engine.config.housekeeping_seconds
        self._timer = engine.clock.call_at(when, self._tick)

    async def _round(self) -> None:
        try:
            await self.release_orphans()
            await self.maybe_compact()
        except LogError as exc:  # storage trouble: the log recovers, the next round retries
            log.warning("housekeeping paused: %s", exc)
        except Exception:
            log.exception("housekeeping failed")
        self.rounds += 1
        self.engine.changed.set()

    def _gone(self, now: float) -> set[str]:
        """Other daemons whose claims are to be released."""
        engine = self.engine
        if engine.liveness is not None:
            owners = {d for d in engine.state.by_daemon if d != engine.daemon}
            return {d for d in owners if not engine.liveness.is_alive(d)}
        return {
            t.claim.daemon for t in queries.expired_leases(engine.state, now)
            if t.claim is not None and t.claim.daemon != engine.daemon
        }  # fmt: skip

    async def release_orphans(self) -> None:
        engine = self.engine
        now = engine.clock.now()
        gone = self._gone(now)
        if not gone:
            return
        by_liveness = engine.liveness is not None
        reason = ev.REASON_OWNER_DIED if by_liveness else ev.REASON_LEASE_EXPIRED
        orphans = plan(engine.state, now, 0, accepts=lambda task: False, gone=gone,
                       leases=not by_liveness).releases  # fmt: skip
        if orphans:
            await engine.run_command(Release(orphans, reason))

    async def maybe_compact(self) -> None:
        """Compact when :func:`should_compact` says so and records were appended since
        the last compaction."""
        engine = self.engine
        stats = engine.log.stats()
        live = len(engine.state.tasks) + len(engine.state.dlq) + len(engine.runs)
        if should_compact(engine.config, stats.size_bytes, stats.records, live) and (
            engine.appended_since_snapshot
        ):
            await engine.compact()


def should_compact(config: EngineConfig, size_bytes: int, records: int, live: int) -> bool:
    """Whether a log of ``size_bytes`` holding ``records`` records, ``live`` of them
    still needed (about one per live or dead-lettered task), is worth compacting: it
    has ``compact_dead_records`` dead records, or it is at least ``compact_min_bytes``
    large and ``compact_dead_ratio`` dead."""
    dead = records - live
    if dead <= 0:
        return False
    if dead >= config.compact_dead_records:
        return True
    return size_bytes >= config.compact_min_bytes and dead / records >= config.compact_dead_ratio
