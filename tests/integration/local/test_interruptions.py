"""Hard kills, a second run of the same sweep, and a run that fails: `benchledger run` in a
child process, as a user types it, on the built-in simulator.

- kill -9 of the runner (python -m benchledger.local.runner): the CLI notices, stops the servers
  the run started, loads the raw files written so far, and says so; exit 1.
- a second `benchledger run` of a sweep that is running is refused at once, naming the
  holder.
- kill -9 of `benchledger run` itself: the runner does not finish headless; it stops its
  servers and exits, and the next run finds the raw files that were never loaded.
- a run whose restart never got ready and whose load could not get the warehouse: the
  terminal shows each cause, never "published", and exit 1.

Every check of "no server left" reads the pids from the restart manifests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchledger.local.run import load_unloaded_runs
from benchledger.warehouse.db import connect
from tests.conftest import REPO
from tests.sweeps import NO_CLOCK, defaults, simulator_arm, sweep, write_sweep

pytestmark = pytest.mark.integration

# Slow enough that a window is still measuring when the test kills something: one request
# is 200 tokens at 50 ms a step, and there are 40 of them.
SLOW_SWEEP = sweep("slow", [simulator_arm("sim", {"step_ms": 50.0})],
                   defaults=defaults(requests=40, max_tokens=200, clock=NO_CLOCK))
READY_BOUND_S = 240  # Airflow's start and a first restart on a busy 2-core machine


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "benchledger.cli", *args]


def start_run(workdir: Path, name: str) -> subprocess.Popen:
    """`benchledger run` in its own session; output to files (a server could inherit a
    pipe)."""
    out = open(workdir / f"{name}.out", "wb")  # noqa: SIM115 (held by the child)
    return subprocess.Popen(cli("run", str(workdir / "slow.toml"), "--warehouse",
                                str(workdir / "wh.duckdb"), "--data-dir", str(workdir / "data")),
                            cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def output(workdir: Path, name: str) -> str:
    return (workdir / f"{name}.out").read_text(errors="replace")


def restart_manifests(data: Path) -> list[dict]:
    found = []
    for path in sorted(data.glob("raw/*/*/r*/restart.json")):
        try:
            found.append({**json.loads(path.read_text()), "path": path})
        except ValueError:
            continue  # being replaced right now
    return found


def wait_until_measuring(data: Path, run: subprocess.Popen, known: set[str]) -> dict:
    """The manifest of a restart (not in `known`) whose server is up and measuring."""
    deadline = time.monotonic() + READY_BOUND_S
    while time.monotonic() < deadline:
        assert run.poll() is None, f"benchledger run ended early ({run.returncode})"
        for manifest in restart_manifests(data):
            if str(manifest["path"]) not in known and manifest.get("ready_at") and alive(
                    manifest.get("pid") or 0):
                time.sleep(1.0)  # into the measured window
                return manifest
        time.sleep(0.2)
    raise AssertionError("no restart became ready in time")


def alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def children(pid: int) -> list[int]:
    found = []
    for path in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(p) for p in path.read_text().split()]
    return found


def runner_of(cli_pid: int) -> int:
    """The CLI's runner: a child, or a child of the CLI's fork server (a warm start,
    benchledger/local/warm.py, shows the runner's command line as `python -m` would)."""
    (runner,) = [p for p in descendants(cli_pid)
                 if b"benchledger.local.runner" in Path(f"/proc/{p}/cmdline").read_bytes()]
    return runner


def descendants(pid: int) -> list[int]:
    found, todo = [], children(pid)
    while todo:
        found.append(todo.pop())
        todo += children(found[-1])
    return found


def wait_gone(pids: list[int], bound_s: float) -> list[int]:
    deadline = time.monotonic() + bound_s
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def server_pids(data: Path) -> list[int]:
    return [m["pid"] for m in restart_manifests(data) if m.get("pid")]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("interruptions")
    write_sweep(workdir / "slow.toml", SLOW_SWEEP)
    yield workdir
    for pid in server_pids(workdir / "data"):  # whatever a failed test left behind
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def runner_killed(workdir):
    """Run 1 is measuring; a second run of the sweep is tried; then run 1's runner gets
    SIGKILL. Returns what the test needs to look at."""
    data = workdir / "data"
    first = start_run(workdir, "first")
    try:
        server = wait_until_measuring(data, first, known=set())
        second = subprocess.run(cli("run", str(workdir / "slow.toml"), "--warehouse",
                                    str(workdir / "wh.duckdb"), "--data-dir", str(data)),
                                cwd=REPO, capture_output=True, text=True, timeout=120)
        # refused at once: while run 1 still measures (its window lasts minutes), not
        # after waiting for it to end
        first_still_running = first.poll() is None
        runner = runner_of(first.pid)
        os.kill(runner, signal.SIGKILL)
        status = first.wait(timeout=120)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    return {"first": first, "status": status, "server": server, "runner": runner,
            "second": second, "first_still_running": first_still_running,
            "output": output(workdir, "first")}


def test_a_second_run_of_the_same_sweep_is_refused_at_once(runner_killed):
    second = runner_killed["second"]
    assert second.returncode == 2, second.stderr
    assert runner_killed["first_still_running"]
    assert (f"benchledger run: sweep 'slow' is already running on "
            f"{Path(runner_killed['server']['path']).parents[4]} "
            f"(PID {runner_killed['first'].pid}: ") in second.stderr
    assert "two runs of one sweep never measure at once" in second.stderr
    assert "running sweep" not in second.stdout  # refused before Airflow started


def test_a_killed_runner_leaves_no_server_and_the_cli_says_so(runner_killed, workdir):
    text = runner_killed["output"]
    assert runner_killed["status"] == 1, text[-3000:]
    assert "died (killed by SIGKILL) before the run finished" in text
    assert "runner died: stopped a leftover server: " in text
    assert "nothing was published" in text
    assert "published " not in text.replace("nothing was published", "")
    assert not alive(runner_killed["runner"])
    assert wait_gone(server_pids(workdir / "data"), 5) == []
    server = next(m for m in restart_manifests(workdir / "data")
                  if m["path"] == runner_killed["server"]["path"])
    assert "stopped after an interrupted run" in server["stop_status"]


def test_the_dead_runners_raw_files_are_loaded_once(runner_killed, workdir):
    text = runner_killed["output"]
    run_id = json.loads((Path(runner_killed["server"]["path"]).parents[2] / "run.json")
                        .read_text())["run_id"]
    assert f"loaded the raw files of run {run_id}, which was interrupted before its load" in text
    with connect(workdir / "wh.duckdb", read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs WHERE run_id = ?",
                           [run_id]).fetchall() == [(1,)]
        assert con.execute("SELECT count(*) FROM entries WHERE run_id = ?",
                           [run_id]).fetchall() == [(0,)]  # never derived, never published


def test_a_killed_cli_takes_its_runner_and_servers_with_it(runner_killed, workdir):
    data = workdir / "data"
    known = {str(m["path"]) for m in restart_manifests(data)}
    run = start_run(workdir, "third")
    try:
        server = wait_until_measuring(data, run, known)
        runner = runner_of(run.pid)
        os.kill(run.pid, signal.SIGKILL)  # the CLI only: its runner is not signalled
        run.wait(timeout=30)
        left = wait_gone([runner, server["pid"]], 30)
    finally:
        if alive(server["pid"]):
            os.killpg(server["pid"], signal.SIGKILL)
    assert left == [], "the runner went on headless or left its server running"
    assert wait_gone(server_pids(data), 5) == []
    stopped = json.loads(Path(server["path"]).read_text())
    assert "stopped after an interrupted run" in stopped["stop_status"]
    log = (data / "logs" / "slow.log").read_text(errors="replace")
    assert "is gone: stopping the servers this run started" in log

    # the next `benchledger run` of the sweep finds and loads these raw files, once
    run_id = json.loads((Path(server["path"]).parents[2] / "run.json").read_text())["run_id"]
    (line,) = load_unloaded_runs(data, workdir / "wh.duckdb", "slow")
    assert line.startswith(f"loaded the raw files of run {run_id}, which was interrupted")
    assert load_unloaded_runs(data, workdir / "wh.duckdb", "slow") == []


# --- a run that fails: the terminal says why, and never "published" -----------------------

FAILING_SWEEP = sweep("late", [simulator_arm("late", {"startup_delay_s": 120})],
                      defaults={"requests": 5, "ready_timeout_s": 3, **NO_CLOCK})
# Holds the warehouse read-only (DuckDB's lock keeps writers out; readers share it) until
# killed.
READER = """
import sys, time
import duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print("held", flush=True)
time.sleep(600)
"""


def test_a_failed_run_shows_each_cause_and_never_says_published(tmp_path):
    warehouse = tmp_path / "wh.duckdb"
    connect(warehouse).close()
    write_sweep(tmp_path / "late.toml", FAILING_SWEEP)
    reader = subprocess.Popen([sys.executable, "-c", READER, str(warehouse)], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline() == "held\n"
        done = subprocess.run(
            cli("run", str(tmp_path / "late.toml"), "--warehouse", str(warehouse)),
            cwd=REPO, capture_output=True, text=True, timeout=600,
            env={**os.environ, "BENCHLEDGER_LOCK_TIMEOUT_S": "3"})
    finally:
        reader.kill()
        reader.wait()
    out, err = done.stdout, done.stderr
    assert done.returncode == 1, out[-2000:] + err[-2000:]
    assert "Traceback" not in out + err
    # the first cause, in the terminal and not only in the task log
    assert "first failure: late__r0.wait_ready: late r0: " in err
    assert "not healthy after 3 s" in err
    assert (f"then failed: load: WarehouseBusy: the warehouse {warehouse} is locked by PID "
            f"{reader.pid} (") in err
    last = out.strip().splitlines()[-2:]
    assert last[0].startswith("not published: run manual__")
    assert last[0].endswith("is not in the warehouse (its load did not finish)")
    assert last[1].startswith("DAG run manual__") and ": failed (first failure: " in last[1]
    assert "late__r0.wait_ready" in last[1]
    assert not any(line.startswith("published") for line in out.splitlines())
    assert "nothing to show" in out  # no other run's numbers in its place


def test_the_readme_simulator_command_serves(tmp_path):
    """`benchledger simulator --port PORT --speculative`, exactly as the README has it."""
    from benchledger.server.lifecycle import free_port

    port = free_port()
    server = subprocess.Popen([str(Path(sys.executable).parent / "benchledger"), "simulator",
                               "--port", str(port), "--speculative"], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the simulator never answered /health"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
