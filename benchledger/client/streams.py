"""One event loop's streams: submitting its share of a part's requests, reading them, and
draining; nothing else runs on this path while a part is timed.

A window's requests are driven by one event loop, or spread over worker processes
(benchledger.client.workers), each its own event loop with its own connections. Either
way every loop drives a `Share` of each part: the requests whose number is its index
modulo the number of loops, with its slice of the concurrency (and, open loop, the same
seeded arrival schedule, every n-th offset of it from one shared start). Parsing a read
into events happens in the stream's task after the read is stamped; usage, token counts
and rows are made after the part, by the window (benchledger.client.window).

Every wait is bounded: a request has a total deadline (`request_timeout_s`), and both the
warm-up and the measured part wait at most `drain_timeout_s` after their last submission;
requests still running then are cancelled and recorded as `unresolved` rows.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice

import aiohttp

from benchledger.client.progress import PartCounter
from benchledger.client.record import RequestRecord, WindowSpec, new_record
from benchledger.client.request import stream_one
from benchledger.client.ruler import Reading, Ruler, lag_during
from benchledger.client.target import Target

CONNECT_TIMEOUT_S = 30.0
# After cancelling the requests still running at a drain deadline, how long to wait for
# them to unwind (closing their connections) before going on regardless.
CANCEL_GRACE_S = 5.0


def poisson_arrivals(rate_rps: float, seed: int) -> Iterator[float]:
    """Seeded open-loop arrival times (seconds from the first): exponential gaps, lazily
    (a window of 10^9 requests must not build its schedule before sending anything)."""
    rng = random.Random(seed)
    t = 0.0
    yield t
    while True:
        t += rng.expovariate(rate_rps)
        yield t


def constant_arrivals(rate_rps: float) -> Iterator[float]:
    """Evenly spaced open-loop arrival times (seconds from the first), lazily."""
    return (i / rate_rps for i in itertools.count())


def arrivals(spec: WindowSpec) -> Iterator[float] | None:
    """The measured part's schedule: None for a closed loop. A trace's own arrival times
    (a prepared trace workload) are replayed open loop whatever the arm's arrival says."""
    if spec.items is not None and spec.items.trace:
        return iter(spec.items.arrivals(spec.requests))
    if spec.arrival not in ("poisson", "constant"):
        return None
    if spec.rate_rps is None:  # the sweep refuses this (an open loop needs rate_rps)
        raise ValueError(f"window {spec.window_id}: arrival = '{spec.arrival}' needs rate_rps")
    if spec.arrival == "constant":
        return constant_arrivals(spec.rate_rps)
    return poisson_arrivals(spec.rate_rps, spec.seed)


@dataclass(frozen=True)
class Share:
    """Which of a part's requests one event loop drives: numbers index, index + of, ...
    and its slice of the concurrency (the slices add up to the window's)."""

    index: int = 0
    of: int = 1

    def seqs(self, total: int) -> range:
        return range(self.index, total, self.of)

    def concurrency(self, concurrency: int) -> int:
        return concurrency // self.of + (self.index < concurrency % self.of)

    def offsets(self, schedule: Iterator[float] | None) -> Iterator[float] | None:
        return None if schedule is None else islice(schedule, self.index, None, self.of)


@dataclass
class PartOutcome:
    """What one event loop brings back from one part (picklable: a worker sends it)."""

    records: list[RequestRecord]
    drain_deadline_ns: int | None  # the drain deadline, if requests were still running
    reading: Reading | None  # the loop's measure of itself (the measured part only)


def client_session(target: Target, connections: int,
                   request_timeout_s: float) -> aiohttp.ClientSession:
    """The loop's connections: kept alive between requests and between its two parts (the
    warm-up opens what the measured part reuses). The total deadline of a request is
    asyncio.timeout in stream_one; only the connect is bounded here. The environment's
    proxy settings are not used: a measurement goes to the server it names."""
    timeout = aiohttp.ClientTimeout(total=None,
                                    sock_connect=min(CONNECT_TIMEOUT_S, request_timeout_s))
    return aiohttp.ClientSession(timeout=timeout, headers=target.headers(),
                                 connector=aiohttp.TCPConnector(limit=connections + 4))


