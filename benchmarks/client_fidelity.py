"""How far the measurement client's own timestamps are from the truth (issue #21, item 5).

    .venv/bin/python benchmarks/client_fidelity.py --out /tmp/client_fidelity.json
    .venv/bin/python benchmarks/client_fidelity.py --streams 64 256 --step-ms 10 --tokens 100
    .venv/bin/python benchmarks/client_fidelity.py --table /tmp/client_fidelity.json  # README

A stepped SSE server (benchmarks/stepped_server.py, pinned to one core) writes one event
per open stream every `--step-ms` and records when it wrote each content event
(time.perf_counter_ns(): CLOCK_MONOTONIC on Linux, the clock the clients stamp with) and
how many streams were open at each step. Each client runs in a fresh process pinned to the
other core, with one request per stream (concurrency = requests = streams) after a small
warm-up: benchledger's (`benchledger.client.measure_window`, the code path of every
measured window) and the lean reference (benchmarks/lean_client.py). A fresh server per
run keeps each run's truth apart.

Client rows are matched to the server's requests by the key that starts each prompt (a
key's requests in time order: the warm-up reuses the first prompts). Per run:

- TTFT error: the client's first content stamp minus the server's write of that event,
  per measured request (never negative: both stamp the same clock, the write comes first);
- ITL error: |client gap - server gap| for each pair of consecutive content events;
- requests in flight: open streams per server step over the measured part (max, median),
  and how long the server took to receive all measured requests (arrival spread);
- events/s (content events / first submission to last event) and CPU microseconds per
  event (the client's process and its descendants, over the measured part when the
  client brackets it with on_start/on_stop, else over the whole call);
- for benchledger, the window's own accounting keys where it has them;
- how busy each core was meanwhile: `others_on_client_core` is the client core's busy
  share the client did not use (near 0 on a quiet machine; a disturbed run shows it).

Each (client, streams) runs `--repeat` times, the clients alternating; the summary takes
each figure's median, and `checks` holds the issue's must-show on those medians. Prints one
JSON line (also written to `--out`); benchmarks/README.md explains the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TypedDict

REPO = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a script: make `benchmarks.` importable
    sys.path.insert(0, str(REPO))

# The client's process (the --child run) and what parent and child share.
from benchmarks.client_fidelity_child import (  # noqa: E402
    ACCOUNTING_KEYS,
    MODEL,
    Received,
    child_main,
    core_ticks,
    proc_cpu_s,
)

CLIENTS = ("lean", "benchledger")
# A run whose client core was this busy with other processes is "disturbed" (the summary
# leaves it out when an undisturbed repeat exists); before each run the script waits (up to
# --quiet-wait s) for both cores to be under QUIET_BELOW busy for QUIET_S seconds.
DISTURBED_ABOVE = 0.1
QUIET_BELOW, QUIET_S = 0.1, 3.0
# Issue #21's must-show: (streams, least median in flight or None, ITL error p50 below, ms)
CHECKS = {"s256_in_flight_ge_240_and_itl_p50_lt_2ms": (256, 240, 2.0),
          "s64_itl_p50_lt_1ms": (64, None, 1.0)}


class Served(TypedDict):
    """One request as the server sent it (stepped_server.py's /stamps)."""

    key: str
    arrival_ns: int
    complete: bool
    stamps: list[int]


# --- matching and figures -------------------------------------------------------------------


def quantiles(values: list[float]) -> dict[str, float | int | None]:
    """Nearest-rank p50/p99, min, max, mean of `values` (None each when empty)."""
    if not values:
        return {"p50": None, "p99": None, "min": None, "max": None, "mean": None, "n": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4)

    return {"p50": at(0.5), "p99": at(0.99), "min": round(ordered[0], 4),
            "max": round(ordered[-1], 4), "mean": round(statistics.fmean(ordered), 4),
            "n": len(ordered)}


def timing_errors(received: list[Received], served: list[Served]) -> dict[str, Any]:
    """TTFT and per-event ITL errors (ms) of the measured requests, matched by key; a key's
    requests pair up in time order (submission on the client, arrival on the server)."""
    by_key: dict[str, list[Served]] = defaultdict(list)
    for request in sorted(served, key=lambda s: s["arrival_ns"]):
        by_key[request["key"]].append(request)
    mine: dict[str, list[Received]] = defaultdict(list)
    for row in sorted(received, key=lambda r: r["t_submit_ns"]):
        mine[row["key"]].append(row)
    ttft, itl, unmatched = [], [], 0
    for key, rows in mine.items():
        truth = by_key.get(key, [])
        for i, row in enumerate(rows):
            if row["warmup"]:
                continue
            sent = truth[i]["stamps"] if i < len(truth) and len(truth) == len(rows) else None
            # every event the server wrote must have been recorded, and none other
            if sent is None or not sent or len(sent) != len(row["events"]):
                unmatched += 1
                continue
            got = row["events"]
            ttft.append((got[0] - sent[0]) / 1e6)
            itl += [abs((got[j] - got[j - 1]) - (sent[j] - sent[j - 1])) / 1e6
                    for j in range(1, len(got))]
    return {"ttft_error_ms": quantiles(ttft), "itl_error_ms": quantiles(itl),
            "unmatched_requests": unmatched}


def in_flight(received: list[Received], served: list[Served],
              steps: list[list[int]]) -> dict[str, Any]:
    """Open streams per server step, over the measured requests' span on the server (from
    the first one's arrival to the last one's last write; the warm-up is outside it)."""
    keys = {r["key"] for r in received if not r["warmup"]}
    # a warm-up request shares its key with a measured one: it arrived earlier, so only
    # each key's last arrival is measured
    last: dict[str, Served] = {}
    for request in sorted(served, key=lambda s: s["arrival_ns"]):
        if request["key"] in keys:
            last[request["key"]] = request
    if not last:
        return {"max": None, "median": None, "mean": None, "steps": 0,
                "arrival_spread_ms": None}
    start = min(s["arrival_ns"] for s in last.values())
    # how long the server took to receive them all: the client's submission burst
    spread_ms = round((max(s["arrival_ns"] for s in last.values()) - start) / 1e6, 3)
    end = max(s["stamps"][-1] if s["stamps"] else s["arrival_ns"] for s in last.values())
    counts = [n for t, n in steps if start <= t <= end]
    if not counts:
        return {"max": None, "median": None, "mean": None, "steps": 0,
                "arrival_spread_ms": spread_ms}
    return {"max": max(counts), "median": statistics.median_low(counts),
            "mean": round(statistics.fmean(counts), 1), "steps": len(counts),
            "arrival_spread_ms": spread_ms}


def throughput(received: list[Received]) -> tuple[int, float | None]:
    """Content events of the measured requests, and per second from the first submission to
    the last event."""
    rows = [r for r in received if not r["warmup"]]
    events = sum(len(r["events"]) for r in rows)
    last = max((r["events"][-1] for r in rows if r["events"]), default=None)
    if not rows or last is None:
        return events, None
    span_s = (last - min(r["t_submit_ns"] for r in rows)) / 1e9
    return events, round(events / span_s) if span_s > 0 else None


# --- the parent -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """stepped_server.py in its own process, pinned to one core."""

    def __init__(self, core: int, step_ms: float, log: Path) -> None:
        import httpx

        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.stepped_server", "--port", str(self.port),
             "--model", MODEL, "--step-ms", str(step_ms), "--core", str(core)],
            stdout=self.log, stderr=self.log, cwd=REPO)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.base_url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the stepped server did not start; see {log}")
            time.sleep(0.05)

    def cpu_s(self) -> float:
        return proc_cpu_s(self.proc.pid)

    def truth(self) -> dict[str, Any]:
        import httpx

        report: dict[str, Any] = httpx.get(self.base_url + "/stamps", timeout=60).json()
        return report

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def wait_quiet(cores: tuple[int, int], max_s: float) -> float:
    """Wait, at most `max_s`, until both cores have been idle (each under QUIET_BELOW busy)
    for QUIET_S seconds in a row; returns the seconds waited (the parent itself sleeps)."""
    started = time.monotonic()
    quiet_since = started
    before = core_ticks()
    while (waited := time.monotonic() - started) < max_s:
        time.sleep(0.5)
        now = core_ticks()
        busy = [(now[c][0] - before[c][0]) / max(1, now[c][2] - before[c][2]) for c in cores]
        before = now
        if max(busy) >= QUIET_BELOW:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= QUIET_S:
            return round(waited, 1)
    return round(waited, 1)


