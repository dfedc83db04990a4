"""The deployment's Airflow processes under supervisord (issue #25: workers that survive).

`cluster up` used to start the API server, scheduler, DAG processor and Edge workers and
leave them alone: a worker that exited (its token refused during an API stall, a crash, a
SIGKILL) stayed down until someone ran `cluster up` again. Now `cluster up` starts one
supervisord per deployment folder (Supervisor, the process manager made for exactly this)
and supervisord starts every process: one that exits is started again, at once after a
good run and with a growing backoff while it keeps dying within `startsecs` of its start,
each start and exit logged in `logs/supervisord.log`. `cluster status` reads the states
through supervisord's XML-RPC interface (a Unix socket in the folder, mode 0700).

This module writes the configuration and talks to supervisord; it never imports Airflow.
"""

from __future__ import annotations

import configparser
import contextlib
import hashlib
import re
import shlex
import sys
import tempfile
import xmlrpc.client
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor.xmlrpc import SupervisorTransport

CONF_FILE = "supervisord.conf"
LOG_FILE = "supervisord.log"  # under logs/
# A worker that dies within this many seconds of its start did not start: supervisord
# waits 1, 2, 3, ... s before each next try (a worker refused while the executor still
# counts its dead predecessor as alive needs about five missed heartbeats).
WORKER_STARTSECS = 20
HEAD_STARTSECS = 10
START_RETRIES = 30  # then FATAL, shown by `cluster status` with its log's last error
STOP_WAIT_S = 20  # SIGTERM, then SIGKILL
# Unix socket paths are limited to 107 bytes; a deep folder gets one in the temp dir.
_SOCKET_LIMIT = 100
# A process in these states exists (STARTING: within its startsecs); BACKOFF waits to be
# started again, FATAL was given up, EXITED and STOPPED are not running.
UP_STATES = {"RUNNING", "STARTING"}
_ERROR = re.compile(r"error|exception|forbidden|refused|denied|traceback|fatal|killed",
                    re.IGNORECASE)
_SPAWNED = re.compile(r"spawned: '([^']+)' with pid (\d+)")
_EXITED = re.compile(r"exited: (\S+) \((.*)\)")


@dataclass(frozen=True)
class Program:
    """One process of the deployment as supervisord runs it."""

    name: str  # api-server | scheduler | dag-processor | triggerer | edge-worker-<node>
    command: list[str]
    autostart: bool  # the workers are started by `up` once the API answers
    startsecs: int
    startretries: int = START_RETRIES

    @property
    def is_worker(self) -> bool:
        return self.name.startswith("edge-worker-")


def worker_program(node: str) -> str:
    return f"edge-worker-{node}"


def socket_path(home: Path) -> Path:
    path = home / "run" / "supervisor.sock"
    if len(str(path)) <= _SOCKET_LIMIT:
        return path
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"benchledger-supervisor-{digest}.sock"


def write_conf(home: Path, programs: list[Program]) -> Path:
    """supervisord's configuration for the folder (rewritten by every `up`). The processes
    inherit supervisord's environment: the deployment's (cluster.airflow_env)."""
    cfg = configparser.ConfigParser(interpolation=None)
    logs = home / "logs"
    cfg["supervisord"] = {
        "logfile": str(logs / LOG_FILE), "logfile_maxbytes": "10MB", "logfile_backups": "3",
        "pidfile": str(home / "run" / "supervisord.pid"), "childlogdir": str(logs),
        "directory": str(home), "nodaemon": "true", "silent": "true",
        "identifier": f"benchledger-{hashlib.sha256(str(home).encode()).hexdigest()[:12]}",
    }
    cfg["unix_http_server"] = {"file": str(socket_path(home)), "chmod": "0700"}
    cfg["rpcinterface:supervisor"] = {
        "supervisor.rpcinterface_factory": "supervisor.rpcinterface:make_main_rpcinterface"}
    for priority, program in enumerate(programs, start=1):
        cfg[f"program:{program.name}"] = {
            # supervisord splits the command with shlex; the paths are the folder's own
            "command": " ".join(_quote(arg) for arg in program.command),
            "directory": str(home), "priority": str(priority),
            "autostart": str(program.autostart).lower(), "autorestart": "true",
            "startsecs": str(program.startsecs), "startretries": str(program.startretries),
            "stopsignal": "TERM", "stopwaitsecs": str(STOP_WAIT_S),
            # each program is its own process group: stop it and what it started
            "stopasgroup": "true", "killasgroup": "true",
            # supervisord itself runs with it (cluster.py); said again for each program,
            # so a supervisord started by hand from this file makes private files too
            "umask": "077",
            "redirect_stderr": "true", "stdout_logfile": str(log_path(home, program.name)),
            "stdout_logfile_maxbytes": "50MB", "stdout_logfile_backups": "2",
        }
    path = home / CONF_FILE
    with path.open("w") as out:
        cfg.write(out)
    return path


