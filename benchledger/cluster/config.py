"""The folder of a local deployment, as files: its airflow.cfg (the settings every process
of the deployment shares, and the defaults that keep workers alive through a stalled API
server), the join file for workers on other hosts, the API user's password, node and
worker names, and the environment every process gets. No process is started here
(benchledger.cluster.commands starts them); Airflow is never imported.

The folder and every file in it that holds a secret are its owner's alone (issue #39):
airflow.cfg holds the JWT secret (whoever reads it signs an admin token for the REST API
and the UI, or poses as an Edge worker), the API's session key, the fernet key and the
metadata database's URL; the metadata DB holds the connections' passwords; the logs what
tasks printed. The files written here are created 0600, the folder 0700, and every
process of the deployment runs with PROCESS_UMASK, so what Airflow and supervisord create
themselves (the SQLite DB and its journals, logs, pid files) is private from its start."""

from __future__ import annotations

import configparser
import importlib.util
import io
import json
import os
import secrets
import socket
import stat
from collections.abc import Iterable
from pathlib import Path

from cryptography.fernet import Fernet

from benchledger.cluster.airflow_api import ClusterError
from benchledger.raw.store import LOCAL_COPY_ENV
from benchledger.redaction import shown_location
from benchledger.settings import settings as read_settings
from benchledger.settings import variable

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
HOME_ENV = variable("cluster_home")
LOOPBACK = "127.0.0.1"
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
# The umask of every process of the deployment (supervisord and what it starts, `airflow db
# migrate`): the files they create are their owner's alone, whatever the caller's umask.
PROCESS_UMASK = 0o077
# What a folder made before its files were private may hold with group or other bits
# (the top level, and these subfolders whole): tightened by every `up` and `join`.
_PRIVATE_TREES = ("logs", "run")

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
                  # A task whose heartbeat stopped (its worker vanished) is failed, then
                  # retried, after this long; longer than an API stall a run survives.
                  "task_instance_heartbeat_timeout": "180",
                  "standalone_dag_processor": "True"},
    # An Edge worker signs each request with a token valid for jwt_leeway seconds, and the
    # API accepts it jwt_leeway seconds past that: Airflow's 10 s made a request that
    # waited 20 s on a busy API server a 403, and the worker exit. 120 s: 4 minutes.
    "api_auth": {"jwt_leeway": "120"},
    # A task's calls to the execution API (heartbeats among them) are retried for minutes,
    # not about one: a stalled API server is waited for. The wait between tries is capped
    # at 5 s, not Airflow's 90 s: with 90 s a heartbeat retried through a 60 s stall landed
    # up to 95 s after it, and a task whose heartbeat is older than
    # task_instance_heartbeat_timeout is failed by the scheduler (the TI no longer running:
    # "Server indicated the task shouldn't be running anymore"). 30 tries of 5 s timeout
    # and up to 5 s wait: a stall of 3 to 5 minutes is waited for; a heartbeat lands within
    # about 10 s of the API's return.
    "workers": {"execution_api_retries": "30", "execution_api_retry_wait_max": "5"},
    "api": {"workers": "1", "expose_config": "False"},
    # Airflow chmods each task log it creates to these (0o664 and 0o775 by default,
    # whatever the umask): the logs are private like the rest of the folder.
    "logging": {"colored_console_log": "False",
                "file_task_handler_new_folder_permissions": oct(PRIVATE_DIR),
                "file_task_handler_new_file_permissions": oct(PRIVATE_FILE)},
}


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
    """The queues a node's workers serve: its own, and on the first node the default queue.
    On SQLite, one worker per queue: the Edge API's job claim (SELECT ... FOR UPDATE SKIP
    LOCKED) locks nothing there, and two workers polling one queue were both handed the
    same task instance (the second copy failed the run: "TI was not in the running
    state"). On PostgreSQL the claim locks the row, and a node may have several workers."""
    return f"{node},{DEFAULT_QUEUE}" if node == nodes[0] else node


def worker_names(node: str, per_node: int) -> list[str]:
    """The Edge worker names of a node: the node's own name, then <node>-w2, <node>-w3..."""
    return [node, *(f"{node}-w{i}" for i in range(2, per_node + 1))]


def all_workers(nodes: list[str], per_node: int) -> list[tuple[str, str]]:
    """(node, worker name) of every worker of the deployment."""
    return [(node, name) for node in nodes for name in worker_names(node, per_node)]


