"""What the scheduler of a real Airflow deployment on loopback does (`benchledger cluster
up`, as in test_cluster.py, on a deployment of its own so that the two files run side by side
under `make test`): it fails the task of a worker killed mid-window and retries it on the
worker brought back; it queues two sweeps' warehouse writers on the one-slot pool while an
auditor's `benchledger sql` keeps answering; and it runs a scheduled sweep by itself."""

from __future__ import annotations

import contextlib
import json
import time
from datetime import datetime
from pathlib import Path

import duckdb
import psutil
import pytest

from benchledger.cluster import commands as local_cluster
from benchledger.cluster.airflow_api import ApiClient
from benchledger.cluster.config import api_credentials
from tests.cluster_helpers import cli, cluster_up, start_run, window_started
from tests.sweeps import cluster_sweep, write_sweep

pytestmark = pytest.mark.integration

# A vanished worker's task is failed, then retried, after this long (the deployment's
# default is 180 s). No API stall here (test_cluster.py's deployment has one, and waits
# 90 s): the bound only has to outlast the heartbeats a busy machine delays (one every few
# seconds, each retried at most 5 s apart), and it is most of the killed-worker test's time.
HEARTBEAT_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    home = tmp_path_factory.mktemp("cluster-scheduler")
    cluster_up(home, f"scheduler.task_instance_heartbeat_timeout={HEARTBEAT_TIMEOUT_S}")
    yield home
    local_cluster.down(home)


@pytest.fixture(scope="module")
def api(deployment) -> ApiClient:
    state = local_cluster.Cluster.load(deployment)
    return ApiClient(state.api_url, *api_credentials(deployment))


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and everything under it, as a host losing power would."""
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def test_a_worker_killed_mid_window_is_retried_without_a_duplicate(deployment, api, tmp_path):
    """node-a's worker is killed (with its task process) while the second window of a
    restart is being measured. supervisord starts the worker again (no `cluster up`);
    the scheduler fails the task when its heartbeat stops and retries it on the worker
    brought back: the first window is kept, the second is measured again, once, and the
    lost attempt is on record."""
    sweep = tmp_path / "kill.toml"
    write_sweep(sweep, cluster_sweep("cl-kill", [("on-a", "node-a")], requests=40,
                                     step_ms=15.0, restarts=1, concurrency=[1, 2],
                                     sweep_keys={"retries": 1, "retry_delay_s": 1}))
    warehouse = tmp_path / "wh.duckdb"
    run = start_run(sweep, warehouse, deployment)
    mark = window_started(run, tmp_path / "wh-data" / "raw", "*/on-a/r0/code-c2.started")
    assert mark is not None, "the second window never started"
    time.sleep(1.0)  # well inside the window (40 requests at c=2 take several seconds)
    state = local_cluster.Cluster.load(deployment)
    killed = state.pid_of("edge-worker-node-a")
    assert killed is not None
    _kill_tree(killed)
    output = run.communicate(timeout=600)[0]
    assert run.returncode == 0, output[-4000:]
    assert "on-a__r0.measure_code: running on node-a (try 2)" in output
    # supervisord brought the worker back and logged it
    assert state.pid_of("edge-worker-node-a") not in (None, killed)
    supervisord_log = (deployment / "logs" / "supervisord.log").read_text()
    assert "exited: edge-worker-node-a (terminated by SIGKILL; not expected)" in \
        supervisord_log
    with duckdb.connect(str(warehouse), read_only=True) as con:
        windows = con.execute(
            "SELECT concurrency, attempt, worker_hostname, submitted, completed, failed, "
            "unresolved FROM windows ORDER BY concurrency").fetchall()
        duplicates = con.execute("SELECT count(*) - count(DISTINCT request_id) "
                                 "FROM requests").fetchone()[0]
        per_window = con.execute("SELECT w.concurrency, count(*), any_value(w.submitted) "
                                 "FROM requests q JOIN windows w USING (window_id) "
                                 "WHERE NOT q.is_warmup GROUP BY 1 ORDER BY 1").fetchall()
        interrupted = json.loads(con.execute(
            "SELECT interrupted_windows FROM restarts").fetchone()[0])
    assert [(c, a, h) for c, a, h, *_ in windows] == [(1, 1, "node-a"), (2, 2, "node-a")]
    for _, _, _, submitted, completed, failed, unresolved in windows:
        assert submitted == completed + failed + unresolved == 40
    assert duplicates == 0
    assert per_window == [(1, 40, 40), (2, 40, 40)]
    assert [(w["window_id"].rsplit("/", 1)[1], w["attempt"]) for w in interrupted] == [
        ("code-c2", 1)]


def test_two_sweeps_at_once_share_the_warehouse_and_sql_keeps_answering(deployment, api,
                                                                       tmp_path):
    """Two sweeps on two nodes finishing together: their load/validate/derive queue on
    the one-slot pool instead of failing on DuckDB's file lock, and an auditor's
    read-only `benchledger sql` answers all along (waiting, bounded, while a task writes)."""
    warehouse = tmp_path / "shared.duckdb"
    runs = {}
    for name, node in (("cl-x", "node-a"), ("cl-y", "node-b")):
        sweep = tmp_path / f"{name}.toml"
        # one restart each: what is checked is how the two runs' writers meet at the end
        write_sweep(sweep, cluster_sweep(name, [(f"arm-{node}", node)], restarts=1))
        runs[name] = start_run(sweep, warehouse, deployment)
    queries = []
    while any(proc.poll() is None for proc in runs.values()):
        if warehouse.exists():
            t0 = time.time()
            done = cli("sql", "--warehouse", str(warehouse), "SELECT count(*) FROM requests",
                       timeout=120)
            queries.append((t0, time.time(), done.returncode, done.stderr))
        time.sleep(0.5)
    outputs = {name: proc.communicate()[0] for name, proc in runs.items()}
    for name, proc in runs.items():
        assert proc.returncode == 0, outputs[name][-3000:]
        assert "database is locked" not in outputs[name].lower()
        assert "could not set lock" not in outputs[name].lower()
    # Every query answered, or (one that was running when a writer came to wait) gave way
    # to it in one line; never a lock error. A query arriving while a writer waits lets it
    # in and then answers, so most answer.
    gave_way = "a writer (a run's load) is waiting for the warehouse"
    assert queries and all(rc == 0 or (rc == 2 and gave_way in err.strip().splitlines()[-1])
                           for _, _, rc, err in queries), queries
    assert sum(rc == 0 for _, _, rc, _ in queries) > len(queries) / 2, queries
    # some query overlapped a writer task of one of the runs (else this proved nothing)
    writes = []
    for name in runs:
        for run in api.request("GET", f"/api/v2/dags/benchledger_{name}/dagRuns")["dag_runs"]:
            tis = api.request("GET", f"/api/v2/dags/benchledger_{name}/dagRuns/"
                                     f"{run['dag_run_id']}/taskInstances")["task_instances"]
            writes += [(datetime.fromisoformat(ti["start_date"]).timestamp(),
                        datetime.fromisoformat(ti["end_date"]).timestamp())
                       for ti in tis if ti["task_id"] in ("load", "validate", "derive")]
    assert any(q0 < w1 and w0 < q1 for q0, q1, _, _ in queries for w0, w1 in writes)
    # the pool serialised the writers: no two writer tasks overlapped
    writes.sort()
    assert all(a[1] <= b[0] for a, b in zip(writes, writes[1:], strict=False)), writes


def _runs_of(warehouse: Path, sweep_name: str) -> list[tuple[str, bool]]:
    """(run_id, ended) of the sweep's runs in the warehouse; [] when it cannot be read yet."""
    if not warehouse.exists():
        return []
    try:
        with duckdb.connect(str(warehouse), read_only=True) as con:
            return con.execute("SELECT run_id, ended_at IS NOT NULL FROM runs "
                               "WHERE sweep_name = ? ORDER BY started_at",
                               [sweep_name]).fetchall()
    except duckdb.Error:  # being written: ask again
        return []


