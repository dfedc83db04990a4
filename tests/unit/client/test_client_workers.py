"""The client's streams spread over worker processes, and its measure of its own error
(issue #21): the same rows and accounting whatever the number of workers, a dead worker
never loses a request, and the ruler sees a starved event loop."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace

import pytest

from benchledger.client import Target, WindowSpec, measure_window, worker_count
from benchledger.client import streams as client_streams
from benchledger.client import workers as client_workers
from benchledger.client.ruler import Reading, bunched_events, lag_during, summarise
from benchledger.client.streams import Share
from benchledger.prompts import cold_prefix, load_prompt_set
from benchledger.raw.records import requests_table
from tests.conftest import Script, chat_chunk, good_stream, usage_event

TIMING = ("t_submit_ns", "t_first_ns", "t_last_ns", "t_done_ns", "content_event_ns",
          "client_lag_ms")
RULER = ("client_workers", "client_lag_p50_ms", "client_lag_p99_ms", "client_lag_max_ms",
         "client_lag_samples", "client_cpu_share", "bunched_event_fraction")


def spec(**overrides) -> WindowSpec:
    values = dict(window_id="run/arm/r0/code-c4", prompts=load_prompt_set("code"),
                  requests=12, warmup=3, concurrency=4, max_tokens=16, temperature=0.0,
                  drain_timeout_s=10.0, request_timeout_s=10.0)
    values.update(overrides)
    return WindowSpec(**values)


@pytest.fixture
def server(scripted_server):
    srv, base = scripted_server
    srv.base = base
    return srv


def untimed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def test_shares_split_the_requests_and_the_concurrency():
    for workers in (1, 2, 3, 7):
        shares = [Share(k, workers) for k in range(workers)]
        seqs = sorted(i for share in shares for i in share.seqs(23))
        assert seqs == list(range(23))
        assert sum(share.concurrency(10) for share in shares) == 10
    offsets = [list(Share(k, 3).offsets(iter(range(9)))) for k in range(3)]
    assert offsets == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]


def test_worker_count_defaults_to_a_core_per_64_streams(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert worker_count(None, 1) == 1
    assert worker_count(None, 64) == 1
    assert worker_count(None, 65) == 2
    assert worker_count(None, 512) == 4  # no more than the cores
    assert worker_count(3, 512) == 3  # the sweep's choice
    assert worker_count(8, 2) == 2  # never more loops than streams


def test_the_same_window_with_one_and_with_two_workers(server):
    """Rows (numbered as one loop numbers them), statuses, counts and accounting are the
    same; only the timestamps differ. Measured request 5 fails, 7 has no usage: told
    apart by their cold prefixes (two workers send in another order)."""
    def answer(body: dict) -> Script:
        text = body["messages"][-1]["content"]
        if text.startswith(cold_prefix(0, "run/arm/r0/code-c4/m0005")):
            return Script([chat_chunk("a"), b"data: 42\n\n"])
        if text.startswith(cold_prefix(0, "run/arm/r0/code-c4/m0007")):
            return Script([chat_chunk("a", "length"), b"data: [DONE]\n\n"])
        return Script(good_stream(4))

    results = {}
    for workers in (1, 2):
        name = f"same-{workers}"
        server.scripts[name] = lambda n, body: answer(body)
        results[workers] = measure_window(Target(server.base, name),
                                          spec(workers=workers, prompt_cache="cold"))
    one, two = results[1], results[2]
    assert untimed(one.rows) == untimed(two.rows)
    assert [r["request_id"] for r in two.rows] == \
        [f"run/arm/r0/code-c4/w{i:04d}" for i in range(3)] + \
        [f"run/arm/r0/code-c4/m{i:04d}" for i in range(12)]
    skip = set(RULER) | {"anchor_wall_ns", "anchor_perf_ns", "window_start_ns",
                         "window_end_ns", "window_start_wall_ns", "window_end_wall_ns",
                         "elapsed_s", "achieved_rate_rps"}
    assert {k: v for k, v in one.accounting.items() if k not in skip} == \
        {k: v for k, v in two.accounting.items() if k not in skip}
    assert (one.accounting["completed"], one.accounting["failed"]) == (11, 1)
    by_id = {r["request_id"]: r for r in two.rows}
    assert by_id["run/arm/r0/code-c4/m0005"]["status"] == "failed"
    assert by_id["run/arm/r0/code-c4/m0007"]["token_source"] == "missing"
    assert (one.accounting["client_workers"], two.accounting["client_workers"]) == (1, 2)
    for result in (one, two):
        acc = result.accounting
        assert acc["client_lag_samples"] > 0 and 0 <= acc["client_lag_p50_ms"] \
            <= acc["client_lag_p99_ms"] <= acc["client_lag_max_ms"]
        assert 0 < acc["client_cpu_share"] < 1
        assert 0 <= acc["bunched_event_fraction"] <= 1
        # one clock for every process: the workers' stamps fall inside the window
        measured = [r for r in result.rows if not r["is_warmup"]]
        assert all(acc["window_start_ns"] <= r["t_submit_ns"] <= r["t_done_ns"]
                   <= acc["window_end_ns"] for r in measured)
        assert requests_table(result.rows).num_rows == 15


def test_progress_is_summed_over_the_workers(server):
    server.scripts["slow"] = lambda n, body: Script(
        [chat_chunk("a"), 0.3, chat_chunk("b", "length"),
         usage_event(prompt_tokens=7, completion_tokens=2, total_tokens=9),
         b"data: [DONE]\n\n"])
    snapshots = []
    measure_window(Target(server.base, "slow"), spec(requests=8, warmup=0, workers=2),
                   on_progress=snapshots.append, progress_interval_s=0.1)
    running = [s for s in snapshots if s.phase == "measuring"]
    assert any(s.submitted == 4 and s.finished == 0 for s in running), running
    done = snapshots[-1]
    assert (done.phase, done.submitted, done.finished, done.unresolved) == ("done", 8, 8, 0)
    assert done.output_tokens == 16  # counted from the records that came back


def test_a_dead_worker_loses_no_request(server, monkeypatch):
    """A worker killed in the middle of the measured part: every request of its share is
    an unresolved row saying so; the other worker's requests are intact."""
    server.scripts["hang"] = lambda n, body: Script([chat_chunk("a"), 1.5, *good_stream(2)])
    real_part = client_workers.WorkerPool.part

    async def part(self, is_warmup, progress=None):
        if not is_warmup:
            victim = self._processes[1]
            threading.Timer(0.5, os.kill, (victim.pid, signal.SIGKILL)).start()
        return await real_part(self, is_warmup, progress)

    monkeypatch.setattr(client_workers.WorkerPool, "part", part)
    result = measure_window(Target(server.base, "hang"), spec(requests=6, warmup=0, workers=2))
    acc = result.accounting
    assert (acc["submitted"], acc["completed"], acc["unresolved"]) == (6, 3, 3)
    assert acc["drain_status"] == "incomplete"
    lost = [r for r in result.rows if r["status"] == "unresolved"]
    assert [r["seq"] for r in lost] == [1, 3, 5]  # worker 1's share
    assert all("client worker 1" in r["error"] and "exited with code -9" in r["error"]
               for r in lost), lost[0]["error"]
    assert acc["client_workers"] == 1  # only the survivor's reading came back


