"""The local cluster's pieces that need no running Airflow: node names, the folder's
airflow.cfg, the DAG bundle a sweep is installed into, queue checks, storage locations."""

from __future__ import annotations

import configparser
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchledger.cli import _settings, main
from benchledger.cluster import commands as cluster
from benchledger.cluster import config as cluster_config
from benchledger.cluster import run as cluster_run
from benchledger.raw.records import storage_path
from benchledger.sweep.spec import load_sweep
from tests.sweeps import simulator_arm, sweep, toml, variant, write_sweep

REPO = Path(__file__).resolve().parents[3]


def test_nodes_are_queue_names():
    assert cluster_config.parse_nodes("node-a, node-b") == ["node-a", "node-b"]
    for bad in ("", "a,a", "default", "a b", "x/y"):
        with pytest.raises(cluster.ClusterError, match="--nodes"):
            cluster_config.parse_nodes(bad)


def _cfg(path: Path) -> configparser.ConfigParser:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(path)
    return cfg


def test_config_is_complete_keeps_secrets_and_user_edits(tmp_path):
    path, api_url = cluster_config.write_config(tmp_path, port=8123)
    cfg = _cfg(path)
    assert api_url == "http://127.0.0.1:8123"
    assert cfg["core"]["executor"].endswith("EdgeExecutor")
    assert cfg["edge"]["api_url"] == f"{api_url}/edge_worker/v1/rpcapi"
    assert cfg["core"]["execution_api_server_url"] == f"{api_url}/execution/"
    # not SQLite's default airflow.db (the edge admin commands refuse it)
    assert cfg["database"]["sql_alchemy_conn"] == f"sqlite:///{tmp_path}/airflow-metadata.db"
    secret = cfg["api_auth"]["jwt_secret"]
    assert len(secret) > 30
    # a user's edit survives `up`; an enforced setting does not; the secret is kept
    cfg["dag_processor"]["refresh_interval"] = "2"
    cfg["core"]["executor"] = "LocalExecutor"
    with path.open("w") as out:
        cfg.write(out)
    cluster_config.write_config(tmp_path, settings={"openlineage": {"namespace": "bench"}})
    again = _cfg(path)
    assert again["dag_processor"]["refresh_interval"] == "2"
    assert again["core"]["executor"].endswith("EdgeExecutor")
    assert again["api_auth"]["jwt_secret"] == secret
    assert again["api"]["port"] == "8123"
    assert again["openlineage"]["namespace"] == "bench"


def test_a_setting_of_an_enforced_section_adds_to_it_and_cannot_undo_it(tmp_path):
    """`--config edge.job_poll_interval=2` sets that key and keeps the section's enforced
    keys (it once replaced the whole section: the Edge API was off and `up` failed); a
    setting that contradicts an enforced key is refused, naming it."""
    path, _ = cluster_config.write_config(
        tmp_path, port=8123, settings={"edge": {"job_poll_interval": "2"},
                                       "core": {"parallelism": "4"}})
    cfg = _cfg(path)
    assert cfg["edge"]["job_poll_interval"] == "2"
    assert cfg["edge"]["api_enabled"] == "True"
    assert cfg["core"]["parallelism"] == "4"
    assert cfg["core"]["executor"].endswith("EdgeExecutor")
    with pytest.raises(cluster.ClusterError, match=r"core\.executor=LocalExecutor.*needs"):
        cluster_config.write_config(tmp_path, settings={"core": {"executor": "LocalExecutor"}})
    assert _cfg(path)["core"]["executor"].endswith("EdgeExecutor")  # nothing written


