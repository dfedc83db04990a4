"""The local cluster on PostgreSQL with two Edge workers per node (issue #25): the metadata
database is a real PostgreSQL server (tests/postgres.py), every node's queue is served by
two workers, and no restart is ever split between them: its launch may go to either, and
every later task of the restart (readiness, measurement, teardown) runs on the worker that
launched the server, as the task instances and the warehouse both show.

Before restarts were pinned, two workers of one queue took a restart's tasks one by one
(launched on one, stopped on the other): with six restarts of four tasks or more after
their launch, each claimed by whichever worker polled first, all of them landing on the
launch's worker by chance is about one in 2^24.

The database URL `cluster up --db` is given carries a password (the server's trust
authentication ignores it): no file another local user can read holds it (issue #39)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import defaultdict

import duckdb
import psutil
import psycopg2
import pytest

from benchledger.cluster import commands as local_cluster
from benchledger.cluster import supervisor
from benchledger.cluster.airflow_api import ApiClient
from benchledger.cluster.config import api_credentials
from tests.cluster_helpers import (
    files_holding,
    open_folder,
    readable_by_another_user,
    require_another_user,
    start_run,
    window_started,
)
from tests.postgres import postgres_server
from tests.sweeps import cluster_sweep, write_sweep

pytestmark = pytest.mark.integration

NODES = ["node-a", "node-b"]
WORKERS = {"node-a": {"node-a", "node-a-w2"}, "node-b": {"node-b", "node-b-w2"}}
DB_PASSWORD = f"planted-db-password-{uuid.uuid4().hex}"


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchledger.cli", *args], text=True,
                          capture_output=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def database():
    with postgres_server() as url:
        yield url


@pytest.fixture(scope="module")
def deployment(database):
    # in a folder other users may enter, as a home directory is (pytest's are 0700)
    with open_folder("bl-pg-cluster-") as folder:
        home = folder / "pg-cluster"
        with_password = database.replace("postgres@", f"postgres:{DB_PASSWORD}@", 1)
        try:
            started = cli("cluster", "up", "--home", str(home), "--nodes", ",".join(NODES),
                          "--workers-per-node", "2", "--db", with_password, timeout=400)
            assert started.returncode == 0, started.stdout + started.stderr
            assert "2 workers each" in started.stdout
            yield home
        finally:
            if (home / local_cluster.STATE_FILE).exists():
                local_cluster.down(home)


def test_the_database_password_is_in_no_file_another_user_can_read(deployment):
    """Issue #39: `cluster up --db postgresql://user:password@...` left the password in a
    0644 airflow.cfg in a 0755 folder."""
    require_another_user()
    holding = files_holding([deployment], [DB_PASSWORD])
    assert deployment / "airflow.cfg" in holding, holding
    assert readable_by_another_user(holding) == []
    assert not [p for p in holding if p.stat().st_mode & 0o077], holding
    assert DB_PASSWORD not in (deployment / "join.json").read_text()


@pytest.fixture(scope="module")
def run(deployment, tmp_path_factory):
    work = tmp_path_factory.mktemp("pg-run")
    sweep = work / "pinned.toml"
    write_sweep(sweep, cluster_sweep("cl-pinned", [(f"on-{node}", node) for node in NODES],
                                     sweep_keys={"retries": 0}, restarts=3,
                                     workload_names=("code", "prose")))
    warehouse = work / "wh.duckdb"
    done = cli("run", str(sweep), "--warehouse", str(warehouse), "--cluster",
               str(deployment))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    with duckdb.connect(str(warehouse), read_only=True) as con:
        run_id, = con.execute("SELECT run_id FROM runs").fetchone()
    return {"warehouse": warehouse, "run_id": run_id}


def test_the_metadata_lives_in_postgresql_and_two_workers_serve_each_node(
        database, deployment, run):
    with psycopg2.connect(database) as con, con.cursor() as cur:
        cur.execute("SELECT state FROM dag_run WHERE dag_id = 'benchledger_cl-pinned' "
                    "AND run_id = %s", [run["run_id"]])
        assert cur.fetchall() == [("success",)]
    state = local_cluster.Cluster.load(deployment)
    workers = ApiClient(state.api_url, *api_credentials(deployment)).edge_workers()
    serving = defaultdict(set)
    for worker in workers:
        for queue in worker.get("queues") or []:
            serving[queue].add(worker["worker_name"])
    for node in NODES:
        assert serving[node] == WORKERS[node], serving


def test_every_restart_ran_on_the_one_worker_that_launched_it(deployment, run):
    state = local_cluster.Cluster.load(deployment)
    api = ApiClient(state.api_url, *api_credentials(deployment))
    tis = api.request("GET", f"/api/v2/dags/benchledger_cl-pinned/dagRuns/{run['run_id']}/"
                             "taskInstances", params={"limit": 1000})["task_instances"]
    by_restart = defaultdict(dict)
    for ti in tis:
        if "__r" in ti["task_id"]:
            group, task = ti["task_id"].split(".", 1)
            by_restart[group][task] = (ti["hostname"], ti["queue"], ti["state"])
    assert len(by_restart) == 6
    for group, tasks in by_restart.items():
        node = group.split("__")[0].removeprefix("on-")
        assert set(tasks) == {"launch_server", "wait_ready", "measure_code",
                              "measure_prose", "stop_server"}
        hosts = {host for host, _, _ in tasks.values()}
        assert len(hosts) == 1 and hosts <= WORKERS[node], (group, tasks)
        assert tasks["launch_server"][1] == node  # any worker of the node may launch
        own = f"{node}@benchledger_cl-pinned.{group}"
        assert {queue for task, (_, queue, _) in tasks.items()
                if task != "launch_server"} == {own}
        assert {s for _, _, s in tasks.values()} == {"success"}
    # the pins are gone with their restarts
    for worker in api.edge_workers():
        assert not [q for q in worker.get("queues") or [] if "@" in q], worker


def test_the_warehouse_shows_each_restart_on_one_worker(run):
    with duckdb.connect(str(run["warehouse"]), read_only=True) as con:
        rows = con.execute(
            "SELECT r.arm, r.restart_index, r.worker_hostname, "
            "list(DISTINCT w.worker_hostname) FROM restarts r JOIN windows w "
            "USING (restart_id) GROUP BY ALL ORDER BY ALL").fetchall()
        published = con.execute("SELECT count(*) FROM published_entries").fetchone()[0]
    assert len(rows) == 6
    for arm, _, launched_on, measured_on in rows:
        assert measured_on == [launched_on], (arm, launched_on, measured_on)
        assert launched_on in WORKERS[arm.removeprefix("on-")]
    assert published > 0


def test_an_api_server_stalled_for_a_minute_leaves_every_worker_alive(deployment, tmp_path):
    """The API server stopped (SIGSTOP, every process of it) for 60 s while both nodes
    measure, then continued: no worker exits (the tokens they signed before the stall
    are still good after it), no task fails for the heartbeats it could not send, and the
    run succeeds with every window measured once.

    On PostgreSQL, as production runs: an Edge worker starts a job fetch every
    job_poll_interval without waiting for the last, so a stall piles up dozens of them,
    answered together when the API resumes. On SQLite the claim locks nothing and a job
    queued during the stall went to two of them (a CI run: measure_code received twice,
    the duplicate's 409 'TI was not in a state where it could be marked as running'
    failed the task); PostgreSQL's SELECT ... FOR UPDATE SKIP LOCKED gives it to one."""
    state = local_cluster.Cluster.load(deployment)
    # `up` returns once the workers registered; supervisord calls them RUNNING only after
    # their startsecs (this test may be the module's first)
    deadline = time.monotonic() + 60
    while True:
        workers = {w: state.pid_of(f"edge-worker-{w}") for node in NODES for w in WORKERS[node]}
        if None not in workers.values() or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert None not in workers.values(), workers
    starts = supervisor.history(deployment)
    sweep = tmp_path / "stall.toml"
    write_sweep(sweep, cluster_sweep("cl-stall", [("on-a", "node-a"), ("on-b", "node-b")],
                                     requests=40, step_ms=15.0, sweep_keys={"retries": 0}))
    warehouse = tmp_path / "wh.duckdb"
    run = start_run(sweep, warehouse, deployment)
    mark = window_started(run, tmp_path / "wh-data" / "raw", "*/*/r0/code-c1.started")
    assert mark is not None, "no window started"
    api_server = psutil.Process(state.pid_of("api-server"))
    stalled = [api_server, *api_server.children(recursive=True)]
    for proc in stalled:
        proc.suspend()
    try:
        time.sleep(60)
    finally:
        for proc in stalled:
            proc.resume()
    output = run.communicate(timeout=600)[0]
    assert run.returncode == 0, output[-4000:]
    assert {w: state.pid_of(f"edge-worker-{w}") for w in workers} == workers
    after = supervisor.history(deployment)
    for name in ("api-server", *(f"edge-worker-{w}" for w in workers)):
        assert after[name]["starts"] == starts[name]["starts"], (name, after[name])
    with duckdb.connect(str(warehouse), read_only=True) as con:
        attempts = con.execute("SELECT count(*), max(attempt) FROM windows").fetchone()
    assert attempts == (4, 1)  # 2 arms x 2 restarts, each window measured once


def test_down_leaves_no_process(deployment, run):
    done = cli("cluster", "down", "--home", str(deployment), timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert local_cluster.deployment_processes(deployment) == []
