"""Server lifecycle: the whole process group is stopped; early exits are reported;
readiness waits on "not yet" and fails at once on a definite refusal; commands are split,
never run through a shell; secrets stay out of what is recorded."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from benchledger.server import launchers, lifecycle
from benchledger.sweep.spec import ARM_KINDS, CommandArm, ExternalArm, SimulatorArm


def command_arm(command: str) -> CommandArm:
    return CommandArm(name="x", server="command", command=command, model="m")


def alive(pid: int) -> bool:
    return lifecycle.process_state(pid) == "running"


def test_stop_takes_the_whole_process_group(tmp_path):
    child_file = tmp_path / "child.pid"
    # Written aside then renamed: the redirect creates the file before echo fills it, and a
    # reader that came in between read '' (a CI flake).
    arm = command_arm(
        f"sh -c 'sleep 60 & echo $! > {child_file}.tmp; mv {child_file}.tmp {child_file}; wait'")
    handle = lifecycle.launch(arm, tmp_path / "server.log", seed=1)
    deadline = time.monotonic() + 5
    while not child_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(child_file.read_text())
    assert alive(handle.pid) and alive(child)
    outcome = lifecycle.stop(handle, grace_s=5)
    assert outcome.how == "sigterm" and str(outcome).startswith("stopped by SIGTERM")
    time.sleep(0.2)
    assert not alive(child)  # the server's own child went with it


def test_wait_ready_reports_a_server_that_exits(tmp_path):
    handle = lifecycle.launch(command_arm("sh -c 'echo boom; exit 3'"),
                              tmp_path / "server.log", seed=1)
    with pytest.raises(lifecycle.ServerNotReady, match="exited:3"):
        lifecycle.wait_ready(handle, "/health", timeout_s=10)
    assert "boom" in (tmp_path / "server.log").read_text()
    outcome = lifecycle.stop(handle)
    assert outcome.ended_before_stop and str(outcome).startswith("already ended before stop")


def test_wait_ready_times_out_with_the_url(tmp_path):
    handle = lifecycle.launch(command_arm("sleep 30"), tmp_path / "server.log", seed=1)
    try:
        with pytest.raises(lifecycle.ServerNotReady, match=r"/health not healthy after 0.5 s"):
            lifecycle.wait_ready(handle, "/health", timeout_s=0.5)
    finally:
        lifecycle.stop(handle)


def test_effective_config_hash_ignores_per_instance_values():
    arm = SimulatorArm(name="a", server="simulator", model="sim-model")
    template = lifecycle.command_template(arm)
    assert "{port}" in template and "{seed}" in template
    one = {"command": template, "models": lifecycle._strip_volatile(
        {"data": [{"id": "sim-model", "created": 1}]})}
    two = {"command": template, "models": lifecycle._strip_volatile(
        {"data": [{"id": "sim-model", "created": 2}]})}
    assert lifecycle.config_sha256(one) == lifecycle.config_sha256(two)
    # ... and only those: another model behind the same command is another config
    other = {"command": template, "models": lifecycle._strip_volatile(
        {"data": [{"id": "other-model", "created": 1}]})}
    assert lifecycle.config_sha256(other) != lifecycle.config_sha256(one)


def test_servers_left_by_an_interrupted_run_are_stopped(tmp_path):
    from benchledger.raw.layout import RunLayout, read_json, write_json
    from benchledger.restart.steps import stop_leftover_servers

    layout = RunLayout(tmp_path, "manual__interrupted")
    handle = lifecycle.launch(command_arm("sleep 60"), tmp_path / "server.log", seed=1)
    running = layout.restart_manifest("a", 0)
    write_json(running, {"restart_id": "x/a/r0", "pid": handle.pid, "status": "ok"})
    finished = layout.restart_manifest("a", 1)
    write_json(finished, {"restart_id": "x/a/r1", "pid": 1, "stopped_at": "earlier"})
    assert alive(handle.pid)
    done = stop_leftover_servers(tmp_path)
    assert len(done) == 1 and done[0].startswith("x/a/r0: stopped by SIGTERM")
    assert not alive(handle.pid)
    assert "interrupted run" in read_json(running)["stop_status"]
    assert read_json(finished)["stopped_at"] == "earlier"  # untouched


# --- readiness against real loopback servers ------------------------------------------

class ReadinessHandler(BaseHTTPRequestHandler):
    """Answers each path from server.routes: a list of statuses (the last one repeats),
    or "hang" (headers never come) or "trickle" (a 200 whose body never ends). Every
    request's path and Authorization header are kept in server.seen."""

    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        script = self.server.routes.get(self.path, [404])
        if script == "hang":
            time.sleep(30)
            return
        if script == "trickle":
            self.send_response(200)
            self.end_headers()
            for _ in range(100):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.2)
            return
        status = script.pop(0) if len(script) > 1 else script[0]
        body = self.server.bodies.get(self.path, {"path": self.path})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def readiness_server():
    servers = []

    def start(routes: dict, bodies: dict | None = None):
        server = ThreadingHTTPServer(("127.0.0.1", 0), ReadinessHandler)
        server.daemon_threads = True
        server.routes = {path: (list(s) if isinstance(s, list) else s)
                         for path, s in routes.items()}
        server.bodies = bodies or {}
        server.seen = []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        base = f"http://127.0.0.1:{server.server_address[1]}"
        return server, lifecycle.ServerHandle(base_url=base, pid=None, port=None,
                                              command=None, command_template=None,
                                              log_path=None)

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def timed_wait(handle, timeout_s, **kwargs):
    """wait_ready's outcome (seconds waited or the ServerNotReady) and the wall time."""
    started = time.monotonic()
    try:
        outcome = lifecycle.wait_ready(handle, "/health", timeout_s, **kwargs)
    except lifecycle.ServerNotReady as exc:
        outcome = exc
    return outcome, time.monotonic() - started


