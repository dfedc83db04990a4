"""While a server starts, `benchledger run` shows the wait: which probe, its last answer,
and the time waited of ready_timeout_s, in plain lines when its output is not a terminal.

One arm runs the simulator as a `command` server that answers 503 on every readiness path
for its first STARTUP_DELAY_S seconds (--startup-delay-s, a loading model). `run` is a
child process writing to files, as test_fault_suite's run_cli runs it; progress comes
every INTERVAL_S seconds, so the wait must be said several times before the server is
ready, and before any line of the window's own progress.
"""

from __future__ import annotations

import re
import shlex
import sys
import uuid

import pytest

from benchledger.raw.layout import RunLayout, read_json
from tests.integration.local.test_fault_suite import run_cli

pytestmark = pytest.mark.integration

STARTUP_DELAY_S = 12
READY_TIMEOUT_S = 120
INTERVAL_S = 2  # BENCHLEDGER_PROGRESS_S for the run
ARM = "slow"
# progress: RUN/slow/r0 starting: waiting for URL, last answer ANSWER (E s of T s)
WAITING = re.compile(rf"^progress: \S+/{ARM}/r0 starting: waiting for "
                     r"(?P<probe>http://127\.0\.0\.1:\d+/health), last answer "
                     rf"(?P<answer>.+) \((?P<elapsed>\d+) s of {READY_TIMEOUT_S} s\)$")
READY = re.compile(rf"^progress: \S+/{ARM}/r0 ready: http://127\.0\.0\.1:\d+/health "
                   rf"answered HTTP 200 after (?P<elapsed>\d+) s of {READY_TIMEOUT_S} s$")


def slow_simulator() -> str:
    argv = [sys.executable, "-m", "benchledger.simulator", "--host", "127.0.0.1",
            "--model", "fault-model", "--startup-delay-s", str(STARTUP_DELAY_S),
            "--seed", "1", "--port", "{port}"]
    return " ".join(part if part == "{port}" else shlex.quote(part) for part in argv)


def test_the_readiness_wait_is_said_while_a_slow_server_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHLEDGER_PROGRESS_S", str(INTERVAL_S))
    tag = uuid.uuid4().hex
    # run_cli's sweep has an arm per fault (none here) and "external" arms whose keys
    # replace its defaults: this one is a `command` server, started and stopped by the run.
    arm = {"server": "command", "command": slow_simulator(),
           "ready_timeout_s": READY_TIMEOUT_S, "requests": 5}
    run = run_cli(tmp_path, "slowstart", (), tag, external={ARM: arm})
    assert run.exit_status == 0, run.output
    lines = run.output.splitlines()
    waits = [(i, m) for i, line in enumerate(lines) if (m := WAITING.match(line))]
    ready = [(i, m) for i, line in enumerate(lines) if (m := READY.match(line))]
    windows = [i for i, line in enumerate(lines) if line.startswith("progress: ") and
               f"/{ARM}/r0/code-c1 " in line]
    assert len(waits) >= 4, run.output  # several, every INTERVAL_S during the 12 s
    assert ready and windows, run.output
    assert max(i for i, _ in waits) < ready[0][0] < min(windows), run.output
    # The simulator answers 503 while it loads (before it listens, a connection error);
    # the probe and the time are named.
    answers = {m["answer"] for _, m in waits}
    assert "HTTP 503" in answers, run.output
    assert all(a == "HTTP 503" or a.startswith("ConnectError: ") for a in answers), answers
    elapsed = [int(m["elapsed"]) for _, m in waits]
    assert elapsed == sorted(elapsed) and elapsed[-1] >= STARTUP_DELAY_S - 2 * INTERVAL_S
    assert int(ready[0][1]["elapsed"]) >= STARTUP_DELAY_S - 1
    # What the run showed is what the restart recorded: the wait's file ends ready.
    layout = RunLayout(run.data_dir, run.run_id)
    last = read_json(layout.readiness_progress(ARM, 0))
    assert last["kind"] == "readiness" and last["phase"] == "ready", last
    assert read_json(layout.restart_manifest(ARM, 0))["ready_after_s"] >= STARTUP_DELAY_S - 1
