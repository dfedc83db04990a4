"""Build one Airflow DAG from one sweep file: wiring only.

Parsing reads the sweep TOML (it decides the DAG's id, schedule and task groups) and
nothing else: no servers, no DuckDB, no network at parse time.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, TaskGroup, chain

from benchledger.operators import sweep_tasks as t
from benchledger.sweep import load_sweep


def _target_params(warehouse: str | None, data_dir: str | None) -> dict:
    """Where a run writes, as DAG params. The defaults are what a scheduled run (no conf)
    uses: `benchledger run --cluster` bakes the warehouse it was given into the DAG file."""
    return {
        "warehouse": Param(warehouse, type=["null", "string"],
                           description="DuckDB warehouse file (default: data_dir)"),
        "data_dir": Param(data_dir, type=["null", "string"],
                          description="raw files and exports (default: ~/.benchledger)"),
    }


# A failed rule is a result, not an error: the tasks that check, derive and publish are
# never retried, whatever the deployment's default_task_retries (they also raise
# AirflowFailException for results, which Airflow never retries).
NEVER_RETRIED = {"retries": 0}


def sweep_retries(sweep) -> dict:
    """The sweep's retry settings, for tasks whose failure is an error (a lost connection,
    a killed worker, a locked warehouse): a retry rewrites only its own files, measures
    only windows no attempt wrote, loads only what is not loaded: no record twice."""
    return {"retries": sweep.sweep.retries,
            "retry_delay": timedelta(seconds=sweep.sweep.retry_delay_s)}


def build_sweep_dag(sweep_path: str | Path, warehouse: str | None = None,
                    data_dir: str | None = None) -> DAG:
    sweep_path = Path(sweep_path).resolve()
    sweep = load_sweep(sweep_path)
    path = str(sweep_path)
    retried = sweep_retries(sweep)
    with DAG(
        dag_id=sweep.dag_id,
        description=sweep.sweep.description or f"benchledger sweep {sweep.sweep.name}",
        schedule=sweep.sweep.airflow_schedule,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,  # restarts of one sweep share nodes; never overlap two runs
        # Every failed task leaves its error where `benchledger run` can print it.
        default_args={"on_failure_callback": t.record_failure},
        tags=["benchledger", f"sweep:{sweep.sweep.name}"],
        params=_target_params(warehouse, data_dir),
        doc_md=(f"Sweep file: `{path}`. See docs/protocol.md of the benchledger project "
                "for what every number means."),
    ) as dag:
        planned = t.plan.override(**retried)(path)
        previous = planned
        stops = []
        for arm in sweep.arms:
            plan = sweep.plan(arm)
            for k in range(plan.restarts):
                # A restart's tasks run on the arm's node: its Airflow queue (a Celery or
                # edge worker there). "local" leaves the executor's default queue.
                node = {} if arm.node == "local" else {"queue": arm.node}
                group_args: Any = {**node, **retried}
                with TaskGroup(group_id=f"{arm.name}__r{k}", default_args=group_args):
                    # An XComArg passed to a task is resolved into the value at run time,
                    # which is what the task's annotations describe (Airflow's types
                    # describe the XComArg): Any here.
                    handle: Any = t.launch_server(path, arm.name, k)
                    ready = t.wait_ready(path, arm.name, k, handle)
                    measures = [
                        t.measure.override(task_id=f"measure_{w.name}")(
                            path, arm.name, k, handle, w.name)
                        for w in sweep.workloads
                    ]
                    stop = t.stop_server(arm.name, k, handle)
                    chain(ready, *measures, stop)
                    stop.as_teardown(setups=handle)
                    last = _other_nodes(path, arm, k, handle, ready, stop, retried)
                # Restarts run one after another: two servers measured at once would
                # compete for the node and distort each other.
                previous >> handle
                previous = last
                stops.append(last)
        loaded = t.load.override(**retried)(planned)
        stops >> loaded
        derived = t.derive.override(outlets=[t.entries_asset(sweep.sweep.name)],
                                    **NEVER_RETRIED)(sweep.sweep.name)
        chain(loaded, t.validate.override(**NEVER_RETRIED)(), derived,
              t.finalize.override(**NEVER_RETRIED)(path))
    return dag


def _other_nodes(path: str, arm: Any, k: int, handle: Any, ready: Any, stop: Any,
                 retried: dict) -> Any:
    """The tasks of a deployment's other nodes, each on its node's queue: its launch after
    the head's (it may need the head's address and port) and before the wait for the
    head's readiness; its stop (the teardown of its launch) after the head's stop (a
    distributed engine may end with its workers: stopped first, they would make the head
    look crashed); then settle_restart, which folds every node's record into the
    restart's. Returns the restart's last task (the head's stop for a one-node arm, or for
    an external deployment, whose nodes are only read)."""
    if not arm.processes or arm.server == "external":
        return stop
    node_stops = []
    for process in arm.processes:
        queue: Any = {"queue": process.node, **retried}
        launched: Any = t.launch_node.override(task_id=f"launch_node_{process.node}", **queue)(
            path, arm.name, k, process.node, handle)
        stopped = t.stop_node.override(task_id=f"stop_node_{process.node}", **queue)(
            arm.name, k, process.node, launched)
        launched >> ready
        stop >> stopped
        stopped.as_teardown(setups=launched)
        node_stops.append(stopped)
    settled = t.settle_restart(path, arm.name, k)
    node_stops >> settled
    return settled


def build_publish_dag(sweep_path: str | Path, warehouse: str | None = None,
                      data_dir: str | None = None) -> DAG:
    """The sweep's publish DAG: data-aware, it runs whenever a run's entries are derived."""
    sweep = load_sweep(Path(sweep_path).resolve())
    with DAG(
        dag_id=sweep.publish_dag_id,
        description=f"Export the validated entries of sweep {sweep.sweep.name}",
        schedule=[t.entries_asset(sweep.sweep.name)],
        start_date=datetime(2026, 1, 1),
        catchup=False,
        max_active_runs=1,
        default_args={"on_failure_callback": t.record_failure},
        tags=["benchledger", f"sweep:{sweep.sweep.name}", "publish"],
        params={
            **_target_params(warehouse, data_dir),
            "publish_run_id": Param(None, type=["null", "string"],
                                    description="run to export (default: the triggering "
                                                "asset event's, else the latest)"),
        },
    ) as dag:
        t.publish.override(**NEVER_RETRIED)()
    return dag