def test_a_task_outlives_a_stalled_api_server_and_heartbeats_soon_after(tmp_path):
    """The retry settings, checked against the 60 s stall docs/cluster.md promises (and
    test_cluster.py makes): a task's execution-API calls keep trying for longer than the
    stall even when every wait is the shortest, and the heartbeat that lands after it is
    younger than the heartbeat timeout (the test deployment's 90 s and the default 180 s)
    even when every wait is the longest. Airflow's wait_max of 90 s broke the second."""
    path, _ = cluster_config.write_config(tmp_path, port=8123)
    cfg = _cfg(path)
    retries = int(cfg["workers"]["execution_api_retries"])
    wait_max = float(cfg["workers"]["execution_api_retry_wait_max"])
    timeout_s, wait_min, heartbeat_every = 5.0, 1.0, 5.0  # Airflow's defaults, not changed
    for setting in ("execution_api_timeout", "execution_api_retry_wait_min",
                    "min_heartbeat_interval"):
        assert setting not in cfg["workers"]
    stall = 60
    assert retries * timeout_s + (retries - 1) * wait_min > 2 * stall
    oldest_heartbeat = heartbeat_every + stall + wait_max + timeout_s
    assert oldest_heartbeat < 90 < int(cfg["scheduler"]["task_instance_heartbeat_timeout"])


def test_processes_see_only_the_folders_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    env = cluster_config.airflow_env(tmp_path)
    assert "AIRFLOW__CORE__EXECUTOR" not in env
    assert env["AIRFLOW_CONFIG"] == str(tmp_path / "airflow.cfg")


def test_credentials_from_the_environment_or_the_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCHLEDGER_AIRFLOW_USER", raising=False)
    monkeypatch.delenv("BENCHLEDGER_AIRFLOW_PASSWORD", raising=False)
    with pytest.raises(cluster.ClusterError, match="BENCHLEDGER_AIRFLOW_USER"):
        cluster_config.api_credentials(tmp_path)
    cluster_config._ensure_password(tmp_path)
    user, password = cluster_config.api_credentials(tmp_path)
    assert user == "benchledger" and len(password) > 10
    assert (tmp_path / "api-passwords.json").stat().st_mode & 0o077 == 0
    monkeypatch.setenv("BENCHLEDGER_AIRFLOW_USER", "ops")
    monkeypatch.setenv("BENCHLEDGER_AIRFLOW_PASSWORD", "s3cret")
    assert cluster_config.api_credentials(tmp_path) == ("ops", "s3cret")


def test_config_flags_parse_and_bad_ones_say_the_form():
    assert _settings(["openlineage.transport={\"type\": \"console\"}", "core.x=1"]) == {
        "openlineage": {"transport": '{"type": "console"}'}, "core": {"x": "1"}}
    with pytest.raises(Exception, match="SECTION.KEY=VALUE"):
        _settings(["transport=console"])


def test_status_of_a_folder_that_is_no_cluster(tmp_path, capsys):
    assert main(["cluster", "status", "--home", str(tmp_path)]) == 2
    assert "not a benchledger cluster folder" in capsys.readouterr().err


SWEEP_DOC = sweep("bundle-me", [simulator_arm("a", node="gpu-1")])
SWEEP = toml(SWEEP_DOC)


