"""One restart slot (arm x restart index) from launch to stop, writing raw files only.

Each step is one Airflow task (operators/ wraps these); every step leaves its facts in the
slot's folder before it returns or raises, so a failed launch, a server that never became
healthy or one that crashed mid-window is recorded, never lost:

    <data>/raw/<run>/run.json
    <data>/raw/<run>/<arm>/r<k>/restart.json      lifecycle manifest (rewritten by each step)
    <data>/raw/<run>/<arm>/r<k>/server.log        the server's own output
    <data>/raw/<run>/<arm>/r<k>/<workload>-c<N>.parquet   one row per request
    <data>/raw/<run>/<arm>/r<k>/<workload>-c<N>.json      the window's accounting
    <data>/raw/<run>/<arm>/r<k>/<workload>-c<N>.started   while an attempt measures it

A retried task rewrites its own files and never adds a second one. A window's three files
are written as .tmp files and renamed into place only when all three are complete, so a
full disk or an unwritable folder leaves the window either whole or absent, never half
written; the failure is named (path, errno) in the raised error and in restart.json.

Retries (Airflow's, per the sweep's [sweep] retries): a retried measure step keeps every
window an earlier attempt wrote whole and measures only the others, so each window is
measured once, by the attempt that completed it (its manifest says which, and on which
worker). An attempt marks a window `.started` before measuring it and removes the mark once
the window's files are in place; a mark found later (by a retry, or by the teardown) means
an attempt that started the window and left no files for it, killed or failed, and goes to
restart.json's `interrupted_windows`, so the requests it lost are on record.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq

from benchledger import __version__, lifecycle, progress
from benchledger.client import (
    Target,
    TokenCountUnavailable,
    WindowResult,
    WindowSpec,
    measure_window,
)
from benchledger.observe import (
    ClockSampler,
    LogSlice,
    MetricsScrape,
    observe_all,
    same_origin,
    server_family,
)
from benchledger.prompts import load_prompt_set
from benchledger.records import file_sha256, requests_table
from benchledger.redaction import redact
from benchledger.sweep import Arm, Sweep, load_sweep, sweep_sha256

log = logging.getLogger(__name__)


def utc_now() -> str:
    return datetime.now(UTC).isoformat()


def ns_to_iso(wall_ns: int) -> str:
    return datetime.fromtimestamp(wall_ns / 1e9, UTC).isoformat()


class RawWriteError(RuntimeError):
    """A raw file could not be written (full disk, unwritable folder); names path and errno."""


class ServerCrashed(RuntimeError):
    """The server died during a window: the restart is recorded as crashed."""


def os_error_text(exc: OSError, path: Path) -> str:
    """`path: ENOSPC (No space left on device)`: the file and the OS's own words."""
    name = errno.errorcode.get(exc.errno) if isinstance(exc.errno, int) else None
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{path}: {name} ({reason})" if name else f"{path}: {reason}"


def _remove_quietly(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def _write_json_file(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))


def write_json(path: Path, data: dict) -> None:
    """Write atomically: a reader (the loader) never sees half a manifest, and a failed
    write leaves no .tmp file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        _write_json_file(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


@dataclass(frozen=True)
class Attempt:
    """Which try of an Airflow task this is and the worker it runs on, as the task
    instance records them (operators/ fills it in; the core never imports Airflow).
    Called without Airflow (tests, scripts) both stay None."""

    number: int | None = None
    worker_hostname: str | None = None


NO_ATTEMPT = Attempt()


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

    def window_marker(self, arm: str, restart_index: int, workload: str,
                      concurrency: int) -> Path:
        """Present while an attempt measures the window (not a .json: never a manifest)."""
        return self.slot_dir(arm, restart_index) / f"{workload}-c{concurrency}.started"

    def window_progress(self, arm: str, restart_index: int, workload: str,
                        concurrency: int) -> Path:
        """The window's latest progress report (not a .json either: never a raw file)."""
        return (self.slot_dir(arm, restart_index)
                / f"{workload}-c{concurrency}{progress.FILE_SUFFIX}")


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


def _read_restart(layout: RunLayout, arm: str, k: int) -> dict:
    path = layout.restart_manifest(arm, k)
    return read_json(path) if path.exists() else {}


