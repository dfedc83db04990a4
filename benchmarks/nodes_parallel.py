"""Nodes in parallel (issue #25): a four-arm sweep on four nodes against one arm on one.

On a local cluster of four nodes (`benchledger cluster up`, one Edge worker per node,
simulator servers), three sweeps of the same arm shape run one after another through
`benchledger run --cluster`:

- `one`: one arm on node-a;
- `four`: four arms, one per node (restarts of different nodes at the same time);
- `four-serial`: the same four arms with `nodes_in_parallel = false` (one at a time).

For each: the sweep DAG run's wall time (the API's start and end of the run) and the
command's, and each arm's span (first launch to last stop, from the task instances), so
the overlap can be seen. Target: `four` at most 1.5x `one`. Prints one JSON line.

    .venv/bin/python benchmarks/nodes_parallel.py [--requests 40] [--restarts 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks.` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchledger.cluster import commands as cluster  # noqa: E402
from benchledger.cluster.airflow_api import ApiClient  # noqa: E402
from benchledger.cluster.config import api_credentials  # noqa: E402
from benchmarks.warehouse_scale import code_version, machine  # noqa: E402

NODES = ["node-a", "node-b", "node-c", "node-d"]


def sweep_text(name: str, nodes: list[str], requests: int, restarts: int, step_ms: float,
               parallel: bool) -> str:
    arms = "".join(textwrap.dedent(f"""
        [[arms]]
        name = "on-{node}"
        server = "simulator"
        model = "sim-model"
        node = "{node}"
        [arms.simulator]
        step_ms = {step_ms}
        """) for node in nodes)
    return textwrap.dedent(f"""
        [sweep]
        name = "{name}"
        retries = 0
        nodes_in_parallel = {str(parallel).lower()}
        [defaults]
        requests = {requests}
        warmup = 1
        restarts = {restarts}
        max_tokens = 64
        clock_source = "http"
        clock_url = "{{base_url}}/clocks"
        [[workloads]]
        name = "code"
        """) + arms


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start))
                 .total_seconds(), 2)


def run_one(home: Path, work: Path, api: ApiClient, name: str, nodes: list[str],
            args: argparse.Namespace, parallel: bool = True) -> dict:
    sweep = work / f"{name}.toml"
    sweep.write_text(sweep_text(name, nodes, args.requests, args.restarts, args.step_ms,
                                parallel))
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "benchledger.cli", "run", str(sweep),
                           "--warehouse", str(work / f"{name}.duckdb"), "--cluster",
                           str(home)], capture_output=True, text=True, timeout=3600,
                          check=False)
    command_s = round(time.perf_counter() - started, 2)
    if done.returncode != 0:
        raise SystemExit(f"{name}: run failed\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    dag_id = f"benchledger_{name}"
    runs = api.request("GET", f"/api/v2/dags/{dag_id}/dagRuns",
                       params={"order_by": "-start_date", "limit": 1})["dag_runs"]
    run = runs[0]
    tis = api.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run['dag_run_id']}/"
                             "taskInstances", params={"limit": 1000})["task_instances"]
    spans: dict[str, list[str]] = {}
    for ti in tis:
        arm = ti["task_id"].split("__r")[0]
        if "__r" in ti["task_id"] and ti["start_date"] and ti["end_date"]:
            spans.setdefault(arm, []).extend([ti["start_date"], ti["end_date"]])
    return {"arms": len(nodes), "nodes_in_parallel": parallel, "command_seconds": command_s,
            "dag_run_seconds": _seconds(run["start_date"], run["end_date"]),
            "arm_spans": {arm: {"start": min(v), "end": max(v),
                                "seconds": _seconds(min(v), max(v))}
                          for arm, v in sorted(spans.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--step-ms", type=float, default=15.0)
    parser.add_argument("--home", type=Path, help="the cluster folder (default: temporary)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bl-nodes-") as tmp:
        home = args.home or Path(tmp) / "cluster"
        work = Path(tmp) / "work"
        work.mkdir()
        up_started = time.perf_counter()
        cluster.up(home, NODES, say=lambda line: None)
        up_s = round(time.perf_counter() - up_started, 2)
        try:
            api = ApiClient(cluster.Cluster.load(home).api_url, *api_credentials(home))
            one = run_one(home, work, api, "np-one", NODES[:1], args)
            four = run_one(home, work, api, "np-four", NODES, args)
            serial = run_one(home, work, api, "np-four-serial", NODES, args, parallel=False)
        finally:
            cluster.down(home)
    ratio = round(four["dag_run_seconds"] / one["dag_run_seconds"], 3)
    print(json.dumps({
        "benchmark": "nodes_parallel", "date": datetime.now(UTC).isoformat(timespec="seconds"),
        **code_version(), "machine": machine(), "requests": args.requests,
        "restarts": args.restarts, "step_ms": args.step_ms, "cluster_up_seconds": up_s,
        "one": one, "four": four, "four_serial": serial, "four_vs_one": ratio,
        "four_serial_vs_one": round(serial["dag_run_seconds"] / one["dag_run_seconds"], 3),
        "target_met": ratio <= 1.5}))


if __name__ == "__main__":
    main()
