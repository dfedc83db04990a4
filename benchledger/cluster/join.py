"""`benchledger cluster join`: an Edge worker on another host joins a deployment (#25).

`cluster up` writes `join.json` into its folder (mode 0600: it holds the deployment's
shared secret): the API URL and the head's Airflow settings, less what only the head may
know (the metadata database's URL, the API's session key, the fernet key, the API users'
password file).
On the other host,

    benchledger cluster join --join-file join.json --node gpu-node-1 --home ~/bl-worker \\
        [--address 10.0.0.11] [--dags-folder /shared/bl-cluster/dags]

writes that host's own `airflow.cfg` into its folder (the folder 0700, the file 0600: it
holds the deployment's JWT secret) and starts one Edge worker (name and
queue: the node) under a supervisord of its own, which starts it again if it exits, as
on the head. `--address` is the node's address: the servers its tasks launch listen
there and are measured there (never on 127.0.0.1, which on another host is another
machine's loopback). `cluster status` and `cluster down` work on that folder as on the
head's. The DAG bundle must be readable there at the same path (a shared filesystem) or
at --dags-folder; the raw files either on a shared filesystem too, or in an object store
(`run --data-dir s3://...`, benchledger.raw.store), whose credentials the worker inherits
from the environment `join` runs in (never written to a file).
"""

from __future__ import annotations

import configparser
import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from benchledger.cluster import commands as cluster
from benchledger.cluster import config as cluster_config
from benchledger.cluster import supervisor
from benchledger.server.lifecycle import NODE_ADDRESS_ENV


def read_join_file(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
        if not isinstance(data.get("api_url"), str) or not isinstance(
                data.get("airflow_cfg"), dict):
            raise ValueError("no api_url or airflow_cfg")
    except (OSError, ValueError) as exc:
        raise cluster.ClusterError(f"--join-file {path}: not a join file written by "
                                   f"`benchledger cluster up` ({exc})") from exc
    return data


def join(home: Path, join_file: Path, node: str, address: str | None = None,
         dags_folder: str | None = None, timeout_s: float = cluster_config.UP_TIMEOUT_S,
         say: Callable[[str], None] = print) -> cluster.Cluster:
    """Start (or keep) this host's Edge worker for `node`; returns once it has stayed up
    past its start-up (a refused registration ends a worker at once)."""
    cluster_config.parse_nodes(node)
    data = read_join_file(join_file)
    api_url = data["api_url"]
    try:
        httpx.get(f"{api_url}/api/v2/monitor/health", timeout=10).raise_for_status()
    except httpx.HTTPError as exc:
        raise cluster.ClusterError(f"the deployment's API at {api_url} cannot be reached "
                                   f"from this host: {exc}") from exc
    home = Path(home).resolve()
    # private as the head's: its airflow.cfg holds the deployment's JWT secret
    cluster_config.private_home(home, ("logs", "run"))
    previous = cluster.Cluster.load(home) if (home / cluster_config.STATE_FILE).exists() else None
    if previous and previous.supervisord():
        if previous.nodes != [node] or previous.api_url != api_url:
            raise cluster.ClusterError(
                f"{home} already runs the worker of {','.join(previous.nodes)} for "
                f"{previous.api_url}: `benchledger cluster down --home {home}` first")
        say(f"cluster join: {node} already runs here ({home})")
        return previous
    _write_worker_config(home, data, dags_folder)
    name = supervisor.worker_program(node)
    supervisor.write_conf(home, [supervisor.Program(
        name, cluster.edge_worker_command(home, node, node), True, supervisor.WORKER_STARTSECS)])
    state = cluster.Cluster(home=home, api_url=api_url, nodes=[node], supervisor=None)
    state.supervisor = cluster._start_supervisord(
        home, {NODE_ADDRESS_ENV: address} if address else None)
    state.save()
    deadline = time.monotonic() + timeout_s
    while True:
        info = (supervisor.process_infos(home) or {}).get(name, {})
        if info.get("statename") == "RUNNING":
            break
        if info.get("statename") == "FATAL" or time.monotonic() > deadline \
                or state.supervisord() is None:
            log = supervisor.log_path(home, name)
            raise cluster.ClusterError(f"the worker of {node} did not stay up "
                                       f"({info.get('statename', 'not started')}); its last "
                                       f"error: {supervisor.last_error_line(log)}; see {log}")
        time.sleep(cluster_config.POLL_S)
    say(f"cluster join: {node} serves its queue for {api_url} (home: {home})")
    return state


def _write_worker_config(home: Path, data: dict, dags_folder: str | None) -> None:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.optionxform = str  # type: ignore[assignment, method-assign]
    for section, values in data["airflow_cfg"].items():
        cfg[section] = {k: str(v) for k, v in values.items()}
    cfg.setdefault("core", {})
    cfg["core"]["dags_folder"] = dags_folder or data.get("dags_folder", "")
    cfg.setdefault("logging", {})
    cfg["logging"]["base_log_folder"] = str(home / "logs")
    # a worker never opens the metadata DB; Airflow wants a URL all the same
    cfg.setdefault("database", {})
    cfg["database"]["sql_alchemy_conn"] = f"sqlite:///{home / cluster_config.METADATA_DB}"
    cluster_config.write_private(home / cluster_config.CONFIG_FILE,
                                 cluster_config.config_text(cfg))
