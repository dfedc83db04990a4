"""Start, health-wait, describe and stop a model server process.

A server is started in its own session (process group) so that stopping it takes the
whole tree (vLLM forks engine workers) and so that it outlives the task that started it:
launch, measurement and stop are separate Airflow tasks. Stop sends SIGTERM to the group,
then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from benchledger.simulator.options import launch_flags
from benchledger.sweep import Arm

# Keys whose values differ between two instances of one config and so must not enter the
# effective-config hash (vLLM's /v1/models carries creation times and random permission ids).
VOLATILE_KEYS = {"created", "id_permission", "permission", "root_created"}
# Environment variables that change what a server does; recorded with the command line.
ENV_PREFIXES = ("VLLM_", "SGLANG_", "LLAMA_", "CUDA_", "NCCL_", "HF_", "BENCHLEDGER_SIM_")


# Servers started by this process. Holding the Popen objects keeps Python from reaping a
# server that died early (Popen.__del__ would, losing its exit status before we look).
_STARTED: dict[int, subprocess.Popen] = {}


class ServerNotReady(RuntimeError):
    """The server did not become healthy (timeout or exit); the message says which."""


@dataclass
class ServerHandle:
    """What later tasks need to reach and stop a launched server (travels as JSON)."""

    base_url: str
    pid: int | None
    port: int | None
    command: list[str] | None
    command_template: list[str] | None
    log_path: str | None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ServerHandle:
        return cls(**data)


def free_port() -> int:
    """A currently free TCP port on loopback (the server binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def simulator_command_template(arm: Arm, restart_index: int = 0) -> list[str]:
    """`benchledger simulator` flags for an arm; {port} and {seed} are per instance. The
    [arms.simulator] values become flags as the simulator's settings declare
    (benchledger.simulator.options.launch_flags)."""
    argv = [sys.executable, "-m", "benchledger.simulator", "--host", "127.0.0.1",
            "--port", "{port}", "--seed", "{seed}", "--model", arm.model]
    if arm.simulator is None:
        return argv
    return argv + launch_flags(arm.simulator.model_dump(), restart_index)


def command_template(arm: Arm, restart_index: int = 0) -> list[str]:
    if arm.server == "simulator":
        return simulator_command_template(arm, restart_index)
    if arm.server == "command":
        return shlex.split(arm.command or "")
    raise ValueError(f"arm {arm.name!r}: server = {arm.server!r} is not started by benchledger")


def instance_seed(sweep_name: str, arm: str, restart_index: int) -> int:
    """A stable per-instance seed: reruns reproduce, restarts differ like real instances."""
    digest = hashlib.sha256(f"{sweep_name}/{arm}/{restart_index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def launch(arm: Arm, log_path: Path, seed: int, restart_index: int = 0) -> ServerHandle:
    """Spawn the arm's server in a new session; returns at once (see wait_ready)."""
    if arm.server == "external":
        return ServerHandle(base_url=arm.base_url or "", pid=None, port=None, command=None,
                            command_template=None, log_path=None)
    port = free_port()
    template = command_template(arm, restart_index)
    argv = [part.format(port=port, seed=seed) for part in template]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    _STARTED[process.pid] = process
    base_url = (arm.base_url or "http://127.0.0.1:{port}").format(port=port)
    return ServerHandle(base_url=base_url, pid=process.pid, port=port, command=argv,
                        command_template=template, log_path=str(log_path))


def process_state(pid: int) -> str:
    """'running', 'exited:<code>' / 'signalled:<sig>' (when we can reap it) or 'gone'."""
    if pid in _STARTED:
        code = _STARTED[pid].poll()
        if code is None:
            return "running"
        return f"signalled:{-code}" if code < 0 else f"exited:{code}"
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            if os.WIFSIGNALED(status):
                return f"signalled:{os.WTERMSIG(status)}"
            return f"exited:{os.waitstatus_to_exitcode(status)}"
        return "running"
    except ChildProcessError:
        pass  # not our child (started by another task process): ask /proc instead
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return "gone" if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X") else "running"


def wait_ready(handle: ServerHandle, health_path: str, timeout_s: float) -> float:
    """Poll the health endpoint until 200; raise ServerNotReady on timeout or exit."""
    url = handle.base_url.rstrip("/") + health_path
    started = time.monotonic()
    last_error = "no answer yet"
    while time.monotonic() - started < timeout_s:
        if handle.pid is not None and (state := process_state(handle.pid)) != "running":
            raise ServerNotReady(f"server process {handle.pid} ended before it was healthy "
                                 f"({state}); see {handle.log_path}")
        try:
            response = httpx.get(url, timeout=2.0)
            if response.status_code == 200:
                return time.monotonic() - started
            last_error = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            last_error = type(exc).__name__
        time.sleep(0.2)
    raise ServerNotReady(f"{url} not healthy after {timeout_s:g} s (last: {last_error})")


def _strip_volatile(value):
    if isinstance(value, dict):
        return {k: _strip_volatile(v) for k, v in sorted(value.items()) if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_strip_volatile(v) for v in value]
    return value


def _get_json(client: httpx.Client, url: str) -> dict | None:
    try:
        response = client.get(url, timeout=5.0)
        return response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def describe(handle: ServerHandle, arm: Arm) -> dict:
    """The effective config: what the server says about itself plus how it was started.

    Per-instance values (port, seed, timestamps) are left out, so two restarts of one
    config hash the same and two arms that silently ran one setting are caught (T11).
    """
    with httpx.Client() as client:
        models = _get_json(client, handle.base_url.rstrip("/") + "/v1/models")
        version = _get_json(client, handle.base_url.rstrip("/") + "/version")
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
    return {
        "server": arm.server,
        "model": arm.model,
        "command": handle.command_template,
        "environment": env,
        "models": _strip_volatile(models),
        "version": version,
    }


def config_sha256(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def server_version(config: dict) -> str | None:
    version = config.get("version")
    return version.get("version") if isinstance(version, dict) else None


@dataclass(frozen=True)
class StopOutcome:
    """How a stop went: `how` for decisions, `detail` (str()) for people and manifests."""

    how: str  # external | already_ended | sigterm | sigkill
    detail: str

    @property
    def ended_before_stop(self) -> bool:
        """The server was gone before benchledger stopped it: a crash, not a stop."""
        return self.how == "already_ended"

    def __str__(self) -> str:
        return self.detail


def stop(handle: ServerHandle, grace_s: float = 15.0) -> StopOutcome:
    """SIGTERM the whole process group, SIGKILL after `grace_s`; returns what happened."""
    if handle.pid is None:
        return StopOutcome("external", "external: not stopped by benchledger")
    before = process_state(handle.pid)
    if before != "running":
        return StopOutcome("already_ended", f"already ended before stop ({before})")
    try:
        os.killpg(handle.pid, signal.SIGTERM)
    except ProcessLookupError:
        return StopOutcome("already_ended", "already ended before stop (gone)")
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if (state := process_state(handle.pid)) != "running":
            return StopOutcome("sigterm", f"stopped by SIGTERM ({state})")
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(handle.pid, signal.SIGKILL)
    time.sleep(0.2)
    return StopOutcome("sigkill", f"killed by SIGKILL after {grace_s:g} s "
                                  f"({process_state(handle.pid)})")
