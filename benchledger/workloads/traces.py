"""Mooncake traces: requests with their arrival times, lengths and shared blocks.

One JSON object a line (blank lines skipped), as Mooncake's published traces have them:

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}

- `timestamp`: milliseconds (an integer or a decimal), never less than the line before;
- `input_length`, `output_length`: tokens, integers from 1 to 1000000;
- `hash_ids` (optional): non-negative integers, one per block of 512 input tokens; two
  requests with the same id share that block (its text, so the prefix cache can serve it).
Other keys are ignored. A request's arrival is `(timestamp - first timestamp) / 1000 *
time_scale` seconds after the replay starts.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchledger.workloads.errors import at
from benchledger.workloads.jsonio import (
    MAX_LENGTH,
    Bad,
    first_bad,
    kind,
    out_of_range,
    positive_int,
    read_bytes,
    read_lines,
    scan,
)

BLOCK_TOKENS = 512
HASH_IDS = pa.list_(pa.int64())
TRACE_SCHEMA = pa.schema([("timestamp", pa.float64()), ("input_length", pa.int64()),
                          ("output_length", pa.int64()), ("hash_ids", HASH_IDS)])


@dataclass(frozen=True)
class Trace:
    path: Path
    sha256: str  # of the bytes read
    table: pa.Table  # TRACE_SCHEMA (hash_ids never null: [] where a line has none) + line

    @property
    def rows(self) -> int:
        return self.table.num_rows


def read_trace(path: Path) -> Trace:
    data = read_bytes(path, "trace")
    sha256 = hashlib.sha256(data).hexdigest()
    table, lines = read_lines(data, TRACE_SCHEMA)
    if isinstance(table, pa.Table):
        if table.num_rows == 0:
            raise at(path, None, "empty trace: no requests")
        table = table.combine_chunks()
        row = first_bad(_bad_rows(table))
        if row is None and lines is not None:
            lists = table["hash_ids"].combine_chunks()
            lengths = np.asarray(pc.fill_null(pc.list_value_length(lists), 0), np.int64)
            # A line without hash_ids has none: [], not null.
            ids = pa.ListArray.from_arrays(
                pa.array(np.concatenate(([0], np.cumsum(lengths))), pa.int32()),
                lists.flatten())
            return Trace(path, sha256, table.set_column(3, "hash_ids", ids)
                         .append_column("line", pa.array(lines)))
        problem = f"row {row} fails a check" if row is not None else "lines do not add up"
    else:
        problem = table
    rows = _scan(path, data)  # raises the precise error, if there is one
    if not rows:
        raise at(path, None, "empty trace: no requests")
    if isinstance(table, pa.Table):  # the columns found a fault the line scan did not
        raise at(path, None, f"cannot be read: {problem}")
    # pyarrow refused what the scan accepts (e.g. a timestamp beyond int64): slowly.
    columns = {f.name: pa.array([r[f.name] for r in rows], f.type) for f in TRACE_SCHEMA}
    columns["line"] = pa.array([r["line"] for r in rows], pa.int64())
    return Trace(path, sha256, pa.table(columns))


def _bad_rows(t: pa.Table) -> np.ndarray:
    """Rows that break a rule of _row, found column by column."""
    stamps = t["timestamp"]
    bad = ~np.asarray(pc.fill_null(pc.is_finite(stamps), False))
    values = np.asarray(pc.fill_null(stamps, 0.0))
    bad[1:] |= np.diff(values) < 0
    for key in ("input_length", "output_length"):
        bad |= np.asarray(pc.is_null(t[key])) | out_of_range(t[key], 1, MAX_LENGTH)
    lists = t["hash_ids"].combine_chunks()
    flat = lists.flatten()
    if len(flat):
        wrong = np.asarray(pc.fill_null(pc.less(flat, 0), True))
        bad[np.asarray(pc.list_parent_indices(lists))[wrong]] = True
    return bad


def _scan(path: Path, data: bytes) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for line, obj in scan(path, data):
        try:
            row = _row(obj, rows[-1] if rows else None)
        except Bad as e:
            raise at(path, line, str(e)) from None
        rows.append({**row, "line": line})
    return rows


def _row(obj: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    stamp = obj.get("timestamp")
    if stamp is None:
        raise Bad("no `timestamp`")
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) \
            or not math.isfinite(stamp):
        raise Bad(f"`timestamp` is not a number of milliseconds but {kind(stamp)}")
    if previous is not None and stamp < previous["timestamp"]:
        raise Bad(f"`timestamp` {stamp} is before the previous line's "
                  f"{previous['timestamp']} (a trace is in arrival order)")
    row: dict[str, Any] = {"timestamp": float(stamp)}
    for key in ("input_length", "output_length"):
        if obj.get(key) is None:
            raise Bad(f"no `{key}`")
        row[key] = positive_int(obj[key], key)
    ids = obj.get("hash_ids")
    if ids is None:
        ids = []
    if not isinstance(ids, list):
        raise Bad(f"`hash_ids` is not a list but {kind(ids)}")
    for j, value in enumerate(ids):
        if isinstance(value, bool) or not isinstance(value, int) \
                or not 0 <= value < 2**63:
            raise Bad(f"`hash_ids[{j}]` is not a non-negative integer but {kind(value)}")
    row["hash_ids"] = ids
    return row
