"""One restart slot (arm x restart index) from launch to stop, writing raw files only.

Each step is one Airflow task (operators/ wraps these); every step leaves its facts in the
slot's manifest (benchledger.restart.manifest) before it returns or raises, so a failed
launch, a server that never became healthy or one that crashed mid-window is recorded,
never lost. Where the files go is benchledger.raw.layout's; how a window's files are written
whole, benchledger.restart.window_write's.

The sweep a step works on is the text `plan` recorded in the run manifest (`recorded_sweep`,
benchledger.restart.run_record), parsed once per task and checked against the sha256 recorded
beside it: every step of a run measures the sweep the warehouse's `runs` row names, even if
the file changed meanwhile.

Retries (Airflow's, per the sweep's [sweep] retries): a retried measure step keeps every
window an earlier attempt wrote whole and measures only the others, so each window is
measured once, by the attempt that completed it (its manifest says which, and on which
worker). An attempt marks a window `.started` before measuring it and removes the mark once
the window's files are in place; a mark found later (by a retry, or by the teardown) means
an attempt that started the window and left no files for it, and goes to the restart
manifest's `interrupted_windows`, so the requests it lost are on record.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from benchledger.client import (
    Target,
    TokenCountUnavailable,
    WindowResult,
    WindowSpec,
    measure_window,
    progress,
)
from benchledger.client.items import Items
from benchledger.prompts import load_prompt_set
from benchledger.raw import layout as raw
from benchledger.raw.layout import NO_ATTEMPT, Attempt, RunLayout, WindowFiles
from benchledger.redaction import redact
from benchledger.restart import deployment
from benchledger.restart.deployment import as_written
from benchledger.restart.manifest import (
    RawWriteError,
    RestartRecord,
    ServerCrashed,
    fold_leftover_marks,
    utc_now,
)
from benchledger.restart.rate_search import search_or_repeat, searched_points
from benchledger.restart.run_record import RecordMismatch, recorded_sweep, write_run_manifest
from benchledger.restart.window_write import write_window, written_window
from benchledger.restart.workload_files import window_items
from benchledger.server import lifecycle, telemetry
from benchledger.server.observe import LogSlice, MetricsScrape, observe_all, server_family
from benchledger.sweep import order
from benchledger.sweep.slos import LoadPoint
from benchledger.sweep.spec import (
    Arm,
    ArmPlan,
    Sweep,
)

log = logging.getLogger(__name__)

__all__ = ["RawWriteError", "ServerCrashed", "launch_restart", "await_restart",
           "measure_restart_workload", "stop_restart", "run_problems",
           "stop_leftover_servers", "write_run_manifest", "recorded_sweep", "RecordMismatch",
           "launch_failure"]


# --- launch and readiness -------------------------------------------------------------------


def _api_key(record: RestartRecord, arm: Arm) -> str | None:
    """The arm's API key for this step; a missing one fails the restart, recorded."""
    try:
        return lifecycle.resolve_api_key(arm)
    except lifecycle.ApiKeyMissing as exc:
        record.update(status="failed", error=str(exc))
        raise


