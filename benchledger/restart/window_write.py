"""One window's raw files, written whole or not at all, and recognised as whole later.

A window's files (its requests as Parquet, what the server said during it, the GPU
telemetry of every node as Parquet, its accounting manifest) are written as .tmp files and
renamed into place, manifest last, only when all are complete: a full disk or an
unwritable folder leaves the window either whole or absent, never half written, and the
failure is named (path, errno). A
retried measure step keeps every window an earlier attempt wrote whole (each file the
manifest names has the sha256 it records) and measures only the others.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq

from benchledger.client import WindowResult
from benchledger.raw import layout as raw
from benchledger.raw import seal
from benchledger.raw.layout import NO_ATTEMPT, Attempt, RunLayout, WindowManifest
from benchledger.raw.records import file_sha256, requests_table
from benchledger.redaction import redact
from benchledger.restart.manifest import RawWriteError, os_error_text
from benchledger.sweep.slos import LoadPoint


def ns_to_iso(wall_ns: int) -> str:
    return datetime.fromtimestamp(wall_ns / 1e9, UTC).isoformat()


def write_window(layout: RunLayout, arm: str, k: int, workload: str, prompt_set: str | None,
                 min_requests: int, result: WindowResult,
                 observations: dict[str, Any] | None = None, secret: str | None = None,
                 attempt: Attempt = NO_ATTEMPT, sweep_sha256: str | None = None,
                 telemetry: pa.Table | None = None,
                 point: LoadPoint | None = None) -> WindowManifest:
    """Write one window's raw files: the requests (Parquet), what the server and node
    said during it (JSON) and its accounting (the manifest, JSON, written last). The
    manifest names the attempt that measured the window, its worker and the sha256 of the
    sweep text it was measured under. `telemetry`: the GPU samples of every node during
    it (benchledger.server.telemetry), stored as Parquet beside the requests (None: no source).
    `secret` (the server's API key) is redacted from everything written; any OSError
    removes the .tmp files and raises RawWriteError. `point`: the load point it measured
    (default: its concurrency's)."""
    accounting = result.accounting
    point = point or LoadPoint(accounting["concurrency"])
    files = layout.window_files(arm, k, workload, point)
    # the manifest last
    order = (files.observed, files.requests, *(() if telemetry is None else (files.telemetry,)),
             files.manifest)
    writing = files.requests.parent
    try:
        writing.mkdir(parents=True, exist_ok=True)
        # Named after its window, so two windows' files never share a sha256.
        writing = raw.staged(files.observed)
        writing.write_text(raw.json_text(redact(
            {"window_id": accounting["window_id"], **(observations or {})}, secret)))
        writing = raw.staged(files.requests)
        pq.write_table(requests_table(redact(result.rows, secret)), writing)
        named: dict[str, Any] = {}
        if telemetry is not None:
            writing = raw.staged(files.telemetry)
            ids = {"restart_id": layout.restart_id(arm, k),
                   "window_id": accounting["window_id"]}
            table = telemetry
            for column, value in ids.items():
                table = table.append_column(column, pa.array([value] * len(table),
                                                             pa.string()))
            # the window's id in the footer too: two windows' files never share a sha256,
            # not even two without a sample (their readings all failed)
            pq.write_table(table.replace_schema_metadata(
                {**(table.schema.metadata or {}), b"benchledger.window_id":
                 accounting["window_id"].encode()}), writing)
            named = {"telemetry_file": files.telemetry.name,
                     "telemetry_file_sha256": file_sha256(writing)}
        manifest: dict[str, Any] = {
            **accounting,
            "restart_id": layout.restart_id(arm, k),
            "run_id": layout.run_id,
            "arm": arm,
            "workload": workload,
            "load_point": point.label,
            "prompt_set": prompt_set,
            "min_requests": min_requests,
            "attempt": attempt.number,
            "worker_hostname": attempt.worker_hostname,
            "sweep_sha256": sweep_sha256,
            "window_start": ns_to_iso(accounting["window_start_wall_ns"]),
            "window_end": ns_to_iso(accounting["window_end_wall_ns"]),
            "requests_file": files.requests.name,
            "requests_file_sha256": file_sha256(raw.staged(files.requests)),
            "observed_file": files.observed.name,
            "observed_file_sha256": file_sha256(raw.staged(files.observed)),
            **named,
        }
        writing = raw.staged(files.manifest)
        writing.write_text(raw.json_text(manifest))
        # the run's seal learns each file before it is in place (benchledger.raw.seal); the
        # manifest's own hashes of the others, each file read once
        shas = {files.observed: manifest["observed_file_sha256"],
                files.requests: manifest["requests_file_sha256"],
                files.telemetry: named.get("telemetry_file_sha256"),
                files.manifest: file_sha256(writing)}
        seal.record(files.manifest.parent, [(final, shas[final]) for final in order])
        raw.move_into_place((raw.staged(final), final) for final in order)
    except OSError as exc:
        raw.remove_quietly(*(raw.staged(final) for final in order))
        raise RawWriteError(f"window {accounting['window_id']}: its raw files could not be "
                            f"written: {os_error_text(exc, writing)}") from exc
    return cast(WindowManifest, manifest)


def written_window(layout: RunLayout, arm: str, k: int, workload: str,
                   point: LoadPoint | int) -> WindowManifest | None:
    """The manifest of a window whose files are in place and whole (each file it names has
    the sha256 it records), else None: such a window is never measured twice. A manifest
    naming a file that changed (a write killed between renames) does not count."""
    files = layout.window_files(arm, k, workload, point)
    try:
        manifest: dict[str, Any] = raw.read_json(files.manifest)
    except (OSError, ValueError):
        return None  # absent (or not a manifest): the window is measured
    named = [(manifest.get("requests_file"), manifest.get("requests_file_sha256")),
             (manifest.get("observed_file"), manifest.get("observed_file_sha256")),
             (manifest.get("telemetry_file"), manifest.get("telemetry_file_sha256"))]
    if manifest.get("window_id") != layout.window_id(arm, k, workload, point) \
            or not named[0][0]:
        return None
    for name, sha256 in named:
        path = files.manifest.parent / name if name else None
        if path is not None and not (path.is_file() and file_sha256(path) == sha256):
            return None
    return cast(WindowManifest, manifest)
