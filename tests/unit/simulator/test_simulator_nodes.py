"""The simulator as a deployment of pretend nodes (simulator/nodes.py), without processes:
the stuck GPU's index, the head's registry and pace, a pretend node's view of the head's
load. The /dcgm page is read back with a few lines of hand parsing (no benchledger.server.dcgm:
the simulator shares no code with benchledger's parser)."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest
from starlette.testclient import TestClient

from benchledger.simulator import nodes, options
from benchledger.simulator.clocks import clock_summary, gpu_clocks
from benchledger.simulator.dcgm_page import gpu_energy_mj, render_dcgm
from benchledger.simulator.engine import Engine
from benchledger.simulator.nodes import Head, PretendNode, check_node_body, create_node_app
from benchledger.simulator.options import SimConfig, launch_flags
from benchledger.simulator.protocol import ApiError
from benchledger.simulator.server import build_parser, config_from_args, main

RATIO = 2400 / 494

_ROW = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def parse_dcgm(text: str) -> dict[int, dict[str, object]]:
    """GPU index -> its labels and fields (values as floats)."""
    gpus: dict[int, dict[str, object]] = {}
    for line in text.splitlines():
        if match := _ROW.match(line):
            labels = dict(_LABEL.findall(match[2]))
            gpu = gpus.setdefault(int(labels["gpu"]), dict(labels))
            gpu[match[1]] = float(match[3])
    return gpus


# --- options ------------------------------------------------------------------------------


def test_the_stuck_gpu_is_a_setting_checked_against_the_gpu_count() -> None:
    assert SimConfig().low_clock_gpu == 0
    SimConfig(num_gpus=2, low_clock_gpu=1, low_clock=True)
    for bad, field in ((dict(low_clock_gpu=-1), "low_clock_gpu"),
                       (dict(num_gpus=2, low_clock_gpu=2), "low_clock_gpu"),
                       (dict(low_clock_gpu=1), "low_clock_gpu"),  # one GPU: only index 0
                       (dict(num_gpus=0), "num_gpus")):  # blamed alone, not the index too
        with pytest.raises(ValueError, match=rf"invalid simulator config value\(s\): {field}$"):
            SimConfig(**bad)


def test_num_gpus_and_the_stuck_gpu_are_sweep_keys_passed_only_when_changed() -> None:
    by_name = {o.name: o for o in options.SWEEP_OPTIONS}
    for name in ("num_gpus", "low_clock_gpu"):
        assert by_name[name].sweep_key == name and by_name[name].setting.passed == options.CHANGED
    names = [o.name for o in options.OPTIONS]
    assert names.index("low_clock_gpu") == names.index("low_clock_mhz") + 1
    # the defaults launch exactly the command they launched before these keys existed
    defaults = {o.sweep_key: [] if o.per_restart else o.default for o in options.SWEEP_OPTIONS}
    assert launch_flags(defaults) == [
        "--no-speculative", "--num-speculative-tokens", "3", "--step-ms", "4.0",
        "--prefill-tok-s", "20000.0", "--batch-penalty", "0.08", "--speed-spread", "0.03",
        "--acceptance-code", "0.8", "--acceptance-prose", "0.45", "--startup-delay-s", "0.0",
        "--log-interval-s", "1.0"]
    changed = {**defaults, "num_gpus": 4, "low_clock_gpu": 3, "low_clock_restarts": [1]}
    argv = launch_flags(changed, restart_index=1)
    assert argv[argv.index("--num-gpus"):][:2] == ["--num-gpus", "4"]
    assert argv[argv.index("--low-clock"):][:3] == ["--low-clock", "--low-clock-gpu", "3"]
    config = config_from_args(build_parser().parse_args(["--port", "1", *argv]))
    assert (config.num_gpus, config.low_clock, config.low_clock_gpu) == (4, True, 3)
    assert "--low-clock" not in launch_flags(changed, restart_index=0)


def test_a_process_is_either_a_head_or_a_pretend_node() -> None:
    args = build_parser().parse_args(["--port", "1"])
    assert (args.expect_nodes, args.join) == (0, None) and args.node_name
    for argv in (["--port", "1", "--join", "http://127.0.0.21:8000", "--expect-nodes", "2"],
                 ["--port", "1", "--expect-nodes", "-1"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2


# --- the stuck GPU's clocks and page ------------------------------------------------------


def test_the_low_clock_sits_on_the_chosen_gpu() -> None:
    config = SimConfig(num_gpus=3, low_clock=True, low_clock_gpu=2)
    assert [g["sm_clock_mhz"] for g in gpu_clocks(config, True)["gpus"]] == [2400, 2400, 494]
    assert {g["sm_clock_mhz"] for g in gpu_clocks(config, False)["gpus"]} == {210}
    healthy = SimConfig(num_gpus=3, low_clock_gpu=2)  # the index alone sticks nothing
    assert {g["sm_clock_mhz"] for g in gpu_clocks(healthy, True)["gpus"]} == {2400}
    assert "low_clock=on (GPU 2 at 494 MHz under load" in clock_summary(config)

    gpus = parse_dcgm(render_dcgm(config, True, alive_s=100.0, busy_s=40.0, hostname="n9"))
    assert [gpus[i]["DCGM_FI_DEV_SM_CLOCK"] for i in range(3)] == [2400.0, 2400.0, 494.0]
    assert gpus[2]["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(450.0 / RATIO)
    assert gpus[0]["DCGM_FI_DEV_POWER_USAGE"] == 450.0
    assert {g["Hostname"] for g in gpus.values()} == {"n9"}
    energy = [gpus[i]["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] for i in range(3)]
    assert energy == [gpu_energy_mj(config, 2400, 100.0, 40.0)] * 2 + [
        gpu_energy_mj(config, 494, 100.0, 40.0)]
    assert energy[2] < energy[0]  # the down-clocked GPU drew less while stepping


# --- the engine's pace ----------------------------------------------------------------------


def test_the_step_time_follows_the_slowest_of_its_own_clock_and_its_nodes() -> None:
    engine = Engine(SimConfig(speed_spread=0.0))
    base = engine.step_duration(3, 1000)
    assert engine.slowdown == 1.0
    engine.node_slowdown = 3.0
    assert engine.step_duration(3, 1000) == pytest.approx(base * 3.0)
    stuck = Engine(SimConfig(speed_spread=0.0, low_clock=True))
    stuck.node_slowdown = 3.0  # a faster node than its own GPU: its own clock rules
    assert stuck.slowdown == pytest.approx(RATIO)
    assert stuck.step_duration(3, 1000) == pytest.approx(base * RATIO)
    stuck.node_slowdown = 6.0
    assert stuck.step_duration(3, 1000) == pytest.approx(base * 6.0)


# --- the head -----------------------------------------------------------------------------


def _body(name: str, load_clock: float = 2400, **extra: object) -> dict[str, object]:
    return {"node": name, "url": f"http://{name}:1", "load_clock_mhz": load_clock,
            "sm_clock_mhz": 2400, "num_gpus": 2, **extra}


def test_the_head_waits_for_its_nodes_and_paces_itself_by_the_slowest() -> None:
    logged: list[str] = []
    engine = Engine(SimConfig())
    head = Head(engine, 2, log=lambda _source, message: logged.append(message))
    assert head.missing == 2 and "waiting for 2 more pretend node(s)" in head.waiting_message()
    assert head.register(_body("a")) == {"joined": 1, "expected": 2}
    assert engine.node_slowdown == 1.0 and "1 more" in head.waiting_message()
    assert head.register(_body("b", 494)) == {"joined": 2, "expected": 2}
    assert head.waiting_message() is None
    assert engine.node_slowdown == pytest.approx(RATIO)
    assert head.register(_body("a", extra="ignored")) == {"joined": 2, "expected": 2}
    assert [n["node"] for n in head.nodes.values()] == ["a", "b"]  # join order
    assert head.nodes["a"] == _body("a")
    assert len(logged) == 2 and "pretend node b joined from http://b:1" in logged[1]
    assert "load clock 494 MHz" in logged[1]


def test_a_bad_registration_is_a_400_naming_what_is_wrong() -> None:
    for body, named in (([], "JSON object"), ({"node": "a"}, "url, load_clock_mhz"),
                        (_body("a", num_gpus=True), "num_gpus"),
                        (_body("a", num_gpus=1.5), "num_gpus"),
                        (_body("a", "fast"), "load_clock_mhz"),
                        (_body("a", 0), "load_clock_mhz"), (_body(""), "node")):
        with pytest.raises(ApiError) as err:
            check_node_body(body)
        assert err.value.status == 400 and named in err.value.message, body


# --- a pretend node -----------------------------------------------------------------------


class FakeHead:
    """The head's /load and /nodes as a MockTransport; `up` False refuses connections."""

    def __init__(self) -> None:
        self.up = True
        self.under_load = False
        self.busy_s = 0.0
        self.posted: list[dict] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not self.up:
            raise httpx.ConnectError("refused", request=request)
        if request.url.path == "/nodes":
            self.posted.append(json.loads(request.content))
            return httpx.Response(200, json={"joined": 1, "expected": 1})
        return httpx.Response(200, json={"under_load": self.under_load,
                                         "busy_s": self.busy_s, "slowdown": 1.0})


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_node_counts_the_heads_busy_seconds_from_its_zero_point_and_never_back() -> None:
    async def go() -> None:
        fake, clock = FakeHead(), FakeClock()
        config = SimConfig(num_gpus=2, low_clock=True, low_clock_gpu=1)
        node = PretendNode(config, "n2", "http://head:1/", "http://n2:2", clock=clock)
        async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handle)) as client:
            fake.busy_s = 7.0  # the head's work before the node joined is not the node's
            await node.read_load(client)
            fake.busy_s, fake.under_load = 10.0, True
            await node.read_load(client)
            assert (node.busy_s, node.under_load) == (3.0, True)
            fake.up = False  # the head is gone: idle GPUs, the busy seconds it knew
            await node.read_load(client)
            assert (node.busy_s, node.under_load) == (3.0, False)
            fake.up, fake.busy_s = True, 1.5  # it restarted: counts from 0 again
            await node.read_load(client)
            assert node.busy_s == 4.5
            fake.under_load = False
            await node.read_load(client)
            clock.now += 100.0
            gpus = parse_dcgm(node.dcgm_page())
        assert {g["Hostname"] for g in gpus.values()} == {"n2"}
        assert [gpus[i]["DCGM_FI_DEV_SM_CLOCK"] for i in (0, 1)] == [210.0, 210.0]
        assert [gpus[i]["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] for i in (0, 1)] == [
            gpu_energy_mj(config, 2400, 100.0, 4.5), gpu_energy_mj(config, 494, 100.0, 4.5)]

    asyncio.run(go())


def test_a_node_retries_until_the_head_answers_and_logs_once_per_outage(monkeypatch) -> None:
    monkeypatch.setattr(nodes, "REGISTER_RETRY_S", 0.001)
    monkeypatch.setattr(nodes, "HEARTBEAT_S", 0.001)

    async def go() -> tuple[list[str], FakeHead, PretendNode]:
        fake, logged = FakeHead(), []
        fake.up = False
        node = PretendNode(SimConfig(low_clock=True), "n1", "http://head:1", "http://n1:2",
                           log=lambda _source, message: logged.append(message))
        async with httpx.AsyncClient(transport=httpx.MockTransport(fake.handle)) as client:
            task = asyncio.create_task(node.join_loop(client))

            async def until(done) -> None:
                for _ in range(2000):
                    if done():
                        return
                    await asyncio.sleep(0.001)
                raise AssertionError(logged)

            await asyncio.sleep(0.05)  # many retries against a head that is not there
            assert not node.registered and not fake.posted
            fake.up = True
            await until(lambda: node.registered)
            fake.up = False
            await asyncio.sleep(0.05)
            fake.up = True
            await until(lambda: len(logged) == 4)
            await asyncio.sleep(0.02)
            task.cancel()
        return logged, fake, node

    logged, fake, node = asyncio.run(go())
    assert node.registered and len(fake.posted) >= 2  # heartbeats repeat the registration
    assert fake.posted[0] == {"node": "n1", "url": "http://n1:2", "load_clock_mhz": 494,
                              "sm_clock_mhz": 2400, "num_gpus": 1}
    assert len(logged) == 4, logged
    assert "cannot register" in logged[0] and "joined the head at http://head:1" in logged[1]
    assert "cannot register" in logged[2] and "again" in logged[3]


def test_a_node_serves_telemetry_only() -> None:
    # Port 9 on loopback: nothing listens, so the node never registers.
    node = PretendNode(SimConfig(num_gpus=2), "lonely", "http://127.0.0.1:9", "http://x:1")
    with TestClient(create_node_app(node)) as client:
        assert client.get("/health").status_code == 503
        assert client.post("/v1/chat/completions", json={}).status_code == 404
        assert client.get("/v1/models").status_code == 404
        assert client.get("/version").json()["version"].startswith("benchledger-sim")
        assert [g["sm_clock_mhz"] for g in client.get("/clocks").json()["gpus"]] == [210, 210]
        assert client.get("/load").json() == {"under_load": False, "busy_s": 0.0,
                                              "slowdown": 1.0}
        assert set(parse_dcgm(client.get("/dcgm").text)) == {0, 1}
