"""Retries that never duplicate a record, and where each attempt ran (issue #12).

A measure task killed mid-window and retried by Airflow must leave exactly one window of
rows per window, measured by the attempt that completed it, no duplicate request rows,
intact window accounting, and the killed attempt's lost window on record
(restart.json's `interrupted_windows`). Driven through restart.py's own steps against a
loopback server in this process (tests/faults/fault_server.py); the killed attempt is a
real child process killed with SIGKILL while a request of its second window hangs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from benchledger.raw.layout import Attempt, RunLayout, read_json, write_json
from benchledger.raw.records import file_sha256
from benchledger.restart import steps as restart
from benchledger.sweep.spec import load_sweep
from benchledger.warehouse.db import connect
from benchledger.warehouse.load import load_run_dir
from tests import sweeps
from tests.conftest import REPO
from tests.faults.fault_server import serve_in_thread

RUN_ID = "manual__attempts"
# c1: requests 1-6 (one warm-up, five measured); c2: warm-up 7, measured 8-12. Request 9
# (c2's second measured one) hangs, so the first attempt is mid-window when it is killed.
HANGING_REQUEST = 9
KILL_BOUND_S = 60  # the child's imports and first window on a busy machine


def write_sweep(tmp_path: Path, base_url: str) -> Path:
    return sweeps.write_sweep(tmp_path / "sweep.toml", sweeps.sweep(
        "attempts", [sweeps.external_arm("ext", base_url, model="fault-model", node="gpu-a")],
        defaults=sweeps.defaults(requests=5, max_tokens=8, restarts=None, clock=sweeps.NO_CLOCK,
                                 concurrency=[1, 2], drain_timeout_s=120,
                                 request_timeout_s=120)))


def started_slot(tmp_path: Path, base_url: str):
    """A launched and ready restart slot: (layout, sweep, handle)."""
    sweep_path = write_sweep(tmp_path, base_url)
    sweep = load_sweep(sweep_path)
    layout = RunLayout(tmp_path / "data", RUN_ID)
    restart.write_run_manifest(layout, sweep_path)
    handle = restart.launch_restart(layout, sweep, "ext", 0, Attempt(1, "worker-a"))
    restart.await_restart(layout, sweep, "ext", 0, handle)
    return layout, sweep, handle


def window_ids(layout: RunLayout) -> tuple[str, str]:
    return layout.window_id("ext", 0, "code", 1), layout.window_id("ext", 0, "code", 2)


@pytest.fixture
def loopback_server():
    server, base = serve_in_thread("--metrics")
    yield server, base
    server.shutdown()
    server.server_close()


@pytest.fixture
def hanging_server():
    server, base = serve_in_thread("--metrics", "--mode", "hang", "--nth",
                                   str(HANGING_REQUEST))
    yield server, base
    server.shutdown()
    server.server_close()


CHILD = """
import json, sys
from benchledger.raw.layout import Attempt, RunLayout
from benchledger.restart.steps import measure_restart_workload
from benchledger.sweep.spec import load_sweep
data_dir, run_id, sweep_path, handle = sys.argv[1:]
measure_restart_workload(RunLayout(data_dir, run_id), load_sweep(sweep_path), "ext", 0,
                         json.loads(handle), "code", Attempt(1, "worker-a"))
