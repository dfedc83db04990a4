"""benchledger.runner runs a real DAG through dag.test() in a fresh interpreter (~25 s)."""

from __future__ import annotations

import json
import textwrap

import pytest

from benchledger.runner import run_in_subprocess

pytestmark = pytest.mark.integration

# setup -> middle -> teardown; `middle` fails when conf says so, the teardown leaves a marker.
DAG_SRC = textwrap.dedent(
    """
    import json
    from pathlib import Path

    from airflow.sdk import dag, get_current_context, setup, task, teardown


    @dag(dag_id="tiny", schedule=None, params={"fail": False, "marker": ""})
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
            Path(info["marker"]).write_text(json.dumps({"run_id": ctx["run_id"]}))

        started = launch()
        started >> middle() >> stop(started)


    tiny()
    """
)


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory):
    # Shared by both tests, so only the first run pays for creating the metadata DB.
    return tmp_path_factory.mktemp("airflow_home")


@pytest.fixture
def dag_file(tmp_path):
    path = tmp_path / "dags" / "tiny.py"
    path.parent.mkdir()
    path.write_text(DAG_SRC)
    return path


def test_failing_task_fails_run_but_teardown_runs(airflow_home, dag_file, tmp_path):
    marker, log = tmp_path / "teardown.json", tmp_path / "run.log"
    conf = {"fail": True, "marker": str(marker)}

    result = run_in_subprocess(dag_file, "tiny", airflow_home, conf, log)

    assert result.state == "failed"
    assert result.tasks == {"launch": "success", "middle": "failed", "stop": "success"}
    assert json.loads(marker.read_text())["run_id"].startswith("manual__")
    assert "planned failure" in log.read_text()  # task logs go to the log file


def test_passing_dag_succeeds(airflow_home, dag_file, tmp_path):
    marker, log = tmp_path / "teardown.json", tmp_path / "run.log"
    db_existed = (airflow_home / "airflow.db").exists()

    result = run_in_subprocess(dag_file, "tiny", airflow_home, {"marker": str(marker)}, log)

    assert result.state == "success" and result.run_id.startswith("manual__")
    assert result.tasks == {"launch": "success", "middle": "success", "stop": "success"}
    assert json.loads(marker.read_text())["run_id"] == result.run_id
    # a fresh home is migrated; a home that has its metadata DB already is never migrated
    # again (whichever order the two tests run in, one of the two is checked here)
    assert ("[runner] migrated" in log.read_text()) is not db_existed
