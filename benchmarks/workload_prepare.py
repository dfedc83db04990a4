"""What preparing a workload's requests costs (benchledger.workloads), and rendering them.

    .venv/bin/python benchmarks/workload_prepare.py
    .venv/bin/python benchmarks/workload_prepare.py --rows 100000 --items 100000 --render 10000

Writes, into a temporary folder (or `--dir`), a JSON Lines dataset of `--rows` requests
(prompts of 20 to 200 words, one line in ten a `messages` list, half of them with
`max_tokens`) and a Mooncake trace of `--rows` requests (log-normal input lengths, hash ids
shared between requests). Then, each in a fresh process, it prepares `--items` requests:

- `dataset_ordered`: the dataset in file order;
- `dataset_seeded`: the same, `sampling = "seeded"`, with a log-normal `output_length`;
- `trace`: the trace's first `--items` rows;
- `synthetic_lognormal`: `input_length` log-normal (median 2,000, sigma 0.7) and an
  `output_length`, with a `shared_prefix` of 16 groups;
- `render_synthetic`, `render_trace`: `--render` prompts of about `--render-tokens` words
  (synthetic, fixed length), and the first `--render` trace rows, each made with
  render_prompt (the rows are taken out of the table before the clock starts).

Per preparing case: wall and CPU seconds of the first call in the process (`cold`: pyarrow's
readers and kernels load on first use) and of a second one (`warm`), the peak of Python's
own allocations in a third call (tracemalloc: Python objects and numpy's arrays; not timed,
tracemalloc slows allocation), the peak of pyarrow's memory pool, the table's size, and the
process's VmRSS after its imports and VmHWM at its end (the whole process, in MiB). Per
rendering case: seconds, CPU seconds and microseconds per prompt. Prints
one JSON line; benchmarks/README.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: make `benchledger` importable from here
    sys.path.insert(0, str(REPO))

CASES = ("dataset_ordered", "dataset_seeded", "trace", "synthetic_lognormal",
         "render_synthetic", "render_trace")
WORDS = ("alpha", "beta", "gamma", "delta", "river", "stone", "harvest", "valley", "bridge",
         "timber", "market", "lamp", "window", "garden", "letter", "engine", "copper",
         "silver", "orbit", "signal")


def write_inputs(folder: Path, rows: int) -> dict[str, Any]:
    """The dataset and the trace (seeded: the same files for the same --rows)."""
    draws = np.random.default_rng(1)
    lengths = draws.integers(20, 201, rows)
    picks = draws.integers(0, len(WORDS), int(lengths.sum()))
    pool = [WORDS[i] for i in picks.tolist()]
    with (folder / "dataset.jsonl").open("w") as out:
        at = 0
        for i, n in enumerate(lengths.tolist()):
            text = " ".join(pool[at:at + n])
            at += n
            if i % 10 == 9:
                line: dict[str, Any] = {"id": f"m{i}", "messages": [
                    {"role": "system", "content": "Answer briefly."},
                    {"role": "user", "content": text}]}
            else:
                line = {"id": f"q{i}", "prompt": text}
            if i % 2:
                line["max_tokens"] = 16 + i % 512
            out.write(json.dumps(line) + "\n")
    inputs = np.clip(draws.lognormal(np.log(2000), 0.8, rows), 16, 64_000).astype(int)
    stamps = np.cumsum(draws.exponential(25.0, rows)).round(1)
    with (folder / "trace.jsonl").open("w") as out:
        for i in range(rows):
            blocks = -(-int(inputs[i]) // 512)
            base = (i % 500) * 1000  # requests 500 apart share their first blocks
            out.write(json.dumps({"timestamp": float(stamps[i]), "input_length": int(inputs[i]),
                                  "output_length": int(16 + i % 300),
                                  "hash_ids": list(range(base, base + blocks))}) + "\n")
    return {name: round((folder / name).stat().st_size / 2**20, 1)
            for name in ("dataset.jsonl", "trace.jsonl")}


def _status_mib(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def run_case(case: str, folder: Path, items: int, render: int, render_tokens: int) -> dict:
    """One case in this process: what it cost."""
    import pyarrow as pa

    from benchledger.sweep.workload import WorkloadSource
    from benchledger.workloads.prepare import prepare_workload
    from benchledger.workloads.render import render_prompt

    sources = {
        "dataset_ordered": WorkloadSource(dataset="dataset.jsonl"),
        "dataset_seeded": WorkloadSource(dataset="dataset.jsonl", sampling="seeded",
                                         output_length={"distribution": "lognormal",
                                                        "median": 200, "sigma": 0.6}),
        "trace": WorkloadSource(trace="trace.jsonl"),
        "synthetic_lognormal": WorkloadSource(
            input_length={"distribution": "lognormal", "median": 2000, "sigma": 0.7},
            output_length={"distribution": "uniform", "min": 64, "max": 512},
            shared_prefix={"groups": 16, "tokens": 1024}),
        "render_synthetic": WorkloadSource(input_length={"distribution": "fixed",
                                                         "value": render_tokens}),
        "render_trace": WorkloadSource(trace="trace.jsonl"),
    }
    out: dict[str, Any] = {"rss_after_imports_mib": _status_mib("VmRSS")}
    if case.startswith("render"):
        rows = prepare_workload(sources[case], folder, render, 1, 256).table.to_pylist()
        words = sum(len(render_prompt(row, 1).split(" ")) for row in rows[:100])
        wall, cpu = time.perf_counter(), time.process_time()
        for row in rows:
            render_prompt(row, 1)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        out.update(prompts=len(rows), words_per_prompt=round(words / min(100, len(rows))),
                   seconds=round(wall, 3), cpu_seconds=round(cpu, 3),
                   us_per_prompt=round(wall / len(rows) * 1e6, 1))
    else:
        # The first call in a fresh process (what a measuring task pays: pyarrow's readers
        # and kernels load on first use), a second one, then a third under tracemalloc
        # (which slows allocation, so it is not timed).
        for key in ("cold", "warm"):
            wall, cpu = time.perf_counter(), time.process_time()
            prepared = prepare_workload(sources[case], folder, items, 1, 256)
            out[f"{key}_seconds"] = round(time.perf_counter() - wall, 3)
            out[f"{key}_cpu_seconds"] = round(time.process_time() - cpu, 3)
        out.update(rows=prepared.table.num_rows,
                   table_mib=round(prepared.table.nbytes / 2**20, 1))
        del prepared
        tracemalloc.start()
        prepare_workload(sources[case], folder, items, 1, 256)
        out["tracemalloc_peak_mib"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
        tracemalloc.stop()
    out.update(arrow_pool_peak_mib=round(pa.default_memory_pool().max_memory() / 2**20, 1),
               peak_rss_mib=_status_mib("VmHWM"))
    return out


def machine() -> dict[str, Any]:
    from importlib.metadata import version

    meminfo = Path("/proc/meminfo").read_text()
    model = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
    total = re.search(r"MemTotal:\s+(\d+)", meminfo)
    return {
        "nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
        "mem_total_gib": round(int(total.group(1)) / 2**20, 1) if total else None,
        "cpu": model.group(1).strip() if model else platform.processor(),
        "python": platform.python_version(),
        **{name: version(name) for name in ("pyarrow", "numpy", "pydantic")},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--render", type=int, default=10_000)
    parser.add_argument("--render-tokens", type=int, default=8192)
    parser.add_argument("--dir", type=Path, help="where the inputs go (default: a temp dir)")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)  # a child's one case
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(args.case, args.dir, args.items, args.render,
                                  args.render_tokens)))
        return 0
    with tempfile.TemporaryDirectory(prefix="workload-prepare-") as temp:
        folder = args.dir or Path(temp)
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        sizes = write_inputs(folder, args.rows)
        written = round(time.perf_counter() - started, 1)
        cases = {}
        for case in CASES:
            child = subprocess.run(
                [sys.executable, __file__, "--case", case, "--dir", str(folder),
                 "--items", str(args.items), "--render", str(args.render),
                 "--render-tokens", str(args.render_tokens)],
                capture_output=True, text=True, cwd=REPO)
            if child.returncode:
                raise SystemExit(f"{case} failed:\n{child.stderr[-3000:]}")
            cases[case] = json.loads(child.stdout.strip().splitlines()[-1])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    uncommitted = subprocess.run(["git", "status", "--porcelain", "--", "benchledger/workloads"],
                                 cwd=REPO, capture_output=True, text=True).stdout.split()[1::2]
    print(json.dumps({"benchmark": "workload_prepare",
                      "date": datetime.now(UTC).isoformat(timespec="seconds"),
                      "commit": commit, "uncommitted": uncommitted, "rows": args.rows,
                      "items": args.items, "render": args.render,
                      "render_tokens": args.render_tokens, "input_mib": sizes,
                      "write_inputs_seconds": written, "machine": machine(),
                      "cases": cases}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