def measure(client: str, streams: int, args: argparse.Namespace, cores: tuple[int, int],
            work: Path, tag: str) -> dict[str, Any]:
    """One client run against a fresh server: the run's figures, or its error."""
    run: dict[str, Any] = {"client": client, "streams": streams}
    received_file = work / f"{tag}-received.json"
    server = Server(cores[1], args.step_ms, work / f"{tag}-server.log")
    try:
        spec = {"client": client, "base_url": server.base_url, "streams": streams,
                "tokens": args.tokens, "warmup": args.warmup, "core": cores[0], "tag": tag,
                "workers": args.workers, "timeout_s": args.timeout_s,
                "received_file": str(received_file)}
        server_cpu = server.cpu_s()
        started = time.perf_counter()
        try:
            out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child"],
                                 input=json.dumps(spec), capture_output=True, text=True,
                                 cwd=REPO, timeout=args.timeout_s + 120)
        except subprocess.TimeoutExpired:
            return {**run, "error": f"client process ran past {args.timeout_s + 120:g} s"}
        seconds = time.perf_counter() - started
        if out.returncode != 0:
            return {**run, "error": f"client exited {out.returncode}: {out.stderr[-2000:]}"}
        child = json.loads(out.stdout.strip().splitlines()[-1])
        server_cpu = server.cpu_s() - server_cpu
        truth = server.truth()
    finally:
        server.stop()
    received: list[Received] = json.loads(received_file.read_text())
    served: list[Served] = truth["requests"]
    events, events_per_s = throughput(received)
    measured = [r for r in received if not r["warmup"]]
    return {
        **run, "requests": len(measured),
        "requests_with_events": sum(bool(r["events"]) for r in measured),
        "events": events, "events_per_s": events_per_s,
        "cpu_us_per_event": round(child["cpu_seconds"] / events * 1e6, 2) if events else None,
        "cpu_seconds": child["cpu_seconds"], "cpu_scope": child["cpu_scope"],
        "cpu_utilisation": (round(child["cpu_seconds"] / child["cpu_wall_seconds"], 3)
                            if child["cpu_wall_seconds"] > 0 else None),
        **timing_errors(received, served),
        "in_flight": in_flight(received, served, truth["steps"]),
        "server_incomplete_requests": sum(not s["complete"] for s in served),
        "server_cpu_utilisation": round(server_cpu / seconds, 3),
        "process_seconds": round(seconds, 2),
        **{k: v for k, v in child.items() if k not in ("cpu_seconds", "cpu_wall_seconds",
                                                       "cpu_scope")},
    }


