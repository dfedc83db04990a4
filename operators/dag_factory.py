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
from benchledger.operators.worker_pin import restart_queue
from benchledger.sweep.order import looks_after, restart_slots
from benchledger.sweep.spec import Sweep, load_sweep


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


def sweep_retries(sweep: Sweep) -> dict[str, Any]:
    """The sweep's retry settings, for tasks whose failure is an error (a lost connection,
    a killed worker, a locked warehouse): a retry rewrites only its own files, measures
    only windows no attempt wrote, loads only what is not loaded: no record twice."""
    return {"retries": sweep.sweep.retries,
            "retry_delay": timedelta(seconds=sweep.sweep.retry_delay_s)}


def build_sweep_dag(sweep_path: str | Path, warehouse: str | None = None,
                    data_dir: str | None = None, one_host: bool = False,
                    pin_restarts: bool = False) -> DAG:
    """The sweep's DAG. one_host: every node is one machine (an embedded run), so every
    restart waits for the one before, whatever nodes the arms name. pin_restarts: several
    Edge workers serve a node's queue, so each restart's tasks after its launch go to a
    queue of the restart's own, served by the launch's worker (operators/worker_pin.py)."""
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
        # An XComArg, resolved into plan's str when load runs (see handle below): Any here.
        planned: Any = t.plan.override(**retried)(path)
        last_on: dict[str, Any] = {}  # node -> the end of the last restart that used it
        stops = []
        # A sequential sweep's interim looks (max_restarts): after each block from the
        # minimum restarts on, a short-circuit. A short-circuit skips only the tasks right
        # after it, and Airflow ignores a teardown (stop_server) when it weighs the trigger
        # rule of the task after it, so a skipped restart would not skip the next one: every
        # later launch, and every later look, is a direct downstream of every look.
        look_after = set(looks_after(sweep))
        looks: list[Any] = []
        ends: dict[int, list[Any]] = {}  # block -> the ends of its restarts
        # The restarts in the sweep's order (benchledger.sweep.order): by default in blocks,
        # restart k of every arm in block k, so drift during the sweep touches every arm.
        for slot in restart_slots(sweep):
            if slot.block - 1 in look_after and slot.block - 1 in ends:  # a block's first
                look = t.interim_look.override(task_id=f"interim_look_after_{slot.block}",
                                               **retried)(path, slot.block)
                [*ends.pop(slot.block - 1), *looks] >> look
                looks.append(look)
            arm, k = sweep.arm(slot.arm).arm, slot.k
            # Two servers measured at once on one node would compete for it and distort
            # each other: a restart waits for the last restart on each node it uses.
            # Nodes apart run at once, unless the sweep says they must not; each node
            # keeps the sweep's order among its own restarts.
            uses = ([arm.node, *(p.node for p in arm.processes)]
                    if sweep.sweep.nodes_in_parallel and not one_host else ["every node"])
            # A restart's tasks run on the arm's node: its Airflow queue (a Celery or
            # edge worker there). "local" leaves the executor's default queue. Where
            # several workers serve a node, every task after the launch goes to the
            # restart's own queue, pinned to the launch's worker (worker_pin.py).
            group = f"{arm.name}__r{k}"
            pins = _Pins(dag.dag_id, group, pin_restarts and arm.node != "local")
            node = {} if arm.node == "local" else {"queue": arm.node}
            head = pins.queue_args(arm.node)
            group_args: Any = {**node, **retried}
            with TaskGroup(group_id=group, default_args=group_args):
                # An XComArg passed to a task is resolved into the value at run time,
                # which is what the task's annotations describe (Airflow's types
                # describe the XComArg): Any here.
                handle: Any = t.launch_server(path, arm.name, k,
                                              pins.pin_queue(arm.node))
                ready = t.wait_ready.override(**head)(path, arm.name, k, handle)
                measures = [
                    t.measure.override(task_id=f"measure_{w.name}", **head)(
                        path, arm.name, k, handle, w.name)
                    for w in sweep.workloads
                ]
                # settle_restart, the last task of a deployment across nodes, unpins
                stop = t.stop_server.override(**head)(
                    arm.name, k, handle,
                    None if _starts_other_nodes(arm) else pins.pin_queue(arm.node))
                chain(ready, *measures, stop)
                stop.as_teardown(setups=handle)
                last = _other_nodes(path, arm, k, handle, ready, stop, retried, pins)
            before = {id(task): task for node in uses
                      if (task := last_on.get(node)) is not None}
            for task in [*before.values(), *looks] or [planned]:
                task >> handle
            last_on.update(dict.fromkeys(uses, last))
            stops.append(last)
            ends.setdefault(slot.block, []).append(last)
        loaded = t.load.override(**retried)(planned)
        stops >> loaded
        derived = t.derive.override(outlets=[t.entries_asset(sweep.sweep.name)],
                                    **NEVER_RETRIED)(sweep.sweep.name)
        chain(loaded, t.validate.override(**NEVER_RETRIED)(), derived,
              t.finalize.override(**NEVER_RETRIED)(path))
        gated = sweep.sweep.gated_metrics
        if gated is not None:  # beside finalize: either failing fails the run
            derived >> t.regression_gate.override(**NEVER_RETRIED)(
                sweep.sweep.name, gated, sweep.sweep.regression_min_change)
    return dag


def _starts_other_nodes(arm: Any) -> bool:
    """Whether the arm's restarts start processes on other nodes (an external deployment's
    nodes are only read)."""
    return bool(arm.processes) and arm.starts_processes


class _Pins:
    """The restart's own queue on each of its nodes, when restarts are pinned."""

    def __init__(self, dag_id: str, group: str, pinned: bool):
        self.dag_id, self.group, self.pinned = dag_id, group, pinned

    def pin_queue(self, node: str) -> str | None:
        return restart_queue(node, self.dag_id, self.group) if self.pinned else None

    def queue_args(self, node: str) -> dict[str, Any]:
        """A task's queue on the node after the launch: the restart's own, when pinned."""
        queue = self.pin_queue(node)
        return {"queue": queue} if queue else {}


def _other_nodes(path: str, arm: Any, k: int, handle: Any, ready: Any, stop: Any,
                 retried: dict, pins: _Pins) -> Any:
    """The tasks of a deployment's other nodes, each on its node's queue: its launch after
    the head's (it may need the head's address and port) and before the wait for the
    head's readiness; its stop (the teardown of its launch) after the head's stop (a
    distributed engine may end with its workers: stopped first, they would make the head
    look crashed); then settle_restart, which folds every node's record into the
    restart's. Returns the restart's last task (the head's stop for a one-node arm, or for
    an external deployment, whose nodes are only read)."""
    if not _starts_other_nodes(arm):
        return stop
    node_stops = []
    for process in arm.processes:
        queue: Any = {"queue": process.node, **retried}
        after: Any = {**queue, **pins.queue_args(process.node)}
        launched: Any = t.launch_node.override(task_id=f"launch_node_{process.node}", **queue)(
            path, arm.name, k, process.node, handle, pins.pin_queue(process.node))
        stopped = t.stop_node.override(task_id=f"stop_node_{process.node}", **after)(
            arm.name, k, process.node, launched, pins.pin_queue(process.node))
        launched >> ready
        stop >> stopped
        stopped.as_teardown(setups=launched)
        node_stops.append(stopped)
    settled = t.settle_restart.override(**pins.queue_args(arm.node))(
        path, arm.name, k, pins.pin_queue(arm.node))
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
