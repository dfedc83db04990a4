"""DagBag import and policy: one DAG per sweep file, wiring only, every restart torn down."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from benchledger.sweep.order import restart_slots
from benchledger.sweep.spec import load_sweep
from tests.sweeps import read_doc, simulator_arm, sweep, variant, write_sweep

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
WAREHOUSE_TASKS = {"load", "validate", "derive"}
DEMO = read_doc(DAGS / "sweeps" / "demo.toml")  # variants of it are written by tomli_w


def sweep_files() -> list[Path]:
    """The shipped sweep files; never none, so a loop over them always checks something."""
    files = sorted((DAGS / "sweeps").glob("*.toml"))
    assert files, f"no sweep files in {DAGS / 'sweeps'}"
    return files


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_dags_import_without_errors(dagbag):
    assert dagbag.import_errors == {}


def test_one_dag_per_sweep_file_and_its_publish_dag(dagbag):
    sweeps = [load_sweep(p) for p in sweep_files()]
    expected = {s.dag_id for s in sweeps} | {s.publish_dag_id for s in sweeps}
    assert len(expected) == 2 * len(sweeps) and set(dagbag.dag_ids) == expected


def test_publish_dag_runs_on_the_asset_that_derive_updates(dagbag):
    for sweep_file in sweep_files():
        sweep = load_sweep(sweep_file)
        derive = dagbag.dags[sweep.dag_id].get_task("derive")
        publish = dagbag.dags[sweep.publish_dag_id]
        (asset,) = derive.outlets
        assert asset.name == f"benchledger_entries_{sweep.sweep.name}"
        assert list(publish.timetable.asset_condition.objects) == [asset]
        assert [t.task_id for t in publish.tasks] == ["publish"]


def test_every_restart_is_set_up_and_torn_down(dagbag):
    for sweep_file in sweep_files():
        sweep = load_sweep(sweep_file)
        dag = dagbag.dags[sweep.dag_id]
        for arm in sweep.arms:
            for k in range(sweep.plan(arm).restarts):
                group = f"{arm.name}__r{k}"
                launch = dag.get_task(f"{group}.launch_server")
                stop = dag.get_task(f"{group}.stop_server")
                assert launch.is_setup and stop.is_teardown
                assert launch.task_id in stop.upstream_task_ids
                for workload in sweep.workloads:
                    assert f"{group}.measure_{workload.name}" in dag.task_dict


def test_every_node_of_a_deployment_is_started_and_stopped_on_its_own_queue(dagbag):
    """A multi-node arm (the bundled four_nodes sweep): one launch and one stop per further
    node, on that node's queue; the launch after the head's and before the wait for its
    readiness, the stop (the teardown of its launch) after the head's, then the restart's
    settle_restart, whatever happened before it."""
    sweep = load_sweep(DAGS / "sweeps" / "four_nodes.toml")
    dag = dagbag.dags[sweep.dag_id]
    spanning = [arm for arm in sweep.arms if arm.processes]
    assert spanning
    for arm in spanning:
        for k in range(sweep.plan(arm).restarts):
            group = f"{arm.name}__r{k}"
            head_launch = dag.get_task(f"{group}.launch_server")
            head_stop = dag.get_task(f"{group}.stop_server")
            settle = dag.get_task(f"{group}.settle_restart")
            assert head_launch.queue == arm.node
            assert settle.trigger_rule == "all_done"
            for process in arm.processes:
                launch = dag.get_task(f"{group}.launch_node_{process.node}")
                stop = dag.get_task(f"{group}.stop_node_{process.node}")
                assert (launch.queue, stop.queue) == (process.node, process.node)
                assert launch.is_setup and stop.is_teardown
                assert launch.task_id in stop.upstream_task_ids
                assert head_launch.task_id in launch.upstream_task_ids
                assert f"{group}.wait_ready" in launch.downstream_task_ids
                assert head_stop.task_id in stop.upstream_task_ids
                assert stop.task_id in settle.upstream_task_ids
    # the next restart (in the sweep's blocked order) starts once the one before it on
    # these nodes is settled
    slots = restart_slots(sweep)
    for before, after in itertools.pairwise(slots):
        ending = "settle_restart" if any(a.processes for a in sweep.arms
                                         if a.name == before.arm) else "stop_server"
        assert f"{before.arm}__r{before.k}.{ending}" in dag.get_task(
            f"{after.arm}__r{after.k}.launch_server").upstream_task_ids


def test_an_external_deployment_across_nodes_gets_no_tasks_on_its_other_nodes(tmp_path):
    from benchledger.operators.dag_factory import build_sweep_dag
    from tests.unit.restart.test_deployment_steps import EXTERNAL

    sweep_file = write_sweep(tmp_path / "ext.toml", EXTERNAL)
    tasks = {t.task_id for t in build_sweep_dag(sweep_file).tasks}
    assert {"big__r0.launch_server", "big__r0.wait_ready", "big__r0.stop_server"} <= tasks
    assert not [t for t in tasks if "node_" in t or "settle" in t]


def test_warehouse_writers_share_the_one_slot_pool(dagbag):
    sweep_dags = [d for d in dagbag.dags.values() if not d.dag_id.endswith("_publish")]
    assert {d.dag_id for d in sweep_dags} == {load_sweep(p).dag_id for p in sweep_files()}
    for dag in sweep_dags:
        writers = {t.task_id for t in dag.tasks if t.pool == "benchledger_warehouse"}
        assert writers == WAREHOUSE_TASKS
        assert dag.get_task("load").trigger_rule == "all_done"  # failed restarts still load
        assert dag.catchup is False and dag.max_active_runs == 1
        assert "benchledger" in dag.tags


def test_parsing_does_no_heavy_work():
    """No DuckDB, GX, pandas, numpy, scipy or Arrow at parse time: those belong in task
    bodies (the rule catalogue the sweep model reads declares its checks without them).
    The sweep model reads the simulator's option declarations (benchledger.simulator.options,
    plain standard library), never the server itself."""
    code = ("import sys, dags.benchledger_sweeps; "
            "print(','.join(m for m in ('duckdb', 'great_expectations', 'scipy', 'pyarrow', "
            "'pandas', 'numpy', "
            "'uvicorn', 'starlette', 'benchledger.client', 'benchledger.simulator.engine', "
            "'benchledger.simulator.app', 'benchledger.simulator.server') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == ""


def test_bad_sweep_file_is_an_import_error_naming_file_and_key(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    folder = tmp_path / "dags"
    shutil.copytree(DAGS, folder)
    bad = folder / "sweeps" / "broken.toml"
    write_sweep(bad, variant(DEMO, {"defaults": {"restrats": 3}}))
    bag = DagBag(dag_folder=str(folder))
    message = "\n".join(bag.import_errors.values())
    assert str(bad) in message and "defaults.restrats: unknown key" in message


def test_an_arms_node_is_the_queue_of_its_restart_tasks(tmp_path):
    from benchledger.operators.dag_factory import build_sweep_dag

    sweep = tmp_path / "noded.toml"
    write_sweep(sweep, variant(DEMO, {"arms": {"spec-on": {"node": "gpu-node-1"}}}))
    dag = build_sweep_dag(sweep)
    queues = {t.task_id.split(".")[0]: t.queue for t in dag.tasks if "__r" in t.task_id}
    assert queues["spec-on__r0"] == queues["spec-on__r1"] == "gpu-node-1"
    assert queues["spec-off__r0"] != "gpu-node-1"
    assert dag.get_task("load").queue != "gpu-node-1"


RESTART_TASKS = ("launch_server", "wait_ready", "stop_server")


def test_errors_are_retried_per_the_sweep_and_results_never(tmp_path):
    """Restart tasks and load are retried as [sweep] says (a lost connection, a killed
    worker, a locked warehouse); validate, derive, finalize and publish never are, even
    where the deployment's default_task_retries says otherwise (a failed rule is a result)."""
    from benchledger.operators.dag_factory import build_publish_dag, build_sweep_dag

    sweep_file = tmp_path / "retried.toml"
    write_sweep(sweep_file, variant(DEMO, {"sweep": {"retries": 3, "retry_delay_s": 42.5}}))
    sweep = load_sweep(sweep_file)
    dag = build_sweep_dag(sweep_file)
    retried = [f"{arm.name}__r{k}.{name}" for arm in sweep.arms
               for k in range(sweep.plan(arm).restarts)
               for name in (*RESTART_TASKS, *(f"measure_{w.name}" for w in sweep.workloads))]
    assert len(retried) == 45  # 3 arms x 3 restarts x (3 + 2 workloads)
    for task_id in [*retried, "load", "plan"]:
        task = dag.get_task(task_id)
        assert (task.retries, task.retry_delay) == (3, timedelta(seconds=42.5)), task_id
    never = {t.task_id: t.retries for t in dag.tasks if t.task_id not in {*retried, "load",
                                                                           "plan"}}
    assert never == {"validate": 0, "derive": 0, "finalize": 0}
    assert [(t.task_id, t.retries) for t in build_publish_dag(sweep_file).tasks] == [
        ("publish", 0)]


