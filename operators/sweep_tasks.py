"""Thin Airflow tasks over the core: each one resolves its run's paths and calls one function.

Nothing here decides what a number means; that lives in benchledger/ (measurement),
expectations/ (rules) and warehouse/ (loading, derivation). Heavy imports (GX, DuckDB,
pandas) happen inside task bodies, never at DAG parse time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from airflow.sdk import Asset, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException

from benchledger.operators import FAILURES_ENV as FAILURES_ENV  # one name, runner and tasks
from benchledger.operators import lineage
from benchledger.raw.layout import Attempt, RunLayout
from benchledger.settings import settings, variable
from benchledger.warehouse import WAREHOUSE_POOL

if TYPE_CHECKING:  # pyarrow: never imported while a DAG file is parsed
    from airflow.sdk import Connection, Context

    from benchledger.raw.store import RawStorage, S3Settings
    from benchledger.sweep.spec import Sweep

log = logging.getLogger(__name__)


S3_CONN_ENV = variable("s3_conn_id")


@dataclass(frozen=True)
class RunPaths:
    run_id: str
    data_dir: Path  # this node's folder of the run's files (the store's local copy)
    warehouse: Path
    storage: RawStorage


def run_paths() -> RunPaths:
    """Where this DAG run writes: DAG params (or run conf), else env, else ~/.benchledger.
    A path or a file:// URL on a file system every node sees (benchledger.raw.records), or an
    s3:// object store (benchledger.raw.store) with this node's copy in a local folder."""
    from benchledger.raw.records import storage_path
    from benchledger.raw.store import is_object_store, resolve

    context = get_current_context()
    params = context.get("params") or {}
    current = settings()
    data_dir = params.get("data_dir") or current.data_dir or current.home
    try:
        storage = resolve(data_dir, _s3_settings() if is_object_store(data_dir) else None)
        warehouse = (params.get("warehouse") or current.warehouse
                     or storage.local / "warehouse.duckdb")
        return RunPaths(run_id=context["run_id"], data_dir=storage.local,
                        warehouse=storage_path(warehouse), storage=storage)
    except ValueError as exc:  # a setting, not a passing fault: retrying cannot help
        raise AirflowFailException(str(exc)) from exc


def _s3_settings() -> S3Settings:
    """The object store's endpoint and credentials: the Airflow connection named by
    BENCHLEDGER_S3_CONN_ID (an `aws` connection: login, password, extra endpoint_url and
    region_name), else the environment. Never logged, never recorded."""
    from benchledger.raw.store import S3Settings

    conn_id = settings().s3_conn_id
    if not conn_id:
        return S3Settings.from_env()
    from airflow.sdk import Connection

    return s3_settings_of(Connection.get(conn_id))


def s3_settings_of(conn: Connection) -> S3Settings:
    """S3Settings from an Airflow connection (the fields the Amazon provider's `aws`
    connection uses), the environment filling what it leaves out."""
    from benchledger.raw.store import S3Settings

    extra = conn.extra_dejson or {}
    env = S3Settings.from_env()
    return S3Settings(
        endpoint_url=extra.get("endpoint_url") or conn.host or env.endpoint_url,
        access_key=conn.login or extra.get("aws_access_key_id") or env.access_key,
        secret_key=conn.password or extra.get("aws_secret_access_key") or env.secret_key,
        session_token=extra.get("aws_session_token") or env.session_token,
        region=extra.get("region_name") or env.region)


def record_failure(context: Context) -> None:
    """on_failure_callback of every task: one JSON line per failed task (which task, the
    error it raised) in the file FAILURES_ENV names. `benchledger run` prints the first
    one, so a cause is not left in the task log behind a later symptom. Without the
    variable (a scheduler) the task log and the UI already show it."""
    path = settings().failures_file
    if not path:
        return
    exc = context.get("exception")
    if isinstance(exc, AirflowFailException):
        error = str(exc)  # the carrier of a message written for people
    elif exc is not None:
        error = f"{type(exc).__name__}: {exc}"
    else:
        error = "failed without an exception (see the task log)"
    ti = context.get("ti") or context.get("task_instance")
    record = {"dag_id": getattr(context.get("dag"), "dag_id", None),
              "run_id": context.get("run_id"), "task_id": getattr(ti, "task_id", None),
              "error": error, "at": datetime.now(UTC).isoformat()}
    with open(path, "a", encoding="utf-8") as failures:
        failures.write(json.dumps(record, default=str) + "\n")


