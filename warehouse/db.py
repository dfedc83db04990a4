"""The DuckDB warehouse: connect, migrate (tables and views), run queries, insert frames.

DuckDB allows one writer process per file, so only the pipeline's load/validate/derive
steps open it read-write (through a 1-slot Airflow pool); everyone else opens it
read-only. Every statement binds its values as parameters; SQL text lives in .sql files.
Loading a run's raw files is warehouse/load.py.
"""

from __future__ import annotations

import graphlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

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
