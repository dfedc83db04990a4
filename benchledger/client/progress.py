"""Progress of a running window, for the people waiting on it: counters, one line, one file.

A window on a real server can take many minutes. While it runs, the client keeps a few
counters of the part it is driving (the warm-up, then the measured requests): requests
submitted, requests that ended, output tokens delivered by the completed ones. Every
`interval_s` the event loop takes a snapshot and hands it to whoever listens
(`measure_window(on_progress=...)`): the measure task logs it as one line (the task log)
and writes it to `<workload>-c<N>.progress` beside the window's files, where `benchledger
run` finds it and shows it. Nobody listening costs nothing: no counters, no timer.

A snapshot is what the client knew at that moment and nothing more; the window's manifest
is the record. The progress file is not a raw file: its name ends in `.progress`, never
`.json`, so neither the loader nor lineage takes it for one.

Before any window, the wait for a restart's server to be ready reports the same way
(Waiting, ReadinessReporter at the end of this module): the probe, its last answer and the
time waited of ready_timeout_s, in `readiness.progress` in the restart's folder.

`BENCHLEDGER_PROGRESS_S` sets the interval (seconds, default 5; 0 turns progress off),
both for the measure and readiness tasks and for `benchledger run`'s display.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, fields

from benchledger.settings import DEFAULT_PROGRESS_S, settings, variable

log = logging.getLogger(__name__)

INTERVAL_ENV = variable("progress_s")
DEFAULT_INTERVAL_S = DEFAULT_PROGRESS_S


def interval_s(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds between progress reports from BENCHLEDGER_PROGRESS_S (default 5), in this
    process's environment or `environ`; None when it is 0 (progress off). SettingsError (a
    ValueError) naming the variable for anything else."""
    return settings(environ).progress_s


@dataclass(frozen=True)
class Snapshot:
    """One part of one window at one moment."""

    window_id: str
    phase: str  # warm-up | measuring | done (the measured part has ended)
    to_submit: int  # the part's requests
    submitted: int
    finished: int  # completed or failed
    failed: int
    unresolved: int  # cancelled at the drain deadline (done: every request that never ended)
    elapsed_s: float  # since the part's first submission
    output_tokens: int | None  # delivered by its completed requests; None: none reported yet
    drain_left_s: float | None  # all submitted: seconds left before the drain deadline
    interval_s: float  # how often a new snapshot comes (a reader can tell a stale one)
    # Of the failed: streams the server ended without a finish_reason (a cut stream is
    # never an answer, however it ended; 0 in files written before cuts were counted)
    cut: int = 0

    @property
    def in_flight(self) -> int:
        return self.submitted - self.finished - self.unresolved

    @property
    def delivered_tok_s(self) -> float | None:
        if self.output_tokens is None or self.elapsed_s <= 0:
            return None
        return self.output_tokens / self.elapsed_s

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Snapshot:
        """A snapshot read back from a progress file (other keys it holds are ignored);
        KeyError or TypeError when it is not one."""
        return cls(**{f.name: data[f.name] for f in fields(cls)
                      if f.name in data or f.default is MISSING})


def progress_line(snapshot: Snapshot) -> str:
    """The one line a task log and a terminal show for a snapshot."""
    s = snapshot
    return (f"progress: {s.window_id} {s.phase}: {s.finished}/{s.submitted} finished "
            f"(of {s.to_submit}), {progress_state(s)}")


def progress_state(snapshot: Snapshot) -> str:
    """What a snapshot says besides its window and how many requests finished."""
    s = snapshot
    rate = "-" if s.delivered_tok_s is None else f"{s.delivered_tok_s:.0f}"
    if s.phase == "done":
        drain = "complete" if s.unresolved == 0 else "incomplete"
    elif s.drain_left_s is not None:
        drain = f"{max(s.drain_left_s, 0):.0f} s left"  # files from before the clamp
    else:
        drain = "-"
    failed = f"{s.failed} failed" + (f" ({s.cut} cut short by the server)" if s.cut else "")
    return (f"{failed}, {s.in_flight} in flight, {s.unresolved} unresolved, "
            f"{s.elapsed_s:.1f} s, {rate} tok/s delivered, drain {drain}")