def test_the_default_is_one_retry_after_ten_seconds(dagbag):
    dag = dagbag.dags[load_sweep(DAGS / "sweeps" / "demo.toml").dag_id]
    measure = dag.get_task("spec-on__r0.measure_code")
    assert (measure.retries, measure.retry_delay) == (1, timedelta(seconds=10))
    assert dag.get_task("validate").retries == 0


PARALLEL_NODES = sweep(
    "par", [*(simulator_arm(name, model="m", node=node)
              for name, node in (("a1", "node-a"), ("b1", "node-b"), ("a2", "node-a"))),
            simulator_arm("ab", model="m", node="node-a", processes=[{"node": "node-b"}])],
    defaults={"restarts": 2, "clock_source": "dcgm"})


def _after(dag, group: str) -> set[str]:
    """The restart groups whose end the restart's launch waits for (or {'plan'})."""
    upstream = dag.get_task(f"{group}.launch_server").upstream_task_ids
    return {task.split(".")[0] for task in upstream}


@pytest.mark.parametrize("extra, one_host, serial", [
    ({}, False, False), ({"nodes_in_parallel": False}, False, True), ({}, True, True)])
def test_restarts_on_other_nodes_run_at_once_and_on_one_node_in_turn(tmp_path, extra,
                                                                    one_host, serial):
    from benchledger.operators.dag_factory import build_sweep_dag

    sweep_file = write_sweep(tmp_path / "par.toml", variant(PARALLEL_NODES, {"sweep": extra}))
    dag = build_sweep_dag(sweep_file, one_host=one_host)
    # the sweep's order: restart 0 of every arm (block 0), then restart 1 of every arm
    order = [f"{s.arm}__r{s.k}" for s in restart_slots(load_sweep(sweep_file))]
    assert sorted(order[:4]) == ["a1__r0", "a2__r0", "ab__r0", "b1__r0"]
    if serial:  # every restart after the one before, in the sweep's order
        assert _after(dag, order[0]) == {"plan"}
        for before, after in zip(order, order[1:], strict=False):
            assert _after(dag, after) == {before}, after
        return
    # each restart waits for the one before it on each node it uses: nodes apart at once,
    # one node in turn, an arm that spans both for both
    uses = {"a1": ["node-a"], "b1": ["node-b"], "a2": ["node-a"], "ab": ["node-a", "node-b"]}
    last: dict[str, str] = {}
    for group in order:
        nodes = uses[group.split("__")[0]]
        assert _after(dag, group) == ({last[n] for n in nodes if n in last} or {"plan"}), group
        last.update(dict.fromkeys(nodes, group))
    assert dag.get_task("load").upstream_task_ids >= {
        f"{arm}__r1.{'settle_restart' if arm == 'ab' else 'stop_server'}"
        for arm in ("a1", "b1", "a2", "ab")}


