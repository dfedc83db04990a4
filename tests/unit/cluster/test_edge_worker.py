"""The deployment's Edge workers start through benchledger.cluster.edge_worker, which loads
what the tasks import before Airflow's `edge worker` forks its first task."""

from __future__ import annotations

import importlib.util
import sys

from benchledger.cluster import commands, edge_worker


def test_every_preloaded_module_exists():
    # a renamed module would make every worker exit at its start
    missing = [name for name in edge_worker.PRELOADED if importlib.util.find_spec(name) is None]
    assert missing == []


def test_the_deployment_starts_its_workers_through_it(tmp_path):
    programs = commands._programs(tmp_path, "http://127.0.0.1:8080", ["node-a", "node-b"])
    workers = [p for p in programs if p.name.startswith("edge-worker-")]
    assert len(workers) == 2
    for program in workers:
        assert program.command[:3] == [sys.executable, "-m", "benchledger.cluster.edge_worker"]
        assert "--edge-hostname" in program.command and "--queues" in program.command
    heads = [p for p in programs if not p.name.startswith("edge-worker-")]
    assert all(p.command[:3] == [sys.executable, "-m", "airflow"] for p in heads)
