"""Raw files in an S3-compatible object store (issue #25, benchledger.raw.store), against a
real HTTP server (moto's standalone server, tests/s3_server.py).

A measuring node writes a run into a folder of its own and pushes it; the head, with a
folder of its own, pulls and loads it: the same rows as a load of the measuring node's
folder, every file named by its s3:// URL, a second load adding nothing. A window is in
the store whole or not at all; a damaged object is refused naming its URL; a file a node
wrote is never replaced by what a pull finds; credentials are never part of a location.
"""

from __future__ import annotations

import pytest

from benchledger.raw import store as raw_store
from benchledger.raw.store import RawStoreError, S3Settings, StoredFileMismatch
from benchledger.warehouse.db import connect
from benchledger.warehouse.load import load_run_dir
from tests.s3_server import CREDENTIALS, s3_server
from tests.unit.warehouse.test_warehouse import write_run

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server():
    with s3_server() as running:
        yield running


@pytest.fixture
def store_url(server, request):
    return f"s3://{server.bucket}/{request.node.name}"


def storage_of(server, url, folder):
    settings = S3Settings.from_env(server.env)
    return raw_store.resolve(url, settings, local_base=folder)


def push_run(storage, layout) -> int:
    pushed = raw_store.push_run_manifest(storage, layout)
    for manifest in sorted(layout.run_dir.glob("*/r*/restart.json")):
        pushed += raw_store.push_folder(storage, manifest.parent)
    return pushed


def _node_run(tmp_path, server, store_url):
    """A run a node wrote into its own copy of the store's folder (not yet pushed)."""
    node = storage_of(server, store_url, tmp_path / "node")
    (tmp_path / "w").mkdir()
    written = write_run(tmp_path / "w")
    layout = written.__class__(node.local, written.run_id)
    layout.run_dir.parent.mkdir(parents=True)
    written.run_dir.rename(layout.run_dir)
    return node, layout


def test_a_run_pushed_by_a_node_loads_on_the_head_from_the_store(tmp_path, server, store_url):
    node, layout = _node_run(tmp_path, server, store_url)
    # run, 2 x (restart, window, requests, observed), and the run's seal files (issue #39):
    # one of the run folder's, one of each restart's
    assert push_run(node, layout) == 12
    stored = server.objects(store_url.removeprefix(f"s3://{server.bucket}/"))
    assert len(stored) == 12 and all("/raw/" in key for key in stored)
    assert sum("/seal-" in key for key in stored) == 3

    head = storage_of(server, store_url, tmp_path / "head")
    head_layout = layout.__class__(head.local, layout.run_id)
    assert raw_store.pull_run(head, head_layout) == 12
    with connect(":memory:") as direct, connect(":memory:") as via_store:
        first = load_run_dir(direct, layout.run_dir)
        assert load_run_dir(via_store, head_layout.run_dir, head.recorded_path) == first
        assert first["requests"] == 12
        paths = [p for p, in via_store.execute("SELECT path FROM raw_files").fetchall()]
        assert paths and all(p.startswith(f"{store_url}/raw/") for p in paths), paths
        rows = "SELECT * FROM request_records ORDER BY window_id, request_id"
        assert via_store.execute(rows).fetchall() == direct.execute(rows).fetchall()
        # idempotent: nothing new to pull, nothing new to load
        assert raw_store.pull_run(head, head_layout) == 5  # the manifests, read again
        assert set(load_run_dir(via_store, head_layout.run_dir, head.recorded_path)
                   .values()) == {0}
    # a second push of an unchanged folder sends nothing
    assert push_run(node, layout) == 0


def test_a_push_cut_short_leaves_no_window_in_the_store_and_a_retry_completes_it(
        tmp_path, server, store_url, monkeypatch):
    node, layout = _node_run(tmp_path, server, store_url)
    raw_store.push_run_manifest(node, layout)
    slot = layout.slot_dir("a", 0)
    real = raw_store._upload

    def fails_on_manifests(storage, path):
        if path.name == "code-c1.json":  # the window's manifest: the store refuses it
            raise RawStoreError(f"{path}: the store went away")
        return real(storage, path)

    monkeypatch.setattr(raw_store, "_upload", fails_on_manifests)
    with pytest.raises(RawStoreError, match="went away"):
        raw_store.push_folder(node, slot)
    prefix = store_url.removeprefix(f"s3://{server.bucket}/")
    names = {key.rsplit("/", 1)[-1] for key in server.objects(prefix)}
    assert {"code-c1.parquet", "code-c1.observed.json"} <= names  # the data went up
    assert "code-c1.json" not in names and "restart.json" not in names  # nothing after it
    head = storage_of(server, store_url, tmp_path / "head")
    head_layout = layout.__class__(head.local, layout.run_id)
    raw_store.pull_run(head, head_layout)
    with connect(":memory:") as con:
        assert load_run_dir(con, head_layout.run_dir)["windows"] == 0  # no half window
    monkeypatch.setattr(raw_store, "_upload", real)
    assert raw_store.push_folder(node, slot) == 2  # what had not gone up, only
    raw_store.pull_run(head, head_layout)
    with connect(":memory:") as con:
        assert load_run_dir(con, head_layout.run_dir)["windows"] == 1


