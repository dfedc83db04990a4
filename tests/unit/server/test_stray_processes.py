"""A teardown stops every process the server started, wherever it moved (issue #22, item
4): a daemon that called setsid, a double fork reparented to init, a child that cleared
its environment, and what a server that ended already left running; each one it had to
stop on its own is named in the outcome (restart.json's stray_processes)."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from benchledger.raw.layout import RunLayout, read_json, write_json
from benchledger.restart.steps import run_problems, stop_leftover_servers, stop_restart
from benchledger.server import lifecycle
from benchledger.server.processes import MARK_ENV
from benchledger.sweep.spec import CommandArm, parse_sweep
from tests.conftest import pids_tagged
from tests.sweeps import command_arm, sweep, toml

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
SLEEPER = "import time; time.sleep(120)"


def wait_until(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture
def tag():
    tag = f"stray-{uuid.uuid4().hex}"
    yield tag
    for pid in pids_tagged(tag):  # never leave one behind, whatever the test found
        os.kill(pid, signal.SIGKILL)


def daemon(tag: str, how: str) -> str:
    """A shell line that leaves a sleeper with `tag` in its argv: in its own session
    (setsid), double forked to init as well, or with an empty environment."""
    sleeper = f"{shlex.quote(sys.executable)} -c {shlex.quote(SLEEPER)} {tag}"
    return {"setsid": f"setsid {sleeper} &",
            "double-fork": f"(setsid {sleeper} &);",
            "env-cleared": f"setsid env -i {sleeper} &"}[how]


def server_arm(tag: str, how: str) -> CommandArm:
    script = f"{daemon(tag, how)} exec sleep 120"
    return CommandArm(name="a", server="command", model="m", command=f"sh -c {shlex.quote(script)}")


@pytest.mark.parametrize("how", ["setsid", "double-fork", "env-cleared"])
def test_a_process_that_left_the_group_is_stopped_and_named(tmp_path, tag, how):
    handle = lifecycle.launch(server_arm(tag, how), tmp_path / "server.log", seed=1)
    assert wait_until(lambda: len(pids_tagged(tag)) == 1), "the daemon did not start"
    stray, = pids_tagged(tag)
    assert os.getsid(stray) != handle.pid  # out of reach of the group's signal
    outcome = lifecycle.stop(handle, grace_s=5)
    assert wait_until(lambda: not pids_tagged(tag), 3), f"{how}: the daemon survived the teardown"
    assert outcome.how == "sigterm"
    record, = outcome.strays
    assert record["pid"] == stray and tag in record["command"]
    assert record["why"] == "had left the server's process group"
    assert record["signal"] == "SIGTERM" and record["alive"] is False
    assert f"pid {stray}" in str(outcome) and tag in str(outcome)


def test_a_stray_that_takes_a_while_to_end_is_waited_for_after_the_server_ended(tmp_path,
                                                                              tag):
    """A child that cleared its environment is found through its parent, the server, only
    while the server lives; it ends a second after its SIGTERM. The stop waits for it (it
    once stopped looking when the server ended, and recorded the child alive: seen under
    load in CI), and names it ended by SIGTERM."""
    slow = ("import signal, sys, time; "
            "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1), sys.exit(0))); "
            "time.sleep(120)")
    sleeper = f"{shlex.quote(sys.executable)} -c {shlex.quote(slow)} {tag}"
    script = f"setsid env -i {sleeper} & exec sleep 120"
    arm = CommandArm(name="a", server="command", model="m", command=f"sh -c {shlex.quote(script)}")
    handle = lifecycle.launch(arm, tmp_path / "server.log", seed=1)
    assert wait_until(lambda: len(pids_tagged(tag)) == 1), "the daemon did not start"
    time.sleep(0.5)  # its handler installed
    stray, = pids_tagged(tag)
    outcome = lifecycle.stop(handle, grace_s=5)
    record, = outcome.strays
    assert record["pid"] == stray
    assert record["signal"] == "SIGTERM" and record["alive"] is False, record
    assert not pids_tagged(tag)


def test_a_server_without_strays_stops_as_before(tmp_path):
    handle = lifecycle.launch(CommandArm(name="a", server="command", model="m", command="sleep 60"),
                              tmp_path / "server.log", seed=1)
    outcome = lifecycle.stop(handle, grace_s=5)
    assert outcome.how == "sigterm" and outcome.strays == ()
    assert str(outcome).startswith("stopped by SIGTERM")


def test_what_a_crashed_server_left_running_is_stopped(tmp_path, tag):
    handle = lifecycle.launch(server_arm(tag, "double-fork"), tmp_path / "server.log", seed=1)
    assert wait_until(lambda: len(pids_tagged(tag)) == 1)
    os.kill(handle.pid, signal.SIGKILL)  # the server dies; its daemon runs on
    assert wait_until(lambda: lifecycle.process_state(handle.pid) != "running")
    outcome = lifecycle.stop(handle, grace_s=5)
    assert outcome.ended_before_stop
    assert wait_until(lambda: not pids_tagged(tag), 3)
    record, = outcome.strays
    assert record["why"] == "outlived the server, which had ended before its stop"


def test_a_stray_that_ignores_sigterm_is_killed(tmp_path, tag):
    stubborn = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "time.sleep(120)")
    sleeper = f"{shlex.quote(sys.executable)} -c {shlex.quote(stubborn)} {tag}"
    arm = CommandArm(name="a", server="command", model="m",
              command=f"sh -c {shlex.quote(f'(setsid {sleeper} &) ; exec sleep 120')}")
    handle = lifecycle.launch(arm, tmp_path / "server.log", seed=1)
    assert wait_until(lambda: len(pids_tagged(tag)) == 1)
    time.sleep(0.3)  # its handler is in place
    outcome = lifecycle.stop(handle, grace_s=1)
    assert wait_until(lambda: not pids_tagged(tag), 3)
    record, = outcome.strays
    assert record["signal"] == "SIGKILL" and record["alive"] is False


def test_leftovers_of_an_interrupted_run_are_found_by_their_mark(tmp_path, tag):
    """After kill -9 of the runner, the CLI stops what the manifests recorded: the
    server's daemon is found by the mark restart.json names, even with the server gone."""
    layout = RunLayout(tmp_path, "manual__interrupted")
    handle = lifecycle.launch(server_arm(tag, "double-fork"), tmp_path / "server.log", seed=1)
    assert wait_until(lambda: len(pids_tagged(tag)) == 1)
    manifest = layout.restart_manifest("a", 0)
    write_json(manifest, {"restart_id": "x/a/r0", "pid": handle.pid, "status": "ok",
                          "server_mark": handle.mark})
    done = stop_leftover_servers(tmp_path)
    assert wait_until(lambda: not pids_tagged(tag), 3)
    assert len(done) == 1 and tag in done[0]
    record, = read_json(manifest)["stray_processes"]
    assert tag in record["command"]


