"""A real Airflow deployment on loopback: API server, scheduler, DAG processor, triggerer
and two Edge workers under supervisord (`benchledger cluster up`), sweeps run through
`benchledger run --cluster`, a worker killed and an API server stalled for a minute
survived, and `cluster down` leaving nothing behind. Takes about 12 minutes (docs/cluster.md)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import datetime
from pathlib import Path

import duckdb
import psutil
import pytest

from benchledger.cluster import commands as local_cluster
from benchledger.cluster import supervisor
from benchledger.cluster.airflow_api import ApiClient
from benchledger.cluster.config import api_credentials
from tests.browser import chromium_binary
from tests.cluster_helpers import assert_same_entries, published_and_embedded, sweep_text
from tests.conftest import pids_tagged

pytestmark = pytest.mark.integration

NODES = ["node-a", "node-b"]
def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchledger.cli", *args], text=True,
                          capture_output=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    home = tmp_path_factory.mktemp("cluster")
    lineage = home / "openlineage.json"
    started = cli("cluster", "up", "--home", str(home), "--nodes", ",".join(NODES),
                  # a vanished worker's task is failed, then retried, after 90 s: longer
                  # than the API stall a run must survive (60 s), shorter than the
                  # default (180 s) to keep the killed-worker test short
                  "--config", "scheduler.task_instance_heartbeat_timeout=90",
                  "--config", "openlineage.transport=" + json.dumps(
                      {"type": "file", "log_file_path": str(lineage), "append": True}),
                  timeout=300)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "cluster up: http://127.0.0.1:" in started.stdout
    yield home
    local_cluster.down(home)  # idempotent; test_down_leaves_no_process checks it


@pytest.fixture(scope="module")
def api(deployment) -> ApiClient:
    state = local_cluster.Cluster.load(deployment)
    return ApiClient(state.api_url, *api_credentials(deployment))


@pytest.fixture(scope="module")
def two_arm_run(deployment, tmp_path_factory):
    work = tmp_path_factory.mktemp("two-arm")
    sweep = work / "two.toml"
    # One comparison, so the benchledger page in the Airflow UI has a verdict to show; on-b
    # (the last arm) steps a little slower, so the two arms differ (rule ab_arms_differ).
    head, tail = sweep_text("cl-two", [("on-a", "node-a"), ("on-b", "node-b")]).rsplit(
        "step_ms = 2.0", 1)
    sweep.write_text(f'{head}step_ms = 3.0{tail}[[comparisons]]\na = "on-a"\nb = "on-b"\n'
                     'metric = "decode_rate"\n')
    warehouse = work / "wh.duckdb"
    done = cli("run", str(sweep), "--warehouse", str(warehouse), "--cluster", str(deployment))
    return done, warehouse


def test_status_lists_every_process_healthy(deployment):
    done = cli("cluster", "status", "--home", str(deployment))
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("api-server", "scheduler", "dag-processor", "triggerer"):
        assert any(line.startswith(name) and "health=healthy" in line
                   for line in done.stdout.splitlines()), done.stdout
    for node in NODES:
        line = next(ln for ln in done.stdout.splitlines() if ln.startswith(f"edge-worker-{node}"))
        # one worker per queue: the first node's also serves the default queue
        queues = f"{node},default" if node == NODES[0] else node
        # supervisord calls a worker "starting" for its first 20 s (startsecs): up already
        assert re.search(r" pid \d+ +(running|starting) ", line), line
        assert f"queues={queues} " in line + " " and "starts=1" in line, line


def test_two_arm_run_succeeds_and_publishes(two_arm_run):
    done, warehouse = two_arm_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "DAG run manual__" in done.stdout and done.stdout.rstrip().endswith("success")
    assert "published " in done.stdout and "validated entries" in done.stdout
    # states were followed as they changed, with the worker each task ran on
    assert "on-a__r0.measure_code: running on node-a" in done.stdout
    assert "on-b__r1.measure_code: success on node-b" in done.stdout


def _run_id(warehouse: Path) -> str:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        return con.execute("SELECT run_id FROM runs WHERE sweep_name = 'cl-two'").fetchone()[0]


def test_each_arm_ran_on_its_node(two_arm_run, api):
    _, warehouse = two_arm_run
    run_id = _run_id(warehouse)
    with duckdb.connect(str(warehouse), read_only=True) as con:
        rows = con.execute("SELECT arm, requested_node, worker_hostname FROM restarts "
                           "WHERE run_id = ? ORDER BY restart_id", [run_id]).fetchall()
        windows = con.execute("SELECT arm, worker_hostname FROM windows WHERE run_id = ?",
                              [run_id]).fetchall()
    assert rows == [("on-a", "node-a", "node-a")] * 2 + [("on-b", "node-b", "node-b")] * 2
    assert sorted(set(windows)) == [("on-a", "node-a"), ("on-b", "node-b")]
    tis = api.request("GET", f"/api/v2/dags/benchledger_cl-two/dagRuns/{run_id}/taskInstances",
                      params={"limit": 1000})["task_instances"]
    for ti in tis:
        arm = ti["task_id"].split("__")[0]
        if arm in ("on-a", "on-b"):
            node = "node-a" if arm == "on-a" else "node-b"
            assert (ti["queue"], ti["hostname"]) == (node, node), ti["task_id"]
        else:  # load, validate, derive, finalize, plan: the default queue, in the pool
            assert ti["queue"] == "default", ti["task_id"]
    pooled = {ti["task_id"]: ti["pool"] for ti in tis}
    assert {pooled[t] for t in ("load", "validate", "derive")} == {"benchledger_warehouse"}


def test_publish_dag_ran_on_the_scheduler_asset_trigger(two_arm_run, api):
    _, warehouse = two_arm_run
    run_id = _run_id(warehouse)
    runs = api.request("GET", "/api/v2/dags/benchledger_cl-two_publish/dagRuns")["dag_runs"]
    assert [r["run_type"] for r in runs] == ["asset_triggered"]
    assert runs[0]["state"] == "success"
    events = api.request("GET", "/api/v2/dags/benchledger_cl-two_publish/dagRuns/"
                                f"{runs[0]['dag_run_id']}/upstreamAssetEvents")["asset_events"]
    assert [e["extra"]["run_id"] for e in events] == [run_id]


def test_published_entries_match_an_embedded_derivation_of_the_same_raw_files(two_arm_run):
    _, warehouse = two_arm_run
    on_cluster, again = published_and_embedded(warehouse, _run_id(warehouse))
    assert len(on_cluster) > 20
    assert_same_entries(on_cluster, again)


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


def test_openlineage_events_name_raw_files_tables_and_export(deployment, two_arm_run):
    """The deployment's [openlineage] file transport (set by `cluster up --config`): the
    COMPLETE events of the run's load, derive and publish, emitted by the workers."""
    from benchledger.raw.layout import RunLayout

    _, warehouse = two_arm_run
    run_id = _run_id(warehouse)
    layout = RunLayout(warehouse.parent / "wh-data", run_id)
    events = [json.loads(line) for line in
              (deployment / "openlineage.json").read_text().splitlines() if line]

    def complete(task_id: str, dag_id: str = "benchledger_cl-two") -> dict:
        found = [e for e in events if e["eventType"] == "COMPLETE"
                 and e["job"]["name"] == f"{dag_id}.{task_id}"]
        assert len(found) == 1, [e["job"]["name"] for e in events]
        return found[0]

    def names(event: dict, side: str) -> set[tuple[str, str]]:
        return {(d["namespace"], d["name"]) for d in event[side]}

    table = f"duckdb://{warehouse}"
    load = complete("load")
    raw = {name for namespace, name in names(load, "inputs") if namespace == "file"}
    with duckdb.connect(str(warehouse), read_only=True) as con:
        catalogued = {path for path, in con.execute(
            "SELECT path FROM raw_files WHERE starts_with(path, ?)",
            [str(layout.run_dir)]).fetchall()}
    assert raw == catalogued and any(p.endswith(".parquet") for p in raw)
    assert (table, "wh.main.request_records") in names(load, "outputs")
    derive = complete("derive")
    assert {(table, "wh.main.entries"), (table, "wh.main.entry_lineage")} \
        <= names(derive, "outputs")
    publish = complete("publish", "benchledger_cl-two_publish")
    assert (table, "wh.main.entries") in names(publish, "inputs")
    assert ("file", str(layout.export_dir / "entries.json")) in names(publish, "outputs")


