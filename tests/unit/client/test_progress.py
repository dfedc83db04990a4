"""Progress of a running window: the interval setting, the line, and what the client
reports while it measures (against the scripted server)."""

from __future__ import annotations

import logging
import threading

import pytest

from benchledger.client import Target, WindowSpec, measure_window
from benchledger.client.progress import (
    INTERVAL_ENV,
    NoProgress,
    Snapshot,
    interval_s,
    progress_line,
    reporter,
)
from benchledger.prompts import load_prompt_set
from tests.conftest import Script, chat_chunk, good_stream, sse_event

WINDOW = "manual__1/sim/r0/code-c2"


def snapshot(**overrides) -> Snapshot:
    values = dict(window_id=WINDOW, phase="measuring", to_submit=100, submitted=40,
                  finished=37, failed=1, unresolved=0, elapsed_s=12.34, output_tokens=10020,
                  drain_left_s=None, interval_s=5.0)
    values.update(overrides)
    return Snapshot(**values)


def spec(**overrides) -> WindowSpec:
    values = dict(window_id=WINDOW, prompts=load_prompt_set("code"), requests=6, warmup=2,
                  concurrency=2, max_tokens=16, temperature=0.0, drain_timeout_s=5.0,
                  request_timeout_s=10.0)
    values.update(overrides)
    return WindowSpec(**values)


@pytest.mark.parametrize(("text", "expected"), [
    (None, 5.0), ("", 5.0), ("2.5", 2.5), (" 0.1 ", 0.1), ("3600", 3600.0), ("0", None),
])
def test_the_interval_comes_from_the_environment(text, expected):
    environ = {} if text is None else {INTERVAL_ENV: text}
    assert interval_s(environ) == expected


@pytest.mark.parametrize("text", ["abc", "-1", "0.05", "nan", "inf", "3601"])
def test_a_bad_interval_is_refused_naming_the_variable(text):
    with pytest.raises(ValueError, match=rf"{INTERVAL_ENV}={text!r}: expected seconds"):
        interval_s({INTERVAL_ENV: text})


def test_the_line_says_finished_submitted_unresolved_elapsed_rate_and_drain():
    assert progress_line(snapshot()) == (
        f"progress: {WINDOW} measuring: 37/40 finished (of 100), 1 failed, 3 in flight, "
        "0 unresolved, 12.3 s, 812 tok/s delivered, drain -")


def test_the_line_counts_down_the_drain_and_says_how_it_ended():
    draining = progress_line(snapshot(submitted=100, finished=90, drain_left_s=41.6))
    assert draining.endswith("90/100 finished (of 100), 1 failed, 10 in flight, "
                             "0 unresolved, 12.3 s, 812 tok/s delivered, drain 42 s left")
    late = progress_line(snapshot(drain_left_s=-0.4))
    assert late.endswith("drain 0 s left")
    done = progress_line(snapshot(phase="done", submitted=100, finished=97, unresolved=3))
    assert "0 in flight, 3 unresolved" in done and done.endswith("drain incomplete")
    assert progress_line(snapshot(phase="done", submitted=100, finished=100)).endswith(
        "drain complete")


def test_no_tokens_yet_is_a_dash_never_zero():
    assert "- tok/s delivered" in progress_line(snapshot(output_tokens=None))
    assert "- tok/s delivered" in progress_line(snapshot(elapsed_s=0.0, submitted=0,
                                                         finished=0, failed=0))


def test_a_snapshot_reads_back_from_its_file_form():
    data = {**snapshot().as_dict(), "attempt": 2, "updated_at": "2026-01-01T00:00:00+00:00"}
    assert Snapshot.from_dict(data) == snapshot()
    del data["finished"]
    with pytest.raises(KeyError):
        Snapshot.from_dict(data)


def slow_answers(server, model="slow", tokens=4, pause_s=0.05):
    server.scripts[model] = lambda n, body: Script(steps=[pause_s, *good_stream(tokens)])


def test_the_client_reports_each_part_while_it_runs(scripted_server):
    server, base = scripted_server
    slow_answers(server)
    seen: list[Snapshot] = []
    threads = set()

    def listen(snap: Snapshot) -> None:
        threads.add(threading.current_thread() is threading.main_thread())
        seen.append(snap)

    result = measure_window(Target(base, "slow"), spec(), on_progress=listen,
                            progress_interval_s=0.02)
    phases = [s.phase for s in seen]
    assert "warm-up" in phases and "measuring" in phases
    assert phases[-1] == "done" and phases.count("done") == 1
    assert threads == {False}  # never in the event loop's thread: a slow disk cannot stall it
    done = seen[-1]
    accounting = result.accounting
    assert (done.to_submit, done.submitted, done.finished, done.failed, done.unresolved) == (
        6, accounting["submitted"], accounting["completed"], 0, 0)
    # the tokens the rows count from usage, never chunks
    measured_tokens = sum(r["output_tokens"] for r in result.rows if not r["is_warmup"])
    assert done.output_tokens == measured_tokens == 24
    for earlier, later in zip(seen, seen[1:], strict=False):
        if earlier.phase != "warm-up" and later.phase != "warm-up":
            assert later.finished >= earlier.finished  # the measured part only grows
    assert all(s.in_flight <= 2 for s in seen)  # never more than the concurrency


def test_the_drain_is_counted_down_and_unresolved_requests_named(scripted_server):
    _, base = scripted_server
    seen: list[Snapshot] = []
    measure_window(Target(base, "stall"), spec(requests=2, warmup=0, drain_timeout_s=0.6),
                   on_progress=seen.append, progress_interval_s=0.1)
    draining = [s for s in seen if s.phase == "measuring" and s.drain_left_s is not None]
    assert draining and all(0 <= s.drain_left_s <= 0.6 for s in draining)
    assert draining[-1].drain_left_s < draining[0].drain_left_s
    done = seen[-1]
    assert (done.phase, done.finished, done.unresolved, done.in_flight) == ("done", 0, 2, 0)
    assert done.output_tokens is None and progress_line(done).endswith("drain incomplete")


def test_failed_requests_are_finished_and_counted_as_failed(scripted_server):
    server, base = scripted_server
    server.scripts["half"] = lambda n, body: Script(
        steps=good_stream(3) if n % 2 else [chat_chunk("x"), sse_event({"error": "boom"})])
    seen: list[Snapshot] = []
    result = measure_window(Target(base, "half"), spec(warmup=0), on_progress=seen.append,
                            progress_interval_s=5.0)
    assert [s.phase for s in seen] == ["done"]  # short window: only the final report
    assert (seen[0].finished, seen[0].failed) == (6, result.accounting["failed"]) == (6, 3)
    assert seen[0].output_tokens == 9


def test_a_listener_that_raises_never_ends_the_window(scripted_server, caplog):
    server, base = scripted_server
    slow_answers(server)
    calls = []

    def broken(snap: Snapshot) -> None:
        calls.append(snap)
        raise OSError(28, "No space left on device")

    with caplog.at_level(logging.WARNING, logger="benchledger.client.progress"):
        result = measure_window(Target(base, "slow"), spec(), on_progress=broken,
                                progress_interval_s=0.02)
    assert result.accounting["completed"] == 6 and len(calls) > 1
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [f"{WINDOW}: progress could not be reported: OSError: "
                        "[Errno 28] No space left on device"]  # once, not per report


def test_nobody_listening_costs_no_counter_and_no_timer():
    quiet = reporter(None, 5.0, lambda record: 1)
    assert isinstance(quiet, NoProgress) and quiet.part(WINDOW, "measuring", 10) is None
