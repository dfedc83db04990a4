"""The measure step's progress reports (restart.py): a line in the task log and the
window's `.progress` file, marked done at the end, never a raw file; driven through
measure_restart_workload against a loopback server in this process."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from benchledger.client.progress import INTERVAL_ENV, Snapshot
from benchledger.raw.layout import Attempt, RunLayout, read_json
from benchledger.restart import steps as restart
from benchledger.sweep.spec import load_sweep
from benchledger.warehouse.db import connect
from benchledger.warehouse.load import load_run_dir
from tests import sweeps
from tests.faults.fault_server import serve_in_thread

RUN_ID = "manual__progress"


@pytest.fixture
def slot(tmp_path):
    server, base = serve_in_thread("--metrics")
    sweep_path = sweeps.write_sweep(tmp_path / "sweep.toml", sweeps.sweep(
        "progress", [sweeps.external_arm("ext", base, model="fault-model")],
        defaults=sweeps.defaults(requests=5, restarts=None, max_tokens=8,
                                 clock=sweeps.NO_CLOCK)))
    sweep = load_sweep(sweep_path)
    layout = RunLayout(tmp_path / "data", RUN_ID)
    restart.write_run_manifest(layout, sweep_path)
    handle = restart.launch_restart(layout, sweep, "ext", 0)
    restart.await_restart(layout, sweep, "ext", 0, handle)
    yield layout, sweep, handle
    server.shutdown()
    server.server_close()


def progress_file(layout: RunLayout) -> Path:
    return layout.window_files("ext", 0, "code", 1).progress


def progress_logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress: ")]


def test_the_window_ends_with_its_report_done_in_the_file_and_the_log(slot, caplog,
                                                                      monkeypatch):
    layout, sweep, handle = slot
    monkeypatch.setenv(INTERVAL_ENV, "0.1")
    with caplog.at_level(logging.INFO, logger="benchledger.restart.steps"):
        restart.measure_restart_workload(layout, sweep, "ext", 0, handle, "code",
                                         Attempt(2, "worker-b"))
    report = read_json(progress_file(layout))
    assert (report["attempt"], report["worker_hostname"]) == (2, "worker-b")
    done = Snapshot.from_dict(report)
    window = read_json(layout.window_files("ext", 0, "code", 1).manifest)
    assert (done.phase, done.finished, done.submitted) == ("done", window["completed"], 5)
    assert progress_logged(caplog)[-1].startswith(
        f"progress: {RUN_ID}/ext/r0/code-c1 done: 5/5 finished (of 5)")
    # beside the window's files, never one of them
    con = connect(layout.data_dir / "wh.duckdb")
    try:
        load_run_dir(con, layout.run_dir)
        paths = [p for p, in con.execute("SELECT path FROM raw_files").fetchall()]
    finally:
        con.close()
    assert paths and not [p for p in paths if "progress" in Path(p).name]


def test_progress_off_writes_and_logs_nothing(slot, caplog, monkeypatch):
    layout, sweep, handle = slot
    monkeypatch.setenv(INTERVAL_ENV, "0")
    with caplog.at_level(logging.INFO, logger="benchledger.restart.steps"):
        restart.measure_restart_workload(layout, sweep, "ext", 0, handle, "code")
    assert not progress_file(layout).exists() and progress_logged(caplog) == []


def test_a_bad_setting_is_said_and_never_costs_the_window(slot, caplog, monkeypatch):
    layout, sweep, handle = slot
    monkeypatch.setenv(INTERVAL_ENV, "often")
    with caplog.at_level(logging.INFO, logger="benchledger.restart.steps"):
        summaries = restart.measure_restart_workload(layout, sweep, "ext", 0, handle, "code")
    assert summaries[0]["completed"] == 5
    assert f"environment variable {INTERVAL_ENV}='often'" in caplog.text
    assert "reporting every 5 s instead" in caplog.text
    assert read_json(progress_file(layout))["phase"] == "done"


def test_a_window_that_raises_leaves_no_report_behind(slot, monkeypatch):
    layout, sweep, handle = slot

    def reports_then_fails(target, spec, on_start, on_stop, on_progress, every):
        on_progress(Snapshot(spec.window_id, "measuring", 5, 2, 1, 0, 0, 1.0, 8, None, every))
        assert progress_file(layout).exists()
        raise ConnectionError("the worker's network went away")

    monkeypatch.setattr(restart, "measure_window", reports_then_fails)
    with pytest.raises(ConnectionError):
        restart.measure_restart_workload(layout, sweep, "ext", 0, handle, "code")
    assert not progress_file(layout).exists()
