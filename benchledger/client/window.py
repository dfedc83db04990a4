"""A window: the warm-up, then the measured requests, each part submitted and drained, and
the window's accounting.

Every wait is bounded: a request has a total deadline (`request_timeout_s`, not httpx's
per-read timeout), and both the warm-up and the measured part of a window wait at most
`drain_timeout_s` after their last submission; requests still running then are cancelled and
recorded as `unresolved` rows.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from benchledger.client.record import RequestRecord, WindowSpec, new_record
from benchledger.client.request import stream_one
from benchledger.client.target import Target, TokenCounter
from benchledger.client.usage import read_usage
from benchledger.progress import DEFAULT_INTERVAL_S, PartCounter, Snapshot, reporter
from benchledger.redaction import redact

CONNECT_TIMEOUT_S = 30.0
# After cancelling the requests still running at a drain deadline, how long to wait for
# them to unwind (closing their connections) before going on regardless.
CANCEL_GRACE_S = 5.0


@dataclass
class WindowResult:
    rows: list[dict[str, Any]]
    accounting: dict[str, Any]


class TokenCountUnavailable(RuntimeError):
    """The warm-up showed that the arm's token_count gets no count from this server: the
    window stops there (measuring it would only produce requests no rule lets through)."""


def warmup_problem(token_count: TokenCounter, warmup: list[RequestRecord]) -> str | None:
    """Why the arm's token_count gets no count from this server, when not one completed
    warm-up request got one (None: some did, or no warm-up request completed)."""
    completed = [r for r in warmup if r.status == "completed"]
    if not completed or any(r.counted(read_usage(r.usage))[1] != "missing" for r in completed):
        return None
    return token_count.nothing_counted(completed)


def poisson_arrivals(rate_rps: float, seed: int) -> Iterator[float]:
    """Seeded open-loop arrival times (seconds from the first): exponential gaps, lazily
    (a window of 10^9 requests must not build its schedule before sending anything)."""
    rng = random.Random(seed)
    t = 0.0
    yield t
    while True:
        t += rng.expovariate(rate_rps)
        yield t


def _arrivals(spec: WindowSpec) -> Iterator[float] | None:
    """The measured part's schedule: None for a closed loop."""
    if spec.arrival != "poisson":
        return None
    if spec.rate_rps is None:  # the sweep refuses this (arrival = 'poisson' needs rate_rps)
        raise ValueError(f"window {spec.window_id}: arrival = 'poisson' needs rate_rps")
    return poisson_arrivals(spec.rate_rps, spec.seed)