def test_pinned_restarts_put_every_task_after_the_launch_on_the_restarts_own_queue(tmp_path):
    from benchledger.operators.dag_factory import build_sweep_dag

    sweep_file = write_sweep(tmp_path / "par.toml", PARALLEL_NODES)
    plain = build_sweep_dag(sweep_file)
    assert {t.queue for t in plain.tasks if t.task_id.startswith("a1__r0.")} == {"node-a"}
    dag = build_sweep_dag(sweep_file, pin_restarts=True)
    own = "node-a@benchledger_par.a1__r0"
    queues = {t.task_id: t.queue for t in dag.tasks if t.task_id.startswith("a1__r0.")}
    assert queues == {"a1__r0.launch_server": "node-a", "a1__r0.wait_ready": own,
                      "a1__r0.measure_code": own, "a1__r0.stop_server": own}
    # the launch pins the restart's queue to its worker, the restart's last task unpins it
    assert dag.get_task("a1__r0.launch_server").op_args[-1] == own
    assert dag.get_task("a1__r0.stop_server").op_args[-1] == own
    # an arm across nodes: each node's stop on that node's own queue, settle on the head's
    b_own, a_own = "node-b@benchledger_par.ab__r1", "node-a@benchledger_par.ab__r1"
    assert dag.get_task("ab__r1.launch_node_node-b").queue == "node-b"
    assert dag.get_task("ab__r1.launch_node_node-b").op_args[-1] == b_own
    assert dag.get_task("ab__r1.stop_node_node-b").queue == b_own
    assert dag.get_task("ab__r1.stop_node_node-b").op_args[-1] == b_own
    assert dag.get_task("ab__r1.stop_server").op_args[-1] is None  # settle unpins the head
    assert dag.get_task("ab__r1.settle_restart").queue == a_own
    assert dag.get_task("ab__r1.settle_restart").op_args[-1] == a_own
    # plan, load and the rest stay on the default queue
    assert dag.get_task("load").queue == plain.get_task("load").queue