def test_the_airflow_ui_shows_the_run_on_the_benchledger_page(deployment, two_arm_run):
    """Logged in to the Airflow UI as docs/cluster.md says (user benchledger, the password
    in api-passwords.json), in Chromium: the nav's benchledger entry shows the run's sweep,
    and the run's page its verdicts and published entries, as the warehouse holds them;
    an entry links to its lineage. No console error on the way."""
    from playwright.sync_api import sync_playwright

    _, warehouse = two_arm_run
    run_id = _run_id(warehouse)
    with duckdb.connect(str(warehouse), read_only=True) as con:
        verdicts = con.execute("SELECT comparison_id, verdict FROM comparisons "
                               "WHERE run_id = ? ORDER BY metric, workload, role DESC, a, b, "
                               "comparison_id", [run_id]).fetchall()
        published = {e for e, in con.execute("SELECT entry_id FROM published_entries "
                                             "WHERE run_id = ?", [run_id]).fetchall()}
    assert verdicts and published
    url = local_cluster.Cluster.load(deployment).api_url
    password = json.loads((deployment / "api-passwords.json").read_text())["benchledger"]
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_binary(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{url}/")  # the UI sends a visitor to its login form
            page.fill("input[name=username]", "benchledger")
            page.fill("input[name=password]", password)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(f"{url}/")
            # from here on (Airflow's own login page asks for /ui/config before login)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.locator('a[href$="plugin/benchledger"]').click()  # the nav entry
            frame = page.frame_locator("iframe[title=benchledger]")
            sweeps = frame.locator("#sweeps")
            sweeps.wait_for()
            assert "cl-two" in sweeps.inner_text()
            frame.locator("#sweeps a", has_text=run_id).click()
            frame.locator("#published").wait_for()
            shown = frame.locator("#verdicts tbody tr").evaluate_all(
                "rows => rows.map(r => [r.dataset.comparisonId, r.dataset.verdict])")
            assert [tuple(row) for row in shown] == verdicts
            entries = frame.locator("#published tbody tr").evaluate_all(
                "rows => rows.map(r => r.dataset.entryId)")
            assert set(entries) == published and len(entries) == len(published)
            first = sorted(published)[0]
            frame.locator(f'#published tr[data-entry-id="{first}"] a').click()
            explained = frame.locator("#explain")
            explained.wait_for()
            assert f"entry_id: {first}" in explained.inner_text()
            assert page.url.startswith(f"{url}/plugin/benchledger/")
        finally:
            browser.close()
    assert errors == []


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
    sweep.write_text(sweep_text("cl-kill", [("on-a", "node-a")], requests=40, step_ms=15.0,
                                extra="retries = 1\nretry_delay_s = 1")
                     .replace("restarts = 2", "restarts = 1")
                     .replace("[[workloads]]", "concurrency = [1, 2]\n[[workloads]]"))
    warehouse = tmp_path / "wh.duckdb"
    run = subprocess.Popen([sys.executable, "-m", "benchledger.cli", "run", str(sweep),
                            "--warehouse", str(warehouse), "--cluster", str(deployment)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    mark = None
    deadline = time.monotonic() + 180
    while mark is None and time.monotonic() < deadline and run.poll() is None:
        mark = next((tmp_path / "wh-data" / "raw").glob("*/on-a/r0/code-c2.started"), None) \
            if (tmp_path / "wh-data" / "raw").exists() else None
        time.sleep(0.2)
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


def test_an_api_server_stalled_for_a_minute_leaves_every_worker_alive(deployment, tmp_path):
    """The API server stopped (SIGSTOP, every process of it) for 60 s while both nodes
    measure, then continued: no worker exits (the tokens they signed before the stall
    are still good after it), no task fails for the heartbeats it could not send, and the
    run succeeds with every window measured once."""
    state = local_cluster.Cluster.load(deployment)
    # `up` returns once the workers registered; supervisord calls them RUNNING only after
    # their startsecs (this test may be the module's first)
    deadline = time.monotonic() + 60
    while True:
        workers = {node: state.pid_of(f"edge-worker-{node}") for node in NODES}
        if None not in workers.values() or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert None not in workers.values(), workers
    starts = supervisor.history(deployment)
    sweep = tmp_path / "stall.toml"
    sweep.write_text(sweep_text("cl-stall", [("on-a", "node-a"), ("on-b", "node-b")],
                                requests=40, step_ms=15.0, extra="retries = 0"))
    warehouse = tmp_path / "wh.duckdb"
    run = subprocess.Popen([sys.executable, "-m", "benchledger.cli", "run", str(sweep),
                            "--warehouse", str(warehouse), "--cluster", str(deployment)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    raw_root, mark = tmp_path / "wh-data" / "raw", None
    deadline = time.monotonic() + 180
    while mark is None and time.monotonic() < deadline and run.poll() is None:
        mark = next(raw_root.glob("*/*/r0/code-c1.started"), None) \
            if raw_root.exists() else None
        time.sleep(0.2)
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
    assert {node: state.pid_of(f"edge-worker-{node}") for node in NODES} == workers
    after = supervisor.history(deployment)
    for name in ("api-server", *(f"edge-worker-{node}" for node in NODES)):
        assert after[name]["starts"] == starts[name]["starts"], (name, after[name])
    with duckdb.connect(str(warehouse), read_only=True) as con:
        attempts = con.execute("SELECT count(*), max(attempt) FROM windows").fetchone()
    assert attempts == (4, 1)  # 2 arms x 2 restarts, each window measured once


def test_a_two_node_arm_runs_on_both_workers_and_a_dead_node_crashes_its_restart(
        deployment, api, tmp_path):
    """Issue #24: one model across two nodes (the head on node-a, a pretend node on node-b,
    each on its own loopback address). Each process is started and stopped by its own
    node's Edge worker; the process on node-b, killed mid-window, makes the restart crashed
    naming node-b; after the teardown no process of the deployment is left on either."""
    model = f"sim-two-node-{uuid.uuid4().hex[:8]}"
    sweep = tmp_path / "two-node.toml"
    sweep.write_text(textwrap.dedent(f"""
        [sweep]
        name = "cl-two-node"
        retries = 0
        [defaults]
        requests = 40
        warmup = 1
        restarts = 1
        max_tokens = 24
        clock_source = "dcgm"
        clock_url = "{{base_url}}/dcgm"
        [[workloads]]
        name = "code"
        [[arms]]
        name = "tp"
        server = "simulator"
        model = "{model}"
        node = "node-a"
        address = "127.0.25.1"
        [arms.simulator]
        step_ms = 15.0
        num_gpus = 2
        [[arms.processes]]
        node = "node-b"
        address = "127.0.25.2"
        """))
    warehouse = tmp_path / "wh.duckdb"
    run = subprocess.Popen([sys.executable, "-m", "benchledger.cli", "run", str(sweep),
                            "--warehouse", str(warehouse), "--cluster", str(deployment)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    raw_root = tmp_path / "wh-data" / "raw"
    mark = None
    deadline = time.monotonic() + 240
    while mark is None and time.monotonic() < deadline and run.poll() is None:
        mark = next(raw_root.glob("*/tp/r0/code-c1.started"), None) \
            if raw_root.exists() else None
        time.sleep(0.2)
    assert mark is not None, "the window never started"
    node_b = json.loads((mark.parent / "nodes" / "node-b.json").read_text())
    assert node_b["status"] == "launched" and psutil.pid_exists(node_b["pid"])
    time.sleep(1.0)  # inside the window: 40 requests of 24 steps of 15 ms take 14 s
    os.kill(node_b["pid"], signal.SIGKILL)
    output = run.communicate(timeout=600)[0]
    assert run.returncode != 0, output[-3000:]  # finalize names the crashed restart
    assert "restart crashed" in output and "node-b" in output, output[-3000:]
    with duckdb.connect(str(warehouse), read_only=True) as con:
        run_id, status, crashed_node, error, spanned = con.execute(
            "SELECT run_id, status, crashed_node, error, deployment FROM restarts").fetchone()
        rows = con.execute("SELECT count(*) FROM request_records WHERE NOT is_warmup"
                           ).fetchone()[0]
    assert (status, crashed_node) == ("crashed", "node-b")
    assert error.startswith("the process on node node-b died during window ") and \
        "code-c1" in error, error
    assert rows == 40  # the window's requests are rows all the same
    nodes = {n["node"]: n for n in json.loads(spanned)}
    assert nodes["node-b"]["ended_before_stop"] is True
    assert nodes["node-a"]["stop_status"].startswith("stopped by SIGTERM")
    tis = api.request("GET", f"/api/v2/dags/benchledger_cl-two-node/dagRuns/{run_id}/"
                             "taskInstances", params={"limit": 1000})["task_instances"]
    where = {ti["task_id"]: (ti["queue"], ti["hostname"], ti["state"]) for ti in tis}
    for task, node in (("launch_server", "node-a"), ("launch_node_node-b", "node-b"),
                       ("stop_server", "node-a"), ("stop_node_node-b", "node-b"),
                       ("settle_restart", "node-a")):
        assert where[f"tp__r0.{task}"][:2] == (node, node), task
        assert where[f"tp__r0.{task}"][2] == "success", task
    assert where["tp__r0.measure_code"][2] == "failed"
    assert pids_tagged(model) == []  # nothing of the deployment left on either node


def test_a_scheduled_sweep_gets_its_own_runs(deployment, api, tmp_path):
    """Every minute, by the scheduler alone: after the triggered run, a scheduled one,
    each a `runs` row of its own."""
    sweep = tmp_path / "cron.toml"
    sweep.write_text(sweep_text("cl-cron", [("on-b", "node-b")], schedule="* * * * *"))
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


def test_two_sweeps_at_once_share_the_warehouse_and_sql_keeps_answering(deployment, api,
                                                                       tmp_path):
    """Two sweeps on two nodes finishing together: their load/validate/derive queue on
    the one-slot pool instead of failing on DuckDB's file lock, and an auditor's
    read-only `benchledger sql` answers all along (waiting, bounded, while a task writes)."""
    warehouse = tmp_path / "shared.duckdb"
    runs = {}
    for name, node in (("cl-x", "node-a"), ("cl-y", "node-b")):
        sweep = tmp_path / f"{name}.toml"
        sweep.write_text(sweep_text(name, [(f"arm-{node}", node)]))
        runs[name] = subprocess.Popen(
            [sys.executable, "-m", "benchledger.cli", "run", str(sweep), "--warehouse",
             str(warehouse), "--cluster", str(deployment)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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


def test_down_leaves_no_process(deployment, two_arm_run):
    before = local_cluster.deployment_processes(deployment)
    assert len(before) >= 5  # api-server, scheduler, dag-processor, two workers
    done = cli("cluster", "down", "--home", str(deployment), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [p for p in before if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert local_cluster.deployment_processes(deployment) == []
    status = cli("cluster", "status", "--home", str(deployment))
    assert status.returncode == 1  # nothing running
