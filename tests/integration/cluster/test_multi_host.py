"""The harness across hosts (issue #25), on one machine: every host its own network
namespace with its own address on a bridge and its own loopback (tests/netns.py).

- head: PostgreSQL (the metadata DB), an S3-compatible object store (moto's server), the
  API server, scheduler, DAG processor, triggerer and a worker for the default queue
  (`cluster up --host <head address> --db ...`);
- node-a, node-b: one Edge worker each, joined with `cluster join --join-file ...
  --address <its address>`; the simulator servers their tasks launch listen on that
  address, never on 127.0.0.1.

A two-arm sweep (one arm per node) runs through `run --cluster --data-dir s3://...`: both
arms measure at the same time, each restart's tasks on its node's worker; every raw file
goes to the object store from the node that wrote it (each host keeps its own local copy:
no host reads another's), and the published entries equal an embedded derivation of a
fresh copy of the store's files. The store's credentials reach every process through the
environment only: no file any host wrote holds the secret. `cluster down` on the joins
and the head, and the namespaces' removal, leave nothing behind.

The DAG bundle is still read from the filesystem the namespaces share (as it would be
from a shared mount or a git-synced folder on real hosts)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import defaultdict

import duckdb
import pytest

from benchledger.cluster import commands as local_cluster
from tests.cluster_helpers import assert_same_entries, published_and_embedded
from tests.netns import hosts, namespaces
from tests.postgres import postgres_server
from tests.s3_server import CREDENTIALS, s3_server
from tests.sweeps import cluster_sweep, write_sweep

pytestmark = pytest.mark.integration

NODES = ["node-a", "node-b"]
STORE_URL = "s3://bench/multi-host"


ENV: dict[str, str] = {}  # the object store's endpoint and credentials, once it runs


def bl(host, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`benchledger ARGS` run on one host (in its namespace), the store's credentials in
    its environment."""
    return subprocess.run(host.command(sys.executable, "-m", "benchledger.cli", *args),
                          text=True, capture_output=True, timeout=timeout, check=False,
                          env={**os.environ, **ENV})


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    work = tmp_path_factory.mktemp("multi-host")
    made: set[str] = set()
    with hosts(["head", *NODES]) as net:
        made = {host.namespace for host in net.values()}
        head = net["head"]
        with postgres_server(host=head.address, namespace=head.namespace) as db, \
                s3_server(host=head.address, namespace=head.namespace) as store:
            ENV.update(store.env)
            home = work / "head"
            up = bl(head, "cluster", "up", "--home", str(home), "--nodes", "head",
                    "--host", head.address, "--db", db, timeout=400)
            assert up.returncode == 0, up.stdout + up.stderr
            joins = {node: work / node for node in NODES}
            started = {node: subprocess.Popen(net[node].command(
                sys.executable, "-m", "benchledger.cli", "cluster", "join", "--join-file",
                str(home / "join.json"), "--node", node, "--address", net[node].address,
                "--home", str(joins[node])), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, env={**os.environ, **ENV}) for node in NODES}
            for node, proc in started.items():
                out = proc.communicate(timeout=300)[0]
                assert proc.returncode == 0, f"{node}: {out}"
            yield {"net": net, "home": home, "joins": joins, "work": work, "store": store}
            for node in NODES:
                bl(net[node], "cluster", "down", "--home", str(joins[node]), timeout=120)
            local_cluster.down(home)
    assert made and not made & namespaces(), "a namespace the test made is left"


@pytest.fixture(scope="module")
def run(site):
    sweep = site["work"] / "hosts.toml"
    write_sweep(sweep, cluster_sweep("mh-two", [(f"on-{node}", node) for node in NODES],
                                     requests=40, step_ms=10.0, sweep_keys={"retries": 0}))
    warehouse = site["work"] / "wh.duckdb"
    done = bl(site["net"]["head"], "run", str(sweep), "--warehouse", str(warehouse),
              "--cluster", str(site["home"]), "--data-dir", STORE_URL)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    with duckdb.connect(str(warehouse), read_only=True) as con:
        run_id, = con.execute("SELECT run_id FROM runs").fetchone()
    return {"warehouse": warehouse, "run_id": run_id}


def _reaches(host, address: str, port: int) -> bool:
    probe = ("import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], "
             "int(sys.argv[2])), timeout=3).close()\nexcept OSError:\n    sys.exit(1)")
    return subprocess.run(host.command(sys.executable, "-c", probe, address, str(port)),
                          capture_output=True, timeout=30, check=False).returncode == 0


def test_each_host_reaches_the_api_by_address_and_nothing_over_loopback(site):
    state = local_cluster.Cluster.load(site["home"])
    head = site["net"]["head"]
    port = int(state.api_url.rsplit(":", 1)[1])
    assert state.api_host == head.address
    for node in NODES:
        assert _reaches(site["net"][node], head.address, port)
        assert not _reaches(site["net"][node], "127.0.0.1", port)  # its own loopback
    # and this machine's own namespace does not hold the API either
    with socket.socket() as sock:
        sock.settimeout(1)
        assert sock.connect_ex(("127.0.0.1", port)) != 0


