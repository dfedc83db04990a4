"""Validated-only exports: only rows of `published_entries` ever leave the warehouse.

One folder per publication:

    entries.json, entries.csv   every published entry measured by this pipeline (evidence
                                rerun), every label (the benchmark line)
    <kind>_entries.json, .csv   evidence from elsewhere, one pair per kind present
                                (imported, historical, derived_comparison), never merged
                                with the reruns (publishing/evidence.py)
    entries.md                  a Markdown table for a methodology page, and a section
                                per other evidence kind
    comparisons.json            every verdict, refuted hypotheses included
    report.html                 the page that reads top-down: verdicts, headline cards,
                                charts, workload, blocked entries by rule, provenance
    charts/<name>.svg           every chart report.html draws, as a file a publishing job
                                can embed (the same drawing as the page's inline SVG)
    MANIFEST.sha256             `sha256sum -c` checks all of the above
    .benchledger-publication    the mark of a folder benchledger publishes into

The folder opens offline: no page of it loads or links anything from elsewhere, and a
publication that would is refused (publishing/offline.py). The run's GX Data Docs are
therefore not in it: GX's pages load jQuery, Bootstrap and Vega from public CDNs (some
without integrity hashes, one on a floating major version). They stay with the run's data
(`<data dir>/gx-data-docs/<run>/`, runs.data_docs_path), and the report says where.

Publishing the same warehouse twice gives byte-identical files: rows are sorted, and
derivation bookkeeping that differs between runs (derived_at) is left out.

The folder is never the user's: a publication goes into a new or empty folder, or into
one an earlier publication marked (.benchledger-publication), and then replaces exactly
the files that publication's MANIFEST.sha256 lists, and only while they still hold what it
wrote. Nothing else is deleted or overwritten, no symlink is followed, and the manifest
lists only the files written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import duckdb
import pandas as pd

from benchledger.publishing.evidence import (
    csv_text,
    evidence_markdown,
    other_evidence,
    rerun_entries,
)
from benchledger.publishing.offline import outside_references_of
from benchledger.publishing.read import (
    comparisons,
    frontier,
    frontier_findings,
    latest_run_id,
    published_entries,
    run_entry_counts,
    unknown_run_message,
)
from benchledger.publishing.report_html import build_report
from benchledger.publishing.templating import render
from benchledger.raw.records import file_sha256
from benchledger.warehouse.db import first_row

MANIFEST = "MANIFEST.sha256"
MARKER = ".benchledger-publication"
MARKER_TEXT = (b"This folder was written by benchledger publish. A later publication into "
               b"it replaces\nonly the files listed in MANIFEST.sha256, and only while they "
               b"are unchanged.\n")
DATA_DOCS = "gx-data-docs"  # where a data dir keeps each run's GX Data Docs (not published)


class PublicationError(RuntimeError):
    """Nothing to publish, or a folder publishing must not write into; says which."""


# Derivation bookkeeping that would make two exports of the same entries differ.
UNSTABLE_COLUMNS = ("derived_at",)


def _stable(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in UNSTABLE_COLUMNS if c in frame.columns])


def _json_records(frame: pd.DataFrame) -> str:
    records = json.loads(_stable(frame).to_json(orient="records", date_format="iso",
                                                 double_precision=10))
    return json.dumps(records, indent=1, sort_keys=True) + "\n"


# The columns of an entry that entries.md shows (templates/entries.md); the ruler's two
# (client_lag_p99_ms, n_burst) are NULL in entries derived before they existed.
MD_COLUMNS = ("arm", "workload", "metric", "statistic", "phase", "scope", "concurrency",
              "numerator", "value", "unit", "ci95_low", "ci95_high", "n_requests",
              "n_restarts", "population", "prompt_cache", "drain_status", "token_source",
              "counter_check", "client_lag_p99_ms", "n_burst", "evidence")


def entries_markdown(entries: pd.DataFrame, run_id: str) -> str:
    """A Markdown table of the published entries, every label a reader needs (a latency in
    ms; entries.json and .csv keep seconds); every text cell escaped (the template's `md`
    filters: a name is shown, never rendered)."""
    rows: list[dict[str, Any]] = [{column: getattr(e, column, None) for column in MD_COLUMNS}
                                  for e in entries.itertuples()]
    return render("entries.md", run_id=run_id, entries=rows)


def manifest_text(files: dict[str, bytes]) -> bytes:
    """`sha256sum` format over the files written, so `sha256sum -c MANIFEST.sha256`
    verifies them (and lists nothing that was not written)."""
    lines = [f"{hashlib.sha256(data).hexdigest()}  {name}" for name, data in sorted(files.items())]
    return ("\n".join(lines) + "\n").encode()


def data_docs_location(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """Where the run's GX Data Docs are kept, as the report names them: their index page
    within the data dir (`gx-data-docs/<run>/index.html`), never a path of the publishing
    host; None where validate rendered none."""
    row = first_row(con, "SELECT data_docs_path FROM runs WHERE run_id = ?", [run_id])
    if not row or not row[0]:
        return None
    folder = Path(row[0])
    return f"{folder.parent.name}/{folder.name}/index.html"


def render_publication(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, bytes]:
    """Every file of one run's publication, by relative path (the manifest aside)."""
    published = published_entries(con, run_id)
    entries = rerun_entries(published)  # other evidence: its own files and sections
    report = build_report(con, run_id, data_docs_location(con, run_id))
    files: dict[str, bytes] = {
        "entries.json": _json_records(entries).encode(),
        "entries.csv": csv_text(_stable(entries)).encode(),
        "entries.md": (entries_markdown(entries, run_id)
                       + evidence_markdown(published)).encode(),
        # Verdicts are published like entries, refuted hypotheses included.
        "comparisons.json": _json_records(comparisons(con, run_id)).encode(),
        "report.html": report.html.encode(),
        **{chart.path: chart.svg.encode() for chart in report.charts},
    }
    points = frontier(con, run_id)
    if not points.empty:  # a run with SLOs or a ladder: its frontier and saturation points
        files["frontier.json"] = _json_records(points).encode()
        files["frontier.csv"] = csv_text(points).encode()
        files["frontier_findings.json"] = _json_records(frontier_findings(con, run_id)).encode()
    for kind, frame in other_evidence(published):
        files[f"{kind}_entries.json"] = _json_records(frame).encode()
        files[f"{kind}_entries.csv"] = csv_text(_stable(frame)).encode()
    return files


