"""One restart slot (arm x restart index) from launch to stop, writing raw files only.

Each step is one Airflow task (operators/ wraps these); every step leaves its facts in the
slot's folder before it returns or raises, so a failed launch, a server that never became
healthy or one that crashed mid-window is recorded, never lost:

    <data>/raw/<run>/run.json
    <data>/raw/<run>/<arm>/r<k>/restart.json      lifecycle manifest (rewritten by each step)
    <data>/raw/<run>/<arm>/r<k>/server.log        the server's own output
    <data>/raw/<run>/<arm>/r<k>/<workload>-c<N>.parquet   one row per request
    <data>/raw/<run>/<arm>/r<k>/<workload>-c<N>.json      the window's accounting

A retried task rewrites its own files and never adds a second one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq

from benchledger import __version__, lifecycle
from benchledger.client import Target, WindowResult, WindowSpec, measure_window
from benchledger.observe import ClockSampler, LogSlice, MetricsScrape, observe_all
from benchledger.prompts import load_prompt_set
from benchledger.records import requests_table
from benchledger.sweep import Sweep, load_sweep, sweep_sha256


def utc_now() -> str:
    return datetime.now(UTC).isoformat()


def ns_to_iso(wall_ns: int) -> str:
    return datetime.fromtimestamp(wall_ns / 1e9, UTC).isoformat()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_json(path: Path, data: dict) -> None:
    """Write atomically: a reader (the loader) never sees half a manifest."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


@dataclass(frozen=True)
class RunLayout:
    """Where one run's raw files live."""

    data_dir: Path
    run_id: str

    @property
    def run_dir(self) -> Path:
        # Airflow run ids hold ':' and '+'; keep the folder name portable.
        return Path(self.data_dir) / "raw" / re.sub(r"[^A-Za-z0-9._-]", "_", self.run_id)

    @property
    def export_dir(self) -> Path:
        """Where the run's publication (validated entries, report) is written."""
        return Path(self.data_dir) / "published" / self.run_dir.name

    @property
    def data_docs_dir(self) -> Path:
        """Where the run's expectation results are rendered as GX Data Docs."""
        return Path(self.data_dir) / "gx-data-docs" / self.run_dir.name

    @property
    def run_manifest(self) -> Path:
        return self.run_dir / "run.json"

    def slot_dir(self, arm: str, restart_index: int) -> Path:
        return self.run_dir / arm / f"r{restart_index}"

    def restart_manifest(self, arm: str, restart_index: int) -> Path:
        return self.slot_dir(arm, restart_index) / "restart.json"

    def restart_id(self, arm: str, restart_index: int) -> str:
        return f"{self.run_id}/{arm}/r{restart_index}"

    def window_id(self, arm: str, restart_index: int, workload: str, concurrency: int) -> str:
        return f"{self.restart_id(arm, restart_index)}/{workload}-c{concurrency}"

    def window_files(self, arm: str, restart_index: int, workload: str,
                     concurrency: int) -> tuple[Path, Path]:
        stem = self.slot_dir(arm, restart_index) / f"{workload}-c{concurrency}"
        return stem.with_suffix(".parquet"), stem.with_suffix(".json")


def write_run_manifest(layout: RunLayout, sweep_path: Path) -> dict:
    """Record what is being run; validates the sweep file again (it may have changed)."""
    sweep = load_sweep(sweep_path)
    manifest = {
        "run_id": layout.run_id,
        "sweep_name": sweep.sweep.name,
        "sweep_path": str(sweep_path),
        "sweep_sha256": sweep_sha256(sweep_path),
        "sweep_toml": Path(sweep_path).read_text(),
        "harness_version": __version__,
        "started_at": utc_now(),
    }
    write_json(layout.run_manifest, manifest)
    return manifest


def _update_restart(layout: RunLayout, arm: str, k: int, /, **changes) -> dict:
    path = layout.restart_manifest(arm, k)
    manifest = read_json(path) if path.exists() else {}
    manifest.update(changes)
    write_json(path, manifest)
    return manifest


