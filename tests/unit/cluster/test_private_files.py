"""Secrets on a shared machine (issue #39, items 7-9), without a running Airflow: the
deployment's folder and the files in it that hold secrets are private to their owner, the
files its processes create too (supervisord's umask), the fernet key is made and kept off
the workers; copies of a sweep's datasets and prepared workloads are no more readable than
their sources; a data dir or database URL that carries a credential is refused without
echoing it. tests/integration/cluster/test_cluster_secrets.py checks the same of a running
deployment, as another local user."""

from __future__ import annotations

import configparser
import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from benchledger.cli import main
from benchledger.cluster import commands as cluster
from benchledger.cluster import config as cluster_config
from benchledger.cluster import join as cluster_join
from benchledger.cluster import run as cluster_run
from benchledger.cluster import supervisor
from benchledger.raw.records import storage_path
from benchledger.raw.store import parse_store
from benchledger.restart.workload_files import prepare_run_workloads
from benchledger.sweep.spec import load_sweep
from tests.sweeps import simulator_arm, sweep, write_sweep


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022():
    """The usual umask of a login shell, whatever this test process was given."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def _cfg(path: Path) -> configparser.ConfigParser:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.optionxform = str  # type: ignore[assignment, method-assign]
    cfg.read(path)
    return cfg


def test_the_folder_and_its_secrets_are_private_even_in_a_folder_made_before(
        tmp_path, umask_022):
    """Item 7: the files `up` writes that hold secrets are 0600 (they were 0644); a folder
    `up` made before this fix (0755, airflow.cfg, the password file, the SQLite DB and the
    logs 0644) is made private, and so is what is written now."""
    plain = tmp_path / "plain"  # as `up` made its folder before
    plain.mkdir()
    path, api_url = cluster_config.write_config(plain, port=8122)
    cluster_config._ensure_password(plain)
    for file in (path, plain / "api-passwords.json",
                 cluster_config.write_join_file(plain, api_url)):
        assert mode(file) == 0o600, file
    home = tmp_path / "cluster"
    (home / "logs" / "dag_id=x").mkdir(parents=True)
    for name in ("airflow.cfg", "api-passwords.json", "airflow-metadata.db",
                 "logs/scheduler.log", "logs/dag_id=x/attempt=1.log"):
        (home / name).write_text("[core]\n" if name.endswith(".cfg") else "{}")
        (home / name).chmod(0o644)
    home.chmod(0o755)
    cluster_config.private_home(home, ("dags", "logs", "run"))
    path, api_url = cluster_config.write_config(home, port=8123)
    cluster_config._ensure_password(home)
    join = cluster_config.write_join_file(home, api_url)
    assert mode(home) == 0o700
    for sub in ("dags", "logs", "run", "logs/dag_id=x"):
        assert mode(home / sub) == 0o700, sub
    for file in (path, join, home / "api-passwords.json", home / "airflow-metadata.db",
                 home / "logs" / "scheduler.log", home / "logs" / "dag_id=x" / "attempt=1.log"):
        assert mode(file) == 0o600, file
    # a fresh folder: private from the start
    fresh = tmp_path / "fresh"
    cluster_config.private_home(fresh, ("dags", "logs", "run"))
    written, _ = cluster_config.write_config(fresh, port=8124)
    assert (mode(fresh), mode(written), mode(fresh / "logs")) == (0o700, 0o600, 0o700)
    # Airflow chmods each task log it creates to these, umask or not
    logging = _cfg(written)["logging"]
    assert logging["file_task_handler_new_file_permissions"] == "0o600"
    assert logging["file_task_handler_new_folder_permissions"] == "0o700"


def test_a_fernet_key_is_made_once_kept_and_never_given_to_workers(tmp_path):
    """Item 7: without [core] fernet_key Airflow stores connection passwords in plain text.
    One is made, kept across `up` (it decrypts what it encrypted), a rotation's list the
    user wrote is kept, and the join file (what workers get) holds neither it nor the other
    head-only secrets; the JWT secret, which workers sign with, it does hold."""
    path, api_url = cluster_config.write_config(tmp_path, port=8123)
    key = _cfg(path)["core"]["fernet_key"]
    Fernet(key.encode())  # a valid key
    cluster_config.write_config(tmp_path)
    assert _cfg(path)["core"]["fernet_key"] == key
    rotated = f"{Fernet.generate_key().decode()},{key}"
    cfg = _cfg(path)
    cfg["core"]["fernet_key"] = rotated
    with path.open("w") as out:
        cfg.write(out)
    cluster_config.write_config(tmp_path)
    assert _cfg(path)["core"]["fernet_key"] == rotated
    joined = json.loads(cluster_config.write_join_file(tmp_path, api_url).read_text())
    settings = joined["airflow_cfg"]
    assert "fernet_key" not in settings["core"] and "secret_key" not in settings["api"]
    assert "sql_alchemy_conn" not in settings.get("database", {})
    assert settings["api_auth"]["jwt_secret"] == _cfg(path)["api_auth"]["jwt_secret"]


def test_a_joined_workers_folder_and_config_are_private(tmp_path, umask_022):
    """Item 7, `cluster join`: the worker's folder 0700 and its airflow.cfg (the JWT secret
    the 0600 join file kept) 0600, also over a folder and file left 0755/0644 before."""
    head = tmp_path / "head"
    head.mkdir()
    _, api_url = cluster_config.write_config(head, port=8123)
    data = cluster_join.read_join_file(cluster_config.write_join_file(head, api_url))
    worker = tmp_path / "worker"
    worker.mkdir(mode=0o755)
    cluster_join._write_worker_config(worker, data, None)
    assert mode(worker / "airflow.cfg") == 0o600
    (worker / "airflow.cfg").write_text("[core]\n")
    (worker / "airflow.cfg").chmod(0o644)
    cluster_config.private_home(worker, ("logs", "run"))
    cluster_join._write_worker_config(worker, data, None)
    written = worker / "airflow.cfg"
    assert (mode(worker), mode(written), mode(worker / "logs")) == (0o700, 0o600, 0o700)
    cfg = _cfg(written)
    assert cfg["api_auth"]["jwt_secret"] == data["airflow_cfg"]["api_auth"]["jwt_secret"]
    assert "fernet_key" not in cfg["core"]


def test_the_deployments_processes_create_private_files(tmp_path, umask_022):
    """Item 7: supervisord and every process it starts run with umask 077, so what Airflow
    creates itself (the SQLite DB, logs, pid files) is private; the caller's umask (022
    here) does not reach them."""
    for sub in ("logs", "run"):
        (tmp_path / sub).mkdir()
    made = tmp_path / "made-by-a-program"
    writer = [sys.executable, "-c",
              f"open({str(made)!r}, 'w').write('x'); print('hello', flush=True); "
              "import time; time.sleep(600)"]
    supervisor.write_conf(tmp_path, [supervisor.Program("scheduler", writer, True, 1)])
    record = cluster._start_supervisord(tmp_path)
    cluster.Cluster(tmp_path, "http://127.0.0.1:9", ["node-a"], record).save()
    try:
        deadline = time.monotonic() + 30
        while not made.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert made.exists()
        for file in (made, tmp_path / "logs" / supervisor.LOG_FILE,
                     supervisor.log_path(tmp_path, "scheduler"),
                     tmp_path / "logs" / "supervisord.out", tmp_path / "run" / "supervisord.pid"):
            assert mode(file) == 0o600, file
    finally:
        cluster.down(tmp_path, grace_s=5)


SWEEP = sweep(
    "private-data",
    [simulator_arm("a", node="gpu-1")],
    defaults={"requests": 5, "warmup": 1},
    workloads=[
        {"name": "mine", "dataset": "data/prompts.jsonl"},
        {"name": "folder", "dataset": "chats"},
        {"name": "made-up", "input_length": {"distribution": "fixed", "value": 8}},
    ],
)


def _sweep_with_inputs(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "chats").mkdir()
    prompts = tmp_path / "data" / "prompts.jsonl"
    prompts.write_text("".join(f'{{"prompt": "secret prompt {i}"}}\n' for i in range(5)))
    prompts.chmod(0o600)
    (tmp_path / "chats" / "open.jsonl").write_text('{"prompt": "open"}\n')
    (tmp_path / "chats" / "open.jsonl").chmod(0o644)
    (tmp_path / "chats" / "kept.jsonl").write_text('{"prompt": "kept"}\n')
    (tmp_path / "chats" / "kept.jsonl").chmod(0o600)
    (tmp_path / "chats").chmod(0o700)
    sweep = tmp_path / "s.toml"
    write_sweep(sweep, SWEEP)
    sweep.chmod(0o640)
    return sweep


def test_the_dag_bundle_keeps_each_copys_permissions(tmp_path, umask_022):
    """Item 8: `run --cluster` copies a 0600 dataset into the DAG bundle (synced to every
    worker) as 0600, not 0644; each file keeps its own mode, the sweep file too; a copy
    made 0644 before is given its source's mode when the sweep is installed again."""
    sweep_path = _sweep_with_inputs(tmp_path)
    dags = tmp_path / "dags"
    cluster_run.install_sweep(dags, sweep_path, load_sweep(sweep_path), Path("/w/wh.duckdb"),
                              Path("/w/data"))
    copied = dags / "sweeps"
    assert mode(copied / "data" / "prompts.jsonl") == 0o600
    assert mode(copied / "chats" / "kept.jsonl") == 0o600
    assert mode(copied / "chats" / "open.jsonl") == 0o644
    assert mode(copied / "private_data.toml") == 0o640
    assert mode(copied / "chats") == 0o700  # the dataset folder's own mode
    assert (copied / "data" / "prompts.jsonl").read_bytes() == \
        (tmp_path / "data" / "prompts.jsonl").read_bytes()
    (copied / "data" / "prompts.jsonl").chmod(0o644)  # as an earlier install left it
    _, changed = cluster_run.install_sweep(dags, sweep_path, load_sweep(sweep_path),
                                           Path("/w/wh.duckdb"), Path("/w/data"))
    assert not changed and mode(copied / "data" / "prompts.jsonl") == 0o600