# What a drain deadline does to what a task was running: its request (or a session's
# current turn and the turns it had not sent yet) becomes `unresolved`, named why.
Cut = Callable[[str], None]


def _cut_request(record: RequestRecord) -> Cut:
    def cut(why: str) -> None:
        # Cancellation must not turn it into a failure: its outcome is unknown.
        record.status = "unresolved"
        record.error = why
        record.t_done_ns = None
    return cut


async def _drain(in_flight: dict[asyncio.Task[None], Cut], drain_timeout_s: float,
                 what: str) -> int | None:
    """Wait at most `drain_timeout_s` for the running requests; cancel the rest, which stay
    `unresolved` rows (docs/protocol.md, trap T14). Returns the deadline if it was hit."""
    deadline_ns = time.perf_counter_ns() + int(drain_timeout_s * 1e9)
    if not in_flight:
        return None
    _, pending = await asyncio.wait(in_flight, timeout=drain_timeout_s)
    if not pending:
        return None
    for task in pending:
        task.cancel()
    # Bounded too: a request that does not unwind in time is left to the loop's shutdown.
    await asyncio.wait(pending, timeout=CANCEL_GRACE_S)
    for task in pending:
        in_flight[task](f"{what} still running at the drain deadline ({drain_timeout_s:g} s)")
    return deadline_ns


async def drive_part(http: aiohttp.ClientSession, target: Target, spec: WindowSpec,
                     is_warmup: bool, share: Share, start_ns: int | None = None,
                     progress: PartCounter | None = None) -> PartOutcome:
    """Submit this loop's share of the part (creating each record as it is submitted),
    then drain. The measured part is measured by a Ruler from its first submission.

    Closed loop: a new request as soon as fewer than the share's concurrency are
    outstanding. Open loop: each request at its scheduled offset from `start_ns` (the
    window's shared start, perf_counter_ns: one monotonic clock for every process), still
    capped at the share's concurrency (a late submission shows in the achieved rate).
    """
    offsets = None if is_warmup else share.offsets(arrivals(spec))
    if start_ns is not None and (wait_ns := start_ns - time.perf_counter_ns()) > 0:
        await asyncio.sleep(wait_ns / 1e9)
    start = (start_ns or time.perf_counter_ns()) / 1e9
    ruler = None if is_warmup else Ruler()
    if ruler is not None:
        # A full collection walks every object of the process (a measure task's holds all
        # of Airflow): milliseconds in which no read is stamped. Objects made before the
        # measured part are left out of collections until it ends.
        gc.freeze()
        ruler.start()
    try:
        records, deadline = await _submit_and_drain(http, target, spec, is_warmup, share,
                                                    start, offsets, progress)
    finally:
        reading: Reading | None = None
        if ruler is not None:
            reading = ruler.stop()
            gc.unfreeze()
    if reading is not None:
        spans = [r for r in records if len(r.content_event_ns) >= 2]
        for record, lag in zip(spans, lag_during(
                reading, [r.content_event_ns[0] for r in spans],
                [r.content_event_ns[-1] for r in spans]), strict=True):
            record.client_lag_ns = lag
    return PartOutcome(records, deadline, reading)


