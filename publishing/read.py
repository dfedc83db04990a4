"""What publishing reads from the warehouse: one function per queries/*.sql file."""

from __future__ import annotations

import duckdb
import pandas as pd

from benchledger.warehouse.db import first_row, query_frame


def latest_run_id(con: duckdb.DuckDBPyConnection) -> str:
    row = first_row(con, "SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1")
    if row is None:
        raise LookupError("the warehouse holds no runs yet")
    return row[0]


def _frame(con: duckdb.DuckDBPyConnection, query: str, run_id: str) -> pd.DataFrame:
    return query_frame(con, query, run_id=run_id)


def published_entries(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return _frame(con, "published_for_run", run_id)


def blocked_entries(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return _frame(con, "blocked_for_run", run_id)


def blocks(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """One row per blocked entry, failed rule and subject (from entry_blocks)."""
    return _frame(con, "blocks_for_run", run_id)


def comparisons(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return _frame(con, "comparisons_for_run", run_id)


def delivered_vs_server(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return _frame(con, "delivered_vs_server", run_id)


def variance(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return _frame(con, "variance_for_run", run_id)
