"""Where load_run_dir's time goes, against the plain CREATE TABLE AS of the same files.

    .venv/bin/python benchmarks/load_breakdown.py RUN_DIR [--repeat 3]

RUN_DIR is a run's raw folder (e.g. one written by benchmarks/warehouse_scale.py --dir D:
D/data/raw/<run>). Each variant loads the run's requests Parquet files into a fresh DuckDB
file in its own process (connect to close, the fastest of --repeat), adding one of the
loader's costs at a time:

    plain            CREATE TABLE t AS SELECT * FROM read_parquet([...every file...])
    pk_one_txn       the same rows into a table with request_records' PRIMARY KEY, one INSERT
    pk_txn_per_file  the same, one transaction (BEGIN, INSERT, COMMIT) per file
    loader           benchledger.warehouse.db.connect + load.load_run_dir (migrations,
                     sha256 checks, manifests, raw_files, the raw_file_sha256 column; one
                     transaction, the requests in one INSERT)

Prints one JSON line: seconds per variant and each one's ratio to plain.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from benchledger.raw import layout as raw

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("plain", "pk_one_txn", "pk_txn_per_file", "loader")


def variant(name: str, run_dir: Path, target: Path) -> float:
    import duckdb

    # imported before the clock starts, as duckdb is for the other variants
    from benchledger.warehouse.db import connect
    from benchledger.warehouse.load import load_run_dir

    files = [str(p) for p in raw.requests_files(run_dir)]
    start = time.perf_counter()
    if name == "loader":
        with connect(target) as con:
            load_run_dir(con, run_dir)
        return time.perf_counter() - start
    with duckdb.connect(str(target)) as con:
        if name == "plain":
            con.execute("CREATE TABLE t AS SELECT * FROM read_parquet(?)", [files])
        else:
            con.execute("CREATE TABLE t AS SELECT * FROM read_parquet(?) LIMIT 0", [files])
            con.execute("ALTER TABLE t ADD PRIMARY KEY (request_id)")
            if name == "pk_one_txn":
                con.execute("INSERT INTO t SELECT * FROM read_parquet(?)", [files])
            else:
                for path in files:
                    con.execute("BEGIN TRANSACTION")
                    con.execute("INSERT INTO t SELECT * FROM read_parquet(?)", [path])
                    con.execute("COMMIT")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--target", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.variant:  # the child: one variant, one fresh file
        print(variant(args.variant, args.run_dir.resolve(), args.target))
        return 0
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="benchledger-load-") as tmp:
        for i in range(args.repeat):
            for name in VARIANTS:  # interleaved, so a busy moment hits every variant
                target = Path(tmp) / f"{name}-{i}.duckdb"
                out = subprocess.run([sys.executable, __file__, str(args.run_dir), "--variant",
                                      name, "--target", str(target)], capture_output=True,
                                     text=True, check=True, cwd=REPO)
                seconds[name].append(round(float(out.stdout.strip().splitlines()[-1]), 3))
                target.unlink()
    best = {name: min(values) for name, values in seconds.items()}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    print(json.dumps({"benchmark": "load_breakdown",
                      "date": datetime.now(UTC).isoformat(timespec="seconds"),
                      "commit": commit, "nproc": os.cpu_count(), "run_dir": str(args.run_dir),
                      "files": len(raw.requests_files(args.run_dir)),
                      "seconds": best, "all": seconds,
                      "vs_plain": {n: round(s / best["plain"], 3) for n, s in best.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