def launch_restart(layout: RunLayout, sweep: Sweep, arm_name: str, k: int,
                   attempt: Attempt = NO_ATTEMPT, sweep_sha256: str | None = None,
                   sweep_path: Path | None = None) -> dict[str, Any]:
    """Start the server for one slot; the manifest records the attempt whatever happens.

    `node` is this machine's hostname, `requested_node` the arm's node (its Airflow queue)
    and `worker_hostname` the worker as Airflow records it, side by side. A retried launch
    first stops the server an earlier, killed attempt started (two servers of one slot
    would share the node's GPU). A command whose secrets the run did not record is read
    from the sweep file (`as_written`); what is recorded of it is redacted again."""
    arm = sweep.arm(arm_name).arm
    record = RestartRecord(layout, arm_name, k)
    earlier = record.read()
    slot = order.slot_of(sweep, arm_name, k)
    launching: raw.RestartManifest = {
        "restart_id": record.restart_id, "run_id": layout.run_id, "arm": arm_name,
        "restart_index": k, "block": slot.block, "block_position": slot.position,
        "restart_order": sweep.sweep.restart_order, "order_seed": order.order_seed(sweep),
        "node": socket.gethostname(), "requested_node": arm.node,
        "worker_hostname": attempt.worker_hostname, "launch_attempt": attempt.number,
        "server_kind": arm.server, "single_instance": not arm.starts_processes,
        "sweep_sha256": sweep_sha256,
        "interrupted_windows": earlier.get("interrupted_windows", []),
        **_stop_earlier_launch(earlier), "started_at": utc_now(), "status": "launching",
    }
    record.update(**launching)
    _api_key(record, arm)  # checked before a server is started for nothing
    try:
        seed = lifecycle.instance_seed(sweep.sweep.name, arm_name, k)
        handle = lifecycle.launch(as_written(layout, arm, sweep_path),
                                  layout.server_log(arm_name, k), seed, k)
    except Exception as exc:
        record.update(status="failed", error=f"launch failed: {exc}")
        raise
    record.update(status="launched", pid=handle.pid, base_url=handle.base_url,
                  command=handle.command, log_path=handle.log_path,
                  server_mark=handle.mark)
    return handle.to_dict()


def launch_failure(layout: RunLayout, arm_name: str, k: int) -> str:
    """Why the launch of a slot failed, as its manifest says (for the step after it)."""
    manifest = RestartRecord(layout, arm_name, k).read()
    return str(manifest.get("error") or f"launch failed (status {manifest.get('status')})")


def _stop_earlier_launch(manifest: Mapping[str, Any]) -> raw.RestartManifest:
    """The manifest changes for a launch that finds an earlier attempt's server of this
    slot still recorded as running: stop it when it is on this machine and still the
    process that attempt started; either way, list it under `earlier_launches`."""
    pid = manifest.get("pid")
    if not isinstance(pid, int) or pid <= 0 or manifest.get("stopped_at"):
        return {}
    here = socket.gethostname()
    if manifest.get("node") != here:  # a pid names a process on its own machine only
        outcome = f"not stopped: started on {manifest.get('node')}, this attempt runs on {here}"
    else:
        stopped_by = lifecycle.stop_recorded(pid, manifest.get("started_at"),
                                             manifest.get("base_url"), manifest.get("log_path"),
                                             manifest.get("server_mark"))
        outcome = str(stopped_by)
    stopped = {"pid": pid, "started_at": manifest.get("started_at"),
               "node": manifest.get("node"), "worker_hostname": manifest.get("worker_hostname"),
               "attempt": manifest.get("launch_attempt"), "stop_status": outcome}
    return {"earlier_launches": [*manifest.get("earlier_launches", []), stopped],
            "pid": None, "base_url": None}


