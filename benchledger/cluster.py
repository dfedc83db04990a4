"""`benchledger cluster up|status|down`: a real Airflow 3 deployment in one folder.

For development and CI, on one machine: the API server, the scheduler, the DAG processor
and one Airflow Edge worker per node (worker name = node name, serving the queue of the
same name; the first node's worker serves the default queue too). It is the same executor
and REST API a production deployment uses (see README, "Running on a cluster"); only the
metadata DB (SQLite in the folder) and the single host differ.

Everything lives under the folder: `airflow.cfg` (the deployment's settings; edit it and
run `cluster down` / `cluster up` to apply), `cluster.json` (the processes started, by
pid and start time, so `down` stops exactly those), `logs/`, `dags/`, the metadata DB and
the API user's password file. This module never imports Airflow: it runs Airflow's own
command line in child processes and talks to the REST API over HTTP.
"""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchledger.warehouse import POOL_DESCRIPTION, WAREHOUSE_POOL, WAREHOUSE_POOL_SLOTS

STATE_FILE = "cluster.json"
CONFIG_FILE = "airflow.cfg"
PASSWORDS_FILE = "api-passwords.json"
API_USER = "benchledger"
DEFAULT_QUEUE = "default"  # [operators] default_queue: load, validate, derive, publish
# Not airflow.db: Airflow's edge admin commands refuse SQLite's default file name.
METADATA_DB = "airflow-metadata.db"
UP_TIMEOUT_S = 180.0  # API server, scheduler, DAG processor and workers healthy by then
STOP_GRACE_S = 20.0  # SIGTERM, then SIGKILL what is left
POLL_S = 0.5
# Set in the environment of every process of the deployment, and so inherited by what they
# start: `down` finds by it the servers under test that tasks launched and that outlived
# their task process (reparented to init, they are in no recorded process tree).
HOME_ENV = "BENCHLEDGER_CLUSTER_HOME"

# What the local deployment needs, whatever else the folder's airflow.cfg says. The rest of
# the file is the user's (kept across `up`).
_ENFORCED = {
    "core": {
        "executor": "airflow.providers.edge3.executors.EdgeExecutor",
        "load_examples": "False",
        "auth_manager":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "simple_auth_manager_users": f"{API_USER}:admin",
    },
    "edge": {"api_enabled": "True"},
}
# Defaults for a quick local deployment; the folder's airflow.cfg may change them.
_DEFAULTS = {
    "core": {"dags_are_paused_at_creation": "True", "parallelism": "16"},
    "edge": {"job_poll_interval": "1", "heartbeat_interval": "5",
             # `cluster down` must not wait for ever on a worker draining a long window.
             "drain_timeout_sec": "10", "drain_kill_grace_sec": "5"},
    # New DAG files are noticed within seconds, not the default five minutes.
    "dag_processor": {"refresh_interval": "5", "min_file_process_interval": "10",
                      "parsing_processes": "1"},
    "scheduler": {"scheduler_heartbeat_sec": "2",
                  # A task whose worker vanished is failed (and retried) after this long.
                  "task_instance_heartbeat_timeout": "60",
                  "standalone_dag_processor": "True"},
    "api": {"workers": "1", "expose_config": "False"},
    "logging": {"colored_console_log": "False"},
}


class ClusterError(RuntimeError):
    """The local cluster could not be started, reached or stopped; says why and where."""