async def _drain(in_flight: dict[asyncio.Task[None], RequestRecord], drain_timeout_s: float,
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
        # Cancellation must not turn it into a failure: its outcome is unknown.
        record = in_flight[task]
        record.status = "unresolved"
        record.error = f"{what} still running at the drain deadline ({drain_timeout_s:g} s)"
        record.t_done_ns = None
    return deadline_ns


async def _drive(http: httpx.AsyncClient, target: Target, spec: WindowSpec, is_warmup: bool,
                 records: list[RequestRecord], offsets: Iterator[float] | None = None,
                 progress: PartCounter | None = None) -> int | None:
    """Submit the part's requests (creating each record as it is submitted, into
    `records`), then drain; returns the drain deadline if it was hit.

    Closed loop (offsets None): a new request as soon as fewer than `concurrency` are
    outstanding. Open loop: each request at its scheduled offset, still capped at
    `concurrency` outstanding (a late submission shows in the achieved rate). After the
    last submission the part waits at most `drain_timeout_s`, warm-up included.
    """
    total = spec.warmup if is_warmup else spec.requests
    in_flight: dict[asyncio.Task[None], RequestRecord] = {}
    start = time.perf_counter()
    schedule = offsets if offsets is not None else iter(())
    for i in range(total):
        while len(in_flight) >= spec.concurrency:
            done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                in_flight.pop(task)
        if offsets is not None and (delay := start + next(schedule) - time.perf_counter()) > 0:
            await asyncio.sleep(delay)
        record = new_record(spec, is_warmup, i, target.token_count.new_tally())
        records.append(record)
        task = asyncio.create_task(stream_one(http, target, record, spec.request_timeout_s))
        in_flight[task] = record
        if progress is not None:
            progress.submitted(task, record)
    if progress is not None:
        progress.draining(spec.drain_timeout_s)
    return await _drain(in_flight, spec.drain_timeout_s,
                        "warm-up request" if is_warmup else "request")


def _achieved_rate(measured: list[RequestRecord]) -> float | None:
    """Submissions per second over the submission span (n - 1 gaps)."""
    submits = sorted(r.t_submit_ns for r in measured if r.t_submit_ns)
    if len(submits) < 2 or submits[-1] == submits[0]:
        return None
    return (len(submits) - 1) / ((submits[-1] - submits[0]) / 1e9)


def _accounting(spec: WindowSpec, measured: list[RequestRecord], warmup: list[RequestRecord],
                anchor: tuple[int, int], drain_deadline_ns: int | None) -> dict[str, Any]:
    """The window's bookkeeping (docs/protocol.md, definitions): counts, drain status,
    denominator."""
    counts = {s: sum(r.status == s for r in measured)
              for s in ("completed", "failed", "unresolved")}
    wall_ns, perf_ns = anchor
    start_ns = min((r.t_submit_ns for r in measured), default=perf_ns)
    finished = [r.t_done_ns for r in measured if r.status != "unresolved" and r.t_done_ns]
    if counts["unresolved"]:
        # Only a drain deadline leaves measured requests unresolved (_drain): there is one.
        assert drain_deadline_ns is not None
        end_ns = drain_deadline_ns
    else:
        end_ns = max(finished, default=start_ns)
    return {
        "window_id": spec.window_id,
        "concurrency": spec.concurrency,
        "submitted": len(measured),
        **counts,
        "warmup_submitted": len(warmup),
        **{f"warmup_{s}": sum(r.status == s for r in warmup)
           for s in ("completed", "failed", "unresolved")},
        "drain_status": "complete" if counts["unresolved"] == 0 else "incomplete",
        "drain_timeout_s": spec.drain_timeout_s,
        "request_timeout_s": spec.request_timeout_s,
        "anchor_wall_ns": wall_ns,
        "anchor_perf_ns": perf_ns,
        "window_start_ns": start_ns,
        "window_end_ns": end_ns,
        "window_start_wall_ns": wall_ns + (start_ns - perf_ns),
        "window_end_wall_ns": wall_ns + (end_ns - perf_ns),
        "elapsed_s": (end_ns - start_ns) / 1e9,
        "denominator": ("first measured submission to the drain deadline"
                        if counts["unresolved"] else
                        "first measured submission to the last completion"),
        "max_tokens": spec.max_tokens,
        "temperature": spec.temperature,
        "arrival": spec.arrival,
        "requested_rate_rps": spec.rate_rps,
        "achieved_rate_rps": _achieved_rate(measured),
        "prompt_cache": spec.prompt_cache,
        "input_tokens_target": spec.input_tokens,
        "seed": spec.seed,
    }


def _delivered_tokens(record: object) -> int | None:
    """A completed request's output tokens as its row will count them (for progress; the
    server's tokenizer counts only after the window, so until then there are none).
    `record`: one that _drive handed to the progress counter."""
    assert isinstance(record, RequestRecord)
    return record.counted(read_usage(record.usage))[0]


async def measure_window_async(target: Target, spec: WindowSpec,
                               on_start: Callable[[], None] | None = None,
                               on_stop: Callable[[], None] | None = None,
                               on_progress: Callable[[Snapshot], None] | None = None,
                               progress_interval_s: float = DEFAULT_INTERVAL_S
                               ) -> WindowResult:
    """Warm-up, then the measured window; on_start/on_stop bracket only the measured part
    (counter scrapes, log slices and clock sampling must not include warm-up). on_progress
    gets a snapshot of the running part every progress_interval_s, and the measured
    part's last one (benchledger.progress).

    token_count = "server_tokenizer": the received texts are counted with the server's
    tokenizer after the measured part (outside the counters' bracket, never while requests
    are timed), then the calibration requests run. Raises TokenCountUnavailable, before
    the measured part, when no completed warm-up request got a count of the arm's kind."""
    warmup: list[RequestRecord] = []
    measured: list[RequestRecord] = []
    # httpx's read timeout is per read; the total deadline is asyncio.timeout in stream_one.
    timeout = httpx.Timeout(spec.request_timeout_s,
                            connect=min(CONNECT_TIMEOUT_S, spec.request_timeout_s))
    limits = httpx.Limits(max_connections=spec.concurrency + 4)
    async with httpx.AsyncClient(timeout=timeout, limits=limits,
                                 headers=target.headers()) as http, \
            reporter(on_progress, progress_interval_s, _delivered_tokens) as progress:
        # Warm-up runs first and outside the window; its rows are kept, flagged is_warmup.
        await _drive(http, target, spec, True, warmup,
                     progress=progress.part(spec.window_id, "warm-up", spec.warmup))
        counted_after = await target.token_count.window_count(http, target, spec)
        await counted_after.count(warmup)
        problem = warmup_problem(target.token_count, warmup)
        if problem:
            raise TokenCountUnavailable(problem)
        offsets = _arrivals(spec)
        if on_start:
            await asyncio.to_thread(on_start)
        anchor = (time.time_ns(), time.perf_counter_ns())
        deadline = await _drive(http, target, spec, False, measured, offsets,
                                progress.part(spec.window_id, "measuring", spec.requests))
        await progress.finish()
        if on_stop:
            await asyncio.to_thread(on_stop)
        await counted_after.count(measured)
        counting = {"token_count": target.token_count.name,
                    **await counted_after.accounting()}
    rows = [r.row() for r in warmup + measured]
    if target.api_key:  # the texts a server controls: it may echo the key back
        for row in rows:
            row["error"] = redact(row["error"], target.api_key)
            row["finish_reason"] = redact(row["finish_reason"], target.api_key)
    accounting = _accounting(spec, measured, warmup, anchor, deadline)
    return WindowResult(rows=rows, accounting={**accounting, **counting})


def measure_window(target: Target, spec: WindowSpec,
                   on_start: Callable[[], None] | None = None,
                   on_stop: Callable[[], None] | None = None,
                   on_progress: Callable[[Snapshot], None] | None = None,
                   progress_interval_s: float = DEFAULT_INTERVAL_S) -> WindowResult:
    """Run one window to the end (synchronous entry point for tasks and tests)."""
    return asyncio.run(measure_window_async(target, spec, on_start, on_stop, on_progress,
                                            progress_interval_s))