def await_restart(layout: RunLayout, sweep: Sweep, arm_name: str, k: int,
                  handle: dict[str, Any]) -> raw.RestartManifest:
    """Wait until healthy, then record version, effective config, which probe declared
    the server ready and whose counters its /metrics carries (its server family)."""
    plan = sweep.arm(arm_name)
    record = RestartRecord(layout, arm_name, k)
    server = lifecycle.ServerHandle.from_dict(handle)
    api_key = _api_key(record, plan.arm)
    unlaunched = deployment.launch_problems(layout, sweep, arm_name, k)
    if unlaunched:  # the head alone is not the deployment: nothing to wait for
        error = "the deployment did not start on every node: " + "; ".join(unlaunched)
        record.update(status="failed", error=error)
        raise lifecycle.ServerNotReady(error)
    try:
        ready = lifecycle.wait_ready(server, plan.arm.health_path, plan.ready_timeout_s,
                                     api_key, plan.arm.api_key_env,
                                     _readiness_reports(layout, arm_name, k,
                                                        plan.ready_timeout_s))
    except lifecycle.ServerNotReady as exc:
        record.update(status="failed", error=str(exc))
        raise
    config = lifecycle.describe(server, plan.arm, api_key)
    family, family_source = server_family(
        plan.arm.server_family, server.base_url.rstrip("/") + plan.arm.metrics_path,
        lifecycle.auth_headers(api_key), plan.arm.metrics_timeout_s)
    sources = telemetry.deployment_sources(
        plan, deployment.base_urls(layout, sweep, arm_name, k, server.base_url),
        lifecycle.auth_headers(api_key))
    spanned = deployment.deployment_record(layout, sweep, arm_name, k, record.read(),
                                           telemetry.gpus_of(sources))
    return record.update(
        status=raw.ready_status(plan.arm.server), ready_at=utc_now(),
        deployment=redact(spanned, api_key),
        ready_after_s=ready.waited_s, ready_probe=ready.probe, effective_config=config,
        effective_config_sha256=lifecycle.config_sha256(config),
        server_version=lifecycle.server_version(config), server_family=family,
        server_family_source=redact(family_source, api_key),
    )


# --- measuring ------------------------------------------------------------------------------


def measure_restart_workload(layout: RunLayout, sweep: Sweep, arm_name: str, k: int,
                             handle: dict[str, Any], workload_name: str,
                             attempt: Attempt = NO_ATTEMPT, sweep_sha256: str | None = None,
                             after_window: Callable[[], object] | None = None
                             ) -> list[dict[str, Any]]:
    """Run the workload's windows (one per concurrency) and write their raw files;
    `after_window` is called once each window's files are in place (an object store's
    push: benchledger.raw.store).

    A window an earlier attempt already wrote whole is kept, not measured again. After each
    window the server is checked (lifecycle.server_gone): one that died during it makes the
    restart `crashed` (its raw files are still written) and nothing else runs.
    """
    record = RestartRecord(layout, arm_name, k)
    record.refuse_after_crash()
    plan = sweep.arm(arm_name)
    workload = sweep.workload(workload_name)
    server = lifecycle.ServerHandle.from_dict(handle)
    api_key = _api_key(record, plan.arm)
    target = Target.for_arm(plan.arm, server.base_url, plan.endpoint, api_key)
    items = window_items(layout, sweep, workload_name)  # checked against its sha256

    def measure(point: LoadPoint) -> dict[str, Any]:
        """The point's window: written whole by an earlier attempt, or measured now."""
        window_id = layout.window_id(arm_name, k, workload_name, point)
        written = written_window(layout, arm_name, k, workload_name, point)
        if written is not None:
            log.info("%s: written whole by attempt %s; not measured again", window_id,
                     written.get("attempt"))
            return dict(written)
        files = layout.window_files(arm_name, k, workload_name, point)
        record.mark_started(files, window_id, attempt)
        spec = _window_spec(plan, sweep, workload_name, window_id, point, items)
        observers = _observers(record, sweep, plan, server, api_key)
        try:
            result, observations, gone = _run_window(record, sweep, plan, server, target, spec,
                                                     observers,
                                                     _progress_reports(files, attempt))
        except BaseException:
            raw.remove_quietly(files.progress)  # no window to show as done
            raise
        sampler = observers["telemetry"]
        samples = sampler.table() if sampler.nodes else None  # None: no telemetry source
        manifest = _write_window_recorded(record, workload_name,
                                          workload.prompts if items is None else None,
                                          plan.min_requests, result, observations,
                                          gone[1] if gone else None, api_key, attempt,
                                          sweep_sha256, samples, point)
        # Only once the files are in place: a failure or a kill before leaves the mark.
        raw.remove_quietly(files.started)
        if after_window is not None:
            after_window()
        if gone:
            raise record.crashed(window_id, gone[1], gone[0])
        return dict(manifest)

    if plan.rate_search is None:
        manifests = [measure(point) for point in plan.load_points]
    else:  # restart 0 searches the rates; the others repeat them
        manifests = search_or_repeat(layout, sweep, plan, arm_name, k, workload_name, measure)
    return [_window_summary(manifest) for manifest in manifests]