def test_not_yet_answers_are_waited_on_until_healthy(readiness_server):
    server, handle = readiness_server({"/health": [503, 500, 502, 200]})
    ready, _ = timed_wait(handle, 30)
    assert isinstance(ready, lifecycle.Readiness) and ready.probe == "/health"
    assert [path for path, _ in server.seen] == ["/health"] * 4


def test_a_server_without_health_is_ready_by_its_model_list(readiness_server):
    server, handle = readiness_server({"/health": [404], "/v1/models": [200]})
    ready, _ = timed_wait(handle, 30)
    assert isinstance(ready, lifecycle.Readiness)  # at once: one probe of each (below)
    assert ready.probe == "/v1/models"  # restart.json's ready_probe: which path said so
    assert [path for path, _ in server.seen] == ["/health", "/v1/models"]


def test_404_on_every_readiness_path_fails_at_once(readiness_server):
    server, handle = readiness_server({"/health": [404], "/v1/models": [404]})
    error, elapsed = timed_wait(handle, 60)
    assert isinstance(error, lifecycle.ServerNotReady)
    # at once: one probe of each path, never asked again (not the 60 s of ready_timeout_s)
    assert [path for path, _ in server.seen] == ["/health", "/v1/models"]
    assert elapsed < 60 / 2
    text = str(error)
    assert f"{handle.base_url}/health: HTTP 404" in text
    assert f"{handle.base_url}/v1/models: HTTP 404" in text
    assert "arms.health_path" in text and "ready_timeout_s = 60 s" in text
    assert "neither the health path /health (arms.health_path) nor /v1/models" in text
    assert re.search(r"after \d+\.\d s", text)


def test_404_then_a_model_list_that_is_not_ready_keeps_waiting(readiness_server):
    _, handle = readiness_server({"/health": [404], "/v1/models": [503]})
    error, elapsed = timed_wait(handle, 1.0)
    # the wait ran to its deadline and stopped there: a probe is cut at the deadline, so
    # never a probe's own bound (PROBE_TIMEOUT_S) later
    assert isinstance(error, lifecycle.ServerNotReady)
    assert 1.0 <= elapsed < 1.0 + lifecycle.PROBE_TIMEOUT_S
    assert "/health not healthy after 1 s" in str(error)
    assert "/v1/models: HTTP 503" in str(error)  # the last cause, shown


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_authentication_fails_at_once_and_names_the_sweep_key(readiness_server,
                                                                        status):
    server, handle = readiness_server({"/health": [status]})
    error, elapsed = timed_wait(handle, 60)
    assert isinstance(error, lifecycle.ServerNotReady)
    assert [path for path, _ in server.seen] == ["/health"] and elapsed < 60 / 2  # at once
    assert f"/health: HTTP {status}" in str(error)
    assert "refused authentication and no API key was sent" in str(error)
    assert "arms.api_key_env" in str(error)