def _update_restart(layout: RunLayout, arm: str, k: int, /, **changes) -> dict:
    path = layout.restart_manifest(arm, k)
    manifest = _read_restart(layout, arm, k)
    manifest.update(changes)
    try:
        write_json(path, manifest)
    except OSError as exc:
        raise RawWriteError(f"{layout.restart_id(arm, k)}: the restart manifest could not "
                            f"be written: {os_error_text(exc, path)}") from exc
    return manifest


def _api_key(layout: RunLayout, arm: Arm, k: int) -> str | None:
    """The arm's API key for this step; a missing one fails the restart, recorded."""
    try:
        return lifecycle.resolve_api_key(arm)
    except lifecycle.ApiKeyMissing as exc:
        _update_restart(layout, arm.name, k, status="failed", error=str(exc))
        raise


def launch_restart(layout: RunLayout, sweep: Sweep, arm_name: str, k: int,
                   attempt: Attempt = NO_ATTEMPT) -> dict:
    """Start the server for one slot; the manifest records the attempt whatever happens.

    `node` is this machine's hostname, `requested_node` the arm's node (its Airflow queue)
    and `worker_hostname` the worker as Airflow records it, side by side. A retried launch
    first stops the server an earlier, killed attempt started (two servers of one slot
    would share the node's GPU)."""
    arm = sweep.arm(arm_name).arm
    earlier = _read_restart(layout, arm_name, k)
    _update_restart(
        layout, arm_name, k,
        restart_id=layout.restart_id(arm_name, k), run_id=layout.run_id, arm=arm_name,
        restart_index=k, node=socket.gethostname(), requested_node=arm.node,
        worker_hostname=attempt.worker_hostname, launch_attempt=attempt.number,
        server_kind=arm.server, single_instance=arm.server == "external",
        interrupted_windows=earlier.get("interrupted_windows", []),
        **_stop_earlier_launch(earlier), started_at=utc_now(), status="launching",
    )
    _api_key(layout, arm, k)  # checked before a server is started for nothing
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


def _stop_earlier_launch(manifest: dict) -> dict:
    """The manifest changes for a launch that finds an earlier attempt's server of this
    slot still recorded as running: stop it when it is on this machine and still the
    process that attempt started; either way, list it under `earlier_launches`."""
    pid = manifest.get("pid")
    if not isinstance(pid, int) or pid <= 0 or manifest.get("stopped_at"):
        return {}
    here = socket.gethostname()
    if manifest.get("node") != here:  # a pid names a process on its own machine only
        outcome = f"not stopped: started on {manifest.get('node')}, this attempt runs on {here}"
    elif _started_as_recorded(pid, manifest.get("started_at")):
        outcome = str(lifecycle.stop(_handle_of(manifest, pid)))
    else:
        outcome = f"nothing to stop: pid {pid} has ended (or now belongs to another process)"
    stopped = {"pid": pid, "started_at": manifest.get("started_at"),
               "node": manifest.get("node"), "worker_hostname": manifest.get("worker_hostname"),
               "attempt": manifest.get("launch_attempt"), "stop_status": outcome}
    return {"earlier_launches": [*manifest.get("earlier_launches", []), stopped],
            "pid": None, "base_url": None}


def _handle_of(manifest: dict, pid: int) -> lifecycle.ServerHandle:
    """Enough of a server handle to stop the process group a manifest recorded."""
    return lifecycle.ServerHandle(base_url=manifest.get("base_url") or "", pid=pid, port=None,
                                  command=None, command_template=None,
                                  log_path=manifest.get("log_path"))


def await_restart(layout: RunLayout, sweep: Sweep, arm_name: str, k: int, handle: dict) -> dict:
    """Wait until healthy, then record version, effective config, which probe declared
    the server ready and whose counters its /metrics carries (its server family)."""
    plan = sweep.arm(arm_name)
    server = lifecycle.ServerHandle.from_dict(handle)
    api_key = _api_key(layout, plan.arm, k)
    try:
        ready = lifecycle.wait_ready(server, plan.arm.health_path, plan.ready_timeout_s,
                                     api_key, plan.arm.api_key_env)
    except lifecycle.ServerNotReady as exc:
        _update_restart(layout, arm_name, k, status="failed", error=str(exc))
        raise
    config = lifecycle.describe(server, plan.arm, api_key)
    family, family_source = server_family(
        plan.arm.server_family, server.base_url.rstrip("/") + plan.arm.metrics_path,
        lifecycle.auth_headers(api_key))
    return _update_restart(
        layout, arm_name, k, status="external" if plan.arm.server == "external" else "ok",
        ready_at=utc_now(), ready_after_s=ready.waited_s, ready_probe=ready.probe,
        effective_config=config, effective_config_sha256=lifecycle.config_sha256(config),
        server_version=lifecycle.server_version(config), server_family=family,
        server_family_source=redact(family_source, api_key),
    )


