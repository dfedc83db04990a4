"""Published entries by evidence kind: each kind in its own section of every export.

The pipeline's own entries (`rerun`) are the publication's main tables (entries.json,
entries.csv, the report's plots and headline). Evidence from elsewhere (docs/imports.md)
is never merged into them: each other kind gets its own files (<kind>_entries.json and
.csv) and its own section of entries.md and report.html, where a label its source did not
record reads `not recorded` and `not_recorded` lists them all.
"""

from __future__ import annotations

import pandas as pd

from benchledger.imports.evidence import EVIDENCE_KINDS, NOT_RECORDED, RERUN
from benchledger.publishing.formatting import md_number, person_unit
from benchledger.publishing.formatting import md_text as md_text  # entries.md's text cells
from benchledger.publishing.templating import render

TITLES = {
    "imported": "Imported evidence: another tool's results, not measured by this pipeline",
    "historical": "Historical evidence: rows recovered from old reports",
    "derived_comparison": "Derived comparisons: recovered values that were derived from "
                          "other runs",
}
# Labels only evidence from elsewhere has (NULL on every rerun entry): left out of the
# rerun files, so their columns stay what they were.
EVIDENCE_ONLY_COLUMNS = ("source_tool", "profile", "record_id", "runtime", "backend",
                         "hardware", "notes", "not_recorded")
# The columns of an evidence section, in reading order.
SECTION_COLUMNS = ("source_tool", "arm", "record_id", "workload", "metric", "statistic",
                   "scope", "concurrency", "numerator", "value", "unit", "denominator",
                   "n_requests", "population", "token_source", "hardware", "runtime",
                   "not_recorded", "warning")


def rerun_entries(entries: pd.DataFrame) -> pd.DataFrame:
    """The pipeline's own entries, without the columns only imports fill."""
    reruns = entries[entries["evidence"] == RERUN] if "evidence" in entries else entries
    return reruns.drop(columns=[c for c in EVIDENCE_ONLY_COLUMNS if c in reruns.columns])


def other_evidence(entries: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(kind, its entries) for every kind but rerun that has entries, in protocol order."""
    if "evidence" not in entries:
        return []
    return [(kind, entries[entries["evidence"] == kind]) for kind in EVIDENCE_KINDS
            if kind != RERUN and (entries["evidence"] == kind).any()]


# Columns whose NULL is not a gap: no warning, nothing missing.
NULL_IS_NONE = ("warning", "not_recorded")
# Labels only a rate has: NULL on a latency or fraction is "not applicable", not a gap.
RATE_ONLY = ("numerator", "denominator")


def section_rows(entries: pd.DataFrame) -> pd.DataFrame:
    """An evidence section's table: its columns, a NULL label shown as `not recorded`
    (where it is a gap), '-' (a rate's label on a non-rate) or '' (no warning)."""
    columns = [c for c in SECTION_COLUMNS if c in entries.columns]
    shown = entries[columns].astype(object)
    rate = entries["unit"].eq("tok/s") if "unit" in entries else True
    filled = shown.where(shown.notna(), NOT_RECORDED)
    for column in columns:
        if column in NULL_IS_NONE:
            filled[column] = shown[column].where(shown[column].notna(), "")
        elif column in RATE_ONLY:
            filled[column] = filled[column].where(rate | shown[column].notna(), "-")
    return filled


# --- text that leaves the warehouse as a file a program opens ---------------------------------

# A CSV cell that starts with one of these is a formula to a spreadsheet (OWASP, "CSV
# Injection"): `=HYPERLINK(...)`, `=cmd|...`, `+1+1`, `@SUM(1)`, `-2+3`, a tab or CR first.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with every text cell that a spreadsheet would read as a formula prefixed
    with a single quote, as OWASP recommends (`=1+1` becomes `'=1+1`); numeric columns stay
    numbers, so a negative value is still -2, not '-2. Whole columns at once. The JSON
    exports keep the text as it is: only spreadsheets evaluate cells."""
    safe = frame.copy()
    for column in safe.columns:
        values = safe[column]
        if values.dtype != object and not pd.api.types.is_string_dtype(values.dtype):
            continue
        text = values.where(values.map(lambda v: isinstance(v, str)).astype(bool))
        risky = text.str.startswith(FORMULA_STARTS).fillna(False).astype(bool)
        if risky.any():
            safe[column] = values.where(~risky, "'" + text)
    return safe


def csv_text(frame: pd.DataFrame) -> str:
    """A CSV export: text cells made safe (csv_safe), RFC 4180's CRLF line ends, so a cell
    holding a line break or a bare CR is quoted (with "\\n" rows, Python's CSV writer
    leaves a CR unquoted, and a reader splits the row there)."""
    return csv_safe(frame).to_csv(index=False, lineterminator="\r\n")


def evidence_markdown(entries: pd.DataFrame) -> str:
    """entries.md's sections for evidence from elsewhere ('' when there is none): each
    cell through the `md_cell` filter (numbers as entries.md prints them, text escaped)."""
    sections = []
    for kind, frame in other_evidence(entries):
        rows = section_rows(frame)
        if "value" in rows and "unit" in rows:  # a latency in ms: its digits, point moved
            known = frame["value"].notna()
            rows["value"] = rows["value"].where(~known, [
                md_number(v, u) for v, u in zip(frame["value"], frame["unit"], strict=True)])
            rows["unit"] = rows["unit"].map(person_unit)
        sections.append((TITLES[kind], kind, list(rows.columns),
                         list(rows.itertuples(index=False))))
    return render("evidence.md", sections=sections, not_recorded=NOT_RECORDED)
