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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

PROBE_PERIOD_S = 0.005


@dataclass
class Reading:
    """One event loop's measure of itself over one part (picklable: a worker sends it)."""

    lags_ns: array = field(default_factory=lambda: array("q"))
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
