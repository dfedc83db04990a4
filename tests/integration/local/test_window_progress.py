"""Progress of long windows: `benchledger run` (output not a terminal: plain lines) on a
slowish simulator window of a few seconds, with BENCHLEDGER_PROGRESS_S=0.5 so the test is
quick. The terminal and the task log both show `progress:` lines while the window runs;
the window's progress file ends marked done and never reaches the warehouse."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import duckdb
import pytest

from tests.conftest import REPO
from tests.sweeps import NO_CLOCK, defaults, simulator_arm, sweep, write_sweep

pytestmark = pytest.mark.integration

# 8 requests, 2 at a time, each 40 tokens at 50 ms a step: about 8 s of measured window.
SLOW_WINDOW = sweep("progress", [simulator_arm("sim", {"step_ms": 50.0})],
                    defaults=defaults(requests=8, restarts=1, max_tokens=40, clock=NO_CLOCK,
                                      concurrency=[2]))
LINE = re.compile(r"^progress: (?P<window>\S+) (?P<phase>warm-up|measuring|done): "
                  r"(?P<finished>\d+)/(?P<submitted>\d+) finished \(of (?P<of>\d+)\), "
                  r"(?P<failed>\d+) failed, (?P<in_flight>\d+) in flight, "
                  r"(?P<unresolved>\d+) unresolved, (?P<elapsed>[\d.]+) s, "
                  r"(?P<rate>-|\d+) tok/s delivered, drain (?P<drain>.+)$")
# The wait for the server to be ready comes first (test_readiness_progress checks it).
READINESS = re.compile(r"^progress: \S+/r\d+ (starting|ready|not ready): ")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("progress")
    write_sweep(workdir / "slow.toml", SLOW_WINDOW)
    env = {**os.environ, "BENCHLEDGER_PROGRESS_S": "0.5"}
    done = subprocess.run(
        [sys.executable, "-m", "benchledger.cli", "run", str(workdir / "slow.toml"),
         "--warehouse", str(workdir / "wh.duckdb"), "--data-dir", str(workdir / "data")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout
    return {"output": done.stdout, "workdir": workdir,
            "task_log": (workdir / "data" / "logs" / "progress.log").read_text()}


def progress_lines(text: str) -> list[dict]:
    found = []
    for line in text.splitlines():
        start = line.find("progress: ")
        if start >= 0 and not READINESS.match(line[start:]):
            match = LINE.match(line[start:])
            assert match, f"a progress line not of the documented form: {line!r}"
            found.append(match.groupdict())
    return found


def test_the_terminal_shows_the_window_progressing_then_done(run):
    lines = progress_lines(run["output"])
    measuring = [line for line in lines if line["phase"] == "measuring"]
    assert len(measuring) >= 4, run["output"]  # ~8 s at a report every 0.5 s
    assert all(line["window"].endswith("/sim/r0/code-c2") for line in lines)
    assert {line["of"] for line in lines} == {"1", "8"}  # the warm-up's one, the window's 8
    assert all(line["of"] == "1" for line in lines if line["phase"] == "warm-up")
    finished = [int(line["finished"]) for line in measuring]
    assert finished == sorted(finished) and finished[0] < 8
    assert all(int(line["in_flight"]) <= 2 for line in lines)
    assert any(line["rate"] != "-" for line in measuring)  # delivered tokens so far
    done = [line for line in lines if line["phase"] == "done"]
    assert len(done) == 1 and lines[-1] == done[0]
    assert (done[0]["finished"], done[0]["submitted"], done[0]["drain"]) == ("8", "8",
                                                                          "complete")
    # the summary that tests and users read is unchanged: the last two lines still say
    # what was published and how the DAG run ended
    last = run["output"].strip().splitlines()[-2:]
    assert last[0].startswith("published ") and last[1].startswith("DAG run ")
    assert last[1].endswith(": success")


def test_the_task_log_has_the_same_lines(run):
    lines = progress_lines(run["task_log"])
    assert len([line for line in lines if line["phase"] == "measuring"]) >= 4
    assert [line["phase"] for line in lines].count("done") == 1


def test_the_progress_file_ends_done_and_is_no_raw_file(run):
    (path,) = (run["workdir"] / "data" / "raw").glob("*/sim/r0/code-c2.progress")
    report = json.loads(path.read_text())
    assert report["phase"] == "done" and report["finished"] == report["submitted"] == 8
    assert report["output_tokens"] == 8 * 40 and report["attempt"] == 1
    con = duckdb.connect(str(run["workdir"] / "wh.duckdb"), read_only=True)
    try:
        loaded = [p for p, in con.execute("SELECT path FROM raw_files").fetchall()]
        windows = con.execute("SELECT count(*) FROM windows").fetchone()[0]
    finally:
        con.close()
    assert windows == 1 and loaded and not any(p.endswith(".progress") for p in loaded)
