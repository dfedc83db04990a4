"""Arms whose model spans nodes (issue #24): the sweep keys, what each node runs and how its
telemetry is reached; refused combinations name the key and the way out."""

from __future__ import annotations

import shlex
import sys

import pytest

from benchledger.redaction import REDACTED, redact_sweep_text
from benchledger.server import lifecycle
from benchledger.server.launchers import simulator_node_argv
from benchledger.sweep import topology
from benchledger.sweep.spec import SweepError, parse_sweep, server_settings
from tests.sweeps import DELETE, command_arm, external_arm, simulator_arm, sweep, toml, variant

SGLANG_HEAD = ("python -m sglang.launch_server --nnodes {nnodes} --node-rank {rank} "
               "--dist-init-addr {head_address}:5000 --host {address} --port {port}")
SGLANG_WORKER = ("python -m sglang.launch_server --nnodes {nnodes} --node-rank {rank} "
                 "--dist-init-addr {head_address}:5000 --api {head_url} --json '{\"a\": 1}'")


def multi_node(*arms: dict) -> dict:
    return sweep("mn", arms, defaults={"clock_source": "dcgm"})


SIMULATOR = multi_node(simulator_arm(
    "sim", {"num_gpus": 2, "low_clock_gpu": 1}, node="gpu-node-1", address="10.0.0.1",
    processes=[{"node": "gpu-node-2", "address": "10.0.0.2"},
               {"node": "gpu-node-3", "low_clock": True}]))

SGLANG = multi_node(command_arm(
    "sgl", SGLANG_HEAD, node="gpu-node-1", address="10.0.0.1",
    processes=[{"node": "gpu-node-2", "address": "10.0.0.2", "command": SGLANG_WORKER}]))


def parsed(doc: dict, changes: dict | None = None):
    """`doc` with `changes` (tests.sweeps.variant), parsed as a sweep file is."""
    return parse_sweep(toml(variant(doc, changes or {})))


def with_process(doc: dict, arm: str, index: int, **changes) -> dict:
    """`doc` with its arm's processes[index] changed (None takes a key out)."""
    processes = [dict(p) for p in next(a for a in doc["arms"] if a["name"] == arm)["processes"]]
    processes[index] = {k: v for k, v in {**processes[index], **changes}.items()
                        if v is not None}
    return variant(doc, {"arms": {arm: {"processes": processes}}})


def test_the_deployment_lists_every_node_head_first_with_rank_and_address():
    arm = parsed(SIMULATOR).arms[0]
    members = topology.deployment(arm)
    assert [(m.node, m.address, m.role, m.rank) for m in members] == [
        ("gpu-node-1", "10.0.0.1", "head", 0), ("gpu-node-2", "10.0.0.2", "node", 1),
        ("gpu-node-3", "gpu-node-3", "node", 2)]  # no address: reached by its node's name
    assert arm.spans_nodes and arm.head_address == "10.0.0.1"
    local = parsed(multi_node(simulator_arm("one", model="m")))
    assert local.arms[0].head_address == "127.0.0.1" and not local.arms[0].spans_nodes
    assert [m.node for m in topology.deployment(local.arms[0])] == ["local"]


def test_each_nodes_telemetry_url():
    plan = parsed(SIMULATOR).arm("sim")
    urls = [topology.telemetry_url(plan, m, f"http://{m.address}:9") for m in
            topology.deployment(plan.arm)]
    # dcgm without a clock_url: each node's exporter on its own address
    assert urls == ["http://10.0.0.1:9400/metrics", "http://10.0.0.2:9400/metrics",
                    "http://gpu-node-3:9400/metrics"]
    pretend = parsed(SIMULATOR, {"defaults": {"clock_url": "{base_url}/dcgm?n={node}"}}
                     ).arm("sim")
    member = topology.deployment(pretend.arm)[2]
    assert topology.telemetry_url(pretend, member, "http://h:7/") == \
        "http://h:7/dcgm?n=gpu-node-3"
    assert topology.telemetry_url(pretend, member, None) is None  # it serves nothing


def test_a_pretend_node_joins_its_head_and_only_the_stuck_one_is_stuck():
    arm = parsed(SIMULATOR).arms[0]
    _, healthy, stuck = topology.deployment(arm)
    argv = simulator_node_argv(arm, stuck, "http://10.0.0.1:8000", 1, "9001", "7")
    assert argv[:3] == [sys.executable, "-m", "benchledger.simulator"]
    flags = " ".join(argv[3:])
    assert ("--host gpu-node-3 --port 9001 --seed 7 --model sim-model "
            "--join http://10.0.0.1:8000 --node-name gpu-node-3") in flags
    assert "--low-clock " in flags + " " and "--num-gpus 2" in flags
    assert "--low-clock-gpu 1" in flags
    assert "--low-clock " not in " ".join(
        simulator_node_argv(arm, healthy, "http://10.0.0.1:8000", 1, "9002", "7")) + " "
    # as recorded: where it runs and whom it joins left out, so one setting hashes the same
    template = simulator_node_argv(arm, stuck, "http://10.0.0.1:8000", 1, "{port}", "{seed}",
                                   template=True)
    assert "{address}" in template and "{head_url}" in template and "{node}" in template
    # the head waits for both, listening where they reach it
    head = lifecycle.instance_argv(arm, 0, 8000, 7)
    assert " ".join(head[3:]).startswith("--host 10.0.0.1 --port 8000")
    assert head[head.index("--expect-nodes") + 1] == "2"


