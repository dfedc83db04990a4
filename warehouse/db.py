"""The DuckDB warehouse: connect, migrate (tables and views), run queries, insert frames.

DuckDB allows one writer process per file, and a reader process locks the file too, so
only the pipeline's load/validate/derive steps open it read-write (through a 1-slot
Airflow pool) and everyone else opens it read-only. Both wait, for a bounded time, for a
lock another process holds (connect()); a waiting writer says so, and `benchledger sql`
gives way to it (writer_waiting.py). Every open refuses a truncated file, and
check_warehouse() looks deeper before a run starts. A read-only connection is also the
auditor's door: it can read the warehouse and nothing else (READ_ONLY_CONFIG). Every statement binds
its values as parameters; SQL text lives in .sql files. Loading a run's raw files is
warehouse/load.py.
"""

from __future__ import annotations

import graphlib
import json
import logging
import os
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from benchledger.settings import SettingsError, settings, variable
from benchledger.sweep.spec import RecordedSweepMismatch, Sweep, parse_recorded
from benchledger.warehouse.writer_waiting import WaitingWriter

MIGRATIONS = Path(__file__).parent / "migrations"
QUERIES = Path(__file__).parent / "queries"
VIEWS = Path(__file__).parent / "views"


log = logging.getLogger(__name__)

# Every read-only connection is opened with these settings: no file is read or written
# outside the warehouse (COPY, read_csv/read_parquet/read_text/glob, EXPORT, ATTACH of
# another file), no extension is installed or loaded, and lock_configuration means no
# statement can SET any of them (or anything else) back. They are given to duckdb.connect, so
# they hold from the connection's first statement on. Writers need external access: the
# loader reads the raw Parquet files with read_parquet.
READ_ONLY_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "lock_configuration": True,
}

# How long a connect waits for a lock another process holds on the warehouse file. A
# writer waits long (a reader's query or another run's load will end); a reader short (a
# load takes seconds; a reader that waits minutes is better told the file is busy): 300 s
# and 30 s unless these variables say otherwise (benchledger.settings).
WRITER_WAIT_ENV = variable("lock_timeout_s")
READER_WAIT_ENV = variable("read_lock_timeout_s")
_FIRST_RETRY_S, _LONGEST_RETRY_S = 0.05, 1.0

# DuckDB's refusal when another process holds the file: it names that process.
_LOCK_HELD = re.compile(r"Could not set lock on file .*?Conflicting lock is held in "
                        r"(?P<program>.*?) \(PID (?P<pid>\d+)\)", re.S)


class WarehouseError(RuntimeError):
    pass


class WarehouseBusy(WarehouseError):
    """Another process held the warehouse file for longer than this connect may wait."""


def connect(path: str | Path, read_only: bool = False, wait_s: float | None = None,
            limits: dict[str, str] | None = None) -> duckdb.DuckDBPyConnection:
    """Open the warehouse; the writer also brings the schema up to date.

    read_only=True opens the auditor's door (READ_ONLY_CONFIG, plus `limits`: settings
    such as memory_limit, fixed before lock_configuration can freeze them). Either kind
    waits up to `wait_s` (default: lock_wait_s()) while another process holds the file,
    logging who. A file shorter than the blocks it uses (truncated) is refused, naming it.
    """
    path = str(path)
    wait_s = lock_wait_s(read_only) if wait_s is None else wait_s
    if read_only:
        if path != ":memory:" and not Path(path).exists():
            raise WarehouseError(f"no warehouse at {path}")
        con = _open_waiting(path, read_only=True, config={**READ_ONLY_CONFIG, **(limits or {})},
                            wait_s=wait_s)
    else:
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        con = _open_waiting(path, read_only=False, config={}, wait_s=wait_s)
    try:
        if path != ":memory:":
            _check_length(con, path)
        if not read_only:
            migrate(con)
    except duckdb.Error as exc:  # DuckDB could open the file but not read what it holds
        con.close()
        raise WarehouseError(f"the warehouse {path} cannot be read: {_one_line(exc)} "
                             f"({DAMAGED_HINT})") from exc
    except Exception:
        con.close()
        raise
    return con


