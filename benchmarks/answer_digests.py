"""What recording what came back costs at 10^6 requests (issue #42): the answer's sha256 and
length on every row (the reasoning's too, NULL for a model without reasoning; the texts
off, as by default), in the raw Parquet files and in the warehouse.

Three runs of the same synthetic requests (benchmarks.synthetic_run's window rows, written
as a measurement task writes them: `requests_table` and `pq.write_table`, one file per
window of 50,000 requests), differing only in the new columns:

- `none`: the columns NULL (what a row cost before #42);
- `greedy`: temperature 0 over a dataset of `--prompts` prompts, one answer per prompt
  (Parquet's dictionary encoding keeps each distinct digest once per file);
- `sampled`: every answer different (temperature > 0): 64 hex characters of entropy per row.

Each is loaded into a fresh DuckDB file (`CREATE TABLE AS` of the files, then CHECKPOINT).
Prints one JSON line: bytes of Parquet and of the DuckDB file per variant, and per request.

    python -m benchmarks.answer_digests --requests 1000000 --dir /tmp/digests
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq

from benchledger.raw.records import requests_table
from benchmarks.synthetic_run import window_rows

WINDOW = 50_000
VARIANTS = ("none", "greedy", "sampled")


def _digests(variant: str, rows: list[dict], prompts: int, rng: np.random.Generator,
             start: int) -> None:
    """Fill the rows' new columns as `variant` says (in place)."""
    if variant == "none":
        return
    chars = rng.integers(100, 2000, len(rows))
    for i, row in enumerate(rows):
        if variant == "greedy":  # the answer is a function of the prompt
            p = (start + i) % prompts
            row["prompt_id"] = f"p-{p:05d}"
            row["answer_sha256"] = hashlib.sha256(f"answer of {p}".encode()).hexdigest()
            row["answer_chars"] = 100 + p % 1900
        else:
            row["answer_sha256"] = hashlib.sha256(f"answer {start + i}".encode()).hexdigest()
            row["answer_chars"] = int(chars[i])


def write_variant(out: Path, variant: str, requests: int, prompts: int, events: int) -> int:
    """Write `requests` rows in windows of WINDOW; returns the Parquet bytes."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)  # the same requests in every variant
    digest_rng = np.random.default_rng(11)
    total = 0
    for w, start in enumerate(range(0, requests, WINDOW)):
        n = min(WINDOW, requests - start)
        rows, _ = window_rows(f"run/a/r{w}/code-c1", n, events, w % 2 == 1, rng)
        _digests(variant, rows, prompts, digest_rng, start)
        path = out / f"window-{w:03d}.requests.parquet"
        pq.write_table(requests_table(rows), path)  # as restart/window_write.py writes
        total += path.stat().st_size
    return total


def warehouse_bytes(files: Path, db: Path) -> int:
    db.unlink(missing_ok=True)
    con = duckdb.connect(str(db))
    try:
        con.execute("CREATE TABLE request_records AS SELECT * FROM read_parquet($p)",
                    {"p": str(files / "*.parquet")})
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return db.stat().st_size


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=1_000_000)
    p.add_argument("--prompts", type=int, default=1000, help="the greedy run's dataset")
    p.add_argument("--events", type=int, default=30, help="content events per request")
    p.add_argument("--dir", type=Path, default=Path("/tmp/answer_digests"))
    args = p.parse_args(argv)
    shutil.rmtree(args.dir, ignore_errors=True)
    result: dict[str, object] = {"requests": args.requests, "prompts": args.prompts,
                                 "events": args.events, "window": WINDOW,
                                 "loadavg": os.getloadavg()[0]}
    for variant in VARIANTS:
        t0 = time.perf_counter()
        parquet = write_variant(args.dir / variant, variant, args.requests, args.prompts,
                                args.events)
        duck = warehouse_bytes(args.dir / variant, args.dir / f"{variant}.duckdb")
        result[variant] = {"parquet_bytes": parquet, "duckdb_bytes": duck,
                           "seconds": round(time.perf_counter() - t0, 1)}
    base = result["none"]
    assert isinstance(base, dict)
    for variant in VARIANTS[1:]:
        got = result[variant]
        assert isinstance(got, dict)
        got["parquet_bytes_per_request_added"] = round(
            (got["parquet_bytes"] - base["parquet_bytes"]) / args.requests, 2)
        got["duckdb_bytes_per_request_added"] = round(
            (got["duckdb_bytes"] - base["duckdb_bytes"]) / args.requests, 2)
        got["parquet_increase"] = round(got["parquet_bytes"] / base["parquet_bytes"] - 1, 4)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
