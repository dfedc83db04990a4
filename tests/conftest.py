"""Shared fixtures: a scripted SSE server for client tests, a real simulator process."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]

# Property-based tests: the same examples on every run (a CI failure reproduces locally),
# no per-example deadline (a busy 2-core CI machine is not a failure).
settings.register_profile("benchledger", derandomize=True, deadline=None, max_examples=150,
                          database=None)
settings.load_profile("benchledger")

# The files that take most of a worker's time, collected before every other file; `make
# test` keeps that order (--no-loadscope-reorder: xdist would otherwise queue files by how
# many tests they hold, and a long file of few tests started last while the other workers
# had nothing left). The long files go first, the many short ones fill in at the end.
# Among them, files that mostly wait (on Airflow's scheduler, a stalled API server, the
# simulator's paced answers: S below) alternate with files that keep a core busy (C): ci62
# recorded /proc/stat every 5 s beside which file each worker ran, and with the three
# waiting files PostgreSQL cluster, scheduler cluster and history started together the
# machine sat 17-39% idle for their first five minutes (191 of 415 idle core-seconds of
# the whole suite). test_history, the most timing-sensitive of them, is not started beside
# a busy file's first minutes. The demo regression test starts the session's demo run
# (bundled_demo) early, so that test_report_browser.py, which reads the same run, later
# finds it done instead of waiting on it. A file not listed keeps its place after them.
SLOWEST_FIRST = (  # seconds of one worker in ci62 (3 workers on 2 cores); S waits, C busy
    "tests/integration/cluster/test_cluster_postgres.py",  # 287 S
    "tests/integration/cluster/test_cluster_scheduler.py",  # 282 S
    "tests/integration/restart/test_multi_node.py",  # 139 C
    "tests/integration/warehouse/test_history.py",  # 345 S
    "tests/integration/local/test_demo_regression.py",  # 123 C
    "tests/integration/cluster/test_cluster.py",  # 159 S
    "tests/integration/warehouse/test_slo_frontier.py",  # 180 S
    "tests/integration/local/test_fault_suite.py",  # 120 C
    "tests/integration/warehouse/test_sequential.py",  # 126 S
    "tests/integration/cluster/test_multi_host.py",  # 143 S
    "tests/integration/local/test_two_sweeps.py",  # 74 C
    "tests/integration/cluster/test_cluster_secrets.py",  # 139 S
    "tests/integration/local/test_interruptions.py",  # 63
    "tests/integration/warehouse/test_drift.py",  # 79
    "tests/unit/test_benchmarks.py",  # 66 C
    "tests/integration/warehouse/test_equivalence_pipeline.py",  # 63 C
    "tests/integration/local/test_pipeline.py",  # 46
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def requirement_missing(why: str) -> None:
    """A test that needs what this machine lacks (root, a package's program): skipped with
    `why` outside CI, failed in CI (CI=true), where `make test` installs what tests need."""
    if "CI" in os.environ:
        pytest.fail(f"CI is set but {why}")
    pytest.skip(f"{why}; with CI set this is a failure")


def _sse(payload) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


def _chunk(text: str, finish: str | None = None) -> dict:
    return {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


class ScriptedHandler(BaseHTTPRequestHandler):
    """An OpenAI-style streaming server whose behaviour is picked by the request's model:

    - "spec": 4 content events carrying 3 + 3 + 3 + 1 tokens, usage says 10
    - "plain": 5 content events of 1 token each, usage says 5
    - "no-usage": like plain but never sends usage
    - "http-500": answers 500 with an error body
    - "stall": sends one event, then stays silent for 30 s
    - "cut": sends one event and closes without [DONE] or finish_reason
    - "echo-auth": answers 401 echoing the request's Authorization header (a careless server)
    - a name registered in server.scripts: a raw, byte-exact answer (see Script)

    Every request's body and headers are kept (server.bodies, server.headers).
    """

    protocol_version = "HTTP/1.0"

    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        self.server.headers.append(dict(self.headers))
        model = body["model"]
        if model in self.server.scripts:
            with self.server.lock:
                n = self.server.served[model] = self.server.served.get(model, -1) + 1
            self._play(self.server.scripts[model](n, body))
            return
        if model == "echo-auth":
            self.send_response(401)
            self.end_headers()
            self.wfile.write(f"bad key: {self.headers.get('Authorization')}".encode())
            return
        if model == "http-500":
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "engine exploded"}}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(_sse({"choices": [{"index": 0, "delta": {"role": "assistant",
                                                                   "content": ""}}]}))
        pieces = {"spec": ["a b c", " d e f", " g h i", " j"]}.get(model, ["a", " b", " c",
                                                                         " d", " e"])
        for i, text in enumerate(pieces):
            self.wfile.write(_sse(_chunk(text, "length" if i == len(pieces) - 1 else None)))
            self.wfile.flush()
            time.sleep(0.01)
            if model == "stall":
                time.sleep(30)
                return
            if model == "cut":
                return
        if model != "no-usage":
            self.wfile.write(_sse({"choices": [], "usage": {
                "prompt_tokens": 7, "completion_tokens": len(" ".join(pieces).split()),
                "total_tokens": 7 + len(" ".join(pieces).split())}}))
        self.wfile.write(_sse("[DONE]"))

    def _play(self, script: Script) -> None:
        self.send_response(script.status)
        self.send_header("Content-Type", script.content_type)
        for name, value in script.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()
        try:
            for step in script.steps:
                if step == RESET:
                    # SO_LINGER 0: close() sends a TCP RST, a connection reset mid-stream
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
                    self.connection.close()
                    return
                if isinstance(step, bytes):
                    self.wfile.write(step)
                    self.wfile.flush()
                else:
                    time.sleep(step)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up on this request (a drain deadline, a timeout)


RESET = "reset"  # a Script step: reset the connection


@dataclasses.dataclass
class Script:
    """A raw answer: the status line's code, then each step in turn (bytes are written and
    flushed as they are, a number is a pause in seconds, RESET resets the connection)."""

    steps: list = dataclasses.field(default_factory=list)
    status: int = 200
    content_type: str = "text/event-stream"
    headers: dict = dataclasses.field(default_factory=dict)  # more of them, e.g. chunked


def sse_event(payload) -> bytes:
    """One SSE event carrying `payload` (JSON-encoded unless it is already str/bytes)."""
    if isinstance(payload, bytes):
        return b"data: " + payload + b"\n\n"
    return _sse(payload)


def chat_chunk(text: str, finish: str | None = None) -> bytes:
    return _sse(_chunk(text, finish))


def usage_event(**usage) -> bytes:
    return _sse({"choices": [], "usage": usage})


def good_stream(tokens: int = 5) -> list:
    """A well-formed answer: `tokens` one-token content events, usage, [DONE]."""
    pieces = [chat_chunk(f" t{i}", "length" if i == tokens - 1 else None)
              for i in range(tokens)]
    return [*pieces, usage_event(prompt_tokens=7, completion_tokens=tokens,
                                 total_tokens=7 + tokens), _sse("[DONE]")]


@pytest.fixture
def scripted_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedHandler)
    server.daemon_threads = True
    server.bodies = []
    server.headers = []
    # model name -> callable(n, body) -> Script, n counting that model's requests from 0
    server.scripts = {}
    server.served = {}
    server.lock = threading.Lock()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def start_simulator(*flags: str, log_path: Path | None = None, ready_path: str = "/health"):
    """Start `python -m benchledger.simulator` on a free loopback port; wait until
    `ready_path` answers 200 (/v1/models for one started with --no-health)."""
    from benchledger.server.lifecycle import free_port

    port = free_port()
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115 (held by the child)
    proc = subprocess.Popen([sys.executable, "-m", "benchledger.simulator", "--host",
                             "127.0.0.1", "--port", str(port), *flags],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + ready_path, timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"simulator exited with {proc.returncode}")
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("simulator did not become healthy")


def pids_tagged(tag: str) -> list[int]:
    """Live (non-zombie) processes with `tag` as one of their arguments: how the tests find
    the servers and daemons they started, whoever their parent is now."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # ended while we looked
        if tag.encode() in argv and state not in ("Z", "X"):
            found.append(int(proc.name))
    return found


