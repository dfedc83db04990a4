"""An object store that goes away in the middle of a window (issue #39 item 6): the server
under test is stopped all the same.

`benchledger run --data-dir s3://...` (the embedded Airflow run), one simulator arm whose
window lasts tens of seconds; the test kills the store (moto's server, tests/s3_server.py)
once the window has started. The measuring task cannot push its window and fails; the
teardown then ran into the same store: it pulled the restart's files before it stopped
anything, failed there, and the server outlived the run (parent 1, still serving a minute
later; on a GPU node it holds the GPU for the next benchmark). Now a teardown that holds
the record of what it stops stops it first, records the stop in its local copy, and only
then fails on the store, naming both.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.s3_server import s3_server
from tests.sweeps import cluster_sweep, write_sweep

pytestmark = pytest.mark.integration

CLI_TIMEOUT_S = 600
REQUESTS, STEP_MS = 40, 20.0  # 40 answers of 24 tokens at 20 ms a step: about 20 s


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_for(what, timeout_s: float, run: subprocess.Popen):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        if run.poll() is not None:
            return None
        time.sleep(0.2)
    return None


def test_the_server_is_stopped_when_the_store_is_lost_mid_window(tmp_path):
    copy = tmp_path / "copy"  # this node's local copy of the store's folder
    sweep = tmp_path / "lost.toml"
    write_sweep(sweep, cluster_sweep("store-lost", [("a", "local")], requests=REQUESTS,
                                     step_ms=STEP_MS, restarts=1, sweep_keys={"retries": 0}))
    out, err = tmp_path / "cli.out", tmp_path / "cli.err"
    pid = None
    with s3_server() as server:
        env = {**os.environ, **server.env, "BENCHLEDGER_LOCAL_RAW_DIR": str(copy)}
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            run = subprocess.Popen(
                [sys.executable, "-m", "benchledger.cli", "run", str(sweep), "--warehouse",
                 str(tmp_path / "wh.duckdb"), "--data-dir", f"s3://{server.bucket}/lost"],
                env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
        try:
            started = _wait_for(lambda: next(copy.rglob("*.started"), None), 300, run)
            assert started, f"no window started: {out.read_text()[-2000:]}" \
                            f"{err.read_text()[-2000:]}"
            manifest = started.parent / "restart.json"
            pid = json.loads(manifest.read_text())["pid"]
            assert _alive(pid)
            server.kill()  # the store is out of reach from here on, mid-window
            run.wait(timeout=CLI_TIMEOUT_S)
            output = out.read_text(errors="replace") + err.read_text(errors="replace")
            assert run.returncode != 0, output[-3000:]
            # the server under test did not outlive the run
            assert not _alive(pid), f"the server {pid} is still running:\n{output[-3000:]}"
            stopped = json.loads(manifest.read_text())
            assert stopped.get("stopped_at") and stopped["stop_status"].startswith(
                "stopped by SIGTERM"), stopped.get("stop_status")
            # the storage failure is reported, after the stop, naming both
            assert "a r0: stopped, but its record could not be stored" in output, \
                output[-4000:]
        finally:
            if run.poll() is None:
                run.kill()
            if pid is not None and _alive(pid):  # the defect's leftover: never left behind
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