def test_a_starved_event_loop_shows_in_the_ruler(server, monkeypatch):
    """A hook that keeps the loop busy for 20 ms every 25 ms (a starved client): the lag
    columns say so, the loop's CPU share rises, and the events stamped after each busy
    spell arrive bunched."""
    server.scripts["steady"] = lambda n, body: Script(
        [x for i in range(30) for x in (0.005, chat_chunk(f" t{i}"))]
        + [chat_chunk("", "length"),
           usage_event(prompt_tokens=7, completion_tokens=30, total_tokens=37),
           b"data: [DONE]\n\n"])
    calm = measure_window(Target(server.base, "steady"), spec(requests=4, warmup=0,
                                                               concurrency=2))
    real = client_streams.drive_part

    async def starved(http, target, window, is_warmup, share, start_ns=None, progress=None):
        import asyncio

        loop = asyncio.get_running_loop()

        def block():
            # Busy (the loop's CPU share rises) but yielding the GIL at every turn: the
            # server is a thread of this process, and must go on sending while the loop
            # is blocked for its events to pile up and arrive bunched.
            end = time.perf_counter() + 0.02
            while time.perf_counter() < end:
                time.sleep(0)
            handle[0] = loop.call_later(0.005, block)

        handle = [loop.call_later(0.005, block)]
        try:
            return await real(http, target, window, is_warmup, share, start_ns, progress)
        finally:
            handle[0].cancel()

    monkeypatch.setattr("benchledger.client.window.drive_part", starved)
    hungry = measure_window(Target(server.base, "steady"), spec(requests=4, warmup=0,
                                                                concurrency=2))
    # calm is a few ms at most even on a loaded machine; the starved loop is 20 ms late
    assert hungry.accounting["client_lag_p99_ms"] > 10, hungry.accounting
    assert hungry.accounting["client_lag_p99_ms"] > 2 * calm.accounting["client_lag_p99_ms"], (
        calm.accounting, hungry.accounting)
    assert hungry.accounting["bunched_event_fraction"] > \
        calm.accounting["bunched_event_fraction"] + 0.1
    assert hungry.accounting["client_cpu_share"] > calm.accounting["client_cpu_share"]
    # each measured request carries the lag while its decode span ran: the starved loop's
    # are tens of ms, and none exceeds the window's worst probe
    lags = [row["client_lag_ms"] for row in hungry.rows if not row["is_warmup"]]
    assert lags and all(lag is not None for lag in lags), hungry.rows
    assert max(lags) > 10 and max(lags) <= hungry.accounting["client_lag_max_ms"] + 1e-9


