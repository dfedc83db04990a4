"""A window: the warm-up, then the measured requests, each part submitted and drained (by
one event loop or by worker processes: benchledger.client.streams and .workers), and the
window's accounting, with the client's measure of its own error (benchledger.client.ruler).

Whatever the number of workers, the window has the same rows (one per request, numbered
as one loop would number them), the same accounting (submitted = completed + failed +
unresolved) and is written all-or-nothing by its caller. Token counts that need the
server's tokenizer, the warm-up's check and the rows are made here, after each part,
never on the path that stamps events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from benchledger.client.progress import DEFAULT_INTERVAL_S, PartCounter, Snapshot, reporter
from benchledger.client.record import RequestRecord, WindowSpec
from benchledger.client.ruler import Reading, summarise
from benchledger.client.streams import (
    CONNECT_TIMEOUT_S,
    PartOutcome,
    Share,
    client_session,
    drive_part,
)
from benchledger.client.target import Target, TokenCounter
from benchledger.client.tls import tls_context
from benchledger.client.usage import read_usage
from benchledger.client.workers import WorkerPool, WorkerProgress, worker_count
from benchledger.redaction import redact


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


def _achieved_rate(measured: list[RequestRecord]) -> float | None:
    """Submissions per second over the submission span (n - 1 gaps)."""
    submits = sorted(r.t_submit_ns for r in measured if r.t_submit_ns)
    if len(submits) < 2 or submits[-1] == submits[0]:
        return None
    return (len(submits) - 1) / ((submits[-1] - submits[0]) / 1e9)


def _schedule(spec: WindowSpec, measured: list[RequestRecord]) -> dict[str, Any]:
    """How closely an open-loop part kept its schedule: the span its due times asked for
    against the span of its actual submissions, and how late the client sent requests
    (t_submit - due; p50, p99, max in ms). Empty for a closed loop (nothing is due)."""
    due = [(r.t_scheduled_ns, r.t_submit_ns) for r in measured
           if r.t_scheduled_ns is not None and r.t_submit_ns]
    if not due:
        return {}
    lags = sorted(max(0, sent - at) / 1e6 for at, sent in due)

    def quantile(q: float) -> float:
        return lags[min(len(lags) - 1, int(q * len(lags)))]

    return {
        "requested_span_s": (max(at for at, _ in due) - min(at for at, _ in due)) / 1e9,
        "achieved_span_s": (max(sent for _, sent in due) - min(sent for _, sent in due)) / 1e9,
        "arrival_lag_p50_ms": quantile(0.5),
        "arrival_lag_p99_ms": quantile(0.99),
        "arrival_lag_max_ms": lags[-1],
        # the bound the rule arrivals_on_schedule applies
        "max_arrival_lag_ms": spec.max_arrival_lag_ms,
    }


def _accounting(spec: WindowSpec, measured: list[RequestRecord], warmup: list[RequestRecord],
                anchor: tuple[int, int], drain_deadline_ns: int | None) -> dict[str, Any]:
    """The window's bookkeeping (docs/protocol.md, definitions): counts, drain status,
    denominator."""
    counts = {s: sum(r.status == s for r in measured)
              for s in ("completed", "failed", "unresolved")}
    wall_ns, perf_ns = anchor
    start_ns = min((r.t_submit_ns for r in measured if r.t_submit_ns), default=perf_ns)
    finished = [r.t_done_ns for r in measured if r.status != "unresolved" and r.t_done_ns]
    if counts["unresolved"]:
        # Only a drain deadline (or a lost worker, at the moment it was seen) leaves
        # measured requests unresolved: there is one.
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
        **_workload_accounting(spec),
        **_schedule(spec, measured),
    }


def _workload_accounting(spec: WindowSpec) -> dict[str, Any]:
    """The window's prepared workload (issue #26), as its manifest records it."""
    if spec.items is None:
        return {"workload_kind": "builtin"}
    return {"workload_kind": spec.items.kind, "workload_file_sha256": spec.items.sha256,
            "turns": spec.items.turns if spec.items.turns > 1 else None,
            "think_time_s": spec.items.think_time_s if spec.items.turns > 1 else None,
            "arrival": "trace" if spec.items.trace else spec.arrival}


def _delivered_tokens(record: object) -> int | None:
    """A completed request's output tokens as its row will count them (for progress; the
    server's tokenizer counts only after the window, so until then there are none).
    `record`: one that _drive handed to the progress counter."""
    assert isinstance(record, RequestRecord)
    return record.counted(read_usage(record.usage))[0]


class _OneLoop:
    """A window's streams on the calling event loop (one worker: no process to start)."""

    def __init__(self, target: Target, spec: WindowSpec) -> None:
        self._target, self._spec = target, spec
        self._http = client_session(target, spec.concurrency, spec.request_timeout_s)

    async def part(self, is_warmup: bool, progress: PartCounter | None) -> list[PartOutcome]:
        return [await drive_part(self._http, self._target, self._spec, is_warmup, Share(),
                                 progress=progress)]

    async def close(self) -> None:
        await self._http.close()