def check_publishable(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, int]:
    """The run's entry counts; LookupError for a run the warehouse does not hold (naming
    those it does), PublicationError for a run with nothing derived."""
    counts = run_entry_counts(con, run_id)
    if counts is None:
        raise LookupError(unknown_run_message(con, run_id))
    if counts["entries"] == 0:
        raise PublicationError(
            f"run {run_id} has no derived entries, so there is nothing to publish: its "
            "load, validate or derive step did not finish (the run's task log says why)")
    return counts


@dataclass(frozen=True)
class Publication:
    """What one publication wrote: the run, the folder and the run's entry counts."""

    run_id: str
    out: Path
    counts: dict[str, int]


def publish_run(con: duckdb.DuckDBPyConnection, run_id: str | None,
                out: Path | Callable[[str], Path]) -> Publication:
    """The one publish flow (`benchledger publish` and the publish task): the given run,
    else the warehouse's latest, exported into `out` (a folder, or the folder for the run
    id); refuses a run the warehouse does not hold (LookupError) or one with nothing
    derived (PublicationError)."""
    run_id = run_id or latest_run_id(con)
    counts = check_publishable(con, run_id)
    folder = Path(out(run_id) if callable(out) else out)
    previous = _owned_files(folder)  # refuses before anything is rendered or touched
    write_publication(folder, render_publication(con, run_id), previous)
    return Publication(run_id, folder, counts)


def export_run(con: duckdb.DuckDBPyConnection, run_id: str, out: Path) -> Path:
    """Write one run's publication into `out`: a new or empty folder, or one an earlier
    publication marked (see the module's docstring)."""
    return publish_run(con, run_id, out).out


def write_publication(out: Path, files: dict[str, bytes],
                      previous: dict[str, str] | None = None) -> None:
    """Replace the `previous` publication's files in `out` by `files`, the manifest and
    the marker. Every check runs before the first change."""
    previous = _owned_files(out) if previous is None else previous
    for name in files:
        _safe_name(out, name)
    _check_offline(files)
    _check_previous_unchanged(out, previous)
    written = {**files, MANIFEST: manifest_text(files)}
    _check_no_collisions(out, written, previous)
    _remove_previous(out, previous)
    out.mkdir(parents=True, exist_ok=True)
    # The marker and the manifest first: a publication cut short is still recognised as
    # benchledger's, and sha256sum -c then shows which files did not arrive whole.
    _write_new(out, MARKER, MARKER_TEXT, replace_own=True)
    _write_new(out, MANIFEST, written[MANIFEST], replace_own=True)
    for name, data in sorted(files.items()):
        _write_new(out, name, data)


def _check_offline(files: dict[str, bytes]) -> None:
    """Refuse a publication any page of which loads or links something from elsewhere
    (publishing/offline.py), naming each file and what it names."""
    outside = outside_references_of(files)
    if outside:
        named = "; ".join(f"{name}: {', '.join(urls[:2])}"
                          + (f" and {len(urls) - 2} more" if len(urls) > 2 else "")
                          for name, urls in list(outside.items())[:3])
        more = f"; and {len(outside) - 3} more files" if len(outside) > 3 else ""
        raise PublicationError(f"refusing to publish: a publication opens offline and "
                               f"loads nothing from elsewhere, but {len(outside)} of its "
                               f"files name URLs outside it: {named}{more}")


