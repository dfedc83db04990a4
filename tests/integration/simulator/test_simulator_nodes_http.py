"""The simulator as a deployment of pretend nodes: real processes, one per loopback address
(the head on one, each node on its own), checked with raw httpx and hand parsing (no
benchledger.server.dcgm: the simulator shares no code with benchledger's parser)."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
RATIO = 2400 / 494  # sm_clock / low_clock with the defaults
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
# The head paces every step exactly (no per-process spread) and prefills every prompt
# again, so one request costs the same steps on every head.
HEAD_FLAGS = ("--step-ms", "2", "--speed-spread", "0", "--no-prefix-cache")


@dataclass
class Proc:
    proc: subprocess.Popen
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text()


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _processes(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """A starter of simulator processes; every one it started is killed on the way out."""
    started: list[Proc] = []
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def start(host: str, *flags: str, port: int | None = None) -> Proc:
        port = port or _free_port(host)
        log_path = tmp_path / f"sim-{host}-{port}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "benchledger.simulator", "--host", host, "--port",
                 str(port), *flags], stdout=log, stderr=subprocess.STDOUT, env=env,
                cwd=REPO_ROOT)
        started.append(Proc(proc, f"http://{host}:{port}", log_path))
        return started[-1]

    try:
        yield start
    finally:
        for p in started:
            if p.proc.poll() is None:
                p.proc.kill()
        for p in started:
            p.proc.wait(timeout=10)


def _wait(proc: Proc, done: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.proc.poll() is None, f"simulator exited early:\n{proc.log()}"
        with contextlib.suppress(httpx.TransportError):
            if done():
                return
        time.sleep(0.05)
    raise AssertionError(f"{what} not within {timeout}s:\n{proc.log()}")


def _health(proc: Proc) -> int:
    return httpx.get(proc.url + "/health", timeout=2).status_code


def _load(proc: Proc) -> dict:
    return httpx.get(proc.url + "/load", timeout=2).json()


@dataclass
class Deployment:
    head: Proc
    nodes: list[Proc]


def _deploy(tmp_path: Path, hosts: tuple[str, str, str],
            node_flags: tuple[tuple[str, ...], tuple[str, ...]]) -> Iterator[Deployment]:
    with _processes(tmp_path) as start:
        head = start(hosts[0], "--expect-nodes", "2", "--node-name", "head", *HEAD_FLAGS)
        members = [start(host, "--join", head.url, *flags)
                   for host, flags in zip(hosts[1:], node_flags, strict=True)]
        _wait(head, lambda: _health(head) == 200, "the head ready")
        yield Deployment(head, members)


@pytest.fixture(scope="module")
def stuck(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """Node n2's GPU 1 is stuck at the low clock."""
    yield from _deploy(tmp_path_factory.mktemp("stuck"), ("127.0.0.21", "127.0.0.22",
                                                          "127.0.0.23"),
                       (("--node-name", "n1", "--num-gpus", "2"),
                        ("--node-name", "n2", "--num-gpus", "2", "--low-clock",
                         "--low-clock-gpu", "1")))


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _deploy(tmp_path_factory.mktemp("healthy"), ("127.0.0.24", "127.0.0.25",
                                                            "127.0.0.26"),
                       (("--node-name", "h1", "--num-gpus", "2"),
                        ("--node-name", "h2", "--num-gpus", "2")))


_ROW = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _dcgm(proc: Proc) -> dict[int, dict]:
    """GPU index -> its labels and fields, from the node's /dcgm page."""
    answer = httpx.get(proc.url + "/dcgm", timeout=3)
    assert answer.status_code == 200
    gpus: dict[int, dict] = {}
    for line in answer.text.splitlines():
        if match := _ROW.match(line):
            labels = dict(_LABEL.findall(match[2]))
            gpus.setdefault(int(labels["gpu"]), labels)[match[1]] = float(match[3])
    return gpus


def _clocks(gpus: dict[int, dict]) -> list[tuple[float, float]]:
    return [(g["DCGM_FI_DEV_SM_CLOCK"], g["DCGM_FI_DEV_GPU_UTIL"]) for _, g in sorted(gpus.items())]


