"""Two different sweeps on one data dir and one warehouse (issue #22, item 7): each has its
own generated DAG file and its own Airflow state, so neither clobbers the other.

`benchledger run` in child processes, as a user types it, on the built-in simulator:
- started apart: the second starts while the first is measuring (before, it replaced the
  first's DAG file, and the first's publish run found no `..._publish` DAG: exit 1);
- started together on a fresh data dir and a fresh warehouse (before, both raced to
  migrate one Airflow metadata DB: exit 2 for both).
Each time both exit 0, both publish into their own export folder, and the warehouse holds
both runs with their entries.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchledger.raw.layout import RunLayout
from benchledger.warehouse.db import connect
from tests.conftest import REPO
from tests.sweeps import NO_CLOCK, defaults, simulator_arm, sweep, write_sweep

pytestmark = pytest.mark.integration

def small_sweep(name: str, step_ms: float) -> dict:
    """A small sweep: one restart of the simulator, five requests of a few tokens."""
    return sweep(name, [simulator_arm("sim", {"step_ms": step_ms})],
                 defaults=defaults(requests=5, warmup=0, restarts=1, max_tokens=12,
                                   clock=NO_CLOCK))


NAMES = ("two-a", "two-b")
RUN_BOUND_S = 240  # one small run on a busy 2-core machine, Airflow's start included


def start(workdir: Path, name: str, data: Path, warehouse: Path) -> subprocess.Popen:
    """`benchledger run` of sweep `name`; output to a file (a server could inherit a pipe)."""
    out = open(workdir / f"{data.name}-{name}.out", "wb")  # noqa: SIM115 (held by the child)
    return subprocess.Popen(
        [sys.executable, "-m", "benchledger.cli", "run", str(workdir / f"{name}.toml"),
         "--warehouse", str(warehouse), "--data-dir", str(data)],
        cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True)


def finish(run: subprocess.Popen) -> int:
    try:
        return run.wait(timeout=RUN_BOUND_S)
    except subprocess.TimeoutExpired:
        run.kill()
        return run.wait()


def measuring(data: Path, name: str) -> bool:
    """A restart of sweep `name` on `data` is up (its manifest says ready)."""
    for run_json in data.glob("raw/*/run.json"):
        try:
            if json.loads(run_json.read_text()).get("sweep_name") != name:
                continue
        except ValueError:
            continue  # being written right now
        for restart in run_json.parent.glob("*/r*/restart.json"):
            try:
                if json.loads(restart.read_text()).get("ready_at"):
                    return True
            except ValueError:
                continue
    return False


def outcome(workdir: Path, data: Path, warehouse: Path, status: dict[str, int]) -> dict:
    texts = {name: (workdir / f"{data.name}-{name}.out").read_text(errors="replace")
             for name in NAMES}
    runs, entries = {}, {}
    if warehouse.exists():  # no run got as far as its load otherwise
        with connect(warehouse, read_only=True) as con:
            runs = dict(con.execute("SELECT sweep_name, run_id FROM runs").fetchall())
            entries = dict(con.execute("SELECT r.sweep_name, count(e.entry_id) FROM runs r "
                                       "LEFT JOIN entries e USING (run_id) GROUP BY ALL"
                                       ).fetchall())
    return {"status": status, "texts": texts, "runs": runs, "entries": entries,
            "data": data}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("two_sweeps")
    # the first is the slower one, so the second is well under way before it ends
    for name, step_ms in zip(NAMES, (40.0, 2.0), strict=True):
        write_sweep(workdir / f"{name}.toml", small_sweep(name, step_ms))
    return workdir


@pytest.fixture(scope="module")
def started_apart(workdir):
    """two-a runs; once it is measuring, two-b starts on the same data dir."""
    data, warehouse = workdir / "apart", workdir / "apart.duckdb"
    first = start(workdir, NAMES[0], data, warehouse)
    deadline = time.monotonic() + RUN_BOUND_S
    while not measuring(data, NAMES[0]) and first.poll() is None:
        assert time.monotonic() < deadline, "two-a never started measuring"
        time.sleep(0.2)
    second = start(workdir, NAMES[1], data, warehouse)
    status = {NAMES[0]: finish(first), NAMES[1]: finish(second)}
    return outcome(workdir, data, warehouse, status)


@pytest.fixture(scope="module")
def started_together(workdir, started_apart):
    """Both at the same moment, on a data dir and a warehouse neither has used."""
    data, warehouse = workdir / "together", workdir / "together.duckdb"
    runs = {name: start(workdir, name, data, warehouse) for name in NAMES}
    status = {name: finish(run) for name, run in runs.items()}
    return outcome(workdir, data, warehouse, status)


@pytest.fixture(params=["started_apart", "started_together"])
def pair(request):
    return request.getfixturevalue(request.param)


def test_both_sweeps_succeed_and_publish(pair):
    for name in NAMES:
        text = pair["texts"][name]
        assert pair["status"][name] == 0, f"{name}:\n{text[-3000:]}"
        run_id = pair["runs"][name]
        assert f"DAG run {run_id}: success" in text
        export = RunLayout(pair["data"], run_id).export_dir
        assert (export / "report.html").exists() and str(export) in text


def test_the_warehouse_holds_both_runs_and_their_entries(pair):
    assert sorted(pair["runs"]) == sorted(NAMES)
    assert all(pair["entries"][name] > 0 for name in NAMES), pair["entries"]


def test_each_sweep_has_its_own_dag_file_and_airflow_state(pair):
    from benchledger.local.run import sweep_airflow_home

    for name in NAMES:
        home = sweep_airflow_home(pair["data"], name)
        (dag_file,) = (home / "dags").glob("*.py")
        assert str(Path(pair["data"]).parent / f"{name}.toml") in dag_file.read_text()
        assert (home / "airflow.db").exists()
