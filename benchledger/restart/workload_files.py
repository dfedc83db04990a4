"""The run's prepared workloads (issue #26): made once by `plan`, used by every window.

A workload that is not a built-in prompt set (a dataset, synthetic lengths, shared
prefixes, multi-turn sessions, a trace) is prepared when the run is planned
(benchledger.workloads): its requests become an Arrow file of the run folder,
`<workload>.workload.arrow`, and the run manifest records that file's sha256 with the
workload's provenance (the dataset's or trace's sha256, rows and ids, the distributions and
their seed). Every arm and restart of the run then sends exactly those requests, read from
that file (checked against its sha256 before a window starts), wherever it is measured: the
file travels with the run folder (an object store's pull brings it, as it brings the run
manifest), so the dataset itself need only be readable where the run is planned. The
file holds the dataset's text: it is no more readable than the files it was made from
(issue #39: a dataset kept private was copied into a file anyone could read).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from benchledger.client.items import Items
from benchledger.raw import layout as raw
from benchledger.raw.records import file_sha256
from benchledger.sweep.spec import Sweep, Workload
from benchledger.workloads.errors import WorkloadError
from benchledger.workloads.prepare import prepare_workload

WORKLOAD_SUFFIX = ".workload.arrow"


class PreparedFileMismatch(RuntimeError):
    """A prepared workload's file is missing or is not the file the run recorded."""


def items_needed(sweep: Sweep, workload: Workload) -> int:
    """How many requests every window of `workload` may draw: the most any arm's warm-up
    or measured part sends (a session's turns rounded up to whole sessions)."""
    turns = workload.turns or 1
    most = 0
    for arm in sweep.arms:
        plan = sweep.plan(arm)
        warmup = -(-plan.warmup // turns) * turns
        most = max(most, plan.requests, warmup)
    return most


def prepare_run_workloads(run_dir: Path, sweep: Sweep, base_dir: Path
                          ) -> dict[str, dict[str, Any]]:
    """Prepare every workload of `sweep` that is not a built-in prompt set into `run_dir`;
    returns what the run manifest records of each ({file, sha256, provenance}). Relative
    dataset and trace paths are the sweep file's folder's (`base_dir`). Raises
    WorkloadError naming the file, line and what is wrong."""
    recorded: dict[str, dict[str, Any]] = {}
    for workload in sweep.workloads:
        if workload.kind == "builtin":
            continue
        prepared = prepare_workload(workload, base_dir, items_needed(sweep, workload),
                                    sweep.defaults.seed,
                                    workload.max_tokens or sweep.defaults.max_tokens)
        path = run_dir / f"{workload.name}{WORKLOAD_SUFFIX}"
        _write_arrow(path, prepared.table, prepared.sources)
        recorded[workload.name] = {"file": path.name, "sha256": file_sha256(path),
                                   "provenance": prepared.provenance}
    return recorded


def check_run_workloads(sweep: Sweep, base_dir: Path) -> None:
    """Prepare every workload in memory and drop it: a bad dataset or trace is refused
    (WorkloadError, naming the file, line and what is wrong) before a run starts, as a bad
    sweep file is. The run's plan prepares them again, into the run folder."""
    for workload in sweep.workloads:
        if workload.kind != "builtin":
            prepare_workload(workload, base_dir, items_needed(sweep, workload),
                             sweep.defaults.seed,
                             workload.max_tokens or sweep.defaults.max_tokens)


def _write_arrow(path: Path, table: pa.Table, sources: tuple[Path, ...] = ()) -> None:
    """Written whole or not at all (a .tmp file renamed into place), like every raw file;
    its permissions are those a new file gets here, less what any of `sources` denies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = raw.staged(path)
    try:
        with pa.OSFile(str(staged), "wb") as sink:
            mode = stat.S_IMODE(os.stat(staged).st_mode)  # still empty: nothing to read yet
            for source in sources:
                mode &= stat.S_IMODE(os.stat(source).st_mode)
            os.chmod(staged, mode)
            with ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
        os.replace(staged, path)
    except BaseException:
        raw.remove_quietly(staged)
        raise


def window_items(layout: raw.RunLayout, sweep: Sweep, workload_name: str) -> Items | None:
    """What a window of `workload_name` draws its requests from (None: a built-in prompt
    set), its file checked against the sha256 the run recorded."""
    workload = sweep.workload(workload_name)
    if workload.kind == "builtin":
        return None
    try:
        recorded = raw.read_json(layout.run_manifest)["workloads"][workload_name]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PreparedFileMismatch(
            f"{layout.run_manifest}: no prepared workload {workload_name!r} recorded "
            f"({type(exc).__name__}: {exc}); the run's plan prepares it") from exc
    path = layout.run_dir / recorded["file"]
    if not path.is_file():
        raise PreparedFileMismatch(f"{path}: the prepared workload {workload_name!r} the run "
                                   "recorded is missing")
    found = file_sha256(path)
    if found != recorded["sha256"]:
        raise PreparedFileMismatch(
            f"{path}: sha256 {found}, but the run recorded {recorded['sha256']}; refusing "
            f"to measure workload {workload_name!r} with requests other than those planned")
    return Items(path=str(path), sha256=found, kind=workload.kind, seed=sweep.defaults.seed,
                 turns=workload.turns or 1, think_time_s=workload.think_time_s,
                 history=workload.history,
                 prefix_tokens=workload.shared_prefix.tokens if workload.shared_prefix else None)


__all__ = ["PreparedFileMismatch", "WorkloadError", "check_run_workloads", "items_needed",
           "prepare_run_workloads", "window_items"]
