"""One restart at a time on a node across sweeps (benchledger.node_lock): a second restart
waits for the first's teardown, a retried launch keeps its own lock, a holder whose
server is gone is taken over, a wait too long fails naming the holder, and outside a
deployment there is no lock. Two sweeps on one node of a real deployment:
tests/integration/test_cluster.py."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from benchledger import node_lock


@pytest.fixture
def deployment(tmp_path, monkeypatch):
    monkeypatch.setenv(node_lock.HOME_ENV, str(tmp_path))
    return tmp_path


def test_outside_a_deployment_there_is_no_lock(monkeypatch):
    monkeypatch.delenv(node_lock.HOME_ENV, raising=False)
    assert node_lock.acquire("gpu-1", "run/a/r0") is None
    assert node_lock.release("gpu-1", "run/a/r0") is False


def test_a_second_restart_waits_for_the_first_to_give_the_node_back(deployment):
    first = node_lock.acquire("gpu-1", "sweep-x/a/r0")
    assert first == deployment / "run" / "node-gpu-1.lock"
    assert node_lock.acquire("gpu-1", "sweep-x/a/r0") == first  # a retried launch keeps it
    assert node_lock.acquire("gpu-2", "sweep-y/b/r0") is not None  # another node is free
    got = []
    second = threading.Thread(target=lambda: got.append(
        (node_lock.acquire("gpu-1", "sweep-y/a/r0", poll_s=0.05), time.monotonic())))
    second.start()
    time.sleep(0.5)
    assert got == []  # still waiting
    assert node_lock.release("gpu-1", "sweep-y/a/r0") is False  # not the holder: no effect
    released = time.monotonic()
    assert node_lock.release("gpu-1", "sweep-x/a/r0") is True
    second.join(timeout=10)
    assert got and got[0][0] == first and got[0][1] >= released
    assert '"sweep-y/a/r0"' in first.read_text()


def test_a_holder_whose_server_is_gone_is_taken_over(deployment, caplog):
    lock = node_lock.acquire("gpu-1", "sweep-x/a/r0")
    server = subprocess.Popen([sys.executable, "-c", "pass"])
    server.wait()
    node_lock.note_server(lock, "sweep-x/a/r0", server.pid)
    with caplog.at_level("WARNING"):
        assert node_lock.acquire("gpu-1", "sweep-y/a/r0", wait_s=5, poll_s=0.05) == lock
    assert f"its server, pid {server.pid}, is gone" in caplog.text


def test_a_wait_too_long_fails_naming_the_holder(deployment):
    lock = node_lock.acquire("gpu-1", "sweep-x/a/r0")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        node_lock.note_server(lock, "sweep-x/a/r0", alive.pid)
        with pytest.raises(node_lock.NodeBusy, match=r"node gpu-1 is still measuring "
                                                     r"restart sweep-x/a/r0 \(since "):
            node_lock.acquire("gpu-1", "sweep-y/a/r0", wait_s=0.3, poll_s=0.05)
    finally:
        alive.kill()
        alive.wait()


def test_a_launch_that_died_is_taken_over_but_an_external_server_is_not(deployment,
                                                                        monkeypatch):
    lock = node_lock.acquire("gpu-1", "sweep-x/a/r0")
    monkeypatch.setattr(node_lock, "STALE_WITHOUT_SERVER_S", 0.2)
    time.sleep(0.3)  # no server recorded: its launch died before it started one
    assert node_lock.acquire("gpu-1", "sweep-y/a/r0", wait_s=5, poll_s=0.05) == lock
    node_lock.note_server(lock, "sweep-y/a/r0", None)  # an external server: no pid
    time.sleep(0.3)
    with pytest.raises(node_lock.NodeBusy, match="sweep-y/a/r0"):
        node_lock.acquire("gpu-1", "sweep-z/a/r0", wait_s=0.3, poll_s=0.05)