def _window_spec(plan: ArmPlan, sweep: Sweep, workload_name: str, window_id: str,
                 point: LoadPoint, items: Items | None = None) -> WindowSpec:
    workload = sweep.workload(workload_name)
    concurrency = point.concurrency
    # a rung of a rate ladder, or the arm's one rate (None: closed loop)
    rate_rps = point.rate_rps if point.rate_rps is not None else plan.single_rate_rps
    return WindowSpec(
        window_id=window_id,
        prompts=[] if items is not None else load_prompt_set(workload.prompts),
        requests=plan.requests, warmup=plan.warmup, concurrency=concurrency,
        max_tokens=workload.max_tokens or plan.max_tokens, temperature=plan.temperature,
        drain_timeout_s=plan.drain_timeout_s, request_timeout_s=plan.request_timeout_s,
        arrival=plan.arrival, rate_rps=rate_rps,
        prompt_cache=workload.prompt_cache or plan.prompt_cache,
        input_tokens=workload.input_tokens, seed=plan.seed,
        calibration_requests=(plan.arm.calibration_requests
                              if plan.arm.token_count == "server_tokenizer" else 0),
        workers=None if plan.client_workers == "auto" else plan.client_workers,
        items=items, max_arrival_lag_ms=plan.max_arrival_lag_ms,
        keep_output_text=plan.keep_output_text,
    )


def _window_summary(manifest: Mapping[str, object]) -> dict[str, object]:
    return {key: manifest.get(key) for key in
            ("window_id", "submitted", "completed", "failed", "unresolved", "drain_status",
             "elapsed_s", "attempt")}


def _observers(record: RestartRecord, sweep: Sweep, plan: ArmPlan,
               server: lifecycle.ServerHandle, api_key: str | None) -> dict[str, Any]:
    base = server.base_url.rstrip("/")
    headers = lifecycle.auth_headers(api_key)
    # Every node of the deployment, each at its own telemetry URL; the key goes to the
    # server itself only, never to a telemetry endpoint elsewhere.
    sources = telemetry.deployment_sources(
        plan, deployment.base_urls(record.layout, sweep, record.arm, record.k, base), headers)
    return {
        "metrics": MetricsScrape(base + plan.arm.metrics_path, headers,
                                 plan.arm.metrics_timeout_s),
        "log": LogSlice(server.log_path),
        "telemetry": telemetry.TelemetrySampler(sources, plan.clock_interval_s),
    }


