"""Health-wait, describe and stop a model server process (started by launchers).

A server is started in its own session (process group) so that stopping it takes the
whole tree (vLLM forks engine workers) and so that it outlives the task that started it:
launch, measurement and stop are separate Airflow tasks. Stop sends SIGTERM to the group,
then SIGKILL after a grace period.

How each kind of arm's server is started is benchledger.server.launchers' (one launcher
per kind, chosen once from the arm); its names are importable here too. Everything below
goes by the handle a launch returned, the same for every kind.

Readiness waits while the answer means "not yet" (connection refused, 5xx, a timeout) and
fails at once on a definite refusal (401/403, or 404 on every readiness path), naming the
URL, the answer and how long it waited. A health path that answers 404 is followed by
GET /v1/models (servers without /health); which of the two declared the server ready is
returned (Readiness.probe) and recorded per restart. A server with an API key
(arms.api_key_env) gets it on every request benchledger sends; its value is never recorded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import psutil

from benchledger.client.progress import ReadinessReporter
from benchledger.redaction import REDACTED, is_secret_name, redact, redact_command_text

# Starting a server, by kind (re-exported: callers import them here).
from benchledger.server.launchers import (  # noqa: F401
    LOOPBACK,
    NODE_ADDRESS_ENV,
    PORT_TOKEN,
    STARTED,
    ServerHandle,
    command_template,
    free_port,
    instance_argv,
    launch,
    simulator_command_template,
    split_command,
    start_process,
    with_port,
)
from benchledger.server.observe import bounded_get, error_text
from benchledger.server.processes import Leftovers, leftovers_text
from benchledger.sweep.arms import Arm

# Keys whose values differ between two instances of one config and so must not enter the
# effective-config hash (vLLM's /v1/models carries creation times and random permission ids).
VOLATILE_KEYS = {"created", "id_permission", "permission", "root_created"}
# Environment variables that change what a server does; recorded with the command line.
ENV_PREFIXES = ("VLLM_", "SGLANG_", "LLAMA_", "CUDA_", "NCCL_", "HF_", "BENCHLEDGER_SIM_")
# Readiness: one probe's bound, the pause between probes, and the path tried when the
# health path answers 404 (servers without /health, e.g. llama-cpp-python's, serve it).
PROBE_TIMEOUT_S = 5.0
PROBE_INTERVAL_S = 0.2
FALLBACK_READY_PATH = "/v1/models"
# After each window: one probe, this long at most, decides whether the server still lives.
ALIVE_PROBE_TIMEOUT_S = 10.0


class ServerNotReady(RuntimeError):
    """The server did not become healthy (timeout, exit or a definite refusal); the
    message says which, with the URL, the last answer and how long it waited."""


class ApiKeyMissing(ServerNotReady):
    """arms.api_key_env names a variable that is not set (or empty) where the task runs."""


def resolve_api_key(arm: Arm) -> str | None:
    """The arm's API key, read from the environment variable arms.api_key_env names (at
    run time, in the task that needs it: the value never travels in XCom or raw files)."""
    return api_key_from(arm.api_key_env, f"arm {arm.name!r}: arms.api_key_env",
                        "the environment of this task")


def api_key_from(api_key_env: str | None, named_by: str, where: str) -> str | None:
    """The value of the environment variable the user named, `api_key_env` (None: no key);
    ApiKeyMissing, saying who named it and where it was looked for, when it is unset or
    empty. (Not a setting: the variable's name is the user's.)"""
    if not api_key_env:
        return None
    value = os.environ.get(api_key_env)
    if not value:
        state = "is empty" if value == "" else "is not set"
        raise ApiKeyMissing(
            f"{named_by} names the environment variable {api_key_env}, which {state} in "
            f"{where}; set it to the server's API key before the run")
    return value


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def instance_seed(sweep_name: str, arm: str, restart_index: int) -> int:
    """A stable per-instance seed: reruns reproduce, restarts differ like real instances."""
    digest = hashlib.sha256(f"{sweep_name}/{arm}/{restart_index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def process_state(pid: int) -> str:
    """'running', 'exited:<code>' / 'signalled:<sig>' (when we can reap it) or 'gone'."""
    if pid in STARTED:
        code = STARTED[pid].poll()
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
        pass  # not our child (started by another task process): ask the system instead
    return "running" if _live_process(pid) is not None else "gone"


# --- processes recorded by an earlier task (another process, maybe another attempt) --------


def _live_process(pid: int) -> psutil.Process | None:
    """The process `pid` while it runs (not exited, not a zombie awaiting its reaper)."""
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None
    try:
        status = process.status()
    except psutil.NoSuchProcess:
        return None
    except psutil.AccessDenied:
        return process  # it exists; only its state is withheld
    return None if status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) else process


def parent_of(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except psutil.NoSuchProcess:
        return None


def started_as_recorded(pid: int, started_at: str | None) -> bool:
    """Whether `pid` is still the live process a manifest launched: it started within a
    minute after the manifest's `started_at`. Without a start time (or one the system will
    not tell) it is taken on trust while the process runs."""
    try:
        process = _live_process(pid)
        if process is None:
            return False
        if not started_at:
            return True
        started_s = process.create_time()
        recorded_s = datetime.fromisoformat(started_at).timestamp()
    except (psutil.AccessDenied, psutil.NoSuchProcess, ValueError):
        return psutil.pid_exists(pid)
    return recorded_s - 2 <= started_s <= recorded_s + 60


def stop_recorded(pid: int, started_at: str | None, base_url: str | None,
                  log_path: str | None, mark: str | None = None) -> StopOutcome:
    """Stop the server a manifest recorded (an earlier attempt's or an interrupted run's):
    its process group only while `pid` is still that process, never a stranger that
    reused the number; the processes carrying its mark in any case (a daemon it left
    runs on after it). Returns what happened, for the manifest."""
    if not started_as_recorded(pid, started_at):
        nothing = f"nothing to stop: pid {pid} has ended (or now belongs to another process)"
        if not mark:
            return StopOutcome("already_ended", nothing)
        leftovers = Leftovers(pid, mark, leader_ended=True)
        deadline = time.monotonic() + 15.0
        while (live := leftovers.scan(leader_alive=False)) and time.monotonic() < deadline:
            time.sleep(0.1)
        leftovers.kill(live, 15.0)
        strays = leftovers.records()
        return StopOutcome("already_ended", nothing + leftovers_text(strays), tuple(strays))
    handle = ServerHandle(base_url=base_url or "", pid=pid, port=None, command=None,
                          command_template=None, log_path=log_path, mark=mark)
    return stop(handle)


def _url(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + "/" + path.lstrip("/")


@dataclass(frozen=True)
class Probe:
    """One readiness probe: `ready`, `not_yet` (keep waiting) or `refused` (definite)."""

    state: str
    detail: str  # the URL(s) asked and what each answered
    # It ran out of time only because the overall deadline came: says little of the server.
    cut_short: bool = False
    path: str | None = None  # the path that answered 200 (state `ready` only)
    url: str = ""  # the URL asked last, and what it answered (for the progress report)
    answer: str = ""


@dataclass(frozen=True)
class Readiness:
    """How a server became ready: after how long, and which probe said so (the health
    path, or /v1/models for a server without one); the restart manifest records both."""

    waited_s: float
    probe: str


def _ask(url: str, headers: dict[str, str], deadline: float) -> tuple[int | None, str, bool]:
    """GET `url` within the deadline: (status or None, what happened, whether it timed
    out on a bound shorter than PROBE_TIMEOUT_S)."""
    timeout = max(0.05, min(PROBE_TIMEOUT_S, deadline - time.monotonic()))
    try:
        status = bounded_get(url, timeout, headers, max_bytes=65_536).status_code
    except Exception as exc:  # connection refused, timeouts, a broken answer: "not yet"
        cut = isinstance(exc, httpx.TimeoutException) and timeout < PROBE_TIMEOUT_S
        return None, error_text(exc), cut
    return status, f"HTTP {status}", False


def _auth_refused(detail: str, api_key_env: str | None, key_sent: bool, url: str,
                  answer: str) -> Probe:
    if key_sent:
        cause = (f"the server refused authentication with the API key from the environment "
                 f"variable {api_key_env} (arms.api_key_env)")
    else:
        cause = ("the server refused authentication and no API key was sent; set "
                 "arms.api_key_env to the name of the environment variable holding its key")
    return Probe("refused", f"{detail}: {cause}", url=url, answer=answer)


def probe_readiness(base_url: str, health_path: str, deadline: float,
                    api_key: str | None = None, api_key_env: str | None = None) -> Probe:
    """Ask the health path; when it answers 404, ask /v1/models instead (servers without a
    health endpoint). Only an answer on every path settles "refused"."""
    headers = auth_headers(api_key)
    details = []
    # dict.fromkeys: in order, once (a health_path of /v1/models is asked once)
    for path in dict.fromkeys([health_path, FALLBACK_READY_PATH]):
        url = _url(base_url, path)
        status, answer, cut = _ask(url, headers, deadline)
        details.append(f"{url}: {answer}")
        detail = "; ".join(details)
        if status == 200:
            return Probe("ready", detail, path=path, url=url, answer=answer)
        if status in (401, 403):
            return _auth_refused(detail, api_key_env, bool(api_key), url, answer)
        if status != 404:
            return Probe("not_yet", detail, cut, url=url, answer=answer)
    return Probe("refused", f"{detail}: no readiness path answers: neither the health path "
                            f"{health_path} (arms.health_path) nor {FALLBACK_READY_PATH} "
                            "exists on this server; set arms.health_path to its readiness "
                            "endpoint", url=url, answer=answer)


def wait_ready(handle: ServerHandle, health_path: str, timeout_s: float,
               api_key: str | None = None, api_key_env: str | None = None,
               report: ReadinessReporter | None = None) -> Readiness:
    """Probe until ready (returns the seconds waited and the path that answered); raise
    ServerNotReady when the process ends, on a definite refusal (at once) or after
    `timeout_s` (every probe is bounded by what is left of it). `report` is told of every
    probe and of the end (the progress `benchledger run` shows while a server starts)."""
    url = _url(handle.base_url, health_path)
    started = time.monotonic()
    asked = Probe("not_yet", "", url=url, answer="no answer yet")  # the last probe
    try:
        return _wait_ready(handle, health_path, timeout_s, api_key, api_key_env, report,
                           started, asked)
    except ServerNotReady as exc:
        if report is not None:
            last: Probe = getattr(exc, "probe", asked)
            report.ended(False, redact(last.url, api_key), redact(last.answer, api_key),
                         time.monotonic() - started)
        raise


class _NotReady(ServerNotReady):
    """ServerNotReady with the last probe, for the progress report of the wait's end."""

    def __init__(self, message: str, probe: Probe) -> None:
        super().__init__(message)
        self.probe = probe