# DuckDB's file starts with three 4 KiB headers (the main one, then two database headers
# that take turns); its blocks follow, each written whole.
_FILE_HEADERS_BYTES = 3 * 4096
DAMAGED_HINT = ("restore the file from a copy, or rebuild the warehouse from the raw "
                "files: docs/storage.md")


def _check_length(con: duckdb.DuckDBPyConnection, path: str) -> None:
    """The file holds at least as many whole blocks as DuckDB's header says are in use;
    a truncated copy (a full disk, a cut transfer) holds fewer. Free blocks at the end may
    be cut off legitimately, so this compares with the used ones only."""
    used, block_size = only_row(con, "SELECT used_blocks, block_size FROM "
                                     "pragma_database_size() WHERE database_name = "
                                     "current_database()")
    size = os.path.getsize(path)
    held = max(0, size - _FILE_HEADERS_BYTES) // block_size
    if used > held:
        raise WarehouseError(f"the warehouse {path} is truncated: its {size} bytes hold "
                             f"{held} blocks of {block_size} bytes, but it uses {used} "
                             f"({DAMAGED_HINT})")


def check_warehouse(path: str | Path) -> None:
    """Refuse, before a run starts any server (or an import reads its file), a warehouse
    that could not take its load: one DuckDB cannot open, one truncated (connect), one
    whose tables name blocks beyond the end of the file, one whose schema_migrations cannot
    be read. WarehouseError, one line naming the file and what is wrong. A missing file
    passes: the first load creates it. Reads metadata only (milliseconds at any size)."""
    path = Path(path)
    if not path.exists():
        return
    with connect(path, read_only=True) as con:
        try:
            _check_blocks(con, str(path))
            if not _schema_of(con):  # empty: the first load migrates it, as import does
                return
            con.execute("SELECT max(version) FROM schema_migrations").fetchall()
        except duckdb.Error as exc:
            raise WarehouseError(f"the warehouse {path} cannot be read: {_one_line(exc)} "
                                 f"({DAMAGED_HINT})") from exc


def _schema_of(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The names of the file's own tables and views. None at all: a warehouse no load has
    migrated yet, or one whose first migration was cut short (a kill -9 in its first
    moments; the migration is one transaction, so nothing of it stays), which the next
    writer migrates (issue #39: `run` refused such a file for ever, while `import`
    migrated it)."""
    return [name for name, in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE NOT internal AND NOT temporary "
        "AND database_name = current_database() UNION ALL "
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND NOT temporary "
        "AND database_name = current_database()").fetchall()]


# DuckDB numbers in-memory (transient) blocks from 2**62 on; they are never in the file.
_FIRST_TRANSIENT_BLOCK = 2**62


def _check_blocks(con: duckdb.DuckDBPyConnection, path: str) -> None:
    """Every block a table's storage or the metadata names lies within the file."""
    block_size, = only_row(con, "SELECT block_size FROM pragma_database_size() "
                                "WHERE database_name = current_database()")
    held = max(0, os.path.getsize(path) - _FILE_HEADERS_BYTES) // block_size
    tables = [name for name, in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE NOT internal AND NOT temporary "
        "AND database_name = current_database()").fetchall()]
    highest = -1
    for table in tables:  # one metadata query per table (tens of them)
        top, = only_row(con, "SELECT max(block_id) FROM pragma_storage_info(?) "
                             "WHERE block_id BETWEEN 0 AND ?", [table, _FIRST_TRANSIENT_BLOCK - 1])
        highest = max(highest, -1 if top is None else top)
    top, = only_row(con, "SELECT max(block_id) FROM pragma_metadata_info() "
                         "WHERE block_id BETWEEN 0 AND ?", [_FIRST_TRANSIENT_BLOCK - 1])
    highest = max(highest, -1 if top is None else top)
    if highest >= held:
        raise WarehouseError(f"the warehouse {path} is truncated: its tables use block "
                             f"{highest}, but the file ends after block {held - 1} "
                             f"({DAMAGED_HINT})")


