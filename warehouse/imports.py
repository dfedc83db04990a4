"""Load one imported file into the warehouse, check it, derive its labelled entries.

`import_evidence` takes what benchledger.imports parsed (an Evidence) and, in ONE
transaction: writes the run (evidence `imported` or `historical`, the tool, its version,
the file's sha256 in raw_files), its windows and request records (or a report's rows),
runs the same window and request rules the pipeline's own runs pass (the GX gate), and
derives the entries (warehouse/evidence_entries.py). A refusal or error anywhere leaves the
warehouse as it was. A file already loaded (by sha256) adds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb
import pandas as pd
import pyarrow as pa

from benchledger import __version__
from benchledger.expectations.gate import run_gate
from benchledger.imports.evidence import Evidence, token_source_flags
from benchledger.warehouse.db import first_row, insert_frame, only_row, query_frame
from benchledger.warehouse.evidence_entries import derive_historical, derive_imported
from benchledger.warehouse.validate import gate_requests, store_results

WINDOW_COLUMNS = ("window_id", "workload", "load_pattern", "concurrency", "arrival",
                  "requested_rate_rps", "submitted", "completed", "failed", "unresolved",
                  "drain_status", "window_start", "window_end", "elapsed_s", "denominator",
                  "min_requests", "warmup_submitted", "max_tokens", "temperature",
                  "reported_output_tok_s", "reported_total_tok_s")


@dataclass(frozen=True)
class ImportResult:
    run_id: str
    already_loaded: bool
    windows: int = 0
    requests: int = 0
    report_rows: int = 0
    entries: int = 0
    published: int = 0
    failed_rules: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()  # what the import found worth saying (runs.import_flags)


def loaded_run(con: duckdb.DuckDBPyConnection, sha256: str) -> str | None:
    """The run an already imported file became (by its sha256), or None."""
    row = first_row(con, "SELECT run_id FROM runs WHERE source_file_sha256 = ?", [sha256])
    return row[0] if row else None


def import_evidence(con: duckdb.DuckDBPyConnection, evidence: Evidence) -> ImportResult:
    """Load, check and derive one file's evidence in one transaction (see the module)."""
    identity = evidence.files[0].sha256
    known = loaded_run(con, identity)
    if known is not None:
        return ImportResult(known, already_loaded=True)
    flags = (*evidence.flags, *token_source_flags(evidence.requests))
    con.execute("BEGIN TRANSACTION")
    try:
        _load(con, evidence, flags)
        failed = _validate(con, evidence) if evidence.requests is not None else ()
        if evidence.report_rows is not None:
            entries = derive_historical(con, evidence.run_id)
        else:
            entries = derive_imported(con, evidence.run_id)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    published = only_row(con, "SELECT count(*) FROM published_entries WHERE run_id = ?",
                          [evidence.run_id])[0]
    return ImportResult(
        evidence.run_id, already_loaded=False, windows=len(evidence.windows),
        requests=0 if evidence.requests is None else evidence.requests.num_rows,
        report_rows=0 if evidence.report_rows is None else evidence.report_rows.num_rows,
        entries=entries, published=published, failed_rules=failed, flags=flags)


def _load(con: duckdb.DuckDBPyConnection, evidence: Evidence, flags: tuple[str, ...]) -> None:
    now = datetime.now(UTC)
    source = evidence.files[0]
    insert_frame(con, "runs", pd.DataFrame([{
        "run_id": evidence.run_id, "sweep_name": evidence.name, "sweep_path": str(source.path),
        "harness_version": __version__, "started_at": evidence.started_at,
        "evidence": evidence.evidence, "source_tool": evidence.tool,
        "source_tool_version": evidence.tool_version, "source_command": evidence.command,
        "source_model": evidence.model, "source_file_sha256": source.sha256,
        "import_flags": "; ".join(flags) or None, "imported_at": now}]))
    insert_frame(con, "raw_files", pd.DataFrame([
        {"sha256": f.sha256, "path": str(f.path), "kind": f.kind, "rows": f.rows,
         "loaded_at": now} for f in evidence.files]))
    if evidence.windows:
        windows = pd.DataFrame([{c: w.get(c) for c in WINDOW_COLUMNS} for w in evidence.windows])
        windows["run_id"], windows["arm"] = evidence.run_id, evidence.name
        windows["raw_file_sha256"] = windows["requests_file_sha256"] = source.sha256
        insert_frame(con, "windows", windows)
    if evidence.requests is not None:
        insert_frame(con, "request_records", _tagged(evidence.requests, source.sha256))
    if evidence.report_rows is not None:
        insert_frame(con, "report_rows", _tagged(evidence.report_rows, source.sha256))


def _tagged(table: pa.Table, sha256: str) -> pa.Table:
    return table.append_column("raw_file_sha256", pa.array([sha256] * table.num_rows,
                                                           pa.string()))


def _validate(con: duckdb.DuckDBPyConnection, evidence: Evidence) -> tuple[str, ...]:
    """The pipeline's window and request rules over the imported rows (no restarts: the
    tools record no server instance); every result is a row of `validations`."""
    run_id = evidence.run_id
    restarts = query_frame(con, "gate_restarts", run_id=run_id)
    windows = query_frame(con, "gate_windows", run_id=run_id)
    results = run_gate(restarts, windows, gate_requests(con, run_id))
    store_results(con, run_id, results)
    return tuple(f"{r.expectation} [{r.subject}]" for r in results if not r.success)