def _wait_ready(handle: ServerHandle, health_path: str, timeout_s: float,
                api_key: str | None, api_key_env: str | None,
                report: ReadinessReporter | None, started: float, asked: Probe) -> Readiness:
    url = _url(handle.base_url, health_path)
    deadline = started + timeout_s
    last = "no answer yet"
    while True:
        if handle.pid is not None and (state := process_state(handle.pid)) != "running":
            raise _NotReady(
                f"server process {handle.pid} ended before it was healthy ({state}) after "
                f"{time.monotonic() - started:.1f} s (last: {redact(last, api_key)}); "
                f"see {handle.log_path}", asked)
        if time.monotonic() >= deadline:
            break
        probe = probe_readiness(handle.base_url, health_path, deadline, api_key, api_key_env)
        waited_s = time.monotonic() - started
        if probe.state == "ready":
            if report is not None:
                report.ended(True, redact(probe.url, api_key), probe.answer, waited_s)
            return Readiness(waited_s, probe.path or health_path)
        if probe.state == "refused":
            raise _NotReady(
                f"{redact(probe.detail, api_key)} (after {waited_s:.1f} s; "
                f"a definite answer, not waited on for ready_timeout_s = {timeout_s:g} s)",
                probe)
        if not (probe.cut_short and last != "no answer yet"):
            last = probe.detail  # (a probe cut by the deadline would hide a real cause)
            asked = probe
        if report is not None:
            report.probed(redact(asked.url, api_key), redact(asked.answer, api_key), waited_s)
        time.sleep(max(0.0, min(PROBE_INTERVAL_S, deadline - time.monotonic())))
    raise _NotReady(f"{url} not healthy after {timeout_s:g} s "
                    f"(last: {redact(last, api_key)})", asked)