def test_the_lag_during_a_span_is_the_worst_probe_waiting_then():
    """Probes asked every 5 ms: one held 40 ms by a stall from 100 to 140 ms, the rest
    answered in 0.1 ms. A span that ran through the stall, one that began just after it
    ended (its first stamp delayed by it), one well after it, and one before any probe."""
    ms = 1_000_000
    asked = [a * 5 * ms for a in range(60)]
    lags = [(140 * ms - a) if 100 * ms <= a < 140 * ms else ms // 10 for a in asked]
    reading = Reading(lags_ns=__import__("array").array("q", lags),
                      asked_ns=__import__("array").array("q", asked))
    first = [90 * ms, 142 * ms, 200 * ms, -50 * ms]
    last = [150 * ms, 143 * ms, 210 * ms, -40 * ms]
    got = lag_during(reading, first, last)
    assert got[0] == 40 * ms and got[1] == 40 * ms  # within a probe period of the stall
    assert got[2] == ms // 10
    assert got[3] is None  # no probe waited then: the window's p99 stands in
    assert lag_during(Reading(), [1], [2]) == [None]


def test_the_ruler_summary():
    readings = [Reading(lags_ns=__import__("array").array("q", [1_000, 2_000, 3_000_000]),
                        cpu_ns=500, wall_ns=1_000),
                Reading(cpu_ns=250, wall_ns=1_000)]
    stamps = [[1, 2, 2, 2, 3], [], [5]]
    got = summarise(readings, stamps)
    assert got["client_workers"] == 2 and got["client_lag_samples"] == 3
    assert got["client_lag_p50_ms"] == pytest.approx(0.002)
    assert got["client_lag_max_ms"] == pytest.approx(3.0)
    assert got["client_cpu_share"] == pytest.approx(0.375)
    assert got["bunched_event_fraction"] == pytest.approx(2 / 6)
    assert bunched_events([7, 7, 7]) == 2
    empty = summarise([], [])
    assert empty["client_lag_p99_ms"] is None and empty["bunched_event_fraction"] is None


def test_the_client_faults_end_the_same_with_one_and_with_two_workers(server):
    """The fault suite's client-side faults, one per measured request (told apart by cold
    prefix, as two workers send in another order), at concurrency 2: the same rows, errors
    included, and the same accounting, with one event loop and with two processes. The
    last request hangs past the drain deadline: unresolved in both."""
    from tests.conftest import RESET, _sse
    from tests.unit.client.test_client_faults import ODD_EVENTS, chunked

    faults = [Script([chat_chunk("a"), bad, *good_stream(3)]) for bad, _ in ODD_EVENTS.values()]
    faults += [
        Script([chunked(chat_chunk("a")), chunked(chat_chunk("b")), 0.05, RESET],
               headers={"Transfer-Encoding": "chunked"}),
        Script([chat_chunk("a"), chat_chunk("b")]),  # no [DONE], no finish_reason
        Script([b'{"error": "busy"}'], status=503, content_type="application/json"),
        Script([b"<html>ok</html>"], content_type="text/html"),
        Script([chat_chunk("a", "length"), _sse("[DONE]")]),  # no usage
        Script([chat_chunk("a"), 30.0]),  # hangs: cancelled at the drain deadline
    ]
    # The hang comes last: each loop keeps its own share of the concurrency outstanding, so
    # a request stuck earlier would hold its worker's one slot (the next of that worker's
    # requests would wait for it) where one loop with two slots goes on with the other.
    window = spec(requests=len(faults), warmup=0, concurrency=2, prompt_cache="cold",
                  drain_timeout_s=2.0)
    by_prefix = {cold_prefix(0, f"run/arm/r0/code-c4/m{i:04d}"): script
                 for i, script in enumerate(faults)}

    def answer(body: dict) -> Script:
        text = body["messages"][-1]["content"]
        return next(s for p, s in by_prefix.items() if text.startswith(p))

    results = {}
    for workers in (1, 2):
        server.scripts[f"faults-{workers}"] = lambda n, body: answer(body)
        results[workers] = measure_window(Target(server.base, f"faults-{workers}"),
                                          replace(window, workers=workers))
    one, two = results[1], results[2]
    assert untimed(one.rows) == untimed(two.rows)
    statuses = [r["status"] for r in one.rows]
    assert statuses.count("unresolved") == 1 and statuses.count("completed") == 1
    assert all(r["error"] for r in one.rows if r["status"] != "completed")
    for key in ("submitted", "completed", "failed", "unresolved", "drain_status"):
        assert one.accounting[key] == two.accounting[key], key
    assert two.accounting["client_workers"] == 2