def test_install_writes_a_dag_file_airflow_discovers_with_its_sweep(tmp_path):
    sweep_path = tmp_path / "s.toml"
    sweep_path.write_text(SWEEP)
    sweep = load_sweep(sweep_path)
    dags = tmp_path / "dags"
    dag_file, changed = cluster_run.install_sweep(dags, sweep_path, sweep,
                                                  Path("/w/wh.duckdb"), Path("/w/data"))
    assert changed and dag_file == dags / "benchledger_bundle_me.py"
    assert (dags / "sweeps" / "bundle_me.toml").read_text() == SWEEP
    text = dag_file.read_text().lower()
    assert "airflow" in text and "dag" in text  # safe-mode discovery needs both words
    again, changed = cluster_run.install_sweep(dags, sweep_path, sweep,
                                               Path("/w/wh.duckdb"), Path("/w/data"))
    assert again == dag_file and not changed
    # the DAG file builds both DAGs from the copy, with the warehouse as param default
    probe = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import runpy
        ns = runpy.run_path({str(dag_file)!r})
        print(ns["dag"].dag_id, ns["publish_dag"].dag_id, ns["dag"].params["warehouse"],
              ns["publish_dag"].params["data_dir"])
        """)], capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert probe.stdout.split() == ["benchledger_bundle-me", "benchledger_bundle-me_publish",
                                    "/w/wh.duckdb", "/w/data"], probe.stderr


class FakeApi:
    def __init__(self, workers):
        self.workers = workers

    def edge_workers(self):
        return self.workers


def test_a_run_on_a_queue_no_worker_serves_is_refused_at_once(tmp_path):
    sweep_path = tmp_path / "s.toml"
    sweep_path.write_text(SWEEP)
    sweep = load_sweep(sweep_path)
    served = FakeApi([{"worker_name": "gpu-1", "state": "idle", "queues": ["gpu-1", "default"]}])
    cluster_run.refuse_unserved_queues(served, sweep)
    offline = FakeApi([{"worker_name": "gpu-1", "state": "offline",
                        "queues": ["gpu-1", "default"]},
                       {"worker_name": "head", "state": "idle", "queues": ["default"]}])
    with pytest.raises(cluster.ClusterError, match="no live edge worker serves queue.*gpu-1"):
        cluster_run.refuse_unserved_queues(offline, sweep)


def test_storage_locations_are_paths_or_file_urls():
    assert storage_path("/data/bench") == Path("/data/bench")
    assert storage_path("file:///data/bench") == Path("/data/bench")
    for bad, why in (("s3://bucket/raw", "s3:// is not supported here"),
                     ("file://relative/x", "absolute path")):
        with pytest.raises(ValueError, match=why):
            storage_path(bad)


def test_run_refuses_a_gs_data_dir_and_a_warehouse_in_an_object_store(tmp_path, capsys):
    """Raw files may live in S3 (benchledger.raw.store); other stores, and the warehouse
    anywhere but a local file, are refused in one line."""
    sweep_path = tmp_path / "s.toml"
    sweep_path.write_text(SWEEP)
    code = main(["run", str(sweep_path), "--warehouse", str(tmp_path / "w.duckdb"),
                 "--data-dir", "gs://bucket/bench"])
    assert code == 2
    assert "gs:// is not supported" in capsys.readouterr().err
    code = main(["run", str(sweep_path), "--warehouse", "s3://bucket/w.duckdb"])
    assert code == 2
    assert "the warehouse is a local DuckDB file" in capsys.readouterr().err


class FakeRunApi(FakeApi):
    """A run whose one task sits queued on `gpu-1` for `queued_for` seconds."""

    def __init__(self, workers, queued_for: float, queue: str = "gpu-1",
                 task: str = "a__r0.launch_server"):
        super().__init__(workers)
        from datetime import UTC, datetime, timedelta

        self.queued_when = (datetime.now(UTC) - timedelta(seconds=queued_for)).isoformat()
        self.queue, self.task = queue, task

    def request(self, method, path, **kwargs):
        if path.endswith("/taskInstances"):
            return {"task_instances": [{"task_id": self.task, "state": "queued",
                                        "queue": self.queue, "try_number": 1,
                                        "queued_when": self.queued_when}]}
        return {"state": "queued"}


class OneRound(Exception):
    """Ends follow() after one round of its loop."""


def _one_round(seconds):
    raise OneRound


def test_a_task_waiting_on_an_unserved_queue_is_said_then_given_up(monkeypatch):
    said = []
    monkeypatch.setattr(cluster_run.time, "sleep", _one_round)
    offline = [{"worker_name": "gpu-1", "state": "unknown", "queues": ["gpu-1"]}]
    with pytest.raises(OneRound):
        cluster_run.follow(FakeRunApi(offline, queued_for=45), "d", "r", said.append)
    assert said[-1].startswith("task a__r0.launch_server has waited 45s on queue 'gpu-1', "
                               "which no live edge worker serves")
    with pytest.raises(cluster.ClusterError, match="gave up waiting after 600s"):
        cluster_run.follow(FakeRunApi(offline, queued_for=700), "d", "r", said.append)
    served = [{"worker_name": "gpu-1", "state": "idle", "queues": ["gpu-1"]}]
    said.clear()
    with pytest.raises(OneRound):
        cluster_run.follow(FakeRunApi(served, queued_for=700), "d", "r", said.append)
    assert said == ["a__r0.launch_server: queued"]


def test_a_restart_whose_pinned_worker_is_gone_is_said_so(monkeypatch):
    said = []
    monkeypatch.setattr(cluster_run.time, "sleep", _one_round)
    workers = [{"worker_name": "gpu-1-w2", "state": "idle", "queues": ["gpu-1"]}]
    pinned = "gpu-1@benchledger_s.a__r0"
    with pytest.raises(OneRound):
        cluster_run.follow(FakeRunApi(workers, 45, pinned, "a__r0.measure_code"), "d", "r",
                           said.append)
    assert f"queue {pinned!r}" in said[-1]
    assert "the restart's own queue, served only by the worker that launched its server, " \
           "which is gone" in said[-1]
    assert "airflow edge worker -q" not in said[-1]  # no other worker can take it up


def _api(answers: list[tuple[int, dict]], seen: list[str], retry_s: float = 30.0):
    """An ApiClient over a fake server: logins succeed, other calls get `answers` in turn."""
    import httpx

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": "t"})
        seen.append(request.url.path)
        status, body = answers.pop(0) if answers else (200, {"ok": True})
        return httpx.Response(status, json=body)

    return cluster.ApiClient("http://api", "u", "p", retry_s=retry_s,
                             transport=httpx.MockTransport(handle))


def test_the_api_client_asks_again_after_a_server_error_and_never_after_a_refusal(monkeypatch):
    monkeypatch.setattr(cluster.time, "sleep", lambda s: None)
    seen = []
    busy = (500, {"detail": {"reason": "Database error"}})
    assert _api([busy, busy], seen).request("GET", "/api/v2/dags/x") == {"ok": True}
    assert seen == ["/api/v2/dags/x"] * 3
    seen.clear()
    with pytest.raises(cluster.ClusterError, match="HTTP 403"):
        _api([(403, {"detail": "no"}), (200, {})], seen).request("GET", "/api/v2/dags/x")
    assert seen == ["/api/v2/dags/x"]  # once: a refusal is not asked again
    with pytest.raises(cluster.ClusterError, match="HTTP 500"):  # bounded
        _api([busy] * 3, [], retry_s=0).request("GET", "/api/v2/dags/x")


def test_an_answer_that_is_not_json_is_an_error_naming_the_path():
    """The API server answers a route it does not serve with its UI's page (HTTP 200)."""
    import httpx

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": "t"})
        return httpx.Response(200, text="<!doctype html><html>",
                              headers={"content-type": "text/html"})

    api = cluster.ApiClient("http://api", "u", "p", transport=httpx.MockTransport(handle))
    with pytest.raises(cluster.ClusterError,
                       match=r"GET /edge_worker/ui/worker: .* 'text/html', not JSON"):
        api.edge_workers()