async def _submit_and_drain(http: aiohttp.ClientSession, target: Target, spec: WindowSpec,
                            is_warmup: bool, share: Share, start: float,
                            offsets: Iterator[float] | None, progress: PartCounter | None
                            ) -> tuple[list[RequestRecord], int | None]:
    """Submit the share's units (a request, or a multi-turn session of `turns` requests
    driven one turn after the other), at most the share's concurrency of them outstanding:
    with sessions, concurrency counts sessions, not requests."""
    total = spec.warmup if is_warmup else spec.requests
    turns = spec.items.turns if spec.items is not None else 1
    concurrency = share.concurrency(spec.concurrency)
    records: list[RequestRecord] = []
    in_flight: dict[asyncio.Task[None], Cut] = {}
    for unit in share.seqs(-(-total // turns)):
        while len(in_flight) >= concurrency:
            done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                in_flight.pop(task)
        due_ns = None
        if offsets is not None:
            due = start + next(offsets)
            due_ns = int(due * 1e9)
            if (delay := due - time.perf_counter_ns() / 1e9) > 0:
                await asyncio.sleep(delay)
        if turns == 1:
            record = new_record(spec, is_warmup, unit, target.token_count.new_tally())
            record.t_scheduled_ns = due_ns
            records.append(record)
            task = asyncio.create_task(stream_one(http, target, record,
                                                  spec.request_timeout_s))
            in_flight[task] = _cut_request(record)
            if progress is not None:
                progress.submitted(task, record)
        else:
            session = _Session(http, target, spec, is_warmup, unit, total, records, progress)
            in_flight[asyncio.create_task(session.run())] = session.cut
    if progress is not None:
        progress.draining(spec.drain_timeout_s)
    deadline = await _drain(in_flight, spec.drain_timeout_s,
                            "warm-up request" if is_warmup else "request")
    return records, deadline


class _Session:
    """One multi-turn conversation: each turn sends the history so far (this session's
    earlier user messages with the server's real answers, or the dataset's) and waits
    `think_time_s` after the answer before the next. Every turn is a row: a turn the
    session could not send (an earlier turn failed, or the drain deadline came) is one
    too, saying why."""

    def __init__(self, http: aiohttp.ClientSession, target: Target, spec: WindowSpec,
                 is_warmup: bool, unit: int, total: int, records: list[RequestRecord],
                 progress: PartCounter | None) -> None:
        assert spec.items is not None
        self._http, self._target, self._spec = http, target, spec
        self._is_warmup, self._records, self._progress = is_warmup, records, progress
        turns = spec.items.turns
        self._seqs = range(unit * turns, min(total, (unit + 1) * turns))
        self._sent = 0
        self._current: RequestRecord | None = None

    async def run(self) -> None:
        spec, items = self._spec, self._spec.items
        assert items is not None
        history: list[dict[str, str]] = []
        for seq in self._seqs:
            if self._sent and items.think_time_s:
                await asyncio.sleep(items.think_time_s)
            record = new_record(spec, self._is_warmup, seq,
                                self._target.token_count.new_tally(), history,
                                keep_answer=items.history == "server")
            self._records.append(record)
            self._current, self._sent = record, self._sent + 1
            turn = asyncio.ensure_future(stream_one(self._http, self._target, record,
                                                    spec.request_timeout_s))
            if self._progress is not None:
                self._progress.submitted(turn, record)
            await turn
            if record.status != "completed":
                self._not_sent("failed", f"not sent: turn {record.turn} of the session "
                               f"{record.status} ({record.request_id})")
                return
            answer = record.answer if items.history == "server" else record.dataset_answer
            history = [*record.sent_messages(), {"role": "assistant", "content": answer or ""}]
        self._current = None

    def _not_sent(self, status: str, why: str) -> None:
        for seq in self._seqs[self._sent:]:
            record = new_record(self._spec, self._is_warmup, seq,
                                self._target.token_count.new_tally(), None)
            record.status, record.error = status, why
            self._records.append(record)
        self._sent = len(self._seqs)

    def cut(self, why: str) -> None:
        if self._current is not None and self._current.status == "unresolved":
            _cut_request(self._current)(why)
        self._not_sent("unresolved", f"not sent: the session was still running at the "
                       f"drain deadline ({why})")