def _run_window(record: RestartRecord, sweep: Sweep, plan: ArmPlan,
                server: lifecycle.ServerHandle, target: Target, spec: WindowSpec,
                observers: dict[str, Any], reports: tuple[Any, ...] = ()
                ) -> tuple[WindowResult, dict[str, Any], tuple[str, str] | None]:
    """One window with its observers, then the check whether every process of the
    deployment survived it: (result, observations, (node, evidence of death) or None). A
    window that raises instead of returning rows fails the restart, recorded."""
    try:
        # Positional, after on_start and on_stop: (on_progress, progress_interval_s) or ().
        result = measure_window(target, spec, *observe_all(list(observers.values())),
                                *reports)
    except TokenCountUnavailable as exc:
        # Said at once (the task log, then the terminal's failure line), not after a run
        # whose every entry would be blocked; a retry finds the same server, so says so too.
        error = redact(f"{record.arm} r{record.k}: window {spec.window_id} not measured: "
                       f"{exc}", target.api_key)
        log.warning("%s", error)
        record.unwritten(spec.window_id, error, gone=None)
        raise TokenCountUnavailable(error) from exc
    except Exception as exc:
        error = redact(f"window {spec.window_id}: the measurement raised "
                       f"{type(exc).__name__}: {exc} (no raw files for it)", target.api_key)
        # Unwritten, like a window whose files could not be written: a retry that writes
        # it gives the restart back its status.
        record.unwritten(spec.window_id, error, gone=None)
        raise
    head_gone = lifecycle.server_gone(server, plan.arm.health_path, target.api_key,
                                      plan.arm.api_key_env)
    gone = ((plan.arm.node, head_gone) if head_gone
            else deployment.node_gone(record.layout, sweep, record.arm, record.k))
    observations: dict[str, Any] = {name: observer.result
                                    for name, observer in observers.items()}
    observations["thresholds"] = {
        "reconcile_tolerance": plan.reconcile_tolerance,
        "min_clock_ratio": plan.min_clock_ratio,
        "require_clock_check": plan.require_clock_check,
    }
    observations["server_after_window"] = {"checked_at": utc_now(), "alive": gone is None,
                                           "node": gone[0] if gone else None,
                                           "evidence": gone[1] if gone else None}
    return result, observations, gone


def _report_interval_s() -> float | None:
    """BENCHLEDGER_PROGRESS_S in a task: None (off), or seconds; a bad value is said, then
    replaced by the default (a display setting never costs a measurement)."""
    try:
        return progress.interval_s()
    except ValueError as exc:
        log.warning("%s; reporting every %g s instead", exc, progress.DEFAULT_INTERVAL_S)
        return progress.DEFAULT_INTERVAL_S


def _readiness_reports(layout: RunLayout, arm_name: str, k: int,
                       timeout_s: float) -> progress.ReadinessReporter | None:
    """What the readiness wait reports through: a task-log line and the restart's readiness
    progress file (replaced whole), which `run` shows; None when progress is off."""
    every = _report_interval_s()
    if every is None:
        return None
    path = layout.readiness_progress(arm_name, k)

    def report(waiting: progress.Waiting) -> None:
        log.info("%s", progress.waiting_line(waiting))
        raw.write_json(path, {**waiting.as_dict(), "updated_at": utc_now()})

    return progress.ReadinessReporter(layout.restart_id(arm_name, k), timeout_s, every, report)


def _progress_reports(files: WindowFiles, attempt: Attempt
                      ) -> tuple[Callable[[progress.Snapshot], None], float] | tuple[()]:
    """measure_window's progress arguments for one window: (on_progress,
    progress_interval_s), or () for none. Each snapshot becomes a line in the task log and
    the window's progress file (replaced whole), which `benchledger run` shows. A file
    that cannot be written is logged once and never fails the window;
    BENCHLEDGER_PROGRESS_S=0 turns both off, and a bad value is said, then ignored (a
    display setting never costs a measurement)."""
    every = _report_interval_s()
    if every is None:
        return ()

    def report(snapshot: progress.Snapshot) -> None:
        log.info("%s", progress.progress_line(snapshot))
        raw.write_json(files.progress, {**snapshot.as_dict(), "attempt": attempt.number,
                                        "worker_hostname": attempt.worker_hostname,
                                        "updated_at": utc_now()})

    return report, every


def _write_window_recorded(record: RestartRecord, workload: str, prompt_set: str | None,
                           min_requests: int, result: WindowResult,
                           observations: dict[str, Any], gone: str | None,
                           api_key: str | None, attempt: Attempt,
                           sweep_sha256: str | None, samples: Any = None,
                           point: LoadPoint | None = None) -> raw.WindowManifest:
    """write_window; when it fails, the restart manifest says so (and whether the server died)
    before the error is raised."""
    window_id = result.accounting["window_id"]
    try:
        manifest = write_window(record.layout, record.arm, record.k, workload, prompt_set,
                                min_requests, result, observations, secret=api_key,
                                attempt=attempt, sweep_sha256=sweep_sha256,
                                telemetry=samples, point=point)
    except RawWriteError as exc:
        try:
            record.unwritten(window_id, str(exc), gone)
        except RawWriteError as also:
            raise RawWriteError(f"{exc}; recording it failed too: {also}") from exc
        raise
    record.written(window_id)
    return manifest