def database_settings(db: str | None, per_node: int) -> dict[str, dict[str, str]]:
    """`cluster up --db URL --workers-per-node N`, checked: the metadata database's URL
    (SQLite in the folder when None), and whether it allows N workers on one queue."""
    if db is not None and not db.startswith(("postgresql://", "postgresql+psycopg2://",
                                             "sqlite:///")):
        raise ClusterError(f"--db {shown_location(db)}: give a PostgreSQL URL "
                           "(postgresql://USER:PASSWORD@HOST:PORT/DATABASE) or sqlite:///PATH")
    postgres = db is not None and db.startswith("postgresql")
    if postgres and importlib.util.find_spec("psycopg2") is None:
        raise ClusterError("--db postgresql://...: the PostgreSQL driver is not installed "
                           "(pip install 'benchledger[postgres]')")
    if per_node < 1:
        raise ClusterError(f"--workers-per-node {per_node}: at least 1")
    if per_node > 1 and not postgres:
        raise ClusterError(
            f"--workers-per-node {per_node} needs PostgreSQL (--db postgresql://...): on "
            "SQLite the Edge job claim locks nothing, and two workers of one queue are "
            "handed the same task")
    return {"database": {"sql_alchemy_conn": db}} if db else {}


def private_home(home: Path, subfolders: Iterable[str]) -> None:
    """Make the deployment's folder (and its subfolders) private to its owner: created
    0700, and in a folder made before that, group's and others' bits taken off the
    folder, the files at its top and everything under logs/ and run/. ClusterError when
    something there is not the caller's to change."""
    try:
        home.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        home.chmod(PRIVATE_DIR)
        for sub in subfolders:
            (home / sub).mkdir(mode=PRIVATE_DIR, exist_ok=True)
        trees = [home / sub for sub in _PRIVATE_TREES if (home / sub).is_dir()]
        for path in [*home.iterdir(), *(p for tree in trees for p in tree.rglob("*"))]:
            try:
                if path.is_symlink():
                    continue
                mode = stat.S_IMODE(path.stat().st_mode)
                if mode & ~PRIVATE_DIR:
                    path.chmod(mode & PRIVATE_DIR)
            except FileNotFoundError:  # a log rotated away meanwhile
                continue
    except PermissionError as exc:
        raise ClusterError(f"{home}: the deployment's folder must be private to its owner "
                           f"(it holds the deployment's secrets), and this cannot be made "
                           f"so: {exc}; use a folder of your own") from exc


def write_private(path: Path, content: str | bytes) -> None:
    """Write a file whole (a temp file renamed into place), readable by its owner only
    from its first byte."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    os.fchmod(fd, PRIVATE_FILE)  # a temp file left by an earlier try keeps its own mode
    with os.fdopen(fd, "wb") as out:
        out.write(content.encode() if isinstance(content, str) else content)
    tmp.replace(path)


def open_private_log(path: Path) -> int:
    """A log file of the folder opened for appending (a file descriptor), created 0600."""
    path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)


def _free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def write_config(home: Path, port: int | None = None,
                 settings: dict[str, dict[str, str]] | None = None,
                 host: str = LOOPBACK) -> tuple[Path, str]:
    """Write (or update) the folder's airflow.cfg; returns (its path, the API URL). The API
    server listens on `host` (loopback, or an address workers on other hosts reach).

    Secrets are generated once and kept: every process must share `[api_auth] jwt_secret`,
    and `[core] fernet_key` encrypts the connections' passwords in the metadata DB (Airflow
    stores them in plain text without one). The file is private to its owner (0600).
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
    refused = [f"{section}.{key}={value}" for section, values in (settings or {}).items()
               for key, value in values.items()
               if _ENFORCED.get(section, {}).get(key, value) != value]
    if refused:
        raise ClusterError(f"--config {', '.join(refused)}: the local deployment needs "
                           + ", ".join(f"{s}.{k}={v}" for s, vs in _ENFORCED.items()
                                       for k, v in vs.items())
                           + " (benchledger sets them whatever airflow.cfg says)")
    # Key by key: a setting of one section (--config edge.job_poll_interval=2) adds to
    # what that section enforces, it does not replace the section (which left the Edge
    # API off and `cluster up` failing on the page the API server answered instead).
    for section, values in [*(settings or {}).items(), *_ENFORCED.items()]:
        cfg.setdefault(section, {})
        cfg[section].update(values)
    if port is None:
        port = int(cfg["api"].get("port") or _free_port(host))
    api_url = f"http://{host}:{port}"
    cfg["api"].update({"host": host, "port": str(port), "base_url": api_url})
    cfg["core"].update({
        "dags_folder": str(home / "dags"),
        "plugins_folder": str(home / PLUGINS_FOLDER),
        "execution_api_server_url": f"{api_url}/execution/",
        "simple_auth_manager_passwords_file": str(home / PASSWORDS_FILE),
    })
    cfg["edge"]["api_url"] = f"{api_url}/edge_worker/v1/rpcapi"
    cfg.setdefault("database", {})
    cfg["database"].setdefault("sql_alchemy_conn", f"sqlite:///{home / METADATA_DB}")
    cfg.setdefault("logging", {})
    cfg["logging"]["base_log_folder"] = str(home / "logs")
    cfg.setdefault("api_auth", {})
    # 64 bytes: PyJWT warns of a shorter HMAC key for the SHA-512 Airflow signs with
    cfg["api_auth"].setdefault("jwt_secret", secrets.token_urlsafe(64))
    cfg["api"].setdefault("secret_key", secrets.token_urlsafe(32))
    if not cfg["core"].get("fernet_key"):  # kept once made: it decrypts what it encrypted
        cfg["core"]["fernet_key"] = Fernet.generate_key().decode()
    write_private(path, config_text(cfg))
    return path, api_url