def test_a_refused_key_names_its_variable_never_its_value(readiness_server):
    server, handle = readiness_server({"/health": [200], "/v1/models": [401]})
    server.routes["/health"] = [404]
    error, _ = timed_wait(handle, 60, api_key="s3cret-value", api_key_env="BENCH_KEY")
    assert isinstance(error, lifecycle.ServerNotReady)
    assert "/v1/models: HTTP 401" in str(error)
    assert "API key from the environment variable BENCH_KEY" in str(error)
    assert "s3cret-value" not in str(error)
    assert server.seen == [("/health", "Bearer s3cret-value"),
                           ("/v1/models", "Bearer s3cret-value")]


def test_connection_refused_is_waited_on_and_named():
    handle = lifecycle.ServerHandle(base_url=f"http://127.0.0.1:{lifecycle.free_port()}",
                                    pid=None, port=None, command=None,
                                    command_template=None, log_path=None)
    error, elapsed = timed_wait(handle, 0.6)
    assert isinstance(error, lifecycle.ServerNotReady)
    assert 0.6 <= elapsed < 0.6 + lifecycle.PROBE_TIMEOUT_S  # to its deadline, no further
    assert "not healthy after 0.6 s (last: " in str(error) and "ConnectError" in str(error)


@pytest.mark.parametrize("script", ["hang", "trickle"])
def test_a_server_that_never_finishes_answering_cannot_stretch_the_wait(readiness_server,
                                                                          script):
    _, handle = readiness_server({"/health": script})
    error, elapsed = timed_wait(handle, 1.0)
    assert isinstance(error, lifecycle.ServerNotReady)
    # the probe was cut at the wait's deadline (1 s), before its own bound ran out (5 s,
    # the hang's 30 s and the trickle's 20 s are longer still)
    assert elapsed < lifecycle.PROBE_TIMEOUT_S
    assert "AnswerTooSlow" in str(error) or "Timeout" in str(error)


def test_server_gone_is_one_bounded_probe(readiness_server):
    server, handle = readiness_server({"/health": [200]})
    assert lifecycle.server_gone(handle, "/health") is None
    server.routes["/health"] = "hang"
    started = time.monotonic()
    evidence = lifecycle.server_gone(handle, "/health", timeout_s=0.5)
    assert time.monotonic() - started < 30 / 2  # its 0.5 s bound, not the 30 s hang
    assert evidence.startswith("the server no longer answers its readiness path")
    assert f"{handle.base_url}/health" in evidence


