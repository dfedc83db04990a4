"""benchledger.local.runner runs a real DAG through dag.test() in a fresh interpreter (~25 s)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from benchledger.local.runner import FAILURES_ENV, RunnerDied, Then, run_in_subprocess

pytestmark = pytest.mark.integration

# setup -> middle -> teardown; `middle` fails when conf says so, the teardown leaves a marker.
DAG_SRC = textwrap.dedent(
    """
    import json
    import os
    from pathlib import Path

    from airflow.sdk import dag, get_current_context, setup, task, teardown

    from benchledger.operators.sweep_tasks import record_failure


    @dag(dag_id="tiny", schedule=None, params={"fail": False, "marker": ""},
         default_args={"on_failure_callback": record_failure})
    def tiny():
        @setup
        @task
        def launch():
            return {"marker": get_current_context()["params"]["marker"]}

        @task
        def middle():
            if get_current_context()["params"]["fail"]:
                raise RuntimeError("planned failure")

        @teardown
        @task
        def stop(info):
            ctx = get_current_context()
            Path(info["marker"]).write_text(json.dumps({"run_id": ctx["run_id"],
                                                        "runner_parent": os.getppid()}))

        started = launch()
        started >> middle() >> stop(started)


    tiny()
    """
)


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory):
    # Shared by both tests, so only the first run pays for creating the metadata DB.
    return tmp_path_factory.mktemp("airflow_home")


@pytest.fixture(scope="module")
def runner_env(tmp_path_factory):
    """The runs' BENCHLEDGER_HOME, where the runner keeps its migrated metadata DB template:
    this module's own, so the first fresh home here migrates and later ones copy."""
    return {"BENCHLEDGER_HOME": str(tmp_path_factory.mktemp("benchledger_home"))}


@pytest.fixture
def dag_file(tmp_path):
    path = tmp_path / "dags" / "tiny.py"
    path.parent.mkdir()
    path.write_text(DAG_SRC)
    return path


def test_failing_task_fails_run_but_teardown_runs(airflow_home, dag_file, tmp_path, runner_env):
    marker, log = tmp_path / "teardown.json", tmp_path / "run.log"
    conf = {"fail": True, "marker": str(marker)}

    result = run_in_subprocess(dag_file, "tiny", airflow_home, conf, log, env=runner_env)

    assert result.state == "failed"
    assert result.tasks == {"launch": "success", "middle": "failed", "stop": "success"}
    assert json.loads(marker.read_text())["run_id"].startswith("manual__")
    assert "planned failure" in log.read_text()  # task logs go to the log file
    # the cause reaches the caller, not only the log file (what `benchledger run` prints)
    assert [(f["task_id"], f["error"], f["run_id"]) for f in result.failures] == [
        ("middle", "RuntimeError: planned failure", result.run_id)]


@pytest.mark.parametrize("start", ["warm", "fresh"])
def test_passing_dag_succeeds(airflow_home, dag_file, tmp_path, runner_env, start,
                              monkeypatch):
    """Either way of starting the runner (benchledger/local/warm.py): forked from the
    fork server (its parent is not this process) or a fresh interpreter (it is)."""
    monkeypatch.setenv("BENCHLEDGER_RUNNER_START", start)
    marker, log = tmp_path / "teardown.json", tmp_path / "run.log"
    db_existed = (airflow_home / "airflow.db").exists()

    result = run_in_subprocess(dag_file, "tiny", airflow_home, {"marker": str(marker)}, log,
                               env=runner_env)

    assert result.state == "success" and result.run_id.startswith("manual__")
    assert result.tasks == {"launch": "success", "middle": "success", "stop": "success"}
    assert result.failures == []
    left = json.loads(marker.read_text())
    assert left["run_id"] == result.run_id
    assert (left["runner_parent"] == os.getpid()) is (start == "fresh")
    # a fresh home gets a metadata DB; a home that has its metadata DB already is never
    # migrated again (whichever order the two tests run in, one of the two is checked here)
    assert ("[runner] metadata DB" in log.read_text()) is not db_existed


def test_a_fresh_home_copies_the_first_migration(dag_file, tmp_path, runner_env):
    """The first fresh home of an installation is migrated and kept as a template; the
    next fresh home copies it (0.1 s, not a second of migration) and runs on it."""
    cache = Path(runner_env["BENCHLEDGER_HOME"]) / "cache"
    if not list(cache.glob("airflow-metadata-*.db")):  # this test run alone: migrate first
        first = run_in_subprocess(dag_file, "tiny", tmp_path / "first_home",
                                  {"marker": str(tmp_path / "first.json")},
                                  tmp_path / "first.log", env=runner_env)
        assert first.state == "success"
        assert "[runner] metadata DB migrated" in (tmp_path / "first.log").read_text()
    [template] = cache.glob("airflow-metadata-*.db")
    marker, log = tmp_path / "teardown.json", tmp_path / "run.log"

    result = run_in_subprocess(dag_file, "tiny", tmp_path / "fresh_home",
                               {"marker": str(marker)}, log, env=runner_env)

    assert result.state == "success", log.read_text()[-2000:]
    assert f"[runner] metadata DB copied from {template} in" in log.read_text()
    assert list(cache.iterdir()) == [template]  # no partial copy left beside it