def stop_process_group(proc) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


@pytest.fixture
def simulator_factory():
    procs = []

    def factory(*flags: str):
        proc, base = start_simulator(*flags)
        procs.append(proc)
        return base

    yield factory
    for proc in procs:
        stop_process_group(proc)


def run_sweep_text(workdir: Path, text: str | dict):
    """Run a sweep, given as TOML text or as a dict (tests.sweeps), through Airflow into
    workdir/wh.duckdb; returns (run_id, state, read-only connection). The caller closes
    the connection."""
    import duckdb

    from benchledger.local.run import execute_sweep
    from tests.sweeps import toml

    sweep = workdir / "sweep.toml"
    sweep.write_text(text if isinstance(text, str) else toml(text))
    outcome = execute_sweep(sweep, workdir / "wh.duckdb", workdir / "data")
    return (outcome.run_id, outcome.state,
            duckdb.connect(str(workdir / "wh.duckdb"), read_only=True))


@pytest.fixture(scope="session")
def bundled_demo(tmp_path_factory, worker_id):
    """The bundled demo sweep run as `make demo` runs it (`benchledger run`, same seeds),
    once per test session: the demo takes minutes and the modules that read it
    (test_demo_regression, test_report_browser) only read it. Under xdist every worker
    shares one run (pytest-xdist's recipe for a session fixture run once: a folder of the
    session's base temp dir and a lock); the first worker to ask runs it, a second waits.
    Returns returncode, output (its tail), warehouse and data; callers assert the code."""
    import fcntl

    if worker_id == "master":  # no xdist: this session's own folder
        workdir = tmp_path_factory.mktemp("demo")
        return _run_demo(workdir)
    shared = tmp_path_factory.getbasetemp().parent  # one per session, above the workers'
    with open(shared / "demo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        workdir, done = shared / "demo", shared / "demo.json"
        if not done.exists():
            done.write_text(json.dumps(_run_demo(workdir), default=str))
        result = json.loads(done.read_text())
    return {**result, "warehouse": Path(result["warehouse"]), "data": Path(result["data"])}


def _run_demo(workdir: Path) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    warehouse, data = workdir / "warehouse.duckdb", workdir / "data"
    run = subprocess.run(
        [sys.executable, "-m", "benchledger.cli", "run", str(REPO / "dags/sweeps/demo.toml"),
         "--warehouse", str(warehouse), "--data-dir", str(data)],
        cwd=REPO, capture_output=True, text=True, timeout=900)
    return {"returncode": run.returncode, "output": run.stdout[-3000:] + run.stderr[-3000:],
            "warehouse": warehouse, "data": data}