# --- teardown and what the run left ---------------------------------------------------------


def stop_restart(layout: RunLayout, arm_name: str, k: int,
                 handle: dict[str, Any] | None) -> raw.RestartManifest:
    """Stop the server (teardown); a server found dead here is recorded as crashed.

    Windows still marked as started were left without files by their last attempt: they
    go to `interrupted_windows`. A retried teardown whose server was stopped already
    changes nothing (the server it would find gone was stopped, not crashed)."""
    record = RestartRecord(layout, arm_name, k)
    manifest = record.fold_leftover_marks("stop_server")
    if manifest.get("stopped_at"):
        return manifest
    if handle is None:  # launch itself failed: nothing to stop, the manifest says why
        return record.update(stopped_at=utc_now(),
                             stop_status="nothing to stop (launch failed)")
    elsewhere = _launched_elsewhere(manifest, handle)
    if elsewhere:  # its pid names some other process here: signal nothing
        return record.update(stop_status=elsewhere)
    outcome = lifecycle.stop(lifecycle.ServerHandle.from_dict(handle))
    stopped: raw.RestartManifest = {"stopped_at": utc_now(), "stop_status": str(outcome),
                                    **_strays(outcome)}
    if outcome.ended_before_stop and manifest.get("status") == "ok":
        stopped["error"] = f"server ended before stop: {outcome}"
        stopped["crashed_node"] = manifest.get("requested_node")
        return record.update("crashed", **stopped)
    return record.update(**stopped)


def _strays(outcome: lifecycle.StopOutcome) -> raw.RestartManifest:
    """The manifest's record of the processes a stop had to stop on their own: the
    server's teardown is broken (a daemon, a process that left its group, one that ignored
    SIGTERM), whatever its windows measured. Logged, and `run_problems` names them."""
    if not outcome.strays:
        return {}
    log.warning("the server left processes its stop had to end on their own: %s", outcome)
    return {"stray_processes": list(outcome.strays)}


def _launched_elsewhere(manifest: Mapping[str, Any], handle: dict[str, Any]) -> str | None:
    """Why a teardown must not signal the server's pid: it was launched on another machine
    (a queue served by several workers ran the launch and the teardown on different
    hosts). None when it is this machine's, or nothing says otherwise."""
    launched_on, here = manifest.get("node"), socket.gethostname()
    if handle.get("pid") is None or launched_on in (None, here):
        return None
    return (f"not stopped: launched on {launched_on}, and this teardown ran on {here}; "
            "stop it there")


def run_problems(layout: RunLayout, sweep: Sweep) -> list[str]:
    """What of the sweep's plan did not happen as planned, read from the raw files: a
    restart or window that went wrong, and a teardown that had to stop processes the
    server had moved out of its reach."""
    problems = []
    stopped = raw.stopped_after(layout.run_dir)  # a sequential run's look skipped the rest
    for arm in sweep.arms:
        plan = sweep.plan(arm)
        for k in range(stopped or order.planned_restarts(sweep, arm.name)):
            manifest = RestartRecord(layout, arm.name, k).read()
            if strays := manifest.get("stray_processes"):
                problems.append(
                    f"{arm.name} r{k}: its teardown had to stop {len(strays)} process(es) "
                    "that a signal to the server's process group would have left running "
                    "(its windows still count): "
                    + "; ".join(f"{s.get('command')} ({s.get('why')})" for s in strays))
            if not raw.is_healthy(manifest.get("status")):
                status = manifest.get("status", "never launched")
                error = manifest.get("error")
                problems.append(f"{arm.name} r{k}: restart {status}"
                                f"{': ' + error if error else ''}")
                continue
            for workload in sweep.workloads:
                points = plan.load_points
                if plan.rate_search is not None:
                    points = searched_points(layout, arm.name, workload.name) or []
                    if not points:
                        problems.append(f"{arm.name}: restart 0 left no finished rate "
                                        f"search for {workload.name}")
                for point in points:
                    files = layout.window_files(arm.name, k, workload.name, point)
                    if not files.manifest.exists():
                        problems.append(f"{arm.name} r{k}: no window for {workload.name} "
                                        f"at concurrency {point.concurrency}"
                                        + (f", {point.rate_rps:g} rps"
                                           if point.rate_rps is not None else ""))
    return problems