def launch_restart(layout: RunLayout, sweep: Sweep, arm_name: str, k: int) -> dict:
    """Start the server for one slot; the manifest records the attempt whatever happens."""
    arm = sweep.arm(arm_name).arm
    _update_restart(
        layout, arm_name, k,
        restart_id=layout.restart_id(arm_name, k), run_id=layout.run_id, arm=arm_name,
        restart_index=k, node=socket.gethostname(), server_kind=arm.server,
        single_instance=arm.server == "external", started_at=utc_now(), status="launching",
    )
    try:
        seed = lifecycle.instance_seed(sweep.sweep.name, arm_name, k)
        handle = lifecycle.launch(arm, layout.slot_dir(arm_name, k) / "server.log", seed, k)
    except Exception as exc:
        _update_restart(layout, arm_name, k, status="failed", error=f"launch failed: {exc}")
        raise
    _update_restart(layout, arm_name, k, status="launched", pid=handle.pid,
                    base_url=handle.base_url, command=handle.command,
                    log_path=handle.log_path)
    return handle.to_dict()


def await_restart(layout: RunLayout, sweep: Sweep, arm_name: str, k: int, handle: dict) -> dict:
    """Wait until healthy, then record version and effective config."""
    plan = sweep.arm(arm_name)
    server = lifecycle.ServerHandle.from_dict(handle)
    try:
        waited = lifecycle.wait_ready(server, plan.arm.health_path, plan.ready_timeout_s)
    except lifecycle.ServerNotReady as exc:
        _update_restart(layout, arm_name, k, status="failed", error=str(exc))
        raise
    config = lifecycle.describe(server, plan.arm)
    return _update_restart(
        layout, arm_name, k, status="external" if plan.arm.server == "external" else "ok",
        ready_at=utc_now(), ready_after_s=waited, effective_config=config,
        effective_config_sha256=lifecycle.config_sha256(config),
        server_version=lifecycle.server_version(config),
    )


def measure_restart_workload(layout: RunLayout, sweep: Sweep, arm_name: str, k: int,
                             handle: dict, workload_name: str) -> list[dict]:
    """Run the workload's windows (one per concurrency) and write their raw files."""
    plan = sweep.arm(arm_name)
    workload = sweep.workload(workload_name)
    server = lifecycle.ServerHandle.from_dict(handle)
    target = Target(base_url=server.base_url, model=plan.arm.model, endpoint=plan.endpoint)
    summaries = []
    for concurrency in plan.concurrency:
        window_id = layout.window_id(arm_name, k, workload_name, concurrency)
        spec = WindowSpec(
            window_id=window_id, prompts=load_prompt_set(workload.prompts),
            requests=plan.requests, warmup=plan.warmup, concurrency=concurrency,
            max_tokens=workload.max_tokens or plan.max_tokens, temperature=plan.temperature,
            drain_timeout_s=plan.drain_timeout_s, request_timeout_s=plan.request_timeout_s,
            arrival=plan.arrival, rate_rps=plan.rate_rps,
            prompt_cache=workload.prompt_cache or plan.prompt_cache,
            input_tokens=workload.input_tokens, seed=plan.seed,
        )
        observers = _observers(plan, server)
        result = measure_window(target, spec, *observe_all(list(observers.values())))
        observations = {name: observer.result for name, observer in observers.items()}
        observations["thresholds"] = {
            "reconcile_tolerance": plan.reconcile_tolerance,
            "min_clock_ratio": plan.min_clock_ratio,
            "require_clock_check": plan.require_clock_check,
        }
        manifest = write_window(layout, arm_name, k, workload_name, workload.prompts,
                                plan.min_requests, result, observations)
        summaries.append({k_: manifest[k_] for k_ in
                          ("window_id", "submitted", "completed", "failed", "unresolved",
                           "drain_status", "elapsed_s")})
    if server.pid is not None and (state := lifecycle.process_state(server.pid)) != "running":
        _update_restart(layout, arm_name, k, status="crashed",
                        error=f"server process ended during measurement ({state})")
        raise RuntimeError(f"{arm_name} r{k}: server ended during measurement ({state})")
    return summaries


def _observers(plan, server: lifecycle.ServerHandle) -> dict:
    base = server.base_url.rstrip("/")
    clock_url = plan.clock_url.format(base_url=base) if plan.clock_url else None
    return {
        "metrics": MetricsScrape(base + plan.arm.metrics_path),
        "log": LogSlice(server.log_path),
        "clocks": ClockSampler(plan.clock_source, clock_url, socket.gethostname(),
                               plan.clock_interval_s),
    }


