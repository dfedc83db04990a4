"""Load one run's raw files into the warehouse: one transaction, a few bulk inserts.

A load reads and hashes every manifest of the run folder and works out what is new (a
file is loaded once, by its sha256) and what is a second version of something already
loaded (a retried step: recorded in raw_files as <kind>-superseded, with no rows, so the
difference stays auditable). Then it writes table by table: the requests of every new
window in one INSERT that DuckDB reads from the Parquet files itself, and every other
table in one insert of the rows gathered. Statements grow with tables, not with files or
rows; the whole run commits or rolls back as one.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from benchledger.raw import layout as raw
from benchledger.raw.layout import JSON_COLUMNS, RESTART_COLUMNS, RUN_COLUMNS, WINDOW_COLUMNS
from benchledger.raw.records import file_sha256
from benchledger.raw.seal import read_seal
from benchledger.warehouse.db import WarehouseError, first_row, insert_frame, only_row
from benchledger.warehouse.observations import clock_rows, log_rows, metric_samples

# kind of manifest -> (its table, its columns; the first is the table's key)
MANIFEST_TABLES = {"run": ("runs", RUN_COLUMNS), "restart": ("restarts", RESTART_COLUMNS),
                   "window": ("windows", WINDOW_COLUMNS)}

# Characters DuckDB's read_parquet takes as a glob pattern in a path.
_GLOB_CHARS = re.compile(r"[*?\[\]{}]")


@dataclass(frozen=True)
class _Manifest:
    kind: str  # run | restart | window
    path: Path
    sha256: str
    data: dict[str, Any]

    @property
    def key(self) -> str | None:
        """The value of its table's key column (None: the manifest lacks it)."""
        return self.data.get(MANIFEST_TABLES[self.kind][1][0])


@dataclass(frozen=True)
class _NamedFile:
    """A file a window manifest names, hashed and checked against the manifest."""

    kind: str  # requests | observations | telemetry
    path: Path
    sha256: str
    rows: int = 0  # a requests file's footer count
    columns: tuple[str, ...] = ()
    identity: tuple[int, int, int, int] | None = None


def load_run_dir(con: duckdb.DuckDBPyConnection, run_dir: Path,
                 recorded_as: Callable[[Path], str] = str) -> dict[str, int]:
    """Load every raw file of one run; files already loaded (by sha256) add nothing.

    One transaction: a refusal or a crash mid-load leaves the warehouse as it was before
    the call. (It is also what lets DuckDB write the requests in one pass: a commit per
    window file cost about as much again as the insert itself.) `recorded_as`: how
    raw_files names a file (its s3:// URL where the folder is an object store's local
    copy: benchledger.raw.store).
    """
    manifests = _read_manifests(Path(run_dir))
    looks = _read_looks(Path(run_dir), manifests[0])
    con.execute("BEGIN TRANSACTION")
    try:
        counts = _load(con, manifests, recorded_as)
        if looks:  # a sequential run's (the counts of every other run stay as they were)
            counts["looks"] = _load_looks(con, looks, recorded_as)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return counts


def _read_manifests(run_dir: Path) -> list[_Manifest]:
    paths = [("run", run_dir / raw.RUN_MANIFEST)]
    paths += [("restart", p) for p in raw.restart_manifests(run_dir)]
    paths += [("window", p) for p in raw.window_manifests(run_dir)]
    for _, path in paths:
        if not path.exists():
            raise WarehouseError(f"{path}: missing raw file")
    shas = _hash_all([path for _, path in paths])
    manifests = [_Manifest(kind, path, sha, _read_json(path))
                 for (kind, path), sha in zip(paths, shas, strict=True)]
    _check_one_sweep(manifests)
    _check_sealed(run_dir, manifests)
    return manifests


def _read_looks(run_dir: Path, run: _Manifest) -> list[_Manifest]:
    """A sequential run's interim looks (warehouse/interim.py), each checked like a
    manifest: measured under the run's sweep, and in its seal."""
    paths = raw.look_files(run_dir)
    looks = [_Manifest("look", path, sha, _read_json(path))
             for path, sha in zip(paths, _hash_all(paths), strict=True)]
    _check_one_sweep([run, *looks])
    if looks:
        _check_sealed(run_dir, [run, *looks])
    return looks


