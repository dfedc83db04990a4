"""The DuckDB warehouse: connect, migrate, and load one run's raw files.

DuckDB allows one writer process per file, so only the pipeline's load/validate/derive
steps open it read-write (through a 1-slot Airflow pool); everyone else opens it
read-only. Every statement binds its values as parameters; SQL text lives in .sql files.
"""

from __future__ import annotations

import contextlib
import graphlib
import hashlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.parquet as pq

MIGRATIONS = Path(__file__).parent / "migrations"
QUERIES = Path(__file__).parent / "queries"
VIEWS = Path(__file__).parent / "views"


class WarehouseError(RuntimeError):
    pass


def connect(path: str | Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the warehouse; the writer also brings the schema up to date."""
    path = str(path)
    if read_only:
        if path != ":memory:" and not Path(path).exists():
            raise WarehouseError(f"no warehouse at {path}")
        return duckdb.connect(path, read_only=True)
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(path)
    migrate(con)
    return con


def migrate(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Bring the schema up to date; returns the names of the migrations applied.

    Tables: the numbered migrations/NNNN_*.sql not yet recorded in schema_migrations, in
    order, each applied once. Views are not migrations: each lives in views/<name>.sql with
    its current definition and is dropped and re-created on every call, after the tables,
    readers after what they read. All of it is one transaction: a failure leaves the
    schema as it was.
    """
    views = view_files()
    order = _view_order(con, views)  # parsed and ordered before anything changes
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("CREATE TABLE IF NOT EXISTS schema_migrations "
                    "(version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
                    "applied_at TIMESTAMPTZ NOT NULL)")
        _drop_views(con, set(views))
        applied = _apply_migrations(con)
        for name in order:
            _create_view(con, name, views[name])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return applied


def _apply_migrations(con: duckdb.DuckDBPyConnection) -> list[str]:
    done = {row[0] for row in con.execute("SELECT version FROM schema_migrations").fetchall()}
    applied = []
    for sql_file in sorted(MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        version = int(sql_file.name[:4])
        if version in done:
            continue
        con.execute(sql_file.read_text())
        con.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)",
                    [version, sql_file.name, datetime.now(UTC)])
        applied.append(sql_file.name)
    return applied


# A view file: its header comment (what one row is, and why), then exactly one
# `CREATE VIEW <the file's name> AS <query>`; never OR REPLACE, so no file can quietly
# redefine a view that another file (or a migration) also defines.
_VIEW_FILE = re.compile(r"(?P<header>(?:\s*--[^\n]*\n)+)\s*CREATE\s+VIEW\s+(?P<name>\w+)"
                        r"\s+AS\s+(?P<query>.*)", re.S | re.I)
# The comment every view made here carries (duckdb_views().comment): a view that is ours
# but whose file is gone is dropped too; views made by hand are left alone.
VIEW_COMMENT = "benchledger: warehouse/views/"


def view_files() -> dict[str, str]:
    """The text of every views/<name>.sql, by view name."""
    views = {}
    for sql_file in sorted(VIEWS.glob("*.sql")):
        name, text = sql_file.stem, sql_file.read_text()
        match = _VIEW_FILE.fullmatch(text)
        try:
            statements = len(duckdb.extract_statements(text))
        except duckdb.Error as exc:
            raise WarehouseError(f"{sql_file}: {exc}") from exc
        if (not re.fullmatch(r"[a-z_][a-z0-9_]*", name) or match is None
                or match["name"] != name or statements != 1):
            raise WarehouseError(f"{sql_file}: expected a header comment, then one "
                                 f"'CREATE VIEW {name} AS ...' statement")
        views[name] = text
    return views


def _view_order(con: duckdb.DuckDBPyConnection, views: dict[str, str]) -> list[str]:
    """View names, each after the views it reads (found in DuckDB's parse tree of its
    query). Worked out before the transaction, not by retrying what fails: in DuckDB a
    failed statement aborts the whole transaction."""
    graph = {}
    for name, text in sorted(views.items()):
        query = _VIEW_FILE.fullmatch(text)["query"]
        tree = json.loads(first_row(con, "SELECT json_serialize_sql(?)", [query])[0])
        if tree.get("error"):
            raise WarehouseError(f"views/{name}.sql: {tree.get('error_message')}")
        graph[name] = _base_tables(tree) & set(views)
    try:
        return list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        cycle = ", ".join(sorted(set(exc.args[1])))
        raise WarehouseError(f"views read each other in a cycle: {cycle}") from exc


