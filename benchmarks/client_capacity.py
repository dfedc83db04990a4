"""How many stream events per second benchledger's measurement client can take on one core.

    .venv/bin/python benchmarks/client_capacity.py
    .venv/bin/python benchmarks/client_capacity.py --concurrency 64 256 --servers stub simulator

The client under test (benchledger.client.measure_window_async, the code path of every
measured window) and the lean reference client (benchmarks/lean_client.py) each run in a
fresh process pinned to one core (os.sched_setaffinity); the server runs pinned to the
other core. Per run: content events received, wall seconds, the client process's CPU
(resource.getrusage before/after: user + system) per event, its CPU utilisation (near 1.0:
the client is the bottleneck), the server's, and the event-loop lag of the client (a task
that sleeps 5 ms and records how late it wakes: how long a ready event can wait for the
loop).

Servers:

- `stub` (benchmarks/sse_stub.py): vLLM-shaped chat events written as fast as one core
  can, one write per event per stream, so the client is the bottleneck: capacity runs
  (events/s, CPU per event). The stub also records when it wrote each event, so with
  `--lag-step-ms` (a paced run: one event per stream every step) the script measures the
  timestamp lag itself: client's recorded perf_counter_ns minus the server's write time,
  per content event (both CLOCK_MONOTONIC on Linux).
- `simulator`: the built-in simulator with near-zero step time (`--step-ms 0.001`, no
  batch penalty, instant prefill). It is Python too and spends far more per event than the
  stub, so these runs are bounded by the simulator's core, not the client: they show CPU
  per event at that rate and the loop lag, not the client's capacity.

Prints one JSON line; benchmarks/README.md explains the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: make `benchmarks.` importable
    sys.path.insert(0, str(REPO))

CLIENTS = ("lean", "benchledger")
MODEL = "sim-model"
PROBE_S = 0.005  # the loop-lag probe's period


# --- the client process ---------------------------------------------------------------------


async def _probe(samples: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(PROBE_S)
        samples.append(loop.time() - start - PROBE_S)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(spec: dict) -> dict:
    keys = [f"{spec['tag']}-q{i}" for i in range(spec["requests"])]
    texts = [f"{key} tell me about the river and the mill" for key in keys]
    if spec["client"] == "benchledger":
        from benchledger.client import Target, WindowSpec, measure_window_async
        from benchledger.prompts import Prompt

        window = WindowSpec(
            window_id=spec["tag"], prompts=[Prompt(id=k, text=t)
                                            for k, t in zip(keys, texts, strict=True)],
            requests=len(keys), warmup=0, concurrency=spec["concurrency"],
            max_tokens=spec["tokens"], temperature=0.0, drain_timeout_s=900.0,
            request_timeout_s=900.0)
        run = measure_window_async(Target(spec["base_url"], MODEL), window)
    else:
        from benchmarks import lean_client

        run = lean_client.run(spec["base_url"], MODEL, list(zip(keys, texts, strict=True)),
                              spec["concurrency"], spec["tokens"])
    lag: list[float] = []
    probe = asyncio.create_task(_probe(lag))
    cpu, wall = _cpu_s(), time.perf_counter()
    result = await run
    wall, cpu = time.perf_counter() - wall, _cpu_s() - cpu
    probe.cancel()
    if spec["client"] == "benchledger":
        received = {row["prompt_id"]: row["content_event_ns"] for row in result.rows}
        completed = sum(row["status"] == "completed" for row in result.rows)
        tokens = sum(row["output_tokens"] or 0 for row in result.rows)
    else:
        received = {key: events for key, (_, events, _) in result.items()}
        completed = len(result)
        tokens = sum(usage.get("completion_tokens", 0) for _, _, usage in result.values())
    events = sum(map(len, received.values()))
    if spec.get("stamps_file"):
        Path(spec["stamps_file"]).write_text(json.dumps(received))
    lag.sort()
    return {"requests": len(keys), "completed": completed, "events": events,
            "usage_tokens": tokens, "seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
            "events_per_s": round(events / wall), "cpu_us_per_event": round(cpu / events * 1e6, 2),
            "cpu_utilisation": round(cpu / wall, 3), "loop_lag_ms": _quantiles(lag, 1e3)}


def child_main(spec: dict) -> int:
    os.sched_setaffinity(0, {spec["core"]})
    report = asyncio.run(_measure(spec))
    print(json.dumps(report))
    return 0


def _quantiles(values: list[float], scale: float) -> dict | None:
    if not values:
        return None
    values = sorted(values)

    def at(q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))] * scale, 3)

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": round(values[-1] * scale, 3),
            "mean": round(statistics.fmean(values) * scale, 3), "n": len(values)}


# --- the parent -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """A server process pinned to one core."""

    def __init__(self, kind: str, core: int, step_ms: float, max_seqs: int, log: Path):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        if kind == "stub":
            argv = [sys.executable, str(REPO / "benchmarks" / "sse_stub.py"),
                    "--port", str(self.port), "--model", MODEL, "--step-ms", str(step_ms)]
        else:
            argv = [sys.executable, "-m", "benchledger.simulator", "--port", str(self.port),
                    "--model", MODEL, "--step-ms", str(step_ms), "--batch-penalty", "0",
                    "--prefill-tok-s", "1000000000", "--speed-spread", "0",
                    "--max-num-seqs", str(max_seqs), "--log-interval-s", "3600"]
        self.log = log.open("ab")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=self.log, cwd=REPO,
                                     preexec_fn=lambda: os.sched_setaffinity(0, {core}))
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.base_url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{kind} server did not start; see {log}")
            time.sleep(0.1)

    def cpu_s(self) -> float:
        return _process_cpu_s(self.proc.pid)

    def stamps(self) -> dict:
        return httpx.get(self.base_url + "/stamps", timeout=60).json()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def run_client(server: Server, client: str, concurrency: int, requests: int, tokens: int,
               core: int, tag: str, stamps_file: Path | None = None) -> dict:
    spec = {"client": client, "base_url": server.base_url, "concurrency": concurrency,
            "requests": requests, "tokens": tokens, "core": core, "tag": tag,
            "stamps_file": str(stamps_file) if stamps_file else None}
    server_cpu = server.cpu_s()
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child"],
                         input=json.dumps(spec), capture_output=True, text=True, cwd=REPO)
    if out.returncode != 0:
        raise RuntimeError(f"{client} c={concurrency} failed:\n{out.stderr[-3000:]}")
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["server_cpu_utilisation"] = round(
        (server.cpu_s() - server_cpu) / report["seconds"], 3)
    return report


def timestamp_lag(server: Server, received_file: Path) -> dict | None:
    """Client's recorded time minus the stub's write time, per content event (us)."""
    sent = server.stamps()
    received = json.loads(received_file.read_text())
    lags, unmatched = [], 0
    for key, events in received.items():
        stamps = sent.get(key, [])
        if len(stamps) != len(events):  # every content event written must be recorded
            unmatched += 1
            continue
        lags += [(r - s) / 1e3 for r, s in zip(events, stamps, strict=True)]
    return {**(_quantiles(lags, 1.0) or {}), "unmatched_requests": unmatched}


def machine() -> dict:
    from importlib.metadata import version

    meminfo = Path("/proc/meminfo").read_text()
    model = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
    return {
        "nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
        "mem_total_gib": round(int(re.search(r"MemTotal:\s+(\d+)", meminfo).group(1))
                               / 1024 / 1024, 1),
        "cpu": model.group(1).strip() if model else platform.processor(),
        "python": platform.python_version(),
        **{name: version(name) for name in ("httpx", "httpcore", "h11",
                                             "uvicorn", "starlette")},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _best(runs: list[dict]) -> dict:
    """The least disturbed of repeated runs: the one with the least CPU per event."""
    return min(runs, key=lambda r: r["cpu_us_per_event"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--servers", nargs="+", default=["stub", "simulator"],
                        choices=["stub", "simulator"])
    parser.add_argument("--tokens", type=int, default=128,
                        help="output tokens (= content events) per request")
    parser.add_argument("--events", type=int, default=400_000,
                        help="content events per capacity run against the stub")
    parser.add_argument("--sim-events", type=int, default=150_000,
                        help="content events per run against the simulator")
    parser.add_argument("--repeat", type=int, default=2,
                        help="capacity runs per client and concurrency (best kept)")
    parser.add_argument("--lag-step-ms", type=float, default=10.0,
                        help="the paced stub run's step (0: no paced run)")
    parser.add_argument("--lag-requests", type=int, default=3,
                        help="requests per stream in the paced run")
    parser.add_argument("--client-core", type=int, default=0)
    parser.add_argument("--server-core", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(json.loads(sys.stdin.read()))

    work = Path(tempfile.mkdtemp(prefix="benchledger-client-"))
    runs: list[dict] = []
    seq = 0

    def measure(server: Server, server_kind: str, mode: str, client: str, concurrency: int,
                requests: int, stamps: bool = False) -> dict:
        nonlocal seq
        seq += 1
        received = work / f"received-{seq}.json" if stamps else None
        report = run_client(server, client, concurrency, requests, args.tokens,
                            args.client_core, f"r{seq}", received)
        if received:
            report["timestamp_lag_us"] = timestamp_lag(server, received)
        report.update(server=server_kind, mode=mode, client=client, concurrency=concurrency)
        runs.append(report)
        return report

    summary: dict[str, dict] = {}
    for kind in args.servers:
        step = 0.0 if kind == "stub" else 0.001
        server = Server(kind, args.server_core, step, max(args.concurrency), work / f"{kind}.log")
        try:
            budget = args.events if kind == "stub" else args.sim_events
            repeat = args.repeat if kind == "stub" else 1
            for concurrency in args.concurrency:
                requests = max(concurrency, budget // args.tokens)
                measure(server, kind, "warm-up", "lean", concurrency, concurrency)
                best = {}
                for client in CLIENTS:
                    best[client] = []
                for _ in range(repeat):
                    for client in CLIENTS:
                        best[client].append(measure(server, kind, "capacity", client,
                                                    concurrency, requests))
                lean, ours = _best(best["lean"]), _best(best["benchledger"])
                summary[f"{kind}/c{concurrency}"] = {
                    "lean_events_per_s": lean["events_per_s"],
                    "benchledger_events_per_s": ours["events_per_s"],
                    "lean_cpu_us_per_event": lean["cpu_us_per_event"],
                    "benchledger_cpu_us_per_event": ours["cpu_us_per_event"],
                    "cpu_per_event_ratio": round(ours["cpu_us_per_event"]
                                                 / lean["cpu_us_per_event"], 3),
                    "events_per_s_ratio": round(lean["events_per_s"] / ours["events_per_s"], 3),
                }
        finally:
            server.stop()
        if kind == "stub" and args.lag_step_ms > 0:
            server = Server(kind, args.server_core, args.lag_step_ms, max(args.concurrency),
                            work / "stub-paced.log")
            try:
                for concurrency in args.concurrency:
                    for client in CLIENTS:
                        run = measure(server, kind, f"paced {args.lag_step_ms:g} ms", client,
                                      concurrency, concurrency * args.lag_requests, stamps=True)
                        summary[f"stub-paced/c{concurrency}"] = {
                            **summary.get(f"stub-paced/c{concurrency}", {}),
                            f"{client}_timestamp_lag_us": run["timestamp_lag_us"]}
            finally:
                server.stop()

    print(json.dumps({
        "benchmark": "client_capacity",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                 capture_output=True, text=True).stdout.strip(),
        "machine": machine(), "client_core": args.client_core,
        "server_core": args.server_core, "tokens_per_request": args.tokens,
        "summary": summary, "runs": [r for r in runs if r["mode"] != "warm-up"],
    }))
    shutil.rmtree(work)  # server logs and received stamps; kept when a run failed
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