def _load_looks(con: duckdb.DuckDBPyConnection, looks: list[_Manifest],
                recorded_as: Callable[[Path], str]) -> int:
    """The looks' rows into interim_looks (a look file already loaded adds nothing)."""
    new = [m for m in looks if m.sha256 not in _loaded(con, [m.sha256 for m in looks])]
    rows = [row for m in new for row in m.data.get("rows", [])]
    insert_rows(con, "interim_looks", rows)
    insert_rows(con, "raw_files", [_file_row(recorded_as(m.path), m.sha256, "look",
                                             len(m.data.get("rows", []))) for m in new])
    return len(rows)


def _check_sealed(run_dir: Path, manifests: list[_Manifest]) -> None:
    """A sealed run (its manifest's `seal`): every manifest is a version one of the run's
    steps recorded writing (benchledger.raw.seal), else nothing of the run is loaded. The files
    a window manifest names are sealed through it: it records their sha256, which each of
    them is checked against when it is loaded (_named_files)."""
    if manifests[0].data.get("seal") is None:
        return  # written before runs were sealed
    sealed = read_seal(run_dir)
    for m in manifests:
        refusal = sealed.refusal(m.path, m.sha256)
        if refusal is not None:
            raise WarehouseError(refusal)


def _check_one_sweep(manifests: list[_Manifest]) -> None:
    """Every restart and window was measured under the sweep text the run recorded (each
    names its sha256; raw files from before they did name none), else nothing is loaded:
    numbers measured under another sweep must never be filed under this run's."""
    run = manifests[0].data
    recorded = run.get("sweep_sha256")
    for m in manifests[1:]:
        measured = m.data.get("sweep_sha256")
        if measured is not None and measured != recorded:
            raise WarehouseError(f"{m.path}: measured under the sweep with sha256 {measured}, "
                                 f"but its run ({manifests[0].path}) recorded {recorded}; "
                                 "refusing to load")


def _load(con: duckdb.DuckDBPyConnection, manifests: list[_Manifest],
          recorded_as: Callable[[Path], str]) -> dict[str, int]:
    _check_against_runs(con, manifests[0])
    loaded = _loaded(con, [m.sha256 for m in manifests])
    new, superseded = _split_new(con, [m for m in manifests if m.sha256 not in loaded])
    named = _named_files([m for m in new + superseded if m.kind == "window"])
    loaded |= _loaded(con, [f.sha256 for files in named.values() for f in files])

    rows: dict[str, list[dict]] = defaultdict(list)
    for m in superseded:
        rows["raw_files"] += [_file_row(recorded_as(m.path), m.sha256,
                                        f"{m.kind}-superseded", 0)]
        rows["raw_files"] += [_file_row(recorded_as(f.path), f.sha256, f"{f.kind}-superseded",
                                        0)
                              for f in named.get(m.path, []) if f.sha256 not in loaded]
    fresh: dict[str, list[tuple[_Manifest, _NamedFile]]] = {"requests": [], "observations": [],
                                                            "telemetry": []}
    for m in new:
        for f in named.get(m.path, []):
            if f.sha256 not in loaded:
                fresh[f.kind].append((m, f))
    counts = {"requests": _insert_requests(con, [f for _, f in fresh["requests"]])}
    rows["raw_files"] += [_file_row(recorded_as(f.path), f.sha256, "requests", f.rows)
                          for _, f in fresh["requests"]]
    counts["telemetry"] = _insert_telemetry(con, [f for _, f in fresh["telemetry"]])
    rows["raw_files"] += [_file_row(recorded_as(f.path), f.sha256, "telemetry", f.rows)
                          for _, f in fresh["telemetry"]]
    # each new window's observations, read once: its manifest row and its rows need them
    observed = {m.path: _read_json(f.path) for m in new for f in named.get(m.path, [])
                if f.kind == "observations"}
    counts["observations"] = _gather_observations(rows, fresh["observations"], observed,
                                                  recorded_as)
    for m in new:
        table, columns = MANIFEST_TABLES[m.kind]
        rows[table].append(_manifest_row(m, columns, observed.get(m.path, {})))
        if m.kind == "run":
            rows["workloads"] += workload_rows(m.data)
        rows["raw_files"].append(_file_row(recorded_as(m.path), m.sha256, m.kind, 1))
    for table, table_rows in rows.items():
        insert_rows(con, table, table_rows)
    return {"runs": len(rows["runs"]), "restarts": len(rows["restarts"]),
            "windows": len(rows["windows"]), **counts}


