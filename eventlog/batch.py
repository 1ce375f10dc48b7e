"""A writer's batch: the requests :class:`~snerd.eventlog.batching.BatchingLog` queues,
and the steps over them that do no I/O (compiled in the wheel with the codec and the
checksum chain they call; ``setup.py``'s ``GLUE``).

* :func:`units`: a batch cut into what is run as one (a request, or consecutive plain
  appends);
* :func:`decide`: a request's records and result, its command run under the lock;
* :func:`stamp`: records numbered, encoded and sealed into the lines to write;
* :func:`call_hooks`, :func:`resolve`, :func:`settle`, :func:`fail_all`: the answers,
  once the batch is written (or has failed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from snerd.errors import LogError
from snerd.eventlog.base import Command, Record
from snerd.eventlog.chain import FIELD as CHAIN_FIELD
from snerd.eventlog.chain import Chain
from snerd.eventlog.codec import FORMAT, FORMAT_FIELD, MAX_SEQ, encode_bodies, encode_body

log = logging.getLogger(__name__)

DELIVERY_BATCH = 4096
"""Most records handed to ``on_records`` in one call during replay and catch-up (and in
one unit of plain appends)."""


class Request:
    """One caller's request, queued for the writer's next batch."""

    __slots__ = ("command", "durable", "future", "on_durable", "records", "then")

    def __init__(
        self,
        command: Command[Any] | None,  # None: a plain append of ``records``
        records: Sequence[Record],
        durable: bool,
        future: asyncio.Future[Any],
        on_durable: Callable[[Any], None] | None = None,  # see BatchingLog.submit
        then: Callable[[asyncio.Future[Any]], None] | None = None,  # called once, when done
    ) -> None:
        self.command = command
        self.records = records
        self.durable = durable
        self.future = future
        self.on_durable = on_durable
        self.then = then


def stamp(
    records: Sequence[Record], last_seq: int, fresh: bool, chain: Chain, head: bytes
) -> tuple[list[Record], list[bytes], bytes]:
    """Copies of ``records`` numbered after ``last_seq``, their lines sealed with their
    checksums from ``head`` on (the first of a ``fresh`` log says the log's format), and
    the new head; :class:`LogError` for a record that is not a dict, or past MAX_SEQ."""
    seq = last_seq
    if seq + len(records) > MAX_SEQ:  # unreachable by appends alone: 2**53 records
        raise LogError(f"seq would pass {MAX_SEQ}; compact the log into a new one")
    stamped: list[Record] = []
    for r in records:
        if not isinstance(r, dict):
            raise LogError(f"a record must be a dict, got {type(r).__name__}")
        seq += 1
        rec = {**r, "seq": seq}
        rec.pop(CHAIN_FIELD, None)  # only this layer writes it, always last
        stamped.append(rec)
    bodies = encode_bodies(stamped)
    if stamped and fresh:
        bodies[0] = encode_body({**stamped[0], FORMAT_FIELD: FORMAT})
    head, lines = chain.seal_all(head, bodies)
    return stamped, lines, head


def decide(req: Request) -> tuple[Sequence[Record], Any] | None:
    """The request's records and result: its command's, run now (under the lock), or its
    plain records. None when there is nothing to do: the caller was cancelled before its
    turn, or its command raised (that caller gets the exception, nobody else)."""
    if req.future.done():
        return None
    if req.command is None:
        return req.records, None
    try:
        return req.command()
    except Exception as exc:
        req.future.set_exception(exc)
        return None


def resolve(done: list[tuple[Request, Any]]) -> None:
    """Resolve the futures of a flush's requests with their results."""
    for req, result in done:
        if not req.future.done():
            req.future.set_result(result)


def settle(req: Request) -> None:
    """Call a done request's ``then``, once (what it raises is logged)."""
    then = req.then
    if then is not None:
        req.then = None
        try:
            then(req.future)
        except Exception:
            log.exception("a request's callback failed")


def call_hooks(done: list[tuple[Request, Any]]) -> None:
    """The ``on_durable`` hooks of a flush's durable requests (a request a command
    refused, or whose caller gave up, is skipped)."""
    for req, result in done:
        if req.on_durable is not None and req.durable and not req.future.done():
            try:
                req.on_durable(result)
            except Exception:
                log.exception("a durable request's on_durable failed")


Unit = tuple[list[Request], list[Record] | None, bool, bool]
"""What :func:`units` yields: (requests, records, durable, hooked): one request
(``records`` None), or consecutive plain appends with their records in order; whether
any of them asks for a sync, and whether any has an ``on_durable`` hook. (A plain tuple:
the daemon's batches are single requests, one unit each.)"""


def units(batch: list[Request]) -> Iterator[Unit]:
    """The batch in the order given: runs of consecutive plain appends (at most
    DELIVERY_BATCH records each, unless one has more), every other request alone. (A
    group's records, durability and hooks are gathered in the same pass: a batch of 32
    appenders is 32 requests of one record.)"""
    group: list[Request] = []
    records: list[Record] = []
    durable = hooked = False
    for req in batch:
        more = req.records
        if req.command is None and more and not req.future.done():
            if group and len(records) + len(more) > DELIVERY_BATCH:
                yield group, records, durable, hooked
                group, records, durable, hooked = [], [], False, False
            group.append(req)
            records += more
            if req.durable:
                durable = True
            if req.on_durable is not None:
                hooked = True
            continue
        if group:
            yield group, records, durable, hooked
            group, records, durable, hooked = [], [], False, False
        yield [req], None, req.durable, req.on_durable is not None
    if group:
        yield group, records, durable, hooked


def fail_all(batch: list[Request], exc: BaseException) -> None:
    """Fail every request of ``batch`` still waiting (those a command already refused
    keep their own error)."""
    err = exc if isinstance(exc, LogError) else LogError(f"log write failed: {exc!r}")
    if err is not exc:
        err.__cause__ = exc
    for req in batch:
        if not req.future.done():
            req.future.set_exception(err)
    for req in batch:
        settle(req)