def _base_tables(node) -> set[str]:
    """Every relation name a serialized query reads (tables, views, and CTE names)."""
    if isinstance(node, list):
        return set().union(*map(_base_tables, node))
    if not isinstance(node, dict):
        return set()
    found = {node["table_name"]} if node.get("type") == "BASE_TABLE" else set()
    return found.union(*map(_base_tables, node.values()))


def _drop_views(con: duckdb.DuckDBPyConnection, names: set[str]) -> None:
    """Drop the views named by files and every other view made here (DuckDB keeps no
    dependencies between views, so any order works)."""
    existing = con.execute(
        "SELECT view_name, comment FROM duckdb_views() WHERE NOT internal AND NOT temporary "
        "AND database_name = current_database() AND schema_name = 'main'").fetchall()
    for name, comment in existing:
        if name in names or (comment or "").startswith(VIEW_COMMENT):
            con.execute(f'DROP VIEW "{name.replace(chr(34), chr(34) * 2)}"')


def _create_view(con: duckdb.DuckDBPyConnection, name: str, text: str) -> None:
    try:
        con.execute(text)
    except duckdb.Error as exc:
        raise WarehouseError(f"view {name} (warehouse/views/{name}.sql) could not be "
                             f"created: {exc}") from exc
    header = " ".join(line.strip().removeprefix("--").strip()
                      for line in _VIEW_FILE.fullmatch(text)["header"].splitlines()
                      if line.strip())
    comment = f"{VIEW_COMMENT}{name}.sql: {header}".replace("'", "''")
    con.execute(f"COMMENT ON VIEW {name} IS '{comment}'")