@dataclass
class ClusterProcess:
    name: str  # api-server | scheduler | dag-processor | edge-worker:<node>
    pid: int
    create_time: float  # psutil's; a reused pid never matches it
    command: list[str]
    log: str

    def process(self) -> psutil.Process | None:
        """The process this record started, if it still runs (never a pid's new owner)."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.create_time) < 0.01 and proc.is_running() \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                return proc
        except psutil.Error:
            pass
        return None


@dataclass
class Cluster:
    """One local deployment: where it lives, its API and the processes it started."""

    home: Path
    api_url: str
    nodes: list[str]
    processes: list[ClusterProcess]

    @property
    def dags_folder(self) -> Path:
        return self.home / "dags"

    def save(self) -> None:
        data = {"api_url": self.api_url, "nodes": self.nodes,
                "processes": [asdict(p) for p in self.processes]}
        tmp = self.home / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(self.home / STATE_FILE)

    @classmethod
    def load(cls, home: Path) -> Cluster:
        home = Path(home).resolve()
        path = home / STATE_FILE
        if not path.exists():
            raise ClusterError(f"{home} is not a benchledger cluster folder (no {STATE_FILE}; "
                               f"start one with: benchledger cluster up --home {home})")
        data = json.loads(path.read_text())
        return cls(home=home, api_url=data["api_url"], nodes=list(data["nodes"]),
                   processes=[ClusterProcess(**p) for p in data["processes"]])


def parse_nodes(text: str) -> list[str]:
    """`--nodes a,b`: node names are Airflow queue and edge worker names."""
    nodes = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in nodes if not n.replace("-", "").replace("_", "").isalnum()]
    if not nodes or bad:
        raise ClusterError(f"--nodes {text!r}: give node names (letters, digits, '-', '_') "
                           "separated by commas, e.g. --nodes node-a,node-b")
    if DEFAULT_QUEUE in nodes or len(set(nodes)) != len(nodes):
        raise ClusterError(f"--nodes {text!r}: node names must be distinct and not "
                           f"{DEFAULT_QUEUE!r} (the first node's worker serves that queue)")
    return nodes


def worker_queues(node: str, nodes: list[str]) -> str:
    """The queues a node's worker serves: its own, and on the first node the default queue.
    One worker per queue, because on SQLite the Edge API's job claim (SELECT ... FOR UPDATE
    SKIP LOCKED) locks nothing: two workers polling one queue were both handed the same
    task instance, and the second copy failed the run ("TI was not in the running state")."""
    return f"{node},{DEFAULT_QUEUE}" if node == nodes[0] else node


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(home: Path, port: int | None = None,
                 settings: dict[str, dict[str, str]] | None = None) -> tuple[Path, str]:
    """Write (or update) the folder's airflow.cfg; returns (its path, the API URL).

    Secrets are generated once and kept: every process must share `[api_auth] jwt_secret`.
    """
    path = home / CONFIG_FILE
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.optionxform = str  # type: ignore[assignment, method-assign]  # keep Airflow's key case
    if path.exists():
        cfg.read(path)
    for section, values in _DEFAULTS.items():
        for key, value in values.items():
            cfg.setdefault(section, {})
            cfg[section].setdefault(key, value)
    for section, values in {**_ENFORCED, **(settings or {})}.items():
        cfg.setdefault(section, {})
        cfg[section].update(values)
    if port is None:
        port = int(cfg["api"].get("port") or _free_port())
    api_url = f"http://127.0.0.1:{port}"
    cfg["api"].update({"host": "127.0.0.1", "port": str(port), "base_url": api_url})
    cfg["core"].update({
        "dags_folder": str(home / "dags"),
        "execution_api_server_url": f"{api_url}/execution/",
        "simple_auth_manager_passwords_file": str(home / PASSWORDS_FILE),
    })
    cfg["edge"]["api_url"] = f"{api_url}/edge_worker/v1/rpcapi"
    cfg.setdefault("database", {})
    cfg["database"].setdefault("sql_alchemy_conn", f"sqlite:///{home / METADATA_DB}")
    cfg.setdefault("logging", {})
    cfg["logging"]["base_log_folder"] = str(home / "logs")
    cfg.setdefault("api_auth", {})
    cfg["api_auth"].setdefault("jwt_secret", secrets.token_urlsafe(32))
    cfg["api"].setdefault("secret_key", secrets.token_urlsafe(32))
    with path.open("w") as out:
        cfg.write(out)
    return path, api_url


def _ensure_password(home: Path) -> None:
    """The API user's password, written before the API server starts (it would otherwise
    generate one); `run --cluster` reads it from here."""
    path = home / PASSWORDS_FILE
    if not path.exists():
        path.write_text(json.dumps({API_USER: secrets.token_urlsafe(16)}))
        path.chmod(0o600)


def api_credentials(home: Path) -> tuple[str, str]:
    """(user, password) for the cluster's REST API: from the environment
    (BENCHLEDGER_AIRFLOW_USER / BENCHLEDGER_AIRFLOW_PASSWORD, for a production deployment),
    else the local cluster's password file."""
    user = os.environ.get("BENCHLEDGER_AIRFLOW_USER")
    password = os.environ.get("BENCHLEDGER_AIRFLOW_PASSWORD")
    if user and password:
        return user, password
    path = Path(home) / PASSWORDS_FILE
    try:
        return API_USER, json.loads(path.read_text())[API_USER]
    except (OSError, ValueError, KeyError) as exc:
        raise ClusterError(f"no API credentials: set BENCHLEDGER_AIRFLOW_USER and "
                           f"BENCHLEDGER_AIRFLOW_PASSWORD, or use a folder made by "
                           f"`benchledger cluster up` ({path}: {exc})") from exc