# How long a server that stopped answering is given to be seen ending (server_gone).
EXIT_SETTLE_S = 1.0


def server_gone(handle: ServerHandle, health_path: str, api_key: str | None = None,
                api_key_env: str | None = None,
                timeout_s: float = ALIVE_PROBE_TIMEOUT_S) -> str | None:
    """Whether the server died: None while it lives, else the evidence. A process we
    started that ended is dead; so is any server that no longer answers its readiness path
    (one probe, bounded by `timeout_s`)."""
    if handle.pid is not None and (state := process_state(handle.pid)) != "running":
        return f"server process {handle.pid} ended ({state}); see {handle.log_path}"
    probe = probe_readiness(handle.base_url, health_path, time.monotonic() + timeout_s,
                            api_key, api_key_env)
    if probe.state == "ready":
        return None
    if handle.pid is not None:
        # A process that is exiting closes its sockets before it can be reaped: refused
        # connections can come a moment before its end is known. Wait that moment, so the
        # evidence names the process's end (its exit status) rather than only the silence.
        deadline = time.monotonic() + EXIT_SETTLE_S
        while time.monotonic() < deadline:
            if (state := process_state(handle.pid)) != "running":
                return f"server process {handle.pid} ended ({state}); see {handle.log_path}"
            time.sleep(0.05)
    return f"the server no longer answers its readiness path ({redact(probe.detail, api_key)})"