def test_a_prepared_workload_is_no_more_readable_than_its_dataset(tmp_path, umask_022):
    """Item 8: the run folder's `<workload>.workload.arrow` holds the dataset's prompts:
    0600 when the dataset is (a folder: when it or any file read is), a new file's usual
    mode when the dataset is readable or there is none (synthetic lengths)."""
    sweep_path = _sweep_with_inputs(tmp_path)
    run_dir = tmp_path / "run"
    recorded = prepare_run_workloads(run_dir, load_sweep(sweep_path), tmp_path)
    assert mode(run_dir / recorded["mine"]["file"]) == 0o600
    assert mode(run_dir / recorded["folder"]["file"]) == 0o600
    assert mode(run_dir / recorded["made-up"]["file"]) == 0o644
    (tmp_path / "chats" / "kept.jsonl").chmod(0o644)
    (tmp_path / "data" / "prompts.jsonl").chmod(0o640)
    again = tmp_path / "again"
    recorded = prepare_run_workloads(again, load_sweep(sweep_path), tmp_path)
    assert mode(again / recorded["folder"]["file"]) == 0o600  # the folder itself is 0700
    (tmp_path / "chats").chmod(0o755)
    recorded = prepare_run_workloads(again, load_sweep(sweep_path), tmp_path)
    assert mode(again / recorded["folder"]["file"]) == 0o644
    assert mode(again / recorded["mine"]["file"]) == 0o640