def _chat(max_tokens: int, prompt: str) -> dict:
    return {"model": "sim-model", "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0}


def test_the_head_is_ready_only_once_all_its_nodes_joined(tmp_path: Path) -> None:
    with _processes(tmp_path) as start:
        head_host = "127.0.0.27"
        head_url = f"http://{head_host}:{(head_port := _free_port(head_host))}"
        # a node that starts before its head keeps trying, and says so once
        alpha = start("127.0.0.28", "--join", head_url, "--node-name", "alpha")
        _wait(alpha, lambda: _health(alpha) == 503, "the early node answering")
        head = start(head_host, "--expect-nodes", "2", *HEAD_FLAGS, port=head_port)
        _wait(head, lambda: len(httpx.get(head.url + "/nodes").json()["nodes"]) == 1,
              "the early node joined")
        assert _health(head) == 503
        for refused in (httpx.get(head.url + "/v1/models"),
                        httpx.post(head.url + "/v1/chat/completions", json=_chat(4, "hi"))):
            assert refused.status_code == 503
            assert "waiting for 1 more pretend node(s) to join (1 of 2 joined)" in \
                   refused.json()["error"]["message"]
        _wait(alpha, lambda: _health(alpha) == 200, "the early node healthy")
        beta = start("127.0.0.29", "--join", head_url, "--node-name", "beta")
        _wait(head, lambda: _health(head) == 200, "the head ready")
        assert httpx.get(head.url + "/nodes").json() == {"expected": 2, "nodes": [
            {"node": "alpha", "url": alpha.url, "load_clock_mhz": 2400, "sm_clock_mhz": 2400,
             "num_gpus": 1},
            {"node": "beta", "url": beta.url, "load_clock_mhz": 2400, "sm_clock_mhz": 2400,
             "num_gpus": 1}]}
        assert httpx.get(head.url + "/v1/models").status_code == 200
        assert httpx.post(head.url + "/nodes", json={"node": "x"}).status_code == 400
        assert f"pretend node alpha joined from {alpha.url}" in head.log()
        assert "(head of 2 pretend nodes as" in head.log()
        assert f"(pretend node of {head_url} as alpha)" in alpha.log()
        assert alpha.log().count("cannot register") == 1, alpha.log()


def test_one_stuck_gpu_slows_the_whole_deployment(healthy: Deployment,
                                                  stuck: Deployment) -> None:
    def decode(head: Proc) -> tuple[float, float]:
        """The head's busy seconds and the wall seconds one 150-token answer takes."""
        busy = _load(head)["busy_s"]
        start = time.perf_counter()
        answer = httpx.post(head.url + "/v1/chat/completions",
                            json=_chat(150, "Tell me the story of the river."), timeout=30)
        wall = time.perf_counter() - start
        assert answer.json()["usage"]["completion_tokens"] == 150
        return _load(head)["busy_s"] - busy, wall

    assert _load(healthy.head)["slowdown"] == 1.0
    assert _load(stuck.head)["slowdown"] == pytest.approx(RATIO)
    fast_busy, fast_wall = decode(healthy.head)
    slow_busy, slow_wall = decode(stuck.head)
    assert fast_busy == pytest.approx(150 * 0.002, rel=0.05)
    assert slow_busy == pytest.approx(fast_busy * RATIO, rel=0.02)  # the modelled pace
    # and in real time: the stuck deployment answers later, and no sooner than half its
    # modelled pace (lower bounds only: a loaded machine adds to a wall, never takes away)
    assert slow_wall > fast_wall and slow_wall >= 0.5 * RATIO * fast_busy


def test_the_stuck_nodes_gpus_follow_the_heads_load(stuck: Deployment) -> None:
    n1, n2 = stuck.nodes
    assert httpx.post(n2.url + "/v1/chat/completions", json=_chat(4, "hi")).status_code == 404

    def energies() -> list[tuple[float, float]]:
        """Every GPU's counter (n1's, then n2's) in joules, each with the test's clock at
        the middle of its node's read: on a loaded machine one read may take tens of ms,
        which one clock for both nodes would charge to the second node's GPUs."""
        out = []
        for node in (n1, n2):
            start = time.monotonic()
            page = _dcgm(node)
            now = (start + time.monotonic()) / 2
            out += [(now, g[ENERGY] / 1000) for g in page.values()]
        return out

    def rates(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[float]:
        assert all(y >= x for (_, x), (_, y) in zip(a, b, strict=True))  # counters only grow
        return [(y - x) / (t1 - t0) for (t0, x), (t1, y) in zip(a, b, strict=True)]

    idle = _dcgm(n2)
    assert _clocks(idle) == [(210.0, 0.0), (210.0, 0.0)]
    assert {g["Hostname"] for g in idle.values()} == {"n2"}
    readings = [energies()]
    time.sleep(1.5)  # idle: long enough that a slow read is a small share
    readings.append(energies())
    body = {**_chat(20000, "Describe the village in the morning."), "stream": True}
    with httpx.stream("POST", stuck.head.url + "/v1/chat/completions", json=body,
                      timeout=10) as response:
        lines = response.iter_lines()
        next(line for line in lines if line.startswith("data: "))  # streaming now
        busy = _dcgm(n2)
        assert _clocks(busy) == [(2400.0, 100.0), (494.0, 100.0)]
        assert _clocks(_dcgm(n1)) == [(2400.0, 100.0), (2400.0, 100.0)]
        readings.append(energies())
        time.sleep(0.6)
        readings.append(energies())
    _wait(stuck.head, lambda: not _load(stuck.head)["under_load"], "the head idle again")
    assert _clocks(_dcgm(n2)) == [(210.0, 0.0), (210.0, 0.0)]
    readings.append(energies())
    for before, after in itertools.pairwise(readings):
        rates(before, after)  # every counter only grew, from each reading to the next
    idle_rates, load_rates = rates(readings[0], readings[1]), rates(readings[2], readings[3])
    # per GPU: idle 60 W; at 2400 MHz 450 W; n2's GPU 1 at 494 MHz 450 * 494 / 2400 W
    assert idle_rates == pytest.approx([60.0] * 4, rel=0.1)
    stuck_gpu = 3
    for gpu, (idle_w, load_w) in enumerate(zip(idle_rates, load_rates, strict=True)):
        assert load_w > (1.2 if gpu == stuck_gpu else 3) * idle_w, (gpu, idle_rates, load_rates)
    assert load_rates[stuck_gpu] < min(load_rates[:stuck_gpu]) / 2  # it draws less
