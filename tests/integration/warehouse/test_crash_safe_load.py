"""A load killed midway (kill -9 of the loading process) leaves the warehouse as it was,
and the next load completes the run exactly once.

The loader runs in a child process, instrumented only to say where it is: the parent kills
it there. The run is written by the project's own writers (benchmarks/synthetic_run.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchledger.warehouse.db import connect
from benchledger.warehouse.load import load_run_dir
from benchmarks.synthetic_run import write_scale_run
from tests.conftest import REPO

pytestmark = pytest.mark.integration

# The child: load one run, writing a marker when it reaches `stage`; with `hold`, it then
# waits (for the kill) instead of going on. Everything else is the real loader.
CHILD = """
import sys, time
from pathlib import Path
from benchledger.warehouse import load
from benchledger.warehouse.db import connect

warehouse, run_dir, marker, stage = sys.argv[1:5]
hold = sys.argv[5] == "hold"
insert = load._insert_requests

def instrumented(con, files):
    if stage == "during-insert":
        Path(marker).write_text(stage)
    rows = insert(con, files)
    if stage == "before-commit":
        Path(marker).write_text(stage)
        while hold:
            time.sleep(1)
    return rows

load._insert_requests = instrumented
with connect(warehouse) as con:
    load.load_run_dir(con, Path(run_dir))
"""


def kill_loader_at(stage: str, warehouse: Path, run_dir: Path, tmp_path: Path, hold: bool,
                   after_s: float = 0.0) -> int:
    marker = tmp_path / f"{stage}.marker"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(warehouse), str(run_dir),
                              str(marker), stage, "hold" if hold else "go"], cwd=REPO,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert child.poll() is None, f"loader exited ({child.returncode}) before {stage}"
        assert time.monotonic() < deadline, f"loader never reached {stage}"
        time.sleep(0.01)
    time.sleep(after_s)
    child.send_signal(signal.SIGKILL)
    return child.wait(timeout=30)


def table_counts(warehouse: Path) -> dict[str, int]:
    with connect(warehouse) as con:  # the writer's open: recovery runs here, as in a rerun
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                for t in ("runs", "restarts", "windows", "request_records", "raw_files")}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return write_scale_run(tmp_path_factory.mktemp("raw"), 100_000, restarts=2,
                           events=10, seed=3).run_dir


def test_a_load_killed_after_inserting_before_commit_leaves_nothing(run_dir, tmp_path):
    warehouse = tmp_path / "wh.duckdb"
    with connect(warehouse) as con:  # a warehouse that already holds an earlier run
        load_run_dir(con, write_scale_run(tmp_path / "earlier", 80, restarts=1, seed=1,
                                          run_id="manual__earlier").run_dir)
    before = table_counts(warehouse)

    assert kill_loader_at("before-commit", warehouse, run_dir, tmp_path, hold=True) == -9
    assert table_counts(warehouse) == before

    with connect(warehouse) as con:
        counts = load_run_dir(con, run_dir)
        assert counts["requests"] == 100_000 and counts["windows"] == 8
        duplicates = con.execute("SELECT sha256 FROM raw_files GROUP BY sha256 "
                                 "HAVING count(*) > 1").fetchall()
        assert duplicates == []
        assert set(load_run_dir(con, run_dir).values()) == {0}  # and only once
    after = table_counts(warehouse)
    assert after["request_records"] == before["request_records"] + 100_000
    assert after["raw_files"] == before["raw_files"] + 1 + 4 + 8 * 3  # run, restarts, windows


def test_a_load_killed_while_inserting_is_all_or_nothing_then_completes_once(run_dir,
                                                                             tmp_path):
    warehouse = tmp_path / "wh.duckdb"
    table_counts(warehouse)  # a migrated, empty warehouse
    code = kill_loader_at("during-insert", warehouse, run_dir, tmp_path, hold=False,
                          after_s=0.05)
    counts = table_counts(warehouse)
    if code == -9:  # killed in the middle (the usual case): nothing of the run is there
        assert counts == dict.fromkeys(counts, 0)
    else:  # it finished before the signal landed: then all of it is there
        assert counts["request_records"] == 100_000
    with connect(warehouse) as con:
        load_run_dir(con, run_dir)
        assert set(load_run_dir(con, run_dir).values()) == {0}
    assert table_counts(warehouse)["request_records"] == 100_000
