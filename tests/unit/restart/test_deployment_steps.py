"""The steps of a deployment's other nodes (benchledger.restart.deployment), on real processes
without Airflow: each node's own manifest, a dead node found after a window and at its
teardown, the restart crashed naming the node, and leftovers of an interrupted run."""

from __future__ import annotations

import os
import signal
import socket
import time

import psutil

from benchledger.raw.layout import RunLayout, read_json, write_json
from benchledger.restart import deployment
from benchledger.restart.steps import stop_leftover_servers
from benchledger.sweep.spec import parse_sweep
from tests.sweeps import NO_CLOCK, command_arm, external_arm, sweep, toml

SWEEP = parse_sweep(toml(sweep(
    "steps",
    [command_arm("tp", "sleep 60", node="n1", address="127.0.0.1", processes=[
        {"node": "n2", "address": "127.0.0.1",
         "command": "sh -c 'exec sleep 61' {rank}-{nnodes}-{head_address}:{head_port}"},
        {"node": "n3", "address": "127.0.0.1", "command": "/nonexistent/engine --rank {rank}"}])],
    defaults=NO_CLOCK)))
HEAD = {"base_url": "http://127.0.0.1:9", "pid": None, "port": 9, "command": None,
        "command_template": None, "log_path": None, "mark": None}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_each_node_records_its_own_launch_and_a_failed_one_says_why(tmp_path):
    layout = RunLayout(tmp_path, "run-a")
    handle = deployment.launch_node(layout, SWEEP, "tp", 0, "n2", HEAD)
    try:
        assert handle is not None
        record = read_json(layout.node_manifest("tp", 0, "n2"))
        assert (record["node"], record["rank"], record["status"]) == ("n2", 1, "launched")
        assert record["host"] == socket.gethostname() and alive(record["pid"])
        # its command got its rank, the deployment's size and the head's address
        assert record["command"][-1] == "1-3-127.0.0.1:9"
        assert deployment.launch_node(layout, SWEEP, "tp", 0, "n3", HEAD) is None
        failed = read_json(layout.node_manifest("tp", 0, "n3"))
        assert failed["status"] == "failed" and "/nonexistent/engine" in failed["error"]
        assert deployment.launch_problems(layout, SWEEP, "tp", 0) == [
            f"node n3: {failed['error']}"]
        # nothing starts on a node whose head never launched
        assert deployment.launch_node(layout, SWEEP, "tp", 1, "n2", None) is None
        assert read_json(layout.node_manifest("tp", 1, "n2"))["error"] == (
            "not launched: the head's launch failed")
    finally:
        deployment.stop_node(layout, "tp", 0, "n2", handle)
    assert not alive(record["pid"])


def test_a_node_that_dies_is_found_and_crashes_the_restart_naming_it(tmp_path):
    layout = RunLayout(tmp_path, "run-b")
    write_json(layout.restart_manifest("tp", 0), {
        "restart_id": layout.restart_id("tp", 0), "status": "ok", "requested_node": "n1",
        "node": socket.gethostname(), "deployment": [{"node": "n1", "gpus": None}]})
    handle = deployment.launch_node(layout, SWEEP, "tp", 0, "n2", HEAD)
    assert handle is not None
    write_json(layout.node_manifest("tp", 0, "n3"), {"node": "n3", "status": "stopped"})
    assert deployment.node_gone(layout, SWEEP, "tp", 0) is None
    os.kill(handle["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while alive(handle["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    node, evidence = deployment.node_gone(layout, SWEEP, "tp", 0)
    assert node == "n2" and f"its process {handle['pid']} ended" in evidence
    stopped = deployment.stop_node(layout, "tp", 0, "n2", handle)
    assert (stopped["status"], stopped["ended_before_stop"]) == ("crashed", True)
    settled = deployment.settle_restart(layout, SWEEP, "tp", 0)
    assert (settled["status"], settled["crashed_node"]) == ("crashed", "n2")
    assert settled["error"].startswith("node n2: its process had ended before its teardown")
    spanned = {n["node"]: n for n in settled["deployment"]}
    assert list(spanned) == ["n1", "n2", "n3"]
    assert spanned["n2"]["ended_before_stop"] is True and spanned["n1"]["role"] == "head"


def test_a_node_process_left_by_an_interrupted_run_is_stopped_on_its_host_only(tmp_path):
    layout = RunLayout(tmp_path, "manual__interrupted")
    write_json(layout.run_manifest, {"run_id": layout.run_id, "sweep_name": "steps",
                                     "started_at": "2026-12-01T00:00:00+00:00"})
    handle = deployment.launch_node(layout, SWEEP, "tp", 0, "n2", HEAD)
    assert handle is not None
    elsewhere = layout.node_manifest("tp", 1, "n2")
    write_json(elsewhere, {"restart_id": "x/tp/r1", "node": "n2", "host": "another-host",
                           "pid": handle["pid"], "started_at": "2026-12-01T00:00:00+00:00"})
    done = stop_leftover_servers(tmp_path)
    assert done == [f"{layout.restart_id('tp', 0)} node n2: stopped by SIGTERM (signalled:15)"]
    assert not alive(handle["pid"])
    assert "interrupted run" in read_json(layout.node_manifest("tp", 0, "n2"))["stop_status"]
    assert "stopped_at" not in read_json(elsewhere)  # a pid on another host means nothing here


EXTERNAL = sweep("ext", [external_arm("big", "http://10.0.0.1:8000", model="m", node="n1",
                                     processes=[{"node": "n2"}])],
                 defaults={"clock_source": "dcgm"})


def test_an_external_deployment_starts_nothing_on_its_nodes(tmp_path):
    """Its nodes are named so that their GPUs are read; nothing of theirs is started,
    watched or waited for (tests/dags/test_dagbag.py: nor are there tasks for them)."""
    external = parse_sweep(toml(EXTERNAL))
    layout = RunLayout(tmp_path, "run-ext")
    assert deployment.launch_problems(layout, external, "big", 0) == []
    assert deployment.node_gone(layout, external, "big", 0) is None
    assert deployment.base_urls(layout, external, "big", 0, "http://10.0.0.1:8000") == {
        "n1": "http://10.0.0.1:8000", "n2": None}
