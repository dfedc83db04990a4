"""A synthetic sweep run at any scale, written by the project's own writers.

Realistic shape: arms x restarts x workloads windows at concurrency 1, each request with
~`events` content-bearing stream events (speculative arms carry several tokens per event),
timestamps from a seeded model of a ~25-60 tok/s server. The raw files are exactly what a
measurement task writes (restart.write_window: Parquet + manifests), so load, validate,
derive and export read them like a real run's.

    python -m benchmarks.synthetic_run OUT_DIR --requests 10000
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchledger.client import WindowResult
from benchledger.raw.layout import RunLayout, write_json
from benchledger.restart.steps import write_run_manifest
from benchledger.restart.window_write import write_window
from benchledger.server.telemetry import SAMPLE_SCHEMA

S = 1_000_000_000
RUN_ID = "scheduled__2026-11-30T00:00:00+00:00"
ANCHOR_WALL_NS = 1_796_000_000 * S


# --slos (issue #27): two SLOs every request is judged by in derive, and a frontier
# comparison of the first two arms at every load point.
SLOS = textwrap.dedent("""
    [[slos]]
    name = "ttft"
    metric = "ttft"
    max_ms = 50
    percentile = 90
    [[slos]]
    name = "itl"
    metric = "itl"
    max_ms = 60
    """)


def sweep_text(name: str, requests: int, restarts: int, arms: tuple[str, ...],
               workloads: tuple[str, ...], slos: bool = False) -> str:
    arm_blocks = "".join(textwrap.dedent(f"""
        [[arms]]
        name = "{arm}"
        server = "command"
        command = "serve --flavour {arm} --port {{port}}"
        model = "m"
        speculative = {"true" if i % 2 else "false"}
        """) for i, arm in enumerate(arms))
    comparison = textwrap.dedent(f"""
        [[comparisons]]
        a = "{arms[0]}"
        b = "{arms[1]}"
        metric = "decode_rate"
        """) if len(arms) > 1 else ""
    return textwrap.dedent(f"""
        [sweep]
        name = "{name}"
        [defaults]
        requests = {requests}
        warmup = 0
        restarts = {restarts}
        clock_source = "none"
        require_clock_check = false
        """) + arm_blocks + "".join(f'\n[[workloads]]\nname = "{w}"\n' for w in workloads) \
        + comparison + (SLOS + comparison.replace('"decode_rate"', '"frontier"')
                        if slos else "")


def window_rows(window_id: str, n: int, events: int, speculative: bool,
                rng: np.random.Generator) -> tuple[list[dict], dict]:
    """n measured requests of one window, back to back (closed loop, concurrency 1)."""
    tokens_per_event = rng.uniform(2.2, 3.0, n) if speculative else np.ones(n)
    output = np.maximum(2, np.round(events * tokens_per_event)).astype(np.int64)
    speed = rng.normal(45.0 if speculative else 28.0, 3.0, n).clip(5)  # decode tok/s
    ttft = rng.gamma(4.0, 0.01, n)
    decode = (output - 1) / speed
    tail = rng.uniform(0.001, 0.003, n)
    e2e = ttft + decode + tail
    submit = np.concatenate([[0.0], np.cumsum(e2e[:-1] + 0.001)]) + 1.0
    t_submit = (submit * S).astype(np.int64)
    t_first = t_submit + (ttft * S).astype(np.int64)
    t_last = t_first + (decode * S).astype(np.int64)
    t_done = t_last + (tail * S).astype(np.int64)
    steps = np.linspace(0.0, 1.0, events)
    event_ns = (t_first[:, None] + np.outer(t_last - t_first, steps).astype(np.int64)).tolist()
    prompt = rng.integers(40, 400, n)
    rows = [{
        "request_id": f"{window_id}/m{i:06d}", "window_id": window_id, "seq": i,
        "is_warmup": False, "status": "completed", "http_status": 200, "error": None,
        "prompt_id": f"p-{i % 16:02d}", "prompt_sha256": "0" * 64, "prompt_prefix": None,
        "max_tokens": 256, "temperature": 0.0, "prompt_tokens": int(prompt[i]),
        "output_tokens": int(output[i]), "cached_tokens": 0, "token_source": "usage",
        "chunks": events, "finish_reason": "length", "t_submit_ns": int(t_submit[i]),
        "t_first_ns": int(t_first[i]), "t_last_ns": int(t_last[i]),
        "t_done_ns": int(t_done[i]), "content_event_ns": event_ns[i],
    } for i in range(n)]
    start, end = int(t_submit[0]), int(t_done[-1])
    accounting = {
        "window_id": window_id, "concurrency": 1, "submitted": n, "completed": n,
        "failed": 0, "unresolved": 0, "warmup_submitted": 0, "warmup_completed": 0,
        "drain_status": "complete", "drain_timeout_s": 300.0,
        "anchor_wall_ns": ANCHOR_WALL_NS, "anchor_perf_ns": 0,
        "window_start_ns": start, "window_end_ns": end,
        "window_start_wall_ns": ANCHOR_WALL_NS + start,
        "window_end_wall_ns": ANCHOR_WALL_NS + end, "elapsed_s": (end - start) / S,
        "denominator": "first measured submission to last completion",
        "max_tokens": 256, "temperature": 0.0, "arrival": "closed",
        "requested_rate_rps": None, "achieved_rate_rps": None, "prompt_cache": "warm",
        "input_tokens_target": None, "seed": 0}
    return rows, accounting


def telemetry_table(accounting: dict, nodes: int, gpus: int, readings: int,
                    rng: np.random.Generator) -> pa.Table:
    """Every GPU of `nodes` nodes read `readings` times over the window (the first one
    before it, the last after it), as benchledger.server.telemetry writes them: clocks under load,
    400-500 W, energy counters that grow by each reading's power over its interval. Built
    column by column (numpy), never row by row."""
    n = nodes * gpus * readings
    start, end = accounting["window_start_wall_ns"], accounting["window_end_wall_ns"]
    at = np.linspace(start, end, readings).astype("datetime64[ns]").astype("datetime64[us]")
    phase = np.full(readings, "during", dtype=object)
    phase[0], phase[-1] = "before", "after"
    power = rng.uniform(400.0, 500.0, (nodes * gpus, readings))
    dt = (end - start) / 1e9 / max(1, readings - 1)
    energy = 1e6 + np.cumsum(power * dt, axis=1)
    gpu_of = np.tile(np.repeat(np.arange(gpus), readings), nodes)
    return pa.table({
        "node": np.repeat([f"gpu-node-{i + 1}" for i in range(nodes)], gpus * readings),
        "source": np.full(n, "dcgm", dtype=object), "phase": np.tile(phase, nodes * gpus),
        "sampled_at": pa.array(np.tile(at, nodes * gpus), pa.timestamp("us", tz="UTC")),
        "gpu": gpu_of.astype(np.int32), "uuid": pa.nulls(n, pa.string()),
        "model": pa.nulls(n, pa.string()), "hostname": pa.nulls(n, pa.string()),
        "sm_clock_mhz": np.full(n, 2400.0), "max_sm_clock_mhz": np.full(n, 2520.0),
        "mem_clock_mhz": np.full(n, 2619.0), "power_w": power.ravel(),
        "energy_j": energy.ravel(), "utilization_gpu": np.full(n, 100.0),
        "memory_used_mib": np.full(n, 70000.0), "clock_event_reasons": np.zeros(n, np.int64),
        "clock_event_names": np.full(n, "", dtype=object), "pstate": pa.nulls(n, pa.string()),
        "power_limit_w": pa.nulls(n, pa.float64()),
    }, schema=SAMPLE_SCHEMA)


def write_scale_run(out: Path, requests: int, *, restarts: int = 5,
                    arms: tuple[str, ...] = ("base", "spec"),
                    workloads: tuple[str, ...] = ("code", "prose"), events: int = 30,
                    seed: int = 0, run_id: str = RUN_ID, name: str = "scale",
                    telemetry: tuple[int, int, int] | None = None,
                    slos: bool = False) -> RunLayout:
    """Write one run of about `requests` measured requests under out/; returns its layout.
    `telemetry`: (nodes, GPUs per node, readings per window) of a deployment across nodes,
    each window's GPU samples written as a telemetry file (None: none). `slos`: the sweep
    has two SLOs and a frontier comparison (SLOS)."""
    windows = len(arms) * restarts * len(workloads)
    per_window = max(1, requests // windows)
    out.mkdir(parents=True, exist_ok=True)
    sweep_file = out / f"{name}.toml"
    sweep_file.write_text(sweep_text(name, min(per_window, 15), restarts, arms, workloads,
                                     slos))
    layout = RunLayout(out / "data", run_id)
    write_run_manifest(layout, sweep_file)
    rng = np.random.default_rng(seed)
    for i, arm in enumerate(arms):
        for k in range(restarts):
            write_json(layout.restart_manifest(arm, k), {
                "restart_id": layout.restart_id(arm, k), "run_id": run_id, "arm": arm,
                "restart_index": k, "server_kind": "command", "single_instance": False,
                "status": "ok", "effective_config_sha256": f"config-of-{arm}",
                "server_version": "synthetic 1",
                "deployment": [{"node": f"gpu-node-{n + 1}", "rank": n}
                               for n in range(telemetry[0] if telemetry else 1)]},
                sealed_in=layout.slot_dir(arm, k))
            for workload in workloads:
                wid = layout.window_id(arm, k, workload, 1)
                rows, accounting = window_rows(wid, per_window, events, bool(i % 2), rng)
                samples = telemetry_table(accounting, *telemetry, rng) if telemetry else None
                write_window(layout, arm, k, workload, workload, min(per_window, 15),
                             WindowResult(rows=rows, accounting=accounting),
                             telemetry=samples)
    return layout


def _telemetry_shape(text: str) -> tuple[int, int, int]:
    try:
        nodes, gpus, readings = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NODES,GPUS,READINGS, got {text!r}") from None
    if min(nodes, gpus) < 1 or readings < 2:
        raise argparse.ArgumentTypeError("at least 1 node, 1 GPU and 2 readings")
    return nodes, gpus, readings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--telemetry", type=_telemetry_shape, metavar="NODES,GPUS,READINGS",
                        help="GPU telemetry per window: nodes, GPUs per node, readings")
    args = parser.parse_args(argv)
    layout = write_scale_run(args.out, args.requests, restarts=args.restarts,
                             events=args.events, seed=args.seed, telemetry=args.telemetry)
    print(layout.run_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