def _quote(arg: str) -> str:
    # supervisord expands %(...)s in commands: a literal % must be doubled
    return shlex.quote(arg).replace("%", "%%")


def log_path(home: Path, name: str) -> Path:
    return home / "logs" / f"{name}.log"


def supervisord_command(home: Path) -> list[str]:
    return [sys.executable, "-m", "supervisor.supervisord", "-c", str(home / CONF_FILE)]


def rpc(home: Path) -> Any:
    """supervisord's XML-RPC interface for the folder (raises OSError when it is down)."""
    transport = SupervisorTransport(None, None, f"unix://{socket_path(home)}")
    return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport).supervisor


def process_infos(home: Path) -> dict[str, dict] | None:
    """{program: supervisord's info (statename, pid, description, ...)}; None when
    supervisord does not answer."""
    try:
        return {info["name"]: info for info in rpc(home).getAllProcessInfo()}
    except (OSError, xmlrpc.client.Fault):
        return None


def start(home: Path, name: str) -> None:
    """Start a program (no error when it runs already); returns once it is RUNNING or
    has been handed to supervisord's backoff (wait=False: a worker that is refused at
    first must not block `up`, which waits for the registrations itself)."""
    try:
        rpc(home).startProcess(name, False)
    except xmlrpc.client.Fault as fault:
        if "ALREADY_STARTED" not in fault.faultString:
            raise


def stop(home: Path, names: list[str]) -> None:
    """Stop programs together (each: SIGTERM to its group, SIGKILL after STOP_WAIT_S)."""
    proxy = rpc(home)
    for name in names:
        try:
            proxy.stopProcess(name, False)
        except xmlrpc.client.Fault as fault:
            if "NOT_RUNNING" not in fault.faultString:
                raise


def shutdown(home: Path) -> None:
    with contextlib.suppress(OSError, xmlrpc.client.Fault):
        rpc(home).shutdown()


def history(home: Path) -> dict[str, dict[str, Any]]:
    """From supervisord's log: how often each program was started, and how its last exit
    went ({name: {"starts": n, "last_exit": "terminated by SIGKILL; not expected"}})."""
    out: dict[str, dict[str, Any]] = {}
    starts: Counter[str] = Counter()
    path = home / "logs" / LOG_FILE
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        if (spawned := _SPAWNED.search(line)):
            starts[spawned.group(1)] += 1
        elif (exited := _EXITED.search(line)):
            out.setdefault(exited.group(1), {})["last_exit"] = exited.group(2)
    for name, n in starts.items():
        out.setdefault(name, {})["starts"] = n
    return out


def last_error_line(path: Path, tail_bytes: int = 65536) -> str | None:
    """The last line of a log that reads like an error (else its last line): what a
    process that is down said last."""
    try:
        with path.open("rb") as log:
            log.seek(0, 2)
            log.seek(max(0, log.tell() - tail_bytes))
            text = log.read().decode(errors="replace")
    except OSError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if _ERROR.search(line):
            return line[:300]
    return lines[-1][:300] if lines else None