def measure_restart_workload(layout: RunLayout, sweep: Sweep, arm_name: str, k: int,
                             handle: dict, workload_name: str,
                             attempt: Attempt = NO_ATTEMPT) -> list[dict]:
    """Run the workload's windows (one per concurrency) and write their raw files.

    A window an earlier attempt already wrote whole is kept, not measured again. After each
    window the server is checked (lifecycle.server_gone): one that died during it makes the
    restart `crashed` (its raw files are still written) and nothing else runs.
    """
    _refuse_after_crash(layout, arm_name, k)
    plan = sweep.arm(arm_name)
    workload = sweep.workload(workload_name)
    server = lifecycle.ServerHandle.from_dict(handle)
    api_key = _api_key(layout, plan.arm, k)
    target = Target(base_url=server.base_url, model=plan.arm.model, endpoint=plan.endpoint,
                    api_key=api_key, token_count=plan.arm.token_count,
                    tokenize_path=plan.arm.tokenize_path)
    summaries = []
    for concurrency in plan.concurrency:
        window_id = layout.window_id(arm_name, k, workload_name, concurrency)
        written = written_window(layout, arm_name, k, workload_name, concurrency)
        if written is not None:
            log.info("%s: written whole by attempt %s; not measured again", window_id,
                     written.get("attempt"))
            summaries.append(_window_summary(written))
            continue
        marker = layout.window_marker(arm_name, k, workload_name, concurrency)
        _mark_window_started(layout, arm_name, k, window_id, marker, attempt)
        spec = WindowSpec(
            window_id=window_id, prompts=load_prompt_set(workload.prompts),
            requests=plan.requests, warmup=plan.warmup, concurrency=concurrency,
            max_tokens=workload.max_tokens or plan.max_tokens, temperature=plan.temperature,
            drain_timeout_s=plan.drain_timeout_s, request_timeout_s=plan.request_timeout_s,
            arrival=plan.arrival, rate_rps=plan.rate_rps,
            prompt_cache=workload.prompt_cache or plan.prompt_cache,
            input_tokens=workload.input_tokens, seed=plan.seed,
            calibration_requests=(plan.arm.calibration_requests
                                  if plan.arm.token_count == "server_tokenizer" else 0),
        )
        progress_file = layout.window_progress(arm_name, k, workload_name, concurrency)
        try:
            result, observations, gone = _run_window(layout, arm_name, k, plan, server,
                                                     target, spec,
                                                     _progress_reports(progress_file, attempt))
        except BaseException:
            _remove_quietly(progress_file)  # no window to show as done
            raise
        manifest = _write_window_recorded(layout, arm_name, k, workload_name,
                                          workload.prompts, plan.min_requests, result,
                                          observations, gone, api_key, attempt)
        # Only once the files are in place: a failure or a kill before leaves the mark.
        _remove_quietly(marker)
        if gone:
            error = f"the server died during window {window_id}: {gone}"
            _update_restart(layout, arm_name, k, status="crashed", error=error,
                            crashed_in_window=window_id)
            raise ServerCrashed(f"{arm_name} r{k}: {error}")
        summaries.append(_window_summary(manifest))
    return summaries


def _window_summary(manifest: dict) -> dict:
    return {key: manifest.get(key) for key in
            ("window_id", "submitted", "completed", "failed", "unresolved", "drain_status",
             "elapsed_s", "attempt")}


def written_window(layout: RunLayout, arm: str, k: int, workload: str,
                   concurrency: int) -> dict | None:
    """The manifest of a window whose files are in place and whole (each file it names has
    the sha256 it records), else None: such a window is never measured twice. A manifest
    naming a file that changed (a write killed between renames) does not count."""
    _, manifest_path = layout.window_files(arm, k, workload, concurrency)
    try:
        manifest = read_json(manifest_path)
    except (OSError, ValueError):
        return None  # absent (or not a manifest): the window is measured
    named = [(manifest.get("requests_file"), manifest.get("requests_file_sha256")),
             (manifest.get("observed_file"), manifest.get("observed_file_sha256"))]
    if manifest.get("window_id") != layout.window_id(arm, k, workload, concurrency) \
            or not named[0][0]:
        return None
    for name, sha256 in named:
        path = manifest_path.parent / name if name else None
        if path is not None and not (path.is_file() and file_sha256(path) == sha256):
            return None
    return manifest


