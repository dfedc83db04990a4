"""Findings of a run the terminal states on their own: what the evidence showed that the
sweep did not say (issue #23, item 2: an arm declared non-speculative that speculated)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from benchledger.warehouse.db import query_frame

if TYPE_CHECKING:
    import duckdb


def _evidence(row: pd.Series) -> str:
    shown = [f"{name} {row[column]:.2f}" for name, column in
             (("tokens per chunk", "tokens_per_chunk"),
              ("acceptance length", "acceptance_length")) if pd.notna(row[column])]
    return f" ({', '.join(shown)})" if shown else ""


def speculation_findings(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """One line per arm the sweep did not declare speculative whose windows speculated
    (queries/speculation_findings_for_run.sql); None where there is none."""
    found = query_frame(con, "speculation_findings_for_run", run_id=run_id)
    if found.empty:
        return None
    lines = [f"- arm {row.arm}: not declared speculative, but {row.windows_speculating} of "
             f"its {row.windows} windows speculated ({row.sources}){_evidence(row)}; held to "
             "the speculative n floor (n_at_least_min, T4); entries say speculation_source"
             for _, row in found.iterrows()]
    return "\n".join(["Findings (what the evidence showed that the sweep did not say):",
                      *lines])