class _Workers:
    """A window's streams spread over worker processes."""

    def __init__(self, target: Target, spec: WindowSpec, workers: int,
                 interval_s: float | None) -> None:
        self._pool = WorkerPool(target, spec, workers, interval_s)

    async def part(self, is_warmup: bool, progress: PartCounter | None) -> list[PartOutcome]:
        outcomes = await self._pool.part(
            is_warmup, WorkerProgress(progress) if progress is not None else None)
        if progress is not None:
            progress.came_back(_records(outcomes))
        return outcomes

    async def close(self) -> None:
        await asyncio.to_thread(self._pool.close)


def _records(outcomes: list[PartOutcome]) -> list[RequestRecord]:
    """The part's records in the order one loop would have submitted them."""
    return sorted((r for outcome in outcomes for r in outcome.records), key=lambda r: r.seq)


def _deadline(outcomes: list[PartOutcome]) -> int | None:
    deadlines = [o.drain_deadline_ns for o in outcomes if o.drain_deadline_ns is not None]
    return max(deadlines) if deadlines else None


async def measure_window_async(target: Target, spec: WindowSpec,
                               on_start: Callable[[], None] | None = None,
                               on_stop: Callable[[], None] | None = None,
                               on_progress: Callable[[Snapshot], None] | None = None,
                               progress_interval_s: float = DEFAULT_INTERVAL_S
                               ) -> WindowResult:
    """Warm-up, then the measured window; on_start/on_stop bracket only the measured part
    (counter scrapes, log slices and clock sampling must not include warm-up). on_progress
    gets a snapshot of the running part every progress_interval_s, and the measured
    part's last one (benchledger.client.progress).

    The streams run on this event loop when the window has one worker
    (workers.worker_count of spec.workers), else in worker processes.

    token_count = "server_tokenizer": the received texts are counted with the server's
    tokenizer after the measured part (outside the counters' bracket, never while requests
    are timed), then the calibration requests run. Raises TokenCountUnavailable, before
    the measured part, when no completed warm-up request got a count of the arm's kind."""
    workers = worker_count(spec.workers, spec.concurrency)
    interval = progress_interval_s if on_progress is not None else None
    streams: _OneLoop | _Workers = (_OneLoop(target, spec) if workers == 1
                                    else _Workers(target, spec, workers, interval))
    # The counts after a part (the server's tokenizer, calibration) are not timed: httpx.
    timeout = httpx.Timeout(spec.request_timeout_s,
                            connect=min(CONNECT_TIMEOUT_S, spec.request_timeout_s))
    try:
        async with httpx.AsyncClient(timeout=timeout, headers=target.headers(),
                                     verify=tls_context()) as http, \
                reporter(on_progress, progress_interval_s, _delivered_tokens) as progress:
            # Warm-up runs first and outside the window; its rows are kept, flagged is_warmup.
            warmup = _records(await streams.part(
                True, progress.part(spec.window_id, "warm-up", spec.warmup)))
            counted_after = await target.token_count.window_count(http, target, spec)
            await counted_after.count(warmup)
            problem = warmup_problem(target.token_count, warmup)
            if problem:
                raise TokenCountUnavailable(problem)
            if on_start:
                await asyncio.to_thread(on_start)
            anchor = (time.time_ns(), time.perf_counter_ns())
            outcomes = await streams.part(
                False, progress.part(spec.window_id, "measuring", spec.requests))
            measured = _records(outcomes)
            await progress.finish()
            if on_stop:
                await asyncio.to_thread(on_stop)
            await counted_after.count(measured)
            counting = {"token_count": target.token_count.name,
                        **await counted_after.accounting()}
    finally:
        await streams.close()
    rows = [r.row() for r in warmup + measured]
    if target.api_key:  # the texts a server controls: it may echo the key back
        for row in rows:
            row["error"] = redact(row["error"], target.api_key)
            row["finish_reason"] = redact(row["finish_reason"], target.api_key)
    accounting = _accounting(spec, measured, warmup, anchor, _deadline(outcomes))
    readings: list[Reading] = [o.reading for o in outcomes if o.reading is not None]
    ruler = summarise(readings, (r.content_event_ns for r in measured))
    return WindowResult(rows=rows, accounting={**accounting, **ruler, **counting})


def measure_window(target: Target, spec: WindowSpec,
                   on_start: Callable[[], None] | None = None,
                   on_stop: Callable[[], None] | None = None,
                   on_progress: Callable[[Snapshot], None] | None = None,
                   progress_interval_s: float = DEFAULT_INTERVAL_S) -> WindowResult:
    """Run one window to the end on a uvloop event loop (the synchronous entry point for
    tasks and tests)."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(measure_window_async(target, spec, on_start, on_stop, on_progress,
                                               progress_interval_s))