def lock_wait_s(read_only: bool) -> float:
    """The bound on waiting for another process's lock: the environment's setting
    (BENCHLEDGER_LOCK_TIMEOUT_S for writers, BENCHLEDGER_READ_LOCK_TIMEOUT_S for readers),
    else the default (benchledger.settings). WarehouseError naming a refused value."""
    current = settings()
    try:
        return current.read_lock_timeout_s if read_only else current.lock_timeout_s
    except SettingsError as exc:
        raise WarehouseError(str(exc)) from None


def _open_waiting(path: str, read_only: bool, config: dict,
                  wait_s: float) -> duckdb.DuckDBPyConnection:
    """duckdb.connect, retried with backoff while another process holds the file's lock;
    WarehouseBusy (naming the holder) once `wait_s` has passed. A writer says that it
    waits (warehouse/writer_waiting.py), so a `benchledger sql` query gives way to it."""
    waiting = None if read_only or path == ":memory:" else WaitingWriter(path)
    try:
        return _open_retrying(path, read_only, config, wait_s, waiting)
    finally:
        if waiting is not None:
            waiting.release()


def _open_retrying(path: str, read_only: bool, config: dict, wait_s: float,
                   waiting: WaitingWriter | None) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + wait_s
    retry_s, announced = _FIRST_RETRY_S, None
    while True:
        try:
            return duckdb.connect(path, read_only=read_only, config=config)
        except duckdb.IOException as exc:
            holder = lock_holder(exc)
            if holder is None:
                raise WarehouseError(f"cannot open the warehouse {path}: "
                                     f"{_one_line(exc)}") from exc
            left = deadline - time.monotonic()
            if left <= 0:
                raise WarehouseBusy(
                    f"the warehouse {path} is locked by {holder}; gave up after waiting "
                    f"{wait_s:g} s (set {READER_WAIT_ENV if read_only else WRITER_WAIT_ENV} "
                    "to wait longer)") from exc
            if holder != announced:  # once per holder, not once per retry
                log.warning("the warehouse %s is locked by %s; waiting up to %.0f s for it "
                            "to let go", path, holder, left)
                announced = holder
            if waiting is not None:
                waiting.hold()
            time.sleep(min(retry_s, left))
            retry_s = min(retry_s * 2, _LONGEST_RETRY_S)
        except duckdb.ConnectionException as exc:
            if "different configuration" not in str(exc):
                raise
            # DuckDB shares one database instance per file and process: a read-only door
            # cannot open beside this process's own writer (or a plain reader), and back.
            other = ("read-write, or read-only without the lockdown" if read_only
                     else "read-only")
            raise WarehouseError(f"this process already has the warehouse {path} open with "
                                 f"other settings ({other}); close that connection first"
                                 ) from exc
        except duckdb.Error as exc:  # not a DuckDB file, a newer storage version, ...
            raise WarehouseError(f"cannot open the warehouse {path}: {_one_line(exc)}"
                                 ) from exc


def lock_holder(exc: BaseException) -> str | None:
    """Who holds the warehouse's lock, from DuckDB's refusal ("PID 123 (python -m ...)"),
    or None when the error is not about a lock."""
    match = _LOCK_HELD.search(str(exc))
    if match is None:
        return None
    pid = int(match["pid"])
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        command = " ".join(a.decode(errors="replace") for a in argv if a)
    except OSError:
        command = match["program"]
    command = " ".join(command.split())  # one line, whatever the argv held
    return f"PID {pid} ({command[:160] or match['program']})"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


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