class PartCounter:
    """The counters of one part of a window, bumped by the client: per request a count
    and a done-callback, nothing more. A request's tokens are read when the next snapshot
    is taken, not when it ends."""

    def __init__(self, window_id: str, phase: str, to_submit: int,
                 tokens_of: Callable[[object], int | None], interval_s: float):
        self.window_id, self.phase, self.to_submit = window_id, phase, to_submit
        self._tokens_of = tokens_of
        self._interval_s = interval_s
        self._submitted = 0
        self._first_ns: int | None = None
        self._ended: list = []  # records of requests whose task is done, in that order
        self._seen = 0  # how many of _ended the counts below include
        self._finished = self._failed = self._unresolved = self._cut = 0
        self._tokens: int | None = None
        self._drain_deadline_ns: int | None = None
        self._elsewhere: Snapshot | None = None  # the counts of workers running the part

    def submitted(self, task: asyncio.Task, record: object) -> None:
        if self._first_ns is None:
            self._first_ns = time.perf_counter_ns()
        self._submitted += 1
        task.add_done_callback(lambda _task: self._ended.append(record))

    def draining(self, drain_timeout_s: float) -> None:
        """Every request is submitted; the drain deadline starts now."""
        self._drain_deadline_ns = time.perf_counter_ns() + int(drain_timeout_s * 1e9)

    def elsewhere(self, snapshot: Snapshot) -> None:
        """The part runs in worker processes: their summed counts (without tokens, which
        are read from records) stand for this counter's until `came_back`."""
        self._elsewhere = snapshot

    def came_back(self, records: list) -> None:
        """The records of a part that worker processes ran, once they are all here."""
        self._elsewhere = None
        self._submitted = len(records)
        self._ended.extend(records)
        submits = [t for r in records if (t := getattr(r, "t_submit_ns", 0))]
        self._first_ns = min(submits, default=self._first_ns)

    def snapshot(self, done: bool = False) -> Snapshot:
        if self._elsewhere is not None and not done:
            return self._elsewhere
        self._count_ended()
        now = time.perf_counter_ns()
        unresolved = self._submitted - self._finished if done else self._unresolved
        # Past the deadline, until the client gives the stragglers up, 0 s are left: a
        # report between the two is not a negative countdown.
        left = (None if self._drain_deadline_ns is None or done
                else max(self._drain_deadline_ns - now, 0) / 1e9)
        return Snapshot(
            window_id=self.window_id, phase="done" if done else self.phase,
            to_submit=self.to_submit, submitted=self._submitted, finished=self._finished,
            failed=self._failed, cut=self._cut, unresolved=unresolved,
            elapsed_s=(now - self._first_ns) / 1e9 if self._first_ns else 0.0,
            output_tokens=self._tokens, drain_left_s=left, interval_s=self._interval_s)

    def _count_ended(self) -> None:
        for record in self._ended[self._seen:]:
            status = getattr(record, "status", None)
            if status == "unresolved":  # cancelled at the drain deadline
                self._unresolved += 1
                continue
            self._finished += 1
            self._failed += status == "failed"
            self._cut += bool(getattr(record, "cut", False))
            tokens = self._tokens_of(record) if status == "completed" else None
            if tokens is not None:
                self._tokens = (self._tokens or 0) + tokens
        self._seen = len(self._ended)


class ProgressReporter:
    """Hands a snapshot of the current part to `emit` every `interval_s`, from the event
    loop; `emit` runs in a worker thread, so a slow disk (a shared file system) never holds
    up the loop that stamps the requests' events. An `emit` that raises is logged once and
    never ends the window."""

    def __init__(self, emit: Callable[[Snapshot], None], interval_s: float,
                 tokens_of: Callable[[object], int | None]):
        self._emit, self._interval_s, self._tokens_of = emit, interval_s, tokens_of
        self._current: PartCounter | None = None
        self._stop = asyncio.Event()
        self._ticker: asyncio.Task | None = None
        self._complained = False

    def part(self, window_id: str, phase: str, to_submit: int) -> PartCounter:
        """A new part begins: its counter, reported from now on."""
        self._current = PartCounter(window_id, phase, to_submit, self._tokens_of,
                                    self._interval_s)
        return self._current

    async def finish(self) -> None:
        """The measured part has ended: stop ticking and hand over its final snapshot."""
        await self._stop_ticking()
        await self._report(done=True)

    async def __aenter__(self) -> ProgressReporter:
        self._ticker = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stop_ticking()

    async def _stop_ticking(self) -> None:
        # Waits for a report being written: two writers of one file would race.
        self._stop.set()
        if self._ticker is not None:
            await self._ticker
            self._ticker = None

    async def _tick(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), self._interval_s)
            except TimeoutError:
                await self._report()

    async def _report(self, done: bool = False) -> None:
        if self._current is None:
            return
        try:
            await asyncio.to_thread(self._emit, self._current.snapshot(done))
        except Exception as exc:  # noqa: BLE001 (a progress report never ends a window)
            if not self._complained:
                self._complained = True
                log.warning("%s: progress could not be reported: %s: %s",
                            self._current.window_id, type(exc).__name__, exc)


