"""Server lifecycle: the whole process group is stopped; early exits are reported."""

from __future__ import annotations

import time

import pytest

from benchledger import lifecycle
from benchledger.sweep import Arm


def command_arm(command: str) -> Arm:
    return Arm(name="x", server="command", command=command, model="m")


def alive(pid: int) -> bool:
    return lifecycle.process_state(pid) == "running"


def test_stop_takes_the_whole_process_group(tmp_path):
    child_file = tmp_path / "child.pid"
    arm = command_arm(f"sh -c 'sleep 60 & echo $! > {child_file}; wait'")
    handle = lifecycle.launch(arm, tmp_path / "server.log", seed=1)
    deadline = time.monotonic() + 5
    while not child_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(child_file.read_text())
    assert alive(handle.pid) and alive(child)
    outcome = lifecycle.stop(handle, grace_s=5)
    assert outcome.how == "sigterm" and str(outcome).startswith("stopped by SIGTERM")
    time.sleep(0.2)
    assert not alive(child)  # the server's own child went with it


def test_wait_ready_reports_a_server_that_exits(tmp_path):
    handle = lifecycle.launch(command_arm("sh -c 'echo boom; exit 3'"),
                              tmp_path / "server.log", seed=1)
    with pytest.raises(lifecycle.ServerNotReady, match="exited:3"):
        lifecycle.wait_ready(handle, "/health", timeout_s=10)
    assert "boom" in (tmp_path / "server.log").read_text()
    outcome = lifecycle.stop(handle)
    assert outcome.ended_before_stop and str(outcome).startswith("already ended before stop")


def test_wait_ready_times_out_with_the_url(tmp_path):
    handle = lifecycle.launch(command_arm("sleep 30"), tmp_path / "server.log", seed=1)
    try:
        with pytest.raises(lifecycle.ServerNotReady, match=r"/health not healthy after 0.5 s"):
            lifecycle.wait_ready(handle, "/health", timeout_s=0.5)
    finally:
        lifecycle.stop(handle)


def test_effective_config_hash_ignores_per_instance_values():
    arm = Arm(name="a", server="simulator", model="sim-model")
    template = lifecycle.command_template(arm)
    assert "{port}" in template and "{seed}" in template
    one = {"command": template, "models": lifecycle._strip_volatile(
        {"data": [{"id": "sim-model", "created": 1}]})}
    two = {"command": template, "models": lifecycle._strip_volatile(
        {"data": [{"id": "sim-model", "created": 2}]})}
    assert lifecycle.config_sha256(one) == lifecycle.config_sha256(two)
    # ... and only those: another model behind the same command is another config
    other = {"command": template, "models": lifecycle._strip_volatile(
        {"data": [{"id": "other-model", "created": 1}]})}
    assert lifecycle.config_sha256(other) != lifecycle.config_sha256(one)


def test_servers_left_by_an_interrupted_run_are_stopped(tmp_path):
    from benchledger.restart import RunLayout, read_json, stop_leftover_servers, write_json

    layout = RunLayout(tmp_path, "manual__interrupted")
    handle = lifecycle.launch(command_arm("sleep 60"), tmp_path / "server.log", seed=1)
    running = layout.restart_manifest("a", 0)
    write_json(running, {"restart_id": "x/a/r0", "pid": handle.pid, "status": "ok"})
    finished = layout.restart_manifest("a", 1)
    write_json(finished, {"restart_id": "x/a/r1", "pid": 1, "stopped_at": "earlier"})
    assert alive(handle.pid)
    done = stop_leftover_servers(tmp_path)
    assert len(done) == 1 and done[0].startswith("x/a/r0: stopped by SIGTERM")
    assert not alive(handle.pid)
    assert "interrupted run" in read_json(running)["stop_status"]
    assert read_json(finished)["stopped_at"] == "earlier"  # untouched