def test_the_regression_gate_runs_after_derive_beside_finalize_in_the_warehouse_pool():
    """docs/examples/nightly.toml names the gate's metrics: its DAG gets the task, after
    derive, never retried (a regression is a result), in the one-writer pool; a sweep
    without the key gets none."""
    from benchledger.operators.dag_factory import build_sweep_dag

    example = REPO / "docs" / "examples" / "nightly.toml"
    assert load_sweep(example).sweep.gated_metrics == ["decode_rate", "throughput"]
    dag = build_sweep_dag(example)
    gate = dag.get_task("regression_gate")
    assert gate.upstream_task_ids == {"derive"} and gate.downstream_task_ids == set()
    assert "finalize" in dag.get_task("derive").downstream_task_ids
    assert gate.retries == 0 and gate.pool == "benchledger_warehouse"
    # its metrics and its smallest change of interest
    assert list(gate.op_args[1:]) == [["decode_rate", "throughput"], 0.03]
    assert "regression_gate" not in build_sweep_dag(DAGS / "sweeps" / "demo.toml").task_dict


@pytest.mark.parametrize(("key", "value", "message"), [
    ("regression_gate", ["tpot"], "regression_gate"), ("regression_gate", [], "regression_gate"),
    ("regression_gate", "maybe", "regression_gate"),
    ("regression_min_change", 3, "regression_min_change"),
    ("regression_min_change", -0.1, "regression_min_change")])
def test_a_regression_gate_naming_no_headline_metric_is_refused(tmp_path, key, value, message):
    from benchledger.sweep.spec import SweepError

    sweep = tmp_path / "gated.toml"
    write_sweep(sweep, variant(DEMO, {"sweep": {key: value}}))
    with pytest.raises(SweepError, match=message):
        load_sweep(sweep)


def test_a_sequential_sweep_looks_after_each_block_past_its_minimum(tmp_path):
    """The look after block k waits for every restart of block k; every later launch and
    every later look is right after it (a short-circuit skips only its direct downstream,
    and a teardown does not pass a skip on); load runs whatever the looks skipped."""
    from benchledger.operators.dag_factory import build_sweep_dag

    doc = sweep("seq", [simulator_arm("a", {"step_ms": 1}), simulator_arm("b", {"step_ms": 2})],
                sweep={"retries": 0, "max_restarts": 4},
                comparisons=[{"a": "a", "b": "b", "metric": "decode_rate"}])
    sweep_file = write_sweep(tmp_path / "seq.toml", doc)
    dag = build_sweep_dag(sweep_file)
    looks = sorted(t for t in dag.task_ids if t.startswith("interim_look"))
    assert looks == ["interim_look_after_2", "interim_look_after_3"]
    slots = restart_slots(load_sweep(sweep_file))
    for blocks in (2, 3):
        look = dag.get_task(f"interim_look_after_{blocks}")
        ends = {f"{s.arm}__r{s.k}.stop_server" for s in slots if s.block == blocks - 1}
        assert look.upstream_task_ids - {"interim_look_after_2"} == ends
        assert look.trigger_rule == "all_done"
        later = {f"{s.arm}__r{s.k}.launch_server" for s in slots if s.block >= blocks}
        assert later <= look.downstream_task_ids
    assert "interim_look_after_3" in dag.get_task("interim_look_after_2").downstream_task_ids
    assert _after(dag, f"{slots[0].arm}__r{slots[0].k}") == {"plan"}
    assert dag.get_task("load").trigger_rule == "all_done"