@contextmanager
def _restart_files(arm: str, restart_index: int) -> Iterator[tuple[RunLayout, Callable]]:
    """A restart task's layout, with what other nodes stored for the restart pulled first
    (an object store) and what this task wrote pushed when it ends, failed or not; the
    callable pushes at once (measure: after each window)."""
    from benchledger.raw.store import StoredFileMismatch, pull_restart, push_restart

    paths = run_paths()
    layout = RunLayout(paths.data_dir, paths.run_id)
    try:  # a store out of reach is retried (RawStoreError); a damaged file is not
        pull_restart(paths.storage, layout, arm, restart_index)
    except StoredFileMismatch as exc:
        raise AirflowFailException(str(exc)) from exc

    def push() -> None:
        push_restart(paths.storage, layout, arm, restart_index)

    try:
        yield layout, push
    finally:
        push()


@contextmanager
def _teardown_files(arm: str, restart_index: int,
                    record: Callable[[RunLayout], Path]) -> Iterator[RunLayout]:
    """A teardown's layout. A node that holds the record of what it stops (`record`: the
    manifest its launch wrote here) stops it first and touches the object store only
    after: nothing that can fail on storage comes before a server's stop (issue #39: a
    store out of reach mid-window failed the pull of the teardown, and the server under
    test outlived the run, holding its GPU). A storage failure is raised after the stop,
    and a retry finds the stop recorded. A node without that record launched nothing here:
    it pulls the record first, as every other restart task does."""
    from benchledger.raw.store import RawStoreError, StoredFileMismatch, push_restart

    paths = run_paths()
    layout = RunLayout(paths.data_dir, paths.run_id)
    if paths.storage.store is None or not record(layout).is_file():
        with _restart_files(arm, restart_index) as (pulled, _):
            yield pulled
        return
    try:
        yield layout
    finally:
        try:
            push_restart(paths.storage, layout, arm, restart_index)
        except StoredFileMismatch as exc:
            raise AirflowFailException(str(exc)) from exc
        except RawStoreError as exc:  # retried: the stop is recorded here already
            raise RawStoreError(f"{arm} r{restart_index}: stopped, but its record could not "
                                f"be stored: {exc}") from exc


def _recorded(layout: RunLayout, sweep_path: str) -> tuple[Sweep, str]:
    """The sweep as plan recorded it in the run manifest (parsed once, sha256 checked): every
    task of a run measures the sweep its `runs` row names. (sweep, sha256)."""
    from benchledger.restart.steps import RecordMismatch, recorded_sweep

    try:
        return recorded_sweep(layout, Path(sweep_path))
    except RecordMismatch as exc:  # a damaged record: a retry reads the same file
        raise AirflowFailException(str(exc)) from exc


@task
def plan(sweep_path: str) -> str:
    """Validate the sweep file and record the run; returns the run's raw folder."""
    from benchledger.raw.store import push_run_manifest
    from benchledger.restart.steps import write_run_manifest
    from benchledger.restart.workload_files import WorkloadError

    paths = run_paths()
    layout = RunLayout(paths.data_dir, paths.run_id)
    scheduled_for, previous = _schedule_slots()
    try:
        write_run_manifest(layout, Path(sweep_path), scheduled_for, previous)
    except WorkloadError as exc:  # a bad dataset or trace: a retry reads the same file
        raise AirflowFailException(str(exc)) from exc
    push_run_manifest(paths.storage, layout)
    return str(layout.run_dir)