def _api_get(site, path: str) -> dict:
    """GET from the deployment's API as the head host does: the API listens on the head's
    address, which only the namespaces on the bridge reach."""
    code = ("import json, sys\nfrom pathlib import Path\n"
            "from benchledger.cluster.airflow_api import ApiClient\n"
            "from benchledger.cluster.commands import Cluster\n"
            "from benchledger.cluster.config import api_credentials\n"
            "home = Path(sys.argv[1])\n"
            "client = ApiClient(Cluster.load(home).api_url, *api_credentials(home))\n"
            "print(json.dumps(client.request('GET', sys.argv[2], "
            "params={'limit': 1000})))")
    done = subprocess.run(site["net"]["head"].command(sys.executable, "-c", code,
                                                      str(site["home"]), path),
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def test_the_sweep_ran_each_arm_on_its_host_at_the_same_time(site, run):
    tis = _api_get(site, f"/api/v2/dags/benchledger_mh-two/dagRuns/{run['run_id']}/"
                         "taskInstances")["task_instances"]
    hosts_of = defaultdict(set)
    for ti in tis:
        if "__r" in ti["task_id"]:
            hosts_of[ti["task_id"].split(".")[0]].add(ti["hostname"])
        else:
            assert ti["hostname"] == "head", ti  # plan, load, validate, derive, finalize
    assert hosts_of == {f"on-{n}__r{k}": {n} for n in NODES for k in (0, 1)}
    with duckdb.connect(str(run["warehouse"]), read_only=True) as con:
        rows = con.execute("SELECT w.arm, r.base_url, w.window_start, w.window_end "
                           "FROM windows AS w JOIN restarts AS r USING (restart_id) "
                           "ORDER BY w.window_start").fetchall()
    for arm, base_url, _, _ in rows:  # each server on its node's address, never loopback
        assert base_url.startswith(f"http://{site['net'][arm.removeprefix('on-')].address}:")
    spans = defaultdict(list)
    for arm, _, start, end in rows:
        spans[arm].append((start, end))
    a, b = (spans[f"on-{n}"] for n in NODES)
    assert any(s0 < e1 and s1 < e0 for s0, e0 in a for s1, e1 in b), spans  # overlapping


def test_raw_files_go_to_the_object_store_from_the_node_that_wrote_them(site, run):
    store = site["store"]
    with duckdb.connect(str(run["warehouse"]), read_only=True) as con:
        loaded = dict(con.execute("SELECT path, kind FROM raw_files").fetchall())
    stored = store.objects("multi-host/raw")
    assert len(loaded) > 10 and all(p.startswith(f"{STORE_URL}/raw/") for p in loaded)
    assert {p.removeprefix("s3://bench/") for p in loaded} <= set(stored)
    windows = {key for key in stored if key.endswith("-c1.parquet")}
    assert {key.split("/")[3] for key in windows} == {f"on-{n}" for n in NODES}
    # each node's own copy holds its own restarts' files and never the other node's
    for node in NODES:
        copy = site["joins"][node] / "object-store"
        arms = {p.parent.parent.name for p in copy.rglob("*-c1.parquet")}
        assert arms == {f"on-{node}"}, (node, arms)
    # the credentials reached the processes through the environment only
    secret = CREDENTIALS["AWS_SECRET_ACCESS_KEY"].encode()
    written = [p for p in site["work"].rglob("*") if p.is_file() and p.stat().st_size < 1e8]
    assert not [p for p in written if secret in p.read_bytes()]


def test_published_entries_equal_an_embedded_derivation_of_the_same_raw_files(site, run):
    fresh = site["work"] / "fresh-copy"
    site["store"].copy_to("multi-host/raw", fresh)
    run_dir = next(p for p in fresh.iterdir() if (p / "run.json").exists())
    on_hosts, again = published_and_embedded(run["warehouse"], run["run_id"], run_dir)
    assert len(on_hosts) > 10
    assert_same_entries(on_hosts, again)


def test_down_and_the_namespaces_removal_leave_nothing(site, run):
    net = site["net"]
    for node in NODES:
        done = bl(net[node], "cluster", "down", "--home", str(site["joins"][node]))
        assert done.returncode == 0, done.stdout + done.stderr
        assert local_cluster.deployment_processes(site["joins"][node]) == []
    local_cluster.down(site["home"])
    assert local_cluster.deployment_processes(site["home"]) == []
    for host in net.values():
        left = subprocess.run(["ip", "netns", "pids", host.namespace], text=True,
                              capture_output=True, check=False).stdout.split()
        if host.name != "head":
            assert left == [], (host.name, left)
    # the namespaces themselves go with the module fixture (checked at its teardown)
