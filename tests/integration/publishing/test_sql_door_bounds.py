"""The auditor's door is bounded (issue #22, item 8): `benchledger sql`, the real command in
a child process, stops a query that never ends at its time bound and refuses one that needs
more memory than its limit, each in one line; it fetches at most a bounded part of a huge
result and says so; and it gives way to a writer, so a load that starts while a query
runs succeeds."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from benchledger.publishing.sql_door import door_limits
from benchledger.warehouse.db import connect
from benchledger.warehouse.load import load_run_dir
from benchledger.warehouse.writer_waiting import WaitingWriter, writer_is_waiting
from benchmarks.synthetic_run import write_scale_run
from tests.conftest import REPO

pytestmark = pytest.mark.integration

# Never ends in practice (10^12 products) and holds no memory: only the time bound stops it.
ENDLESS = "SELECT sum(a.range * b.range) FROM range(1000000) a, range(1000000) b"
# Sorting 4 * 10^8 rows needs gigabytes: refused under a small memory limit.
HUNGRY = "SELECT a.range * b.range AS p FROM range(20000) a, range(20000) b ORDER BY p"
# 10^10 rows streamed: the probe's cross join that grew past 3 GB in the pandas copy.
HUGE = "SELECT a.range AS a, b.range AS b FROM range(100000) a, range(100000) b"
HANG_GUARD_S = 120  # a bound that did not hold fails the test instead of hanging it


@pytest.fixture
def warehouse(tmp_path) -> Path:
    path = tmp_path / "wh.duckdb"
    connect(path).close()
    return path


def sql(warehouse: Path, query: str, *flags: str, env: dict | None = None,
        ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchledger.cli", "sql", "--warehouse",
                           str(warehouse), *flags, query], cwd=REPO, capture_output=True,
                          text=True, timeout=HANG_GUARD_S, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


def refusal(done: subprocess.CompletedProcess) -> str:
    """The one line a refused query leaves on stderr (exit 2, nothing on stdout)."""
    err = done.stderr.strip()
    assert done.returncode == 2, (done.stdout, err)
    assert "\n" not in err and "Traceback" not in err, err
    assert done.stdout == ""
    return err


def test_the_defaults_are_bounds_a_user_can_raise(monkeypatch):
    for name in ("BENCHLEDGER_SQL_TIMEOUT_S", "BENCHLEDGER_SQL_MEMORY_LIMIT",
                 "BENCHLEDGER_SQL_MAX_ROWS"):
        monkeypatch.delenv(name, raising=False)
    limits = door_limits()
    assert (limits.timeout_s, limits.memory_limit, limits.max_rows) == (30.0, "1GB", 10_000)
    monkeypatch.setenv("BENCHLEDGER_SQL_TIMEOUT_S", "600")
    monkeypatch.setenv("BENCHLEDGER_SQL_MEMORY_LIMIT", "8GB")
    assert door_limits().timeout_s == 600 and door_limits().memory_limit == "8GB"
    assert door_limits(timeout_s=5).timeout_s == 5  # a flag wins over the environment


def test_a_query_that_never_ends_stops_at_the_time_bound(warehouse):
    err = refusal(sql(warehouse, ENDLESS, "--timeout-s", "2"))
    assert err == ("benchledger sql: query stopped after 2 s (benchledger sql --timeout-s "
                   "raises the bound)")


def test_the_time_bound_is_read_from_the_environment(warehouse):
    err = refusal(sql(warehouse, ENDLESS, env={"BENCHLEDGER_SQL_TIMEOUT_S": "1.5"}))
    assert err.startswith("benchledger sql: query stopped after 1.5 s")


def test_a_query_over_the_memory_limit_is_refused(warehouse):
    err = refusal(sql(warehouse, HUNGRY, "--memory-limit", "64MB", "--timeout-s", "60"))
    assert err.startswith("benchledger sql: query refused: it needs more memory than the "
                          "limit of 64MB (benchledger sql --memory-limit raises the bound): "
                          "Out of Memory Error"), err


def test_a_huge_result_is_fetched_only_up_to_the_row_bound_and_says_so(warehouse):
    done = sql(warehouse, HUGE, "--max-rows", "50")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["a", "b"] and len(lines) == 1 + 50
    assert done.stderr.strip() == ("benchledger sql: showed the first 50 rows of a longer "
                                   "result (benchledger sql --max-rows raises the bound)")


def test_bad_bounds_are_usage_errors_naming_the_flag(warehouse):
    assert "--timeout-s 0.0: expected seconds" in refusal(
        sql(warehouse, "SELECT 1", "--timeout-s", "0"))
    assert "--memory-limit 'plenty': expected a size" in refusal(
        sql(warehouse, "SELECT 1", "--memory-limit", "plenty"))


def wait_until_held(warehouse: Path, reader: subprocess.Popen) -> None:
    """Until the reader process holds the warehouse: a writer's open is refused by DuckDB's
    lock (an open that succeeds is closed again at once)."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        assert reader.poll() is None, reader.communicate()
        try:
            duckdb.connect(str(warehouse)).close()
        except duckdb.IOException as exc:
            if "Conflicting lock" in str(exc):
                return
            raise
        time.sleep(0.05)
    raise AssertionError("benchledger sql never opened the warehouse")


