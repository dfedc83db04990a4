"""The run's sweep, recorded once: `plan` writes the sweep file's text and its sha256 into the
run manifest, and every later step parses that text (checked against the sha256) instead
of the file, so every step of a run measures the sweep the warehouse's `runs` row names,
even if the file changed meanwhile. (benchledger.restart.steps re-exports these names: they are
the restart steps' own.)
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from benchledger import __version__
from benchledger.raw import layout as raw
from benchledger.raw.layout import RunLayout
from benchledger.raw.seal import SEAL_VERSION
from benchledger.restart.manifest import utc_now
from benchledger.restart.workload_files import prepare_run_workloads
from benchledger.sweep import schedule
from benchledger.sweep.spec import (
    RecordedSweepMismatch,
    Sweep,
    SweepError,
    parse_recorded,
    parse_sweep,
    read_sweep_file,
    recorded_form,
)

log = logging.getLogger(__name__)


class RecordMismatch(RuntimeError):
    """The run manifest's sweep text is not the text its sha256 names (edited by hand, or a
    truncated copy): no step measures a sweep other than the one the run recorded."""


# --- the run's sweep, recorded once ---------------------------------------------------------


def write_run_manifest(layout: RunLayout, sweep_path: Path,
                       scheduled_for: datetime | None = None,
                       previous_slot: datetime | None = None) -> dict[str, Any]:
    """Record what is being run: the sweep file's text (read once, and validated) and its
    sha256, which every later step parses and checks instead of the file. Secrets in an
    arm's command are recorded as `<redacted>`, and the sha256 is then the recorded
    text's (benchledger.sweep.spec.recorded_form)."""
    text, file_sha256 = read_sweep_file(sweep_path)
    sweep = parse_sweep(text, source=str(sweep_path))
    # Secrets written into an arm's command stay in the file (see deployment.as_written).
    recorded, sha256 = recorded_form(text, file_sha256, str(sweep_path))
    manifest: raw.RunManifest = {
        "run_id": layout.run_id,
        "sweep_name": sweep.sweep.name,
        "sweep_path": str(sweep_path),
        "sweep_sha256": sha256,
        "sweep_toml": recorded,
        "harness_version": __version__,
        "started_at": utc_now(),
        "seal": SEAL_VERSION,
    }
    # Datasets, synthetic lengths, sessions and traces: prepared once, here (issue #26).
    workloads = prepare_run_workloads(layout.run_dir, sweep, Path(sweep_path).parent)
    if workloads:
        manifest["workloads"] = workloads
    if scheduled_for is not None:  # a scheduled run: its slot, and those skipped before it
        skipped, count = schedule.skipped_slots(sweep.sweep.airflow_schedule,
                                                previous_slot, scheduled_for)
        manifest.update({"scheduled_for": scheduled_for.isoformat(),
                         "skipped_slots": skipped if previous_slot else None,
                         "skipped_slot_count": count if previous_slot else None})
    raw.write_json(layout.run_manifest, manifest, sealed_in=layout.run_dir)
    return dict(manifest)


def recorded_sweep(layout: RunLayout, sweep_path: Path | None = None) -> tuple[Sweep, str]:
    """(the sweep, its sha256) as the run's plan recorded them: the run manifest's text, checked
    against its sha256, parsed once. When `sweep_path` now holds another text, that is
    logged: this run still measures what it planned."""
    try:
        manifest = raw.read_json(layout.run_manifest)
        text, sha256 = manifest["sweep_toml"], manifest["sweep_sha256"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RecordMismatch(f"{layout.run_manifest}: no recorded sweep to measure "
                             f"({type(exc).__name__}: {exc}); plan did not run") from exc
    try:
        sweep = parse_recorded(text, sha256, f"{layout.run_manifest} (sweep_toml)")
    except RecordedSweepMismatch as exc:
        raise RecordMismatch(f"{exc}; refusing to measure a sweep other than the one this "
                             "run planned") from exc
    if sweep_path is not None and Path(sweep_path).is_file():
        now = _recorded_sha256(Path(sweep_path))
        if now != sha256:
            log.warning("%s changed since run %s was planned (sha256 %s, planned %s); "
                        "this run measures the planned text", sweep_path, layout.run_id,
                        now, sha256)
    return sweep, sha256


def _recorded_sha256(sweep_path: Path) -> str | None:
    """The sha256 a run would record for the file now (None: it is no sweep now)."""
    try:
        return recorded_form(*read_sweep_file(sweep_path), str(sweep_path))[1]
    except SweepError:
        return None