def _check_against_runs(con: duckdb.DuckDBPyConnection, run: _Manifest) -> None:
    """A run already in the warehouse keeps the sweep it was loaded with: a run folder
    whose run manifest now names another sweep text is refused, not loaded beside it."""
    row = first_row(con, "SELECT sweep_sha256 FROM runs WHERE run_id = ?", [run.key])
    if row is not None and row[0] is not None and row[0] != run.data.get("sweep_sha256"):
        raise WarehouseError(f"{run.path}: names the sweep with sha256 "
                             f"{run.data.get('sweep_sha256')}, but run {run.key} is in the "
                             f"warehouse with {row[0]}; refusing to load")


def _split_new(con: duckdb.DuckDBPyConnection, pending: list[_Manifest]
               ) -> tuple[list[_Manifest], list[_Manifest]]:
    """(new, superseded): a manifest whose key is already in its table is a second version
    of it. Two manifests of one folder with the same key are refused: which one to keep
    would be a guess."""
    new: list[_Manifest] = []
    superseded: list[_Manifest] = []
    seen: dict[tuple[str, str], Path] = {}
    for kind, (table, columns) in MANIFEST_TABLES.items():
        of_kind = [m for m in pending if m.kind == kind]
        for m in of_kind:
            if not m.key:
                raise WarehouseError(f"{m.path}: no {columns[0]} in the manifest")
            if (kind, m.key) in seen:
                raise WarehouseError(f"{m.path} and {seen[kind, m.key]} both describe "
                                     f"{kind} {m.key}; refusing to load")
            seen[kind, m.key] = m.path
        existing = {key for key, in con.execute(
            f"SELECT {columns[0]} FROM {table} WHERE {columns[0]} IN (SELECT unnest($keys))",
            {"keys": [m.key for m in of_kind]}).fetchall()}
        for m in of_kind:
            (superseded if m.key in existing else new).append(m)
    return new, superseded


def _named_files(windows: list[_Manifest]) -> dict[Path, list[_NamedFile]]:
    """The requests file (footer read, identity kept) and observations file of each window,
    by the window manifest's path; each refused unless its sha256 is the one the manifest
    names."""
    wanted = []  # (window manifest, kind, path, sha256 it names)
    for window in windows:
        data, folder = window.data, window.path.parent
        wanted.append((window, "requests", folder / data["requests_file"],
                       data["requests_file_sha256"]))
        if data.get("observed_file"):
            wanted.append((window, "observations", folder / data["observed_file"],
                           data["observed_file_sha256"]))
        if data.get("telemetry_file"):
            wanted.append((window, "telemetry", folder / data["telemetry_file"],
                           data["telemetry_file_sha256"]))
    for window, _, path, _ in wanted:
        if not path.is_file():
            raise WarehouseError(f"{path}: missing raw file (named by {window.path})")
    identities = [_file_identity(path) for _, _, path, _ in wanted]
    shas = _hash_all([path for _, _, path, _ in wanted])
    named: dict[Path, list[_NamedFile]] = defaultdict(list)
    for (window, kind, path, expected), sha, identity in zip(wanted, shas, identities,
                                                             strict=True):
        if sha != expected:
            raise WarehouseError(f"{path}: sha256 {sha} does not match its window manifest "
                                 f"({expected}); refusing to load")
        if kind in ("requests", "telemetry"):
            footer = pq.read_metadata(path)
            named[window.path].append(_NamedFile(
                kind, path, sha, footer.num_rows, tuple(footer.schema.to_arrow_schema().names),
                identity))
        else:
            named[window.path].append(_NamedFile(kind, path, sha))
    return named


def workload_rows(run: dict) -> list[dict]:
    """The run manifest's prepared workloads (benchledger.workloads), one `workloads` row
    each: the provenance's keys an auditor filters on as columns, all of it as JSON."""
    rows = []
    for name, recorded in sorted((run.get("workloads") or {}).items()):
        p = recorded.get("provenance") or {}
        dataset, trace = p.get("dataset") or {}, p.get("trace") or {}
        prefix = p.get("shared_prefix") or {}
        rows.append({
            "run_id": run["run_id"], "workload": name, "kind": p.get("kind"),
            "items": p.get("items"), "seed": p.get("seed"), "sampling": p.get("sampling"),
            "dataset_path": dataset.get("path"), "dataset_sha256": dataset.get("sha256"),
            "dataset_rows": dataset.get("rows"), "dataset_format": dataset.get("format"),
            "trace_path": trace.get("path"), "trace_sha256": trace.get("sha256"),
            "trace_rows": trace.get("rows"), "time_scale": trace.get("time_scale"),
            "turns": p.get("turns"), "think_time_s": p.get("think_time_s"),
            "history": p.get("history"), "shared_prefix_groups": prefix.get("groups"),
            "shared_prefix_tokens": prefix.get("tokens"), "ids_sha256": p.get("ids_sha256"),
            "prepared_file": recorded.get("file"), "prepared_sha256": recorded["sha256"],
            "provenance": json.dumps(p, sort_keys=True),
        })
    return rows