def first_row(con: duckdb.DuckDBPyConnection, sql: str, params=None) -> tuple | None:
    """The first row of a query, reading the result to the end (DuckDB 2.0 refuses new
    work on a connection with an unfinished result, which fetchone() would leave)."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0] if rows else None


def query_sql(name: str) -> str:
    return (QUERIES / f"{name}.sql").read_text()


def query_frame(con: duckdb.DuckDBPyConnection, name: str, **params) -> pd.DataFrame:
    """Run queries/<name>.sql with its named parameters bound; the rows as a DataFrame."""
    return con.execute(query_sql(name), params).df()


def insert_frame(con: duckdb.DuckDBPyConnection, table: str, frame: pd.DataFrame) -> int:
    """Append a whole DataFrame to `table` in one statement, columns matched by name."""
    if not re.fullmatch(r"[a-z_]+", table):
        raise WarehouseError(f"refusing unsafe table name {table!r}")
    if frame.empty:
        return 0
    con.register("incoming_frame", frame)
    try:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM incoming_frame")
    finally:
        con.unregister("incoming_frame")
    return len(frame)


def _insert_row(con: duckdb.DuckDBPyConnection, table: str, row: dict) -> None:
    # Table and column names come from this module, never from input; values are bound.
    if not re.fullmatch(r"[a-z_]+", table) or not all(re.fullmatch(r"[a-z0-9_]+", c)
                                                      for c in row):
        raise WarehouseError(f"refusing unsafe identifier in insert into {table}")
    columns = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    con.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", list(row.values()))


def _already_loaded(con: duckdb.DuckDBPyConnection, sha256: str) -> bool:
    return first_row(con, "SELECT count(*) FROM raw_files WHERE sha256 = ?", [sha256])[0] > 0


def _record_file(con, path: Path, sha256: str, kind: str, rows: int) -> None:
    _insert_row(con, "raw_files", {"sha256": sha256, "path": str(path), "kind": kind,
                                   "rows": rows, "loaded_at": datetime.now(UTC)})


RUN_COLUMNS = ("run_id", "sweep_name", "sweep_path", "sweep_sha256", "sweep_toml",
               "harness_version", "started_at")
RESTART_COLUMNS = ("restart_id", "run_id", "arm", "restart_index", "node", "server_kind",
                   "single_instance", "status", "error", "base_url", "pid", "command",
                   "log_path", "effective_config", "effective_config_sha256",
                   "server_version", "started_at", "ready_at", "stopped_at", "stop_status")
WINDOW_COLUMNS = ("window_id", "restart_id", "run_id", "arm", "workload", "prompt_set",
                  "concurrency", "submitted", "completed", "failed", "unresolved",
                  "warmup_submitted", "drain_status", "drain_timeout_s", "window_start",
                  "window_end", "elapsed_s", "min_requests", "max_tokens", "temperature",
                  "requests_file_sha256", "arrival", "requested_rate_rps", "achieved_rate_rps",
                  "prompt_cache", "input_tokens_target", "seed", "denominator")


def _pick(manifest: dict, columns: tuple[str, ...]) -> dict:
    row = {c: manifest.get(c) for c in columns}
    if "effective_config" in row and row["effective_config"] is not None:
        row["effective_config"] = json.dumps(row["effective_config"], sort_keys=True)
    return row


def _sha256(path: Path) -> str:
    with path.open("rb") as f:  # streamed: a window's file can be hundreds of MB
        return hashlib.file_digest(f, "sha256").hexdigest()


def _load_manifest(con, path: Path, kind: str, table: str, columns: tuple[str, ...],
                   extra: dict | None = None) -> int:
    sha = _sha256(path)
    if _already_loaded(con, sha):
        return 0
    manifest = json.loads(path.read_text())
    row = {**_pick(manifest, columns), **(extra or {})}
    if table != "runs":
        row["raw_file_sha256"] = sha
    key = columns[0]
    exists = first_row(con, f"SELECT count(*) FROM {table} WHERE {key} = ?", [row[key]])[0]
    if exists:
        # A second version of a raw record (e.g. a retried step): keep the first one
        # loaded, record the file so the difference stays auditable.
        _record_file(con, path, sha, f"{kind}-superseded", 0)
        return 0
    _insert_row(con, table, row)
    _record_file(con, path, sha, kind, 1)
    return 1


def _file_identity(path: Path) -> tuple[int, int, int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


# Characters DuckDB's read_parquet takes as a glob pattern in a path.
_GLOB_CHARS = re.compile(r"[*?\[\]{}]")


def _load_requests(con, parquet_path: Path, expected_sha: str) -> int:
    """Insert one window's requests, every row tagged with the file's sha256, which must be
    the manifest's. DuckDB reads the Parquet file itself (no Arrow copy in Python), unless
    its path holds glob characters, which read_parquet would expand: then pyarrow reads it.

    The file is hashed first and read afterwards; writers replace raw files (write, then
    rename) and never write them in place, so a file whose inode, size or mtime changed in
    between, or whose rows are not its footer's count, is refused, and the caller's
    transaction rolls back what was inserted."""
    identity = _file_identity(parquet_path)
    sha = _sha256(parquet_path)
    if sha != expected_sha:
        raise WarehouseError(f"{parquet_path}: sha256 {sha} does not match its window "
                             f"manifest ({expected_sha}); refusing to load")
    if _already_loaded(con, sha):
        return 0
    expected_rows = pq.read_metadata(parquet_path).num_rows
    with _requests_source(con, parquet_path) as (source, params):
        file_columns = [d[0] for d in con.execute(f"SELECT * FROM {source} LIMIT 0",
                                                  params).description]
        known = {c for c, in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'request_records' "
            "AND database_name = current_database() AND schema_name = 'main'").fetchall()}
        unknown = [c for c in file_columns if c not in known or c == "raw_file_sha256"]
        if unknown:
            raise WarehouseError(f"{parquet_path}: columns {unknown} are not columns of "
                                 "request_records; refusing to load")
        columns = ", ".join(f'"{c}"' for c in file_columns)
        rows = first_row(con, f"INSERT INTO request_records ({columns}, raw_file_sha256) "
                              f"SELECT {columns}, $sha FROM {source}",
                         {**params, "sha": sha})[0]
    if _file_identity(parquet_path) != identity or rows != expected_rows:
        raise WarehouseError(f"{parquet_path}: changed while it was being loaded ({rows} "
                             f"rows read, {expected_rows} in its footer); refusing to load")
    _record_file(con, parquet_path, sha, "requests", rows)
    return rows


@contextlib.contextmanager
def _requests_source(con, parquet_path: Path):
    """(relation, parameters) to SELECT a requests file from."""
    if not _GLOB_CHARS.search(str(parquet_path)):
        yield "read_parquet($path)", {"path": str(parquet_path)}
        return
    con.register("incoming_requests", pq.read_table(parquet_path))
    try:
        yield "incoming_requests", {}
    finally:
        con.unregister("incoming_requests")


def _load_window(con, path: Path, manifest: dict) -> int:
    """The window manifest, plus the thresholds and failures its observations recorded."""
    observed_name = manifest.get("observed_file")
    observed = (json.loads((path.parent / observed_name).read_text())
                if observed_name else {})
    thresholds = observed.get("thresholds", {})
    errors = [f"{part}: {e}" for part in ("metrics", "log", "clocks")
              for e in (observed.get(part) or {}).get("errors", [])]
    extra = {
        "reconcile_tolerance": thresholds.get("reconcile_tolerance"),
        "min_clock_ratio": thresholds.get("min_clock_ratio"),
        "require_clock_check": thresholds.get("require_clock_check"),
        "clock_source": (observed.get("clocks") or {}).get("source"),
        "observation_errors": "; ".join(errors)[:4000] or None,
    }
    return _load_manifest(con, path, "window", "windows", WINDOW_COLUMNS, extra)


def _load_observations(con, path: Path, expected_sha: str, manifest: dict) -> int:
    """server_metrics, server_log_lines and node_clocks rows of one window."""
    from benchledger.warehouse.observations import clock_rows, log_rows, metric_samples

    sha = _sha256(path)
    if sha != expected_sha:
        raise WarehouseError(f"{path}: sha256 {sha} does not match its window manifest")
    if _already_loaded(con, sha):
        return 0
    observed = json.loads(path.read_text())
    keys = (manifest["restart_id"], manifest["window_id"])
    metrics = observed.get("metrics") or {}
    rows = 0
    for phase in ("before", "after"):
        page = metrics.get(phase)
        if not page:
            continue
        samples = [(*keys, phase, name, labels, value, page["scraped_at"], sha)
                   for name, labels, value in metric_samples(page["text"])]
        if samples:
            con.executemany("INSERT INTO server_metrics VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            samples)
        rows += len(samples)
    for line in log_rows((observed.get("log") or {}).get("lines", [])):
        _insert_row(con, "server_log_lines", {"restart_id": keys[0], "window_id": keys[1],
                                              **line, "raw_file_sha256": sha})
        rows += 1
    for sample in clock_rows(observed.get("clocks") or {}):
        _insert_row(con, "node_clocks", {"restart_id": keys[0], "window_id": keys[1],
                                         **sample, "raw_file_sha256": sha})
        rows += 1
    _record_file(con, path, sha, "observations", rows)
    return rows


def load_run_dir(con: duckdb.DuckDBPyConnection, run_dir: Path) -> dict[str, int]:
    """Load every raw file of one run; files already loaded (by sha256) add nothing.

    Each file is loaded in its own transaction, so a crash mid-load leaves no half file.
    """
    counts = {"runs": 0, "restarts": 0, "windows": 0, "requests": 0, "observations": 0}
    run_dir = Path(run_dir)
    steps: list[tuple[str, Path]] = [("run", run_dir / "run.json")]
    steps += [("restart", p) for p in sorted(run_dir.glob("*/r*/restart.json"))]
    steps += [("window", p) for p in sorted(run_dir.glob("*/r*/*-c*.json"))
              if not p.name.endswith(".observed.json")]
    for kind, path in steps:
        if not path.exists():
            raise WarehouseError(f"{path}: missing raw file")
        con.execute("BEGIN TRANSACTION")
        try:
            if kind == "run":
                counts["runs"] += _load_manifest(con, path, kind, "runs", RUN_COLUMNS)
            elif kind == "restart":
                counts["restarts"] += _load_manifest(con, path, kind, "restarts",
                                                     RESTART_COLUMNS)
            else:
                manifest = json.loads(path.read_text())
                counts["requests"] += _load_requests(
                    con, path.parent / manifest["requests_file"],
                    manifest["requests_file_sha256"])
                if manifest.get("observed_file"):
                    counts["observations"] += _load_observations(
                        con, path.parent / manifest["observed_file"],
                        manifest["observed_file_sha256"], manifest)
                counts["windows"] += _load_window(con, path, manifest)
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
    return counts


def mark_run_ended(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    con.execute("UPDATE runs SET ended_at = ? WHERE run_id = ? AND ended_at IS NULL",
                [datetime.now(UTC), run_id])