def test_an_expired_token_is_renewed_once_and_a_refused_fresh_one_ends_the_call():
    seen = []
    expired = (401, {"detail": "Signature has expired"})
    client = _api([(200, {"a": 1}), expired, (200, {"b": 2})], seen)
    assert client.request("GET", "/api/v2/x") == {"a": 1}
    # the kept token expired: one new login, then the call goes through
    assert client.request("GET", "/api/v2/y") == {"b": 2}
    assert seen == ["/api/v2/x", "/api/v2/y", "/api/v2/y"]
    # a server that refuses even the token it has just issued: said at once, never a loop
    seen.clear()
    with pytest.raises(cluster.ClusterError, match="refused the token it had just issued"):
        _api([expired] * 50, seen).request("GET", "/api/v2/z")
    assert seen == ["/api/v2/z"]
    client = _api([(200, {}), expired, expired, (200, {})], seen := [])
    client.request("GET", "/api/v2/a")
    with pytest.raises(cluster.ClusterError, match="HTTP 401"):
        client.request("GET", "/api/v2/a")  # kept token refused, then the fresh one too
    assert seen == ["/api/v2/a"] * 3


def test_each_queue_is_served_by_one_worker():
    # On SQLite the Edge API's job claim locks nothing: two workers on one queue were both
    # handed the same task instance. The default queue goes to the first node only.
    nodes = ["node-a", "node-b", "node-c"]
    assert [cluster_config.worker_queues(n, nodes) for n in nodes] == [
        "node-a,default", "node-b", "node-c"]