def _manifest_row(m: _Manifest, columns: tuple[str, ...], observed: dict) -> dict:
    row = {c: m.data.get(c) for c in columns}
    for column in JSON_COLUMNS:
        if row.get(column) is not None:
            row[column] = json.dumps(row[column], sort_keys=True)
    if m.kind != "run":
        row["raw_file_sha256"] = m.sha256
    if m.kind == "window":  # the thresholds and failures its observations recorded
        thresholds = observed.get("thresholds", {})
        errors = [f"{part}: {e}" for part in ("metrics", "log", "clocks", "telemetry")
                  for e in (observed.get(part) or {}).get("errors", [])]
        # "clocks": the one-node clock samples of windows measured before gpu_telemetry
        clocks = observed.get("telemetry") or observed.get("clocks") or {}
        row |= {
            "reconcile_tolerance": thresholds.get("reconcile_tolerance"),
            "min_clock_ratio": thresholds.get("min_clock_ratio"),
            "require_clock_check": thresholds.get("require_clock_check"),
            "clock_source": clocks.get("source"),
            "observation_errors": "; ".join(errors)[:4000] or None,
        }
    return row


def _gather_observations(rows: dict[str, list[dict]],
                         fresh: list[tuple[_Manifest, _NamedFile]],
                         observed_of: dict[Path, dict],
                         recorded_as: Callable[[Path], str]) -> int:
    """server_metrics, server_log_lines and node_clocks rows of each new observations
    file (its content in observed_of, by window manifest), added to `rows`; their number."""
    total = 0
    for window, f in fresh:
        observed = observed_of[window.path]
        tag = {"restart_id": window.data["restart_id"], "window_id": window.key,
               "raw_file_sha256": f.sha256}
        metrics = observed.get("metrics") or {}
        found = {
            "server_metrics": [
                {**tag, "phase": phase, "name": name, "labels": labels, "value": value,
                 "scraped_at": metrics[phase]["scraped_at"]}
                for phase in ("before", "after") if metrics.get(phase)
                for name, labels, value in metric_samples(metrics[phase]["text"])],
            "server_log_lines": [{**tag, **line} for line in
                                 log_rows((observed.get("log") or {}).get("lines", []))],
            "node_clocks": [{**tag, **sample}
                            for sample in clock_rows(observed.get("clocks") or {})],
        }
        for table, table_rows in found.items():
            rows[table] += table_rows
        count = sum(map(len, found.values()))
        rows["raw_files"].append(_file_row(recorded_as(f.path), f.sha256, "observations",
                                           count))
        total += count
    return total


def _insert_requests(con: duckdb.DuckDBPyConnection, files: list[_NamedFile]) -> int:
    """Insert the rows of every requests file, each tagged with its file's sha256.

    One INSERT reads all files with the same columns: DuckDB scans them in parallel, where
    one INSERT per file (a file is one row group) would run on one core at a time. Paths
    holding glob characters, which read_parquet would expand, are read by pyarrow instead.

    Files are hashed before they are read; writers replace raw files (write, then rename)
    and never write them in place, so a file whose inode, size or mtime changed in between,
    or rows that are not the footers' count, are refused, and the caller's transaction
    rolls back what was inserted."""
    known = {c for c, in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'request_records' "
        "AND database_name = current_database() AND schema_name = 'main'").fetchall()}
    layouts: dict[tuple[str, ...], list[_NamedFile]] = defaultdict(list)
    for f in files:
        unknown = [c for c in f.columns if c not in known or c == "raw_file_sha256"]
        if unknown:
            raise WarehouseError(f"{f.path}: columns {unknown} are not columns of "
                                 "request_records; refusing to load")
        layouts[f.columns].append(f)
    rows = 0
    for columns, group in layouts.items():
        literal = [f for f in group if not _GLOB_CHARS.search(str(f.path))]
        if literal:
            rows += _insert_parquet_files(con, columns, literal)
        for f in group:
            if f not in literal:
                rows += _insert_with_pyarrow(con, columns, f)
    changed = [str(f.path) for f in files if _file_identity(f.path) != f.identity]
    expected = sum(f.rows for f in files)
    if changed or rows != expected:
        raise WarehouseError(f"requests files changed while they were being loaded ({rows} "
                             f"rows read, {expected} in their footers; changed: "
                             f"{', '.join(changed) or 'none'}); refusing to load")
    return rows


