"""Evidence from elsewhere, as parsed: what one foreign file says, before it is loaded.

A parser (guidellm.py, aiperf.py, vllm_bench.py, report.py) reads one file and returns an
`Evidence`: the run it describes, its windows (benchmarks or load points), its request
records as one Arrow table, or the summary rows of a historical report. Every value is
the file's own; a field the file does not carry is None, never a guess (trap T16).
Nothing here knows DuckDB or Airflow: warehouse/imports.py loads an Evidence.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchledger.rules import EVIDENCE_KINDS

# What an entry rests on (docs/protocol.md, warehouse relations: evidence); the catalogue
# declares the kinds (rule evidence_labelled checks them).
RERUN, IMPORTED, HISTORICAL, DERIVED_COMPARISON = EVIDENCE_KINDS

# Where an imported request's token counts came from, besides the pipeline's own
# (usage, missing): a tokenizer of the benchmarking client, the requested length, or a count
# of streamed chunks. None of them is a delivered token count.
CLIENT_TOKENIZER, REQUESTED, CHUNKS = "client_tokenizer", "requested", "chunks"
NOT_DELIVERED = (CLIENT_TOKENIZER, REQUESTED, CHUNKS)

NOT_RECORDED = "not recorded"
# What each source means, for the flag an import carries when its token counts are not
# delivered counts (None: the tool did not record where its counts came from).
SOURCE_MEANING = {
    CLIENT_TOKENIZER: "the benchmarking client's own tokenizer count of the received text",
    REQUESTED: "the requested output length, not what came back",
    CHUNKS: "streamed chunks counted as tokens",
    None: "counts whose origin the tool did not record",
}


class EvidenceFileError(ValueError):
    """A file that cannot be imported: the message names the file and the problem."""

    def __init__(self, path: Path | str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)
        self.problem = problem


@dataclass(frozen=True)
class SourceFile:
    """A file the evidence was read from (each is a row of raw_files)."""

    path: Path
    sha256: str
    kind: str  # e.g. guidellm-report, aiperf-records, aiperf-summary, report-csv
    rows: int


@dataclass
class Evidence:
    """One imported file's run, windows and request records (or report rows)."""

    tool: str  # guidellm | aiperf | vllm-bench | report
    run_id: str
    name: str
    files: list[SourceFile]  # the first one identifies the import
    tool_version: str | None = None
    command: str | None = None  # the tool's command line, where the file records it
    model: str | None = None
    started_at: datetime | None = None
    windows: list[dict[str, Any]] = field(default_factory=list)
    requests: pa.Table | None = None
    report_rows: pa.Table | None = None
    flags: list[str] = field(default_factory=list)  # what the import found worth saying
    # What its entries rest on: another tool's measurement, or an old report's rows
    # (historical: report.py says so).
    evidence: str = IMPORTED


def run_id_for(tool: str, sha256: str) -> str:
    """One run per imported file, named by its content: the same file is the same run."""
    return f"import__{tool}__{sha256[:16]}"


def window_id_for(run_id: str, index: int, label: str) -> str:
    return f"{run_id}/{index:02d}-{re.sub(r'[^A-Za-z0-9@._-]+', '_', label)}"


