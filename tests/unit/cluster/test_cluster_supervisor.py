"""The deployment's processes under supervisord (issue #25), with plain Python processes
standing in for Airflow's: one that is killed is started again and the start is logged;
one that keeps exiting is given up on, and `cluster status` says how it ended and the last
error line of its log; `cluster down` stops every process, what they started in their own
sessions and the servers their tasks left behind, and never a stranger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from benchledger.cli import main
from benchledger.cluster import commands as cluster
from benchledger.cluster import config as cluster_config
from benchledger.cluster import supervisor

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
# a process with a child in its own session, as Airflow's task processes are
PARENT = [sys.executable, "-c",
          "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
          "'import time; time.sleep(600)'], start_new_session=True); time.sleep(600)"]
FAILING = [sys.executable, "-c",
           "import sys; print('starting'); print('ERROR 403 Forbidden: the signature of "
           "the request has expired', flush=True); print('bye'); sys.exit(3)"]


def _until(check, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (found := check()):
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s}s: {check}")


@pytest.fixture
def deployment(tmp_path):
    for sub in ("logs", "run", "dags"):
        (tmp_path / sub).mkdir()
    programs = [supervisor.Program("scheduler", PARENT, True, 1),
                supervisor.Program("dag-processor", SLEEPER, True, 1),
                supervisor.Program("edge-worker-node-a", FAILING, True, 1, startretries=1)]
    supervisor.write_conf(tmp_path, programs)
    record = cluster._start_supervisord(tmp_path)
    state = cluster.Cluster(tmp_path, "http://127.0.0.1:9", ["node-a"], record)
    state.save()
    yield state
    if record.process():
        cluster.down(tmp_path, grace_s=5)


def _state(home: Path, name: str) -> str:
    return (supervisor.process_infos(home) or {}).get(name, {}).get("statename", "")


def test_a_killed_process_is_started_again_and_the_start_is_logged(deployment):
    home = deployment.home
    first = _until(lambda: deployment.pid_of("dag-processor"))
    os.kill(first, signal.SIGKILL)
    second = _until(lambda: (pid := deployment.pid_of("dag-processor")) not in (None, first)
                    and pid)
    assert second != first and psutil.pid_exists(second)
    log = (home / "logs" / supervisor.LOG_FILE).read_text()
    assert "exited: dag-processor (terminated by SIGKILL; not expected)" in log
    history = supervisor.history(home)["dag-processor"]
    assert history["starts"] == 2
    assert history["last_exit"] == "terminated by SIGKILL; not expected"


def test_one_that_keeps_exiting_is_given_up_and_status_says_why(deployment, capsys):
    home = deployment.home
    _until(lambda: _state(home, "edge-worker-node-a") == "FATAL")
    rows = {row["name"]: row for row in cluster.status(home)}
    worker = rows["edge-worker-node-a"]
    assert worker["state"] == "fatal" and "pid" not in worker
    assert worker["starts"] == 2  # the first start and its one retry
    assert worker["last_exit"] == "exit status 3; not expected"
    assert worker["last_error"] == ("ERROR 403 Forbidden: the signature of the request has "
                                    "expired")  # the last line that reads like an error
    assert rows["scheduler"]["state"] == "running" and rows["scheduler"]["pid"]
    assert main(["cluster", "status", "--home", str(home)]) == 1  # not all running
    out = capsys.readouterr().out
    assert "last exit: exit status 3; not expected" in out
    assert "last error: ERROR 403 Forbidden" in out


def test_down_stops_every_process_and_what_they_left_never_a_stranger(deployment):
    home = deployment.home
    scheduler = psutil.Process(_until(lambda: deployment.pid_of("scheduler")))
    child = _until(lambda: scheduler.children())[0]
    stranger = subprocess.Popen(SLEEPER)
    # a server a task started, orphaned when its task process ended: in no process tree
    orphan = subprocess.Popen(SLEEPER, env={**os.environ, cluster_config.HOME_ENV: str(home)},
                              start_new_session=True)
    try:
        lines = cluster.down(home, grace_s=5)
        assert f"scheduler (pid {scheduler.pid}): stopped" in lines
        assert any(line.startswith("supervisord (pid") for line in lines), lines
        # the orphan, and the child in its own session that the scheduler's group stop
        # did not reach, were found by the deployment's mark in their environment
        assert lines[-1].startswith("stopped 2 more process(es)"), lines
        assert str(orphan.pid) in lines[-1] and str(child.pid) in lines[-1], lines
        assert orphan.wait(timeout=5) is not None
        assert not scheduler.is_running() or scheduler.status() == psutil.STATUS_ZOMBIE
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
        assert stranger.poll() is None  # untouched
        assert cluster.deployment_processes(home) == []
        assert json.loads((home / "cluster.json").read_text())["supervisor"] is None
        assert main(["cluster", "status", "--home", str(home)]) == 1  # nothing running
        assert cluster.down(home) == ["supervisord: was not running"]
    finally:
        for proc in (stranger, orphan):
            proc.kill()