def _schedule_slots() -> tuple[datetime | None, datetime | None]:
    """A scheduled run's slot (its logical date) and the previous successful run's, from
    which the slots Airflow skipped between them are counted; (None, None) for a manual
    run (its logical date is when it was triggered, not a slot)."""
    context = get_current_context()
    run_type = getattr(context.get("dag_run"), "run_type", None)
    logical = context.get("logical_date")
    if getattr(run_type, "value", run_type) != "scheduled" or logical is None:
        return None, None
    previous: datetime | None
    try:  # a lazy proxy: asks the API for the previous successful run
        found = context.get("prev_data_interval_end_success")
        previous = datetime.fromtimestamp(found.timestamp(), UTC) if found else None
    except Exception:  # noqa: BLE001 - no earlier successful run, or none to be had
        previous = None
    return datetime.fromtimestamp(logical.timestamp(), UTC), previous


def _attempt() -> Attempt:
    """This try of the running task and its worker's hostname, as the task instance
    records them (ti.hostname; the Task SDK's own get_hostname should it be unset)."""
    ti = get_current_context()["ti"]
    hostname = getattr(ti, "hostname", None)
    if not hostname:
        from airflow.sdk.api.client import get_hostname

        hostname = get_hostname()
    return Attempt(number=ti.try_number, worker_hostname=hostname)


# Marked as the setup of stop_server by the DAG factory (`stop.as_teardown(setups=...)`);
# the @setup/@teardown decorators cannot be called twice in one DAG in Airflow 3.3.
@task
def launch_server(sweep_path: str, arm: str, restart_index: int,
                  pin_queue: str | None = None) -> dict | None:
    """Start the server (returns at once): its handle, or None when the launch failed.
    Never raises once the restart's queue is pinned to this worker (pin_queue, where
    several workers serve the node: operators/worker_pin.py): a failed launch is recorded
    in its restart manifest and reported by wait_ready, so the teardown still runs and
    later restarts still go."""
    from benchledger.restart.steps import launch_restart

    _pin(pin_queue)
    with _restart_files(arm, restart_index) as (layout, _):
        sweep, sha256 = _recorded(layout, sweep_path)  # no record: nothing is launched
        try:
            return launch_restart(layout, sweep, arm, restart_index, _attempt(), sha256,
                                  Path(sweep_path))
        except Exception:  # recorded in the restart manifest by launch_restart
            return None


@task
def wait_ready(sweep_path: str, arm: str, restart_index: int, handle: dict | None) -> dict:
    from benchledger.restart.steps import await_restart, launch_failure
    from benchledger.server.lifecycle import ServerNotReady

    with _restart_files(arm, restart_index) as (layout, _):
        if handle is None:
            raise AirflowFailException(f"{arm} r{restart_index}: "
                                       f"{launch_failure(layout, arm, restart_index)}")
        sweep, _ = _recorded(layout, sweep_path)
        try:
            manifest = await_restart(layout, sweep, arm, restart_index, handle)
        except ServerNotReady as exc:
            raise AirflowFailException(f"{arm} r{restart_index}: {exc}") from exc
    return {k: manifest.get(k) for k in ("status", "server_version", "effective_config_sha256")}


@task
def measure(sweep_path: str, arm: str, restart_index: int, handle: dict,
            workload: str) -> list[dict]:
    """Warm-up, then the measured window(s) of one workload; writes raw files. A retry
    measures only the windows no earlier attempt wrote whole."""
    from benchledger.client import TokenCountUnavailable
    from benchledger.raw.store import pull_restart
    from benchledger.restart.rate_search import SearchNotRecorded
    from benchledger.restart.steps import ServerCrashed, measure_restart_workload
    from benchledger.restart.workload_files import PreparedFileMismatch

    with _restart_files(arm, restart_index) as (layout, push):
        sweep, sha256 = _recorded(layout, sweep_path)
        if restart_index > 0 and sweep.arm(arm).rate_search is not None:
            # the rates restart 0 searched, wherever it ran (an object store: its record)
            pull_restart(run_paths().storage, layout, arm, 0)
        try:
            return measure_restart_workload(layout, sweep, arm, restart_index, handle,
                                            workload, _attempt(), sha256, after_window=push)
        except TokenCountUnavailable as exc:
            # The server gives no count of the arm's kind: a setting to change, which a
            # retry would only meet again.
            raise AirflowFailException(str(exc)) from exc
        except ServerCrashed as exc:
            # A crash is a result (the restart is recorded `crashed`): a retry would only
            # meet the dead server again, and a new server would be another restart.
            raise AirflowFailException(str(exc)) from exc
        except PreparedFileMismatch as exc:  # not the requests the run planned
            raise AirflowFailException(str(exc)) from exc
        except SearchNotRecorded as exc:  # restart 0 is over: a retry reads the same record
            raise AirflowFailException(str(exc)) from exc