def airflow_env(home: Path) -> dict[str, str]:
    """The environment of every process of the deployment: its own AIRFLOW_HOME and
    config; Airflow settings inherited from the caller's environment are dropped, so the
    folder's airflow.cfg is the whole truth about the deployment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW_CONFIG": str(home / CONFIG_FILE),
                HOME_ENV: str(home), "PYTHONUNBUFFERED": "1"})
    return env


def _airflow() -> list[str]:
    return [sys.executable, "-m", "airflow"]


def _start(home: Path, name: str, args: list[str]) -> ClusterProcess:
    log = home / "logs" / f"{name.replace(':', '-')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = _airflow() + args
    with open(log, "ab") as out:
        # Its own session: `down` can signal the process and its group, and a Ctrl-C in
        # the terminal that ran `up` does not reach the deployment.
        proc = subprocess.Popen(command, env=airflow_env(home), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=home, start_new_session=True)
    return ClusterProcess(name=name, pid=proc.pid,
                          create_time=psutil.Process(proc.pid).create_time(),
                          command=command, log=str(log))


def _migrate(home: Path) -> None:
    log = home / "logs" / "db-migrate.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        rc = subprocess.run(_airflow() + ["db", "migrate"], env=airflow_env(home),
                            stdout=out, stderr=subprocess.STDOUT, cwd=home,
                            timeout=300, check=False).returncode
    if rc != 0:
        raise ClusterError(f"`airflow db migrate` failed (exit {rc}); see {log}")


def _wait(what: str, check: Callable[[], str | None], timeout_s: float,
          watched: list[ClusterProcess]) -> None:
    """Wait until check() returns None (it returns what is still missing); fail at once
    when one of the watched processes died, naming its log."""
    deadline = time.monotonic() + timeout_s
    missing: str | None = what
    while time.monotonic() < deadline:
        for proc in watched:
            if proc.process() is None:
                raise ClusterError(f"{proc.name} exited while waiting for {what}; "
                                   f"see {proc.log}")
        missing = check()
        if missing is None:
            return
        time.sleep(POLL_S)
    raise ClusterError(f"timed out after {timeout_s:.0f}s waiting for {what}: {missing}")


def _health(api_url: str) -> dict | None:
    try:
        response = httpx.get(f"{api_url}/api/v2/monitor/health", timeout=5)
    except httpx.HTTPError:
        return None
    return response.json() if response.status_code == 200 else None


def _heads_missing(api_url: str) -> str | None:
    health = _health(api_url)
    if health is None:
        return "the API server does not answer /api/v2/monitor/health yet"
    unhealthy = [part for part in ("metadatabase", "scheduler", "dag_processor")
                 if (health.get(part) or {}).get("status") != "healthy"]
    return f"not healthy yet: {', '.join(unhealthy)}" if unhealthy else None


def up(home: Path, nodes: list[str], port: int | None = None,
       settings: dict[str, dict[str, str]] | None = None, timeout_s: float = UP_TIMEOUT_S,
       say: Callable[[str], None] = print) -> Cluster:
    """Start the deployment (or what of it is not running) and return once it is healthy."""
    home = Path(home).resolve()
    home.mkdir(parents=True, exist_ok=True)
    (home / "dags").mkdir(exist_ok=True)
    previous = Cluster.load(home) if (home / STATE_FILE).exists() else None
    running = {p.name: p for p in (previous.processes if previous else []) if p.process()}
    if previous and not port:
        port = int(previous.api_url.rsplit(":", 1)[1])
    _, api_url = write_config(home, port, settings)
    _ensure_password(home)
    cluster = Cluster(home=home, api_url=api_url, nodes=nodes, processes=list(running.values()))
    if "api-server" not in running:
        _migrate(home)

    def start(name: str, args: list[str]) -> None:
        if name in running:
            return
        cluster.processes.append(_start(home, name, args))
        cluster.save()  # recorded at once: `down` can stop it even if `up` fails later

    start("api-server", ["api-server", "--port", api_url.rsplit(":", 1)[1],
                         "--host", "127.0.0.1"])
    start("scheduler", ["scheduler", "--skip-serve-logs"])
    start("dag-processor", ["dag-processor"])
    _wait("the API server, scheduler and DAG processor", lambda: _heads_missing(api_url),
          timeout_s, cluster.processes)
    client = ApiClient(api_url, *api_credentials(home))
    client.ensure_pool(WAREHOUSE_POOL, WAREHOUSE_POOL_SLOTS, POOL_DESCRIPTION)
    # Workers only once the API answers: they register with it when they start.
    (home / "run").mkdir(exist_ok=True)
    _wait("the records of workers that died to be released",
          lambda: _stale_workers(client, [n for n in nodes
                                          if f"edge-worker:{n}" not in running]),
          timeout_s, cluster.processes)
    for node in nodes:
        start(f"edge-worker:{node}", [
            "edge", "worker", "--edge-hostname", node, "--queues", worker_queues(node, nodes),
            "--pid", str(home / "run" / f"edge-worker-{node}.pid"), "--concurrency", "4"])
    _wait("the edge workers to register", lambda: _workers_missing(client, nodes),
          timeout_s, cluster.processes)
    say(f"cluster up: {api_url} (nodes: {', '.join(nodes)}; home: {home})")
    return cluster


# Edge worker states under which the API lets a new worker take the name.
RELEASED_STATES = {"offline", "unknown", "offline maintenance"}


def _stale_workers(client: ApiClient, nodes: list[str]) -> str | None:
    """Nodes whose worker process is gone but whose registration still looks alive: the
    API refuses a new worker of that name until the executor, missing five heartbeats,
    marks it unknown. Waiting for that beats a worker that exits at once."""
    try:
        workers = {w["worker_name"]: w for w in client.edge_workers()}
    except (httpx.HTTPError, ClusterError) as exc:
        return f"the edge worker list is not available yet ({exc})"
    stale = [n for n in nodes if n in workers and workers[n].get("state") not in RELEASED_STATES]
    return (f"the scheduler has not yet noticed that the worker(s) {', '.join(stale)} died "
            "(it needs five missed heartbeats)") if stale else None


def _workers_missing(client: ApiClient, nodes: list[str]) -> str | None:
    try:
        workers = client.edge_workers()
    except (httpx.HTTPError, ClusterError) as exc:
        return f"the edge worker list is not available yet ({exc})"
    ready = {w["worker_name"] for w in workers if w.get("state") in ("idle", "running")}
    missing = [n for n in nodes if n not in ready]
    return f"not registered yet: {', '.join(missing)}" if missing else None


def status(home: Path) -> list[dict[str, Any]]:
    """One row per recorded process (running or not) and per edge worker the API knows."""
    cluster = Cluster.load(home)
    rows: list[dict[str, Any]] = [{"name": p.name, "pid": p.pid,
             "state": "running" if p.process() else "not running", "log": p.log}
            for p in cluster.processes]
    health = _health(cluster.api_url)
    for row in rows:
        part = {"api-server": "metadatabase", "scheduler": "scheduler",
                "dag-processor": "dag_processor"}.get(row["name"])
        if health is None and row["state"] == "running" and part:
            row["health"] = "API not answering"
        elif part and health is not None:
            row["health"] = (health.get(part) or {}).get("status", "unknown")
    if health is not None:
        try:
            workers = ApiClient(cluster.api_url, *api_credentials(home)).edge_workers()
        except (httpx.HTTPError, ClusterError) as exc:
            workers = []
            rows.append({"name": "edge workers", "state": f"unknown ({exc})"})
        by_name = {w["worker_name"]: w for w in workers}
        for row in rows:
            node = row["name"].removeprefix("edge-worker:")
            if row["name"].startswith("edge-worker:"):
                worker = by_name.get(node, {})
                row["health"] = worker.get("state", "not registered")
                row["queues"] = ",".join(worker.get("queues") or [])
    return rows


def down(home: Path, grace_s: float = STOP_GRACE_S) -> list[str]:
    """Stop exactly the processes `up` started (and everything they started: task
    processes and the servers under test): the workers together, then the rest together
    (a worker reports its last state to the API server). One line per process."""
    cluster = Cluster.load(home)
    lines = []
    workers = [p for p in cluster.processes if p.name.startswith("edge-worker")]
    heads = [p for p in cluster.processes if not p.name.startswith("edge-worker")]
    for group in (workers, heads):
        running = {record.name: record.process() for record in group}
        for record in group:
            if running[record.name] is None:
                lines.append(f"{record.name} (pid {record.pid}): was not running")
        stopped = _stop_trees([proc for proc in running.values() if proc], grace_s)
        lines += [f"{record.name} (pid {record.pid}): {stopped[record.pid]}"
                  for record in group if running[record.name]]
    leftovers = deployment_processes(cluster.home)
    if leftovers:
        _stop_trees(leftovers, grace_s)
        lines.append(f"stopped {len(leftovers)} more process(es) the deployment's tasks had "
                     "started (servers under test): "
                     + ", ".join(f"{p.pid} {_name(p)}" for p in leftovers))
    cluster.processes = []
    cluster.save()
    return lines


def deployment_processes(home: Path) -> list[psutil.Process]:
    """Live processes that belong to the deployment in `home`: by the HOME_ENV they
    inherited, or by their working folder (cluster up starts everything in `home`; a
    process that retitles itself may garble its own environment, so both)."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.cwd() == str(home) or proc.environ().get(HOME_ENV) == str(home):
                found.append(proc)
        except psutil.Error:  # gone, or not ours to read
            continue
    return found