def test_a_second_dag_without_entries_to_publish_is_skipped_and_said(airflow_home, dag_file,
                                                                     tmp_path, runner_env):
    """`benchledger run` runs the publish DAG in the sweep's runner (runner.Then) only
    where the sweep's run derived entries: here there is no warehouse, so the second DAG
    does not run, the first run's outcome stands, and the reason comes back. (Every
    publishing run of the integration suite, the demo's included, takes the other path.)"""
    marker, log = tmp_path / "teardown.json", tmp_path / "run.log"
    then = Then("tiny", "publish_run_id", str(tmp_path / "no-warehouse.duckdb"))

    result = run_in_subprocess(dag_file, "tiny", airflow_home, {"marker": str(marker)}, log,
                               env=runner_env, then=then)

    assert result.state == "success" and result.tasks["stop"] == "success"
    assert result.then is not None and result.then.state == "skipped", result.then
    assert result.then.run_id is None and result.then.tasks == {}
    assert result.then.error == f"run {result.run_id} derived no entries"
    assert f"[runner] tiny: skipped: run {result.run_id} derived no entries" in log.read_text()


def test_the_failures_file_is_the_one_the_tasks_write():
    from benchledger.operators.sweep_tasks import FAILURES_ENV as TASKS_FAILURES_ENV

    assert TASKS_FAILURES_ENV == FAILURES_ENV  # two layers, one name


HANGING_DAG = textwrap.dedent(
    """
    import subprocess, sys, time
    from pathlib import Path
    from airflow.sdk import dag, get_current_context, task


    @dag(dag_id="hang", schedule=None, params={"marker": ""})
    def hang():
        @task
        def wait_forever():
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                     start_new_session=True)
            Path(get_current_context()["params"]["marker"]).write_text(str(child.pid))
            time.sleep(600)

        wait_forever()


    hang()
    """
)


def runner_of(pid: int) -> int:
    """The runner pid started: its child, or its fork server's (warm.py)."""
    from tests.integration.local.test_interruptions import runner_of as found

    return found(pid)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_runner_whose_parent_is_killed_stops_its_children_and_exits(airflow_home,
                                                                      tmp_path):
    """kill -9 of the process that started the runner: the runner does not finish the run
    headless; it kills what its tasks started (here a child in its own session, like a
    server) and exits, within seconds."""
    dag_file = tmp_path / "dags" / "hang.py"
    dag_file.parent.mkdir()
    dag_file.write_text(HANGING_DAG)
    marker = tmp_path / "child.pid"
    parent_code = (
        "import sys\nfrom pathlib import Path\n"
        "from benchledger.local.runner import run_in_subprocess\n"
        "run_in_subprocess(Path(sys.argv[1]), 'hang', Path(sys.argv[2]),"
        " {'marker': sys.argv[3]}, Path(sys.argv[4]))\n")
    parent = subprocess.Popen([sys.executable, "-c", parent_code, str(dag_file),
                               str(airflow_home), str(marker), str(tmp_path / "run.log")],
                              start_new_session=True)
    deadline = time.monotonic() + 180
    while not marker.exists():
        assert parent.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    child = int(marker.read_text())
    runner = runner_of(parent.pid)
    assert alive(child) and alive(runner)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while (alive(runner) or alive(child)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(runner), "the runner went on headless"
    assert not alive(child), "the runner left what its task started running"
    assert "is gone: stopping the servers this run started" in (tmp_path / "run.log").read_text()


def test_a_killed_runner_is_reported_as_died_not_as_a_setup_error(airflow_home, tmp_path):
    dag_file = tmp_path / "dags" / "hang.py"
    dag_file.parent.mkdir()
    dag_file.write_text(HANGING_DAG)
    marker = tmp_path / "child.pid"
    killer = subprocess.Popen([sys.executable, "-c", (
        "import os, signal, sys, time\nfrom pathlib import Path\n"
        "marker = Path(sys.argv[1])\n"
        "while not marker.exists(): time.sleep(0.1)\n"
        "time.sleep(0.5)\n"
        "child = int(marker.read_text())\n"
        "runner = int(open(f'/proc/{child}/stat').read().rsplit(')', 1)[1].split()[1])\n"
        "os.kill(runner, signal.SIGKILL)\n"
        "os.killpg(child, signal.SIGKILL)\n"), str(marker)])
    try:
        with pytest.raises(RunnerDied, match="died \\(killed by SIGKILL\\)") as died:
            run_in_subprocess(dag_file, "hang", airflow_home, {"marker": str(marker)},
                              tmp_path / "run.log")
    finally:
        killer.wait(timeout=60)
    assert died.value.returncode == -signal.SIGKILL


def test_the_sweep_dags_never_overlap_and_record_their_failures():
    from benchledger.operators.dag_factory import build_publish_dag, build_sweep_dag
    from benchledger.operators.sweep_tasks import record_failure
    from tests.conftest import REPO

    sweep = REPO / "dags" / "sweeps" / "demo.toml"
    for dag in (build_sweep_dag(sweep), build_publish_dag(sweep)):
        assert dag.max_active_runs == 1  # a scheduler never runs one sweep twice at once
        for task in dag.tasks:
            assert record_failure in (task.on_failure_callback or []), task.task_id