def config_text(cfg: configparser.ConfigParser) -> str:
    out = io.StringIO()
    cfg.write(out)
    return out.getvalue()


PLUGINS_FOLDER = "plugins"
UI_PLUGIN_FILE = "benchledger_ui.py"
# The one file that puts the benchledger page into the deployment's Airflow UI: Airflow
# registers the plugin class it imports (operators/ui_plugin.py). A file in the
# deployment's plugins folder, not a package entry point, so the page is the deployment's
# choice: installing benchledger into some other Airflow adds nothing to its UI.
UI_PLUGIN_SOURCE = '''"""Written by `benchledger cluster up`: the benchledger page in the Airflow UI
(docs/cluster.md, "The Airflow UI")."""
from benchledger.operators.ui_plugin import BenchledgerUiPlugin  # noqa: F401
'''


def install_ui_plugin(home: Path) -> Path:
    """Write the plugin file into the deployment's plugins folder (the API server loads it
    when it starts)."""
    path = home / PLUGINS_FOLDER / UI_PLUGIN_FILE
    path.parent.mkdir(exist_ok=True)
    if not path.exists() or path.read_text() != UI_PLUGIN_SOURCE:
        path.write_text(UI_PLUGIN_SOURCE)
    return path


JOIN_FILE = "join.json"
# the head's settings a worker must not have (secrets it does not need) or must set itself
_HEAD_ONLY = {("database", "sql_alchemy_conn"), ("api", "secret_key"),
              # only the head's processes open the metadata DB the connections are in
              ("core", "fernet_key"),
              ("core", "simple_auth_manager_passwords_file"),
              # the benchledger page is served by the head's API server only
              ("core", "plugins_folder"),
              ("logging", "base_log_folder")}


def write_join_file(home: Path, api_url: str) -> Path:
    """What a worker on another host needs to join the deployment in `home`."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.optionxform = str  # type: ignore[assignment, method-assign]
    cfg.read(home / CONFIG_FILE)
    settings = {section: {k: v for k, v in cfg[section].items()
                          if (section, k) not in _HEAD_ONLY}
                for section in cfg.sections()}
    path = home / JOIN_FILE
    write_private(path, json.dumps({"api_url": api_url, "dags_folder": str(home / "dags"),
                                    "airflow_cfg": settings}, indent=2))
    return path


def _ensure_password(home: Path) -> None:
    """The API user's password, written before the API server starts (it would otherwise
    generate one); `run --cluster` reads it from here."""
    path = home / PASSWORDS_FILE
    if not path.exists():
        write_private(path, json.dumps({API_USER: secrets.token_urlsafe(16)}))


def api_credentials(home: Path) -> tuple[str, str]:
    """(user, password) for the cluster's REST API: from the environment
    (BENCHLEDGER_AIRFLOW_USER / BENCHLEDGER_AIRFLOW_PASSWORD, for a production deployment),
    else the local cluster's password file."""
    current = read_settings()
    user, password = current.airflow_user, current.airflow_password
    if user and password:
        return user, password.get_secret_value()
    path = Path(home) / PASSWORDS_FILE
    try:
        return API_USER, json.loads(path.read_text())[API_USER]
    except (OSError, ValueError, KeyError) as exc:
        raise ClusterError(f"no API credentials: set BENCHLEDGER_AIRFLOW_USER and "
                           f"BENCHLEDGER_AIRFLOW_PASSWORD, or use a folder made by "
                           f"`benchledger cluster up` ({path}: {exc})") from exc


def local_raw_base(home: Path) -> Path:
    """Where this host's processes of the deployment keep their copy of raw files held in
    an object store (benchledger.raw.store): the caller's BENCHLEDGER_LOCAL_RAW_DIR, else
    the folder's object-store/."""
    return read_settings().local_raw_dir or Path(home) / "object-store"


def airflow_env(home: Path) -> dict[str, str]:
    """The environment of every process of the deployment: its own AIRFLOW_HOME and
    config; Airflow settings inherited from the caller's environment are dropped, so the
    folder's airflow.cfg is the whole truth about the deployment. Credentials of an object
    store (AWS_*) pass through from the caller's environment, never into a file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW_CONFIG": str(home / CONFIG_FILE),
                HOME_ENV: str(home), "PYTHONUNBUFFERED": "1",
                LOCAL_COPY_ENV: str(local_raw_base(home))})
    return env