def write_window(layout: RunLayout, arm: str, k: int, workload: str, prompt_set: str,
                 min_requests: int, result: WindowResult,
                 observations: dict | None = None) -> dict:
    """Write one window's raw files: the requests (Parquet), what the server and node
    said during it (JSON) and its accounting (the manifest, JSON, written last)."""
    accounting = result.accounting
    parquet_path, manifest_path = layout.window_files(arm, k, workload,
                                                      accounting["concurrency"])
    observed_path = manifest_path.with_suffix(".observed.json")
    # Named after its window, so two windows' files never share a sha256.
    write_json(observed_path, {"window_id": accounting["window_id"], **(observations or {})})
    parquet_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = parquet_path.with_suffix(".parquet.tmp")
    pq.write_table(requests_table(result.rows), tmp)
    os.replace(tmp, parquet_path)
    manifest = {
        **accounting,
        "restart_id": layout.restart_id(arm, k),
        "run_id": layout.run_id,
        "arm": arm,
        "workload": workload,
        "prompt_set": prompt_set,
        "min_requests": min_requests,
        "window_start": ns_to_iso(accounting["window_start_wall_ns"]),
        "window_end": ns_to_iso(accounting["window_end_wall_ns"]),
        "requests_file": parquet_path.name,
        "requests_file_sha256": file_sha256(parquet_path),
        "observed_file": observed_path.name,
        "observed_file_sha256": file_sha256(observed_path),
    }
    write_json(manifest_path, manifest)
    return manifest


def stop_restart(layout: RunLayout, arm_name: str, k: int, handle: dict | None) -> dict:
    """Stop the server (teardown); a server found dead here is recorded as crashed."""
    path = layout.restart_manifest(arm_name, k)
    manifest = read_json(path) if path.exists() else {}
    if handle is None:  # launch itself failed: nothing to stop, the manifest says why
        return _update_restart(layout, arm_name, k, stopped_at=utc_now(),
                               stop_status="nothing to stop (launch failed)")
    outcome = lifecycle.stop(lifecycle.ServerHandle.from_dict(handle))
    changes = {"stopped_at": utc_now(), "stop_status": str(outcome)}
    if outcome.ended_before_stop and manifest.get("status") == "ok":
        changes.update(status="crashed", error=f"server ended before stop: {outcome}")
    return _update_restart(layout, arm_name, k, **changes)


def run_problems(layout: RunLayout, sweep: Sweep) -> list[str]:
    """What of the sweep's plan did not happen as planned, read from the raw files."""
    problems = []
    for arm in sweep.arms:
        plan = sweep.plan(arm)
        for k in range(plan.restarts):
            path = layout.restart_manifest(arm.name, k)
            manifest = read_json(path) if path.exists() else {"status": "never launched"}
            if manifest.get("status") not in ("ok", "external"):
                problems.append(f"{arm.name} r{k}: restart {manifest.get('status')}"
                                f"{': ' + manifest['error'] if manifest.get('error') else ''}")
                continue
            for workload in sweep.workloads:
                for concurrency in plan.concurrency:
                    _, window = layout.window_files(arm.name, k, workload.name, concurrency)
                    if not window.exists():
                        problems.append(f"{arm.name} r{k}: no window for {workload.name} "
                                        f"at concurrency {concurrency}")
    return problems


def stop_leftover_servers(data_dir: Path) -> list[str]:
    """Stop servers whose stop task never ran (an interrupted run): any restart manifest
    under data_dir with a pid and no stopped_at. Returns what was done, per restart."""
    done = []
    for path in sorted(Path(data_dir).glob("raw/*/*/r*/restart.json")):
        manifest = read_json(path)
        if manifest.get("stopped_at") or not manifest.get("pid"):
            continue
        handle = lifecycle.ServerHandle(base_url=manifest.get("base_url") or "",
                                        pid=manifest["pid"], port=None, command=None,
                                        command_template=None,
                                        log_path=manifest.get("log_path"))
        outcome = lifecycle.stop(handle)
        manifest.update(stopped_at=utc_now(),
                        stop_status=f"stopped after an interrupted run: {outcome}")
        write_json(path, manifest)
        done.append(f"{manifest.get('restart_id')}: {outcome}")
    return done