def test_a_damaged_object_is_refused_naming_its_url(tmp_path, server, store_url):
    node, layout = _node_run(tmp_path, server, store_url)
    push_run(node, layout)
    key = node.store.key(layout.window_files("a", 1, "code", 1).requests
                         .relative_to(node.local).as_posix())
    with server.filesystem().open_output_stream(key) as out:
        out.write(b"not the file the manifest names")
    head = storage_of(server, store_url, tmp_path / "head")
    with pytest.raises(StoredFileMismatch, match=rf"s3://{key}: sha256 \w+ does not match"):
        raw_store.pull_run(head, layout.__class__(head.local, layout.run_id))


def test_a_pull_never_replaces_a_file_this_node_wrote(tmp_path, server, store_url):
    node, layout = _node_run(tmp_path, server, store_url)
    push_run(node, layout)
    manifest = layout.restart_manifest("a", 0)
    mine = manifest.read_text()
    key = node.store.key(manifest.relative_to(node.local).as_posix())
    with server.filesystem().open_output_stream(key) as out:
        out.write(b'{"written": "elsewhere"}')
    raw_store.pull_restart(node, layout, "a", 0)
    assert manifest.read_text() == mine
    other = storage_of(server, store_url, tmp_path / "other")  # another node: it takes it
    raw_store.pull_restart(other, layout.__class__(other.local, layout.run_id), "a", 0)
    assert (other.local / manifest.relative_to(node.local)).read_text() == \
        '{"written": "elsewhere"}'


def test_credentials_are_never_part_of_a_location_or_a_message(tmp_path, server):
    secret = CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    with pytest.raises(ValueError, match="must not hold credentials") as refused:
        raw_store.resolve(f"s3://key:{secret}@bucket/raw")
    assert secret not in str(refused.value)
    settings = S3Settings.from_env(server.env)
    assert settings.secret_key == secret and secret not in repr(settings)
    wrong = raw_store.resolve("s3://no-such-bucket/raw", settings, local_base=tmp_path)
    assert wrong.location == "s3://no-such-bucket/raw"
    (wrong.local / "raw" / "run").mkdir(parents=True)
    (wrong.local / "raw" / "run" / "run.json").write_text("{}")
    with pytest.raises(RawStoreError, match="s3://no-such-bucket/raw/raw/run/run.json") as exc:
        raw_store.push_folder(wrong, wrong.local / "raw" / "run")
    assert secret not in str(exc.value)
    for bad in ("s3://", "s3://bucket/raw?versionId=1"):
        with pytest.raises(ValueError, match="expected s3://bucket/prefix"):
            raw_store.resolve(bad)


def test_an_embedded_run_keeps_its_raw_files_in_the_store(tmp_path, server):
    """`benchledger run --data-dir s3://...` through the Airflow DAG: every raw file goes
    to the store, the warehouse names them by URL, and the published entries equal a
    derivation of a fresh copy of the store's files; the secret is in no file written."""
    import os
    import subprocess
    import sys

    import duckdb

    from tests.cluster_helpers import assert_same_entries, published_and_embedded
    from tests.sweeps import cluster_sweep, write_sweep

    sweep = write_sweep(tmp_path / "s3.toml", cluster_sweep(
        "s3-embedded", [("a", "local"), ("b", "local")], requests=15, step_ms=5.0))
    warehouse = tmp_path / "wh.duckdb"
    env = {**os.environ, **server.env, "BENCHLEDGER_LOCAL_RAW_DIR": str(tmp_path / "copy")}
    done = subprocess.run([sys.executable, "-m", "benchledger.cli", "run", str(sweep),
                           "--warehouse", str(warehouse), "--data-dir",
                           f"s3://{server.bucket}/embedded"], env=env, text=True,
                          capture_output=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with duckdb.connect(str(warehouse), read_only=True) as con:
        run_id, = con.execute("SELECT run_id FROM runs").fetchone()
        paths = dict(con.execute("SELECT path, sha256 FROM raw_files").fetchall())
    stored = server.objects("embedded/raw")
    assert len(paths) > 10 and all(p.startswith(f"s3://{server.bucket}/embedded/raw/")
                                   for p in paths)
    assert {p.removeprefix(f"s3://{server.bucket}/") for p in paths} <= set(stored)
    fresh = tmp_path / "fresh"
    server.copy_to("embedded/raw", fresh)
    run_dir = next(p for p in fresh.iterdir() if (p / "run.json").exists())
    on_store, again = published_and_embedded(warehouse, run_id, run_dir)
    assert len(on_store) > 10
    assert_same_entries(on_store, again)
    secret = CREDENTIALS["AWS_SECRET_ACCESS_KEY"].encode()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p for p in written if secret in p.read_bytes()]


def test_the_object_store_benchmark_moves_and_loads_every_file(tmp_path):
    """benchmarks/object_store.py, small: every file pushed once and pulled once, nothing
    pushed again, and the load from the pulled copy equal to the load from the node's."""
    from benchmarks.object_store import measure

    result = measure(2000, tmp_path)
    assert result["requests"] == 2000
    # 71 raw files and the run's 11 seal files (one of the run folder's, one a restart's)
    assert result["files_pushed"] == result["files_pulled"] == 82
    assert result["files_pushed_again"] == 0
    assert result["files_pulled_again"] == 31  # the manifests only
