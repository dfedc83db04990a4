"""`benchledger cluster up|status|down`: a real Airflow 3 deployment in one folder.

For development and CI, on one machine: the API server, the scheduler, the DAG processor,
the triggerer and one Airflow Edge worker per node (worker name = node name, serving the
queue of the same name; the first node's worker serves the default queue too). It is the
same executor and REST API a production deployment uses (see README, "Running on a
cluster"); only the metadata DB (SQLite in the folder) and the single host differ.

Every process runs under one supervisord per folder (benchledger.cluster.supervisor): one
that exits is started again, with a backoff while it keeps failing, and `cluster status`
says each one's state, how often it was started and, for one that is down, the last error
line of its log. The settings that keep workers alive through an API server that stalls
for a minute are in _DEFAULTS (docs/cluster.md, "Surviving a stalled API server").

Everything lives under the folder: `airflow.cfg` (the deployment's settings; edit it and
run `cluster down` / `cluster up` to apply), `supervisord.conf`, `cluster.json` (the API
URL, the nodes and supervisord's pid and start time, so `down` stops exactly that), `logs/`,
`dags/`, the metadata DB and the API user's password file. The folder is private to its
owner (0700), and so is every file in it that holds a secret (cluster_config: the files it
writes, PROCESS_UMASK for what the processes create). This module never imports
Airflow: it runs Airflow's own command line in child processes and talks to the REST API
over HTTP.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchledger.cluster import supervisor
from benchledger.cluster.airflow_api import ApiClient, ClusterError
from benchledger.cluster.config import (  # the folder's files
    HOME_ENV,
    LOOPBACK,
    POLL_S,
    PROCESS_UMASK,
    STATE_FILE,
    STOP_GRACE_S,
    UP_TIMEOUT_S,
    _ensure_password,
    airflow_env,
    all_workers,
    api_credentials,
    database_settings,
    install_ui_plugin,
    open_private_log,
    private_home,
    worker_queues,
    write_config,
    write_join_file,
)
from benchledger.warehouse import POOL_DESCRIPTION, WAREHOUSE_POOL, WAREHOUSE_POOL_SLOTS


def _after_boot(proc: psutil.Process) -> float:
    """When `proc` started, in seconds after the machine booted: fixed for its life, where
    psutil's create_time() (boot time + that) moves whenever the wall clock is stepped
    (NTP, a VM's clock sync): ci63 saw two running deployments taken for exited, their
    supervisord's create_time no longer matching the one `up` recorded."""
    return proc.create_time() - psutil.boot_time()


@dataclass
class ClusterProcess:
    name: str  # supervisord
    pid: int
    create_time: float  # psutil's, at start (kept for records written before after_boot_s)
    command: list[str]
    log: str
    after_boot_s: float | None = None  # _after_boot(): a reused pid never matches it

    def process(self) -> psutil.Process | None:
        """The process this record started, if it still runs (never a pid's new owner)."""
        try:
            proc = psutil.Process(self.pid)
            same = (abs(_after_boot(proc) - self.after_boot_s) < 0.01
                    if self.after_boot_s is not None
                    else abs(proc.create_time() - self.create_time) < 0.01)
            if same and proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                return proc
        except psutil.Error:
            pass
        return None


@dataclass
class Cluster:
    """One local deployment: where it lives, its API, its nodes and its supervisord."""

    home: Path
    api_url: str
    nodes: list[str]
    supervisor: ClusterProcess | None
    workers_per_node: int = 1

    @property
    def dags_folder(self) -> Path:
        return self.home / "dags"

    @property
    def api_host(self) -> str:
        return self.api_url.removeprefix("http://").rsplit(":", 1)[0]

    def save(self) -> None:
        data = {"api_url": self.api_url, "nodes": self.nodes,
                "workers_per_node": self.workers_per_node,
                "supervisor": asdict(self.supervisor) if self.supervisor else None}
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
        record = data.get("supervisor")
        return cls(home=home, api_url=data["api_url"], nodes=list(data["nodes"]),
                   supervisor=ClusterProcess(**record) if record else None,
                   workers_per_node=int(data.get("workers_per_node", 1)))

    def supervisord(self) -> psutil.Process | None:
        return self.supervisor.process() if self.supervisor else None

    def pid_of(self, program: str) -> int | None:
        """The pid of a running program (e.g. "edge-worker-node-a"), or None."""
        infos = supervisor.process_infos(self.home) or {}
        info = infos.get(program)
        return info["pid"] if info and info["statename"] == "RUNNING" else None


def _airflow() -> list[str]:
    return [sys.executable, "-m", "airflow"]


def edge_worker_command(home: Path, worker: str, queues: str) -> list[str]:
    """One Edge worker's command (`up`'s workers and `join`'s): Airflow's `edge worker`
    through benchledger.cluster.edge_worker, which loads what the tasks import first."""
    return [sys.executable, "-m", "benchledger.cluster.edge_worker", "--edge-hostname", worker,
            "--queues", queues, "--pid", str(home / "run" / f"edge-worker-{worker}.pid"),
            "--concurrency", "4"]


def _programs(home: Path, api_url: str, nodes: list[str],
              workers_per_node: int = 1) -> list[supervisor.Program]:
    """Every process of the deployment, in start order. The workers are started by `up`
    once the API answers (they register with it when they start)."""
    host, port = api_url.removeprefix("http://").rsplit(":", 1)

    def head(name: str, *args: str) -> supervisor.Program:
        return supervisor.Program(name, [*_airflow(), *args], True, supervisor.HEAD_STARTSECS)

    programs = [head("api-server", "api-server", "--port", port, "--host", host),
                head("scheduler", "scheduler", "--skip-serve-logs"),
                head("dag-processor", "dag-processor"),
                # deferrable operators and sensors wait in the triggerer; without one the
                # UI shows it missing (red), and a deferred task would wait for ever
                head("triggerer", "triggerer", "--skip-serve-logs")]
    for node, worker in all_workers(nodes, workers_per_node):
        programs.append(supervisor.Program(
            supervisor.worker_program(worker),
            edge_worker_command(home, worker, worker_queues(node, nodes)),
            False, supervisor.WORKER_STARTSECS))
    return programs


def _start_supervisord(home: Path, env: dict[str, str] | None = None) -> ClusterProcess:
    log = home / "logs" / "supervisord.out"
    command = supervisor.supervisord_command(home)
    with os.fdopen(open_private_log(log), "ab") as out:
        # Its own session: `down` can stop it and all it started, and a Ctrl-C in the
        # terminal that ran `up` does not reach the deployment. Its umask is every
        # process's of the deployment: supervisord's own logs, pid file and socket, and
        # all Airflow creates (the SQLite DB, logs) are private (supervisord applies its
        # `umask` setting only when it daemonizes).
        proc = subprocess.Popen(command, env={**airflow_env(home), **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=home, start_new_session=True, umask=PROCESS_UMASK)
    started = psutil.Process(proc.pid)
    return ClusterProcess(name="supervisord", pid=proc.pid, create_time=started.create_time(),
                          command=command, log=str(log), after_boot_s=_after_boot(started))


def _migrate(home: Path) -> None:
    log = home / "logs" / "db-migrate.log"
    with os.fdopen(open_private_log(log), "ab") as out:
        # it creates the SQLite metadata DB: private from its first byte
        rc = subprocess.run(_airflow() + ["db", "migrate"], env=airflow_env(home),
                            stdout=out, stderr=subprocess.STDOUT, cwd=home,
                            timeout=300, check=False, umask=PROCESS_UMASK).returncode
    if rc != 0:
        raise ClusterError(f"`airflow db migrate` failed (exit {rc}); see {log}")


def _wait(what: str, check: Callable[[], str | None], timeout_s: float,
          cluster: Cluster) -> None:
    """Wait until check() returns None (it returns what is still missing); fail at once
    when supervisord died or gave up on a process, naming its log."""
    deadline = time.monotonic() + timeout_s
    missing: str | None = what
    while time.monotonic() < deadline:
        if cluster.supervisord() is None:
            raise ClusterError(f"supervisord exited while waiting for {what}; see "
                               f"{cluster.home / 'logs' / supervisor.LOG_FILE}")
        for name, info in (supervisor.process_infos(cluster.home) or {}).items():
            if info["statename"] == "FATAL":
                log = supervisor.log_path(cluster.home, name)
                raise ClusterError(f"{name} kept exiting while waiting for {what} "
                                   f"(supervisord gave up); its last error: "
                                   f"{supervisor.last_error_line(log)}; see {log}")
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
       say: Callable[[str], None] = print, db: str | None = None,
       workers_per_node: int = 1, host: str = LOOPBACK) -> Cluster:
    """Start the deployment (or what of it is not running) and return once it is healthy.
    db: the metadata database's URL (default: SQLite in the folder); workers_per_node:
    Edge workers serving each node's queue (more than one needs PostgreSQL); host: the
    address the API server listens on (workers on other hosts join it: cluster_join)."""
    home = Path(home).resolve()
    settings = {**(settings or {}), **database_settings(db, workers_per_node)}
    private_home(home, ("dags", "logs", "run"))
    previous = Cluster.load(home) if (home / STATE_FILE).exists() else None
    running = previous.supervisord() if previous else None
    if running is not None and previous is not None and (
            previous.nodes, previous.workers_per_node, previous.api_host) != (
            nodes, workers_per_node, host):
        raise ClusterError(f"the deployment in {home} runs the nodes "
                           f"{','.join(previous.nodes)} with {previous.workers_per_node} "
                           f"worker(s) each, its API on {previous.api_host}; to change "
                           f"that, run "
                           f"`benchledger cluster down --home {home}` first")
    if previous and not port:
        port = int(previous.api_url.rsplit(":", 1)[1])
    _, api_url = write_config(home, port, settings, host)
    _ensure_password(home)
    install_ui_plugin(home)
    write_join_file(home, api_url)
    programs = _programs(home, api_url, nodes, workers_per_node)
    cluster = Cluster(home=home, api_url=api_url, nodes=nodes,
                      supervisor=previous.supervisor if running and previous else None,
                      workers_per_node=workers_per_node)
    if running is None:
        _migrate(home)
        supervisor.write_conf(home, programs)
        cluster.supervisor = _start_supervisord(home)
        cluster.save()  # recorded at once: `down` can stop it even if `up` fails later
        _wait("supervisord", lambda: None if supervisor.process_infos(home) is not None
              else "supervisord does not answer on its socket yet", timeout_s, cluster)
    for program in programs:  # what exited or was stopped, supervisord starts again
        if not program.is_worker:
            supervisor.start(home, program.name)
    _wait("the API server, scheduler and DAG processor", lambda: _heads_missing(api_url),
          timeout_s, cluster)
    client = ApiClient(api_url, *api_credentials(home))
    client.ensure_pool(WAREHOUSE_POOL, WAREHOUSE_POOL_SLOTS, POOL_DESCRIPTION)
    # Workers only once the API answers: they register with it when they start.
    workers = [name for _, name in all_workers(nodes, workers_per_node)]
    infos = supervisor.process_infos(home) or {}
    stopped = [name for name in workers if (infos.get(supervisor.worker_program(name)) or {})
               .get("statename") not in ("RUNNING", "STARTING", "BACKOFF")]
    _wait("the records of workers that died to be released",
          lambda: _stale_workers(client, stopped), timeout_s, cluster)
    for name in stopped:
        supervisor.start(home, supervisor.worker_program(name))
    _wait("the edge workers to register", lambda: _workers_missing(client, workers),
          timeout_s, cluster)
    say(f"cluster up: {api_url} (nodes: {', '.join(nodes)}"
        + (f", {workers_per_node} workers each" if workers_per_node > 1 else "")
        + f"; home: {home})")
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
    """One row per process of the deployment: its state (supervisord's, lower case),
    pid, how often it was started, and for one that is not running its last exit and
    the last error line of its log; the heads' health and the workers' registrations
    from the API."""
    cluster = Cluster.load(home)
    infos = supervisor.process_infos(cluster.home) if cluster.supervisord() else None
    if infos is None:
        return [{"name": "supervisord", "state": "not running",
                 "log": str(cluster.home / "logs" / supervisor.LOG_FILE)}]
    past = supervisor.history(cluster.home)
    rows: list[dict[str, Any]] = []
    for name, info in infos.items():
        row: dict[str, Any] = {"name": name, "state": info["statename"].lower(),
                               "starts": past.get(name, {}).get("starts", 0),
                               "log": str(supervisor.log_path(cluster.home, name))}
        if info["statename"] in supervisor.UP_STATES:
            row["pid"] = info["pid"]
        else:
            row["last_exit"] = past.get(name, {}).get("last_exit") or info["description"]
            row["last_error"] = supervisor.last_error_line(Path(row["log"]))
        rows.append(row)
    health = _health(cluster.api_url)
    for row in rows:
        part = {"api-server": "metadatabase", "scheduler": "scheduler",
                "dag-processor": "dag_processor", "triggerer": "triggerer"}.get(row["name"])
        if health is None and "pid" in row and part:
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
            if row["name"].startswith("edge-worker-"):
                worker = by_name.get(row["name"].removeprefix("edge-worker-"), {})
                row["health"] = worker.get("state", "not registered")
                row["queues"] = ",".join(worker.get("queues") or [])
    return rows


def down(home: Path, grace_s: float = STOP_GRACE_S) -> list[str]:
    """Stop the deployment: the workers together first (a worker reports its last state
    to the API server), then the rest, then supervisord, then whatever the deployment's
    tasks started that outlived them (servers under test). One line per process."""
    cluster = Cluster.load(home)
    lines = []
    daemon = cluster.supervisord()
    infos = supervisor.process_infos(cluster.home) if daemon else None
    if daemon is None or infos is None:
        lines.append("supervisord: was not running")
    else:
        pids = {name: info["pid"] for name, info in infos.items()
                if info["statename"] in ("RUNNING", "STARTING", "BACKOFF")}
        workers = [n for n in infos if n.startswith("edge-worker-")]
        for group in (workers, [n for n in infos if n not in workers]):
            supervisor.stop(cluster.home, [n for n in group if n in pids])
            _wait_stopped(cluster.home, group, supervisor.STOP_WAIT_S + 10)
        for name in infos:
            lines.append(f"{name} (pid {pids[name]}): stopped" if name in pids
                         else f"{name}: was not running")
        supervisor.shutdown(cluster.home)
        stopped = _stop_trees([daemon], grace_s)  # returns at once if it has shut down
        lines.append(f"supervisord (pid {daemon.pid}): {stopped[daemon.pid]}")
    leftovers = deployment_processes(cluster.home)
    if leftovers:
        _stop_trees(leftovers, grace_s)
        lines.append(f"stopped {len(leftovers)} more process(es) the deployment's tasks had "
                     "started (servers under test): "
                     + ", ".join(f"{p.pid} {_name(p)}" for p in leftovers))
    cluster.supervisor = None
    cluster.save()
    return lines


def _wait_stopped(home: Path, names: list[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        infos = supervisor.process_infos(home) or {}
        if all((infos.get(n) or {}).get("statename") not in ("RUNNING", "STARTING",
                                                               "BACKOFF", "STOPPING")
               for n in names):
            return
        time.sleep(POLL_S)


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