class NoProgress:
    """Nobody listens: no counters, no timer."""

    def part(self, window_id: str, phase: str, to_submit: int) -> None:
        return None

    async def finish(self) -> None:
        return None

    async def __aenter__(self) -> NoProgress:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None


def reporter(emit: Callable[[Snapshot], None] | None, interval_s: float,
             tokens_of: Callable[[object], int | None]) -> ProgressReporter | NoProgress:
    """What the client reports progress through (an async context manager)."""
    if emit is None:
        return NoProgress()
    return ProgressReporter(emit, interval_s, tokens_of)


# --- a server being waited on until ready ---------------------------------------------------
#
# Before its first window, a restart's server is started and probed until it answers
# ready, which takes minutes on a real server (up to ready_timeout_s). The wait reports
# through the same channel as a window: a line in the task log and a `.progress` file in
# the restart's folder (raw.RunLayout.readiness_progress), which `benchledger run` shows.

READINESS_KIND = "readiness"  # a progress file's "kind": a readiness wait, not a window
ANSWER_CHARS = 80  # a last answer longer than this is cut: a line is not an error report


@dataclass(frozen=True)
class Waiting:
    """One moment of the wait for a restart's server to become ready."""

    restart_id: str
    phase: str  # starting (still waiting) | ready | not ready (the wait ended without it)
    probe: str  # the URL asked last
    answer: str  # what it answered last (an HTTP status or an error), shortened
    elapsed_s: float  # since the wait began
    timeout_s: float  # the arm's ready_timeout_s
    interval_s: float  # how often a new report comes (a reader can tell a stale one)

    @property
    def ended(self) -> bool:
        return self.phase != "starting"

    def as_dict(self) -> dict:
        return {"kind": READINESS_KIND, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> Waiting:
        """A report read back from a progress file; KeyError or TypeError when it is not one."""
        if data.get("kind") != READINESS_KIND:
            raise KeyError("kind")
        return cls(**{f.name: data[f.name] for f in fields(cls)
                      if f.name in data or f.default is MISSING})


def shortened(text: str, limit: int = ANSWER_CHARS) -> str:
    text = " ".join(text.split())  # one line, whatever the error's text held
    return text if len(text) <= limit else text[:limit - 1] + "…"


def waiting_state(waiting: Waiting) -> str:
    """What a readiness report says besides its restart: the probe, its last answer and
    the time waited of ready_timeout_s."""
    w = waiting
    of = f"{w.elapsed_s:.0f} s of {w.timeout_s:g} s"
    if w.phase == "ready":
        return f"{w.probe} answered {w.answer} after {of}"
    if w.phase == "starting":
        return f"waiting for {w.probe}, last answer {w.answer} ({of})"
    return f"{w.probe}, last answer {w.answer}, after {of}"


def waiting_line(waiting: Waiting) -> str:
    """The one line a task log and a terminal show for a readiness report."""
    return f"progress: {waiting.restart_id} {waiting.phase}: {waiting_state(waiting)}"


class ReadinessReporter:
    """What a readiness wait reports through: told after every probe, it hands a report to
    `emit` when an interval has passed since the last one (the first probe's at once),
    and always the last. An `emit` that raises is logged once and never ends the wait."""

    def __init__(self, restart_id: str, timeout_s: float, interval_s: float,
                 emit: Callable[[Waiting], None],
                 clock: Callable[[], float] = time.monotonic):
        self._restart_id, self._timeout_s, self._interval_s = restart_id, timeout_s, interval_s
        self._emit, self._clock = emit, clock
        self._last_at: float | None = None
        self._complained = False

    def probed(self, probe: str, answer: str, elapsed_s: float) -> None:
        """A probe said "not yet"; reported when one is due."""
        now = self._clock()
        if self._last_at is not None and now - self._last_at < self._interval_s:
            return
        self._last_at = now
        self._report("starting", probe, answer, elapsed_s)

    def ended(self, ready: bool, probe: str, answer: str, elapsed_s: float) -> None:
        self._report("ready" if ready else "not ready", probe, answer, elapsed_s)

    def _report(self, phase: str, probe: str, answer: str, elapsed_s: float) -> None:
        waiting = Waiting(restart_id=self._restart_id, phase=phase, probe=probe,
                          answer=shortened(answer), elapsed_s=elapsed_s,
                          timeout_s=self._timeout_s, interval_s=self._interval_s)
        try:
            self._emit(waiting)
        except Exception as exc:  # noqa: BLE001 (a progress report never ends a wait)
            if not self._complained:
                self._complained = True
                log.warning("%s: readiness progress could not be reported: %s: %s",
                            self._restart_id, type(exc).__name__, exc)