@task
def stop_server(arm: str, restart_index: int, handle: dict | None,
                unpin_queue: str | None = None) -> dict:
    """Always runs after launch: SIGTERM, then SIGKILL, the server's process group; before
    anything that touches an object store (_teardown_files)."""
    from benchledger.restart.steps import stop_restart

    with _teardown_files(arm, restart_index,
                         lambda layout: layout.restart_manifest(arm, restart_index)) as layout:
        manifest = stop_restart(layout, arm, restart_index, handle)
    _unpin(unpin_queue)
    return {k: manifest.get(k) for k in ("status", "stop_status")}


def _pin(queue: str | None) -> None:
    if queue:
        from benchledger.operators import worker_pin

        worker_pin.pin(queue, _attempt().worker_hostname or "")


def _unpin(queue: str | None) -> None:
    """The restart's last task on this worker: its queue served no longer. A failure is
    only logged: the queue has no task left, and the worker drops it when it registers."""
    if queue:
        from benchledger.operators import worker_pin

        try:
            worker_pin.unpin(queue, _attempt().worker_hostname or "")
        except Exception as exc:  # noqa: BLE001 - any failure of the API call
            log.warning("could not remove the queue %s from this worker: %s", queue, exc)


# An arm whose deployment spans nodes: one launch and one stop per further node, each on
# that node's queue (the DAG factory names them launch_node_<node> and stop_node_<node>).
@task
def launch_node(sweep_path: str, arm: str, restart_index: int, node: str,
                head: dict | None, pin_queue: str | None = None) -> dict | None:
    """Start this node's process of the deployment (returns at once): its handle, or None
    when nothing was started. Never raises: a failed launch is in the node's manifest and
    wait_ready reports it, so every teardown still runs."""
    from benchledger.restart.deployment import launch_node as launch

    _pin(pin_queue)
    with _restart_files(arm, restart_index) as (layout, _):
        sweep, _ = _recorded(layout, sweep_path)
        try:
            return launch(layout, sweep, arm, restart_index, node, head, _attempt(),
                          Path(sweep_path))
        except Exception:  # recorded in the node's manifest where it could be written
            return None


@task
def stop_node(arm: str, restart_index: int, node: str, handle: dict | None,
              unpin_queue: str | None = None) -> dict:
    """Always runs after this node's launch: stops its process, notes one found dead."""
    from benchledger.restart.deployment import stop_node as stop

    with _teardown_files(arm, restart_index, lambda layout: layout.node_manifest(
            arm, restart_index, node)) as layout:
        manifest = stop(layout, arm, restart_index, node, handle)
    _unpin(unpin_queue)
    return {k: manifest.get(k) for k in ("status", "stop_status")}


@task(trigger_rule="all_done")
def settle_restart(sweep_path: str, arm: str, restart_index: int,
                   unpin_queue: str | None = None) -> dict:
    """The restart's last step: every node's record folded into the restart's manifest (a
    process that died on any node makes the restart crashed, naming the node)."""
    from benchledger.restart.deployment import settle_restart as settle

    with _restart_files(arm, restart_index) as (layout, _):
        manifest = settle(layout, _recorded(layout, sweep_path)[0], arm, restart_index)
    _unpin(unpin_queue)
    return {k: manifest.get(k) for k in ("status", "crashed_node", "error")}