def _mark_window_started(layout: RunLayout, arm: str, k: int, window_id: str, marker: Path,
                         attempt: Attempt) -> None:
    """Record an earlier attempt's leftover mark as an interrupted window, then mark this
    attempt's start. The mark is evidence, not a precondition: a disk that cannot take it
    (logged) fails the window's own write next, and that failure is recorded."""
    if marker.exists():
        _record_interrupted(layout, arm, k, _read_mark(marker, window_id),
                            noticed_by=f"measure attempt {attempt.number}")
    try:
        write_json(marker, {"window_id": window_id, "attempt": attempt.number,
                            "worker_hostname": attempt.worker_hostname,
                            "started_at": utc_now()})
    except OSError as exc:
        log.warning("%s: could not mark the window as started: %s", window_id,
                    os_error_text(exc, marker))


def _read_mark(marker: Path, window_id: str) -> dict:
    try:
        return read_json(marker)
    except (OSError, ValueError) as exc:  # written atomically; say so should it ever not be
        return {"window_id": window_id, "error": f"unreadable mark {marker.name}: {exc}"}


def _record_interrupted(layout: RunLayout, arm: str, k: int, mark: dict,
                        noticed_by: str) -> None:
    """restart.json's `interrupted_windows` gets the attempt that started a window and left
    no files for it (once, however often it is noticed)."""
    known = _read_restart(layout, arm, k).get("interrupted_windows") or []
    updated = _with_interrupted(known, mark, noticed_by)
    if updated != known:
        _update_restart(layout, arm, k, interrupted_windows=updated)


def _with_interrupted(known: list[dict], mark: dict, noticed_by: str) -> list[dict]:
    """`known` interrupted windows plus the one a mark describes, unless it is listed."""
    entry = {key: mark.get(key) for key in
             ("window_id", "attempt", "started_at", "worker_hostname")}
    if mark.get("error"):
        entry["error"] = mark["error"]
    same = ("window_id", "attempt", "started_at")
    if any(all(old.get(key) == entry.get(key) for key in same) for old in known):
        return known
    return [*known, {**entry, "noticed_by": noticed_by}]


def _fold_leftover_marks(slot: Path, manifest: dict, noticed_by: str) -> list[Path]:
    """Add every window mark left in a restart's folder to its manifest's
    `interrupted_windows` (the manifest dict is changed; the caller writes it, then
    removes the marks returned). Called when no attempt of the restart measures anymore."""
    marks = sorted(slot.glob("*.started"))
    interrupted = manifest.get("interrupted_windows") or []
    for mark in marks:
        window_id = f"{manifest.get('restart_id')}/{mark.stem}"
        interrupted = _with_interrupted(interrupted, _read_mark(mark, window_id), noticed_by)
    if marks:
        manifest["interrupted_windows"] = interrupted
    return marks


def _refuse_after_crash(layout: RunLayout, arm: str, k: int) -> None:
    """A retried or later step of a crashed restart measures nothing: it would only
    overwrite the crashed window's evidence with requests to a dead server."""
    path = layout.restart_manifest(arm, k)
    manifest = read_json(path) if path.exists() else {}
    if manifest.get("status") == "crashed":
        raise ServerCrashed(f"{arm} r{k}: not measured: the restart already crashed "
                            f"({manifest.get('error')})")