def read_json(path: Path) -> Any:
    """The file's JSON, or EvidenceFileError saying where it is broken (a truncated file
    ends inside a value)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise EvidenceFileError(path, f"not UTF-8 text ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise EvidenceFileError(path, f"not valid JSON, truncated or malformed: {exc.msg} at "
                                      f"line {exc.lineno} column {exc.colno}") from exc


def need(path: Path, container: Any, key: str | int, kind: type | tuple[type, ...],
         where: str) -> Any:
    """container[key] of the expected type, or EvidenceFileError naming where it is."""
    try:
        value = container[key]
    except (KeyError, IndexError, TypeError):
        raise EvidenceFileError(path, f"{where}: missing") from None
    if not isinstance(value, kind) or isinstance(value, bool) and bool not in _types(kind):
        raise EvidenceFileError(path, f"{where}: expected {_names(kind)}, found "
                                      f"{type(value).__name__}")
    return value


def _types(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _names(kind: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in _types(kind))


def from_epoch(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def single(values: list) -> Any:
    """The one value every element shares (None when they differ or there is none)."""
    distinct = {v for v in values if v is not None}
    return distinct.pop() if len(distinct) == 1 else None


# The columns of request_records an import writes, with their types; anything else stays
# NULL (prompt ids, prompt hashes, HTTP status and finish reasons are not recorded by the
# tools imported here).
REQUEST_SCHEMA = pa.schema([
    ("request_id", pa.string()), ("window_id", pa.string()), ("seq", pa.int32()),
    ("source_request_id", pa.string()), ("is_warmup", pa.bool_()), ("status", pa.string()),
    ("error", pa.string()), ("max_tokens", pa.int32()), ("temperature", pa.float64()),
    ("prompt_tokens", pa.int64()), ("output_tokens", pa.int64()),
    ("cached_tokens", pa.int64()), ("token_source", pa.string()), ("chunks", pa.int32()),
    ("t_submit_ns", pa.int64()), ("t_first_ns", pa.int64()), ("t_last_ns", pa.int64()),
    ("t_done_ns", pa.int64()), ("content_event_ns", pa.list_(pa.int64())),
])


def request_table(columns: dict[str, Any]) -> pa.Table:
    """The request rows as an Arrow table of REQUEST_SCHEMA (absent columns are NULL)."""
    length = len(columns["request_id"])
    arrays = [_array(columns[f.name], f.type) if f.name in columns
              else pa.nulls(length, f.type) for f in REQUEST_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=REQUEST_SCHEMA)



def _array(values: Any, kind: pa.DataType) -> pa.Array:
    return values.cast(kind) if isinstance(values, pa.Array) else pa.array(values, kind)


def token_source_flags(requests: pa.Table | None) -> list[str]:
    """One flag per source of completed requests' output tokens that is not a delivered
    count: such an import is loaded, and no token rate of it is published."""
    if requests is None:
        return []
    completed = requests.filter(pc.equal(requests.column("status"), "completed"))
    sources = completed.column("token_source").to_pylist()
    flags = []
    for source in sorted(set(sources), key=str):
        if source in SOURCE_MEANING:
            n = sources.count(source)
            flags.append(f"output tokens of {n} completed requests are "
                         f"{SOURCE_MEANING[source]} (token_source "
                         f"{source or NOT_RECORDED}): no token rate of this import is "
                         "published as delivered tokens")
    return flags


def content_events(first_ns: pa.Array, gaps_ns: pa.Array) -> tuple[pa.Array, pa.Array,
                                                                   pa.Array]:
    """(content_event_ns, t_last_ns, chunks) of requests whose tool recorded the first
    content event and the gaps between streamed chunks: each request's events are the
    first, then each gap after the one before; no first event: NULL events, 0 chunks.
    Set-based over flat arrays: no loop over requests."""
    valid = first_ns.is_valid().to_numpy(zero_copy_only=False)
    n_gaps = pc.fill_null(pc.list_value_length(gaps_ns), 0).to_numpy()
    counts = np.where(valid, n_gaps + 1, 0)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    kept = counts[valid]
    starts = np.cumsum(kept) - kept
    steps = np.zeros(int(kept.sum()), dtype=np.int64)  # 0 at each first event, then gaps
    later = np.ones(len(steps), dtype=bool)
    later[starts] = False
    flat = pc.list_flatten(gaps_ns.filter(pa.array(valid))).to_numpy(zero_copy_only=False)
    steps[later] = flat
    elapsed = np.cumsum(steps)
    firsts = first_ns.filter(pa.array(valid)).to_numpy(zero_copy_only=False)
    values = (elapsed - np.repeat(elapsed[starts], kept) + np.repeat(firsts, kept)
              if len(steps) else np.zeros(0, dtype=np.int64))
    events = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, pa.int64()),
                                      mask=pa.array(~valid))
    last = np.zeros(len(valid), dtype=np.int64)
    last[valid] = values[offsets[1:][valid] - 1] if len(values) else 0
    return events, pa.array(last, pa.int64(), mask=~valid), pa.array(counts, pa.int32())


def seconds_to_ns(values: Any, per_unit_ns: float = 1e9) -> pa.Array:
    """Times (a list or an Arrow array, None for missing) in a unit worth per_unit_ns ns,
    as int64 ns (half to even, as Python's round)."""
    array = values.cast(pa.float64()) if isinstance(values, pa.Array) else pa.array(
        values, pa.float64())
    return pc.round(pc.multiply(array, per_unit_ns)).cast(pa.int64())


def lists_to_ns(values: Any, per_unit_ns: float = 1e9) -> pa.Array:
    """Lists of times (None for a missing list), each element to int64 ns."""
    lists = values if isinstance(values, pa.ListArray) else pa.array(
        values, pa.list_(pa.float64()))
    flat = seconds_to_ns(lists.flatten(), per_unit_ns)
    return pa.ListArray.from_arrays(lists.offsets, flat, mask=lists.is_null())