def test_a_scheduled_sweep_gets_its_own_runs(deployment, api, tmp_path):
    """Every minute, by the scheduler alone: after the triggered run, a scheduled one,
    each a `runs` row of its own."""
    sweep = tmp_path / "cron.toml"
    # one restart: what is checked is which runs the scheduler made, not their numbers
    write_sweep(sweep, cluster_sweep("cl-cron", [("on-b", "node-b")], schedule="* * * * *",
                                     restarts=1))
    warehouse = tmp_path / "wh.duckdb"
    done = cli("run", str(sweep), "--warehouse", str(warehouse), "--cluster", str(deployment))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    deadline = time.monotonic() + 240
    runs = _runs_of(warehouse, "cl-cron")
    while time.monotonic() < deadline and not any(
            run_id.startswith("scheduled__") and ended for run_id, ended in runs):
        time.sleep(2)
        runs = _runs_of(warehouse, "cl-cron")
    api.request("PATCH", "/api/v2/dags/benchledger_cl-cron", json={"is_paused": True})
    ids = [run_id for run_id, _ in runs]
    assert len(ids) == len(set(ids)) >= 2, runs
    # the triggered run and the scheduler's own (which may come first: unpausing the DAG
    # schedules the latest tick at once, and max_active_runs = 1 queues the other)
    assert {run_id.split("__")[0] for run_id in ids} == {"manual", "scheduled"}
    dag = api.request("GET", "/api/v2/dags/benchledger_cl-cron/details")
    assert (dag["max_active_runs"], dag["catchup"]) == (1, False)
    # installed, it said what a run outlasting the interval does (issue #25)
    assert "note: sweep 'cl-cron' is scheduled every 60 s" in done.stdout, done.stdout
    with duckdb.connect(str(warehouse), read_only=True) as con:
        rows = con.execute("SELECT run_id, scheduled_for, skipped_slots, skipped_slot_count "
                           "FROM runs WHERE sweep_name = 'cl-cron'").fetchall()
    for run_id, slot, skipped, count in rows:
        if not run_id.startswith("scheduled__"):
            assert (slot, skipped, count) == (None, None, None), run_id
            continue
        assert slot == datetime.fromisoformat(run_id.removeprefix("scheduled__")), run_id
        if count is not None:  # counted from the previous successful run, if any
            listed = [datetime.fromisoformat(t) for t in json.loads(skipped)]
            assert len(listed) == count
            assert all(t < slot and t.second == 0 for t in listed), listed