"""


def measure_and_kill_mid_window(layout: RunLayout, sweep_path: Path, handle: dict,
                                server) -> None:
    """Attempt 1 of the measure task in a child process, SIGKILLed once its second window
    is under way (its hanging request reached the server): what a killed worker leaves."""
    marker = layout.window_files("ext", 0, "code", 2).started
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(layout.data_dir), layout.run_id,
         str(sweep_path), json.dumps(handle)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + KILL_BOUND_S
        while not (marker.exists() and server.plan.requests >= HANGING_REQUEST):
            assert child.poll() is None, f"attempt 1 ended early ({child.returncode})"
            assert time.monotonic() < deadline, "attempt 1 never reached its second window"
            time.sleep(0.02)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)


def test_a_retry_measures_only_the_window_the_killed_attempt_left(tmp_path, hanging_server):
    server, base = hanging_server
    layout, sweep, handle = started_slot(tmp_path, base)
    first, second = window_ids(layout)
    parquet_1, manifest_1 = (layout.window_files("ext", 0, "code", 1).requests,
                             layout.window_files("ext", 0, "code", 1).manifest)
    parquet_2, manifest_2 = (layout.window_files("ext", 0, "code", 2).requests,
                             layout.window_files("ext", 0, "code", 2).manifest)

    measure_and_kill_mid_window(layout, tmp_path / "sweep.toml", handle, server)
    # The killed attempt wrote c1 whole, nothing of c2 but its mark.
    assert (read_json(manifest_1)["attempt"], read_json(manifest_1)["worker_hostname"]) == (
        1, "worker-a")
    assert not parquet_2.exists() and not manifest_2.exists()
    assert read_json(layout.window_files("ext", 0, "code", 2).started)["attempt"] == 1
    kept = (parquet_1.stat().st_ino, parquet_1.stat().st_mtime_ns, file_sha256(parquet_1))
    sent_by_attempt_1 = server.plan.requests

    summaries = restart.measure_restart_workload(layout, sweep, "ext", 0, handle, "code",
                                                 Attempt(2, "worker-b"))
    assert [(s["window_id"], s["attempt"]) for s in summaries] == [(first, 1), (second, 2)]
    # c1 was not measured again (same file, no requests); c2 once: 1 warm-up + 5 measured.
    assert (parquet_1.stat().st_ino, parquet_1.stat().st_mtime_ns,
            file_sha256(parquet_1)) == kept
    assert server.plan.requests == sent_by_attempt_1 + 6
    assert (read_json(manifest_2)["attempt"], read_json(manifest_2)["worker_hostname"]) == (
        2, "worker-b")
    assert not layout.window_files("ext", 0, "code", 2).started.exists()
    (interrupted,) = read_json(layout.restart_manifest("ext", 0))["interrupted_windows"]
    assert {k: v for k, v in interrupted.items() if k != "started_at"} == {
        "window_id": second, "attempt": 1, "worker_hostname": "worker-a",
        "noticed_by": "measure attempt 2"}
    assert interrupted["started_at"] < read_json(manifest_2)["window_start"]

    restart.stop_restart(layout, "ext", 0, handle)
    con = connect(":memory:")
    try:
        load_run_dir(con, layout.run_dir)
        assert con.execute(
            "SELECT window_id, attempt, worker_hostname, submitted, "
            "completed + failed + unresolved, completed FROM windows ORDER BY window_id"
        ).fetchall() == [(first, 1, "worker-a", 5, 5, 5), (second, 2, "worker-b", 5, 5, 5)]
        # every request once: 2 windows x (1 warm-up + 5 measured), each in its window's file
        assert con.execute(
            "SELECT count(*), count(DISTINCT request_id), count(DISTINCT raw_file_sha256) "
            "FROM request_records").fetchone() == (12, 12, 2)
        assert con.execute(
            "SELECT window_id, any_value(w.submitted), count(*) FILTER (WHERE NOT is_warmup) "
            "FROM windows w JOIN request_records r USING (window_id) GROUP BY 1 ORDER BY 1"
        ).fetchall() == [(first, 5, 5), (second, 5, 5)]
        node, requested, worker, loaded = con.execute(
            "SELECT node, requested_node, worker_hostname, interrupted_windows "
            "FROM restarts").fetchone()
        assert (node, requested, worker) == (socket.gethostname(), "gpu-a", "worker-a")
        assert [(w["window_id"], w["attempt"]) for w in json.loads(loaded)] == [(second, 1)]
    finally:
        con.close()


class WorkerKilled(BaseException):
    """Stands in for SIGKILL inside this process: no `except Exception` sees it."""


def test_the_teardown_records_a_window_no_attempt_finished(tmp_path, loopback_server,
                                                           monkeypatch):
    server, base = loopback_server
    layout, sweep, handle = started_slot(tmp_path, base)
    first, second = window_ids(layout)
    real_measure = restart.measure_window

    def killed_in_the_second_window(target, spec, *args):
        if spec.window_id == second:
            raise WorkerKilled
        return real_measure(target, spec, *args)

    monkeypatch.setattr(restart, "measure_window", killed_in_the_second_window)
    with pytest.raises(WorkerKilled):  # the last attempt: Airflow retries no more
        restart.measure_restart_workload(layout, sweep, "ext", 0, handle, "code",
                                         Attempt(2, "worker-b"))
    restart.stop_restart(layout, "ext", 0, handle)
    manifest = read_json(layout.restart_manifest("ext", 0))
    assert [(w["window_id"], w["attempt"], w["worker_hostname"], w["noticed_by"])
            for w in manifest["interrupted_windows"]] == [
        (second, 2, "worker-b", "stop_server")]
    assert list(layout.slot_dir("ext", 0).glob("*.started")) == []
    assert restart.run_problems(layout, sweep) == ["ext r0: no window for code at concurrency 2"]
    restart.stop_restart(layout, "ext", 0, handle)  # a retried teardown adds nothing
    assert read_json(layout.restart_manifest("ext", 0)) == manifest


def test_a_retry_after_a_failed_window_restores_the_restart(tmp_path, loopback_server,
                                                            monkeypatch):
    """A window whose measurement raised leaves the restart failed; the retry that
    measures it gives the restart its status back, and the failed attempt is on record."""
    _, base = loopback_server
    layout, sweep, handle = started_slot(tmp_path, base)
    first, _ = window_ids(layout)

    def connection_lost(target, spec, *args):
        raise ConnectionError("the worker's network went away")

    monkeypatch.setattr(restart, "measure_window", connection_lost)
    with pytest.raises(ConnectionError):
        restart.measure_restart_workload(layout, sweep, "ext", 0, handle, "code",
                                         Attempt(1, "worker-a"))
    failed = read_json(layout.restart_manifest("ext", 0))
    assert (failed["status"], failed["unwritten_windows"]) == ("failed", [first])
    monkeypatch.undo()

    restart.measure_restart_workload(layout, sweep, "ext", 0, handle, "code",
                                     Attempt(2, "worker-a"))
    manifest = read_json(layout.restart_manifest("ext", 0))
    assert (manifest["status"], manifest["unwritten_windows"], manifest["error"]) == (
        "external", [], None)
    assert [(w["window_id"], w["attempt"]) for w in manifest["interrupted_windows"]] == [
        (first, 1)]


def test_a_window_counts_as_written_only_when_every_file_is_whole(tmp_path, loopback_server):
    _, base = loopback_server
    layout, sweep, handle = started_slot(tmp_path, base)
    restart.measure_restart_workload(layout, sweep, "ext", 0, handle, "code", Attempt(1, "w"))
    parquet, manifest_path = (layout.window_files("ext", 0, "code", 2).requests,
                              layout.window_files("ext", 0, "code", 2).manifest)
    assert restart.written_window(layout, "ext", 0, "code", 2) == read_json(manifest_path)
    # what a write killed between its renames leaves: a manifest naming other bytes
    pq.write_table(pq.read_table(parquet).slice(0, 3), parquet)
    assert restart.written_window(layout, "ext", 0, "code", 2) is None
    manifest_path.unlink()
    assert restart.written_window(layout, "ext", 0, "code", 2) is None
    # the observations file counts too
    manifest_1 = layout.window_files("ext", 0, "code", 1).manifest
    assert restart.written_window(layout, "ext", 0, "code", 1) is not None
    observed_1 = manifest_1.with_suffix(".observed.json")
    observed_1.write_text(observed_1.read_text() + " ")
    assert restart.written_window(layout, "ext", 0, "code", 1) is None


@pytest.fixture
def pretend_server():
    """A process in its own group standing in for a server an earlier attempt started."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def test_a_retried_launch_stops_the_server_its_killed_attempt_left(tmp_path, loopback_server,
                                                                   pretend_server):
    _, base = loopback_server
    sweep_path = write_sweep(tmp_path, base)
    layout = RunLayout(tmp_path / "data", RUN_ID)
    path = layout.restart_manifest("ext", 0)
    started = restart.utc_now()
    write_json(path, {"restart_id": layout.restart_id("ext", 0), "status": "launched",
                      "node": socket.gethostname(), "pid": pretend_server.pid,
                      "started_at": started, "worker_hostname": "worker-a",
                      "launch_attempt": 1})
    restart.launch_restart(layout, load_sweep(sweep_path), "ext", 0, Attempt(2, "worker-b"))
    pretend_server.wait(timeout=20)  # stopped: two servers of one slot never share a GPU
    manifest = read_json(path)
    (earlier,) = manifest["earlier_launches"]
    assert (earlier["pid"], earlier["attempt"], earlier["worker_hostname"]) == (
        pretend_server.pid, 1, "worker-a")
    assert earlier["stop_status"].startswith("stopped by SIGTERM")
    assert (manifest["pid"], manifest["launch_attempt"], manifest["worker_hostname"],
            manifest["requested_node"]) == (None, 2, "worker-b", "gpu-a")


