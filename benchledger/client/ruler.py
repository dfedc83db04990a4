"""The client's own error: what it can know about how late it stamps what arrives.

A stream event is stamped when the stream's task gets its read, which is when the event
loop comes round to it. A loop with hundreds of streams on one core comes round late:
events wait, are read back to back, and several arrive in one read with one stamp. The
stamps cannot show this by themselves, so while the measured part runs each event loop
measures it (docs/protocol.md, trap T17):

- lag: every PROBE_PERIOD_S a thread of its own asks the loop to run a callback as soon
  as it can (call_soon_threadsafe, which wakes the loop as a network read does) and
  records how long the callback waited. That wait is how long anything that becomes ready
  at that moment (a read) waits before the loop can hand it to its task: whatever callback
  is running, blocking or not, and every callback queued before it. It is the error added
  to a stamp taken then. An idle loop answers in tens of microseconds. (A timer in the
  loop itself would not do: a timer due during a blocked callback runs right after it,
  its own lateness lost in the timers' millisecond rounding.)
- lag during a request: the longest wait of a probe that was waiting at any moment of the
  request's decode span (from one probe period before its first content event, whose
  stamp a stall that just ended delayed, to its last): `lag_during`. A stall delays the
  stamps taken while it lasts, not the whole window's: a request whose span is shorter
  than the lag during it is a burst (docs/protocol.md, Bursts), one measured while the
  loop kept time is not, whatever the window's p99.
- CPU share: the loop thread's CPU time over the part's wall time (thread_time, so the
  other threads of a measure task, such as counter scrapes, do not count). Near 1 the core
  was saturated and every stamp waited for the work before it.
- bunched events: content events that arrived in one read with an earlier content event of
  the same request (one stamp for several events: their gaps are not measured). Counted
  from the stamps after the window (equal stamps are one read: perf_counter_ns never
  repeats across reads).

A window's readings from its workers are pooled (`summarise`) into the accounting keys
client_workers, client_lag_p50_ms / p99 / max, client_lag_samples, client_cpu_share and
bunched_event_fraction, which reach `windows` and the gate's client_lag_within_bound.
"""

from __future__ import annotations

import asyncio
import threading
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

PROBE_PERIOD_S = 0.005


@dataclass
class Reading:
    """One event loop's measure of itself over one part (picklable: a worker sends it)."""

    lags_ns: array = field(default_factory=lambda: array("q"))
    asked_ns: array = field(default_factory=lambda: array("q"))  # when each probe asked
    cpu_ns: int = 0  # the loop thread's CPU time over the part
    wall_ns: int = 0


class Ruler:
    """The lag probe and the CPU clock of the running event loop, between start and stop."""

    def __init__(self, period_s: float = PROBE_PERIOD_S) -> None:
        self._period_s = period_s
        self._reading = Reading()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_ns = self._start_cpu_ns = 0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._start_ns, self._start_cpu_ns = time.perf_counter_ns(), time.thread_time_ns()
        self._thread = threading.Thread(target=self._probe, args=(loop,), daemon=True,
                                        name="benchledger-client-ruler")
        self._thread.start()

    def _probe(self, loop: asyncio.AbstractEventLoop) -> None:
        while not self._stop.wait(self._period_s):
            try:
                loop.call_soon_threadsafe(self._ran, time.perf_counter_ns())
            except RuntimeError:  # the loop has closed
                return

    def _ran(self, asked_ns: int) -> None:
        if not self._stop.is_set():
            # callbacks run in the order asked: both arrays stay sorted, and so does
            # asked + lag, when each probe was answered
            self._reading.asked_ns.append(asked_ns)
            self._reading.lags_ns.append(time.perf_counter_ns() - asked_ns)

    def stop(self) -> Reading:
        """Stop probing (called on the loop's thread); the part's reading."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._reading.wall_ns = time.perf_counter_ns() - self._start_ns
        self._reading.cpu_ns = time.thread_time_ns() - self._start_cpu_ns
        return self._reading


def _quantile(ordered: list[int], q: float) -> float:
    """The q-quantile of sorted values (nearest rank, as the stats of one window need)."""
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def bunched_events(stamps: list[int]) -> int:
    """Content events of one request that arrived in one read with an earlier one."""
    return len(stamps) - len(set(stamps))


def lag_during(reading: Reading, first_ns: Sequence[int], last_ns: Sequence[int],
               margin_ns: int = int(PROBE_PERIOD_S * 1e9)) -> list[int | None]:
    """Per span [first, last] (perf_counter_ns of one request's first and last content
    events): the longest lag of the probes whose wait overlapped [first - margin, last]
    (None: no probe waited then; the window's p99 stands in). The margin takes in a stall
    that ended just before the first stamp: the probes it held are answered in the same
    turn of the loop as the read it delayed, sometimes just before it. Vectorised: a
    window's 10^5 requests are one searchsorted and one reduceat."""
    import numpy as np

    lags = np.frombuffer(reading.lags_ns, dtype=np.int64) if len(reading.lags_ns) else \
        np.zeros(0, dtype=np.int64)
    asked = np.frombuffer(reading.asked_ns, dtype=np.int64) if len(reading.asked_ns) else \
        np.zeros(0, dtype=np.int64)
    first = np.asarray(first_ns, dtype=np.int64) - margin_ns
    last = np.asarray(last_ns, dtype=np.int64)
    # probes overlapping the span: answered at or after its start, asked at or before its
    # end; both sorted, so they are one contiguous run [lo, hi)
    lo = np.searchsorted(asked + lags, first, side="left")
    hi = np.searchsorted(asked, last, side="right")
    found = lo < hi
    out: list[int | None] = [None] * len(first)
    if found.any():
        # reduceat over the pairs (lo, hi): the even slots are max(lags[lo:hi]); a zero at
        # the end makes hi == len(lags) a valid index
        padded = np.append(lags, 0)
        bounds = np.column_stack((lo[found], hi[found])).ravel()
        maxima = np.maximum.reduceat(padded, bounds)[::2]
        for i, value in zip(np.flatnonzero(found).tolist(), maxima.tolist(), strict=True):
            out[i] = value
    return out


def summarise(readings: Iterable[Reading], stamps: Iterable[list[int]]) -> dict[str, Any]:
    """The window's accounting keys from its workers' readings and its measured requests'
    content-event stamps (None where nothing was measured)."""
    readings = list(readings)
    lags = sorted(lag for reading in readings for lag in reading.lags_ns)
    wall = sum(reading.wall_ns for reading in readings)
    events = bunched = 0
    for one in stamps:
        events += len(one)
        bunched += bunched_events(one)
    ms = 1e-6
    return {
        "client_workers": len(readings),
        "client_lag_p50_ms": _quantile(lags, 0.5) * ms if lags else None,
        "client_lag_p99_ms": _quantile(lags, 0.99) * ms if lags else None,
        "client_lag_max_ms": lags[-1] * ms if lags else None,
        "client_lag_samples": len(lags),
        "client_cpu_share": (sum(r.cpu_ns for r in readings) / wall) if wall else None,
        "bunched_event_fraction": bunched / events if events else None,
    }