def _name(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())[:80]
    except psutil.Error:
        return "?"


def _stop_trees(roots: list[psutil.Process], grace_s: float) -> dict[int, str]:
    """SIGTERM each root and its descendants, then SIGKILL whatever outlives the grace
    period; {root pid: what happened}. The trees are listed first: Airflow's task
    processes start their own process groups, so signalling a group would leave them (and
    the servers they run) behind."""
    trees = {}
    for root in roots:
        try:
            trees[root.pid] = [root, *root.children(recursive=True)]
        except psutil.Error:
            trees[root.pid] = [root]
    members = [member for tree in trees.values() for member in tree]
    for member in members:
        with contextlib.suppress(psutil.Error):
            member.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(members, timeout=grace_s)
    for member in alive:
        with contextlib.suppress(psutil.Error):
            member.kill()
    psutil.wait_procs(alive, timeout=5)
    killed = {member.pid for member in alive}
    return {pid: f"stopped ({len(tree)} processes"
                 + (f", {sum(m.pid in killed for m in tree)} killed)" if killed else ")")
            for pid, tree in trees.items()}


class ApiClient:
    """Airflow's stable REST API (/api/v2), authenticated with a JWT from /auth/token.

    Every call has a timeout; a transport error or a server error (5xx) is retried for
    `retry_s` (an API server restarting, a busy metadata DB), a definite HTTP refusal (4xx)
    is raised at once with the server's reason.
    """

    def __init__(self, api_url: str, user: str, password: str, retry_s: float = 60.0,
                 transport: httpx.BaseTransport | None = None):
        self.api_url = api_url.rstrip("/")
        self._credentials = {"username": user, "password": password}
        self._token: str | None = None
        self.retry_s = retry_s
        self._http = httpx.Client(timeout=30, transport=transport)

    def _authenticate(self) -> str:
        response = self._http.post(f"{self.api_url}/auth/token", json=self._credentials)
        if response.status_code not in (200, 201):
            raise ClusterError(f"the Airflow API at {self.api_url} refused the login of "
                               f"{self._credentials['username']!r}: HTTP "
                               f"{response.status_code} {response.text[:200]}")
        return response.json()["access_token"]

    def request(self, method: str, path: str, ok_missing: bool = False,
                **kwargs: Any) -> Any:
        deadline = time.monotonic() + self.retry_s
        fresh = False  # whether the token sent was obtained by this very call
        while True:
            try:
                if self._token is None:
                    self._token, fresh = self._authenticate(), True
                response = self._http.request(
                    method, f"{self.api_url}{path}",
                    headers={"Authorization": f"Bearer {self._token}"}, **kwargs)
            except httpx.TransportError as exc:
                if time.monotonic() > deadline:
                    raise ClusterError(f"the Airflow API at {self.api_url} did not answer "
                                       f"for {self.retry_s:.0f}s: {exc}") from exc
                time.sleep(1)
                continue
            if response.status_code == 401:
                self._token = None
                if fresh or time.monotonic() > deadline:
                    # A token it has just issued refused: logging in again cannot help.
                    raise ClusterError(
                        f"{method} {path}: the Airflow API at {self.api_url} refused the "
                        f"token it had just issued to {self._credentials['username']!r}: "
                        f"HTTP 401 {response.text[:300]}")
                continue  # the kept token expired: log in again, once
            if response.status_code == 404 and ok_missing:
                return None
            if response.status_code >= 500 and time.monotonic() < deadline:
                # The server's trouble, not a refusal: on SQLite a busy metadata DB answers
                # 500 "Database error" while another process writes. Ask again, bounded.
                time.sleep(1)
                continue
            if response.status_code >= 400:
                raise ClusterError(f"{method} {path}: HTTP {response.status_code} "
                                   f"{response.text[:300]}")
            return response.json() if response.content else {}

    def edge_workers(self) -> list[dict]:
        return self.request("GET", "/edge_worker/ui/worker")["workers"]

    def ensure_pool(self, name: str, slots: int, description: str) -> None:
        pool = self.request("GET", f"/api/v2/pools/{name}", ok_missing=True)
        body = {"name": name, "slots": slots, "description": description,
                "include_deferred": False}
        if pool is None:
            self.request("POST", "/api/v2/pools", json=body)
        elif pool.get("slots") != slots:
            self.request("PATCH", f"/api/v2/pools/{name}", json=body)
