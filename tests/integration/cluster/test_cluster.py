"""A real Airflow deployment on loopback: API server, scheduler, DAG processor, triggerer
and two Edge workers under supervisord (`benchledger cluster up`), sweeps run through
`benchledger run --cluster` (the benchledger page in the Airflow UI, OpenLineage events), an
API server stalled for a minute survived, a two-node arm whose node dies mid-window, and
`cluster down` leaving nothing behind. What the scheduler does (a killed worker's task
retried, a scheduled sweep, two sweeps' writers on the one-slot pool) is
test_cluster_scheduler.py's, on a deployment of its own: the two files, about 5 minutes
each on a quiet machine, run side by side under `make test` (docs/cluster.md)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from pathlib import Path

import duckdb
import psutil
import pytest

from benchledger.cluster import commands as local_cluster
from benchledger.cluster.airflow_api import ApiClient
from benchledger.cluster.config import api_credentials
from tests import sweeps
from tests.browser import chromium_binary
from tests.cluster_helpers import (
    NODES,
    assert_same_entries,
    cli,
    cluster_up,
    published_and_embedded,
    start_run,
    window_started,
)
from tests.conftest import pids_tagged
from tests.sweeps import cluster_sweep, variant, write_sweep

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    home = tmp_path_factory.mktemp("cluster")
    lineage = home / "openlineage.json"
    # The product's own task_instance_heartbeat_timeout (180 s): no test here needs a
    # vanished worker's task failed sooner (test_cluster_scheduler.py's own deployment
    # does). The 60 s API stall runs on PostgreSQL (test_cluster_postgres.py): on SQLite
    # the fetches an Edge worker piles up during a stall may claim one job twice.
    cluster_up(home,
               "openlineage.transport=" + json.dumps(
                   {"type": "file", "log_file_path": str(lineage), "append": True}))
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
    # steps a little slower, so the two arms differ (rule ab_arms_differ).
    write_sweep(sweep, variant(
        cluster_sweep("cl-two", [("on-a", "node-a"), ("on-b", "node-b")]),
        {"arms": {"on-b": {"simulator": {"step_ms": 3.0}}},
         "comparisons": [{"a": "on-a", "b": "on-b", "metric": "decode_rate"}]}))
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


def test_a_two_node_arm_runs_on_both_workers_and_a_dead_node_crashes_its_restart(
        deployment, api, tmp_path):
    """Issue #24: one model across two nodes (the head on node-a, a pretend node on node-b,
    each on its own loopback address). Each process is started and stopped by its own
    node's Edge worker; the process on node-b, killed mid-window, makes the restart crashed
    naming node-b; after the teardown no process of the deployment is left on either."""
    model = f"sim-two-node-{uuid.uuid4().hex[:8]}"
    sweep = tmp_path / "two-node.toml"
    write_sweep(sweep, sweeps.sweep(
        "cl-two-node",
        [sweeps.simulator_arm("tp", {"step_ms": 15.0, "num_gpus": 2}, model=model,
                              node="node-a", address="127.0.25.1",
                              processes=[{"node": "node-b", "address": "127.0.25.2"}])],
        defaults=sweeps.defaults(requests=40, restarts=1, clock={
            "clock_source": "dcgm", "clock_url": "{base_url}/dcgm"}),
        sweep={"retries": 0}))
    warehouse = tmp_path / "wh.duckdb"
    run = start_run(sweep, warehouse, deployment)
    mark = window_started(run, tmp_path / "wh-data" / "raw", "*/tp/r0/code-c1.started",
                          bound_s=240)
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


def test_down_leaves_no_process(deployment, two_arm_run):
    before = local_cluster.deployment_processes(deployment)
    assert len(before) >= 5  # api-server, scheduler, dag-processor, two workers
    done = cli("cluster", "down", "--home", str(deployment), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [p for p in before if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert local_cluster.deployment_processes(deployment) == []
    status = cli("cluster", "status", "--home", str(deployment))
    assert status.returncode == 1  # nothing running