def _run_window(layout: RunLayout, arm_name: str, k: int, plan, server, target: Target,
                spec: WindowSpec, reports: tuple = ()
                ) -> tuple[WindowResult, dict, str | None]:
    """One window with its observers, then the check whether the server survived it:
    (result, observations, evidence of death or None). A window that raises instead of
    returning rows fails the restart, recorded."""
    observers = _observers(plan, server, target.api_key)
    try:
        # Positional, after on_start and on_stop: (on_progress, progress_interval_s) or ().
        result = measure_window(target, spec, *observe_all(list(observers.values())),
                                *reports)
    except TokenCountUnavailable as exc:
        # Said at once (the task log, then the terminal's failure line), not after a run
        # whose every entry would be blocked; a retry finds the same server, so says so too.
        error = redact(f"{arm_name} r{k}: window {spec.window_id} not measured: "
                                 f"{exc}", target.api_key)
        log.warning("%s", error)
        _record_unwritten(layout, arm_name, k, spec.window_id, error, gone=None)
        raise TokenCountUnavailable(error) from exc
    except Exception as exc:
        error = redact(f"window {spec.window_id}: the measurement raised "
                                 f"{type(exc).__name__}: {exc} (no raw files for it)",
                                 target.api_key)
        # Unwritten, like a window whose files could not be written: a retry that writes
        # it gives the restart back its status.
        _record_unwritten(layout, arm_name, k, spec.window_id, error, gone=None)
        raise
    gone = lifecycle.server_gone(server, plan.arm.health_path, target.api_key,
                                 plan.arm.api_key_env)
    observations = {name: observer.result for name, observer in observers.items()}
    observations["thresholds"] = {
        "reconcile_tolerance": plan.reconcile_tolerance,
        "min_clock_ratio": plan.min_clock_ratio,
        "require_clock_check": plan.require_clock_check,
    }
    observations["server_after_window"] = {"checked_at": utc_now(), "alive": gone is None,
                                           "evidence": gone}
    return result, observations, gone


def _progress_reports(path: Path, attempt: Attempt) -> tuple:
    """measure_window's progress arguments for one window: (on_progress,
    progress_interval_s), or () for none. Each snapshot becomes a line in the task log and
    the window's progress file (replaced whole), which `benchledger run` shows. A file
    that cannot be written is logged once and never fails the window;
    BENCHLEDGER_PROGRESS_S=0 turns both off, and a bad value is said, then ignored (a
    display setting never costs a measurement)."""
    try:
        every = progress.interval_s()
    except ValueError as exc:
        log.warning("%s; reporting every %g s instead", exc, progress.DEFAULT_INTERVAL_S)
        every = progress.DEFAULT_INTERVAL_S
    if every is None:
        return ()

    def report(snapshot: progress.Snapshot) -> None:
        log.info("%s", progress.progress_line(snapshot))
        write_json(path, {**snapshot.as_dict(), "attempt": attempt.number,
                          "worker_hostname": attempt.worker_hostname,
                          "updated_at": utc_now()})

    return report, every


def _write_window_recorded(layout: RunLayout, arm: str, k: int, workload: str,
                           prompt_set: str, min_requests: int, result: WindowResult,
                           observations: dict, gone: str | None,
                           api_key: str | None, attempt: Attempt) -> dict:
    """write_window; when it fails, restart.json says so (and whether the server had died)
    before the error is raised."""
    window_id = result.accounting["window_id"]
    try:
        manifest = write_window(layout, arm, k, workload, prompt_set, min_requests, result,
                                observations, secret=api_key, attempt=attempt)
    except RawWriteError as exc:
        try:
            _record_unwritten(layout, arm, k, window_id, str(exc), gone)
        except RawWriteError as also:
            raise RawWriteError(f"{exc}; recording it failed too: {also}") from exc
        raise
    _clear_unwritten(layout, arm, k, window_id)
    return manifest


def _record_unwritten(layout: RunLayout, arm: str, k: int, window_id: str, error: str,
                      gone: str | None) -> None:
    """restart.json: the window's files are missing and why; the restart cannot count."""
    path = layout.restart_manifest(arm, k)
    manifest = read_json(path) if path.exists() else {}
    unwritten = sorted({*manifest.get("unwritten_windows", []), window_id})
    changes = {"status": "crashed" if gone else "failed",
               "error": error + (f"; and the server died during it: {gone}" if gone else ""),
               "unwritten_windows": unwritten}
    if gone:
        changes["crashed_in_window"] = window_id
    if manifest.get("status") in ("ok", "external"):
        changes["status_before_unwritten"] = manifest["status"]
    _update_restart(layout, arm, k, **changes)


def _clear_unwritten(layout: RunLayout, arm: str, k: int, window_id: str) -> None:
    """A retried step wrote a window an earlier attempt could not: when it was the last
    one missing, the restart gets back the status it had (a crash is never undone)."""
    path = layout.restart_manifest(arm, k)
    manifest = read_json(path) if path.exists() else {}
    if window_id not in manifest.get("unwritten_windows", []):
        return
    unwritten = [w for w in manifest["unwritten_windows"] if w != window_id]
    changes: dict = {"unwritten_windows": unwritten}
    before = manifest.get("status_before_unwritten")
    if not unwritten and manifest.get("status") == "failed" and before:
        changes.update(status=before, error=None, status_before_unwritten=None)
    _update_restart(layout, arm, k, **changes)