# A short-circuit (issue #41, item 5): False skips the next block's launches, and with them
# (trigger rules) every later restart; load runs whatever happened (all_done). It runs
# after a failed restart too: that restart's entries are blocked, so no comparison they
# feed is decided, and the sweep goes on.
@task.short_circuit(ignore_downstream_trigger_rules=False, trigger_rule="all_done")
def interim_look(sweep_path: str, blocks: int) -> bool:
    """A sequential sweep's look after `blocks` blocks (warehouse/interim.py): True lets
    the next block start, False skips every block left (every comparison is decided)."""
    from benchledger.raw.layout import LOOKS_DIR
    from benchledger.raw.store import push_folder
    from benchledger.warehouse.interim import take_look

    paths = run_paths()
    layout = _pulled(paths)
    sweep, sha256 = _recorded(layout, sweep_path)
    stop = take_look(layout, sweep, blocks, sha256)
    push_folder(paths.storage, layout.run_dir / LOOKS_DIR)
    log.info("after %d blocks: %s", blocks, "every comparison decided, the remaining "
             "blocks are skipped" if stop else "not every comparison decided, going on")
    return not stop


@lineage.lineage_task(pool=WAREHOUSE_POOL, trigger_rule="all_done")
def load(run_dir: str | None = None) -> dict:
    """Load the run's raw files into DuckDB (idempotent by file sha256).

    `run_dir` (plan's output) only ties this task to plan; the layout says where to read.
    """
    from benchledger.warehouse.db import connect
    from benchledger.warehouse.load import load_run_dir

    paths = run_paths()
    layout = _pulled(paths)
    if not layout.run_manifest.exists():
        raise AirflowFailException(f"no run manifest at {layout.run_manifest}: plan did not run")
    with connect(paths.warehouse) as con:
        counts = load_run_dir(con, layout.run_dir, paths.storage.recorded_path)
    lineage.report_load(layout.run_dir, paths.warehouse)
    return counts


def _pulled(paths: RunPaths) -> RunLayout:
    """The run's layout, every raw file the object store holds for it copied here first
    (nothing to do without a store)."""
    from benchledger.raw.store import StoredFileMismatch, pull_run

    layout = RunLayout(paths.data_dir, paths.run_id)
    try:  # a store out of reach is retried (RawStoreError); a damaged file is not
        pulled = pull_run(paths.storage, layout)
    except StoredFileMismatch as exc:
        raise AirflowFailException(str(exc)) from exc
    if paths.storage.store is not None:
        log.info("%d raw files copied from %s", pulled, paths.storage.location)
    return layout


@lineage.lineage_task(pool=WAREHOUSE_POOL)
def validate() -> dict:
    """Run the GX gate over the run's rows; every result becomes a `validations` row."""
    from benchledger.warehouse.db import connect
    from benchledger.warehouse.validate import validate_run

    paths = run_paths()
    layout = RunLayout(paths.data_dir, paths.run_id)
    with connect(paths.warehouse) as con:
        results = validate_run(con, paths.run_id, docs_dir=layout.data_docs_dir)
    lineage.report_validate(paths.warehouse, layout.data_docs_dir, layout.run_dir)
    return results


def entries_asset(sweep_name: str) -> Asset:
    """Updated when a run's entries are derived; the sweep's publish DAG runs on it."""
    return Asset(name=f"benchledger_entries_{sweep_name}",
                 uri=f"benchledger://entries/{sweep_name}")