def test_several_workers_per_node_need_postgresql_and_say_why():
    assert cluster_config.worker_names("node-a", 3) == ["node-a", "node-a-w2", "node-a-w3"]
    assert cluster_config.all_workers(["a", "b"], 2) == [("a", "a"), ("a", "a-w2"), ("b", "b"),
                                                   ("b", "b-w2")]
    assert cluster_config.database_settings(None, 1) == {}
    with pytest.raises(cluster.ClusterError, match="needs PostgreSQL .* locks nothing"):
        cluster_config.database_settings(None, 2)
    with pytest.raises(cluster.ClusterError, match="needs PostgreSQL"):
        cluster_config.database_settings("sqlite:////tmp/x.db", 2)
    url = "postgresql://airflow:secret@db.example.org:5432/airflow"
    assert cluster_config.database_settings(url, 2) == {"database": {"sql_alchemy_conn": url}}
    with pytest.raises(cluster.ClusterError, match="give a PostgreSQL URL") as refused:
        cluster_config.database_settings("mysql://root:hunter2@db/airflow", 1)
    assert "hunter2" not in str(refused.value)  # the password is never repeated
    with pytest.raises(cluster.ClusterError, match="at least 1"):
        cluster_config.database_settings(None, 0)


def test_install_copies_the_workloads_inputs_beside_the_sweep(tmp_path):
    """Issue #26: a deployment's plan reads the sweep's copy in the DAGs folder, so each
    dataset and trace it names by a relative path is copied beside it (a folder whole); a
    path leaving the sweep's folder is refused."""
    (tmp_path / "data" / "chats").mkdir(parents=True)
    (tmp_path / "data" / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    (tmp_path / "data" / "chats" / "a.jsonl").write_text('{"prompt": "a"}\n')
    (tmp_path / "trace.jsonl").write_text(
        '{"timestamp": 0, "input_length": 9, "output_length": 3}\n' * 20)
    sweep_path = tmp_path / "s.toml"
    inputs = variant(SWEEP_DOC, {"workloads": [
        {"name": "mine", "dataset": "data/prompts.jsonl"},
        {"name": "folder", "dataset": "data/chats"},
        {"name": "replay", "trace": "trace.jsonl"}]})
    write_sweep(sweep_path, inputs)
    sweep = load_sweep(sweep_path)
    dags = tmp_path / "dags"
    _, changed = cluster_run.install_sweep(dags, sweep_path, sweep, Path("/w/wh.duckdb"),
                                           Path("/w/data"))
    copied = dags / "sweeps"
    assert changed
    assert (copied / "data" / "prompts.jsonl").read_text() == '{"prompt": "hi"}\n'
    assert (copied / "data" / "chats" / "a.jsonl").read_text() == '{"prompt": "a"}\n'
    assert (copied / "trace.jsonl").is_file()
    _, changed = cluster_run.install_sweep(dags, sweep_path, sweep, Path("/w/wh.duckdb"),
                                           Path("/w/data"))
    assert not changed
    write_sweep(sweep_path, variant(inputs, {"workloads": {"replay": {
        "trace": "../trace.jsonl"}}}))
    with pytest.raises(cluster_run.ClusterError, match="outside the sweep file's folder"):
        cluster_run.install_sweep(dags, sweep_path, load_sweep(sweep_path),
                                  Path("/w/wh.duckdb"), Path("/w/data"))
