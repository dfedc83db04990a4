"""Raw files through an S3-compatible object store at scale (issue #25).

A run of about `--requests` measured requests (benchmarks/synthetic_run.py) is written
into a measuring node's local copy, pushed to a private moto server (as the restart tasks
push: each restart's folder, then the run manifest), pulled into the head's local copy
(as `load` does: every named file's sha256 checked) and loaded from there; the same run is
loaded straight from the node's folder for comparison (a shared filesystem). Each stage's
wall time, the bytes moved and the peak RSS, as one JSON line. moto keeps objects in
memory and answers on loopback, so the transfer times are a floor for a real store; what
this measures is benchledger's side: no stage goes row by row, and the load from the
pulled copy costs what a load from disk costs.

    .venv/bin/python benchmarks/object_store.py [--requests 1000000]

Needs the dev extra (moto[server]).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks.` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchledger.raw import store as raw_store  # noqa: E402
from benchledger.raw.layout import RunLayout  # noqa: E402
from benchledger.raw.store import S3Settings  # noqa: E402
from benchledger.warehouse.db import connect  # noqa: E402
from benchledger.warehouse.load import load_run_dir  # noqa: E402
from benchmarks.synthetic_run import write_scale_run  # noqa: E402
from benchmarks.warehouse_scale import code_version, machine  # noqa: E402
from tests.s3_server import s3_server  # noqa: E402


def measure(requests: int, work: Path) -> dict:
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    written = write_scale_run(work / "written", requests)
    timings["write_s"] = time.perf_counter() - t0
    with s3_server() as server:
        settings = S3Settings.from_env(server.env)
        node = raw_store.resolve(f"s3://{server.bucket}/bench", settings, work / "node")
        layout = RunLayout(node.local, written.run_id)
        layout.run_dir.parent.mkdir(parents=True)
        written.run_dir.rename(layout.run_dir)
        t0 = time.perf_counter()
        pushed = raw_store.push_run_manifest(node, layout)
        for manifest in sorted(layout.run_dir.glob("*/r*/restart.json")):
            pushed += raw_store.push_folder(node, manifest.parent)
        timings["push_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = sum(raw_store.push_folder(node, m.parent)
                    for m in layout.run_dir.glob("*/r*/restart.json"))
        timings["push_unchanged_s"] = time.perf_counter() - t0
        head = raw_store.resolve(node.location, settings, work / "head")
        head_layout = RunLayout(head.local, layout.run_id)
        t0 = time.perf_counter()
        pulled = raw_store.pull_run(head, head_layout)
        timings["pull_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        repulled = raw_store.pull_run(head, head_layout)
        timings["pull_again_s"] = time.perf_counter() - t0
    stored_bytes = sum(p.stat().st_size for p in head_layout.run_dir.rglob("*")
                       if p.is_file() and not p.name.startswith("."))
    with connect(work / "direct.duckdb") as con:
        t0 = time.perf_counter()
        direct = load_run_dir(con, layout.run_dir)
        timings["load_from_node_folder_s"] = time.perf_counter() - t0
    with connect(work / "via-store.duckdb") as con:
        t0 = time.perf_counter()
        via_store = load_run_dir(con, head_layout.run_dir, head.recorded_path)
        timings["load_from_pulled_copy_s"] = time.perf_counter() - t0
    assert via_store == direct, (via_store, direct)
    return {"requests": direct["requests"], "files_pushed": pushed,
            "files_pushed_again": again, "files_pulled": pulled,
            "files_pulled_again": repulled, "bytes": stored_bytes,
            **{k: round(v, 2) for k, v in timings.items()},
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bl-object-store-") as work:
        result = measure(args.requests, Path(work))
    print(json.dumps({"benchmark": "object_store", **result, "machine": machine(),
                      "code": code_version()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
