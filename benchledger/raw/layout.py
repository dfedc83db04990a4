"""The raw folder: where a run's files live, what each manifest holds, how they are written.

Everything that spells a raw path or a file pattern is here; the measurement steps, the
loader, the CLI, the progress view and the operators ask this module:

    <data>/raw/<run>/run.json                             the run: its recorded sweep text
    <data>/raw/<run>/<arm>/r<k>/restart.json              one restart's lifecycle manifest
    <data>/raw/<run>/<arm>/r<k>/server.log                the server's own output
    <data>/raw/<run>/<arm>/r<k>/readiness.progress        the wait for it to be ready
    <data>/raw/<run>/<arm>/r<k>/nodes/<node>.json         a process on another node
    <data>/raw/<run>/<arm>/r<k>/nodes/<node>.log          its output
    <data>/raw/<run>/<arm>/r<k>/<workload>-c<N>.parquet   one row per request
    <data>/raw/<run>/<arm>/r<k>/<workload>-c<N>.observed.json   counters, log, telemetry errors
    <data>/raw/<run>/<arm>/r<k>/<workload>-c<N>.telemetry.parquet   every node's GPU samples
    <data>/raw/<run>/<arm>/r<k>/<workload>-c<N>.json      the window's manifest (last)
    <data>/raw/<run>/<arm>/r<k>/<workload>-c<N>.started   while an attempt measures it
    <data>/raw/<run>/<arm>/r<k>/<workload>-c<N>.progress  its latest progress report
    <data>/raw/<run>/[<arm>/r<k>/]seal-<host>-<token>-<pid>.jsonl   the run's seal (seal.py)
    <data>/published/<run>/                               the run's publication
    <data>/gx-data-docs/<run>/                            its expectation results as Data Docs

<run> is the run id made portable (Airflow's ids hold ':' and '+'). The `.started` and
`.progress` files are not manifests (not `.json`), so the loader never reads them. A
manifest is written atomically (a reader never sees half of one); the loader takes its
columns from the column lists below, so a key the manifests gain is stored only once it is
named there (and in a migration).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from benchledger.raw import seal

RUN_MANIFEST = "run.json"
RESTART_MANIFEST = "restart.json"
SERVER_LOG = "server.log"
READINESS_PROGRESS = "readiness.progress"  # the latest report of the wait for readiness
REQUESTS_SUFFIX = ".parquet"
MANIFEST_SUFFIX = ".json"
OBSERVED_SUFFIX = ".observed.json"
SEARCH_SUFFIX = ".search"
TELEMETRY_SUFFIX = ".telemetry.parquet"
NODES_DIR = "nodes"  # a restart's processes on other nodes: one manifest and log each
# A sequential sweep's interim looks (issue #41), one file after each block that completes
# the minimum restarts: not an arm's name (arm names start with a letter or digit).
LOOKS_DIR = "_looks"
LOOK_STOP = "stop"  # a look's decision when every comparison is decided
STARTED_SUFFIX = ".started"
PROGRESS_SUFFIX = ".progress"
TMP_SUFFIX = ".tmp"  # a file being written; renamed into place when whole

# A restart's status, as restart.json records it and restarts.status stores it: launching
# and launched while it starts; ok (ready, measured or not yet) or external (a server this
# pipeline did not start and cannot restart); failed (never ready, a key missing, a window
# not written) or crashed (it died during a window, or was found dead at its teardown).
RestartStatus = Literal["launching", "launched", "ok", "external", "failed", "crashed"]
HEALTHY_STATUSES: tuple[RestartStatus, ...] = ("ok", "external")
DrainStatus = Literal["complete", "incomplete"]


def is_healthy(status: object) -> bool:
    """Whether a restart with this status may feed entries (restart_healthy's value set)."""
    return status in HEALTHY_STATUSES


def ready_status(server_kind: str) -> RestartStatus:
    """The status of a restart whose server became ready."""
    return "external" if server_kind == "external" else "ok"


@dataclass(frozen=True)
class Attempt:
    """Which try of an Airflow task this is and the worker it runs on, as the task
    instance records them (operators/ fills it in; the core never imports Airflow). The
    manifests a step writes name it. Called without Airflow (tests, scripts) both stay
    None."""

    number: int | None = None
    worker_hostname: str | None = None


NO_ATTEMPT = Attempt()


# --- manifests ------------------------------------------------------------------------------


class RunManifest(TypedDict, total=False):
    run_id: str
    sweep_name: str
    sweep_path: str
    sweep_sha256: str  # of sweep_toml: every step parses that text, never the file again
    sweep_toml: str  # the file's text, secrets in arms' commands as <redacted>
    harness_version: str
    started_at: str
    # a scheduled run (issue #25): its slot, and the slots skipped since the previous run
    scheduled_for: str | None
    skipped_slots: list[str] | None
    skipped_slot_count: int | None
    # issue #26: each prepared workload (not a built-in prompt set) by name: its file in
    # the run folder, that file's sha256 and its provenance (benchledger.workloads)
    workloads: dict[str, dict[str, Any]]
    # issue #39: the run's files are sealed (benchledger.raw.seal.SEAL_VERSION): the loader
    # refuses a manifest or window file whose sha256 none of the run's steps recorded
    seal: int


class RestartManifest(TypedDict, total=False):
    restart_id: str
    run_id: str
    arm: str
    restart_index: int
    # where the sweep's order put it (benchledger.sweep.order): restart k is block k; its
    # place in the block; "blocked" or "arm_by_arm"; what the order was drawn from
    block: int
    block_position: int
    restart_order: str
    order_seed: str
    node: str  # the hostname the launch ran on
    requested_node: str  # the arm's node (its Airflow queue)
    worker_hostname: str | None
    launch_attempt: int | None
    server_kind: str
    single_instance: bool
    # the sweep text (its sha256) the launch measured: the loader refuses another run's
    sweep_sha256: str | None
    status: RestartStatus
    error: str | None
    started_at: str
    pid: int | None
    base_url: str | None
    command: list[str] | None  # argv, secrets redacted
    log_path: str | None
    server_mark: str | None  # in the server's environment: finds every process it started
    earlier_launches: list[dict[str, Any]]
    ready_at: str
    ready_after_s: float
    ready_probe: str
    effective_config: dict[str, Any]
    effective_config_sha256: str
    server_version: str | None
    server_family: str | None
    server_family_source: str | None
    stopped_at: str
    stop_status: str
    # Processes its stop had to end on their own (outside the server's process group, or
    # left running): pid, ppid, pgid, sid, command (redacted), why, signal, alive.
    stray_processes: list[dict[str, Any]]
    crashed_in_window: str
    # The node whose process died (a multi-node arm's other node, or the head's own; None
    # where the manifest names no node).
    crashed_node: str | None
    # Every node the deployment spanned, the head first: node, address, role, rank, host,
    # pid, its GPUs as its telemetry listed them at readiness, and how its process ended.
    deployment: list[dict[str, Any]]
    interrupted_windows: list[dict[str, Any]]
    unwritten_windows: list[str]
    status_before_unwritten: RestartStatus | None


class NodeManifest(TypedDict, total=False):
    """One process of a multi-node deployment besides its head (benchledger.restart.deployment):
    written only by that node's own tasks."""

    restart_id: str
    node: str  # the sweep's node name (its Airflow queue)
    address: str
    rank: int
    host: str  # the hostname the launch ran on
    worker_hostname: str | None
    launch_attempt: int | None
    status: Literal["launching", "launched", "failed", "stopped", "crashed"]
    error: str | None
    started_at: str
    pid: int | None
    base_url: str | None
    command: list[str] | None
    log_path: str | None
    server_mark: str | None
    earlier_launches: list[dict[str, Any]]
    stopped_at: str
    stop_status: str
    ended_before_stop: bool
    stray_processes: list[dict[str, Any]]


class WindowManifest(TypedDict, total=False):
    """The window's accounting (benchledger.client's) and where its files are."""

    window_id: str
    restart_id: str
    run_id: str
    arm: str
    workload: str
    prompt_set: str
    concurrency: int
    submitted: int
    completed: int
    failed: int
    unresolved: int
    warmup_submitted: int
    drain_status: DrainStatus
    drain_timeout_s: float
    request_timeout_s: float
    window_start: str
    window_end: str
    elapsed_s: float
    min_requests: int
    max_tokens: int
    temperature: float
    attempt: int | None
    worker_hostname: str | None
    # The ruler's own error (T17), over the measured part; absent in windows recorded
    # before the client measured it (and NULL for imports): how many worker processes
    # measured, how late each worker's event loop ran a callback that became ready (a 5 ms
    # probe, pooled over the workers), their CPU seconds over wall seconds x workers, and
    # the fraction of content events that shared one network read with another.
    client_workers: int
    client_lag_p50_ms: float
    client_lag_p99_ms: float
    client_lag_max_ms: float
    client_lag_samples: int
    client_cpu_share: float
    bunched_event_fraction: float | None
    requests_file: str
    requests_file_sha256: str
    observed_file: str
    observed_file_sha256: str
    telemetry_file: str  # absent: no telemetry source (or a window from before #24)
    telemetry_file_sha256: str


# The manifest keys the warehouse keeps, as columns of runs, restarts and windows (the
# first is the table's key). Window manifests carry more of the client's accounting than
# these: the rest stays in the file, which raw_files names.
RUN_COLUMNS = ("run_id", "sweep_name", "sweep_path", "sweep_sha256", "sweep_toml",
               "harness_version", "started_at", "scheduled_for", "skipped_slots",
               "skipped_slot_count")
RESTART_COLUMNS = ("restart_id", "run_id", "arm", "restart_index", "node", "server_kind",
                   "single_instance", "status", "error", "base_url", "pid", "command",
                   "log_path", "effective_config", "effective_config_sha256",
                   "server_version", "started_at", "ready_at", "stopped_at", "stop_status",
                   "requested_node", "worker_hostname", "interrupted_windows",
                   "ready_probe", "server_family", "stray_processes", "deployment",
                   "crashed_node", "block", "block_position", "restart_order",
                   "order_seed")
WINDOW_COLUMNS = ("window_id", "restart_id", "run_id", "arm", "workload", "prompt_set",
                  "concurrency", "submitted", "completed", "failed", "unresolved",
                  "warmup_submitted", "drain_status", "drain_timeout_s", "window_start",
                  "window_end", "elapsed_s", "min_requests", "max_tokens", "temperature",
                  "requests_file_sha256", "arrival", "requested_rate_rps", "achieved_rate_rps",
                  "prompt_cache", "input_tokens_target", "seed", "denominator", "attempt",
                  "worker_hostname", "token_count", "calibration_requests",
                  "calibration_compared", "calibration_rel_error",
                  "calibration_max_rel_error", "calibration_detail",
                  "tokenizer_special_tokens", "client_workers", "client_lag_p50_ms",
                  "client_lag_p99_ms", "client_lag_max_ms", "client_lag_samples",
                  "client_cpu_share", "bunched_event_fraction", "telemetry_file_sha256",
                  # issue #26: the workload it measured, and how closely an open-loop
                  # window kept its schedule
                  "workload_kind", "workload_file_sha256", "turns", "think_time_s",
                  "requested_span_s", "achieved_span_s", "arrival_lag_p50_ms",
                  "arrival_lag_p99_ms", "arrival_lag_max_ms", "max_arrival_lag_ms",
                  # issue #27: its load point (concurrency, and a rate ladder's rate)
                  "load_point")
# Manifest values stored as JSON text (a key a manifest lacks stays NULL).
JSON_COLUMNS = ("effective_config", "interrupted_windows", "stray_processes", "deployment",
                "skipped_slots")


# --- where things are -----------------------------------------------------------------------


def folder_name(run_id: str) -> str:
    """A run id as a portable folder name (Airflow run ids hold ':' and '+')."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", run_id)


def raw_root(data_dir: Path) -> Path:
    return Path(data_dir) / "raw"


@dataclass(frozen=True)
class RunLayout:
    """Where one run's raw files, publication and Data Docs live."""

    data_dir: Path
    run_id: str

    @property
    def run_dir(self) -> Path:
        return raw_root(self.data_dir) / folder_name(self.run_id)

    @property
    def export_dir(self) -> Path:
        """Where the run's publication (validated entries, report) is written."""
        return Path(self.data_dir) / "published" / folder_name(self.run_id)

    @property
    def data_docs_dir(self) -> Path:
        """Where the run's expectation results are rendered as GX Data Docs."""
        return Path(self.data_dir) / "gx-data-docs" / folder_name(self.run_id)

    @property
    def run_manifest(self) -> Path:
        return self.run_dir / RUN_MANIFEST

    def slot_dir(self, arm: str, restart_index: int) -> Path:
        return self.run_dir / arm / f"r{restart_index}"

    def restart_manifest(self, arm: str, restart_index: int) -> Path:
        return self.slot_dir(arm, restart_index) / RESTART_MANIFEST

    def server_log(self, arm: str, restart_index: int) -> Path:
        return self.slot_dir(arm, restart_index) / SERVER_LOG

    def readiness_progress(self, arm: str, restart_index: int) -> Path:
        return self.slot_dir(arm, restart_index) / READINESS_PROGRESS

    def node_manifest(self, arm: str, restart_index: int, node: str) -> Path:
        return self.slot_dir(arm, restart_index) / NODES_DIR / f"{node}{MANIFEST_SUFFIX}"

    def node_log(self, arm: str, restart_index: int, node: str) -> Path:
        return self.slot_dir(arm, restart_index) / NODES_DIR / f"{node}.log"

    def restart_id(self, arm: str, restart_index: int) -> str:
        return f"{self.run_id}/{arm}/r{restart_index}"

    def window_id(self, arm: str, restart_index: int, workload: str,
                  point: LoadPoint | int) -> str:
        return f"{self.restart_id(arm, restart_index)}/{window_stem(workload, point)}"

    def search_record(self, arm: str, restart_index: int, workload: str) -> Path:
        """The rates a searching restart measured for a workload and why (issue #27;
        benchledger.restart.rate_search): JSON, but not named .json (never a window's manifest)."""
        return self.slot_dir(arm, restart_index) / f"{workload}{SEARCH_SUFFIX}"

    def look_file(self, blocks: int) -> Path:
        """The interim look a sequential sweep took after `blocks` blocks."""
        return self.run_dir / LOOKS_DIR / f"after_block_{blocks:04d}{MANIFEST_SUFFIX}"

    def window_files(self, arm: str, restart_index: int, workload: str,
                     point: LoadPoint | int) -> WindowFiles:
        return WindowFiles.of(self.slot_dir(arm, restart_index)
                              / window_stem(workload, point))


@dataclass(frozen=True, order=True)
class LoadPoint:
    """One load an arm is measured at: a concurrency and, on a rate ladder, a rate."""

    concurrency: int
    rate_rps: float | None = None  # the requested rate of a rate ladder's rung

    @property
    def label(self) -> str:
        """How windows, subjects and entries name it: c8, or c64-r2.5 on a rate ladder."""
        if self.rate_rps is None:
            return f"c{self.concurrency}"
        return f"c{self.concurrency}-r{format(self.rate_rps, 'g')}"

    @classmethod
    def parse(cls, label: str) -> LoadPoint:
        """The point a label names (the inverse of `label`)."""
        match = re.fullmatch(r"c(\d+)(?:-r([0-9.e+-]+))?", label)
        if match is None:
            raise ValueError(f"not a load point: {label!r} (c<concurrency>[-r<rate>])")
        rate = match.group(2)
        return cls(int(match.group(1)), None if rate is None else float(rate))



def window_stem(workload: str, point: LoadPoint | int) -> str:
    """A window's name in its restart's folder and id, and its files' name before suffixes:
    the workload and the load point (a concurrency alone: the point of that concurrency)."""
    if not isinstance(point, LoadPoint):
        point = LoadPoint(point)
    return f"{workload}-{point.label}"


@dataclass(frozen=True)
class WindowFiles:
    """One window's files: requests, observations, telemetry samples and manifest (the
    manifest written last), the mark of an attempt measuring it and its progress report."""

    requests: Path
    observed: Path
    manifest: Path
    started: Path
    progress: Path
    telemetry: Path

    @classmethod
    def of(cls, stem: Path) -> WindowFiles:
        name = stem.name
        return cls(requests=stem.with_name(name + REQUESTS_SUFFIX),
                   observed=stem.with_name(name + OBSERVED_SUFFIX),
                   telemetry=stem.with_name(name + TELEMETRY_SUFFIX),
                   manifest=stem.with_name(name + MANIFEST_SUFFIX),
                   started=stem.with_name(name + STARTED_SUFFIX),
                   progress=stem.with_name(name + PROGRESS_SUFFIX))


# --- finding files --------------------------------------------------------------------------


def run_manifests(data_dir: Path) -> list[Path]:
    """Every run manifest under the data dir, oldest folder name first."""
    return sorted(raw_root(data_dir).glob(f"*/{RUN_MANIFEST}"))


def run_dirs(data_dir: Path) -> list[Path]:
    """Every run folder under the data dir (with or without its manifest yet)."""
    root = raw_root(data_dir)
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def restart_manifests(run_dir: Path) -> list[Path]:
    """The restart manifests of one run folder."""
    return sorted(Path(run_dir).glob(f"*/r*/{RESTART_MANIFEST}"))


def run_dir_of_restart_manifest(path: Path) -> Path:
    """The run folder a restart manifest lies in (<run>/<arm>/r<k>/restart.json)."""
    return Path(path).parents[2]


def all_restart_manifests(data_dir: Path) -> list[Path]:
    """The restart manifests of every run under the data dir."""
    return sorted(raw_root(data_dir).glob(f"*/*/r*/{RESTART_MANIFEST}"))


def node_manifests(slot_dir: Path) -> list[Path]:
    """The manifests of one restart's processes on other nodes."""
    return sorted((Path(slot_dir) / NODES_DIR).glob(f"*{MANIFEST_SUFFIX}"))


def all_node_manifests(data_dir: Path) -> list[Path]:
    """The node-process manifests of every run under the data dir."""
    return sorted(raw_root(data_dir).glob(f"*/*/r*/{NODES_DIR}/*{MANIFEST_SUFFIX}"))


def run_dir_of_restart(manifest: Path) -> Path:
    """The run folder a restart manifest belongs to."""
    return manifest.parents[2]


def window_manifests(run_dir: Path) -> list[Path]:
    """The window manifests of one run folder (not their observations)."""
    return sorted(p for p in Path(run_dir).glob(f"*/r*/*-c*{MANIFEST_SUFFIX}")
                  if not p.name.endswith(OBSERVED_SUFFIX))


def look_files(run_dir: Path) -> list[Path]:
    """A sequential run's interim looks, in the order they were taken."""
    return sorted((Path(run_dir) / LOOKS_DIR).glob(f"after_block_*{MANIFEST_SUFFIX}"))


def stopped_after(run_dir: Path) -> int | None:
    """The blocks after which a sequential run's look stopped it (None: it did not stop
    early, or is not sequential)."""
    stops = [look["blocks"] for path in look_files(run_dir)
             if (look := read_json(path)).get("decision") == LOOK_STOP]
    return min(stops) if stops else None


def requests_files(run_dir: Path) -> list[Path]:
    """The requests files (Parquet) of one run folder's windows."""
    return sorted(p for p in Path(run_dir).glob(f"*/r*/*{REQUESTS_SUFFIX}")
                  if not p.name.endswith(TELEMETRY_SUFFIX))


def observed_files(run_dir: Path) -> list[Path]:
    """The observations files of one run folder's windows."""
    return sorted(Path(run_dir).glob(f"*/r*/*{OBSERVED_SUFFIX}"))


def telemetry_files(run_dir: Path) -> list[Path]:
    """The GPU telemetry files (Parquet) of one run folder's windows."""
    return sorted(Path(run_dir).glob(f"*/r*/*{TELEMETRY_SUFFIX}"))


def progress_files(run_dir: Path) -> list[Path]:
    """The progress reports of one run folder's windows and readiness waits."""
    return sorted(Path(run_dir).glob(f"*/r*/*{PROGRESS_SUFFIX}"))


def started_marks(slot_dir: Path) -> list[Path]:
    """The marks attempts left in one restart's folder (windows started, not written)."""
    return sorted(Path(slot_dir).glob(f"*{STARTED_SUFFIX}"))


def window_id_of_mark(restart_id: str | None, mark: Path) -> str:
    """The window a mark stands for (its name without the suffix is the window's stem)."""
    return f"{restart_id}/{mark.name.removesuffix(STARTED_SUFFIX)}"


def loaded_files(run_dir: Path) -> list[Path]:
    """The run folder's files the loader reads (manifests, requests, observations and
    telemetry; never server.log, whose lines arrive in the observations, a writer's .tmp,
    or the node-process manifests, which the restart manifest's deployment sums up)."""
    return sorted(p for p in Path(run_dir).rglob("*")
                  if p.suffix in (MANIFEST_SUFFIX, REQUESTS_SUFFIX) and p.is_file()
                  and p.parent.name != NODES_DIR)


# --- writing and reading --------------------------------------------------------------------


def staged(path: Path) -> Path:
    """Where `path` is written before it is renamed into place."""
    return path.with_name(path.name + TMP_SUFFIX)


def json_text(data: object) -> str:
    return json.dumps(data, indent=1, sort_keys=True, default=str)


def write_json(path: Path, data: object, sealed_in: Path | None = None) -> None:
    """Write atomically: a reader (the loader) never sees half a manifest, and a failed
    write leaves no .tmp file behind. `sealed_in`: a manifest the loader reads, recorded in
    the run's seal in that folder (the run's or its restart's: benchledger.raw.seal) before it
    is put in place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = staged(path)
    try:
        text = json_text(data)
        tmp.write_text(text)
        if sealed_in is not None:
            seal.record(sealed_in, [(path, seal.sha256_bytes(text.encode()))])
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def read_manifest(path: Path) -> dict[str, Any]:
    """A manifest's content, or {} where there is none yet."""
    return read_json(path) if Path(path).exists() else {}


def remove_quietly(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def move_into_place(pairs: Iterable[tuple[Path, Path]]) -> None:
    """Rename each (staged, final) pair in order, the last being the manifest. Should a
    rename fail midway, the manifest is removed: an older manifest must not point at files
    this write replaced."""
    pairs = list(pairs)
    moved = False
    try:
        for tmp, final in pairs:
            os.replace(tmp, final)
            moved = True
    except OSError:
        if moved:
            remove_quietly(pairs[-1][1])
        raise
