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


def speculation_finding_lines(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """One sentence per arm the sweep did not declare speculative whose windows speculated
    (queries/speculation_findings_for_run.sql); the terminal and report.html both say it."""
    found = query_frame(con, "speculation_findings_for_run", run_id=run_id)
    return [f"arm {row.arm}: not declared speculative, but {row.windows_speculating} of "
            f"its {row.windows} windows speculated ({row.sources}){_evidence(row)}; held to "
            "the speculative n floor (n_at_least_min, T4); entries say speculation_source"
            for _, row in found.iterrows()]


FINDINGS_TITLE = "Findings (what the evidence showed that the sweep did not say)"


def speculation_findings(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """The terminal's findings block; None where there is none."""
    lines = speculation_finding_lines(con, run_id)
    if not lines:
        return None
    return "\n".join([f"{FINDINGS_TITLE}:", *(f"- {line}" for line in lines)])