def test_the_mark_is_in_the_servers_environment_only(tmp_path):
    out = tmp_path / "env.txt"
    arm = CommandArm(name="a", server="command", model="m",
              command=f"sh -c {shlex.quote(f'echo ${MARK_ENV} > {out}; exec sleep 60')}")
    handle = lifecycle.launch(arm, tmp_path / "server.log", seed=1)
    try:
        assert wait_until(lambda: out.exists() and out.read_text().strip())
    finally:
        lifecycle.stop(handle, grace_s=5)
    assert out.read_text().strip() == handle.mark and MARK_ENV not in os.environ


SWEEP = sweep("strays", [command_arm("a", "sleep 60")])


def test_the_teardown_records_the_strays_and_the_run_names_them(tmp_path, tag):
    layout = RunLayout(tmp_path, "manual__strays")
    handle = lifecycle.launch(server_arm(tag, "setsid"), tmp_path / "server.log", seed=1)
    assert wait_until(lambda: len(pids_tagged(tag)) == 1)
    write_json(layout.restart_manifest("a", 0),
               {"restart_id": "x/a/r0", "pid": handle.pid, "status": "ok",
                "server_mark": handle.mark})
    manifest = stop_restart(layout, "a", 0, handle.to_dict())
    assert manifest["status"] == "ok"  # its windows still count
    record, = manifest["stray_processes"]
    assert tag in record["command"] and tag in manifest["stop_status"]
    problem, = run_problems(layout, parse_sweep(toml(SWEEP)))[:1]
    assert problem.startswith("a r0: its teardown had to stop 1 process(es)") and tag in problem