def _figures(run: dict[str, Any]) -> dict[str, Any]:
    """One run's summary figures (the accounting's floats rounded)."""
    accounting = {k: round(v, 4) if isinstance(v, float) else v
                  for k, v in run.get("accounting", {}).items()}
    return {"ttft_error_ms_p50": run["ttft_error_ms"]["p50"],
            "ttft_error_ms_p99": run["ttft_error_ms"]["p99"],
            "itl_error_ms_p50": run["itl_error_ms"]["p50"],
            "itl_error_ms_p99": run["itl_error_ms"]["p99"],
            "in_flight_max": run["in_flight"]["max"],
            "in_flight_median": run["in_flight"]["median"],
            "arrival_spread_ms": run["in_flight"].get("arrival_spread_ms"),
            "events_per_s": run["events_per_s"], "cpu_us_per_event": run["cpu_us_per_event"],
            "unmatched_requests": run["unmatched_requests"],
            "others_on_client_core": run.get("others_on_client_core"), **accounting}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The repeats of one (client, streams): each figure's median (median_low: a value some
    run measured) over the finished runs nobody disturbed, or over all finished runs when
    every one was; with how many there were and the errors of those that failed."""
    errors = [run["error"][-300:] for run in runs if "error" in run]
    finished = [run for run in runs if "error" not in run]
    quiet = [run for run in finished if not run["disturbed"]]
    figures = [_figures(run) for run in quiet or finished]
    row: dict[str, Any] = {"runs_finished": len(finished),
                           "runs_disturbed": len(finished) - len(quiet),
                           "medians_of": "undisturbed runs" if quiet else "all finished runs"}
    for name in figures[0] if figures else ():
        values = [f[name] for f in figures if isinstance(f.get(name), int | float)]
        row[name] = statistics.median_low(values) if values else None
    return {**row, "errors": errors} if errors else row


def checks(summary: dict[str, dict[str, Any]]) -> dict[str, bool | None]:
    """The issue's must-show for benchledger, on the summary's medians; None where that
    stream count was not run, False where any of its runs failed."""
    verdicts: dict[str, bool | None] = {}
    for name, (streams, least_in_flight, itl_below_ms) in CHECKS.items():
        row = summary.get(f"benchledger/s{streams}")
        if row is None:
            verdicts[name] = None
            continue
        itl, held = row.get("itl_error_ms_p50"), row.get("in_flight_median")
        ok = itl is not None and itl < itl_below_ms
        if least_in_flight is not None:
            ok = ok and held is not None and held >= least_in_flight
        verdicts[name] = ok and not row.get("errors")
    return verdicts


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    meminfo = Path("/proc/meminfo").read_text()
    total = re.search(r"MemTotal:\s+(\d+)", meminfo)
    model = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
    return {
        "nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
        "mem_total_gib": round(int(total.group(1)) / 1024 / 1024, 1) if total else None,
        "cpu": model.group(1).strip() if model else platform.processor(),
        "kernel": platform.release(), "python": platform.python_version(),
        **{name: _version(name) for name in ("httpx", "httpcore", "h11", "aiohttp", "uvloop")},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _git(*argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True).stdout


def pick_cores(client: int, server: int) -> tuple[int, int]:
    """The asked cores where this process may use them; else the first allowed ones (a
    one-core machine shares its core, and says so in the JSON)."""
    allowed = sorted(os.sched_getaffinity(0))
    if client in allowed and server in allowed and client != server:
        return client, server
    return allowed[0], allowed[1 % len(allowed)]


def _cell(row: dict[str, Any], *names: str) -> str:
    values = [row.get(name) for name in names]
    if all(v is None for v in values):
        return "-"
    return " / ".join("-" if v is None else f"{v:,.2f}" if isinstance(v, float)
                      else f"{v:,}" for v in values)


def markdown_table(report: dict[str, Any]) -> str:
    """The README's tables of a report: every (client, streams) summary, then the
    benchledger window's own accounting keys, then the must-show checks."""
    lines = ["| streams | client | TTFT error p50 / p99 ms | ITL error p50 / p99 ms "
             "| in flight max / median | events/s | CPU us/event | others on client core "
             "| runs (disturbed) |",
             "|---|---|---|---|---|---|---|---|---|"]
    accounting = ["| streams | " + " | ".join(f"`{k}`" for k in ACCOUNTING_KEYS) + " |",
                  "|---|" + "---|" * len(ACCOUNTING_KEYS)]
    for name, row in report["summary"].items():
        client, streams = name.split("/s")
        if "ttft_error_ms_p50" not in row:
            lines.append(f"| {streams} | {client} | failed: {row.get('errors')} |")
            continue
        lines.append(" | ".join([
            f"| {streams}", client, _cell(row, "ttft_error_ms_p50", "ttft_error_ms_p99"),
            _cell(row, "itl_error_ms_p50", "itl_error_ms_p99"),
            _cell(row, "in_flight_max", "in_flight_median"), _cell(row, "events_per_s"),
            _cell(row, "cpu_us_per_event"), _cell(row, "others_on_client_core"),
            f"{row['runs_finished']} ({row['runs_disturbed']}) |"]))
        if client == "benchledger":
            accounting.append(" | ".join([f"| {streams}", *(_cell(row, k) for k in
                                                            ACCOUNTING_KEYS)]) + " |")
    checks = [f"- `{name}`: **{verdict}**" for name, verdict in report["checks"].items()]
    return "\n".join([*lines, "", *accounting, "", *checks])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 64, 256, 512])
    parser.add_argument("--step-ms", type=float, default=10.0, help="the server's step")
    parser.add_argument("--tokens", type=int, default=100, help="content events per request")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up requests per run")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per client and stream count (the summary takes medians)")
    parser.add_argument("--quiet-wait", type=float, default=60.0,
                        help="before each run, wait at most this long for idle cores (0: never)")
    parser.add_argument("--clients", nargs="+", default=list(CLIENTS), choices=CLIENTS)
    parser.add_argument("--workers", type=int, default=None,
                        help="WindowSpec.workers, where the client has it (default: its own)")
    parser.add_argument("--client-core", type=int, default=0)
    parser.add_argument("--server-core", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=300.0,
                        help="a run's request and drain timeout")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON line here")
    parser.add_argument("--table", type=Path, default=None,
                        help="print the README's tables of a saved JSON line, and stop")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(json.loads(sys.stdin.read()))
    if args.table:
        print(markdown_table(json.loads(args.table.read_text())))
        return 0

    cores = pick_cores(args.client_core, args.server_core)
    runs: list[dict[str, Any]] = []
    summary: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="benchledger-fidelity-") as tmp:
        for streams in args.streams:
            # repeats alternate the clients, so a moment's disturbance hits both alike
            for repeat in range(args.repeat):
                for client in args.clients:
                    tag = f"r{len(runs)}"
                    waited = wait_quiet(cores, args.quiet_wait)
                    try:
                        run = measure(client, streams, args, cores, Path(tmp), tag)
                    except Exception as exc:  # one failed run must not lose the others
                        run = {"client": client, "streams": streams, "error": repr(exc)}
                    others = run.get("others_on_client_core")
                    runs.append({**run, "repeat": repeat, "waited_for_quiet_s": waited,
                                 "disturbed": others is not None and others > DISTURBED_ABOVE})
            for client in args.clients:
                summary[f"{client}/s{streams}"] = summarise(
                    [r for r in runs if (r["client"], r["streams"]) == (client, streams)])
    uncommitted = [line[3:] for line in _git("status", "--porcelain").splitlines()]
    report = {
        "benchmark": "client_fidelity",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _git("rev-parse", "--short", "HEAD").strip(),
        "uncommitted": uncommitted, "machine": machine(),
        "client_core": cores[0], "server_core": cores[1], "step_ms": args.step_ms,
        "tokens_per_request": args.tokens, "warmup_requests": args.warmup,
        "repeat": args.repeat,
        "checks": checks(summary), "summary": summary, "runs": runs,
    }
    line = json.dumps(report)
    print(line)
    if args.out:
        args.out.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