def _observers(plan, server: lifecycle.ServerHandle, api_key: str | None) -> dict:
    base = server.base_url.rstrip("/")
    clock_url = plan.clock_url.replace("{base_url}", base) if plan.clock_url else None
    headers = lifecycle.auth_headers(api_key)
    # The key goes to the server itself only, never to a clock endpoint elsewhere.
    clock_headers = headers if same_origin(clock_url, base) else None
    return {
        "metrics": MetricsScrape(base + plan.arm.metrics_path, headers),
        "log": LogSlice(server.log_path),
        "clocks": ClockSampler(plan.clock_source, clock_url, socket.gethostname(),
                               plan.clock_interval_s, clock_headers),
    }


def write_window(layout: RunLayout, arm: str, k: int, workload: str, prompt_set: str,
                 min_requests: int, result: WindowResult,
                 observations: dict | None = None, secret: str | None = None,
                 attempt: Attempt = NO_ATTEMPT) -> dict:
    """Write one window's raw files: the requests (Parquet), what the server and node
    said during it (JSON) and its accounting (the manifest, JSON, written last). The
    manifest names the attempt that measured the window and its worker.

    All three are written as .tmp files first and renamed into place only when all are
    complete; any OSError removes the .tmp files and raises RawWriteError naming the file
    and the errno. `secret` (the server's API key) is redacted from everything written.
    """
    accounting = result.accounting
    parquet_path, manifest_path = layout.window_files(arm, k, workload,
                                                      accounting["concurrency"])
    observed_path = manifest_path.with_suffix(".observed.json")
    staged = {final: final.with_name(final.name + ".tmp")
              for final in (observed_path, parquet_path, manifest_path)}  # manifest last
    writing = parquet_path.parent
    try:
        parquet_path.parent.mkdir(parents=True, exist_ok=True)
        # Named after its window, so two windows' files never share a sha256.
        writing = staged[observed_path]
        _write_json_file(writing, redact(
            {"window_id": accounting["window_id"], **(observations or {})}, secret))
        writing = staged[parquet_path]
        pq.write_table(requests_table(redact(result.rows, secret)), writing)
        manifest = {
            **accounting,
            "restart_id": layout.restart_id(arm, k),
            "run_id": layout.run_id,
            "arm": arm,
            "workload": workload,
            "prompt_set": prompt_set,
            "min_requests": min_requests,
            "attempt": attempt.number,
            "worker_hostname": attempt.worker_hostname,
            "window_start": ns_to_iso(accounting["window_start_wall_ns"]),
            "window_end": ns_to_iso(accounting["window_end_wall_ns"]),
            "requests_file": parquet_path.name,
            "requests_file_sha256": file_sha256(staged[parquet_path]),
            "observed_file": observed_path.name,
            "observed_file_sha256": file_sha256(staged[observed_path]),
        }
        writing = staged[manifest_path]
        _write_json_file(writing, manifest)
        _move_into_place(staged)
    except OSError as exc:
        _remove_quietly(*staged.values())
        raise RawWriteError(f"window {accounting['window_id']}: its raw files could not be "
                            f"written: {os_error_text(exc, writing)}") from exc
    return manifest


def _move_into_place(staged: dict[Path, Path]) -> None:
    """Rename the staged files, manifest last. Should a rename fail midway, the window's
    manifest is removed: an older manifest must not point at files this write replaced."""
    moved = False
    try:
        for final, tmp in staged.items():
            os.replace(tmp, final)
            moved = True
    except OSError:
        if moved:
            _remove_quietly(list(staged)[-1])
        raise


