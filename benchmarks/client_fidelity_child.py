"""The client side of benchmarks/client_fidelity.py: one client run in its own process.

client_fidelity.py starts itself with `--child` for each run, pinned to the client core,
with the run's spec on stdin; the child runs benchledger's client or the lean reference
against the stepped server, writes what the client received (its stamps per request) to
the spec's `received_file` and prints one JSON line of its CPU and the cores' load. The
parent keeps the server, the matching against the server's truth and the figures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, TypedDict

MODEL = "sim-model"
# What the window reports about its own timing (the multi-process client's accounting);
# copied into each benchledger run where present, None where the client has no such key.
ACCOUNTING_KEYS = ("client_workers", "client_lag_p50_ms", "client_lag_p99_ms",
                   "client_cpu_share", "bunched_event_fraction")


class Received(TypedDict):
    """One request as a client recorded it."""

    key: str
    warmup: bool
    t_submit_ns: int
    events: list[int]  # the client's stamp of each content event


# --- the client process ---------------------------------------------------------------------


def proc_cpu_s(pid: int) -> float:
    """utime + stime + cutime + cstime of a live process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _descendants(root: int) -> list[int]:
    parents: dict[int, list[int]] = defaultdict(list)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        parents[ppid].append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        kids = parents.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def tree_cpu_s() -> float:
    """CPU seconds of this process, its reaped children and its live descendants: a client
    with worker processes is charged for them too."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = sum(proc_cpu_s(pid) for pid in _descendants(os.getpid()))
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime + live


def core_ticks() -> dict[int, tuple[int, int, int]]:
    """Per core, from /proc/stat: (busy, stolen, all) clock ticks since boot."""
    ticks = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            user, nice, system, idle, iowait, irq, softirq, steal = map(int, values[:8])
            ticks[int(name[3:])] = (user + nice + system + irq + softirq, steal,
                                    user + nice + system + idle + iowait + irq + softirq + steal)
    return ticks


class Bracket:
    """CPU and wall time between two marks, how busy each core was meanwhile (a share the
    client did not use is someone else's: a disturbed run says so), and where the client's
    processes may run (its workers inherit the pinning, unless the client pins them
    elsewhere: the JSON says)."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float]] = []
        self.ticks: list[dict[int, tuple[int, int, int]]] = []
        self.processes = 0
        self.cores: set[int] = set()

    def mark(self) -> None:
        self.ticks.append(core_ticks())
        self.marks.append((tree_cpu_s(), time.perf_counter()))
        pids = [os.getpid(), *_descendants(os.getpid())]
        self.processes = max(self.processes, len(pids))
        for pid in pids:
            with contextlib.suppress(OSError):  # a process that just ended
                self.cores |= os.sched_getaffinity(pid)

    def span(self) -> tuple[float, float]:
        (cpu0, wall0), (cpu1, wall1) = self.marks[0], self.marks[-1]
        return cpu1 - cpu0, wall1 - wall0

    def core_load(self) -> dict[str, dict[int, float | None]]:
        """Per core: the share of its time it was busy, and stolen by the hypervisor."""
        first, last = self.ticks[0], self.ticks[-1]
        busy: dict[int, float | None] = {}
        stolen: dict[int, float | None] = {}
        for core in sorted(first.keys() & last.keys()):
            (b0, s0, t0), (b1, s1, t1) = first[core], last[core]
            busy[core] = round((b1 - b0) / (t1 - t0), 3) if t1 > t0 else None
            stolen[core] = round((s1 - s0) / (t1 - t0), 3) if t1 > t0 else None
        return {"busy": busy, "stolen": stolen}


def _keys(spec: dict[str, Any], part: str, n: int) -> list[tuple[str, str]]:
    # The key is the prompt's first word: the server files each request under it.
    return [(f"{spec['tag']}{part}{i}", f"{spec['tag']}{part}{i} tell me about the river")
            for i in range(n)]


def _stamps(events: Any) -> list[int]:
    """A row's content_event_ns as plain ints (a list today; an array would do as well)."""
    return [] if events is None else [int(t) for t in events]


def _run_benchledger(spec: dict[str, Any], whole: Bracket, measured: Bracket
                     ) -> tuple[list[Received], dict[str, Any]]:
    from benchledger.client import Target, WindowSpec, measure_window
    from benchledger.prompts import Prompt

    prompts = [Prompt(id=key, text=text) for key, text in _keys(spec, "q", spec["streams"])]
    # `workers` arrives with the multi-process client: passed only where WindowSpec has it.
    extra: dict[str, Any] = {}
    if spec["workers"] is not None and "workers" in {f.name for f in
                                                     dataclasses.fields(WindowSpec)}:
        extra["workers"] = spec["workers"]
    window = WindowSpec(window_id=spec["tag"], prompts=prompts, requests=len(prompts),
                        warmup=spec["warmup"], concurrency=len(prompts),
                        max_tokens=spec["tokens"], temperature=0.0,
                        drain_timeout_s=spec["timeout_s"], request_timeout_s=spec["timeout_s"],
                        **extra)
    whole.mark()
    result = measure_window(Target(spec["base_url"], MODEL), window,
                            on_start=measured.mark, on_stop=measured.mark)
    whole.mark()
    received: list[Received] = [
        {"key": str(row["prompt_id"]), "warmup": bool(row["is_warmup"]),
         "t_submit_ns": int(row["t_submit_ns"]), "events": _stamps(row["content_event_ns"])}
        for row in result.rows]
    accounting = result.accounting
    facts = {"accounting": {k: accounting.get(k) for k in ACCOUNTING_KEYS},
             "workers_passed": extra.get("workers"),
             "window_status": {k: accounting.get(k) for k in
                               ("completed", "failed", "unresolved", "warmup_completed")}}
    return received, facts


def _run_lean(spec: dict[str, Any], whole: Bracket, measured: Bracket
              ) -> tuple[list[Received], dict[str, Any]]:
    import asyncio

    from benchmarks import lean_client

    def run(part: str, n: int) -> list[Received]:
        results = asyncio.run(lean_client.run(spec["base_url"], MODEL, _keys(spec, part, n), n,
                                              spec["tokens"]))
        return [{"key": key, "warmup": part == "w", "t_submit_ns": t_submit, "events": events}
                for key, (t_submit, events, _) in results.items()]

    whole.mark()
    warmup = run("w", spec["warmup"]) if spec["warmup"] else []
    measured.mark()
    rows = run("q", spec["streams"])
    measured.mark()
    whole.mark()
    return warmup + rows, {}


def child_main(spec: dict[str, Any]) -> int:
    os.sched_setaffinity(0, {spec["core"]})
    whole, measured = Bracket(), Bracket()
    runner = _run_benchledger if spec["client"] == "benchledger" else _run_lean
    received, facts = runner(spec, whole, measured)
    bracket = measured if len(measured.marks) >= 2 else whole
    scope = "measured part" if bracket is measured else "whole call, warm-up included"
    cpu_s, wall_s = bracket.span()
    Path(spec["received_file"]).write_text(json.dumps(received))
    load = bracket.core_load()
    mine = cpu_s / wall_s if wall_s > 0 else 0.0
    client_core_busy = load["busy"].get(spec["core"])
    print(json.dumps({
        "cpu_seconds": round(cpu_s, 4), "cpu_wall_seconds": round(wall_s, 4),
        "cpu_scope": scope, "client_processes": bracket.processes,
        "client_cores_allowed": sorted(bracket.cores), "core_busy": load["busy"],
        "core_stolen": load["stolen"],
        # the client core's busy share the client's processes did not account for (clock
        # ticks: about +-0.01 over a second)
        "others_on_client_core": (round(max(0.0, client_core_busy - mine), 3)
                                  if client_core_busy is not None else None),
        **facts}))
    return 0
