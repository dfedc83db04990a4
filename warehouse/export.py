"""Validated-only exports: only rows of `published_entries` ever leave the warehouse."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pandas as pd

from warehouse.db import first_row, query_sql

# Derivation bookkeeping that would make two exports of the same entries differ.
UNSTABLE_COLUMNS = ("derived_at",)


def latest_run_id(con: duckdb.DuckDBPyConnection) -> str:
    row = first_row(con, "SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1")
    if row is None:
        raise LookupError("the warehouse holds no runs yet")
    return row[0]


def published_entries(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return con.execute(query_sql("published_for_run"), {"run_id": run_id}).df()


def blocked_entries(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return con.execute(query_sql("blocked_for_run"), {"run_id": run_id}).df()


def comparisons(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return con.execute(query_sql("comparisons_for_run"), {"run_id": run_id}).df()


def delivered_vs_server(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return con.execute(query_sql("delivered_vs_server"), {"run_id": run_id}).df()


def variance(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    return con.execute(query_sql("variance_for_run"), {"run_id": run_id}).df()


def _json_ready(frame: pd.DataFrame) -> list[dict]:
    frame = frame.drop(columns=[c for c in UNSTABLE_COLUMNS if c in frame.columns])
    records = json.loads(frame.to_json(orient="records", date_format="iso", double_precision=10))
    return records


def export_run(con: duckdb.DuckDBPyConnection, run_id: str, out_root: Path) -> Path:
    """Write entries.json and entries.csv for one run under out_root/<run>/."""
    out = Path(out_root) / re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
    out.mkdir(parents=True, exist_ok=True)
    entries = published_entries(con, run_id)
    records = _json_ready(entries)
    (out / "entries.json").write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    entries.drop(columns=[c for c in UNSTABLE_COLUMNS if c in entries.columns]).to_csv(
        out / "entries.csv", index=False)
    # Verdicts are published like entries, refuted hypotheses included.
    found = comparisons(con, run_id)
    (out / "comparisons.json").write_text(
        json.dumps(_json_ready(found), indent=1, sort_keys=True) + "\n")
    return out


def mark_run_ended(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    con.execute("UPDATE runs SET ended_at = ? WHERE run_id = ? AND ended_at IS NULL",
                [datetime.now(UTC), run_id])