def test_command_processes_get_their_rank_and_the_heads_address():
    arm = parsed(SGLANG).arms[0]
    head = lifecycle.instance_argv(arm, 0, 8000, 7)
    assert head[head.index("--nnodes") + 1] == "2" and head[head.index("--node-rank") + 1] == "0"
    assert "10.0.0.1:5000" in head and head[head.index("--host") + 1] == "10.0.0.1"
    member = topology.deployment(arm)[1]
    values = topology.process_values(member, 2, arm.head_address, 8000, None)
    argv = [topology.substitute(part, values)
            for part in lifecycle.split_command(arm, member.process.command)]
    assert argv[argv.index("--node-rank") + 1] == "1"
    assert argv[argv.index("--api") + 1] == "http://10.0.0.1:8000"
    assert argv[-1] == '{"a": 1}'  # every other brace as written
    assert not topology.serves_http(arm, member)  # no {port}: nothing to probe


@pytest.mark.parametrize(("change", "message"), [
    ({"node": "gpu-node-1", "address": None}, r"node\(s\) \['gpu-node-1'\] appear twice"),
    ({"port": 5}, r"processes\[0\]\.port: unknown key"),
    ({"node": "gpu node 2"}, r"processes\[0\]\.node"),
    ({"address": "10.0.0.2; rm -rf /"}, r"processes\[0\]\.address"),
])
def test_bad_processes_are_refused_naming_the_key(change, message):
    with pytest.raises(SweepError, match=message):
        parsed(with_process(SGLANG, "sgl", 0, **change))


def test_what_each_server_kind_may_say_of_its_processes():
    with pytest.raises(SweepError, match=r"server = 'command' needs a 'command' for every"):
        parsed(with_process(SGLANG, "sgl", 0, command=None))
    with pytest.raises(SweepError, match=r"'health_path' needs server = 'command' and a "
                                         r"command that serves HTTP on \{port\}"):
        parsed(with_process(SGLANG, "sgl", 0, health_path="/health"))
    served = with_process(SGLANG, "sgl", 0, command=SGLANG_WORKER + " --port {port}",
                          health_path="/health")
    assert parsed(served).arms[0].processes[0].health_path
    with pytest.raises(SweepError, match=r"'command' needs server = 'command'"):
        parsed(with_process(SIMULATOR, "sim", 1, low_clock=None, command="x"))
    with pytest.raises(SweepError, match=r"'low_clock' is a setting of the simulator"):
        parsed(with_process(SGLANG, "sgl", 0, low_clock=True))
    with pytest.raises(SweepError, match=r"low_clock_gpu = 1 names no GPU of num_gpus = 1"):
        parsed(SIMULATOR, {"arms": {"sim": {"simulator": {"num_gpus": DELETE}}}})
    external = parsed(multi_node(external_arm(
        "ext", "http://10.0.0.1:8000", model="m", node="gpu-node-1",
        processes=[{"node": "gpu-node-2"}])))
    assert [m.node for m in topology.deployment(external.arms[0])] == ["gpu-node-1",
                                                                       "gpu-node-2"]


def test_telemetry_that_cannot_read_every_node_is_refused_naming_the_keys():
    with pytest.raises(SweepError) as err:
        parsed(SIMULATOR, {"defaults": {"clock_source": "nvidia-smi"}})
    text = str(err.value)
    assert "clock_source = 'nvidia-smi' reads the GPUs of the measuring node only" in text
    assert "gpu-node-2, gpu-node-3" in text and "require_clock_check = false" in text
    # allowed when the sweep accepts unchecked nodes (labelled so)
    parsed(SIMULATOR, {"defaults": {"clock_source": "nvidia-smi",
                                    "require_clock_check": False}})
    with pytest.raises(SweepError, match=r"uses \{base_url\}, but the process on node\(s\) "
                                         r"\['gpu-node-2'\] serves no URL"):
        parsed(SGLANG, {"defaults": {"clock_url": "{base_url}/m"}})


def test_secrets_in_a_process_command_are_not_recorded():
    keyed = SGLANG_WORKER.replace("--api {head_url}", "--api-key sk-abcdefghijklmnop1234")
    recorded = redact_sweep_text(toml(with_process(SGLANG, "sgl", 0, command=keyed)))
    assert "sk-abcdefghijklmnop1234" not in recorded and REDACTED in recorded
    assert parse_sweep(recorded).arms[0].processes[0].command.count(REDACTED) == 1


def test_two_arms_on_other_nodes_are_one_setting_and_a_stuck_node_is_another():
    sweep = parsed(SIMULATOR)
    moved = parsed(SIMULATOR, {"arms": {"sim": {
        "node": "rack-b-node-1", "address": "10.9.0.1",
        "processes": [{"node": "rack-b-node-2", "address": "10.9.0.2"},
                      {"node": "rack-b-node-3", "low_clock": True}]}}})
    assert server_settings(sweep.arms[0]) == server_settings(moved.arms[0])
    healthy = parsed(with_process(SIMULATOR, "sim", 1, low_clock=None))
    assert server_settings(sweep.arms[0]) != server_settings(healthy.arms[0])
    # the recorded commands leave the nodes out too (the effective config's hash)
    assert lifecycle.command_template(sweep.arms[0]) == \
        lifecycle.command_template(moved.arms[0])
    assert shlex.join(lifecycle.command_template(sweep.arms[0])).count("{node}") == 1