def stop_restart(layout: RunLayout, arm_name: str, k: int, handle: dict | None) -> dict:
    """Stop the server (teardown); a server found dead here is recorded as crashed.

    Windows still marked as started were left without files by their last attempt: they
    go to `interrupted_windows`. A retried teardown whose server was stopped already
    changes nothing (the server it would find gone was stopped, not crashed)."""
    manifest = _read_restart(layout, arm_name, k)
    marks = _fold_leftover_marks(layout.slot_dir(arm_name, k), manifest, "stop_server")
    if marks:
        manifest = _update_restart(layout, arm_name, k,
                                   interrupted_windows=manifest["interrupted_windows"])
        _remove_quietly(*marks)
    if manifest.get("stopped_at"):
        return manifest
    if handle is None:  # launch itself failed: nothing to stop, the manifest says why
        return _update_restart(layout, arm_name, k, stopped_at=utc_now(),
                               stop_status="nothing to stop (launch failed)")
    elsewhere = _launched_elsewhere(manifest, handle)
    if elsewhere:  # its pid names some other process here: signal nothing
        return _update_restart(layout, arm_name, k, stop_status=elsewhere)
    outcome = lifecycle.stop(lifecycle.ServerHandle.from_dict(handle))
    changes = {"stopped_at": utc_now(), "stop_status": str(outcome)}
    if outcome.ended_before_stop and manifest.get("status") == "ok":
        changes.update(status="crashed", error=f"server ended before stop: {outcome}")
    return _update_restart(layout, arm_name, k, **changes)


def _launched_elsewhere(manifest: dict, handle: dict) -> str | None:
    """Why a teardown must not signal the server's pid: it was launched on another machine
    (a queue served by several workers ran the launch and the teardown on different
    hosts). None when it is this machine's, or nothing says otherwise."""
    launched_on, here = manifest.get("node"), socket.gethostname()
    if handle.get("pid") is None or launched_on in (None, here):
        return None
    return (f"not stopped: launched on {launched_on}, and this teardown ran on {here}; "
            "stop it there")


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
    for path in sorted(Path(data_dir).glob("raw/*/*/r*/restart.json")):
        try:
            manifest = read_json(path)
        except (OSError, ValueError) as exc:
            done.append(f"{path}: unreadable restart manifest, not checked ({exc})")
            continue
        pid = manifest.get("pid")
        if manifest.get("stopped_at") or not isinstance(pid, int) or pid <= 0:
            continue
        if not _run_matches(path.parents[2], sweep_name, started_after):
            continue
        if manifest.get("node") not in (None, socket.gethostname()):
            continue  # another machine's server: its pid means nothing here
        if parent_pid is not None and _parent_of(pid) != parent_pid:
            continue
        if _started_as_recorded(pid, manifest.get("started_at")):
            outcome = str(lifecycle.stop(_handle_of(manifest, pid)))
        else:
            outcome = (f"nothing to stop: pid {pid} has ended (or now belongs to another "
                       "process)")
        manifest.update(stopped_at=utc_now(),
                        stop_status=f"stopped after an interrupted run: {outcome}")
        marks = _fold_leftover_marks(path.parent, manifest, "stop after an interrupted run")
        write_json(path, manifest)
        _remove_quietly(*marks)
        done.append(f"{manifest.get('restart_id') or path.parent}: {outcome}")
    return done


def _run_matches(run_dir: Path, sweep_name: str | None,
                 started_after: datetime | None) -> bool:
    if sweep_name is None and started_after is None:
        return True
    try:
        run = read_json(run_dir / "run.json")
        started = datetime.fromisoformat(run["started_at"]) if started_after else None
    except (OSError, ValueError, KeyError, TypeError):
        return False  # not provably the caller's run: leave it alone
    if sweep_name is not None and run.get("sweep_name") != sweep_name:
        return False
    return started is None or started >= started_after


def _proc_stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _parent_of(pid: int) -> int | None:
    fields = _proc_stat(pid)
    return int(fields[1]) if fields else None


def _started_as_recorded(pid: int, started_at: str | None) -> bool:
    """Whether `pid` is still the live process the manifest launched: it started within a
    minute after the manifest's `started_at`. Without /proc (not Linux) or without a
    start time it is taken on trust while the pid exists."""
    fields = _proc_stat(pid)
    if fields is None:
        return not Path("/proc/self").exists() and _pid_exists(pid)
    if fields[0] in ("Z", "X"):  # exited, not yet reaped
        return False
    if not started_at:
        return True
    try:
        boot_s = next(float(line.split()[1]) for line in
                      Path("/proc/stat").read_text().splitlines() if line.startswith("btime"))
        started_s = boot_s + int(fields[19]) / os.sysconf("SC_CLK_TCK")
        recorded_s = datetime.fromisoformat(started_at).timestamp()
    except (OSError, ValueError, StopIteration, IndexError):
        return True
    return recorded_s - 2 <= started_s <= recorded_s + 60


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
