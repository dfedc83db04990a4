"""What one long SSE line costs the client's reader (issue #22, item 13).

    .venv/bin/python benchmarks/sse_reader.py
    .venv/bin/python benchmarks/sse_reader.py --line-mb 15 --reads 1024 4096 65536 --against bbcf96f

Feeds one data line of `--line-mb` MB (a JSON event whose text is that long), then an
ordinary event and [DONE], into benchledger.client.sse.SSEReader in reads of each size of
`--reads` in turn, and reports per read size the seconds and the CPU seconds of this thread
(time.thread_time) the reader took, best of `--repeat`. With `--against REV`, the reader of
that git revision (its benchledger/client/sse.py, loaded as a module of its own) is measured
the same way beside it: the reader before the change joined the unfinished line with every
read (quadratic in the line's length). Prints one JSON line; benchmarks/README.md quotes it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: make `benchledger` importable from here
    sys.path.insert(0, str(REPO))

SSE_PATH = "benchledger/client/sse.py"


def stream(line_mb: float) -> bytes:
    text = "x" * int(line_mb * 1e6)
    long_event = ('data: {"choices": [{"index": 0, "delta": {"content": "' + text
                  + '"}, "finish_reason": null}]}\n\n').encode()
    return (long_event + b'data: {"choices": [{"index": 0, "delta": {"content": " end"}, '
            b'"finish_reason": "stop"}]}\n\ndata: [DONE]\n\n')


def reader_at(revision: str) -> ModuleType:
    """benchledger/client/sse.py as `revision` had it, as a module of its own."""
    source = subprocess.run(["git", "show", f"{revision}:{SSE_PATH}"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "sse_then.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("sse_then", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def feed_all(module: ModuleType, data: bytes, read: int) -> tuple[float, float, int]:
    """(seconds, thread CPU seconds, events) of one reader fed `data` in reads of `read`."""
    chunks = [data[i:i + read] for i in range(0, len(data), read)]
    reader = module.SSEReader()
    events = 0
    wall, cpu = time.perf_counter(), time.thread_time()
    for chunk in chunks:
        events += len(reader.feed(chunk))
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    if reader.fault or events != 3:
        raise SystemExit(f"reader failed the stream: {reader.fault!r}, {events} events")
    return wall, cpu, events


def measure(module: ModuleType, data: bytes, reads: list[int], repeat: int) -> dict:
    out = {}
    for read in reads:
        runs = [feed_all(module, data, read) for _ in range(repeat)]
        wall, cpu, _ = min(runs)
        out[str(read)] = {"seconds": round(wall, 4), "cpu_seconds": round(cpu, 4),
                          "reads": -(-len(data) // read)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--line-mb", type=float, default=15.0)
    parser.add_argument("--reads", type=int, nargs="+", default=[1024, 4096, 65536],
                        help="read sizes in bytes (default 1024 4096 65536)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", metavar="REV",
                        help="also measure the reader of this git revision")
    args = parser.parse_args(argv)
    from benchledger.client import sse

    data = stream(args.line_mb)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    uncommitted = subprocess.run(["git", "status", "--porcelain", "--", SSE_PATH], cwd=REPO,
                                 capture_output=True, text=True).stdout.split()[1::2]
    result = {"benchmark": "sse_reader", "date": datetime.now(UTC).isoformat(timespec="seconds"),
              "commit": commit, "uncommitted": uncommitted, "line_mb": args.line_mb,
              "bytes": len(data), "python": platform.python_version(),
              "now": measure(sse, data, args.reads, args.repeat)}
    if args.against:
        result["against"] = args.against
        result["then"] = measure(reader_at(args.against), data, args.reads, args.repeat)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