def _strip_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_volatile(v) for k, v in sorted(value.items()) if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_strip_volatile(v) for v in value]
    return value


def _get_json(url: str, headers: dict[str, str]) -> dict[str, Any] | None:
    try:
        answer = bounded_get(url, PROBE_TIMEOUT_S, headers)
        return answer.json() if answer.status_code == 200 else None
    except Exception:  # not every server has /version; an odd answer is no answer
        return None


def recorded_environment(arm: Arm) -> dict[str, str]:
    """The server-relevant environment (ENV_PREFIXES), secrets redacted: the variable
    arms.api_key_env names and any whose name looks secret (TOKEN, KEY, ...)."""
    env = {}
    for name, value in sorted(os.environ.items()):
        if not name.startswith(ENV_PREFIXES):
            continue
        env[name] = REDACTED if name == arm.api_key_env or is_secret_name(name) else value
    return env


def describe(handle: ServerHandle, arm: Arm, api_key: str | None = None) -> dict[str, Any]:
    """The effective config: what the server says about itself plus how it was started.

    Per-instance values (port, seed, timestamps) are left out, so two restarts of one
    config hash the same and two arms that silently ran one setting are caught (T11).
    Secrets are redacted (recorded_environment; the key itself wherever a server echoes it).
    """
    headers = auth_headers(api_key)
    models = _get_json(_url(handle.base_url, "/v1/models"), headers)
    version = _get_json(_url(handle.base_url, "/version"), headers)
    config = {
        "server": arm.server,
        "model": arm.model,
        "command": handle.command_template,
        "environment": recorded_environment(arm),
        "models": _strip_volatile(models),
        "version": version,
    }
    if arm.spans_nodes:  # what runs beside the head, by rank (not where: see the template)
        config["processes"] = [
            {"rank": rank, "command": redact_command_text(p.command) if p.command else None,
             "low_clock": p.low_clock}
            for rank, p in enumerate(arm.processes, start=1)]
    return redact(config, api_key)


def config_sha256(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def server_version(config: dict[str, Any]) -> str | None:
    version = config.get("version")
    return version.get("version") if isinstance(version, dict) else None


@dataclass(frozen=True)
class StopOutcome:
    """How a stop went: `how` for decisions, `detail` (str()) for people and manifests,
    `strays` for the processes of the server it had to stop on their own (outside its
    process group, or left running: benchledger.server.processes.Leftovers.records)."""

    how: str  # external | already_ended | sigterm | sigkill
    detail: str
    strays: tuple[dict[str, object], ...] = ()

    @property
    def ended_before_stop(self) -> bool:
        """The server was gone before benchledger stopped it: a crash, not a stop."""
        return self.how == "already_ended"

    def __str__(self) -> str:
        return self.detail


def stop(handle: ServerHandle, grace_s: float = 15.0) -> StopOutcome:
    """SIGTERM the whole process group and every process of the server that left it
    (its mark, its descendants: benchledger.server.processes), wait until all have ended,
    SIGKILL whatever still runs after `grace_s`; returns what happened, naming each
    process it had to stop on its own. A server that had ended already may have left
    processes running: they are stopped the same way."""
    if handle.pid is None:
        return StopOutcome("external", "external: not stopped by benchledger")
    pid = handle.pid
    before = process_state(pid)
    ended = before != "running"
    leftovers = Leftovers(pid, handle.mark, leader_ended=ended)
    # Looked for before the group's signal: a child that cleared its environment is
    # known by its parent only while the server lives.
    leftovers.scan(leader_alive=not ended)
    if not ended:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            ended, before = True, "gone"
    deadline = time.monotonic() + grace_s
    while True:
        running = not ended and process_state(pid) == "running"
        live = leftovers.scan(leader_alive=running)
        if (not running and not live) or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if ended:
        how, detail = "already_ended", f"already ended before stop ({before})"
    elif running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        time.sleep(0.2)
        how, detail = "sigkill", f"killed by SIGKILL after {grace_s:g} s ({process_state(pid)})"
    else:
        how, detail = "sigterm", f"stopped by SIGTERM ({process_state(pid)})"
    leftovers.kill(live, grace_s)
    if live:
        time.sleep(0.2)
    strays = leftovers.records()
    return StopOutcome(how, detail + leftovers_text(strays), tuple(strays))
