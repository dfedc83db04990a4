"""How an object store is named and reached (benchledger.raw.store, operators/sweep_tasks):
the location, the local copy, the credentials from the environment or an Airflow
connection, and the order a folder's files are pushed in. The transfers themselves are
tested against a real S3-compatible server (tests/integration/raw/test_raw_store.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow.sdk import Connection

from benchledger.operators import sweep_tasks
from benchledger.raw import store as raw_store
from benchledger.raw.store import S3Settings


def test_a_location_is_a_folder_or_a_bucket_with_a_local_copy(tmp_path, monkeypatch):
    assert raw_store.resolve("/data/bench") == raw_store.RawStorage(Path("/data/bench"))
    monkeypatch.setenv(raw_store.LOCAL_COPY_ENV, str(tmp_path / "copy"))
    stored = raw_store.resolve("s3://bench/team/nightly/", S3Settings())
    assert stored.local == tmp_path / "copy" / "bench" / "team" / "nightly"
    assert stored.location == "s3://bench/team/nightly"
    assert stored.recorded_path(stored.local / "raw" / "r1" / "run.json") == \
        "s3://bench/team/nightly/raw/r1/run.json"
    monkeypatch.delenv(raw_store.LOCAL_COPY_ENV)
    monkeypatch.setenv("BENCHLEDGER_HOME", str(tmp_path / "home"))
    assert raw_store.resolve("s3://b/p", S3Settings()).local == \
        tmp_path / "home" / "object-store" / "b" / "p"
    with pytest.raises(ValueError, match="gs:// is not supported"):
        raw_store.resolve("gs://bucket/raw")


def test_credentials_come_from_the_environment_and_stay_out_of_repr():
    env = {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK", "AWS_SESSION_TOKEN": "T",
           "AWS_DEFAULT_REGION": "eu-west-1", "AWS_ENDPOINT_URL": "http://minio:9000",
           "AWS_ENDPOINT_URL_S3": "http://s3only:9000"}
    settings = S3Settings.from_env(env)
    assert (settings.access_key, settings.secret_key, settings.session_token) == \
        ("AK", "SK", "T")
    assert settings.endpoint_url == "http://s3only:9000"  # the S3-specific one wins
    assert settings.region == "eu-west-1"
    assert "SK" not in repr(settings) and "T'" not in repr(settings)
    assert S3Settings.from_env({}) == S3Settings()  # the AWS SDK's own chain then


def test_an_airflow_connection_names_the_endpoint_and_keys(monkeypatch):
    conn = Connection(conn_id="raw_store", conn_type="aws", login="AK", password="SK",
                      extra='{"endpoint_url": "http://minio:9000", "region_name": "eu-west-1"}')
    settings = sweep_tasks.s3_settings_of(conn)
    assert settings == S3Settings("http://minio:9000", "AK", "SK", None, "eu-west-1")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "from-env")
    assert sweep_tasks.s3_settings_of(Connection(conn_id="c", conn_type="aws")) \
        .session_token == "from-env"  # the environment fills what the connection lacks
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    asked = []
    monkeypatch.setattr(Connection, "get", classmethod(
        lambda cls, conn_id: asked.append(conn_id) or conn))
    monkeypatch.setenv(sweep_tasks.S3_CONN_ENV, "raw_store")
    assert sweep_tasks._s3_settings() == settings and asked == ["raw_store"]
    monkeypatch.delenv(sweep_tasks.S3_CONN_ENV)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    assert sweep_tasks._s3_settings().access_key == "env-key" and asked == ["raw_store"]


def test_a_folder_is_pushed_data_first_and_the_restart_manifest_last():
    names = ["restart.json", "nodes/n1.json", "nodes/n1.log", "code-c1.json",
             "code-c1.parquet", "code-c1.observed.json", "code-c1.telemetry.parquet",
             "server.log"]
    ranked = sorted(names, key=raw_store._rank)
    assert ranked[-1] == "restart.json"
    assert ranked[-2] == "nodes/n1.json"
    assert ranked[-3] == "code-c1.json"  # the window manifest after every file it names
    assert not any(raw_store._pushed(n) for n in ("code-c1.json.tmp", "code-c1.started",
                                                  "code-c1.progress", ".stored"))
