"""`benchledger explain ENTRY_ID`: the chain from a number back to its raw facts."""

from __future__ import annotations

import json
import re

import duckdb

from benchledger.publishing.formatting import missing, person_unit, person_value, text_number
from benchledger.rules.frame import NOT_APPLICABLE
from benchledger.warehouse.db import query_frame

LABELS = ("entry_id", "run_id", "arm", "workload", "metric", "statistic", "phase", "scope",
          "concurrency", "numerator", "denominator", "value", "unit", "ci95_low", "ci95_high",
          "n_requests", "n_restarts", "population", "evidence", "publishable", "blocked_by",
          "excluded", "harness_version")


def explain(con: duckdb.DuckDBPyConnection, entry_id: str, limit: int = 20) -> str:
    entry = con.execute(f"SELECT {', '.join(LABELS)} FROM entries WHERE entry_id = ?",
                        [entry_id]).df()
    if entry.empty:
        raise LookupError(f"no entry {entry_id!r} in the warehouse")
    # the first `limit` requests, and how many there are: an entry may rest on 10^6
    requests = query_frame(con, "explain_requests", entry_id=entry_id, limit=limit)
    n_requests = int(query_frame(con, "explain_request_count", entry_id=entry_id)["n"].iloc[0])
    files = query_frame(con, "explain_files", entry_id=entry_id)
    validations = query_frame(con, "explain_validations", entry_id=entry_id)
    lines = ["Entry:"]
    lines += [f"  {k}: {v}" for k, v in entry.iloc[0].items()]
    row = entry.iloc[0]
    if person_unit(row.unit) != row.unit:  # a latency: as the report and the tables say it
        said = [text_number(person_value(v, row.unit))
                for v in (row.value, row.ci95_low, row.ci95_high)]
        lines.append(f"  read as: {said[0]} {person_unit(row.unit)}"
                     + ("" if missing(row.ci95_low) else f" [{said[1]}, {said[2]}]"))
    # where an energy entry's joules came from (T18); other entries have none to say
    source = con.execute("SELECT energy_source FROM entries WHERE entry_id = ?",
                         [entry_id]).fetchone()
    if source and source[0] is not None:
        lines.append(f"  energy_source: {source[0]}")
    lines += _workload_lines(con, entry_id)
    lines.append(f"\nRequests ({n_requests}):")
    lines += [f"  {r.request_id}  {r.status}  output_tokens={r.output_tokens} "
              f"({r.token_source})  raw {r.raw_file_sha256[:16]}"
              for r in requests.itertuples()]
    if n_requests > len(requests):
        lines.append(f"  ... {n_requests - len(requests)} more (benchledger sql: SELECT * FROM "
                     f"entry_requests WHERE entry_id = '{entry_id}')")
    lines.append(f"\nRaw files ({len(files)}):")
    lines += [f"  sha256 {f.sha256}  {f.kind:<12} rows={f.rows}  {f.path}"
              for f in files.itertuples()]
    states = [("FAIL" if not v.success else "not run" if not_run(v.observed) else "pass")
              for v in validations.itertuples()]
    lines.append(f"\nExpectation results ({len(validations)}: {states.count('pass')} passed, "
                 f"{states.count('not run')} not run, {states.count('FAIL')} failed):")
    lines += [f"  [{state}] {v.suite}/{v.expectation} on {v.subject}: {v.observed}"
              for state, v in zip(states, validations.itertuples(), strict=True)]
    return "\n".join(lines)


# What a check that held without judging anything says it found (issue #43: such checks
# were printed as passes): nothing it applies to (rules/frame.py NOT_APPLICABLE), a clock
# not read where the sweep allowed it, a counter not reconciled (warehouse/reconcile.py).
_NOT_RUN = re.compile(rf"^(?:{re.escape(NOT_APPLICABLE)}|unchecked\b|not reconciled\b"
                      r"|[^;]*: not reconciled \()")


def not_run(observed: str) -> bool:
    """Whether a passing result's observation says the check did not run."""
    found = observed.partition(", found ")[2] or observed
    return bool(_NOT_RUN.match(found))


def _workload_lines(con: duckdb.DuckDBPyConnection, entry_id: str) -> list[str]:
    """How the entry's workload was prepared (issue #26); nothing for a built-in set."""
    workload = query_frame(con, "explain_workload", entry_id=entry_id)
    if workload.empty:
        return []
    row = workload.iloc[0]
    lines = ["\nWorkload:"]
    for key, value in row.items():
        if key != "provenance" and value is not None and not (
                isinstance(value, float) and value != value):
            lines.append(f"  {key}: {value}")
    provenance = json.loads(row["provenance"])
    for key in ("input_length", "output_length", "shared_prefix"):
        if provenance.get(key):
            lines.append(f"  {key}: {json.dumps(provenance[key], sort_keys=True)}")
    return lines