def _view_part(text: str, part: str) -> str:
    """A part of a view file's text that view_files() checked has the expected shape."""
    match = _VIEW_FILE.fullmatch(text)
    assert match is not None, "view_files() refuses a view file of another shape"
    return match[part]


def _view_order(con: duckdb.DuckDBPyConnection, views: dict[str, str]) -> list[str]:
    """View names, each after the views it reads (found in DuckDB's parse tree of its
    query). Worked out before the transaction, not by retrying what fails: in DuckDB a
    failed statement aborts the whole transaction."""
    graph = {}
    for name, text in sorted(views.items()):
        query = _view_part(text, "query")
        tree = json.loads(only_row(con, "SELECT json_serialize_sql(?)", [query])[0])
        if tree.get("error"):
            raise WarehouseError(f"views/{name}.sql: {tree.get('error_message')}")
        graph[name] = _base_tables(tree) & set(views)
    try:
        return list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        cycle = ", ".join(sorted(set(exc.args[1])))
        raise WarehouseError(f"views read each other in a cycle: {cycle}") from exc


def _base_tables(node: object) -> set[str]:
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
                      for line in _view_part(text, "header").splitlines()
                      if line.strip())
    comment = f"{VIEW_COMMENT}{name}.sql: {header}".replace("'", "''")
    con.execute(f"COMMENT ON VIEW {name} IS '{comment}'")


def first_row(con: duckdb.DuckDBPyConnection, sql: str, params: Any = None
              ) -> tuple[Any, ...] | None:
    """The first row of a query, reading the result to the end (DuckDB 2.0 refuses new
    work on a connection with an unfinished result, which fetchone() would leave)."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0] if rows else None


def recorded_sweep(con: duckdb.DuckDBPyConnection, run_id: str) -> Sweep:
    """The sweep a measured run recorded (runs.sweep_toml), checked against the sha256
    recorded beside it (runs.sweep_sha256) and parsed once: what validation and derivation
    of the run read, never the file. LookupError for a run the warehouse does not hold."""
    row = first_row(con, "SELECT sweep_toml, sweep_sha256 FROM runs WHERE run_id = ?",
                    [run_id])
    if row is None:
        raise LookupError(f"run {run_id!r} is not in the warehouse")
    text, recorded = row
    try:
        return parse_recorded(text, recorded, f"runs[{run_id}].sweep_toml")
    except RecordedSweepMismatch as exc:
        raise WarehouseError(f"run {run_id}: {exc}; refusing to judge the run by another "
                             "sweep") from exc


def only_row(con: duckdb.DuckDBPyConnection, sql: str, params: Any = None) -> tuple[Any, ...]:
    """The row of a query that always gives exactly one (an aggregate, an INSERT's count)."""
    row = first_row(con, sql, params)
    if row is None:  # pragma: no cover (such a query always returns its row)
        raise WarehouseError(f"no row from a query that always gives one: {sql[:200]}")
    return row


def query_sql(name: str) -> str:
    return (QUERIES / f"{name}.sql").read_text()


def query_frame(con: duckdb.DuckDBPyConnection, name: str, **params: object) -> pd.DataFrame:
    """Run queries/<name>.sql with its named parameters bound; the rows as a DataFrame."""
    return con.execute(query_sql(name), params).df()


def insert_frame(con: duckdb.DuckDBPyConnection, table: str,
                 frame: pd.DataFrame | pa.Table) -> int:
    """Append a whole DataFrame (or Arrow table) to `table` in one statement, columns
    matched by name."""
    if not re.fullmatch(r"[a-z_]+", table):
        raise WarehouseError(f"refusing unsafe table name {table!r}")
    if len(frame) == 0:
        return 0
    con.register("incoming_frame", frame)
    try:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM incoming_frame")
    finally:
        con.unregister("incoming_frame")
    return len(frame)


def mark_run_ended(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    con.execute("UPDATE runs SET ended_at = ? WHERE run_id = ? AND ended_at IS NULL",
                [datetime.now(UTC), run_id])
