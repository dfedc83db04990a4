"""A deployment's supervisord is known by its pid and when it started (cluster/commands.py
ClusterProcess): a stepped wall clock must not make a running one look exited (ci63: two
running deployments taken for exited, `up` and `join` failing), nor a reused pid look
like it."""

from __future__ import annotations

import dataclasses
import subprocess

import psutil
import pytest

from benchledger.cluster import commands


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def _record(proc: subprocess.Popen, **changes) -> commands.ClusterProcess:
    started = psutil.Process(proc.pid)
    record = commands.ClusterProcess(
        name="supervisord", pid=proc.pid, create_time=started.create_time(),
        command=["sleep", "60"], log="x", after_boot_s=commands._after_boot(started))
    return dataclasses.replace(record, **changes)


def test_a_running_process_is_found_after_the_clock_is_stepped(sleeper, monkeypatch):
    record = commands.ClusterProcess(**dataclasses.asdict(_record(sleeper)))  # as saved
    assert record.process() is not None
    booted = psutil.boot_time()
    # the clock stepped 1.5 s forward: /proc/stat's btime moves with it (psutil reads it
    # on every call, through its platform module)
    monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: booted + 1.5)
    assert psutil.Process(sleeper.pid).create_time() - record.create_time == \
        pytest.approx(1.5)
    assert record.process() is not None and record.process().pid == sleeper.pid
    # a record written before after_boot_s existed compares wall-clock times: it is what
    # failed, and still would (kept only so that older state files load)
    legacy = dataclasses.replace(record, after_boot_s=None)
    assert legacy.process() is None
    monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: booted)
    assert legacy.process() is not None


def test_a_pid_of_another_start_or_an_ended_process_is_not_it(sleeper):
    record = _record(sleeper)
    assert dataclasses.replace(record, after_boot_s=record.after_boot_s - 5).process() is None
    sleeper.kill()
    sleeper.wait()
    assert record.process() is None
