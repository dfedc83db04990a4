"""Summary rows recovered from old reports (a CSV), as historical evidence.

Each row is one number set a report printed for one benchmark point. The columns are fixed
(COLUMNS); an empty cell is unknown and stays NULL. Nothing is derived here or later from
what a row does not say: no elapsed time from tokens and a rate, no request count from a
rate, no statistic for a latency whose statistic the report did not name (trap T16).

A row's evidence is `historical`, or `derived_comparison` where the row itself says its
value was derived from other runs (a speed-up computed between two reports, say).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa

from benchledger.imports.checks import DUPLICATE, MAX_COUNT, first_duplicate
from benchledger.imports.evidence import (
    DERIVED_COMPARISON,
    HISTORICAL,
    Evidence,
    EvidenceFileError,
    SourceFile,
)
from benchledger.imports.tools import Importer, register

TEXT, INTEGER, NUMBER = pa.string(), pa.int64(), pa.float64()
COLUMNS: dict[str, pa.DataType] = {
    "profile": TEXT, "evidence": TEXT, "record_id": TEXT, "model": TEXT, "runtime": TEXT,
    "backend": TEXT, "hardware": TEXT, "input_tokens": INTEGER, "output_target": INTEGER,
    "clients": INTEGER, "requests": INTEGER, "arrival": TEXT, "prompt_cache": TEXT,
    "elapsed_s": NUMBER, "output_tok_s": NUMBER, "total_tok_s": NUMBER, "ttft_s": NUMBER,
    "ttft_statistic": TEXT, "tpot_s": NUMBER, "tpot_statistic": TEXT, "completed": INTEGER,
    "failed": INTEGER, "unresolved": INTEGER, "drain_status": TEXT, "notes": TEXT,
}
# The statistics a latency may be labelled with; another word is refused, not guessed at.
STATISTICS = ("mean", "median", "p50", "p90", "p95", "p99", "min", "max")
CHOICES = {
    "evidence": (HISTORICAL, DERIVED_COMPARISON),
    "ttft_statistic": STATISTICS, "tpot_statistic": STATISTICS,
    "prompt_cache": ("warm", "cold"), "drain_status": ("complete", "incomplete"),
}
ROW_SCHEMA = pa.schema([("row_id", TEXT), ("run_id", TEXT), ("line_no", pa.int32()),
                        *COLUMNS.items()])


def parse(path: Path, sha256: str, run_id: str, name: str) -> Evidence:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise EvidenceFileError(path, f"not UTF-8 text ({exc})") from exc
    reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
    _check_header(path, reader.fieldnames)
    rows = []
    try:
        for row in reader:
            rows.append(_row(path, reader.line_num, row))
    except csv.Error as exc:
        raise EvidenceFileError(path, f"line {reader.line_num}: malformed CSV ({exc})") from exc
    if not rows:
        raise EvidenceFileError(path, "no rows below the header")
    _refuse_repeats(path, rows)
    table = pa.Table.from_pylist(
        [{"row_id": f"{run_id}/line{line}", "run_id": run_id, "line_no": line, **values}
         for line, values in rows], schema=ROW_SCHEMA)
    return Evidence(tool="report", run_id=run_id, name=name,
                    files=[SourceFile(path, sha256, "report-csv", len(rows))],
                    report_rows=table, evidence=HISTORICAL)


@register
class ReportImporter(Importer):
    """An old report's summary rows (a CSV), historical evidence."""

    name = "report"

    def parse(self, path: Path, sha256: str, run_id: str, name: str) -> Evidence:
        return parse(path, sha256, run_id, name)


def _check_header(path: Path, header: Sequence[str] | None) -> None:
    if not header:
        raise EvidenceFileError(path, "empty: expected a header line naming the columns "
                                      f"{', '.join(COLUMNS)}")
    names = [h.strip() for h in header]
    missing = [c for c in COLUMNS if c not in names]
    unknown = [h for h in names if h not in COLUMNS]
    if missing or unknown or len(set(names)) != len(names):
        raise EvidenceFileError(path, (
            "header: " + "; ".join(part for part in (
                f"missing columns {missing}" if missing else "",
                f"unknown columns {unknown}" if unknown else "",
                "a column named twice" if len(set(names)) != len(names) else "") if part)
            + f" (the columns are {', '.join(COLUMNS)}; empty cells mean unknown)"))


def _row(path: Path, line: int, raw: dict) -> tuple[int, dict]:
    if None in raw or any(value is None for value in raw.values()):
        raise EvidenceFileError(path, f"line {line}: {len(raw.get(None) or [])} cells more or "
                                      "fewer than the header has columns")
    values = {}
    for column, kind in COLUMNS.items():
        cell = (raw.get(column) or "").strip()
        values[column] = _value(path, line, column, cell, kind) if cell else None
    values["evidence"] = values["evidence"] or HISTORICAL  # a report's row is historical
    return line, values


def _value(path: Path, line: int, column: str, cell: str,
           kind: pa.DataType) -> str | float | int:
    if kind == TEXT:
        if column in CHOICES and cell not in CHOICES[column]:
            raise EvidenceFileError(path, f"line {line}, column {column}: {cell!r} is not one "
                                          f"of {', '.join(CHOICES[column])}")
        return cell
    try:
        number = float(cell.replace(",", "")) if kind == NUMBER else int(cell.replace(",", ""))
    except ValueError:
        raise EvidenceFileError(path, f"line {line}, column {column}: {cell!r} is not "
                                      f"{'a number' if kind == NUMBER else 'an integer'}"
                                      ) from None
    if not math.isfinite(number) or number < 0:
        raise EvidenceFileError(path, f"line {line}, column {column}: {cell!r} is not a "
                                      "finite number >= 0")
    if kind == INTEGER and number > MAX_COUNT:
        raise EvidenceFileError(path, f"line {line}, column {column}: {cell!r} is not an "
                                      f"integer between 0 and {MAX_COUNT}")
    if column == "elapsed_s" and number == 0:
        raise EvidenceFileError(path, f"line {line}, column elapsed_s: {cell!r} is not a "
                                      "duration > 0 (empty means not recorded)")
    return number


def _refuse_repeats(path: Path, rows: list[tuple[int, dict]]) -> None:
    """A record_id names one row; a row repeated cell for cell is a duplicate too."""
    lines = [line for line, _ in rows]
    frame = pd.DataFrame([values for _, values in rows], columns=list(COLUMNS))
    for keys, nulls_equal, what in ((frame[["record_id"]], False, "its record_id"),
                                    (frame, True, "every cell")):
        pair = first_duplicate(keys, nulls_equal)
        if pair is not None:
            raise EvidenceFileError(path, f"line {lines[pair[1]]} repeats line "
                                          f"{lines[pair[0]]} ({what}): a row " + DUPLICATE)