def stop_leftover_servers(data_dir: Path, sweep_name: str | None = None,
                          started_after: datetime | None = None,
                          parent_pid: int | None = None) -> list[str]:
    """Stop the servers of interrupted runs: restart manifests under data_dir with a pid
    and no stopped_at, limited to runs of `sweep_name` started after `started_after`
    (the run the caller started, not a neighbour's) and/or to servers whose parent is
    `parent_pid`. A pid is signalled only while it is still the process the manifest
    started (its start time matches), never a stranger that reused the number. Each
    manifest gets stopped_at and how; returns one line per restart."""
    done = []
    # restart manifests name the launch's machine `node`; a node process's manifest names
    # its machine `host` (its `node` is the sweep's) and lives one folder deeper
    found = [(path, "node", raw.run_dir_of_restart(path))
             for path in raw.all_restart_manifests(data_dir)]
    found += [(path, "host", raw.run_dir_of_restart(path.parent / raw.RESTART_MANIFEST))
              for path in raw.all_node_manifests(data_dir)]
    for path, host_key, run_dir in found:
        try:
            manifest = raw.read_json(path)
        except (OSError, ValueError) as exc:
            done.append(f"{path}: unreadable restart manifest, not checked ({exc})")
            continue
        pid = manifest.get("pid")
        if manifest.get("stopped_at") or not isinstance(pid, int) or pid <= 0:
            continue
        if not _run_matches(run_dir, sweep_name, started_after):
            continue
        if manifest.get(host_key) not in (None, socket.gethostname()):
            continue  # another machine's server: its pid means nothing here
        if parent_pid is not None and lifecycle.parent_of(pid) != parent_pid:
            continue
        outcome = lifecycle.stop_recorded(pid, manifest.get("started_at"),
                                          manifest.get("base_url"), manifest.get("log_path"),
                                          manifest.get("server_mark"))
        manifest.update(stopped_at=utc_now(),
                        stop_status=f"stopped after an interrupted run: {outcome}",
                        **_strays(outcome))
        marks = [] if host_key == "host" else fold_leftover_marks(
            path.parent, manifest, "stop after an interrupted run")
        slot = path.parent if host_key == "node" else path.parent.parent
        raw.write_json(path, manifest, sealed_in=slot)
        raw.remove_quietly(*marks)
        where = f" node {manifest['node']}" if host_key == "host" else ""
        done.append(f"{manifest.get('restart_id') or path.parent}{where}: {outcome}")
    return done


def _run_matches(run_dir: Path, sweep_name: str | None,
                 started_after: datetime | None) -> bool:
    if sweep_name is None and started_after is None:
        return True
    try:
        run = raw.read_json(run_dir / raw.RUN_MANIFEST)
        started = datetime.fromisoformat(run["started_at"]) if started_after else None
    except (OSError, ValueError, KeyError, TypeError):
        return False  # not provably the caller's run: leave it alone
    if sweep_name is not None and run.get("sweep_name") != sweep_name:
        return False
    return started is None or started_after is None or started >= started_after