def test_a_load_that_starts_during_a_long_query_succeeds(warehouse, tmp_path):
    """The query's own bound (an hour) is far beyond the load's wait (60 s): only the door
    giving way to the waiting writer lets the load in."""
    run_dir = write_scale_run(tmp_path / "raw", 400, restarts=1, events=10, seed=2).run_dir
    reader = subprocess.Popen([sys.executable, "-m", "benchledger.cli", "sql",
                               "--warehouse", str(warehouse), ENDLESS], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL,
                              env={**os.environ, "BENCHLEDGER_SQL_TIMEOUT_S": "3600"})
    try:
        wait_until_held(warehouse, reader)
        # past its open, into the query: a door still opening when a writer arrives steps
        # back, lets it in and runs after it (the next test), which is not this case
        time.sleep(1.0)
        wait_until_held(warehouse, reader)
        with connect(warehouse, wait_s=60) as con:
            counts = load_run_dir(con, run_dir)
        _, err = reader.communicate(timeout=HANG_GUARD_S)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert counts["requests"] == 400 and counts["windows"] == 4
    assert reader.returncode == 2
    # before the refusal, at most the door's own notice that the test's probe held the file
    *before, line = err.strip().splitlines()
    assert all(" is locked by " in text and "waiting up to" in text for text in before), err
    assert line.startswith("benchledger sql: query stopped after "), line
    assert ("a writer (a run's load) is waiting for the warehouse, and the auditor's door "
            "gives way to it") in line
    assert not writer_is_waiting(warehouse)  # the writer got in and let go of the sign


HOLDER = """
import sys, time
import duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_writer_says_it_waits_only_while_it_waits(warehouse):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(warehouse), "3"],
                              cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    assert not writer_is_waiting(warehouse)
    opened = threading.Event()

    def write() -> None:
        with connect(warehouse, wait_s=60):
            opened.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not writer_is_waiting(warehouse):
            assert not opened.is_set() and time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        holder.wait(timeout=HANG_GUARD_S)
        writer.join(timeout=HANG_GUARD_S)
    assert opened.is_set() and not writer_is_waiting(warehouse)


def test_a_query_that_arrives_while_a_writer_waits_runs_after_it(warehouse):
    """The door lets a waiting load in first and then answers: the auditor's query is not
    refused because a run happened to be loading (two sweeps finishing together)."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(warehouse), "2"],
                              cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    wrote_at: list[float] = []

    def write() -> None:
        with connect(warehouse, wait_s=60) as con:
            con.execute("CREATE TABLE loaded AS SELECT 42 AS answer")
            time.sleep(1.0)  # a load takes a while once in
            wrote_at.append(time.monotonic())

    writer = threading.Thread(target=write)
    writer.start()
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not writer_is_waiting(warehouse):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        done = sql(warehouse, "SELECT answer FROM loaded")  # the table the writer makes
        answered_at = time.monotonic()
    finally:
        holder.wait(timeout=HANG_GUARD_S)
        writer.join(timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["answer", "42"]
    assert wrote_at and wrote_at[0] <= answered_at


def test_a_query_gives_up_on_writers_that_keep_waiting_past_its_bound(warehouse):
    sign = WaitingWriter(warehouse)
    sign.hold()  # a writer that waits and never gets in
    try:
        err = refusal(sql(warehouse, "SELECT 1", "--timeout-s", "1"))
    finally:
        sign.release()
    assert err == ("benchledger sql: query not started: writers (a run's load) kept waiting "
                   "for the warehouse for 1 s, and the auditor's door gives way to them; "
                   "run the query again once they are done")