def _insert_telemetry(con: duckdb.DuckDBPyConnection, files: list[_NamedFile]) -> int:
    """Insert the GPU samples of every telemetry file (benchledger.server.telemetry's columns plus
    restart_id and window_id), each row tagged with its file's sha256: one INSERT that
    DuckDB reads from the files, like the requests. Refused unless every column is one of
    gpu_telemetry's and the rows are the footers' count."""
    if not files:
        return 0
    known = {c for c, in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'gpu_telemetry' "
        "AND database_name = current_database() AND schema_name = 'main'").fetchall()}
    layouts: dict[tuple[str, ...], list[_NamedFile]] = defaultdict(list)
    for f in files:
        unknown = [c for c in f.columns if c not in known or c == "raw_file_sha256"]
        if unknown:
            raise WarehouseError(f"{f.path}: columns {unknown} are not columns of "
                                 "gpu_telemetry; refusing to load")
        layouts[f.columns].append(f)
    rows = 0
    for columns, group in layouts.items():
        literal = [f for f in group if not _GLOB_CHARS.search(str(f.path))]
        if literal:
            rows += _insert_parquet_files(con, columns, literal, "gpu_telemetry")
        for f in group:
            if f not in literal:
                rows += _insert_with_pyarrow(con, columns, f, "gpu_telemetry")
    expected = sum(f.rows for f in files)
    if rows != expected:
        raise WarehouseError(f"telemetry files changed while they were being loaded ({rows} "
                             f"rows read, {expected} in their footers); refusing to load")
    return rows


def _insert_parquet_files(con: duckdb.DuckDBPyConnection, columns: tuple[str, ...],
                          files: list[_NamedFile], table: str = "request_records") -> int:
    # Column names were checked against request_records' own; every value is bound.
    names = ", ".join(f'"{c}"' for c in columns)
    read = ", ".join(f'r."{c}"' for c in columns)
    con.register("incoming_files", pa.table({
        "filename": [str(f.path) for f in files], "sha256": [f.sha256 for f in files]}))
    try:
        return only_row(con, f"INSERT INTO {table} ({names}, raw_file_sha256) "
                              f"SELECT {read}, f.sha256 "
                              "FROM read_parquet($paths, filename = true) AS r "
                              "JOIN incoming_files AS f ON r.filename = f.filename",
                         {"paths": [str(f.path) for f in files]})[0]
    finally:
        con.unregister("incoming_files")


def _insert_with_pyarrow(con: duckdb.DuckDBPyConnection, columns: tuple[str, ...], f: _NamedFile,
                         table: str = "request_records") -> int:
    names = ", ".join(f'"{c}"' for c in columns)
    con.register("incoming_requests", pq.read_table(f.path))
    try:
        return only_row(con, f"INSERT INTO {table} ({names}, raw_file_sha256) "
                              f"SELECT {names}, $sha FROM incoming_requests",
                         {"sha": f.sha256})[0]
    finally:
        con.unregister("incoming_requests")


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict]) -> int:
    """Append rows (dicts keyed by column; a key a row lacks is a null) to `table` in one
    statement. Through Arrow, whose None is a null in every type (pandas would turn a
    missing integer into NaN); column by column, since Arrow's from_pylist would take the
    columns of the first row only."""
    columns = dict.fromkeys(key for row in rows for key in row)
    return insert_frame(con, table, pa.table({c: [row.get(c) for row in rows]
                                              for c in columns})) if rows else 0


def _loaded(con: duckdb.DuckDBPyConnection, shas: list[str]) -> set[str]:
    return {sha for sha, in con.execute(
        "SELECT sha256 FROM raw_files WHERE sha256 IN (SELECT unnest($shas))",
        {"shas": shas}).fetchall()}


def _file_row(path: str, sha256: str, kind: str, rows: int) -> dict:
    return {"sha256": sha256, "path": path, "kind": kind, "rows": rows,
            "loaded_at": datetime.now(UTC)}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WarehouseError(f"{path}: not a JSON raw file ({exc}); refusing to load") from exc


def _hash_all(paths: list[Path]) -> list[str]:
    """sha256 of each file, several at a time (hashlib releases the GIL on large reads)."""
    if len(paths) < 2:
        return [file_sha256(p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(len(paths), os.cpu_count() or 1)) as pool:
        return list(pool.map(file_sha256, paths))


def _file_identity(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
