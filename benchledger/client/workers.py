"""Streams spread over worker processes: one event loop per core, so that the loop that
stamps events is never the one core every stream waits for.

Each worker is a fresh interpreter (`python -c`, never a fork: the measure task's process
has threads; nor multiprocessing's spawn, which re-imports whatever the parent's main
module is, an Airflow task runner's included), talking to the parent over a socket pair,
running a uvloop event loop with its own connections. It drives its `Share` of every part
(benchledger.client.streams) and sends back its records and its Ruler reading, nothing
else; the window (benchledger.client.window) counts tokens, checks the warm-up, keeps the
accounting and builds the rows, in the parent, after each part. Stamps are
time.perf_counter_ns(), which on Linux is CLOCK_MONOTONIC: one clock for every process of
the machine, so the workers' stamps and the parent's anchor are on one time line.

A worker that dies (killed, out of memory) loses only what it had not sent: every request
of its share becomes an `unresolved` row saying so, and the window accounts for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection, wait
from typing import Any

from benchledger.client.progress import PartCounter, Snapshot
from benchledger.client.record import RequestRecord, WindowSpec, new_record
from benchledger.client.streams import PartOutcome, Share, client_session, drive_part
from benchledger.client.target import Target

# One worker keeps up with 64 streams of 10 ms steps with most of its core idle
# (benchmarks/client_fidelity.py); below that a second process costs its start-up (about
# a second of imports) and a core for nothing.
STREAMS_PER_WORKER = 64
# The measured part starts this long after the parent says so, in every worker at once.
START_DELAY_NS = 50_000_000
STOP_GRACE_S = 10.0


def worker_count(requested: int | None, concurrency: int) -> int:
    """How many event loops measure a window: `requested` (the sweep's client_workers),
    or by default one per core this process may run on but no more than one per
    STREAMS_PER_WORKER streams; never more than the window's concurrency."""
    if requested is None:
        cores = len(os.sched_getaffinity(0))
        requested = min(cores, math.ceil(concurrency / STREAMS_PER_WORKER))
    return max(1, min(requested, concurrency))


def _target_args(target: Target) -> tuple[Any, ...]:
    """What rebuilds the Target in a worker (its strategies are chosen by name)."""
    return (target.base_url, target.model, target.endpoint.name, target.api_key,
            target.token_count.name, target.tokenize_path, target.request_id_header)


def serve(fd: int) -> None:
    """A worker process (started by WorkerPool): its first message says what to measure;
    then it runs each part the parent asks for on one uvloop loop, keeping its
    connections between parts, until told to stop or the parent goes away."""
    import uvloop

    conn = Connection(fd)
    target_args, spec, share, interval_s = conn.recv()
    target = Target(*target_args)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        http = runner.run(_open(target, spec, share))
        try:
            while (message := conn.recv())[0] == "part":
                _, is_warmup, start_ns = message
                try:
                    outcome = runner.run(_part(conn, http, target, spec, is_warmup, share,
                                               start_ns, interval_s))
                except Exception:  # noqa: BLE001 (the parent must hear why, not hang)
                    conn.send(("error", traceback.format_exc()))
                    return
                conn.send(("done", outcome))
        finally:
            runner.run(http.close())


async def _open(target: Target, spec: WindowSpec, share: Share) -> Any:
    return client_session(target, share.concurrency(spec.concurrency), spec.request_timeout_s)


async def _part(conn: Connection, http: Any, target: Target, spec: WindowSpec,
                is_warmup: bool, share: Share, start_ns: int | None,
                interval_s: float | None) -> PartOutcome:
    """One part in the worker, its progress sent to the parent every interval_s."""
    total = len(share.seqs(spec.warmup if is_warmup else spec.requests))
    counter = ticker = None
    if interval_s is not None:
        counter = PartCounter(spec.window_id, "warm-up" if is_warmup else "measuring", total,
                              _no_tokens, interval_s)
        ticker = asyncio.create_task(_tick(conn, counter, interval_s))
    try:
        return await drive_part(http, target, spec, is_warmup, share, start_ns, counter)
    finally:
        if ticker is not None:
            ticker.cancel()


def _no_tokens(record: object) -> int | None:
    """A worker's progress leaves tokens to the parent: they are counted from usage there."""
    return None


async def _tick(conn: Connection, counter: PartCounter, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        conn.send(("progress", counter.snapshot().as_dict()))


class WorkerProgress:
    """The workers' latest snapshots of a part, summed into the parent's counter of it
    (which a ProgressReporter reports while the part runs)."""

    def __init__(self, counter: PartCounter) -> None:
        self._counter = counter
        self._latest: dict[int, Snapshot] = {}

    def update(self, worker: int, snapshot: dict[str, Any]) -> None:
        self._latest[worker] = Snapshot.from_dict(snapshot)
        parts = list(self._latest.values())
        lefts = [s.drain_left_s for s in parts if s.drain_left_s is not None]
        self._counter.elsewhere(replace(
            parts[0], to_submit=self._counter.to_submit,
            submitted=sum(s.submitted for s in parts),
            finished=sum(s.finished for s in parts), failed=sum(s.failed for s in parts),
            cut=sum(s.cut for s in parts),
            unresolved=sum(s.unresolved for s in parts),
            elapsed_s=max(s.elapsed_s for s in parts), output_tokens=None,
            drain_left_s=max(lefts) if len(lefts) == len(parts) else None))


class WorkerPool:
    """The worker processes of one window, started before its warm-up."""

    def __init__(self, target: Target, spec: WindowSpec, workers: int,
                 interval_s: float | None) -> None:
        self._spec, self._target = spec, target
        self._shares = [Share(k, workers) for k in range(workers)]
        self._conns: list[Connection] = []
        self._processes: list[subprocess.Popen[bytes]] = []
        for share in self._shares:
            parent_end, child_end = socket.socketpair()
            fd = child_end.fileno()
            process = subprocess.Popen(
                [sys.executable, "-c",
                 f"from benchledger.client.workers import serve; serve({fd})"],
                pass_fds=(fd,), stdin=subprocess.DEVNULL)
            child_end.close()
            conn = Connection(parent_end.detach())
            conn.send((_target_args(target), spec, share, interval_s))
            self._conns.append(conn)
            self._processes.append(process)

    async def part(self, is_warmup: bool,
                   progress: WorkerProgress | None = None) -> list[PartOutcome]:
        """Run one part in every worker (the measured part from one shared start)."""
        start_ns = None if is_warmup else time.perf_counter_ns() + START_DELAY_NS
        outcomes: dict[int, PartOutcome] = {}
        for k, conn in enumerate(self._conns):
            try:
                conn.send(("part", is_warmup, start_ns))
            except OSError:  # it has died since the last part
                outcomes[k] = self._lost(k, is_warmup)
        update = progress.update if progress is not None else None
        return await asyncio.to_thread(self._collect, is_warmup, update, outcomes)

    def _collect(self, is_warmup: bool, update: Callable[[int, dict[str, Any]], None] | None,
                 outcomes: dict[int, PartOutcome]) -> list[PartOutcome]:
        waiting = {k: conn for k, conn in enumerate(self._conns) if k not in outcomes}
        while waiting:
            for ready in wait(list(waiting.values())):
                k = next(k for k, conn in waiting.items() if conn is ready)
                try:
                    kind, payload = waiting[k].recv()
                except (EOFError, OSError):
                    outcomes[k] = self._lost(k, is_warmup)
                    del waiting[k]
                    continue
                if kind == "progress":
                    if update is not None:
                        update(k, payload)
                elif kind == "error":
                    raise RuntimeError(f"client worker {k} failed:\n{payload}")
                else:
                    outcomes[k] = payload
                    del waiting[k]
        return [outcomes[k] for k in sorted(outcomes)]

    def _lost(self, k: int, is_warmup: bool) -> PartOutcome:
        """A worker that died before reporting: its share's requests, each an unresolved
        row naming why (their outcome is unknown: the server may have served them)."""
        process = self._processes[k]
        try:
            code: int | str | None = process.wait(1.0)
        except subprocess.TimeoutExpired:
            code = "none yet (still running, its connection lost)"
        why = (f"client worker {k} (pid {process.pid}) exited with code {code} "
               f"before reporting; the outcome of its requests is unknown")
        total = self._spec.warmup if is_warmup else self._spec.requests
        records: list[RequestRecord] = []
        for i in self._shares[k].seqs(total):
            record = new_record(self._spec, is_warmup, i, self._target.token_count.new_tally())
            record.error = why
            records.append(record)
        return PartOutcome(records, time.perf_counter_ns(), None)

    def close(self) -> None:
        for conn, process in zip(self._conns, self._processes, strict=True):
            if process.poll() is None:
                with contextlib.suppress(OSError):
                    conn.send(("stop", None, None))
        deadline = time.monotonic() + STOP_GRACE_S
        for process in self._processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for conn in self._conns:
            conn.close()