def test_a_server_seen_dying_is_named_by_its_end_not_only_its_silence(tmp_path):
    """ci37: a server that exits mid-stream had closed its sockets (refused) before its
    exit could be reaped, and the crash was reported as silence, without its exit status.
    Here a process closes its listening socket, lives 0.3 s more, and exits 3."""
    import subprocess

    code = ("import socket, sys, time; s = socket.create_server(('127.0.0.1', 0)); "
            "print(s.getsockname()[1], flush=True); sys.stdin.readline(); s.close(); "
            "time.sleep(0.3); sys.exit(3)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    port = int(proc.stdout.readline())
    handle = launchers.ServerHandle(base_url=f"http://127.0.0.1:{port}", pid=proc.pid,
                                    port=port, command=None, command_template=None,
                                    log_path=str(tmp_path / "server.log"))
    proc.stdin.write("close\n")
    proc.stdin.flush()
    time.sleep(0.05)  # its socket is closed; it has not exited
    evidence = lifecycle.server_gone(handle, "/health", timeout_s=0.5)
    assert evidence == (f"server process {proc.pid} ended (exited:3); see "
                        f"{tmp_path / 'server.log'}"), evidence


# --- API keys and what is recorded ------------------------------------------------------

def test_a_missing_or_empty_api_key_variable_fails_naming_the_variable(monkeypatch):
    arm = ExternalArm(name="k", server="external", base_url="http://x", model="m",
              api_key_env="BENCH_TEST_KEY")
    monkeypatch.delenv("BENCH_TEST_KEY", raising=False)
    with pytest.raises(lifecycle.ApiKeyMissing, match="BENCH_TEST_KEY, which is not set"):
        lifecycle.resolve_api_key(arm)
    monkeypatch.setenv("BENCH_TEST_KEY", "")
    with pytest.raises(lifecycle.ApiKeyMissing, match="BENCH_TEST_KEY, which is empty"):
        lifecycle.resolve_api_key(arm)
    monkeypatch.setenv("BENCH_TEST_KEY", "k-123")
    assert lifecycle.resolve_api_key(arm) == "k-123"
    assert lifecycle.resolve_api_key(command_arm("true")) is None  # no key asked for


def test_describe_sends_the_key_and_records_no_secret(readiness_server, monkeypatch):
    secret, token = "sk-describe-0123456789", "hf_abcdefghijklmnop"
    server, handle = readiness_server(
        {"/v1/models": [200], "/version": [200]},
        bodies={"/v1/models": {"data": [{"id": "m", "owned_by": f"key={secret}"}]},
                "/version": {"version": "1.2.3"}})
    monkeypatch.setenv("VLLM_SERVING_PASS", secret)  # named by api_key_env
    monkeypatch.setenv("HF_TOKEN", token)  # a secret by its name
    monkeypatch.setenv("SGLANG_AUTH_HEADER", "x-auth-value")
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")  # not a secret: kept
    arm = ExternalArm(name="k", server="external", base_url=handle.base_url, model="m",
              api_key_env="VLLM_SERVING_PASS")
    config = lifecycle.describe(handle, arm, api_key=secret)
    assert config["environment"]["VLLM_SERVING_PASS"] == "<redacted>"
    assert config["environment"]["HF_TOKEN"] == "<redacted>"
    assert config["environment"]["SGLANG_AUTH_HEADER"] == "<redacted>"
    assert config["environment"]["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert config["models"]["data"][0]["owned_by"] == "key=<redacted>"
    assert config["version"] == {"version": "1.2.3"}
    text = json.dumps(config)
    assert secret not in text and token not in text and "x-auth-value" not in text
    assert sorted(server.seen) == [("/v1/models", f"Bearer {secret}"),
                                   ("/version", f"Bearer {secret}")]


# --- commands: split, never a shell; {port} is the only substitution ---------------------

ARGV_DUMP = "import json, sys; json.dump(sys.argv[2:], open(sys.argv[1], 'w'))"


def launched_argv(tmp_path, command_tail: str) -> tuple[list[str], int]:
    """Launch `python -c ARGV_DUMP <out> <command_tail>`; what the process received, and
    the port it was given."""
    out = tmp_path / "argv.json"
    arm = command_arm(f"{shlex.quote(sys.executable)} -c {shlex.quote(ARGV_DUMP)} "
                      f"{shlex.quote(str(out))} {command_tail}")
    handle = lifecycle.launch(arm, tmp_path / "server.log", seed=1)
    deadline = time.monotonic() + 20
    while lifecycle.process_state(handle.pid) == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lifecycle.process_state(handle.pid) == "exited:0", (
        (tmp_path / "server.log").read_text())
    return json.loads(out.read_text()), handle.port


HOSTILE_COMMANDS = [
    # (the command's tail as written in the sweep, what the process must receive;
    #  P stands for the port)
    ("--port {port}", ["--port", "P"]),
    ("--port={port} --url http://h:{port}/x", ["--port=P", "--url", "http://h:P/x"]),
    ("{port.__class__.__mro__} {port!r} {0} {} {", [
        "{port.__class__.__mro__}", "{port!r}", "{0}", "{}", "{"]),
    ("{{port}} '{\"method\": \"ngram\"}'", ["{P}", '{"method": "ngram"}']),
    ("'$(touch PWNED)' $(touch PWNED) ; touch PWNED && `touch PWNED` | cat",
     ["$(touch PWNED)", "$(touch", "PWNED)", ";", "touch", "PWNED", "&&", "`touch",
      "PWNED`", "|", "cat"]),
    ("\"a b\" 'c d' e\\ f $HOME * ~", ["a b", "c d", "e f", "$HOME", "*", "~"]),
]


@pytest.mark.parametrize(("tail", "expected"), HOSTILE_COMMANDS)
def test_a_command_reaches_the_process_exactly_as_split(tmp_path, monkeypatch, tail,
                                                         expected):
    monkeypatch.chdir(tmp_path)  # where a shell would have created PWNED
    argv, port = launched_argv(tmp_path, tail)
    assert argv == [part.replace("P", str(port)) if "P" in part and "PWNED" not in part
                    else part for part in expected]
    assert not (tmp_path / "PWNED").exists()  # no shell ever ran


def test_base_url_gets_the_port_and_nothing_else(tmp_path):
    arm = CommandArm(name="x", server="command", command="sleep 30", model="m",
              base_url="http://127.0.0.1:{port}/{prefix}/{port.real}")
    handle = lifecycle.launch(arm, tmp_path / "server.log", seed=1)
    try:
        assert handle.base_url == f"http://127.0.0.1:{handle.port}/{{prefix}}/{{port.real}}"
        assert handle.command == ["sleep", "30"]
    finally:
        lifecycle.stop(handle)


def test_a_command_that_cannot_start_says_why(tmp_path):
    with pytest.raises(ValueError, match=r"arm 'x': command .* cannot be split into "
                                         r"arguments: No closing quotation"):
        lifecycle.launch(command_arm("serve --name 'unclosed"), tmp_path / "s.log", seed=1)
    with pytest.raises(OSError, match=r"arm 'x': cannot start 'no-such-server-binary': "
                                      r"No such file or directory"):
        lifecycle.launch(command_arm("no-such-server-binary --port {port}"),
                         tmp_path / "s.log", seed=1)


def test_each_kind_of_arm_is_started_by_its_own_launcher(tmp_path):
    assert sorted(launchers.LAUNCHERS.names()) == sorted(ARM_KINDS)
    for arm in (command_arm("sleep 1"), SimulatorArm(name="s", model="m"),
                ExternalArm(name="e", model="m", base_url="http://127.0.0.1:9")):
        assert launchers.launcher_for(arm).name == arm.server
    external = ExternalArm(name="e", model="m", base_url="http://127.0.0.1:9")
    handle = lifecycle.launch(external, tmp_path / "never.log", seed=1)
    assert (handle.base_url, handle.pid, handle.mark) == ("http://127.0.0.1:9", None, None)
    assert not (tmp_path / "never.log").exists()  # nothing was started
    with pytest.raises(ValueError, match="server = 'external' is not started by benchledger"):
        lifecycle.command_template(external)


def test_the_simulator_gets_port_and_seed_by_position(tmp_path):
    arm = SimulatorArm(name="s", server="simulator", model="{port}-{seed}")
    argv = lifecycle.instance_argv(arm, 0, port=8123, seed=7)
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--seed") + 1] == "7"
    assert argv[argv.index("--model") + 1] == "{port}-{seed}"  # a name, not a template


def test_a_recorded_pid_is_that_process_only_while_its_start_time_matches():
    """An earlier attempt's server is stopped only while its pid is still that server: a
    process started at another time (the number reused) is a stranger."""
    import subprocess
    from datetime import UTC, datetime, timedelta

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        now = datetime.now(UTC)
        assert lifecycle.started_as_recorded(proc.pid, now.isoformat())
        assert lifecycle.started_as_recorded(proc.pid, None)  # no time: taken on trust
        assert not lifecycle.started_as_recorded(proc.pid, (now - timedelta(hours=1)).isoformat())
        assert not lifecycle.started_as_recorded(proc.pid, (now + timedelta(hours=1)).isoformat())
        assert lifecycle.parent_of(proc.pid) == os.getpid()
    finally:
        proc.kill()
    time.sleep(0.2)  # a zombie until reaped: already not the running server
    assert not lifecycle.started_as_recorded(proc.pid, now.isoformat())
    proc.wait()
    assert not lifecycle.started_as_recorded(proc.pid, now.isoformat())
    assert lifecycle.parent_of(proc.pid) is None