def _owned_files(out: Path) -> dict[str, str]:
    """What an earlier publication wrote into `out` ({relative path: sha256}); {} for a new
    or empty folder. Refuses a symlink, a file, or a used folder without the marker."""
    if out.is_symlink():
        raise PublicationError(f"{out} is a symlink; benchledger publish never writes "
                               "through symlinks: give the real folder")
    if not out.exists():
        return {}
    if not out.is_dir():
        raise PublicationError(f"{out} exists and is not a folder")
    if not any(out.iterdir()):
        return {}
    marker = out / MARKER
    if marker.is_symlink() or not marker.is_file():
        raise PublicationError(
            f"{out} is not empty and was not written by benchledger publish (no {MARKER} "
            "in it): publish into a new or empty folder, so none of your files is "
            "overwritten or deleted")
    manifest = out / MANIFEST
    if not manifest.exists() and not manifest.is_symlink():
        return {}  # cut short before the manifest: nothing of it is ours to replace
    if manifest.is_symlink() or not manifest.is_file():
        raise PublicationError(f"{manifest} is not a regular file; refusing to publish "
                               f"into {out}")
    owned = {}
    for number, line in enumerate(manifest.read_text(errors="replace").splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise PublicationError(f"{manifest}:{number}: not a sha256sum line: {line!r}")
        _safe_name(out, name)
        owned[name] = digest
    return owned


def _safe_name(out: Path, name: str) -> Path:
    """`out/name` for a relative path that stays inside `out` (no '..', no absolute path,
    no NUL); PublicationError otherwise."""
    parts = PurePosixPath(name).parts
    if (not parts or PurePosixPath(name).is_absolute() or ".." in parts or "\0" in name
            or name in (MANIFEST, MARKER)):
        raise PublicationError(f"refusing the file name {name!r} in {out}: publications "
                               "only write plain relative paths inside their folder")
    return out.joinpath(*parts)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except FileNotFoundError:
        return None


def _through_symlink(out: Path, name: str) -> bool:
    """Whether a folder on the way from `out` to `name` is a symlink (or not a folder)."""
    folder = out
    for part in PurePosixPath(name).parts[:-1]:
        folder = folder / part
        info = _lstat(folder)
        if info is None:
            return False
        if not stat.S_ISDIR(info.st_mode):
            return True
    return False


def _check_previous_unchanged(out: Path, previous: dict[str, str]) -> None:
    for name, digest in sorted(previous.items()):
        path = _safe_name(out, name)
        if _through_symlink(out, name):
            raise PublicationError(f"{path}: a folder on its path is a symlink now; refusing "
                                   "to replace the earlier publication")
        info = _lstat(path)
        if info is None:
            continue  # gone already: nothing to replace
        if not stat.S_ISREG(info.st_mode):
            raise PublicationError(f"{path} is no longer the regular file benchledger "
                                   "wrote; move it away to publish here again")
        if file_sha256(path) != digest:
            raise PublicationError(
                f"{path} differs from what benchledger wrote there (edited since, or a "
                "publication cut short); move it away to publish here again")


def _check_no_collisions(out: Path, written: dict[str, bytes],
                         previous: dict[str, str]) -> None:
    for name in sorted(written):
        if name in previous or name == MANIFEST:
            continue
        path = out.joinpath(*PurePosixPath(name).parts)
        if _through_symlink(out, name) or _lstat(path) is not None:
            raise PublicationError(f"{path} exists and benchledger did not write it; "
                                   "refusing to overwrite it: publish into a new or empty "
                                   "folder")


def _remove_previous(out: Path, previous: dict[str, str]) -> None:
    """Delete the earlier publication's files, then its folders that are left empty."""
    folders: set[Path] = set()
    for name in previous:
        path = out.joinpath(*PurePosixPath(name).parts)
        if _lstat(path) is not None:
            path.unlink()
        folders.update(path.parents[:len(PurePosixPath(name).parts) - 1])
    for folder in sorted(folders, key=lambda f: len(f.parts), reverse=True):
        with contextlib.suppress(OSError):  # only when empty: a user's file keeps it
            folder.rmdir()


def _write_new(out: Path, name: str, data: bytes, replace_own: bool = False) -> None:
    """Create `out/name` (and its folders) with O_EXCL|O_NOFOLLOW: an existing file or a
    symlink at that path is never written through. The marker and manifest of our own
    earlier publication (`replace_own`) are removed first."""
    path = out / name if replace_own else _safe_name(out, name)
    if replace_own and (info := _lstat(path)) is not None:
        if not stat.S_ISREG(info.st_mode):
            raise PublicationError(f"{path} is not a regular file; refusing to replace it")
        path.unlink()
    folder = out
    for part in PurePosixPath(name).parts[:-1]:
        folder = folder / part
        if _lstat(folder) is None:
            folder.mkdir()
        elif folder.is_symlink() or not folder.is_dir():
            raise PublicationError(f"{folder} is not a plain folder; refusing to write "
                                   "into it")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                 0o644)
    with os.fdopen(fd, "wb") as file:
        file.write(data)