SIGNATURE = "0f3a9c1e5b7d2f4a6c8e0b1d3f5a7c9e1b3d5f7a9c0e2b4d6f8a0c2e4b6d8f0a"
CREDENTIAL = "AKIAIOSFODNN7EXAMPLE"
PRESIGNED = (f"s3://bench/raw?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={CREDENTIAL}"
             f"%2F20260101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature={SIGNATURE}")


def _no_credential(text: str) -> None:
    for part in (SIGNATURE, CREDENTIAL, "X-Amz-Signature", "hunter2", "sig=", "tok3n"):
        assert part not in text, text


def test_a_data_dir_with_a_credential_is_refused_without_echoing_it(tmp_path, capsys):
    """Item 9: a presigned s3:// URL was refused with its signature in the message (the
    userinfo form without); now neither is echoed, nor a credential in a URL of another
    scheme, a file:// URL's query, or a --db URL that is no PostgreSQL one."""
    for location in (PRESIGNED, "s3://bench/raw#sig=" + SIGNATURE,
                     "s3://user:hunter2@bench/raw"):
        with pytest.raises(ValueError, match="raw storage") as refused:
            parse_store(location)
        _no_credential(str(refused.value))
        assert "s3://" in str(refused.value)
    with pytest.raises(ValueError, match=r"s3://bench/raw\?<redacted>: expected s3://"):
        parse_store(PRESIGNED)
    for location in (f"gs://bench/raw?X-Goog-Signature={SIGNATURE}",
                     f"https://user:hunter2@store.example.org/{CREDENTIAL}/raw",
                     "file://relative/x?token=tok3n"):
        with pytest.raises(ValueError) as refused:
            storage_path(location)
        _no_credential(str(refused.value))
    with pytest.raises(cluster.ClusterError, match="give a PostgreSQL URL") as refused:
        cluster_config.database_settings("mysql://root:hunter2@db/airflow?sig=x", 1)
    _no_credential(str(refused.value))
    # as the command line says it
    sweep = tmp_path / "s.toml"
    write_sweep(sweep, SWEEP)
    for flag, location in (("--data-dir", PRESIGNED), ("--warehouse", PRESIGNED)):
        args = ["run", str(sweep), "--warehouse", str(tmp_path / "w.duckdb"), flag, location]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "s3://bench/raw?<redacted>" in err
        _no_credential(err)


def test_a_folder_that_cannot_be_made_private_is_refused_naming_it(tmp_path, monkeypatch):
    """Another user's folder as --home (chmod refused: EPERM): a clear error naming it,
    not a traceback."""
    def refused(path, mode):
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr(Path, "chmod", refused)
    with pytest.raises(cluster.ClusterError, match=r"theirs: the deployment's folder must be "
                                                    r"private .*Operation not permitted"):
        cluster_config.private_home(tmp_path / "theirs", ("logs",))