def test_a_retried_teardown_does_not_call_a_stopped_server_crashed(tmp_path, pretend_server):
    layout = RunLayout(tmp_path / "data", RUN_ID)
    write_json(layout.restart_manifest("srv", 0), {"restart_id": layout.restart_id("srv", 0),
                                                   "status": "ok"})
    handle = {"base_url": "http://127.0.0.1:9", "pid": pretend_server.pid, "port": None,
              "command": None, "command_template": None, "log_path": None}
    first = restart.stop_restart(layout, "srv", 0, handle)
    assert first["status"] == "ok" and first["stop_status"].startswith("stopped by SIGTERM")
    # the retry finds the server gone, because it was stopped: not a crash
    assert restart.stop_restart(layout, "srv", 0, handle) == first



def test_a_teardown_on_another_host_signals_nothing(tmp_path, pretend_server):
    """A queue served by several workers may run the teardown elsewhere than the launch:
    the pid names some other process there, so nothing is signalled, and it says so."""
    layout = RunLayout(tmp_path / "data", RUN_ID)
    write_json(layout.restart_manifest("srv", 0), {
        "restart_id": layout.restart_id("srv", 0), "status": "ok", "node": "gpu-host-2",
        "pid": pretend_server.pid, "started_at": restart.utc_now()})
    handle = {"base_url": "http://127.0.0.1:9", "pid": pretend_server.pid, "port": None,
              "command": None, "command_template": None, "log_path": None}
    manifest = restart.stop_restart(layout, "srv", 0, handle)
    assert manifest["stop_status"] == (f"not stopped: launched on gpu-host-2, and this "
                                       f"teardown ran on {socket.gethostname()}; stop it there")
    assert "stopped_at" not in manifest and manifest["status"] == "ok"
    assert pretend_server.poll() is None  # alive: not ours to signal
    assert restart.stop_leftover_servers(tmp_path / "data") == []
    assert pretend_server.poll() is None