@lineage.lineage_task(pool=WAREHOUSE_POOL)
def derive(sweep_name: str) -> dict:
    """Derive entries from validated rows (blocked ones say why), then the comparisons;
    then tell the publish DAG (asset event) which run and warehouse to export."""
    from benchledger.warehouse.compare import derive_comparisons
    from benchledger.warehouse.db import connect, mark_run_ended, recorded_sweep
    from benchledger.warehouse.derive import derive_entries
    from benchledger.warehouse.frontier import derive_frontier

    paths = run_paths()
    docs = RunLayout(paths.data_dir, paths.run_id).data_docs_dir
    with connect(paths.warehouse) as con:
        sweep = recorded_sweep(con, paths.run_id)  # parsed once, for both
        counts = {"entries": derive_entries(con, paths.run_id, docs_dir=docs, sweep=sweep),
                  "comparisons": derive_comparisons(con, paths.run_id, sweep),
                  "frontier": derive_frontier(con, paths.run_id, sweep)}
        mark_run_ended(con, paths.run_id)
    lineage.report_derive(paths.warehouse, docs)
    outlet_events = get_current_context()["outlet_events"]
    outlet_events[entries_asset(sweep_name)].extra = {
        "run_id": paths.run_id, "warehouse": str(paths.warehouse),
        "data_dir": str(paths.data_dir)}
    return counts


@lineage.lineage_task(pool=WAREHOUSE_POOL)
def regression_gate(sweep_name: str, metrics: list[str], min_change: float = 0.0) -> dict:
    """Hold this run's headline entries (of `metrics`; none named: all) to the sweep's
    previous run of the same configuration and its A/A control, changes under
    `min_change` (relative) let pass; every verdict becomes a
    `regression_checks` row, and the task fails where any entry regressed (a result:
    never retried)."""
    from benchledger.warehouse.db import connect
    from benchledger.warehouse.history import REGRESSION, check_regressions

    paths = run_paths()
    with connect(paths.warehouse) as con:
        checks = check_regressions(con, paths.run_id, sweep_name, metrics, min_change)
    regressed = checks[checks["verdict"] == REGRESSION]
    if len(regressed):
        lines = [f"{r.arm} / {r.workload} {r.metric} {r.statistic} {r.load_point}: "
                 f"{r.previous_restart_mean:.4g} -> {r.restart_mean:.4g} {r.unit} "
                 f"(run {r.previous_run_id}); {r.reason}" for r in regressed.itertuples()]
        raise AirflowFailException("regressed beyond the A/A control:\n  " + "\n  ".join(lines))
    return checks["verdict"].value_counts().to_dict()


def _publication_target() -> tuple[str | None, Path, Path]:
    """Which run to publish: the asset event that triggered this run, else the params
    (benchledger run/publish pass them), else the warehouse's latest run."""
    context = get_current_context()
    events = context.get("triggering_asset_events") or {}
    for asset_events in events.values():
        for event in asset_events:
            extra = event.extra or {}
            if {"run_id", "warehouse", "data_dir"} <= set(extra):
                return extra["run_id"], Path(extra["warehouse"]), Path(extra["data_dir"])
    params = context.get("params") or {}
    paths = run_paths()
    return params.get("publish_run_id"), paths.warehouse, paths.data_dir


# In the warehouse pool too: a reader cannot open the DuckDB file while a writer holds it.
@lineage.lineage_task(pool=WAREHOUSE_POOL)
def publish() -> dict:
    """Export one run's validated entries, comparisons and report (read-only). Fails when
    the run is not in the warehouse or has no derived entries: nothing to publish is a
    failure to say out loud, not an empty entries.json."""
    from benchledger.publishing.export import PublicationError, publish_run
    from benchledger.warehouse.db import connect

    run_id, warehouse, data_dir = _publication_target()
    try:
        with connect(warehouse, read_only=True) as con:
            done = publish_run(con, run_id,
                               lambda run: RunLayout(data_dir, run).export_dir)
    except (PublicationError, LookupError) as exc:
        raise AirflowFailException(f"publishing run {run_id}: {exc}") from exc
    lineage.report_publish(warehouse, done.out)
    return {"run_id": done.run_id, "out": str(done.out), **done.counts}


@task
def finalize(sweep_path: str) -> str:
    """Fail the DAG run visibly when any restart or window of the plan went wrong."""
    from benchledger.restart.steps import run_problems

    layout = _pulled(run_paths())
    problems = run_problems(layout, _recorded(layout, sweep_path)[0])
    if problems:
        raise AirflowFailException("run finished with problems:\n  " + "\n  ".join(problems))
    return "every restart and window of the plan completed"
